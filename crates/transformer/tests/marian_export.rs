//! `export marian`: a model with an imported tokenizer written back as a native Marian model.
//! Importing what it writes gives back the same tensors, configuration and vocabularies (the
//! check that real Marian decodes it as we do is dev/reference/marian_export_check.py, which
//! needs `pymarian`); what Marian does not have is refused by name.

mod common;

use common::TestDir;
use std::path::{Path, PathBuf};
use transformer::data::tokenizer::Tokenizer;
use transformer::import::marian::{export, import, write};

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
}

/// A fresh directory `marian-export-NAME-…` under the temporary directory.
fn tempdir(name: &str) -> TestDir {
    TestDir::new(&format!("marian-export-{name}"))
}

/// Imports `dir`, writes it as ours, exports that, imports the export: (first, round trip, the
/// directory holding both, `ours` and `marian`).
fn round_trip(
    dir: &Path,
    name: &str,
) -> (transformer::import::marian::Imported, transformer::import::marian::Imported, TestDir) {
    let tmp = tempdir(name);
    let first = import(dir).unwrap();
    let (ckpt, tok) = write(&first, &tmp.join("ours")).unwrap();
    let ck = transformer::checkpoint::load(&ckpt).unwrap();
    let written = export(&ck, &Tokenizer::load(&tok).unwrap(), &tmp.join("marian")).unwrap();
    assert!(written.iter().any(|p| p.ends_with("model.npz")) && written.iter().any(|p| p.ends_with("decoder.yml")));
    let again = import(&tmp.join("marian")).unwrap();
    (first, again, tmp)
}

