//! `transformer ablate` in miniature: a base model of 32 dimensions and two rows, four updates
//! each, scored on 6 dev sentences (seconds). Checks the table's shape, that every row differs
//! from base in exactly its declared settings (resolved configurations compared), and that a run
//! killed part-way resumes at the row it was on without redoing the rows before it.

mod common;

use common::TestDir;
use std::path::{Path, PathBuf};
use transformer::config::{ModelChange, Positions};
use transformer::events::Events;
use transformer::recipes::ablate::{self, AblateOptions, Budget};
use transformer::recipes::{Multi30kFiles, Pair};

#[derive(Default)]
struct Log(Vec<String>);

impl Events for Log {
    fn stage(&mut self, name: &str) {
        self.0.push(format!("== {name}"));
    }
    fn log(&mut self, message: &str) {
        self.0.push(message.to_string());
    }
}

fn tiny(out: &Path, rows: &str, seeds: u64) -> AblateOptions {
    AblateOptions {
        output: out.to_path_buf(),
        rows: ablate::parse_rows(rows).unwrap(),
        budget: Budget::Updates(4),
        seeds,
        dev_sentences: Some(6),
        average: 2,
        base_overrides: [
            "model.n_layers=1",
            "model.d_model=32",
            "model.d_ff=64",
            "model.d_k=8",
            "model.d_v=8",
            "data.vocab_size=300",
            "train.valid_steps=1000",
            // Whatever the CPU, the same products (the table's numbers are not compared to a
            // fixture, but the two seeds' must be reproducible below).
            "train.bf16_matmul=false",
        ]
        .map(String::from)
        .to_vec(),
    }
}

/// A fresh directory for one test (removed at the end when the test passes); the ablation's
/// output is its `out`, which does not exist yet.
fn tmpdir(name: &str) -> TestDir {
    TestDir::new(&format!("transformer-ablate-{name}"))
}

#[test]
fn settings_the_ablation_owns_and_rows_that_change_nothing_are_refused() {
    let dir = tmpdir("refused");
    let out = dir.join("out");
    for (set, says) in [
        ("train.seed=7", "use --seeds"),
        ("train.max_steps=9", "use --updates"),
        ("data.valid_src=x.en", "the dev set is Multi30k val"),
        ("train.keep_last=1", "use --average"),
    ] {
        let mut opts = tiny(&out, "e", 1);
        opts.base_overrides.push(set.into());
        let err = ablate::plan(&opts).unwrap_err().to_string();
        assert!(err.contains(set) && err.contains(says), "{set}: {err}");
    }
    // With one head in base, row a1 (one head) is base itself.
    let mut opts = tiny(&out, "a1", 1);
    opts.base_overrides.extend(["model.n_heads=1".to_string(), "model.d_k=32".into(), "model.d_v=32".into()]);
    let err = ablate::plan(&opts).unwrap_err().to_string();
    assert!(err.contains("row a1") && err.contains("changes nothing"), "{err}");
    assert!(!out.exists(), "a refused plan wrote nothing");
}

fn checkpoints(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("ckpt-"))
        .collect();
    v.sort();
    v
}

