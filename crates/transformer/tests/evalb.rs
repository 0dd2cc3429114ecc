//! §6.3 parsing F1: our EVALB against the real program's output on every case of `tests/evalb`
//! (the project's own trees, scored by EVALB: dev/evalb/fixtures.py) and, where ../shared has them,
//! of `shared/evalb-fixtures` (Penn Treebank trees): summaries from cases.tsv, every per-sentence
//! line of evalb.out, the whole stdout and the stderr messages, and where we go on where EVALB
//! aborts (cases 27, 28).

use std::path::{Path, PathBuf};
use transformer::data::trees::{parse_trees, Tree};
use transformer::eval::evalb::{score, score_trees, Params, Report, Sentence, Status, Summary};

/// The fixtures on the project's own trees.
fn fixtures() -> PathBuf {
    transformer::test_support::repo("tests/evalb")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect()
}

fn case_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    dirs
}

fn run_case(dir: &Path) -> Report {
    let (gold, test) = (lines(&dir.join("gold.txt")), lines(&dir.join("test.txt")));
    assert_eq!(gold.len(), test.len(), "{}", dir.display());
    score(&gold, &test, &Params::collins()).unwrap()
}

/// EVALB's stdout for a case.
fn evalb_out(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("evalb.out")).unwrap()
}

