//! The `transformer` binary end to end.

mod common;

use common::{bin, transformer, TestDir};
use std::process::Command;

#[test]
fn params_prints_exact_counts_and_json() {
    let (ok, out, _) = transformer(&["params", "--preset", "base", "--vocab", "37000"]);
    assert!(ok);
    assert!(out.contains("63082496"), "{out}");
    let (ok, out, _) = transformer(&["params", "--all", "--json"]);
    assert!(ok);
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 20);
    let big = rows.iter().find(|r| r["preset"] == "big").unwrap();
    assert_eq!(big["params"], 214245376);
    assert_eq!(big["paper_params_millions"], 213.0);
    assert_eq!(big["config"]["d_model"], 1024);
}

/// The exit code and stderr of a run.
fn exit_code(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(common::bin()).args(args).output().expect("runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn unknown_preset_is_a_clear_error() {
    let (code, err) = exit_code(&["params", "--preset", "huge"]);
    assert_eq!(code, Some(2), "a usage error: {err}");
    assert!(err.contains("'huge'") && err.contains("base, a1, a2"), "{err}");
}

/// Choices are parsed against the library's lists: a typo is a usage error (exit 2) naming them;
/// a usage mistake found after parsing is exit 2 too; a runtime error is exit 1.
#[test]
fn exit_codes_tell_usage_errors_from_runtime_errors() {
    for (args, names) in [
        (vec!["bleu", "--ref", "r", "--hyp", "h", "--tokenize", "14a"], "13a, intl, char, none"),
        (vec!["bleu", "--ref", "r", "--hyp", "h", "--smooth", "add-one"], "exp, floor, add-k, none"),
        (vec!["bleu", "--ref", "r", "--hyp", "h", "--metrics", "bleu,ter"], "bleu, chrf, tokenized-bleu"),
        (vec!["synthetic", "--task", "sort"], "copy, reverse"),
        (vec!["translate", "--checkpoint", "c", "--bpe", "b", "--precision", "f16"], "f32, bf16"),
        (vec!["translate", "--checkpoint", "c", "--bpe", "b", "--task", "parse"], "translation"),
        (vec!["translate", "--checkpoint", "c", "--bpe", "b", "--preset", "fast"], "translation, parsing, greedy"),
    ] {
        let (code, err) = exit_code(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(names), "{args:?} should list {names}: {err}");
    }
    for (flag, value) in [("--beam", "4294967295"), ("--max-len-b", "18446744073709551615"), ("--max-len-a", "1e300")] {
        let (code, err) = exit_code(&["translate", "--checkpoint", "c", "--bpe", "b", flag, value]);
        assert_eq!(code, Some(2), "{flag} {value}: {err}");
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
    for (args, flag) in [
        (vec!["prepare", "--src", "s", "--tgt", "t", "--bpe", "b", "--out", "o", "--max-ratio", "nan"], "--max-ratio"),
        (vec!["prepare", "--src", "s", "--tgt", "t", "--bpe", "b", "--out", "o", "--max-ratio", "0.5"], "--max-ratio"),
        (vec!["prepare", "--src", "s", "--tgt", "t", "--bpe", "b", "--out", "o", "--max-tokens", "0"], "--max-tokens"),
        (vec!["average", "--last", "0", "dir", "--output", "x"], "--last"),
        (vec!["ablate", "--seeds", "0"], "--seeds"),
        (vec!["ablate", "--updates", "0"], "--updates"),
        (vec!["ablate", "--minutes", "0"], "--minutes"),
        (vec!["ablate", "--minutes", "1", "--updates", "5"], "--updates"),
        (vec!["ablate", "--rows", "A,F"], "unknown row 'F'"),
        (vec!["ablate", "--rows", "big"], "not a variation of base"),
        (vec!["bleu", "--ref", "r", "--hyp", "h", "--smooth", "floor", "--smooth-value", "nan"], "--smooth-value"),
    ] {
        let (code, err) = exit_code(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?} should name {flag}: {err}");
    }
    let (code, err) = exit_code(&["average", "--output", "x.safetensors"]);
    assert_eq!(code, Some(2), "average without inputs: {err}");
    assert!(err.contains("--last K DIR or --inputs"), "{err}");
    let (code, err) =
        exit_code(&["translate", "--checkpoint", "/nonexistent.safetensors", "--bpe", "/nonexistent.json"]);
    assert_eq!(code, Some(1), "a missing file is a runtime error: {err}");
}

/// `bytes` written to the file `name` in `dir` (a test's [`TestDir`]).
fn tmp(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn bleu_prints_sacrebleu_lines() {
    let files = TestDir::new("transformer-cli");
    let r = tmp(&files, "ref.txt", "The cat sat on the mat.\nA man is riding a bicycle down the street.\n".as_bytes());
    let h = tmp(&files, "hyp.txt", "The cat sat on a mat.\nA man rides a bike down the street.\n".as_bytes());
    let (ok, out, err) =
        transformer(&["bleu", "--ref", r.to_str().unwrap(), "--hyp", h.to_str().unwrap(), "--metrics", "bleu,chrf"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // Values from sacrebleu 2.6.0 on the same two lines.
    assert_eq!(lines[0], "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = 39.40 81.2/57.1/33.3/20.0 (BP = 0.939 ratio = 0.941 hyp_len = 16 ref_len = 17)");
    assert!(
        lines[1].starts_with("chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0 = "),
        "{}",
        lines[1]
    );
}

#[test]
fn bleu_reports_misaligned_and_non_utf8_files() {
    let files = TestDir::new("transformer-cli");
    let r = tmp(&files, "ref2.txt", b"one\ntwo\n");
    let h = tmp(&files, "hyp2.txt", b"one\n");
    let (ok, _, err) = transformer(&["bleu", "--ref", r.to_str().unwrap(), "--hyp", h.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("ref2.txt has 2 lines but") && err.contains("hyp2.txt has 1"), "{err}");
    let bad = tmp(&files, "bad.txt", b"fine\nbro\xffken\n");
    let (ok, _, err) = transformer(&["bleu", "--ref", bad.to_str().unwrap(), "--hyp", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.txt:2: invalid UTF-8"), "{err}");
}

#[test]
fn bpe_learn_apply_decode_round_trip() {
    let files = TestDir::new("transformer-cli");
    let text = "Ein Mann fährt Fahrrad.\nA man rides a bicycle.\n  two  spaces \n\nÜnïcödé 日本語 😀\n";
    let input = tmp(&files, "bpe-in.txt", text.as_bytes());
    // The model goes into a directory that does not exist yet: `learn` creates it.
    let model = input.with_file_name("new-dir").join("bpe-model.json");
    let (ok, _, err) = transformer(&[
        "bpe",
        "learn",
        "--input",
        input.to_str().unwrap(),
        "--vocab-size",
        "300",
        "--min-frequency",
        "1",
        "--output",
        model.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(!err.contains("warning"), "{err}");
    // A text with too few distinct pairs for the size asked: a warning, and the smaller model.
    let tiny = tmp(&files, "bpe-tiny.txt", b"ab ab\n");
    let tiny_model = tiny.with_file_name("bpe-tiny.json");
    let (t, m) = (tiny.to_str().unwrap(), tiny_model.to_str().unwrap());
    let (ok, _, err) = transformer(&["bpe", "learn", "--input", t, "--vocab-size", "300", "--output", m]);
    assert!(ok, "{err}");
    assert!(
        err.contains("warning: learned 2") && err.contains("fewer than the 300 asked: the text has too few"),
        "{err}"
    );
    let (ok, pieces, err) =
        transformer(&["bpe", "apply", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(pieces.lines().count(), 5);
    let piece_file = tmp(&files, "bpe-pieces.txt", pieces.as_bytes());
    let (ok, restored, err) =
        transformer(&["bpe", "decode", "--model", model.to_str().unwrap(), "--input", piece_file.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(restored, text);
    let bad = tmp(&files, "bpe-bad.txt", b"ok\nbro\xffken\n");
    let (ok, _, err) =
        transformer(&["bpe", "apply", "--model", model.to_str().unwrap(), "--input", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("bpe-bad.txt:2: invalid UTF-8"), "{err}");
    // A missing file is named once, with its cause once.
    let missing = input.with_file_name("no-such-model.json");
    let (ok, _, err) =
        transformer(&["bpe", "apply", "--model", missing.to_str().unwrap(), "--input", input.to_str().unwrap()]);
    assert!(!ok && err.contains("no-such-model.json"), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn train_then_translate_keeps_line_order_and_empty_lines() {
    let files = TestDir::new("transformer-cli");
    let dir = TestDir::new("transformer-cli-translate");
    let (ckpt, bpe) = common::train_tiny_translator(&dir);
    let data = transformer::test_support::repo("data/multi30k");
    let long_line = "A man is riding a bicycle. ".repeat(30);
    let input = tmp(
        &files,
        "translate-in.txt",
        format!("A man is riding a bicycle.\n\nTwo dogs play.\n{long_line}\n").as_bytes(),
    );
    let (ck, bp, inp) = (ckpt.to_str().unwrap(), bpe.to_str().unwrap(), input.to_str().unwrap());
    let (ok, out, err) = transformer(&["translate", "--checkpoint", ck, "--bpe", bp, "--input", inp, "--speed"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.split('\n').collect();
    assert_eq!(lines.len(), 5, "four lines and the final newline: {out:?}");
    assert!(!lines[0].is_empty() && lines[1].is_empty() && !lines[2].is_empty() && !lines[3].is_empty(), "{out:?}");
    assert!(err.contains("translated 4 sentences") && err.contains("beam 4, α 0.6"), "{err}");
    // The long line exceeds max_positions = 128 and is translated in chunks, with a warning.
    assert!(err.contains("warning: sentence 4:") && err.contains("chunks"), "{err}");
    // The same lines with a byte-order mark, CR-only or CRLF line ends and a whitespace-only line
    // for the empty one: read as the user means them, the same translations.
    for (name, text) in [
        ("translate-cr.txt", format!("\u{feff}A man is riding a bicycle.\r   \t\rTwo dogs play.\r{long_line}\r")),
        ("translate-crlf.txt", format!("\u{feff}A man is riding a bicycle.\r\n \r\nTwo dogs play.\r\n{long_line}")),
    ] {
        let other = tmp(&files, name, text.as_bytes());
        let (ok, same, err) =
            transformer(&["translate", "--checkpoint", ck, "--bpe", bp, "--input", other.to_str().unwrap()]);
        assert!(ok, "{err}");
        assert_eq!(same, out, "{name}");
    }

    // Greedy is beam 1; the n-best list has the format `index ||| text ||| log P ||| score`.
    let (ok, greedy, err) =
        transformer(&["translate", "--checkpoint", ck, "--bpe", bp, "--input", inp, "--preset", "greedy"]);
    assert!(ok, "{err}");
    let (ok, beam1, err) = transformer(&["translate", "--checkpoint", ck, "--bpe", bp, "--input", inp, "--beam", "1"]);
    assert!(ok, "{err}");
    assert_eq!(greedy, beam1);
    let (ok, nbest, err) = transformer(&["translate", "--checkpoint", ck, "--bpe", bp, "--input", inp, "--nbest", "3"]);
    assert!(ok, "{err}");
    let rows: Vec<Vec<&str>> = nbest.lines().map(|l| l.split(" ||| ").collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 4), "{nbest}");
    assert_eq!(rows.iter().filter(|r| r[0] == "0").count(), 3, "{nbest}");
    let empty: Vec<_> = rows.iter().filter(|r| r[0] == "1").collect();
    assert_eq!(empty.len(), 3, "the empty line has N (empty) hypotheses: {nbest}");
    assert!(empty.iter().all(|r| r[1].is_empty() && r[2].parse::<f64>().unwrap() == 0.0), "{nbest}");
    let scores: Vec<f64> = rows.iter().filter(|r| r[0] == "0").map(|r| r[3].parse().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "n-best not sorted: {scores:?}");
    let (ok, _, err) = transformer(&["translate", "--checkpoint", ck, "--bpe", bp, "--input", inp, "--nbest", "5"]);
    assert!(!ok && err.contains("nbest must be between 1 and the beam size 4"), "{err}");

    // int8: quantised at load, or once by `quantize` into a checkpoint that loads without
    // quantising and decodes the same; that checkpoint decodes at int8 only, and does not train or
    // average.
    let (ok, int8, err) = transformer(&[
        "translate",
        "--checkpoint",
        ck,
        "--bpe",
        bp,
        "--input",
        inp,
        "--precision",
        "int8",
        "--profile",
    ]);
    assert!(ok, "{err}");
    assert_eq!(int8.split('\n').count(), 5, "{int8:?}");
    assert!(
        err.contains("memory at int8 (MB):") && err.contains("prepared weights:") && err.contains("process peak RSS"),
        "{err}"
    );
    // At f32 the profile puts the products' rate against the FMA unit's peak, measured then.
    let (ok, _, err) = transformer(&["translate", "--checkpoint", ck, "--bpe", bp, "--input", inp, "--profile"]);
    assert!(ok, "{err}");
    let matmul = err.lines().find(|l| l.trim_start().starts_with("matmul:")).unwrap_or_else(|| panic!("{err}"));
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("fma") {
        assert!(matmul.contains("GFLOP/s") && matmul.contains("% of the f32 FMA peak of "), "{matmul}");
    }
    let q = dir.join("int8.safetensors");
    let (ok, _, err) = transformer(&["quantize", "--checkpoint", ck, "--output", q.to_str().unwrap()]);
    assert!(ok && err.contains("decode it with --precision int8"), "{err}");
    let qs = q.to_str().unwrap();
    let (ok, same, err) =
        transformer(&["translate", "--checkpoint", qs, "--bpe", bp, "--input", inp, "--precision", "int8"]);
    assert!(ok, "{err}");
    assert_eq!(same, int8, "the int8 checkpoint decodes as the f32 one quantised at load");
    let (ok, _, err) = transformer(&["translate", "--checkpoint", qs, "--bpe", bp, "--input", inp]);
    assert!(!ok && err.contains("is an int8 checkpoint") && err.contains("--precision int8"), "{err}");
    let avg = dir.join("avg.safetensors");
    let (ok, _, err) = transformer(&["average", "--inputs", qs, ck, "--output", avg.to_str().unwrap()]);
    assert!(!ok && err.contains("is an int8 checkpoint") && err.contains("need the f32 checkpoint"), "{err}");

    // evaluate on an empty test set: a clear message, no score made up from nothing.
    let empty = tmp(&files, "empty.txt", b"");
    let e = empty.to_str().unwrap();
    let (ok, out, err) = transformer(&["evaluate", "--checkpoint", ck, "--bpe", bp, "--src", e, "--ref", e]);
    assert!(!ok && err.contains("no sentences") && !out.contains("BLEU") && !out.contains("NaN"), "{out}{err}");

    // evaluate: sacreBLEU BLEU and chrF, tokenized BLEU and perplexity.
    let src = data.join("test_2016_flickr.en.gz");
    let reference = data.join("test_2016_flickr.de.gz");
    let hyp = dir.join("hyp.de");
    let (ok, out, err) = transformer(&[
        "evaluate",
        "--checkpoint",
        ck,
        "--bpe",
        bp,
        "--src",
        src.to_str().unwrap(),
        "--ref",
        reference.to_str().unwrap(),
        "--output",
        hyp.to_str().unwrap(),
        "--preset",
        "greedy",
        "--by-length",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = "), "{out}");
    // --by-length: one line per bucket of source words, together every test sentence.
    let buckets: Vec<&str> = out.lines().filter(|l| l.starts_with("source words ")).collect();
    let ranges: Vec<&str> = buckets.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
    assert_eq!(ranges, ["1–8", "9–12", "13–16", "17–24", "25+"], "{out}");
    let counted: usize = buckets
        .iter()
        .filter_map(|l| l.split_once('('))
        .map(|(_, r)| r.split(' ').next().unwrap().parse::<usize>().unwrap())
        .sum();
    assert_eq!(counted, 1000, "{out}");
    assert!(buckets.iter().all(|l| l.contains("): BLEU|nrefs:1|")), "{out}");
    assert!(out.contains("chrF2|nrefs:1|"), "{out}");
    assert!(out.contains("tokenized-BLEU|nrefs:1|case:lc|tok:13a|smooth:none"), "{out}");
    let ppl: f64 = out.split("perplexity = ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    // 20 steps of training: far from good, far better than uniform over 600 tokens.
    assert!(ppl > 1.0 && ppl < 600.0, "{out}");
    assert_eq!(std::fs::read_to_string(&hyp).unwrap().lines().count(), 1000);

    if cfg!(not(feature = "heatmap")) {
        return; // a binary without the `heatmap` feature has no PNG heatmaps
    }
    // attention: one PNG per kind, layer and head (1 layer, 2 heads), or only the asked-for one.
    let maps = dir.join("maps");
    let (ok, out, err) = transformer(&[
        "attention",
        "--checkpoint",
        ck,
        "--bpe",
        bp,
        "--src",
        "A man is riding a bicycle.",
        "--out",
        maps.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("6 heatmaps written") && err.contains("translation: "), "{out}{err}");
    for kind in ["enc-self", "dec-self", "enc-dec"] {
        for h in [1, 2] {
            let bytes = std::fs::read(maps.join(format!("{kind}-layer1-head{h}.png"))).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        }
    }
    let one = dir.join("one");
    let (ok, out, err) = transformer(&[
        "attention",
        "--checkpoint",
        ck,
        "--bpe",
        bp,
        "--src",
        "Two dogs.",
        "--tgt",
        "Zwei Hunde.",
        "--head",
        "2",
        "--out",
        one.to_str().unwrap(),
    ]);
    assert!(ok && out.contains("3 heatmaps written"), "{out}{err}");
    let (ok, _, err) =
        transformer(&["attention", "--checkpoint", ck, "--bpe", bp, "--src", "x", "--layer", "2", "--out", "/tmp"]);
    assert!(!ok && err.contains("--layer 2: the model has 1 layers"), "{err}");
}

/// `parse-eval` prints EVALB's report: byte for byte EVALB's stdout on every fixture case it runs
/// to the end, its messages on stderr; `--summary-only` keeps the summary; misaligned and non-UTF-8
/// files are errors.
#[test]
fn parse_eval_prints_evalbs_report() {
    let files = TestDir::new("transformer-cli");
    let fixtures = transformer::test_support::repo("tests/evalb");
    let mut compared = 0;
    for row in std::fs::read_to_string(fixtures.join("cases.tsv")).unwrap().lines().skip(1) {
        let (name, exit_status) = (row.split('\t').next().unwrap(), row.split('\t').nth(2).unwrap());
        if exit_status != "0" {
            continue; // EVALB aborted there (cases 27 and 28): see below
        }
        let case = fixtures.join(name);
        let (gold, test) = (case.join("gold.txt"), case.join("test.txt"));
        let (ok, out, err) =
            transformer(&["parse-eval", "--gold", gold.to_str().unwrap(), "--test", test.to_str().unwrap()]);
        assert!(ok, "{name}: {err}");
        assert_eq!(out, std::fs::read_to_string(case.join("evalb.out")).unwrap(), "{name}: stdout");
        assert_eq!(err, std::fs::read_to_string(case.join("evalb.err")).unwrap_or_default(), "{name}: stderr");
        compared += 1;
    }
    assert_eq!(compared, 26);

    let case = fixtures.join("17-length-mismatch");
    let (gold, test) = (case.join("gold.txt"), case.join("test.txt"));
    let (gold, test) = (gold.to_str().unwrap(), test.to_str().unwrap());
    let (ok, out, err) = transformer(&["parse-eval", "--gold", gold, "--test", test]);
    assert!(ok, "{err}");
    assert!(out.contains("Number of Error sentence  =      6\n"), "{out}");
    assert_eq!(err.lines().count(), 6, "{err}");

    let (ok, out, err) = transformer(&["parse-eval", "--gold", gold, "--test", test, "--summary-only"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("=== Summary ===\n") && !out.contains("Stat."), "{out}");
    let whole = std::fs::read_to_string(case.join("evalb.out")).unwrap();
    assert!(whole.ends_with(&out) && out.contains("-- len<=40 --"), "{out}");

    // Where EVALB aborts (case 27), we print the whole report and say where it would have stopped.
    let (g27, t27) = (fixtures.join("27-max-error-abort/gold.txt"), fixtures.join("27-max-error-abort/test.txt"));
    let (ok, out, err) = transformer(&[
        "parse-eval",
        "--gold",
        g27.to_str().unwrap(),
        "--test",
        t27.to_str().unwrap(),
        "--summary-only",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("Number of Error sentence  =     12\n"), "{out}");
    assert!(err.contains("EVALB itself would have stopped at line 14"), "{err}");

    let short = tmp(&files, "short-test.txt", b"(TOP (NN a))\n");
    let (code, err) = exit_code(&["parse-eval", "--gold", gold, "--test", short.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("gold.txt has 30 lines but") && err.contains("short-test.txt has 1"), "{err}");
    let bad = tmp(&files, "bad-tree.txt", b"(TOP (NN a))\n(TOP (NN \xff))\n");
    let (code, err) = exit_code(&["parse-eval", "--gold", bad.to_str().unwrap(), "--test", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("bad-tree.txt:2: invalid UTF-8"), "{err}");
    let (code, err) = exit_code(&["parse-eval", "--gold", "/nonexistent/gold.txt", "--test", test]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("/nonexistent/gold.txt"), "{err}");
}

#[test]
fn parsing_trains_parses_and_evaluates_from_the_command_line() {
    let files = TestDir::new("transformer-cli");
    let treebank = transformer::test_support::treebank();
    let dir = TestDir::new("transformer-cli-parse");
    let config = dir.join("parse.toml");
    std::fs::write(
        &config,
        format!(
            "{m}[data]\ntask = \"parsing\"\ntrain_src = \"{s}\"\ntrain_files = \"own_0001..own_0008\"\nvalid_src = \"{s}\"\nvalid_files = \"own_0031..own_0031\"\n\
             bpe = \"{d}/vocab.json\"\nvocab_size = 400\nmax_tokens = 390\nmax_ratio = 12.0\n\
             [train]\noutput_dir = \"{d}\"\nmax_src_tokens = 2048\nmax_tgt_tokens = 2048\nwarmup = 20\nmax_steps = 6\nvalid_f1_beam = 2\n",
            m = transformer::test_support::tiny_model_toml(),
            s = treebank.display(),
            d = dir.display()
        ),
    )
    .unwrap();
    let (ok, _, err) =
        transformer(&["train", "--config", config.to_str().unwrap(), "--set", "model.max_positions=400"]);
    assert!(ok, "{err}");
    assert!(err.contains("validation F1"), "{err}");
    let (best, vocab) = (dir.join("best.safetensors"), dir.join("vocab.json"));
    let (best, vocab) = (best.to_str().unwrap(), vocab.to_str().unwrap());

    // Gold trees and sentences of two test files.
    let (words, gold) = (dir.join("test.words"), dir.join("test.gold"));
    let s = treebank.to_str().unwrap();
    let (ok, out, err) = transformer(&[
        "treebank",
        "--input",
        s,
        "--files",
        "own_0036..own_0037",
        "--words",
        words.to_str().unwrap(),
        "--trees",
        gold.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let n = std::fs::read_to_string(&words).unwrap().lines().count();
    assert!(out.starts_with(&format!("{n} trees")), "{out}");

    // parse: one tree a line, over exactly the line's words, constrained or not.
    let input = tmp(&files, "parse-in.txt", b"The board met .\n\nShares rose 5 % , traders said .\n");
    for extra in [&[][..], &["--constrained"][..]] {
        let mut args = vec!["parse", "--checkpoint", best, "--bpe", vocab, "--input", input.to_str().unwrap()];
        args.extend_from_slice(&["--beam", "3", "--speed"]);
        args.extend_from_slice(extra);
        let (ok, out, err) = transformer(&args);
        assert!(ok, "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[1], "(TOP)");
        assert!(err.contains("line 2: empty") && err.contains("sentences/s"), "{err}");
        let t = transformer::data::trees::parse_trees(lines[2], "out").unwrap();
        assert_eq!(t[0].words(), "Shares rose 5 % , traders said .".split(' ').collect::<Vec<_>>());
        if extra.is_empty() {
            continue;
        }
        assert!(err.contains("0 outputs repaired"), "{err}");
    }
    // A byte-order mark, CR-only line ends and a whitespace-only line read as the plain file.
    let plain = transformer(&["parse", "--checkpoint", best, "--bpe", vocab, "--input", input.to_str().unwrap()]);
    let odd =
        tmp(&files, "parse-odd.txt", "\u{feff}The board met .\r \t \rShares rose 5 % , traders said .\r".as_bytes());
    let (ok, out, err) =
        transformer(&["parse", "--checkpoint", best, "--bpe", vocab, "--input", odd.to_str().unwrap()]);
    assert!(ok && plain.0, "{err}");
    assert_eq!(out, plain.1);
    assert!(err.contains("line 2: empty"), "{err}");
    // --tokenize splits raw English first.
    let raw = tmp(&files, "parse-raw.txt", b"Shares didn't rise, traders said.\n");
    let (ok, out, err) =
        transformer(&["parse", "--checkpoint", best, "--bpe", vocab, "--input", raw.to_str().unwrap(), "--tokenize"]);
    assert!(ok, "{err}");
    let t = transformer::data::trees::parse_trees(&out, "out").unwrap();
    assert_eq!(t[0].words().join(" "), "Shares did n't rise , traders said .");

    // A line longer than the model's positions: an error naming it, or (TOP) with --skip-long.
    let long = tmp(&files, "parse-long.txt", format!("A b .\n{}\n", "word ".repeat(500)).as_bytes());
    let (code, err) = exit_code(&["parse", "--checkpoint", best, "--bpe", vocab, "--input", long.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("line 2") && err.contains("--skip-long"), "{err}");
    let (ok, out, err) =
        transformer(&["parse", "--checkpoint", best, "--bpe", vocab, "--input", long.to_str().unwrap(), "--skip-long"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().nth(1), Some("(TOP)"));

    // evaluate on a parsing checkpoint: EVALB's summary, the repairs and the perplexity.
    let out_trees = dir.join("test.trees");
    let (ok, out, err) = transformer(&[
        "evaluate",
        "--checkpoint",
        best,
        "--bpe",
        vocab,
        "--ref",
        gold.to_str().unwrap(),
        "--beam",
        "2",
        "--constrained",
        "--output",
        out_trees.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("Bracketing FMeasure") && out.contains("-- len<=40 --"), "{out}");
    assert!(out.contains(&format!("Number of sentence        = {n:>6}")), "{out}");
    assert!(out.contains("Outputs repaired          = 0 of"), "{out}");
    assert!(out.contains("perplexity = "), "{out}");
    let (ok, _, err) = transformer(&[
        "evaluate",
        "--checkpoint",
        best,
        "--bpe",
        vocab,
        "--ref",
        gold.to_str().unwrap(),
        "--by-length",
    ]);
    assert!(!ok && err.contains("--by-length reports BLEU of a translation model"), "{err}");
    // Constrained trees are never length errors for EVALB.
    assert!(out.contains("Number of Error sentence  =      0"), "{out}");
    // The gold trees with a byte-order mark and CRLF, then CR-only, line ends: the same report.
    let gold_text = std::fs::read_to_string(&gold).unwrap();
    for (name, text) in [
        ("gold-crlf.mrg", format!("\u{feff}{}", gold_text.replace('\n', "\r\n"))),
        ("gold-cr.mrg", format!("\u{feff}{}", gold_text.replace('\n', "\r"))),
    ] {
        let g = tmp(&files, name, text.as_bytes());
        let (ok, same, err) = transformer(&[
            "evaluate",
            "--checkpoint",
            best,
            "--bpe",
            vocab,
            "--ref",
            g.to_str().unwrap(),
            "--beam",
            "2",
            "--constrained",
        ]);
        assert!(ok, "{name}: {err}");
        // The same figures; the perplexity line names the gold file it read.
        let summary = |o: &str| {
            o.lines()
                .filter(|l| !l.contains("sentences/s"))
                .map(|l| l.split(" teacher-forced on ").next().unwrap_or(l))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(summary(&same), summary(&out), "{name}");
    }
    // parse-eval on the written trees gives the same summary.
    let (ok, pe, err) = transformer(&[
        "parse-eval",
        "--gold",
        gold.to_str().unwrap(),
        "--test",
        out_trees.to_str().unwrap(),
        "--summary-only",
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with(&pe), "{pe}\n---\n{out}");

    // A parsing checkpoint is not a translation model.
    let (code, err) = exit_code(&["translate", "--checkpoint", best, "--bpe", vocab, "--task", "translation"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is a parsing model") && err.contains("transformer parse"), "{err}");
    // prepare --task parsing binarises the trees; --tgt is refused for parsing.
    let prep = dir.join("prepared");
    let (ok, out, err) = transformer(&[
        "prepare",
        "--task",
        "parsing",
        "--src",
        s,
        "--files",
        "own_0001..own_0003",
        "--bpe",
        vocab,
        "--out",
        prep.to_str().unwrap(),
        "--max-ratio",
        "12",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("kept") && prep.join("meta.json").exists(), "{out}");
    let (code, _) = exit_code(&["prepare", "--task", "parsing", "--src", s, "--tgt", s, "--bpe", vocab, "--out", "x"]);
    assert_eq!(code, Some(2));
}

/// `params --cost` against the count written out by hand in docs/cost.md.
#[test]
fn params_cost_matches_the_written_count() {
    let (ok, out, err) =
        transformer(&["params", "--preset", "base", "--cost", "--tokens-per-step", "25000", "--steps", "100000"]);
    assert!(ok, "{err}");
    assert!(out.contains("forward: 22173696 multiply-adds per source token, 41271296 per target token"), "{out}");
    assert!(out.contains("training step (3x forward): 66521088 per source token, 123813888 per target token"));
    assert!(out.contains("training, 100000 steps: 9.517e17 FLOPs; paper (Table 2): 3.3e18"), "{out}");
    let (ok, out, _) = transformer(&[
        "params",
        "--preset",
        "big",
        "--cost",
        "--tokens-per-step",
        "25000",
        "--steps",
        "300000",
        "--json",
    ]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["cost"]["forward_macs_per_src_token"], 88387584u64);
    assert_eq!(v["cost"]["forward_macs_per_tgt_token"], 126582784u64);
    let flops = v["cost"]["train_flops"].as_f64().unwrap();
    assert_eq!(flops, 6.0 * 25000.0 * (88387584.0 + 126582784.0) * 300000.0);
    assert_eq!(v["cost"]["paper_train_flops"], 2.3e19);
    // The English→French big recipe's line (configs/wmt14-en-fr-big.toml, docs/cost.md): the same
    // model at a 32,000-entry vocabulary.
    let (ok, out, err) = transformer(&[
        "params",
        "--preset",
        "big",
        "--vocab",
        "32000",
        "--cost",
        "--tokens-per-step",
        "25000",
        "--steps",
        "300000",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("forward: 88387584 multiply-adds per source token, 121462784 per target token"), "{out}");
    assert!(out.contains("training, 300000 steps: 9.443e18 FLOPs; paper (Table 2): 2.3e19"), "{out}");
    // --steps without --tokens-per-step, or cost flags without --cost, are usage errors.
    let (code, _) = exit_code(&["params", "--cost", "--steps", "10"]);
    assert_eq!(code, Some(2));
    let (code, _) = exit_code(&["params", "--src-len", "10"]);
    assert_eq!(code, Some(2));
}

/// A build without the `mpi` feature started by `mpirun -np 2` would train two separate copies on
/// one directory: it refuses, saying how to build with the feature.
#[cfg(not(feature = "mpi"))]
#[test]
fn train_under_mpirun_needs_the_mpi_feature() {
    let out = std::process::Command::new(common::bin())
        .args(["train", "--config", "../../configs/tiny-test.toml"])
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("built without the `mpi` feature but was started as one of 2 MPI processes"), "{err}");
    assert!(err.contains("--features mpi"), "{err}");
}

/// `treebank` and `parse-eval` take a tree 300,000 brackets deep (no recursion, linear time);
/// `parse-eval` notes that EVALB itself would have failed on it; a write error names the user's
/// file, never the temporary file beside it.
#[test]
fn deep_trees_go_through_treebank_and_parse_eval() {
    let files = TestDir::new("transformer-cli");
    let n = 300_000;
    let mrg = tmp(
        &files,
        "deep.mrg",
        format!("( {}(NN w){} )\n( (S (NN a) (VB b)) )\n", "(NP-SBJ (-NONE- *) ".repeat(n), ")".repeat(n)).as_bytes(),
    );
    let dir = mrg.parent().unwrap().to_path_buf();
    let (words, trees) = (dir.join("deep.words"), dir.join("deep.gold"));
    let (ok, _, err) = transformer(&[
        "treebank",
        "--input",
        mrg.to_str().unwrap(),
        "--words",
        words.to_str().unwrap(),
        "--trees",
        trees.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read_to_string(&words).unwrap(), "w\na b\n");
    let gold = std::fs::read_to_string(&trees).unwrap();
    assert_eq!(gold.lines().next().unwrap(), format!("(TOP {}(NN w){})", "(NP ".repeat(n), ")".repeat(n)));
    let t = trees.to_str().unwrap();
    let (ok, out, err) = transformer(&["parse-eval", "--gold", t, "--test", t, "--summary-only"]);
    assert!(ok, "{err}");
    assert!(out.contains("Bracketing FMeasure       = 100.00"), "{out}");
    assert!(err.contains("EVALB itself would have failed on 1 line") && err.contains("first: line 1"), "{err}");

    let missing = dir.join("no-such-dir").join("out.gold");
    let (ok, _, err) =
        transformer(&["treebank", "--input", mrg.to_str().unwrap(), "--trees", missing.to_str().unwrap()]);
    assert!(!ok && err.contains(missing.to_str().unwrap()) && !err.contains(".tmp."), "{err}");
}

/// The quick start refuses a budget beyond a week before writing anything, and a second quick
/// start on a locked --output stops at once naming the flag.
#[test]
fn quickstart_bounds_and_lock_messages() {
    let base = TestDir::new("transformer-cli-qs-guards");
    for task in ["translation", "parsing"] {
        let out = base.join(format!("too-long-{task}"));
        let (ok, _, err) =
            transformer(&["quickstart", "--task", task, "--minutes", "20000", "--output", out.to_str().unwrap()]);
        assert!(!ok && err.contains("--minutes 20000 is more than a week"), "{err}");
        assert!(!out.exists(), "nothing is written for a refused budget");
    }
    let locked = base.join("locked");
    std::fs::create_dir_all(&locked).unwrap();
    let _held = transformer::train::run_dir::DirLock::acquire(&locked, &mut ()).unwrap();
    let (ok, _, err) = transformer(&["quickstart", "--minutes", "0.1", "--output", locked.to_str().unwrap()]);
    assert!(!ok && err.contains("another quick start") && err.contains("--output"), "{err}");
    assert!(!locked.join("quickstart.json").exists() && !locked.join("data").exists());
}

/// `import marian` then `export marian` of a model Marian trained: the native model is written,
/// importing it again works, and a checkpoint given with another model's tokenizer is refused.
#[test]
fn export_marian_writes_a_native_model_and_refuses_a_mismatched_tokenizer() {
    let dir = TestDir::new("cli-export-marian");
    let fixture = |v: &str| {
        let p =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../transformer/tests/fixtures/marian-real").join(v);
        p.display().to_string()
    };
    let out = |s: &str| dir.join(s).display().to_string();
    let (ok, _, err) = transformer(&["import", "marian", &fixture("tied_all_relu"), "--output", &out("ours")]);
    assert!(ok, "{err}");
    let (ckpt, tok) = (out("ours/model.safetensors"), out("ours/tokenizer.json"));
    let (ok, _, err) =
        transformer(&["export", "marian", "--checkpoint", &ckpt, "--tokenizer", &tok, "--output", &out("native")]);
    assert!(ok, "{err}");
    assert!(
        err.contains("decoder.yml") && dir.join("native/model.npz").is_file() && dir.join("native/vocab.spm").is_file()
    );
    let (ok, _, err) = transformer(&["import", "marian", &out("native"), "--output", &out("again")]);
    assert!(ok, "{err}");
    // The model as one argument: the directory `import` wrote, or a checkpoint with its tokenizer;
    // the same files either way.
    let (ok, _, err) = transformer(&["export", "marian", &out("ours"), "--output", &out("from-dir")]);
    assert!(ok, "{err}");
    let (ok, _, err) = transformer(&["export", "marian", &ckpt, "--tokenizer", &tok, "--output", &out("from-file")]);
    assert!(ok, "{err}");
    for f in ["model.npz", "decoder.yml", "vocab.spm"] {
        let read = |d: &str| std::fs::read(dir.join(d).join(f)).unwrap();
        assert!(read("from-dir") == read("native") && read("from-file") == read("native"), "{f}");
    }
    let (ok, _, err) = transformer(&["export", "marian", &ckpt, "--output", &out("no-tokenizer")]);
    assert!(!ok && err.contains("--tokenizer") && err.contains(&ckpt), "{err}");
    let (ok, _, err) = transformer(&["export", "marian", &out("typo"), "--output", &out("typo-out")]);
    assert!(!ok && err.contains("no such file or directory") && err.contains(&out("typo")), "{err}");
    let (ok, _, err) = transformer(&["export", "marian", &out("native"), "--output", &out("not-ours")]);
    assert!(!ok && err.contains("holds no checkpoint"), "{err}");
    let (ok, _, err) =
        transformer(&["export", "marian", &out("ours"), "--checkpoint", &ckpt, "--output", &out("both")]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
    let (ok, _, err) = transformer(&["import", "marian", &fixture("tied_target_swish"), "--output", &out("other")]);
    assert!(ok, "{err}");
    let other = out("other/tokenizer.json");
    let (ok, _, err) =
        transformer(&["export", "marian", "--checkpoint", &ckpt, "--tokenizer", &other, "--output", &out("mismatch")]);
    assert!(!ok && err.contains("was written for vocabulary"), "{err}");
}

/// `score` prints Marian's `score`: each pair's log-probability under a model Marian trained equals
/// what Marian printed for it (reference.json, dev/reference/marian_real.py) within 1e-3; with
/// `--per-token` each divided by its target tokens; a pair the model cannot hold is an error
/// naming its line.
#[test]
fn score_prints_each_pairs_log_probability_as_marian_does() {
    let dir = TestDir::new("cli-score");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../transformer/tests/fixtures/marian-real/tied_target_swish");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("reference.json")).unwrap()).unwrap();
    let text =
        |key: &str| r[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect::<Vec<_>>();
    let (srcs, refs) = (text("sources"), text("targets"));
    let out = |s: &str| dir.join(s).display().to_string();
    std::fs::write(dir.join("src.txt"), srcs.join("\n") + "\n").unwrap();
    std::fs::write(dir.join("ref.txt"), refs.join("\n") + "\n").unwrap();
    let (ok, _, err) = transformer(&["import", "marian", fixture.to_str().unwrap(), "--output", &out("imported")]);
    assert!(ok, "{err}");
    let (ckpt, tok) = (out("imported/model.safetensors"), out("imported/tokenizer.json"));
    let model = ["--checkpoint", ckpt.as_str(), "--tokenizer", tok.as_str()];
    let files = ["--src", &out("src.txt"), "--ref", &out("ref.txt")];
    let (ok, stdout, err) = transformer(&[&["score"], &model[..], &files[..]].concat());
    assert!(ok, "{err}");
    let ours: Vec<f64> = stdout.lines().map(|l| l.parse().unwrap()).collect();
    let marian: Vec<f64> = r["scores"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(ours.len(), marian.len());
    for (i, (o, m)) in ours.iter().zip(&marian).enumerate() {
        assert!((o - m).abs() < 1e-3, "pair {i}: {o} against Marian's {m}");
    }
    let (ok, stdout, err) = transformer(&[&["score"], &model[..], &files[..], &["--per-token"]].concat());
    assert!(ok, "{err}");
    let t = transformer::Translator::load(std::path::Path::new(&ckpt), std::path::Path::new(&tok), Default::default())
        .unwrap();
    for (i, (line, sum)) in stdout.lines().zip(&ours).enumerate() {
        let tokens = t.encode_target(&refs[i]).unwrap().len() + 1;
        let per: f64 = line.parse().unwrap();
        assert!((per - sum / tokens as f64).abs() < 1e-5, "pair {i}: {per} per token, {sum} over {tokens}");
    }
    // A pair longer than the model's positions: an error naming its line, nothing printed.
    let long = vec!["ein"; 3000].join(" ");
    std::fs::write(dir.join("ref.txt"), format!("{}\n{long}\n", refs[0])).unwrap();
    std::fs::write(dir.join("src.txt"), format!("{}\n{}\n", srcs[0], srcs[1])).unwrap();
    let (ok, stdout, err) = transformer(&[&["score"], &model[..], &files[..]].concat());
    assert!(
        !ok && stdout.is_empty() && err.contains("line 2: cannot be scored") && err.contains("max_positions"),
        "{err}"
    );
    assert!(err.contains("ref.txt") && !err.contains("src.txt"), "the target is at fault: {err}");
    // A source line too long: the error blames the source file, not --ref.
    std::fs::write(dir.join("ref.txt"), format!("{}\n{}\n", refs[0], refs[1])).unwrap();
    std::fs::write(dir.join("src.txt"), format!("{}\n{long}\n", srcs[0])).unwrap();
    let (ok, stdout, err) = transformer(&[&["score"], &model[..], &files[..]].concat());
    assert!(!ok && stdout.is_empty() && err.contains("line 2: cannot be scored"), "{err}");
    assert!(err.contains("src.txt") && !err.contains("ref.txt") && err.contains("its source"), "{err}");
    // Empty and blank sources: Marian's tokenizer gives them an EOS, so they score as Marian scores
    // them; a model of ours gives them no ids, and the error then names the source file too.
    for bad in ["", "   "] {
        std::fs::write(dir.join("src.txt"), format!("{}\n{bad}\n", srcs[0])).unwrap();
        let (ok, stdout, err) = transformer(&[&["score"], &model[..], &files[..]].concat());
        assert!(ok && stdout.lines().count() == 2 || err.contains("src.txt") && !err.contains("ref.txt"), "{err}");
    }
}

/// `data news-text` from an nltk_data directory: a missing archive names the file and the fix, a
/// corpus that is not NLTK's (its checksum differs) is refused, and nothing is written either way.
#[test]
fn data_news_text_verifies_its_archives_and_writes_nothing_otherwise() {
    let dir = TestDir::new("cli-news-text");
    let (nltk, out) = (dir.join("nltk_data"), dir.join("news"));
    std::fs::create_dir_all(nltk.join("corpora")).unwrap();
    let args = ["data", "news-text", "--from-nltk-data", nltk.to_str().unwrap(), "--cache", out.to_str().unwrap()];
    let (ok, _, err) = transformer(&args);
    assert!(!ok && err.contains("corpora/abc.zip") && err.contains("nltk.downloader"), "{err}");
    for name in ["abc", "brown"] {
        let mut zip = zip::ZipWriter::new(std::fs::File::create(nltk.join(format!("corpora/{name}.zip"))).unwrap());
        zip.start_file(format!("{name}/rural.txt"), zip::write::SimpleFileOptions::default()).unwrap();
        std::io::Write::write_all(&mut zip, b"Not the corpus. It has two sentences.\n").unwrap();
        zip.finish().unwrap();
    }
    let (ok, _, err) = transformer(&args);
    assert!(!ok && err.contains("abc.zip") && err.contains("SHA-256"), "{err}");
    assert!(!out.exists(), "nothing is written");
}

#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    // `transformer bpe apply … | head -1`: 2 MB of pieces into a pipe closed after one line.
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    let fixture = transformer::test_support::repo("crates/transformer/tests/fixtures/m30k-small/bpe.json");
    let input = transformer::test_support::multi30k("train.en.gz");
    let mut child = std::process::Command::new(bin())
        .args(["bpe", "apply", "--model", fixture.to_str().unwrap(), "--input", input.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(!first.trim().is_empty());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{err}");
    assert!(out.status.success() || out.status.signal() == Some(13), "{:?}: {err}", out.status);
}
