//! `export marian`: a model with an imported tokenizer written back as a native Marian model.
//! Importing what it writes gives back the same tensors, configuration and vocabularies (the
//! check that real Marian decodes it as we do is dev/reference/marian_export_check.py, which
//! needs `pymarian`); what Marian does not have is refused by name.

use std::path::{Path, PathBuf};
use transformer::data::tokenizer::Tokenizer;
use transformer::import::marian::{export, import, write};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("marian-export-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Imports `dir`, writes it as ours, exports that, imports the export: (first, round trip).
fn round_trip(
    dir: &Path,
    name: &str,
) -> (transformer::import::marian::Imported, transformer::import::marian::Imported) {
    let tmp = tempdir(name);
    let first = import(dir).unwrap();
    let (ckpt, tok) = write(&first, &tmp.join("ours")).unwrap();
    let ck = transformer::checkpoint::load(&ckpt).unwrap();
    let written = export(&ck, &Tokenizer::load(&tok).unwrap(), &tmp.join("marian")).unwrap();
    assert!(written.iter().any(|p| p.ends_with("model.npz")) && written.iter().any(|p| p.ends_with("decoder.yml")));
    let again = import(&tmp.join("marian")).unwrap();
    (first, again)
}

#[test]
fn import_after_export_is_the_identity() {
    for variant in ["tied_all_relu", "tied_target_swish", "tied_all_gelu"] {
        let (first, again) = round_trip(&fixture("marian-real").join(variant), variant);
        assert_eq!(again.checkpoint.config, first.checkpoint.config, "{variant}");
        assert_eq!(again.checkpoint.params.len(), first.checkpoint.params.len(), "{variant}");
        // Bit for bit: the export moves values, it computes none.
        let same =
            again.checkpoint.params.iter().zip(&first.checkpoint.params).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{variant}: the tensors changed on the way through Marian's format");
        assert_eq!(again.tokenizer.source_vocab, first.tokenizer.source_vocab, "{variant}");
        assert_eq!(again.tokenizer.target_vocab, first.tokenizer.target_vocab, "{variant}");
        assert_eq!(again.tokenizer.source_spm, first.tokenizer.source_spm, "{variant}");
        assert_eq!(again.tokenizer.target_spm, first.tokenizer.target_spm, "{variant}");
    }
}

#[test]
fn what_marian_does_not_have_is_refused_by_name() {
    let tmp = tempdir("refused");
    let first = import(&fixture("marian-real/tied_all_relu")).unwrap();
    let (ckpt, tok) = write(&first, &tmp.join("ours")).unwrap();
    let tok = Tokenizer::load(&tok).unwrap();
    let ck = transformer::checkpoint::load(&ckpt).unwrap();
    use transformer::{Activation, Positions, SinusoidLayout};
    let cases: Vec<(transformer::ModelConfig, &str)> = vec![
        (transformer::ModelConfig { activation: Activation::GeluTanh, ..ck.config.clone() }, "gelu_tanh"),
        (transformer::ModelConfig { sinusoid_layout: SinusoidLayout::Halves, ..ck.config.clone() }, "sinusoid layout"),
        (transformer::ModelConfig { positions: Positions::Learned, ..ck.config.clone() }, "learned positions"),
        (transformer::ModelConfig { layer_norm_eps: 1e-5, ..ck.config.clone() }, "LayerNorm ε"),
    ];
    for (config, name) in cases {
        let c = transformer::checkpoint::Checkpoint { config, ..ck.clone() };
        let err = export(&c, &tok, &tmp.join("refused")).unwrap_err().to_string();
        assert!(err.contains("Marian has no") && err.contains(name), "{name}: {err}");
    }
    // A BPE vocabulary of ours, and a Hugging Face port's vocab.json ids (not its .spm's).
    let bpe = transformer::data::bpe::Bpe::learn(["a b c", "d e f"].iter(), 300, 1).unwrap();
    let err = export(&ck, &Tokenizer::Bpe(bpe), &tmp.join("refused")).unwrap_err().to_string();
    assert!(err.contains("BPE"), "{err}");
    let hf = import(&fixture("marian/opus/hf")).unwrap();
    let (hck, htok) = write(&hf, &tmp.join("hf")).unwrap();
    let hck = transformer::checkpoint::load(&hck).unwrap();
    let err = export(&hck, &Tokenizer::load(&htok).unwrap(), &tmp.join("hf-out")).unwrap_err().to_string();
    assert!(err.contains("sinusoid layout Halves"), "the port's layout comes first: {err}");
    // With Marian's options, its vocabulary is still the port's vocab.json, not its .spm ids.
    let config = transformer::ModelConfig {
        sinusoid_layout: SinusoidLayout::Marian,
        layer_norm_eps: 1e-6,
        ..hck.config.clone()
    };
    let hck = transformer::checkpoint::Checkpoint { config, ..hck };
    let err = export(&hck, &Tokenizer::load(&htok).unwrap(), &tmp.join("hf-out")).unwrap_err().to_string();
    assert!(err.contains("not its SentencePiece model's"), "{err}");
    // Never over an existing model.
    export(&ck, &tok, &tmp.join("twice")).unwrap();
    let err = export(&ck, &tok, &tmp.join("twice")).unwrap_err().to_string();
    assert!(err.contains("exists"), "{err}");
    let _ = std::fs::remove_dir_all(&tmp);
}
