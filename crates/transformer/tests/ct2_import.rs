//! `import ct2` on CTranslate2 directories edited to hold what this engine does not run: each is
//! refused by name, before anything is written; int8 weights read back within half a step of
//! the float32 ones CTranslate2's converter quantized; hostile files are errors.

mod common;

use common::TestDir;
use std::path::{Path, PathBuf};
use transformer::import::ct2::{self, DType, ModelBin, Variable};

fn fixtures() -> PathBuf {
    transformer::test_support::repo("crates/transformer/tests/fixtures")
}

fn spm() -> Vec<PathBuf> {
    vec![fixtures().join("marian-real/tied_all_relu/vocab.spm")]
}

/// A copy of the float32 fixture directory in `t` with `model.bin` edited by `edit`.
fn edited(t: &TestDir, name: &str, edit: impl Fn(&mut ModelBin)) -> PathBuf {
    let src = fixtures().join("ct2/tied_all_relu-float32");
    let dir = t.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
    }
    let mut bin = ModelBin::read(&dir.join("model.bin")).unwrap();
    edit(&mut bin);
    std::fs::write(dir.join("model.bin"), bin.to_bytes()).unwrap();
    dir
}

/// An edit of a model.bin.
type Edit = Box<dyn Fn(&mut ModelBin)>;