/// The per-sentence lines of evalb.out (between the two `====` rules, or to the end when EVALB
/// stopped before the second).
fn table(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip_while(|l| !l.starts_with("===="))
        .skip(1)
        .take_while(|l| !l.starts_with("===="))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn two(x: f64) -> String {
    if x.is_nan() {
        "-nan".into()
    } else {
        format!("{x:.2}")
    }
}

fn assert_sentence(case: &str, ours: &Sentence, theirs: &[String]) {
    assert_eq!(theirs.len(), 12, "{case}: {theirs:?}");
    let ints = [
        ours.id,
        ours.length,
        ours.status.code() as usize,
        ours.matched,
        ours.gold_brackets,
        ours.test_brackets,
        ours.crossing,
        ours.words,
        ours.correct_tags,
    ];
    let cols = [0, 1, 2, 5, 6, 7, 8, 9, 10];
    for (v, c) in ints.iter().zip(cols) {
        assert_eq!(v.to_string(), theirs[c], "{case}: line {} column {c}: {ours:?}", ours.id);
    }
    for (v, c) in [(ours.recall, 3), (ours.precision, 4), (ours.tag_accuracy, 11)] {
        assert_eq!(two(v), theirs[c], "{case}: line {} column {c}: {ours:?}", ours.id);
    }
}

/// A summary figure against cases.tsv: `%.2f` within 0.01, NaN where EVALB printed `-nan`.
fn assert_figure(case: &str, name: &str, ours: f64, theirs: &str) {
    if theirs == "-nan" {
        assert!(ours.is_nan(), "{case} {name}: ours {ours}, EVALB -nan");
    } else {
        let ours_printed: f64 = two(ours).parse().unwrap_or_else(|_| panic!("{case} {name}: ours {ours}"));
        let theirs: f64 = theirs.parse().unwrap();
        assert!((ours_printed - theirs).abs() <= 0.01 + 1e-9, "{case} {name}: ours {ours}, EVALB {theirs}");
    }
}

fn assert_summary(case: &str, block: &str, s: &Summary, row: &[&str]) {
    let count = |v: usize, t: &str, name: &str| assert_eq!(v.to_string(), t, "{case} {block} {name}");
    count(s.sentences, row[0], "sentences");
    count(s.error_sentences, row[1], "error sentences");
    count(s.skip_sentences, row[2], "skip sentences");
    assert_eq!(s.valid_sentences, s.sentences - s.error_sentences - s.skip_sentences);
    assert_figure(case, &format!("{block} recall"), s.recall, row[3]);
    assert_figure(case, &format!("{block} precision"), s.precision, row[4]);
    assert_figure(case, &format!("{block} fmeasure"), s.fmeasure, row[5]);
    assert_figure(case, &format!("{block} complete match"), s.complete_match, row[6]);
    assert_figure(case, &format!("{block} tagging accuracy"), s.tagging_accuracy, row[7]);
}

#[test]
fn every_case_matches_evalb_summary_and_every_sentence_line() {
    every_case_matches_evalb(&fixtures());
}

/// Extra check: the same on the cases of Penn Treebank trees in ../shared/evalb-fixtures.
#[test]
fn shared_every_penn_treebank_case_matches_evalb_summary_and_every_sentence_line() {
    let Some(root) = transformer::test_support::shared("evalb-fixtures") else { return };
    every_case_matches_evalb(&root);
}

fn every_case_matches_evalb(root: &Path) {
    let tsv = std::fs::read_to_string(root.join("cases.tsv")).unwrap();
    let mut rows = tsv.lines();
    let header: Vec<&str> = rows.next().unwrap().split('\t').collect();
    assert_eq!(header[3], "all_sentences");
    assert_eq!(header[11], "le40_sentences");
    let dirs = case_dirs(root);
    assert_eq!(dirs.len(), 28, "every fixture case is here");
    let mut seen = 0;
    for row in rows {
        let row: Vec<&str> = row.split('\t').collect();
        let case = row[0];
        let dir = root.join(case);
        assert!(dirs.contains(&dir), "{case}");
        seen += 1;
        let report = run_case(&dir);
        let gold_lines = lines(&dir.join("gold.txt")).len();
        assert_eq!(report.sentences.len(), gold_lines, "{case}: ours scores every line");
        let expected = table(&evalb_out(&dir));
        if row[2] == "0" {
            assert_summary(case, "All", &report.all, &row[3..11]);
            assert_summary(case, "len<=40", &report.short, &row[11..19]);
            assert_eq!(expected.len(), report.sentences.len(), "{case}");
            assert_eq!(report.evalb_abort_line, None, "{case}");
        } else {
            assert_eq!(row[3], "NA", "{case}: EVALB printed no summary");
            // EVALB printed the lines before the one it stopped on; ours goes on to the end.
            let abort = report.evalb_abort_line.unwrap_or_else(|| panic!("{case}: EVALB aborts here"));
            assert_eq!(abort, expected.len() + 1, "{case}: EVALB stopped on line {}", expected.len() + 1);
            assert!(report.sentences[abort - 1].status == Status::Error, "{case}");
            assert!(report.all.sentences == gold_lines && report.all.error_sentences > 0, "{case}");
        }
        for (ours, theirs) in report.sentences.iter().zip(&expected) {
            assert_sentence(case, ours, theirs);
        }
    }
    assert_eq!(seen, dirs.len());
}

/// Beyond the figures: our stdout is EVALB's byte for byte, and our messages are its stderr.
#[test]
fn stdout_and_stderr_are_evalbs_exactly_where_it_runs_to_the_end() {
    stdout_and_stderr_are_evalbs(&fixtures());
}

/// Extra check: the same on the cases of Penn Treebank trees in ../shared/evalb-fixtures.
#[test]
fn shared_stdout_and_stderr_are_evalbs_exactly_on_the_penn_treebank_cases() {
    let Some(root) = transformer::test_support::shared("evalb-fixtures") else { return };
    stdout_and_stderr_are_evalbs(&root);
}

fn stdout_and_stderr_are_evalbs(root: &Path) {
    for dir in case_dirs(root) {
        let report = run_case(&dir);
        let expected_err = std::fs::read_to_string(dir.join("evalb.err")).unwrap_or_default();
        let expected_err: Vec<&str> = expected_err.lines().collect();
        let case = dir.file_name().unwrap().to_string_lossy().into_owned();
        if report.evalb_abort_line.is_some() {
            // EVALB wrote the messages up to the one it died on; ours agree up to its loop.
            let ours = report.error_lines();
            let common = if case.starts_with("28") { 2 } else { expected_err.len() };
            assert_eq!(&ours[..common], &expected_err[..common], "{case}");
            continue;
        }
        let mut out = Vec::new();
        report.write_evalb(&mut out, false).unwrap();
        let out = String::from_utf8(out).unwrap();
        let expected = evalb_out(&dir);
        for (i, (a, b)) in out.lines().zip(expected.lines()).enumerate() {
            assert_eq!(a, b, "{case}: stdout line {}", i + 1);
        }
        assert_eq!(out, expected, "{case}");
        assert_eq!(report.error_lines(), expected_err, "{case}: stderr");
        let mut summary = Vec::new();
        report.write_evalb(&mut summary, true).unwrap();
        let summary = String::from_utf8(summary).unwrap();
        assert!(summary.starts_with("=== Summary ===") && expected.ends_with(&summary), "{case}");
    }
}

/// Case 27: twelve word mismatches; EVALB stops at the 12th message (line 14), we score all 14.
#[test]
fn too_many_errors_do_not_stop_us() {
    too_many_errors(&fixtures(), "Words unmatch (Brenna|BRENNA)");
}

/// Extra check: the same on the Penn Treebank case.
#[test]
fn shared_too_many_errors_do_not_stop_us_on_the_penn_treebank_case() {
    let Some(root) = transformer::test_support::shared("evalb-fixtures") else { return };
    too_many_errors(&root, "Words unmatch (trading|TRADING)");
}

fn too_many_errors(root: &Path, last_error: &str) {
    let report = run_case(&root.join("27-max-error-abort"));
    assert_eq!(report.evalb_abort_line, Some(14));
    assert_eq!(report.sentences.len(), 14);
    assert_eq!(report.all.error_sentences, 12);
    assert_eq!(report.all.valid_sentences, 2);
    let last = &report.sentences[13];
    assert_eq!(last.status, Status::Error);
    assert_eq!(last.errors, [last_error]);
    assert_eq!(report.all.recall, 100.0);
}

/// Case 28: a word outside a preterminal; EVALB loops on it until it aborts; for us the line is an
/// error sentence and the lines after it are scored.
#[test]
fn a_malformed_line_is_an_error_sentence() {
    a_malformed_line(&fixtures());
}

/// Extra check: the same on the Penn Treebank case.
#[test]
fn shared_a_malformed_line_is_an_error_sentence_in_the_penn_treebank_case() {
    let Some(root) = transformer::test_support::shared("evalb-fixtures") else { return };
    a_malformed_line(&root);
}

fn a_malformed_line(root: &Path) {
    let dir = root.join("28-malformed-line-abort");
    let report = run_case(&dir);
    assert_eq!(report.evalb_abort_line, Some(8));
    let bad = &report.sentences[7];
    assert_eq!(bad.status, Status::Error);
    assert_eq!(bad.errors[..2], ["More than two elements in a bracket", "Reading sentence"]);
    assert_eq!(report.all.error_sentences, 1);
    assert_eq!(report.all.sentences, lines(&dir.join("gold.txt")).len());
    assert!(report.sentences[8..].iter().all(|s| s.status == Status::Ok));
}

/// Whatever a line holds, it becomes a sentence (an error where it is not a tree); no panic.
#[test]
fn garbage_never_panics() {
    let gold = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))".to_string();
    let bad = [
        "",
        "   ",
        "(",
        ")",
        "((((",
        "))))",
        "(S",
        "(S (NP",
        "word",
        "(S a b c)",
        "(NP (DT The) (NN cat)))",
        "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))",
        ")(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat))))(",
        "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .))))",
        "(\u{e9}\u{e9} (\u{1f600} \u{e9}))",
        "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))) (X",
        "(TOP (S (NP (DT The) (NN cat) (VP (VBD sat)",
    ];
    for b in bad {
        for (g, t) in [(gold.clone(), b.to_string()), (b.to_string(), gold.clone()), (b.to_string(), b.to_string())] {
            let report = score(std::slice::from_ref(&g), std::slice::from_ref(&t), &Params::collins()).unwrap();
            assert_eq!(report.sentences.len(), 1, "{g} | {t}");
            let mut out = Vec::new();
            report.write_evalb(&mut out, false).unwrap();
        }
        if !b.trim().is_empty() {
            let report = score(std::slice::from_ref(&gold), &[b.to_string()], &Params::collins()).unwrap();
            assert_ne!(report.sentences[0].status, Status::Ok, "{b}");
        }
    }
}

