//! `export ct2` and `import ct2` against what the real CTranslate2 wrote and decoded
//! (crates/transformer/tests/fixtures/ct2/checks.json, from `dev/ct2/check.py`): our `model.bin`
//! is its converter's byte for byte; the directories its own Marian converter wrote import here and
//! decode greedily to its 1-best on 100 test sentences; a model sent out and read back decodes as
//! before; refusals name what is wrong.

mod common;

use common::{multi30k, transformer, TestDir};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    transformer::test_support::repo("crates/transformer/tests/fixtures")
}

fn checks() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("ct2/checks.json")).unwrap()).unwrap()
}

fn small() -> (PathBuf, PathBuf) {
    let d = fixtures().join("m30k-small");
    (d.join("model.safetensors"), d.join("bpe.json"))
}

fn ok(args: &[&str]) -> String {
    let (ok, out, err) = transformer(args);
    assert!(ok, "transformer {args:?} failed: {err}");
    out
}

/// The first `n` test sentences in a file of `dir`.
fn sources(dir: &Path, n: usize) -> PathBuf {
    let all = transformer::data::corpus::read_lines(Path::new(&multi30k("test_2016_flickr.en.gz"))).unwrap();
    let p = dir.join("src.txt");
    std::fs::write(&p, all[..n].iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    p
}

/// The SentencePiece models of a model of fixtures/marian-real (one shared, or source and target).
fn marian_spms(variant: &str) -> Vec<PathBuf> {
    let names: &[&str] = match variant {
        "tied_all_relu" => &["vocab.spm"],
        _ => &["vocab.en.spm", "vocab.de.spm"],
    };
    names.iter().map(|n| fixtures().join("marian-real").join(variant).join(n)).collect()
}

/// `import ct2` of the fixture directory fixtures/ct2/`name`, cut with `spms`, into `out`: its
/// report (stderr).
fn import_fixture(name: &str, spms: &[PathBuf], out: &Path) -> String {
    let dir = fixtures().join("ct2").join(name);
    let mut args = vec!["import", "ct2", dir.to_str().unwrap(), "--spm"];
    args.extend(spms.iter().map(|p| p.to_str().unwrap()));
    args.extend(["--output", out.to_str().unwrap()]);
    let (fine, _, err) = transformer(&args);
    assert!(fine, "transformer {args:?} failed: {err}");
    err
}

/// `translate` as dev/ct2/check.py runs it: CTranslate2's search and defaults (`--patience 1`,
/// `length_penalty` 1 as `--length-norm marian --alpha 1`, 256 steps as `--end-at-limit` counts
/// them, at least one token), but the beam.
fn translate(ckpt: &Path, tok: &Path, src: &Path, beam: usize, precision: &str) -> Vec<String> {
    let beam = beam.to_string();
    ok(&[
        "translate",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--tokenizer",
        tok.to_str().unwrap(),
        "--input",
        src.to_str().unwrap(),
        "--beam",
        &beam,
        "--alpha",
        "1",
        "--length-norm",
        "marian",
        "--patience",
        "1",
        "--min-len",
        "1",
        "--max-len-a",
        "0",
        "--max-len-b",
        "256",
        "--end-at-limit",
        "--precision",
        precision,
        "--threads",
        "1",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
fn export_ct2_writes_the_model_bin_ctranslate2s_converter_writes() {
    let t = TestDir::new("ct2-export");
    let (ckpt, bpe) = small();
    let c = checks();
    for q in ["float32", "int8"] {
        let out = t.path().join(q);
        ok(&[
            "export",
            "ct2",
            ckpt.to_str().unwrap(),
            "--bpe",
            bpe.to_str().unwrap(),
            "--quantization",
            q,
            "--output",
            out.to_str().unwrap(),
        ]);
        let hash = format!("{:x}", Sha256::digest(std::fs::read(out.join("model.bin")).unwrap()));
        assert_eq!(hash, c["export"][q]["converter_model_bin_sha256"].as_str().unwrap(), "{q}");
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
        assert_eq!(config["decoder_start_token"], "<s>");
        assert_eq!(config["layer_norm_epsilon"], 1e-6);
        assert_eq!(config["add_source_eos"], false);
        let vocab: Vec<String> =
            serde_json::from_str(&std::fs::read_to_string(out.join("shared_vocabulary.json")).unwrap()).unwrap();
        assert_eq!(vocab.len(), 2000);
        assert_eq!(&vocab[..4], ["<pad>", "<s>", "</s>", "<unk>"]);
        // An output is never written over.
        let (ok2, _, err) = transformer(&[
            "export",
            "ct2",
            ckpt.to_str().unwrap(),
            "--bpe",
            bpe.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ]);
        assert!(!ok2 && err.contains("model.bin"), "{err}");
    }
}

/// CTranslate2 decoded our float32 export (dev/ct2/check.py): ours writes the same 1-best on every
/// sentence, greedy and beam 4 (CTranslate2's search: `--patience 1`).
#[test]
fn ctranslate2_decodes_our_export_as_we_do() {
    let t = TestDir::new("ct2-export-decodes");
    let (ckpt, bpe) = small();
    let c = checks();
    let n = c["sentences"].as_u64().unwrap() as usize;
    let src = sources(t.path(), n);
    for (mode, beam) in [("greedy", 1), ("beam4", 4)] {
        let want: Vec<String> = serde_json::from_value(c["export"]["float32"][mode]["ct2_1best"].clone()).unwrap();
        assert_eq!(want.len(), n);
        assert_eq!(translate(&ckpt, &bpe, &src, beam, "f32"), want, "{mode}");
    }
}

#[test]
fn a_model_sent_to_ctranslate2_and_read_back_decodes_as_before() {
    let t = TestDir::new("ct2-round-trip");
    let (ckpt, bpe) = small();
    let src = sources(t.path(), 40);
    let before = translate(&ckpt, &bpe, &src, 4, "f32");
    let before_int8 = translate(&ckpt, &bpe, &src, 4, "int8");
    let out = t.path().join("ct2");
    ok(&["export", "ct2", ckpt.to_str().unwrap(), "--bpe", bpe.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    let back = t.path().join("back");
    ok(&["import", "ct2", out.to_str().unwrap(), "--output", back.to_str().unwrap()]);
    let (c2, t2) = (back.join("model.safetensors"), back.join("tokenizer.json"));
    assert_eq!(translate(&c2, &t2, &src, 4, "f32"), before);
    assert_eq!(translate(&c2, &t2, &src, 4, "int8"), before_int8);
    // The tokenizer is the one sent out, byte for byte.
    assert_eq!(std::fs::read(&t2).unwrap(), std::fs::read(&bpe).unwrap());
}

#[test]
fn directories_ctranslate2s_marian_converter_wrote_decode_as_ctranslate2_decodes_them() {
    let t = TestDir::new("ct2-import");
    let c = checks();
    let n = c["sentences"].as_u64().unwrap() as usize;
    let src = sources(t.path(), n);
    for variant in ["tied_all_relu", "tied_target_swish"] {
        // float16 weights are read as f32: CTranslate2 on a CPU also computes them in float32.
        for q in ["float32", "float16"] {
            let name = format!("{variant}-{q}");
            let out = t.path().join(&name);
            let err = import_fixture(&name, &marian_spms(variant), &out);
            assert!(err.contains(&format!("{q} weights")), "{err}");
            let (ck, tk) = (out.join("model.safetensors"), out.join("tokenizer.json"));
            // Beam 4 at float32 too. SentencePiece writes the unknown token as " ⁇ ", which our
            // Marian tokenizer drops as a special token (as `transformers`' decode does).
            let modes: &[(&str, usize)] =
                if q == "float32" { &[("greedy", 1), ("beam4", 4)] } else { &[("greedy", 1)] };
            for &(mode, beam) in modes {
                let got = translate(&ck, &tk, &src, beam, "f32");
                let want: Vec<String> = serde_json::from_value(c["import"][&name][mode]["ct2_1best"].clone()).unwrap();
                assert_eq!(got.len(), n);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_eq!(*g, w.replace(" ⁇ ", ""), "{name} {mode}: sentence {i}");
                }
            }
        }
    }
}

#[test]
fn import_ct2_refuses_by_name() {
    let t = TestDir::new("ct2-refuse");
    let dir = fixtures().join("ct2/tied_all_relu-float32");
    let out = t.path().join("out");
    // No tokenizer for the tokens.
    let (ok1, _, err) = transformer(&["import", "ct2", dir.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    assert!(!ok1 && err.contains("need their tokenizer") && err.contains("--spm"), "{err}");
    assert!(!out.exists(), "a refused import made its output directory");
    // Not a CTranslate2 directory.
    let (ok2, _, err) = transformer(&[
        "import",
        "ct2",
        t.path().to_str().unwrap(),
        "--spm",
        "x.spm",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(!ok2 && err.contains("model.bin"), "{err}");
    // Never into the directory read.
    let copy = t.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for f in std::fs::read_dir(&dir).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
    }
    let spm = fixtures().join("marian-real/tied_all_relu/vocab.spm");
    let (ok3, _, err) = transformer(&[
        "import",
        "ct2",
        copy.to_str().unwrap(),
        "--spm",
        spm.to_str().unwrap(),
        "--output",
        copy.to_str().unwrap(),
    ]);
    assert!(!ok3 && err.contains("would overwrite"), "{err}");
}

#[test]
fn export_hf_writes_a_marian_mt_model_directory_once() {
    let t = TestDir::new("hf-cli");
    let (ckpt, bpe) = small();
    let out = t.path().join("hf");
    let args =
        ["export", "hf", ckpt.to_str().unwrap(), "--bpe", bpe.to_str().unwrap(), "--output", out.to_str().unwrap()];
    let (ok1, _, err) = transformer(&args);
    assert!(ok1, "{err}");
    assert!(err.contains("MarianMTModel.from_pretrained"), "{err}");
    for f in ["config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let (ok2, _, err) = transformer(&args);
    assert!(!ok2 && err.contains("config.json"), "{err}");
}

#[test]
fn a_directory_ct2_transformers_converter_wrote_imports_with_its_sentencepiece_models() {
    // `ct2-transformers-converter --copy_files source.spm target.spm` on the OPUS-MT-shaped
    // fixture: the models sit in the directory, so `import ct2` needs no --spm. Its
    // `scale_embeddings` is the multiplier √d_model itself and it starts from a zero embedding.
    let t = TestDir::new("ct2-opus");
    let c = checks();
    let n = c["sentences"].as_u64().unwrap() as usize;
    let src = sources(t.path(), n);
    let dir = t.path().join("opus-ct2");
    std::fs::create_dir(&dir).unwrap();
    for f in std::fs::read_dir(fixtures().join("ct2/opus-hf-float32")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
    }
    for f in ["source.spm", "target.spm"] {
        std::fs::copy(fixtures().join("marian/opus/hf").join(f), dir.join(f)).unwrap();
    }
    let out = t.path().join("ours");
    ok(&["import", "ct2", dir.to_str().unwrap(), "--output", out.to_str().unwrap()]);
    for (mode, beam) in [("greedy", 1), ("beam4", 4)] {
        let got = translate(&out.join("model.safetensors"), &out.join("tokenizer.json"), &src, beam, "f32");
        let want: Vec<String> =
            serde_json::from_value(c["import"]["opus-hf-float32"][mode]["ct2_1best"].clone()).unwrap();
        assert_eq!(got, want, "{mode}");
    }
}

/// `score` of CTranslate2's greedy 1-best on each directory its converters wrote (float32 and
/// float16), against its own `score_batch` (checks.json's `ct2_scores`, log-probability sums with
/// the EOS): within 1e-3 on every sentence, the interchange issue's bound. (They were 1.5–4.3e-3
/// apart while the import took CTranslate2's LayerNorm ε for 1e-6 and float16 sinusoids for
/// exact ones.)
#[test]
fn ctranslate2s_own_conversions_score_as_ctranslate2_scores_them() {
    let t = TestDir::new("ct2-score");
    let c = checks();
    let n = c["sentences"].as_u64().unwrap() as usize;
    let src = sources(t.path(), n);
    let mut dirs: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for variant in ["tied_all_relu", "tied_target_swish"] {
        for q in ["float32", "float16"] {
            dirs.push((format!("{variant}-{q}"), marian_spms(variant)));
        }
    }
    let hf = fixtures().join("marian/opus/hf");
    dirs.push(("opus-hf-float32".into(), vec![hf.join("source.spm"), hf.join("target.spm")]));
    for (name, spms) in dirs {
        let out = t.path().join(&name);
        import_fixture(&name, &spms, &out);
        let entry = &c["import"][&name];
        let hyps: Vec<String> = serde_json::from_value(entry["greedy"]["ct2_1best"].clone()).unwrap();
        let theirs: Vec<f64> = serde_json::from_value(entry["ct2_scores"].clone()).unwrap();
        let refs = t.path().join(format!("{name}.ref"));
        std::fs::write(&refs, hyps.iter().map(|h| format!("{h}\n")).collect::<String>()).unwrap();
        let ours: Vec<f64> = ok(&[
            "score",
            "--checkpoint",
            out.join("model.safetensors").to_str().unwrap(),
            "--tokenizer",
            out.join("tokenizer.json").to_str().unwrap(),
            "--src",
            src.to_str().unwrap(),
            "--ref",
            refs.to_str().unwrap(),
            "--precision",
            "f32",
            "--threads",
            "1",
        ])
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
        assert_eq!(ours.len(), n, "{name}");
        for (i, (o, c)) in ours.iter().zip(&theirs).enumerate() {
            assert!((o - c).abs() <= 1e-3, "{name}, sentence {i}: ours {o}, CTranslate2's {c}");
        }
    }
}

/// `--stop patience` alone is `--patience 1`; a patience beside another stop, or an unknown stop,
/// is a usage error that names it.
#[test]
fn stop_names_the_search_rule() {
    let t = TestDir::new("ct2-stop");
    let (ckpt, bpe) = small();
    let src = sources(t.path(), 20);
    let want = translate(&ckpt, &bpe, &src, 4, "f32");
    let (c, b, s) = (ckpt.to_str().unwrap(), bpe.to_str().unwrap(), src.to_str().unwrap());
    let base = ["translate", "--checkpoint", c, "--tokenizer", b, "--input", s, "--beam", "4", "--alpha", "1"];
    let rest = [
        "--length-norm",
        "marian",
        "--min-len",
        "1",
        "--max-len-a",
        "0",
        "--max-len-b",
        "256",
        "--end-at-limit",
        "--threads",
        "1",
    ];
    let got: Vec<String> =
        ok(&[&base[..], &["--stop", "patience"], &rest[..]].concat()).lines().map(String::from).collect();
    assert_eq!(got, want);
    let (fine, _, err) = transformer(&[&base[..], &["--stop", "exact", "--patience", "2"]].concat());
    assert!(!fine && err.contains("a patience applies to the patience stop, not to the exact stop"), "{err}");
    let (fine, _, err) = transformer(&[&base[..], &["--stop", "soon"]].concat());
    assert!(!fine && err.contains("transformers"), "{err}");
}

/// A float16 CTranslate2 directory imports with its rounded position table (so that it scores as
/// CTranslate2 does) and still goes out to Hugging Face, as computed sinusoids: the export's
/// tensors are the float32 import's rounded to float16.
#[test]
fn a_float16_import_goes_out_to_hugging_face() {
    let t = TestDir::new("ct2-f16-hf");
    let mut tensors = Vec::new();
    for q in ["float32", "float16"] {
        let (imp, hf) = (t.path().join(format!("imp-{q}")), t.path().join(format!("hf-{q}")));
        import_fixture(&format!("tied_all_relu-{q}"), &marian_spms("tied_all_relu"), &imp);
        let (ck, tk) = (imp.join("model.safetensors"), imp.join("tokenizer.json"));
        ok(&[
            "export",
            "hf",
            ck.to_str().unwrap(),
            "--tokenizer",
            tk.to_str().unwrap(),
            "--output",
            hf.to_str().unwrap(),
        ]);
        let bytes = std::fs::read(hf.join("model.safetensors")).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut named: Vec<(String, Vec<f32>)> = st
            .tensors()
            .into_iter()
            .map(|(n, v)| (n, v.data().chunks(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()))
            .collect();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        tensors.push(named);
    }
    let (f, h) = (&tensors[0], &tensors[1]);
    assert_eq!(f.iter().map(|x| &x.0).collect::<Vec<_>>(), h.iter().map(|x| &x.0).collect::<Vec<_>>());
    for ((name, a), (_, b)) in f.iter().zip(h) {
        for (x, y) in a.iter().zip(b) {
            assert!(
                half::f16::from_f32(*x).to_f32() == *y || *x == *y,
                "{name}: {x} went out as {y}, not as its float16 rounding"
            );
        }
    }
}