#[test]
fn a_two_row_ablation_writes_its_table_and_resumes_at_the_row_it_was_on() {
    let dir = tmpdir("resume");
    let out = dir.join("out");
    let opts = tiny(&out, "a1,e", 1);

    // Rows differ from base in exactly their declared settings: every other model field, and
    // the whole training section but the output directory, resolve to the same values.
    let plan = ablate::plan(&opts).unwrap();
    assert_eq!(plan.rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["base", "a1", "e"]);
    let pair = |i: usize| Pair { src: PathBuf::from(format!("d{i}")), tgt: PathBuf::from(format!("d{}", i + 1)) };
    let data = Multi30kFiles { train: pair(0), valid: pair(2), test: pair(4) };
    let resolve = |row: &ablate::Row| {
        let cfg = ablate::row_config(&plan, &data, Path::new("bpe.json"), row, 1, Path::new("x")).unwrap();
        (serde_json::to_value(cfg.model_config(300).unwrap()).unwrap(), cfg.train)
    };
    let (base_model, base_train) = resolve(&plan.rows[0]);
    assert_eq!((base_model["d_model"].as_u64(), base_model["n_heads"].as_u64()), (Some(32), Some(4)));
    for row in &plan.rows[1..] {
        let (model, train) = resolve(row);
        assert_eq!(train, base_train, "{}: the training section differs", row.name);
        let mut changed: Vec<String> = model
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, v)| base_model[k.as_str()] != **v)
            .map(|(k, _)| k.clone())
            .collect();
        changed.sort();
        let declared = serde_json::to_value(row.change).unwrap();
        let mut declared: Vec<String> = declared.as_object().unwrap().keys().cloned().collect();
        declared.sort();
        assert_eq!(changed, declared, "{}: resolved config differs in other fields than declared", row.name);
    }
    // At this base (h 4 × d_k 8), a1 is one head of 32, e learned positions.
    let change = |i: usize| plan.rows[i].change;
    assert_eq!(change(1), ModelChange { n_heads: Some(1), d_k: Some(32), d_v: Some(32), ..Default::default() });
    assert_eq!(change(2), ModelChange { positions: Some(Positions::Learned), ..Default::default() });

    // The whole run.
    let mut log = Log::default();
    let report = ablate::run(&opts, &mut log).unwrap();
    assert_eq!(report.rows.len(), 3);
    for r in &report.rows {
        let res = &r.results[0];
        assert_eq!(res.updates, 4, "{}", r.row.name);
        assert_eq!(res.averaged, 2, "{}", r.row.name);
        assert!(res.dev_perplexity.is_finite() && res.dev_perplexity > 1.0, "{}: {res:?}", r.row.name);
        assert!((0.0..=100.0).contains(&res.dev_bleu), "{}: {res:?}", r.row.name);
    }
    // Learned positions add max_positions × d_model parameters; one head of 32 as many as four of 8.
    let params: Vec<usize> = report.rows.iter().map(|r| r.results[0].params).collect();
    assert_eq!(params[1], params[0]);
    assert_eq!(params[2], params[0] + 256 * 32);

    // The table: a header, a rule and one line per row, 14 columns, in Markdown and CSV.
    let md = std::fs::read_to_string(out.join("table.md")).unwrap();
    assert_eq!(md, report.markdown);
    let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(lines.len(), 2 + 3, "{md}");
    for l in &lines {
        assert_eq!(l.matches('|').count(), 15, "{l}");
    }
    assert!(lines[2].starts_with("| base | – | – |"), "{}", lines[2]);
    assert!(lines[3].contains("| a1 | n_heads=1, d_k=32, d_v=32 | n_heads=1, d_k=512, d_v=512 |"), "{}", lines[3]);
    // The paper's column: a1 is 5.29 PPL and 24.9 BLEU, 0.37 and −0.9 from base.
    assert!(lines[3].ends_with("| 5.29 | +0.37 | 24.9 | -0.9 |"), "{}", lines[3]);
    let csv = std::fs::read_to_string(out.join("table.csv")).unwrap();
    let csv_lines: Vec<&str> = csv.lines().collect();
    assert_eq!(csv_lines.len(), 4);
    assert!(csv_lines[0].starts_with("row,ours_changed,paper_changed,params,updates,train_minutes,dev_ppl"));
    assert!(csv_lines[2].starts_with("a1,\"n_heads=1, d_k=32, d_v=32\",\"n_heads=1, d_k=512, d_v=512\","));
    let base_ppl = report.rows[0].results[0].dev_perplexity;
    let base_field: f64 = csv_lines[1].split(',').nth(6).unwrap().parse().unwrap();
    assert!((base_field - base_ppl).abs() < 1e-3, "{base_field} vs {base_ppl}");
    let svg = std::fs::read_to_string(out.join("bleu.svg")).unwrap();
    assert_eq!(svg.matches("<rect x=").count(), 3, "one bar per row");

    // Kill the run while it trained row e: its result and newest checkpoint are gone (a
    // checkpoint is written every update here, the last two kept).
    let e_dir = out.join("runs").join("e-s1");
    std::fs::remove_file(e_dir.join("result.json")).unwrap();
    let e_ckpts = checkpoints(&e_dir);
    assert_eq!(e_ckpts.len(), 2);
    std::fs::remove_file(e_ckpts.last().unwrap()).unwrap();
    let base_ckpts = checkpoints(&out.join("runs").join("base-s1"));
    let base_time = std::fs::metadata(&base_ckpts[0]).unwrap().modified().unwrap();
    let mut log = Log::default();
    let again = ablate::run(&opts, &mut log).unwrap();
    let text = log.0.join("\n");
    assert!(text.contains("base seed 1: done before"), "{text}");
    assert!(text.contains("a1 seed 1: done before"), "{text}");
    assert!(text.contains("== training e (seed 1)"), "{text}");
    assert!(!text.contains("== training base"), "base was trained again:\n{text}");
    assert!(text.to_lowercase().contains("resum"), "row e did not resume from its checkpoint:\n{text}");
    assert_eq!(std::fs::metadata(&base_ckpts[0]).unwrap().modified().unwrap(), base_time);
    assert_eq!(again.rows[2].results[0].updates, 4);
    // The earlier rows' numbers are the stored ones (JSON keeps floats to within an ulp).
    for i in 0..2 {
        let (a, b) = (&again.rows[i].results[0], &report.rows[i].results[0]);
        assert_eq!((a.params, a.updates, a.averaged), (b.params, b.updates, b.averaged));
        assert!((a.dev_perplexity / b.dev_perplexity - 1.0).abs() < 1e-12, "{a:?} vs {b:?}");
        assert!((a.dev_bleu - b.dev_bleu).abs() < 1e-9, "{a:?} vs {b:?}");
    }

    // Killed after training row e but before its result was written: scored again, not trained.
    std::fs::remove_file(e_dir.join("result.json")).unwrap();
    let e_ckpts = checkpoints(&e_dir);
    let mut log = Log::default();
    ablate::run(&opts, &mut log).unwrap();
    let text = log.0.join("\n");
    assert!(text.contains("== scoring e (seed 1)"), "{text}");
    assert_eq!(checkpoints(&e_dir), e_ckpts, "row e was trained again:\n{text}");
    // A damaged result is named and scored again.
    std::fs::write(e_dir.join("result.json"), b"{ not json").unwrap();
    let mut log = Log::default();
    ablate::run(&opts, &mut log).unwrap();
    let text = log.0.join("\n");
    assert!(text.contains("result.json: unreadable") && text.contains("== scoring e (seed 1)"), "{text}");
    let stored: ablate::RowResult =
        serde_json::from_str(&std::fs::read_to_string(e_dir.join("result.json")).unwrap()).unwrap();
    assert_eq!((stored.row.as_str(), stored.seed, stored.updates), ("e", 1, 4));

    // The same directory with another plan is refused, naming what differs.
    let err = ablate::run(&tiny(&out, "a1", 1), &mut Log::default()).unwrap_err().to_string();
    assert!(err.contains("holds another ablation") && err.contains("rows base,a1,e there, base,a1 here"), "{err}");
    let mut other_base = tiny(&out, "a1,e", 1);
    other_base.base_overrides.push("model.d_ff=128".into());
    let err = ablate::run(&other_base, &mut Log::default()).unwrap_err().to_string();
    assert!(err.contains("--set") && err.contains("model.d_ff=128"), "{err}");
}

