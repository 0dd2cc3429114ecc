//! Parity with Python's `sentencepiece` 0.2 and `transformers.MarianTokenizer`, from the fixtures
//! `dev/reference/sentencepiece_fixtures.py` writes: every Multi30k line (train, val, test 2016)
//! through small unigram and BPE models (nmt_nfkc and identity normalisers, user-defined symbols,
//! byte fallback, unused pieces, the normaliser's flags), a Unicode torture list, and Marian
//! tokenizers with a shared and with separate vocabularies.

mod common;

use common::TestDir;
use flate2::read::GzDecoder;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use transformer::data::marian_tokenizer::{MarianTokenizer, MARIAN_FORMAT};
use transformer::data::sentencepiece::SentencePiece;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sentencepiece")
}

fn gunzip(path: &Path) -> String {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    GzDecoder::new(file).read_to_string(&mut text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text
}

/// The lines of a Multi30k file, split as the fixture script splits them (on `\n` only).
fn corpus(split: &str, lang: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../data/multi30k/{split}.{lang}.gz"));
    let text = gunzip(&path);
    let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

fn records(path: &Path) -> Vec<Value> {
    gunzip(path)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn model(name: &str) -> SentencePiece {
    SentencePiece::load(&fixtures().join(format!("{name}.model"))).unwrap_or_else(|e| panic!("{e}"))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().expect("strings").iter().map(|x| x.as_str().expect("string").to_string()).collect()
}

/// Collects differences and reports the count and the first one.
#[derive(Default)]
struct Diffs {
    compared: usize,
    failures: Vec<String>,
}

impl Diffs {
    fn check<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, line: usize, text: &str, ours: T, python: T) {
        self.compared += 1;
        if ours != python {
            self.failures
                .push(format!("{what}, line {} {text:?}:\n  rust:   {ours:?}\n  python: {python:?}", line + 1));
        }
    }

    fn assert_ok(&self, what: &str) {
        assert!(
            self.failures.is_empty(),
            "{what}: {} of {} comparisons differ; the first:\n{}",
            self.failures.len(),
            self.compared,
            self.failures[0]
        );
    }
}

/// One line against its record (fields left out by the script take their default meaning).
fn check_spm_line(d: &mut Diffs, what: &str, sp: &SentencePiece, i: usize, text: &str, rec: &Value) {
    let want_ids = ids(&rec["ids"]);
    let want_pieces = match rec.get("pieces") {
        Some(p) => strings(p),
        None => want_ids.iter().map(|&id| sp.id_to_piece(id).unwrap_or("?").to_string()).collect(),
    };
    let got = sp.encode_with_ids(text);
    let got_ids: Vec<u32> = got.iter().map(|p| p.1).collect();
    let got_pieces: Vec<String> = got.into_iter().map(|p| p.0).collect();
    let dec_ids = rec.get("dec_ids").and_then(Value::as_str).unwrap_or(text);
    let dec_pieces = rec.get("dec_pieces").and_then(Value::as_str).unwrap_or(text);
    d.check(&format!("{what} ids"), i, text, &got_ids, &want_ids);
    d.check(&format!("{what} pieces"), i, text, &got_pieces, &want_pieces);
    d.check(&format!("{what} decode(ids)"), i, text, sp.decode_ids(&want_ids).ok().as_deref(), Some(dec_ids));
    d.check(&format!("{what} decode_pieces"), i, text, sp.decode_pieces(&want_pieces).as_str(), dec_pieces);
}

#[test]
fn sentencepiece_models_match_python_on_every_corpus_line() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("fixture directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(".jsonl.gz") && !name.starts_with("marian_")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 15, "expected the fixture's corpus files, found {}", files.len());
    let mut lines_total = 0;
    for file in files {
        let name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let parts: Vec<&str> = name.trim_end_matches(".jsonl.gz").split('.').collect();
        let [model_name, split, lang] = parts[..] else { panic!("unexpected fixture name {name}") };
        let sp = model(model_name);
        let lines = corpus(split, lang);
        let recs = records(&file);
        assert_eq!(lines.len(), recs.len(), "{name}: line count");
        let mut d = Diffs::default();
        for (i, (text, rec)) in lines.iter().zip(&recs).enumerate() {
            check_spm_line(&mut d, &name, &sp, i, text, rec);
        }
        d.assert_ok(&name);
        lines_total += lines.len();
    }
    eprintln!("{lines_total} corpus lines equal");
}

#[test]
fn sentencepiece_models_match_python_on_torture_strings() {
    let torture: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("torture.json")).expect("torture.json"))
            .expect("torture.json is JSON");
    let models = torture["models"].as_object().expect("models");
    assert!(models.len() >= 9);
    let mut d = Diffs::default();
    for (name, recs) in models {
        let sp = model(name);
        for (i, rec) in recs.as_array().expect("records").iter().enumerate() {
            let text = rec["text"].as_str().expect("text");
            check_spm_line(&mut d, name, &sp, i, text, rec);
        }
    }
    d.assert_ok("torture");
}