/// `score_trees` is `score` on the bracketed trees with COLLINS.prm: the preprocessed raw trees of
/// a case score 100 against themselves, and a flattened copy scores below.
#[test]
fn score_trees_matches_score_on_bracketed_lines() {
    let dir = fixtures().join("24-model-10pct-rawgold");
    let text = std::fs::read_to_string(dir.join("gold.txt")).unwrap();
    let gold: Vec<Tree> = parse_trees(&text, "gold.txt").unwrap().iter().map(|t| t.preprocess().unwrap()).collect();
    let report = score_trees(&gold, &gold).unwrap();
    assert_eq!(report.all.fmeasure, 100.0);
    assert_eq!(report.all.sentences, gold.len());
    let flat: Vec<Tree> = gold
        .iter()
        .map(|t| {
            fn leaves(t: &Tree, out: &mut Vec<Tree>) {
                match &t.word {
                    Some(_) => out.push(t.clone()),
                    None => t.children.iter().for_each(|c| leaves(c, out)),
                }
            }
            let mut l = Vec::new();
            leaves(t, &mut l);
            Tree::node("TOP", vec![Tree::node("S", l)])
        })
        .collect();
    let report = score_trees(&gold, &flat).unwrap();
    let lines = |ts: &[Tree]| ts.iter().map(Tree::to_bracketed).collect::<Vec<_>>();
    assert_eq!(report, score(&lines(&gold), &lines(&flat), &Params::collins()).unwrap());
    assert!(report.all.fmeasure < 50.0 && report.all.precision > report.all.recall, "{:?}", report.all);
    assert_eq!(report.all.error_sentences, 0);
}

