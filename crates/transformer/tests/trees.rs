//! Penn Treebank trees (§6.3): reading the project's treebank (and the Penn Treebank sample where
//! ../shared has it), preprocessing, linearisation and its inverse on every tree, and repair of any
//! token sequence into a tree over exactly the input words.

mod common;

use common::TestDir;
use std::path::{Path, PathBuf};
use transformer::data::trees::{delinearise, parse_trees, punctuation_tag, read_trees, strip_label, Tree};
use transformer::rng::Rng;

fn mrg_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mrg"))
        .collect();
    files.sort();
    files
}

fn labels(t: &Tree, out: &mut Vec<String>) {
    out.push(t.label.clone());
    t.children.iter().for_each(|c| labels(c, out));
}

fn well_formed(t: &Tree) -> bool {
    match &t.word {
        Some(_) => t.children.is_empty(),
        None => !t.children.is_empty() && t.children.iter().all(well_formed),
    }
}

/// Reads every tree of `files`, preprocesses it and checks the result (under TOP, no empty element
/// or function tag left, the raw tree's overt words) and that linearising and delinearising gives it
/// back. Returns the raw trees.
fn read_preprocess_and_linearise(files: &[PathBuf]) -> Vec<Tree> {
    let mut all = Vec::new();
    for f in files {
        for raw in read_trees(f).unwrap() {
            let t = raw.preprocess().expect("a treebank tree has words");
            assert_eq!(t.label, "TOP");
            assert!(well_formed(&t), "{}", t.to_bracketed());
            let mut l = Vec::new();
            labels(&t, &mut l);
            for label in &l {
                assert!(label != "-NONE-", "{}: an empty element survived", f.display());
                assert!(
                    label.starts_with('-') || !label.contains(['-', '=']),
                    "{}: a function tag survived in {label}",
                    f.display()
                );
            }
            let words = t.words();
            // The words are the raw tree's, less the empty elements.
            fn overt<'a>(t: &'a Tree, out: &mut Vec<&'a str>) {
                match &t.word {
                    Some(w) if t.label != "-NONE-" => out.push(w),
                    Some(_) => {}
                    None => t.children.iter().for_each(|c| overt(c, out)),
                }
            }
            let mut raw_words = Vec::new();
            overt(&raw, &mut raw_words);
            assert_eq!(words, raw_words, "{}", f.display());
            let back = delinearise(&t.linearise(), &words);
            assert_eq!(back, t, "{}: linearise → delinearise changed {}", f.display(), t.to_bracketed());
            all.push(raw);
        }
    }
    all
}

/// Trees in a file, counted independently of the reader: each begins a line with `( (`.
fn count_by_lines(files: &[PathBuf]) -> usize {
    files.iter().map(|f| std::fs::read_to_string(f).unwrap().lines().filter(|l| l.starts_with("( (")).count()).sum()
}

#[test]
fn every_owned_tree_reads_preprocesses_and_survives_linearisation() {
    let files = mrg_files(&transformer::test_support::treebank());
    assert_eq!(files.len(), 40);
    let trees = read_preprocess_and_linearise(&files);
    assert_eq!(trees.len(), count_by_lines(&files));
    assert_eq!(trees.len(), 543);
    // The treebank holds what it stands in for the Penn Treebank to test (dev/treebank/grammar.py).
    let mut all = Vec::new();
    for t in &trees {
        labels(t, &mut all);
    }
    let has = |want: &dyn Fn(&str) -> bool| all.iter().any(|l| want(l));
    assert!(has(&|l| l == "-NONE-"), "empty elements");
    assert!(has(&|l| l.starts_with("NP-SBJ-")), "function tags with indices");
    assert!(has(&|l| l.contains('=')), "gapping indices (NP=2)");
    for tag in [",", ".", ":", "``", "''", "-LRB-", "-RRB-", "$", "#", "ADVP", "PRT", "PRN", "SINV", "SBARQ"] {
        assert!(has(&|l| l == tag), "no {tag}");
    }
    fn depth(t: &Tree) -> usize {
        1 + t.children.iter().map(depth).max().unwrap_or(0)
    }
    assert!(trees.iter().map(depth).max().unwrap() >= 15, "deep nesting");
    let long = trees.iter().filter(|t| t.preprocess().unwrap().words().len() > 40).count();
    assert!(long >= 30, "{long} sentences over 40 words");
    // Unary chains after preprocessing (a clause whose subject was a trace: S over VP).
    let unary = |t: &Tree| {
        fn any(t: &Tree) -> bool {
            (t.children.len() == 1 && t.children[0].word.is_none()) || t.children.iter().any(any)
        }
        any(&t.preprocess().unwrap().children[0])
    };
    assert!(trees.iter().filter(|t| unary(t)).count() >= 50);
}

