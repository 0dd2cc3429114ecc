//! `translate --alignment` (decode/alignment.rs) on the small Multi30k model of the fixtures:
//! Marian's format after ` ||| `, soft rows that are attention distributions, hard pairs that are
//! the rows' strongest sources, thresholds that keep exactly the weights above them, words that
//! are the text's space-separated words, and the translations themselves unchanged.

mod common;

use common::{multi30k, transformer, TestDir};
use std::path::{Path, PathBuf};

fn fixture() -> (PathBuf, PathBuf) {
    let dir = transformer::test_support::repo("crates/transformer/tests/fixtures/m30k-small");
    (dir.join("model.safetensors"), dir.join("bpe.json"))
}

fn sources(n: usize) -> Vec<String> {
    let all = transformer::data::corpus::read_lines(Path::new(&multi30k("test_2016_flickr.en.gz"))).unwrap();
    all.into_iter().take(n).collect()
}

/// `translate` of `input` with `extra` flags: its stdout lines.
fn translate(input: &Path, extra: &[&str]) -> Vec<String> {
    let (ckpt, bpe) = fixture();
    let mut args = vec!["translate", "--checkpoint", ckpt.to_str().unwrap(), "--bpe", bpe.to_str().unwrap()];
    args.extend(["--input", input.to_str().unwrap()]);
    args.extend(extra);
    let (ok, out, err) = transformer(&args);
    assert!(ok, "{err}");
    out.lines().map(str::to_string).collect()
}

/// (text, alignment) of a `text ||| alignment` line.
fn split(line: &str) -> (String, String) {
    let (t, a) = line.split_once(" ||| ").unwrap_or_else(|| panic!("no ` ||| ` in {line:?}"));
    (t.to_string(), a.to_string())
}

/// Soft rows: one a target position, each a source position's weight.
fn rows(soft: &str) -> Vec<Vec<f64>> {
    soft.split_whitespace().map(|r| r.split(',').map(|w| w.parse().unwrap()).collect()).collect()
}

fn pairs(hard: &str) -> Vec<(usize, usize)> {
    transformer::decode::alignment::parse_points(hard).unwrap()
}

#[test]
fn soft_hard_thresholds_and_words_agree_and_leave_the_translations_alone() {
    let dir = TestDir::new("transformer-alignment");
    let srcs = sources(60);
    let input = dir.join("src.en");
    std::fs::write(&input, srcs.join("\n") + "\n").unwrap();
    let plain = translate(&input, &[]);
    let soft: Vec<(String, String)> = translate(&input, &["--alignment", "soft"]).iter().map(|l| split(l)).collect();
    let hard: Vec<(String, String)> = translate(&input, &["--alignment", "hard"]).iter().map(|l| split(l)).collect();
    let over: Vec<(String, String)> = translate(&input, &["--alignment", "0.3"]).iter().map(|l| split(l)).collect();
    let words: Vec<(String, String)> =
        translate(&input, &["--alignment", "soft", "--alignment-words"]).iter().map(|l| split(l)).collect();
    assert_eq!(plain.len(), srcs.len());
    let mut diagonal = 0;
    for i in 0..srcs.len() {
        for other in [&soft[i].0, &hard[i].0, &over[i].0, &words[i].0] {
            assert_eq!(other, &plain[i], "an alignment changed translation {i}");
        }
        // Our BPE source has no `</s>`: each row is a whole distribution over the source tokens.
        let r = rows(&soft[i].1);
        let cols = r[0].len();
        for row in &r {
            assert_eq!(row.len(), cols);
            let sum: f64 = row.iter().sum();
            assert!((sum - 1.0).abs() < 1e-4, "line {i}: a row sums to {sum}");
        }
        // Hard: each target position once, with its row's strongest source.
        let h = pairs(&hard[i].1);
        assert_eq!(h.len(), r.len(), "line {i}");
        for &(s, t) in &h {
            let best = r[t].iter().cloned().fold(f64::MIN, f64::max);
            assert!(r[t][s] >= best - 1e-6, "line {i}: {s}-{t} is not row {t}'s strongest");
        }
        let mut sorted = h.clone();
        sorted.sort();
        assert_eq!(sorted, h, "pairs are sorted by source, then target");
        diagonal += h.iter().filter(|&&(s, t)| s.abs_diff(t) <= 2).count();
        // A threshold: exactly the weights above it (those printed within rounding of it aside).
        let kept = pairs(&over[i].1);
        for (t, row) in r.iter().enumerate() {
            for (s, &w) in row.iter().enumerate() {
                if (w - 0.3).abs() > 1e-5 {
                    assert_eq!(kept.contains(&(s, t)), w > 0.3, "line {i}: pair {s}-{t} of weight {w}");
                }
            }
        }
        // Words: a row per word of the output, a column per word of the source.
        let w = rows(&words[i].1);
        let words = |text: &str| text.split(' ').filter(|w| !w.is_empty()).count();
        assert_eq!(w.len(), words(&plain[i]), "line {i}: {:?}", plain[i]);
        assert_eq!(w[0].len(), words(&srcs[i]), "line {i}: {:?}", srcs[i]);
        for row in &w {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-4);
        }
    }
    // English and German are near-monotone here: most pairs lie near the diagonal.
    let total: usize = hard.iter().map(|h| pairs(&h.1).len()).sum();
    assert!(diagonal * 10 >= total * 6, "{diagonal} of {total} hard pairs near the diagonal");

    // n-best: `index ||| text ||| alignment ||| log P ||| score`.
    let nbest = translate(&input, &["--alignment", "hard", "--nbest", "2"]);
    assert_eq!(nbest.len(), 2 * srcs.len());
    let fields: Vec<&str> = nbest[0].split(" ||| ").collect();
    assert_eq!(fields.len(), 5, "{}", nbest[0]);
    assert_eq!((fields[0], fields[1], fields[2]), ("0", plain[0].as_str(), hard[0].1.as_str()));

    // One head or another layer is another reading of the same attention.
    let head = translate(&input, &["--alignment", "soft", "--alignment-head", "1", "--alignment-layer", "1"]);
    assert_eq!(split(&head[0]).0, plain[0]);
    assert_ne!(split(&head[0]).1, soft[0].1);
}