/// A random tree over `words` words as a bracketed string (unary chains and the labels `ADVP` and
/// `PRT`, which COLLINS.prm makes equal, included), with its brackets as (start, end, label).
fn random_tree(
    rng: &mut transformer::rng::Rng,
    start: usize,
    words: usize,
    out: &mut String,
    brackets: &mut Vec<(usize, usize, String)>,
) {
    const LABELS: [&str; 5] = ["NP", "VP", "ADVP", "PRT", "S"];
    let label = LABELS[rng.below(LABELS.len() as u64) as usize];
    brackets.push((start, start + words, label.to_string()));
    out.push_str(&format!("({label} "));
    if words == 1 && rng.below(2) == 0 {
        out.push_str(&format!("(NN w{start})"));
    } else if rng.below(4) == 0 {
        random_tree(rng, start, words, out, brackets); // a unary chain
    } else {
        let mut at = start;
        while at < start + words {
            let n = 1 + rng.below((start + words - at) as u64) as usize;
            if n == 1 && rng.below(2) == 0 {
                out.push_str(&format!("(NN w{at})"));
            } else {
                random_tree(rng, at, n, out, brackets);
            }
            at += n;
        }
    }
    out.push(')');
}

/// Matching (one-to-one, greedy in gold order) and crossing brackets equal the quadratic
/// definitions on random trees with unary chains and equal labels.
#[test]
fn matching_and_crossing_equal_their_quadratic_definitions() {
    let mut rng = transformer::rng::Rng::new(7);
    let eq = |a: &str, b: &str| a == b || matches!((a, b), ("ADVP", "PRT") | ("PRT", "ADVP"));
    for case in 0..300 {
        let words = 1 + rng.below(12) as usize;
        let (mut g, mut gb, mut t, mut tb) = (String::new(), Vec::new(), String::new(), Vec::new());
        random_tree(&mut rng, 0, words, &mut g, &mut gb);
        random_tree(&mut rng, 0, words, &mut t, &mut tb);
        let (g, t) = (format!("(TOP {g})"), format!("(TOP {t})"));
        let mut taken = vec![false; tb.len()];
        let mut matched = 0;
        for (s, e, l) in &gb {
            if let Some(i) = (0..tb.len()).find(|&i| !taken[i] && tb[i].0 == *s && tb[i].1 == *e && eq(l, &tb[i].2)) {
                taken[i] = true;
                matched += 1;
            }
        }
        let crosses = |(gs, ge): (usize, usize), (ts, te): (usize, usize)| {
            (gs < ts && ge > ts && ge < te) || (gs > ts && gs < te && ge > te)
        };
        let crossing = tb.iter().filter(|b| gb.iter().any(|a| crosses((a.0, a.1), (b.0, b.1)))).count();
        let report = score(std::slice::from_ref(&g), std::slice::from_ref(&t), &Params::collins()).unwrap();
        let s = &report.sentences[0];
        assert_eq!(s.status, Status::Ok, "case {case}: {g} | {t}");
        assert_eq!(
            (s.matched, s.gold_brackets, s.test_brackets),
            (matched, gb.len(), tb.len()),
            "case {case}: {g} | {t}"
        );
        assert_eq!(s.crossing, crossing, "case {case}: {g} | {t}");
    }
}