/// Extra check: the Penn Treebank sample (../shared/data/ptb-sample) reads the same way.
#[test]
fn shared_penn_treebank_sample_trees_read_preprocess_and_survive_linearisation() {
    let Some(dir) = transformer::test_support::shared("data/ptb-sample") else { return };
    let files = mrg_files(&dir);
    assert_eq!(files.len(), 189);
    // The 189 files hold 3,796 trees (counted independently by bracket depth).
    assert_eq!(read_preprocess_and_linearise(&files).len(), 3796);
}

#[test]
fn preprocessing_follows_the_documented_steps() {
    let text = "( (S (NP-SBJ-1 (-NONE- *T*-1)) (NP-SBJ=2 (NNP John)) (VP (VBD ran) (PP-LOC (-NONE- *U*)) (ADVP-TMP (RB today))) (. .)) )";
    let t = parse_trees(text, "inline").unwrap().remove(0).preprocess().unwrap();
    assert_eq!(t.to_bracketed(), "(TOP (S (NP (NNP John)) (VP (VBD ran) (ADVP (RB today))) (. .)))");
    assert_eq!(t.linearise().join(" "), "(S (NP NNP John )NP (VP VBD ran (ADVP RB today )ADVP )VP . . )S");
    assert_eq!(strip_label("NP-SBJ-1"), "NP");
    assert_eq!(strip_label("PP-LOC=2"), "PP");
    assert_eq!(strip_label("-LRB-"), "-LRB-");
    assert_eq!(strip_label("=1"), "=1", "no label becomes empty (found by fuzzing)");
    // A labelled root goes under TOP; comments between trees are skipped.
    let ts = parse_trees("% a comment\n(S (NN a))\n(S (-LRB- -LRB-) (NN b) (-RRB- -RRB-))", "inline").unwrap();
    assert_eq!(ts.len(), 2);
    assert_eq!(ts[0].preprocess().unwrap().to_bracketed(), "(TOP (S (NN a)))");
    assert_eq!(ts[1].preprocess().unwrap().words(), vec!["-LRB-", "b", "-RRB-"]);
    // Nothing but empty elements: nothing left.
    assert!(parse_trees("( (S (-NONE- *)) )", "x").unwrap()[0].preprocess().is_none());
}

#[test]
fn malformed_files_are_errors_naming_file_and_line() {
    for (text, line, what) in [
        ("( (S (NP (NN a))\n", 1, "never closed"),
        ("(S (NN a)))\n", 1, "closes no bracket"),
        ("(S (NN a))\n\n(S (NN a b))", 3, "two words"),
        ("(S (NN a)\n (NP))", 2, "neither a word nor children"),
        ("hello (S (NN a))", 1, "outside a tree"),
    ] {
        let err = parse_trees(text, "bad.mrg").unwrap_err().to_string();
        assert!(err.starts_with(&format!("bad.mrg:{line}:")) && err.contains(what), "{text:?}: {err}");
    }
}

/// Any token sequence, however malformed, becomes a well-formed tree under TOP whose leaves are
/// exactly the words, and punctuation carries its punctuation tag.
#[test]
fn any_token_sequence_becomes_a_tree_over_exactly_the_words() {
    let vocab = [
        "(S", "(NP", "(VP", "(PP", "(", ")", ")S", ")NP", ")VP", ")PP", "NN", "VBD", "DT", ",", ".", "XX", "", "dog",
        "the",
    ];
    let pool = ["the", "dog", ",", "ran", ".", "-LRB-", "quickly", "''"];
    let mut rng = Rng::new(5);
    for case in 0..3000 {
        let n_words = rng.below(8) as usize;
        let words: Vec<&str> = (0..n_words).map(|_| pool[rng.below(pool.len() as u64) as usize]).collect();
        let n_tokens = rng.below(25) as usize;
        let tokens: Vec<String> =
            (0..n_tokens).map(|_| vocab[rng.below(vocab.len() as u64) as usize].to_string()).collect();
        let t = delinearise(&tokens, &words);
        assert_eq!(t.label, "TOP");
        assert_eq!(t.words(), words, "case {case}: {tokens:?}");
        assert!(t.children.iter().all(well_formed), "case {case}: {tokens:?} gave {}", t.to_bracketed());
        fn tags<'a>(t: &'a Tree, out: &mut Vec<(&'a str, &'a str)>) {
            match &t.word {
                Some(w) => out.push((&t.label, w)),
                None => t.children.iter().for_each(|c| tags(c, out)),
            }
        }
        let mut leaves = Vec::new();
        tags(&t, &mut leaves);
        for (tag, w) in leaves {
            if let Some(p) = punctuation_tag(w) {
                assert_eq!(tag, p, "case {case}: '{w}' tagged {tag}");
            }
        }
    }
    // An empty output still covers the words.
    assert_eq!(delinearise(&[], &["a", "."]).to_bracketed(), "(TOP (XX a) (. .))");
}