/// A Marian directory as the fixture describes it: its JSON files plus the two models.
fn marian_dir(kind: &str) -> TestDir {
    let dir = TestDir::new(&format!("spm-marian-{kind}"));
    let src = fixtures().join(format!("marian_{kind}"));
    for entry in std::fs::read_dir(&src).expect("marian fixture") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.join(path.file_name().expect("name"))).expect("copy");
    }
    std::fs::copy(fixtures().join("unigram_en.model"), dir.join("source.spm")).expect("copy");
    std::fs::copy(fixtures().join("unigram_de.model"), dir.join("target.spm")).expect("copy");
    dir
}

fn check_marian(d: &mut Diffs, what: &str, tok: &MarianTokenizer, i: usize, src: &str, tgt: &str, rec: &Value) {
    d.check(&format!("{what} source ids"), i, src, tok.encode_source(src), ids(&rec["src"]));
    d.check(&format!("{what} target ids"), i, tgt, tok.encode_target(tgt), ids(&rec["tgt"]));
    let dec = rec.get("dec").and_then(Value::as_str).unwrap_or(tgt);
    d.check(&format!("{what} decode"), i, tgt, tok.decode_target(&ids(&rec["tgt"])).as_str(), dec);
}

#[test]
fn marian_tokenizer_matches_transformers() {
    let torture: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("torture.json")).expect("torture.json"))
            .expect("torture.json is JSON");
    let mut compared_lines = 0;
    for kind in ["shared", "separate"] {
        let dir = marian_dir(kind);
        let from_dir = MarianTokenizer::from_hf_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from_dir.separate_vocabs(), kind == "separate");
        // The one-file form must behave the same.
        let file = dir.join("tokenizer.json");
        from_dir.save(&file).unwrap_or_else(|e| panic!("{e}"));
        let head = std::fs::read_to_string(&file).expect("saved file");
        assert!(head.contains(MARIAN_FORMAT));
        let from_file = MarianTokenizer::load(&file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(from_file.vocab_size(), from_dir.vocab_size());
        assert_eq!(from_file.target_vocab_size(), from_dir.target_vocab_size());
        assert_eq!((from_file.eos_id(), from_file.unk_id(), from_file.pad_id()), (0, 1, from_dir.pad_id()));

        for (label, tok) in [("dir", &from_dir), ("file", &from_file)] {
            let mut d = Diffs::default();
            for split in ["val", "test_2016_flickr"] {
                let (en, de) = (corpus(split, "en"), corpus(split, "de"));
                let recs = records(&fixtures().join(format!("marian_{kind}.{split}.jsonl.gz")));
                assert_eq!(recs.len(), en.len());
                for (i, rec) in recs.iter().enumerate() {
                    check_marian(&mut d, &format!("marian {kind} ({label}) {split}"), tok, i, &en[i], &de[i], rec);
                }
                compared_lines += recs.len();
            }
            for (i, rec) in torture["marian"][kind].as_array().expect("marian torture").iter().enumerate() {
                let (src, tgt) = (rec["src_text"].as_str().expect("src"), rec["tgt_text"].as_str().expect("tgt"));
                check_marian(&mut d, &format!("marian {kind} ({label}) torture"), tok, i, src, tgt, rec);
            }
            d.assert_ok(&format!("marian {kind} ({label})"));
        }
    }
    eprintln!("{compared_lines} Marian line pairs equal");
}

#[test]
fn bad_inputs_are_reported_clearly() {
    let err = SentencePiece::from_bytes(b"this is not a model").expect_err("garbage").to_string();
    assert!(err.contains("SentencePiece"), "{err}");
    let err = SentencePiece::load(Path::new("/nonexistent/model.spm")).expect_err("missing").to_string();
    assert!(err.contains("/nonexistent/model.spm"), "{err}");
    let dir = TestDir::new("spm-bad");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, br#"{"format": "something-else/9"}"#).expect("write");
    let err = MarianTokenizer::load(&bad).expect_err("wrong format").to_string();
    assert!(err.contains("bad.json") && err.contains(MARIAN_FORMAT), "{err}");
    let err = MarianTokenizer::from_hf_dir(&dir).expect_err("no models").to_string();
    assert!(err.contains("source.spm"), "{err}");
}