/// A line 300,000 brackets deep and one of 200,000 words score in time linear in their length,
/// with a note that EVALB itself would have failed on them (and none on ordinary lines).
#[test]
fn very_long_lines_score_in_linear_time_with_a_note() {
    let n = 300_000;
    let deep = format!("(TOP {}(NN w){})", "(X ".repeat(n), ")".repeat(n));
    let wide = format!("(TOP (S {}))", "(NN w) ".repeat(200_000));
    let ordinary = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))".to_string();
    let lines = [ordinary.clone(), deep, wide, ordinary];
    let start = std::time::Instant::now();
    let report = score(&lines, &lines, &Params::collins()).unwrap();
    assert!(start.elapsed().as_secs_f64() < 30.0, "{:?}", start.elapsed());
    for s in &report.sentences {
        assert_eq!((s.status, s.recall, s.precision, s.crossing), (Status::Ok, 100.0, 100.0, 0), "{:?}", s.errors);
    }
    assert_eq!(report.sentences[1].matched, n);
    assert_eq!(report.sentences[2].words, 200_000);
    let lines_past: Vec<usize> = report.evalb_limit_lines.iter().map(|(l, _)| *l).collect();
    assert_eq!(lines_past, [2, 3]);
    assert!(
        report.evalb_limit_lines[0].1.starts_with("gold: ")
            && report.evalb_limit_lines[0].1.contains("bytes on the line")
    );
    let note = report.evalb_limit_note().unwrap();
    assert!(note.contains("failed on 2 lines") && note.contains("first: line 2"), "{note}");

    // Each limit alone, on lines shorter than EVALB's buffer.
    let cases = [
        (format!("(TOP (S {}))", "(NN w) ".repeat(201)), "201 words"),
        (format!("(TOP {}(NN w){})", "(X ".repeat(200), ")".repeat(200)), "201 brackets"),
        (format!("(TOP (S (NN {})))", "w".repeat(100)), "a word of 100 bytes"),
        (format!("(TOP (S (NN{} w)))", "N".repeat(28)), "a label of 30 bytes"),
        (format!("(TOP (S {}))", "(NN w) ".repeat(200)), ""),
        (format!("(TOP (S (NN {})))", "w".repeat(99)), ""),
    ];
    for (line, reason) in cases {
        let report = score(std::slice::from_ref(&line), std::slice::from_ref(&line), &Params::collins()).unwrap();
        match report.evalb_limit_lines.first() {
            Some((1, r)) => assert!(!reason.is_empty() && r.contains(reason), "{r} for {reason:?}"),
            None => assert!(reason.is_empty(), "no note for {reason:?}"),
            other => panic!("{other:?}"),
        }
    }
}

/// Gold and test trees that do not pair up line for line are an input error naming both counts,
/// for the line scorer and the tree scorer alike: nothing is scored, nothing is left out quietly.
#[test]
fn gold_and_test_of_different_counts_are_an_input_error() {
    let gold = vec!["(S (NP (DT the) (NN cat)) (VP (VBD sat)))".to_string(), "(S (VP (VB go)))".to_string()];
    let e = score(&gold, &gold[..1], &Params::collins()).unwrap_err();
    assert!(matches!(e, transformer::Error::Input(_)), "{e:?}");
    assert!(e.to_string().contains("2 gold trees and 1 test trees"), "{e}");
    let trees = parse_trees(&gold.join("\n"), "gold").unwrap();
    let e = score_trees(&trees[..1], &trees).unwrap_err();
    assert!(e.to_string().contains("1 gold trees and 2 test trees"), "{e}");
    assert_eq!(score(&gold, &gold, &Params::collins()).unwrap().all.fmeasure, 100.0);
}
