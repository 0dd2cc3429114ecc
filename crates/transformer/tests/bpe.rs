//! BPE on the real corpus (the built-in Multi30k, data/multi30k): learned jointly on source and
//! target, fixed special ids, and lossless: decode(encode(x)) == x for every line of every split of
//! English and German, and of French and Czech where ../shared has them (an extra check).

mod common;

use common::TestDir;
use std::io::Read;
use std::path::{Path, PathBuf};
use transformer::data::bpe::Bpe;

fn read_gz(path: &Path) -> Vec<String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .read_to_string(&mut text)
        .unwrap();
    text.lines().map(str::to_string).collect()
}

fn multi30k(name: &str) -> Vec<String> {
    read_gz(&transformer::test_support::multi30k(name))
}

/// Every line of `dir`'s splits in `langs` round-trips; returns (lines, tokens).
fn round_trip_every_line(bpe: &Bpe, dir: &Path, langs: &[&str]) -> (usize, usize) {
    let (mut lines, mut tokens) = (0, 0);
    for split in ["train", "val", "test_2016_flickr"] {
        for lang in langs {
            for line in read_gz(&dir.join(format!("{split}.{lang}.gz"))) {
                let ids = bpe.encode(&line).unwrap();
                assert!(ids.iter().all(|&i| i >= 4 && (i as usize) < 8000), "special or out-of-range id in {line:?}");
                assert_eq!(bpe.decode(&ids).unwrap(), line);
                let pieces = bpe.pieces(&line).unwrap();
                assert_eq!(bpe.decode_pieces(&pieces).unwrap(), line);
                lines += 1;
                tokens += ids.len();
            }
        }
    }
    (lines, tokens)
}

#[test]
fn learned_joint_vocabulary_round_trips_every_line() {
    let (en, de) = (multi30k("train.en.gz"), multi30k("train.de.gz"));
    let bpe = Bpe::learn(en.iter().chain(&de), 8000, 2).unwrap();
    assert_eq!(bpe.vocab_size(), 8000);
    // Source and target words share the one vocabulary.
    assert!(bpe.encode("Ein Mann fährt Fahrrad.").unwrap().len() <= 6);
    assert!(bpe.encode("A man rides a bicycle.").unwrap().len() <= 7);
    let dir: PathBuf = transformer::test_support::repo("data/multi30k");
    let (lines, tokens) = round_trip_every_line(&bpe, &dir, &["en", "de"]);
    assert_eq!(lines, 2 * (29_000 + 1_014 + 1_000));
    eprintln!("{lines} lines, {:.2} tokens per line", tokens as f64 / lines as f64);
    for s in [
        "",
        " ",
        "  two  spaces ",
        "\ttab\t",
        "日本語 😀 emoji",
        "Ünïcödé — «quotes»",
        "Un homme âgé regarde par la fenêtre ; ça coûte cher, dit-il.",
        "Muž v oranžové čepici stojí před dřevěnou kůlnou.",
        "line\rreturn",
        "<s> not special </s>",
    ] {
        assert_eq!(bpe.decode(&bpe.encode(s).unwrap()).unwrap(), s, "{s:?}");
    }
}

/// Extra check: every line of French and Czech (whose accents and letters an English–German
/// vocabulary has few pieces for) round-trips too, where ../shared holds them (a user's copy
/// downloads them: `transformer data multi30k`).
#[test]
fn shared_french_and_czech_round_trip_every_line() {
    let Some(dir) = transformer::test_support::shared("data/multi30k") else { return };
    let (en, de) = (multi30k("train.en.gz"), multi30k("train.de.gz"));
    let bpe = Bpe::learn(en.iter().chain(&de), 8000, 2).unwrap();
    let (lines, _) = round_trip_every_line(&bpe, &dir, &["fr", "cs"]);
    assert_eq!(lines, 2 * (29_000 + 1_014 + 1_000));
}

#[test]
fn special_ids_save_load_and_errors() {
    let text = ["a b c d e f", "the cat sat on the mat", "ein Mann fährt"];
    let bpe = Bpe::learn(text.iter(), 300, 1).unwrap();
    for (i, s) in transformer::data::bpe::SPECIALS.iter().enumerate() {
        assert_eq!(bpe.id_of(s), Some(i as u32), "{s}");
        // Text spelling a special token is encoded as text.
        assert!(!bpe.encode(s).unwrap().contains(&(i as u32)), "{s}");
    }
    assert_eq!((transformer::PAD, transformer::BOS, transformer::EOS, transformer::UNK), (0, 1, 2, 3));
    let dir = TestDir::new("transformer-bpe");
    let path = dir.join("bpe.json");
    bpe.save(&path).unwrap();
    let back = Bpe::load(&path).unwrap();
    assert_eq!(back.hash(), bpe.hash());
    assert!(bpe.hash().starts_with("sha256:"));
    assert_eq!(back.encode("the cat fährt").unwrap(), bpe.encode("the cat fährt").unwrap());
    std::fs::write(dir.join("bad.json"), "{not json").unwrap();
    let err = Bpe::load(&dir.join("bad.json")).err().unwrap().to_string();
    assert!(err.contains("bad.json") && err.contains("not a BPE model"), "{err}");
    let err = Bpe::learn(text.iter(), 100, 1).err().unwrap().to_string();
    assert!(err.contains("below the 260"), "{err}");
    let err = bpe.decode_pieces(&["nonexistent-piece"]).unwrap_err().to_string();
    assert!(err.contains("unknown piece"), "{err}");
}

/// Malformed JSON inside a decoder made `tokenizers` panic (found by fuzzing, fuzz/fuzz_targets/
/// bpe_json.rs); it is now a clear error.
#[test]
fn a_truncated_model_file_is_an_error_not_a_panic() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bpe_fuzz_crash.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let Err(err) = transformer::data::bpe::Bpe::from_json(&text, &path) else { panic!("the truncated model loaded") };
    let err = err.to_string();
    assert!(err.contains("not valid JSON") && err.contains("bpe_fuzz_crash.json"), "{err}");
}

/// A checkpoint or another binary file given as the BPE model says what it is and what to pass.
#[test]
fn a_checkpoint_or_binary_file_is_not_a_bpe_model() {
    let dir = TestDir::new("transformer-bpe-kind");
    let ckpt = dir.join("model.safetensors");
    let header = br#"{"__metadata__":{"format":"transformer-checkpoint"}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    std::fs::write(&ckpt, &bytes).unwrap();
    let err = transformer::data::bpe::Bpe::load(&ckpt).err().unwrap().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("a checkpoint") && err.contains("vocabulary file"),
        "{err}"
    );
    let bin = dir.join("random.bin");
    std::fs::write(&bin, [0xffu8, 0xfe, 0, 1, 2]).unwrap();
    let err = transformer::data::bpe::Bpe::load(&bin).err().unwrap().to_string();
    assert!(err.contains("random.bin") && err.contains("not a BPE model"), "{err}");
    // The same through the reader every verb's --bpe / --tokenizer uses (it said "stream did
    // not contain valid UTF-8").
    for (path, what) in [(&ckpt, "a checkpoint"), (&bin, "not a BPE model")] {
        let err = transformer::data::tokenizer::Tokenizer::load(path).err().unwrap().to_string();
        assert!(err.contains(path.file_name().unwrap().to_str().unwrap()) && err.contains(what), "{err}");
    }
}