#[test]
fn bad_alignment_options_are_refused_by_name() {
    let dir = TestDir::new("transformer-alignment-bad");
    let input = dir.join("src.en");
    std::fs::write(&input, "A dog runs.\n").unwrap();
    let (ckpt, bpe) = fixture();
    let run = |extra: &[&str]| {
        let mut args = vec!["translate", "--checkpoint", ckpt.to_str().unwrap(), "--bpe", bpe.to_str().unwrap()];
        args.extend(["--input", input.to_str().unwrap()]);
        args.extend(extra);
        let (ok, _, err) = transformer(&args);
        assert!(!ok, "{extra:?} was accepted");
        err
    };
    assert!(run(&["--alignment", "1.5"]).contains("threshold between 0 and 1"));
    assert!(run(&["--alignment", "strong"]).contains("give hard, soft or a threshold"));
    assert!(run(&["--alignment", "hard", "--alignment-layer", "9"]).contains("decoder layers"));
    assert!(run(&["--alignment", "hard", "--alignment-head", "99"]).contains("heads (counted from 1)"));
    assert!(run(&["--alignment-words"]).contains("--alignment"));
}

/// A run of the tiny model on the first 200 validation pairs with `data` and `train` lines.
fn tiny_run(dir: &Path, data: &str, train: &str) -> (bool, String, String) {
    std::fs::create_dir_all(dir).unwrap();
    let take = |name: &str, to: &str| {
        let p = dir.join(to);
        let lines = transformer::data::corpus::read_lines(Path::new(&multi30k(name))).unwrap();
        std::fs::write(&p, lines[..200].join("\n") + "\n").unwrap();
        p.display().to_string()
    };
    let (en, de) = (take("val.en.gz", "train.en"), take("val.de.gz", "train.de"));
    let cfg = common::Run {
        model: "",
        train: (&en, &de),
        bpe: &dir.join("bpe.json"),
        vocab_size: 600,
        data: &format!("max_tokens = 120\n{data}"),
        train_section: &format!("max_steps = 12\nwarmup = 10\nmax_src_tokens = 1024\nmax_tgt_tokens = 1024\n{train}"),
    }
    .write(dir);
    transformer(&["train", "--config", cfg.to_str().unwrap(), "--set", "model.max_positions=128"])
}