#[test]
fn import_after_export_is_the_identity() {
    for variant in ["tied_all_relu", "tied_target_swish", "tied_all_gelu"] {
        let (first, again, _tmp) = round_trip(&fixture("marian-real").join(variant), variant);
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
fn release_vocabularies_go_out_as_yml_lists_and_come_back() {
    // Native models with `.yml` vocabularies (an OPUS-MT release's layout). Where a list's ids are
    // not its SentencePiece model's (one vocabulary over two .spm models), the export writes `.yml`
    // lists beside the SentencePiece models, without the `<pad>` the import adds; where they are
    // (gelu_separate: a list a side, each its .spm's pieces in order), the .spm files themselves.
    // Either way, importing the export gives every tensor and id back.
    for (variant, vocabs) in [
        ("opus", ["vocab.yml", "vocab.yml"]),
        ("relu_nobias", ["vocab.yml", "vocab.yml"]),
        ("gelu_separate", ["source.spm", "target.spm"]),
    ] {
        let dir = fixture("marian").join(variant).join("native");
        let (first, again, tmp) = round_trip(&dir, &format!("yml-{variant}"));
        assert_eq!(again.checkpoint.config, first.checkpoint.config, "{variant}");
        let same = again.checkpoint.params.len() == first.checkpoint.params.len()
            && again.checkpoint.params.iter().zip(&first.checkpoint.params).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{variant}: the tensors changed on the way through Marian's format");
        assert_eq!(again.tokenizer.source_vocab, first.tokenizer.source_vocab, "{variant}");
        assert_eq!(again.tokenizer.target_vocab, first.tokenizer.target_vocab, "{variant}");
        assert_eq!(again.tokenizer.source_spm, first.tokenizer.source_spm, "{variant}");
        assert_eq!(again.tokenizer.target_spm, first.tokenizer.target_spm, "{variant}");
        let out = tmp.join("marian");
        let decoder = std::fs::read_to_string(out.join("decoder.yml")).unwrap();
        assert!(decoder.contains(&format!("vocabs:\n  - {}\n  - {}\n", vocabs[0], vocabs[1])), "{decoder}");
        assert!(out.join("source.spm").is_file() && out.join("target.spm").is_file(), "{variant}");
        if vocabs[0].ends_with(".yml") {
            // The list written is the release's own, entry for entry.
            let original = std::fs::read_to_string(dir.join(vocabs[0])).unwrap();
            let written = std::fs::read_to_string(out.join(vocabs[0])).unwrap();
            let entries = |t: &str| t.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect::<Vec<_>>();
            assert_eq!(entries(&written), entries(&original), "{variant}");
            assert!(!written.contains("<pad>"), "{variant}: the import's start token is not Marian's");
        }
    }
}

/// Rewrites the `.yml` list at `path` with the pieces of ids `a` and `b` swapped.
fn swap_ids(path: &Path, a: usize, b: usize) {
    let mut lines: Vec<String> = std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect();
    let piece = |l: &str| l.rsplit_once(':').unwrap().0.to_string();
    let (pa, pb) = (piece(&lines[a]), piece(&lines[b]));
    lines[a] = format!("{pb}: {a}");
    lines[b] = format!("{pa}: {b}");
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn separate_yml_vocabularies_go_out_as_two_lists() {
    // gelu_separate with each list's ids 2 and 3 swapped: no longer its .spm's ids on either side,
    // so the export writes vocab.src.yml and vocab.trg.yml.
    let tmp = tempdir("separate-yml");
    let dir = tmp.join("release");
    std::fs::create_dir_all(&dir).unwrap();
    for f in std::fs::read_dir(fixture("marian/gelu_separate/native")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
    }
    swap_ids(&dir.join("vocab.src.yml"), 2, 3);
    swap_ids(&dir.join("vocab.trg.yml"), 2, 3);
    let first = import(&dir).unwrap();
    let (ckpt, tok) = write(&first, &tmp.join("ours")).unwrap();
    let mut ck = transformer::checkpoint::load(&ckpt).unwrap();
    // The source side's `<pad>` (its start id, never read by Marian's encoder) with a row that is
    // not zero is Marian's own entry: written, not left out.
    let layout = transformer::params::ParamLayout::new(&ck.config);
    let src = layout.get("encoder.embed.weight").expect("separate vocabularies: a source embedding").range().start;
    ck.params[src + transformer::BOS as usize * ck.config.d_model] = 0.25;
    let out = tmp.join("marian");
    export(&ck, &Tokenizer::load(&tok).unwrap(), &out).unwrap();
    let decoder = std::fs::read_to_string(out.join("decoder.yml")).unwrap();
    assert!(decoder.contains("vocabs:\n  - vocab.src.yml\n  - vocab.trg.yml\n"), "{decoder}");
    let entries = |p: &Path| -> Vec<String> {
        std::fs::read_to_string(p).unwrap().lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
    };
    let (src_written, src_release) = (entries(&out.join("vocab.src.yml")), entries(&dir.join("vocab.src.yml")));
    assert_eq!(src_written[..src_release.len()], src_release[..]);
    assert_eq!(src_written[src_release.len()..], ["\"<pad>\": 600".to_string()], "the source start row is kept");
    assert_eq!(entries(&out.join("vocab.trg.yml")), entries(&dir.join("vocab.trg.yml")), "the target's as released");
    let model_yml = {
        let npz = std::fs::read(out.join("model.npz")).unwrap();
        let text = String::from_utf8_lossy(&npz).to_string();
        text[text.find("dim-vocabs:").unwrap()..].lines().take(3).collect::<Vec<_>>().join("\n")
    };
    assert_eq!(model_yml, "dim-vocabs:\n  - 601\n  - 600");
    let again = import(&out).unwrap();
    assert_eq!(again.checkpoint.config, ck.config);
    let same = again.checkpoint.params.len() == ck.params.len()
        && again.checkpoint.params.iter().zip(&ck.params).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "the tensors changed on the way through Marian's format");
    assert_eq!(again.tokenizer.target_vocab, first.tokenizer.target_vocab);
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
        (
            transformer::ModelConfig {
                import: transformer::ImportOptions { activation: Activation::GeluTanh, ..ck.config.import },
                ..ck.config.clone()
            },
            "gelu_tanh",
        ),
        (
            transformer::ModelConfig {
                import: transformer::ImportOptions { sinusoid_layout: SinusoidLayout::Halves, ..ck.config.import },
                ..ck.config.clone()
            },
            "sinusoid layout",
        ),
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
    // With Marian's options, the port's vocab.json ids go out as a `.yml` list (the pad row the
    // converter appends left out) and come back the same.
    let config = transformer::ModelConfig {
        layer_norm_eps: 1e-6,
        import: transformer::ImportOptions { sinusoid_layout: SinusoidLayout::Marian, ..hck.config.import },
        ..hck.config.clone()
    };
    let hck = transformer::checkpoint::Checkpoint { config, ..hck };
    let htok = Tokenizer::load(&htok).unwrap();
    export(&hck, &htok, &tmp.join("hf-out")).unwrap();
    let again = import(&tmp.join("hf-out")).unwrap();
    // One value differs: the port's logit bias for its `<pad>` (our start token, which search
    // never predicts), a row Marian does not have, comes back masked.
    assert_eq!(again.checkpoint.params.len(), hck.params.len());
    let bias = transformer::params::ParamLayout::new(&hck.config).get("output.bias").unwrap().range().start;
    assert_eq!(again.checkpoint.params[bias + 1], transformer::import::marian::MASKED_LOGIT);
    let mut hck = hck;
    hck.params[bias + 1] = transformer::import::marian::MASKED_LOGIT;
    let same = again.checkpoint.params.iter().zip(&hck.params).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(same, "the port's tensors changed on the way through Marian's format");
    assert_eq!(again.tokenizer.source_vocab, hf.tokenizer.source_vocab);
    // A start row that is not zero has no place in Marian (its decoder starts from zeros).
    let mut moved = ck.clone();
    let start = transformer::params::ParamLayout::new(&ck.config).get("embed.weight").unwrap().range().start;
    moved.params[start + transformer::BOS as usize * ck.config.d_model] = 0.5;
    let err = export(&moved, &tok, &tmp.join("start")).unwrap_err().to_string();
    assert!(err.contains("start row is not zero"), "{err}");
    // Never over an existing model.
    export(&ck, &tok, &tmp.join("twice")).unwrap();
    let err = export(&ck, &tok, &tmp.join("twice")).unwrap_err().to_string();
    assert!(err.contains("exists"), "{err}");
}

/// The audit's probes: a dangling `vocab.yml` link in the output directory made the export write
/// a file outside it (exit 0), and a dangling `decoder.yml` link to a missing directory failed
/// after `model.npz`, the vocabulary and both `.spm` files were written, so the rerun was refused.
/// A link, dangling or not, now counts as an existing file, and an export writes all or nothing.
#[test]
fn an_export_never_writes_through_a_link_and_leaves_nothing_when_refused() {
    let tmp = tempdir("links");
    let first = import(&fixture("marian-real").join("tied_all_relu")).unwrap();
    let (ckpt, tok) = write(&first, &tmp.join("ours")).unwrap();
    let ck = transformer::checkpoint::load(&ckpt).unwrap();
    let tok = Tokenizer::load(&tok).unwrap();
    for (name, target) in [("vocab.yml", tmp.join("outside.yml")), ("decoder.yml", tmp.join("missing/dir/decoder.yml"))]
    {
        let out = tmp.join(format!("out-{name}"));
        std::fs::create_dir_all(&out).unwrap();
        std::os::unix::fs::symlink(&target, out.join(name)).unwrap();
        let err = export(&ck, &tok, &out).unwrap_err().to_string();
        assert!(err.contains(&format!("/{name} exists (a link)")), "{err}");
        assert!(!target.exists(), "{name}: written through the link");
        let left: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from(name)], "{name}: only the link is there");
        // Once the link is gone, the same export is accepted.
        std::fs::remove_file(out.join(name)).unwrap();
        let written = export(&ck, &tok, &out).unwrap();
        assert!(written.iter().all(|p| p.is_file()) && written.len() >= 3, "{written:?}");
    }
}
