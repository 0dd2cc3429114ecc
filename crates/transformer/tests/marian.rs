//! Imported Marian / OPUS-MT models against `transformers` (fixtures written by
//! dev/reference/marian_fixtures.py: small models in the OPUS-MT shape, saved as a Hugging Face
//! directory in both weight formats and as a native Marian .npz, with float64 reference outputs).

use safetensors::SafeTensors;
use std::path::{Path, PathBuf};
use transformer::import::marian::{import, Imported};
use transformer::import::IdMap;
use transformer::{Batch, Transformer, Workspace};

fn fixture(variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/marian").join(variant)
}

struct Reference {
    json: serde_json::Value,
    tensors: Vec<u8>,
}

impl Reference {
    fn open(variant: &str) -> Self {
        let dir = fixture(variant);
        let json = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
        Reference { json, tensors: std::fs::read(dir.join("reference.safetensors")).unwrap() }
    }
    fn ids(&self, key: &str) -> Vec<Vec<u32>> {
        self.json[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect())
            .collect()
    }
    fn tensor(&self, name: &str) -> (Vec<usize>, Vec<f32>) {
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let t = st.tensor(name).unwrap();
        let v = t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        (t.shape().to_vec(), v)
    }
}

/// The id maps of an import: (source, target); the source map is the target's when shared.
fn maps(imp: &Imported) -> (IdMap, IdMap) {
    let t = &imp.tokenizer;
    let tv = t.target_vocab.as_ref().unwrap_or(&t.source_vocab);
    let start = |v: &transformer::import::marian::Vocab| t.pad.as_ref().and_then(|p| v.id(p));
    let map = |v: &transformer::import::marian::Vocab| {
        IdMap::new(v.len(), start(v), v.id(&t.eos).unwrap(), v.id(&t.unk).unwrap()).unwrap()
    };
    (map(&t.source_vocab), map(tv))
}

/// Max |a − b| / max(1, |b|) over all elements.
fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / y.abs().max(1.0)).fold(0.0, f32::max)
}

fn check_numerics(variant: &str, dir: &str) {
    let mut imp = import(&fixture(variant).join(dir)).unwrap();
    if dir == "native" {
        // Marian's own sinusoid frequencies and LayerNorm ε differ from the port's that made the
        // reference: compare the weights under the port's settings (`native_model_settings`
        // checks Marian's).
        let c = &mut imp.checkpoint.config;
        (c.sinusoid_layout, c.layer_norm_eps) = (transformer::SinusoidLayout::Halves, 1e-5);
    }
    let r = Reference::open(variant);
    let (smap, tmap) = maps(&imp);
    let model = Transformer::from_params(imp.checkpoint.config.clone(), imp.checkpoint.params.clone()).unwrap();
    let (src, tgt) = (r.ids("source_ids"), r.ids("target_ids"));
    let v = model.config.vocab_size;
    let mut ws = Workspace::new();
    for i in 0..4 {
        let s: Vec<u32> = src[i].iter().map(|&x| smap.ours(x)).collect();
        // The labels end with </s>: the batch adds our EOS (Marian's </s>) itself.
        let t: Vec<u32> = tgt[i][..tgt[i].len() - 1].iter().map(|&x| tmap.ours(x)).collect();
        let batch = Batch::from_pairs(&[(s, t)]);
        model.forward(&batch, &mut ws, None).unwrap();
        let (shape, enc_ref) = r.tensor(&format!("encoder_output.{i}"));
        let enc = model.encoder_output(&ws);
        assert_eq!(enc.len(), enc_ref.len(), "{variant}/{dir}: encoder output shape {shape:?}");
        let e = max_rel(enc, &enc_ref);
        assert!(e < 1e-4, "{variant}/{dir} pair {i}: encoder output off by {e:e}");
        let (shape, logits_ref) = r.tensor(&format!("logits.{i}"));
        let (rows, vf) = (shape[0], shape[1]);
        // Our logits in the reference's id order; a column we do not have (a native model has
        // no <pad>, the port's decoder start) keeps the reference's value.
        let mut ours = logits_ref.clone();
        assert_eq!(v, vf + 1, "{variant}/{dir}: our vocabulary adds our own rows");
        for row in 0..rows {
            for j in 0..v {
                if let Some(f) = tmap.foreign(j as u32) {
                    ours[row * vf + f as usize] = ws.logits[row * v + j];
                }
            }
        }
        let e = max_rel(&ours, &logits_ref);
        assert!(e < 1e-4, "{variant}/{dir} pair {i}: logits off by {e:e}");
    }
}

#[test]
fn hf_safetensors_numerics_equal_transformers() {
    for variant in ["opus", "relu_nobias", "gelu_separate"] {
        check_numerics(variant, "hf");
    }
}

#[test]
fn hf_pytorch_bin_numerics_equal_transformers() {
    for variant in ["opus", "relu_nobias", "gelu_separate"] {
        // The same directory without model.safetensors reads pytorch_model.bin.
        let tmp = tempdir(variant);
        for f in std::fs::read_dir(fixture(variant).join("hf")).unwrap() {
            let f = f.unwrap().path();
            if f.file_name().unwrap() != "model.safetensors" {
                std::fs::copy(&f, tmp.join(f.file_name().unwrap())).unwrap();
            }
        }
        let a = import(&fixture(variant).join("hf")).unwrap();
        let b = import(&tmp).unwrap();
        assert_eq!(b.source, "hf-pytorch");
        assert_eq!(a.checkpoint.config, b.checkpoint.config);
        assert!(a.checkpoint.params == b.checkpoint.params, "{variant}: the two formats give different weights");
    }
}

#[test]
fn native_npz_numerics_equal_transformers() {
    for variant in ["opus", "relu_nobias", "gelu_separate"] {
        check_numerics(variant, "native");
    }
}

#[test]
fn native_model_settings_are_marians() {
    let imp = import(&fixture("opus").join("native")).unwrap();
    let c = &imp.checkpoint.config;
    assert_eq!(c.sinusoid_layout, transformer::SinusoidLayout::Marian);
    assert_eq!(c.activation, transformer::Activation::Swish);
    assert!(c.output_bias && c.scale_embedding && c.source_vocab_size.is_none());
    let sep = import(&fixture("gelu_separate").join("native")).unwrap();
    assert_eq!(sep.checkpoint.config.source_vocab_size, Some(sep.tokenizer.source_vocab.len() + 2));
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("marian-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