fn refused(dir: &Path) -> String {
    match ct2::import(dir, &spm()) {
        Ok(_) => panic!("{} was imported", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn what_this_engine_does_not_run_is_refused_by_name() {
    let t = TestDir::new("ct2-refusals");
    let one = |name: &str, dtype: DType, v: i64| {
        let name = name.to_string();
        move |b: &mut ModelBin| {
            b.variables.insert(name.clone(), Variable::scalar(dtype, v));
        }
    };
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("pre-norm", Box::new(one("encoder/pre_norm", DType::I8, 1)), "pre-norm"),
        ("alibi", Box::new(one("decoder/alibi", DType::I8, 1)), "ALiBi"),
        (
            "heads",
            Box::new(one("decoder/num_heads", DType::I16, 2)),
            "encoder/num_heads is 4 but decoder/num_heads is 2",
        ),
        ("activation", Box::new(one("encoder/activation", DType::I8, 6)), "activation"),
        (
            "spec",
            Box::new(|b: &mut ModelBin| b.spec = "WhisperSpec".into()),
            "only CTranslate2's encoder-decoder Transformer",
        ),
        (
            "extra",
            Box::new(|b: &mut ModelBin| {
                b.variables.insert("encoder/layernorm_embedding/gamma".into(), Variable::f32(&[32], &[1.0; 32]));
            }),
            "encoder/layernorm_embedding/gamma (and 0 more) is a layer this engine does not have",
        ),
        (
            "untied",
            Box::new(|b: &mut ModelBin| {
                b.aliases.remove("decoder/projection/weight");
                let mut v = b.variables["decoder/embeddings/weight"].clone();
                v.bytes[0] ^= 0x40;
                b.variables.insert("decoder/projection/weight".into(), v);
            }),
            "not the target embedding",
        ),
        (
            "layers",
            Box::new(|b: &mut ModelBin| {
                let names: Vec<String> =
                    b.variables.keys().filter(|n| n.starts_with("decoder/layer_1/")).cloned().collect();
                for n in names {
                    b.variables.remove(&n);
                }
            }),
            "2 encoder and 1 decoder layers",
        ),
        (
            "shape",
            Box::new(|b: &mut ModelBin| {
                b.variables.insert("encoder/layer_0/ffn/linear_1/bias".into(), Variable::f32(&[31], &[0.0; 31]));
            }),
            "encoder/layer_0/ffn/linear_1/bias has shape [31], the model needs [32]",
        ),
        (
            "nan",
            Box::new(|b: &mut ModelBin| {
                b.variables.insert("encoder/layer_0/ffn/linear_1/bias".into(), Variable::f32(&[32], &[f32::NAN; 32]));
            }),
            "NaN at element 0",
        ),
        (
            "codes",
            Box::new(|b: &mut ModelBin| {
                b.variables.insert("encoder/layer_0/ffn/linear_1/weight".into(), Variable::i8(&[32, 64], &[1; 2048]));
            }),
            "encoder/layer_0/ffn/linear_1/weight_scale is not there",
        ),
    ];
    for (name, edit, want) in cases {
        let dir = edited(&t, name, edit);
        let e = refused(&dir);
        assert!(e.contains(want), "{name}: {e}");
        assert!(e.contains("model.bin"), "{name}: the error names no file: {e}");
    }
}

#[test]
fn int8_weights_read_back_within_half_a_step_of_the_float32_ones() {
    let f = ct2::import(&fixtures().join("ct2/tied_all_relu-float32"), &spm()).unwrap();
    let q = ct2::import(&fixtures().join("ct2/tied_all_relu-int8"), &spm()).unwrap();
    let h = ct2::import(&fixtures().join("ct2/tied_all_relu-float16"), &spm()).unwrap();
    assert_eq!((f.weights.as_str(), q.weights.as_str(), h.weights.as_str()), ("float32", "int8", "float16"));
    let (f, q, h) = (&f.checkpoint, &q.checkpoint, &h.checkpoint);
    assert_eq!(f.config, q.config);
    // float16 sinusoids stay the table CTranslate2 adds (rounded), so scores match its own.
    assert_eq!(h.config.positions, transformer::config::Positions::Learned);
    assert_eq!(transformer::config::ModelConfig { positions: f.config.positions, ..h.config.clone() }, f.config);
    let half_layout = transformer::params::ParamLayout::new(&h.config);
    let table = &h.params[half_layout.get("embed.positions").expect("a position table").range()];
    let d = f.config.d_model;
    let exact =
        transformer::kernels::cpu::embedding::sinusoid_table(table.len() / d, d, f.config.import.sinusoid_layout);
    for (x, y) in exact.iter().zip(table) {
        assert_eq!(half::f16::from_f32(*x).to_f32(), *y, "the float16 position table is not the sinusoids rounded");
    }
    let layout = transformer::params::ParamLayout::new(&f.config);
    for e in layout.entries() {
        let at = half_layout.get(&e.name).expect("the float16 model has every tensor").range();
        let (a, b, c) = (&f.params[e.range()], &q.params[e.range()], &h.params[at]);
        // Each row's step is max |w| / 127 (the converter's scale); biases and norms stay float32.
        let cols = if e.shape.len() == 2 { e.shape[1] } else { a.len() };
        for (ra, rb) in a.chunks(cols).zip(b.chunks(cols)) {
            let step = ra.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0;
            for (x, y) in ra.iter().zip(rb) {
                assert!((x - y).abs() <= step * 0.5 * 1.0001 + 1e-12, "{}: {x} read back as {y}", e.name);
            }
        }
        // The rows the import adds (masked logits) are the import's, not the file's.
        for (x, y) in a.iter().zip(c).filter(|(x, _)| **x != transformer::import::marian::MASKED_LOGIT) {
            assert_eq!(half::f16::from_f32(*x).to_f32(), *y, "{}: float16 is not the float32 rounded", e.name);
        }
    }
}

#[test]
fn hostile_files_are_errors_naming_them() {
    let t = TestDir::new("ct2-hostile");
    let dir = edited(&t, "base", |_| {});
    // A model.bin that is a directory, cut short, or a vocabulary that is not a list.
    let bin = dir.join("model.bin");
    let bytes = std::fs::read(&bin).unwrap();
    std::fs::write(&bin, &bytes[..bytes.len() / 2]).unwrap();
    assert!(refused(&dir).contains("the file ends at byte"));
    std::fs::remove_file(&bin).unwrap();
    std::fs::create_dir(&bin).unwrap();
    assert!(refused(&dir).contains("not a regular file"));
    std::fs::remove_dir(&bin).unwrap();
    std::fs::write(&bin, &bytes).unwrap();
    std::fs::write(dir.join("shared_vocabulary.json"), "{\"a\": 1}").unwrap();
    let e = refused(&dir);
    assert!(e.contains("shared_vocabulary.json") && e.contains("not a JSON list"), "{e}");
    std::fs::write(dir.join("shared_vocabulary.json"), "[\"a\", \"a\"]").unwrap();
    assert!(refused(&dir).contains("tokens 0 and 1 are both \"a\""));
}