/// A model's word that is not punctuation loses a tag EVALB deletes (which would make the sentence
/// a length mismatch); punctuation and the ambiguous single quote keep theirs.
#[test]
fn deleted_punctuation_tags_leave_words_that_are_not_punctuation() {
    let text = "(TOP (S (, $) (: %) (, Wa) (. 61) (, ,) ('' ') (. ?) (: --) (`` `) (NN %)))";
    let mut t = parse_trees(text, "x").unwrap().remove(0);
    assert_eq!(transformer::data::trees::retag_deleted_punctuation(&mut t), 4);
    assert_eq!(t.to_bracketed(), "(TOP (S (XX $) (XX %) (XX Wa) (XX 61) (, ,) ('' ') (. ?) (: --) (`` `) (NN %)))");
}

/// Reading, preprocessing, writing, linearising, repairing, copying, comparing and freeing a tree
/// 20,000 and 300,000 brackets deep, on a 256 KiB stack: nothing over trees recurses.
#[test]
fn trees_of_any_depth_never_overflow_the_stack() {
    let worker = std::thread::Builder::new().stack_size(256 * 1024).spawn(|| {
        for n in [20_000usize, 300_000] {
            // Function tags and empty elements at every level, for preprocessing to remove.
            let text = format!("( {}(NN w){} )\n", "(NP-SBJ-1 (-NONE- *) ".repeat(n), ")".repeat(n));
            let read = parse_trees(&text, "deep.mrg").unwrap();
            assert_eq!(read.len(), 1);
            let tree = read[0].preprocess().unwrap();
            let bracketed = format!("(TOP {}(NN w){})", "(NP ".repeat(n), ")".repeat(n));
            assert_eq!(tree.to_bracketed(), bracketed);
            assert_eq!(tree.words(), ["w"]);
            let tokens = tree.linearise();
            assert_eq!(tokens.len(), 2 * n + 2);
            assert!(transformer::data::trees::is_well_formed(&tokens, &["w"]));
            let repaired = delinearise(&tokens, &["w"]);
            assert!(repaired == tree, "the repair of a well-formed tree is the tree");
            let mut copy = tree.clone();
            assert!(copy == tree);
            assert_eq!(transformer::data::trees::retag_deleted_punctuation(&mut copy), 0);
            copy.children[0].label = "S".into();
            assert!(copy != tree);
            let reread = parse_trees(&bracketed, "again.mrg").unwrap();
            assert!(reread[0] == tree);
        } // every tree is dropped here
    });
    worker.unwrap().join().expect("no stack overflow");
}

/// A file with a byte-order mark and CRLF or CR-only line ends reads as the plain file; invalid
/// UTF-8 is an error naming its real line (never line 0).
#[test]
fn tree_files_are_read_as_meant_and_bad_bytes_name_their_line() {
    let dir = TestDir::new("transformer-trees-ends");
    let plain = "% a comment\n(S (NP (NN a))\n   (VP (VBZ runs)))\n(S (NN b))\n";
    let want = parse_trees(plain, "plain.mrg").unwrap();
    assert_eq!(want.len(), 2);
    for (name, text) in [
        ("crlf.mrg", format!("\u{feff}{}", plain.replace('\n', "\r\n"))),
        ("cr.mrg", format!("\u{feff}{}", plain.replace('\n', "\r"))),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        assert_eq!(read_trees(&p).unwrap(), want, "{name}");
    }
    let p = dir.join("bad.mrg");
    std::fs::write(&p, b"(S (NN a))\n(S (NN b))\n(S (NN c\xff))\n").unwrap();
    let e = read_trees(&p).unwrap_err().to_string();
    assert!(e.contains("bad.mrg:3:") && e.contains("byte 8"), "{e}");
}