#[test]
fn guided_alignment_training_reads_its_file_and_names_every_fault() {
    let dir = TestDir::new("transformer-guided");
    let en = transformer::data::corpus::read_lines(Path::new(&multi30k("val.en.gz"))).unwrap();
    let de = transformer::data::corpus::read_lines(Path::new(&multi30k("val.de.gz"))).unwrap();
    // A monotone alignment: word i with word i, as far as the shorter side goes.
    let diagonal: Vec<String> = en[..200]
        .iter()
        .zip(&de[..200])
        .map(|(e, d)| {
            let n = e.split(' ').filter(|w| !w.is_empty()).count().min(d.split(' ').filter(|w| !w.is_empty()).count());
            (0..n).map(|i| format!("{i}-{i}")).collect::<Vec<_>>().join(" ")
        })
        .collect();
    let write = |name: &str, lines: &[String]| {
        let p = dir.join(name);
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p.display().to_string()
    };
    let good = write("good.align", &diagonal);
    let (ok, out, err) =
        tiny_run(&dir.join("ok"), &format!("guided_alignment = \"{good}\""), "guided_alignment_weight = 0.5");
    assert!(ok, "{err}");
    assert!(out.contains("reached 12 steps"), "{out}");
    let log = format!("{out}{err}");
    assert!(log.contains("guided alignment: head 1 of decoder layer"), "{log}");
    assert!(log.contains("aligned token pairs over 200 training pairs"), "{log}");

    let short = write("short.align", &diagonal[..150]);
    let (ok, _, err) = tiny_run(&dir.join("short"), &format!("guided_alignment = \"{short}\""), "");
    assert!(!ok && err.contains("has 150 lines but") && err.contains("line-aligned"), "{err}");
    let mut far = diagonal.clone();
    far[6] = "0-0 40-1".into();
    let far = write("far.align", &far);
    let (ok, _, err) = tiny_run(&dir.join("far"), &format!("guided_alignment = \"{far}\""), "");
    assert!(!ok && err.contains("far.align:7: pair 40-1 lies outside"), "{err}");
    let (ok, _, err) = tiny_run(&dir.join("layer"), "", "guided_alignment_layer = 1");
    assert!(!ok && err.contains("train.guided_alignment_layer needs data.guided_alignment"), "{err}");
    let (ok, _, err) =
        tiny_run(&dir.join("weight"), &format!("guided_alignment = \"{good}\""), "guided_alignment_weight = -1");
    assert!(!ok && err.contains("guided_alignment_weight = -1 must be a number above 0"), "{err}");
}