#[test]
fn with_two_seeds_each_row_has_a_mean_and_a_spread() {
    let dir = tmpdir("seeds");
    let out = dir.join("out");
    let report = ablate::run(&tiny(&out, "d3", 2), &mut Log::default()).unwrap();
    assert_eq!(report.rows.len(), 2);
    for r in &report.rows {
        assert_eq!(r.results.iter().map(|x| x.seed).collect::<Vec<_>>(), [1, 2]);
        // Two seeds: two initialisations, two perplexities.
        assert_ne!(r.results[0].dev_perplexity, r.results[1].dev_perplexity, "{}", r.row.name);
    }
    let lines: Vec<&str> = report.markdown.lines().filter(|l| l.starts_with("| d3")).collect();
    assert_eq!(lines.len(), 1);
    // "mean ± half the spread" in the PPL and BLEU cells.
    assert_eq!(lines[0].matches(" ± ").count(), 2, "{}", lines[0]);
    // The Δ PPL cell is marked `~` exactly when the two rows' ranges (mean ± spread/2) overlap.
    let stats = |i: usize| {
        let v: Vec<f64> = report.rows[i].results.iter().map(|x| x.dev_perplexity).collect();
        let (lo, hi) = (v.iter().cloned().fold(f64::INFINITY, f64::min), v.iter().cloned().fold(0.0, f64::max));
        ((lo + hi) / 2.0, hi - lo)
    };
    let ((base_mean, base_spread), (d3_mean, d3_spread)) = (stats(0), stats(1));
    let overlap = (d3_mean - base_mean).abs() <= (base_spread + d3_spread) / 2.0;
    let cells: Vec<&str> = lines[0].split('|').map(str::trim).collect();
    assert_eq!(
        cells[8].ends_with('~'),
        overlap,
        "Δ PPL cell {:?}: base {base_mean}±{base_spread}, d3 {d3_mean}±{d3_spread}",
        cells[8]
    );
    let csv = std::fs::read_to_string(out.join("table.csv")).unwrap();
    let d3_csv = csv.lines().find(|l| l.starts_with("d3,")).unwrap();
    assert!(d3_csv.contains(&format!(",{overlap},")), "{d3_csv}");
}