#[test]
fn score_aligns_given_translations_and_aer_scores_them() {
    let dir = TestDir::new("transformer-score-align");
    let srcs = sources(20);
    let hyps = translate(
        &{
            let p = dir.join("src.en");
            std::fs::write(&p, srcs.join("\n") + "\n").unwrap();
            p
        },
        &["--alignment", "hard", "--alignment-words"],
    );
    let (texts, links): (Vec<String>, Vec<String>) = hyps.iter().map(|l| split(l)).unzip();
    let (src, tgt) = (dir.join("src.en"), dir.join("out.de"));
    std::fs::write(&tgt, texts.join("\n") + "\n").unwrap();
    let (ckpt, bpe) = fixture();
    let (ok, out, err) = transformer(&[
        "score",
        "--checkpoint",
        ckpt.to_str().unwrap(),
        "--bpe",
        bpe.to_str().unwrap(),
        "--src",
        src.to_str().unwrap(),
        "--ref",
        tgt.to_str().unwrap(),
        "--alignment",
        "hard",
        "--alignment-words",
    ]);
    assert!(ok, "{err}");
    // Forced alignment of the model's own outputs is the alignment it wrote with them.
    let forced: Vec<String> = out.lines().map(|l| split(l).1).collect();
    assert_eq!(forced, links);
    // AER of an alignment against itself is 0; against its links shifted by one target word, 100.
    let (r, h) = (dir.join("ref.align"), dir.join("hyp.align"));
    std::fs::write(&r, links.join("\n") + "\n").unwrap();
    std::fs::write(&h, hyps.join("\n") + "\n").unwrap();
    let (ok, out, err) = transformer(&["aer", "--ref", r.to_str().unwrap(), "--hyp", h.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.starts_with("AER = 0.00 (precision 100.00, recall 100.00;"), "{out}");
    let shifted: Vec<String> = links
        .iter()
        .map(|l| pairs(l).iter().map(|(s, t)| format!("{s}-{}", t + 1000)).collect::<Vec<_>>().join(" "))
        .collect();
    std::fs::write(&h, shifted.join("\n") + "\n").unwrap();
    let (_, out, _) = transformer(&["aer", "--ref", r.to_str().unwrap(), "--hyp", h.to_str().unwrap()]);
    assert!(out.starts_with("AER = 100.00"), "{out}");
    std::fs::write(&h, "0-0\n").unwrap();
    let (ok, _, err) = transformer(&["aer", "--ref", r.to_str().unwrap(), "--hyp", h.to_str().unwrap()]);
    assert!(!ok && err.contains("20 reference alignments but 1 hypothesis"), "{err}");
}

#[test]
fn shortlist_learns_a_table_the_library_reads_back() {
    // Lives here for the fixture: the shortlist command of issue 68 item 6, and decoding over it.
    let dir = TestDir::new("transformer-shortlist");
    let (ckpt, bpe) = fixture();
    let (src, tgt) = (multi30k("val.en.gz"), multi30k("val.de.gz"));
    let out = dir.join("list.json");
    let vmap = dir.join("vmap.txt");
    let run = |out: &Path| {
        transformer(&[
            "shortlist",
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--bpe",
            bpe.to_str().unwrap(),
            "--src",
            &src,
            "--tgt",
            &tgt,
            "--per-source",
            "20",
            "--frequent",
            "50",
            "--output",
            out.to_str().unwrap(),
            "--ct2-vmap",
            vmap.to_str().unwrap(),
        ])
    };
    let (ok, report, err) = run(&out);
    assert!(ok, "{err}");
    let covered: f64 = report.split("covering ").nth(1).unwrap().split('%').next().unwrap().parse().unwrap();
    assert!(covered > 80.0 && covered <= 100.0, "{report}");
    let b = transformer::data::bpe::Bpe::load(&bpe).unwrap();
    let table = transformer::decode::shortlist::Shortlist::load(&out, b.hash(), b.vocab_size()).unwrap();
    assert_eq!(table.frequent.len(), 50);
    assert!(table.sources.values().all(|l| !l.is_empty() && l.len() <= 20));
    // The same table as CTranslate2's vocabulary map: the frequent targets under the empty key,
    // then a line a source piece, as many targets as the table's.
    let text = std::fs::read_to_string(&vmap).unwrap();
    let rows: Vec<(&str, Vec<&str>)> =
        text.lines().map(|l| l.split_once('\t').unwrap()).map(|(k, v)| (k, v.split(' ').collect())).collect();
    assert_eq!(rows.len(), 1 + table.sources.len());
    assert_eq!((rows[0].0, rows[0].1.len()), ("", 50));
    let first = table.sources.iter().next().unwrap();
    assert_eq!(rows[1].0, b.piece_of(first.0.parse().unwrap()).unwrap());
    let pieces: Vec<String> = first.1.iter().map(|&id| b.piece_of(id).unwrap()).collect();
    assert_eq!(rows[1].1, pieces);
    let (ok, _, err) = run(Path::new(&src));
    assert!(!ok && err.contains("is an input"), "{err}");

    // translate --shortlist: a list of every id gives the whole vocabulary's output, byte for byte.
    let input = dir.join("input.en");
    std::fs::write(&input, sources(40).join("\n") + "\n").unwrap();
    let full = translate(&input, &["--workers", "1"]);
    let mut every = table.clone();
    every.frequent = (0..b.vocab_size() as u32).collect();
    let every_path = dir.join("every.json");
    every.save(&every_path).unwrap();
    assert_eq!(translate(&input, &["--workers", "1", "--shortlist", every_path.to_str().unwrap()]), full);
    // The learned list: a translation a line.
    let short = translate(&input, &["--workers", "1", "--shortlist", out.to_str().unwrap()]);
    assert_eq!(short.len(), full.len());
    // A list of another vocabulary names its file and the fix.
    let mut other = table.clone();
    other.vocab_hash = "0123".into();
    let other_path = dir.join("other.json");
    other.save(&other_path).unwrap();
    let (ckpt_path, bpe_path) = fixture();
    let (ok, _, err) = transformer(&[
        "translate",
        "--checkpoint",
        ckpt_path.to_str().unwrap(),
        "--bpe",
        bpe_path.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--shortlist",
        other_path.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("other.json") && err.contains("make it again"), "{err}");
    // A parser has no shortlist: a usage error before any file is read.
    let (ok, _, err) = transformer(&["parse", "--checkpoint", "none", "--tokenizer", "none", "--shortlist", "x"]);
    assert!(!ok && err.contains("--shortlist cuts a translation model's output layer"), "{err}");
}
