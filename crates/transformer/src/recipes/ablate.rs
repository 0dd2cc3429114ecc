//! `transformer ablate`: the paper's Table 3 (§6.2, "Model Variations") at the scale of this
//! machine. The base recipe is the quick start's (configs/multi30k-en-de.toml on the built-in
//! Multi30k English→German data); every chosen row of Table 3 is applied to it *in proportion*
//! ([`scale_row`]), trained on the same budget, data order and seed, averaged and scored on the
//! dev set (val: perplexity per word-piece and BLEU with beam 4, α 0.6), and set beside the
//! paper's own column for that row.
//!
//! The work is laid out in the output directory so that a killed run picks up where it was:
//! `ablate.json` records the plan (rows, settings, budget, seeds) and refuses to resume a different
//! one; `runs/<row>-s<seed>/` is one training run (resumed from its last checkpoint like any
//! `transformer train` run) and its `result.json` once it is scored; `table.md`, `table.csv` and
//! `bleu.svg` are written at the end from the results.

use super::{
    average_last, lock_output, short_number, translate_and_score, Multi30kFiles, MAX_MINUTES, MULTI30K_CONFIG,
    MULTI30K_ORIGIN,
};
use crate::config::{ModelChange, ModelConfig, Preset};
use crate::data::download::Source;
use crate::decode::translator::{SessionOptions, Translator};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::io::{io_err, write_atomically};
use crate::train::run::{run as train_run, RunConfig};
use crate::train::run_dir::last_checkpoints;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod report;
pub use report::RowSummary;
use report::{bleu_svg, render};

/// How long every row trains.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Budget {
    /// Minutes of training per row (wall clock): what a laptop has. A larger row makes fewer
    /// updates.
    Minutes(f64),
    /// Updates per row: the paper's way (every row of Table 3 trained 100K steps), and the same
    /// for every row whatever the machine's load.
    Updates(u64),
}

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct AblateOptions {
    /// Where everything goes; an ablation there is resumed.
    pub output: PathBuf,
    /// The Table 3 rows to train besides base, in order (see [`parse_rows`]).
    pub rows: Vec<Preset>,
    /// Training budget of every row.
    pub budget: Budget,
    /// Seeds per row (1, 2, …): with more than one, each row's mean and spread.
    pub seeds: u64,
    /// Score only the first N dev sentences (all of val by default; fewer for smoke tests).
    pub dev_sentences: Option<usize>,
    /// Checkpoints averaged for scoring (the last ones; §6.1 averages 5).
    pub average: usize,
    /// `section.field=value` overrides of the base recipe (as `transformer train --set`); the rows
    /// are scaled from the base they give.
    pub base_overrides: Vec<String>,
}

impl Default for AblateOptions {
    fn default() -> Self {
        AblateOptions {
            output: PathBuf::from("ablation"),
            rows: parse_rows("A,B,D,E").expect("the default rows parse"),
            budget: Budget::Minutes(5.0),
            seeds: 1,
            dev_sentences: None,
            average: super::quickstart::AVERAGE_LAST,
            base_overrides: Vec::new(),
        }
    }
}

/// Checkpoints written per row: the interval is the budget divided by this, so the averaged ones
/// span the end of training (as in the quick start).
const CHECKPOINTS_PER_ROW: f64 = 20.0;

/// `A,B,D,E` (a letter: every row of that group), or row names (`a1,d3,e`), or a mix, into the
/// rows in Table 3's order, each once. `base` is always trained and `big` is no variation of it,
/// so neither is accepted.
pub fn parse_rows(spec: &str) -> Result<Vec<Preset>> {
    let mut chosen = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let lower = item.to_ascii_lowercase();
        let rows: Vec<Preset> = if lower.len() == 1 && "abcde".contains(lower.as_str()) {
            Preset::ALL.iter().copied().filter(|p| group(*p) == lower.chars().next()).collect()
        } else {
            let p = Preset::from_name(&lower).map_err(|_| {
                Error::Config(format!(
                    "--rows: unknown row '{item}'; give groups A–E or rows a1–a4, b1, b2, c1–c7, d1–d4, e"
                ))
            })?;
            if group(p).is_none() {
                return Err(Error::Config(format!(
                    "--rows: '{item}' is not a variation of base (base is always trained; big is a different recipe)"
                )));
            }
            vec![p]
        };
        chosen.extend(rows);
    }
    if chosen.is_empty() {
        return Err(Error::Config("--rows: no row given; e.g. --rows A,B,D,E".into()));
    }
    let mut rows: Vec<Preset> = Preset::ALL.iter().copied().filter(|p| chosen.contains(p)).collect();
    rows.dedup();
    Ok(rows)
}

/// The Table 3 group of a variation row ('a'…'e'); `None` for base and big.
fn group(p: Preset) -> Option<char> {
    match p {
        Preset::Base | Preset::Big => None,
        _ => p.name().chars().next(),
    }
}

/// One row as trained here: its name, the paper's change, and the change it makes to our base.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RowFile")]
pub struct Row {
    /// `base`, `a1`, …
    pub name: String,
    /// The columns this row sets on our base; none for base.
    pub change: ModelChange,
    /// The paper's change, in the same words ("n_heads=1, d_k=512, d_v=512").
    pub paper_change: String,
}

/// A row as `ablate.json` holds it: with its `change`, or, written before rows were typed, with
/// `settings` as (field, TOML value) pairs, read into the same change.
#[derive(Deserialize)]
struct RowFile {
    name: String,
    change: Option<ModelChange>,
    settings: Option<Vec<(String, String)>>,
    paper_change: String,
}

impl TryFrom<RowFile> for Row {
    type Error = String;

    fn try_from(f: RowFile) -> std::result::Result<Row, String> {
        let change = match (f.change, f.settings) {
            (Some(change), _) => change,
            (None, Some(settings)) => {
                let text: String = settings.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
                toml::from_str(&text).map_err(|e| format!("row {}: settings {settings:?}: {e}", f.name))?
            }
            (None, None) => return Err(format!("row {}: no `change`", f.name)),
        };
        Ok(Row { name: f.name, change, paper_change: f.paper_change })
    }
}

impl Row {
    /// The paper's Table 3 dev perplexity and BLEU of this row.
    fn paper_scores(&self) -> Option<(f64, f64)> {
        Preset::from_name(&self.name).ok()?.paper_dev_scores()
    }
}

/// A row of Table 3 applied to `base` in proportion: each column the paper's row changes is our
/// base's value times the paper's ratio (row ÷ paper base), rounded for sizes (at least 1) and to
/// 4 decimals for rates; a changed position encoding is copied. One exception keeps the paper's
/// meaning: row A varies the number of heads "keeping the amount of computation constant", so
/// there d_k = d_v = (our base's h · d_k) ÷ h. At the quick start's size (N 3, d_model 256, d_ff
/// 1024, h 4, d_k = d_v 64, P_drop 0.2, ε_ls 0.1): A → h 1/2/8/16 with d_k = d_v 256/128/32/16;
/// B → d_k 16/32; C → N 1/2/4, d_model 128 (d_k 32) / 512 (d_k 128), d_ff 512/2048; D → P_drop
/// 0/0.4, ε_ls 0/0.2; E → learned positions.
pub fn scale_row(row: Preset, base: &ModelConfig) -> Result<Row> {
    let pb = ModelConfig::base();
    let paper = ModelChange::between(&pb, &row.config());
    let size = |ours: usize, p: usize, pb: usize| (ours as f64 * p as f64 / pb as f64).round().max(1.0) as usize;
    let rate = |ours: f32, p: f32, pb: f32| ((ours as f64 * p as f64 / pb as f64 * 1e4).round() / 1e4) as f32;
    let heads_only = paper.n_heads.is_some() && paper.d_model.is_none();
    let h = paper.n_heads.map_or(base.n_heads, |p| size(base.n_heads, p, pb.n_heads));
    // A key or value width: at constant computation when only the heads change.
    let width = |which: &str, ours: usize, p: usize, pb: usize| -> Result<usize> {
        if !heads_only {
            return Ok(size(ours, p, pb));
        }
        let total = base.n_heads * ours;
        if !total.is_multiple_of(h) {
            return Err(Error::Config(format!(
                "row {}: h·{which} = {total} of the base does not divide into {h} heads",
                row.name()
            )));
        }
        Ok(total / h)
    };
    let change = ModelChange {
        n_layers: paper.n_layers.map(|p| size(base.n_layers, p, pb.n_layers)),
        d_model: paper.d_model.map(|p| size(base.d_model, p, pb.d_model)),
        d_ff: paper.d_ff.map(|p| size(base.d_ff, p, pb.d_ff)),
        n_heads: paper.n_heads.map(|_| h),
        d_k: paper.d_k.map(|p| width("d_k", base.d_k, p, pb.d_k)).transpose()?,
        d_v: paper.d_v.map(|p| width("d_v", base.d_v, p, pb.d_v)).transpose()?,
        dropout: paper.dropout.map(|p| rate(base.dropout, p, pb.dropout)),
        label_smoothing: paper.label_smoothing.map(|p| rate(base.label_smoothing, p, pb.label_smoothing)),
        positions: paper.positions,
    };
    if change.apply(base) == *base {
        return Err(Error::Config(format!(
            "row {} ({paper}) changes nothing at this base (every scaled value equals base's, after rounding): \
             leave it out of --rows, or give the base more room with --set",
            row.name(),
        )));
    }
    Ok(Row { name: row.name().into(), change, paper_change: paper.to_string() })
}

/// The base row (no change).
fn base_row() -> Row {
    Row { name: "base".into(), change: ModelChange::default(), paper_change: String::new() }
}

/// Everything an ablation directory is made for; a resumed run must ask for the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Base first, then the chosen rows.
    pub rows: Vec<Row>,
    /// Budget per row.
    pub budget: Budget,
    /// Seeds per row.
    pub seeds: u64,
    /// Dev sentences scored (None: all).
    pub dev_sentences: Option<usize>,
    /// Checkpoints averaged.
    pub average: usize,
    /// The base recipe's overrides.
    pub base_overrides: Vec<String>,
}

/// One trained and scored row (one seed), `runs/<row>-s<seed>/result.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowResult {
    /// Row name.
    pub row: String,
    /// Seed.
    pub seed: u64,
    /// Parameters of the model (at our vocabulary).
    pub params: usize,
    /// Updates made.
    pub updates: u64,
    /// Seconds of training.
    pub train_seconds: f64,
    /// Checkpoints averaged.
    pub averaged: usize,
    /// Dev perplexity per word-piece (teacher-forced, no label smoothing) of the averaged model.
    pub dev_perplexity: f64,
    /// Dev BLEU (sacreBLEU 13a, cased) of the averaged model, beam 4, α 0.6.
    pub dev_bleu: f64,
}

/// The run configuration of one row and seed: the quick start's recipe with `opts`' overrides,
/// training on `files` with the vocabulary `bpe` into `dir`, the budget, checkpoints every
/// budget/20, and the row's change.
pub fn row_config(
    plan: &Plan,
    files: &Multi30kFiles,
    bpe: &Path,
    row: &Row,
    seed: u64,
    dir: &Path,
) -> Result<RunConfig> {
    let mut cfg = RunConfig::from_toml(MULTI30K_CONFIG, MULTI30K_ORIGIN, &plan.base_overrides)?;
    files.train_on(&mut cfg.data);
    cfg.data.bpe = bpe.to_path_buf();
    let t = &mut cfg.train;
    (t.output_dir, t.seed, t.keep_last) = (dir.to_path_buf(), seed, plan.average.max(1));
    match plan.budget {
        Budget::Minutes(m) => {
            t.time_limit_minutes = Some(m);
            t.checkpoint_minutes = m / CHECKPOINTS_PER_ROW;
        }
        Budget::Updates(n) => {
            t.max_steps = Some(n);
            // The recipe's own time limit would cut slow rows short of n.
            t.time_limit_minutes = Some(1e9);
            t.checkpoint_steps = Some(((n as f64 / CHECKPOINTS_PER_ROW).round() as u64).max(1));
            // Only the step checkpoints count: the time interval is pushed past any run.
            t.checkpoint_minutes = 1e9;
        }
    }
    cfg.model.change(&row.change);
    Ok(cfg)
}

/// Settings the ablation owns (the same budget, data, seed and averaging for every row), which
/// `--set` may not change, and the flag to use instead.
const OWNED: [(&str, &str); 15] = [
    ("train.seed", "use --seeds"),
    ("train.output_dir", "use --output"),
    ("train.max_steps", "use --updates"),
    ("train.max_epochs", "use --updates or --minutes"),
    ("train.time_limit_minutes", "use --minutes"),
    ("train.checkpoint_minutes", "checkpoints are written every budget/20"),
    ("train.checkpoint_steps", "checkpoints are written every budget/20"),
    ("train.keep_last", "use --average"),
    ("data.train_src", "the ablation trains on the built-in Multi30k En→De"),
    ("data.train_tgt", "the ablation trains on the built-in Multi30k En→De"),
    ("data.valid_src", "the dev set is Multi30k val"),
    ("data.valid_tgt", "the dev set is Multi30k val"),
    ("data.bpe", "one BPE model is learned in --output for every row"),
    ("data.train_bin", "the ablation trains on the built-in Multi30k En→De"),
    ("data.task", "the ablation is of translation"),
];

/// The plan of `opts`: base and the rows scaled from the base the overrides give.
pub fn plan(opts: &AblateOptions) -> Result<Plan> {
    if opts.seeds == 0 {
        return Err(Error::Config("--seeds 0 trains nothing: give at least 1".into()));
    }
    if opts.dev_sentences == Some(0) {
        return Err(Error::Config("--dev-sentences 0 scores nothing: give at least 1".into()));
    }
    match opts.budget {
        Budget::Minutes(m) if !(m.is_finite() && m > 0.0) => {
            return Err(Error::Config(format!("--minutes {} must be a positive number", short_number(m))))
        }
        Budget::Minutes(m) if m > MAX_MINUTES => {
            return Err(Error::Config(format!(
            "--minutes {} is more than a week ({MAX_MINUTES} minutes) per row, the longest budget an ablation takes",
            short_number(m)
        )))
        }
        Budget::Updates(0) => return Err(Error::Config("--updates 0 trains nothing: give at least 1".into())),
        _ => {}
    }
    for o in &opts.base_overrides {
        let key = o.split('=').next().unwrap_or("").trim();
        if let Some((_, instead)) = OWNED.iter().find(|(k, _)| *k == key) {
            return Err(Error::Config(format!(
                "--set {o}: the ablation sets {key} itself, the same for every row ({instead})"
            )));
        }
    }
    let base_cfg = RunConfig::from_toml(MULTI30K_CONFIG, MULTI30K_ORIGIN, &opts.base_overrides)?;
    let base = base_cfg.model_config(base_cfg.data.vocab_size)?;
    let mut rows = vec![base_row()];
    for &p in &opts.rows {
        rows.push(scale_row(p, &base)?);
    }
    Ok(Plan {
        rows,
        budget: opts.budget,
        seeds: opts.seeds,
        dev_sentences: opts.dev_sentences,
        average: opts.average.max(1),
        base_overrides: opts.base_overrides.clone(),
    })
}

/// The plan recorded in `out/ablate.json`, written if absent; a different one is refused.
fn check_plan(out: &Path, plan: &Plan) -> Result<()> {
    let path = out.join("ablate.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let found: Plan = serde_json::from_str(&text).map_err(|e| {
                Error::Config(format!("{}: {e}; remove the file or choose another --output", path.display()))
            })?;
            if found != *plan {
                let rows = |p: &Plan| p.rows.iter().map(|r| r.name.clone()).collect::<Vec<_>>().join(",");
                let mut differ = Vec::new();
                if rows(&found) != rows(plan) {
                    differ.push(format!("rows {} there, {} here", rows(&found), rows(plan)));
                } else if found.rows != plan.rows {
                    differ.push("the rows' settings (another base)".to_string());
                }
                if found.budget != plan.budget {
                    differ.push(format!("budget {:?} there, {:?} here", found.budget, plan.budget));
                }
                if found.seeds != plan.seeds {
                    differ.push(format!("{} seed(s) there, {} here", found.seeds, plan.seeds));
                }
                if found.dev_sentences != plan.dev_sentences {
                    differ
                        .push(format!("dev sentences {:?} there, {:?} here", found.dev_sentences, plan.dev_sentences));
                }
                if found.average != plan.average {
                    differ.push(format!("--average {} there, {} here", found.average, plan.average));
                }
                if found.base_overrides != plan.base_overrides {
                    differ.push(format!("--set {:?} there, {:?} here", found.base_overrides, plan.base_overrides));
                }
                return Err(Error::Config(format!(
                    "{} holds another ablation ({}): run it with its own options to resume it, or choose another --output",
                    out.display(),
                    differ.join("; ")
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = serde_json::to_string_pretty(plan).expect("a plan serialises");
            write_atomically(&path, format!("{text}\n").as_bytes())
        }
        Err(e) => Err(Error::Io { path, source: e }),
    }
}

/// What the ablation produced.
#[derive(Clone, Debug, PartialEq)]
pub struct AblateReport {
    /// The plan it ran.
    pub plan: Plan,
    /// Base first, then the rows.
    pub rows: Vec<RowSummary>,
    /// The table as Markdown (also in `table.md`).
    pub markdown: String,
    /// The table as CSV (also in `table.csv`).
    pub csv: String,
}

/// Averages the last checkpoints of `dir` (a run that ended in `state`), then scores the average
/// on the dev set.
#[allow(clippy::too_many_arguments)]
fn score_row(
    plan: &Plan,
    files: &Multi30kFiles,
    bpe: &Path,
    row: &Row,
    seed: u64,
    dir: &Path,
    state: crate::train::run::RunState,
    events: &mut dyn Events,
) -> Result<RowResult> {
    if last_checkpoints(dir, plan.average)?.is_empty() {
        return Err(Error::Config(format!("{}: no checkpoint to score", dir.display())));
    }
    let model_path = dir.join("average.safetensors");
    let (avg, averaged) = average_last(dir, plan.average, &model_path)?;
    let translator = Translator::load(&model_path, bpe, SessionOptions::default())?;
    let read = |p: &Path| crate::data::corpus::read_lines(p);
    let (mut src, mut refs) = (read(&files.valid.src)?, read(&files.valid.tgt)?);
    if let Some(n) = plan.dev_sentences {
        src.truncate(n);
        refs.truncate(n);
    }
    let totals = translator.perplexity(&src, &refs, events)?;
    let ppl =
        totals.perplexity().ok_or_else(|| Error::Config(format!("{}: no dev token could be scored", row.name)))?;
    let scored = translate_and_score(&translator, &src, refs, events)?;
    Ok(RowResult {
        row: row.name.clone(),
        seed,
        params: avg.params.len(),
        updates: state.step,
        train_seconds: state.elapsed_s,
        averaged,
        dev_perplexity: ppl,
        dev_bleu: scored.bleu.score,
    })
}

/// Runs the ablation (or resumes it): see the module's documentation.
pub fn run(opts: &AblateOptions, events: &mut dyn Events) -> Result<AblateReport> {
    let plan = plan(opts)?;
    let out = &opts.output;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let _lock = lock_output(out, "ablation", events)?;
    check_plan(out, &plan)?;

    events.stage("data");
    let data = Multi30kFiles::fetch(&Source::Embedded, "en", "de", &out.join("data"), events)?;
    let bpe = out.join("bpe.json");

    let mut summaries = Vec::new();
    for row in &plan.rows {
        let mut results = Vec::new();
        for seed in 1..=plan.seeds {
            let dir = out.join("runs").join(format!("{}-s{seed}", row.name));
            let result_path = dir.join("result.json");
            match std::fs::read_to_string(&result_path) {
                Ok(text) => match serde_json::from_str::<RowResult>(&text) {
                    Ok(r) if r.row == row.name && r.seed == seed && r.dev_bleu.is_finite() => {
                        events.log(&format!("{} seed {seed}: done before (dev BLEU {:.2})", row.name, r.dev_bleu));
                        results.push(r);
                        continue;
                    }
                    Ok(r) => events.log(&format!(
                        "{}: holds row {} seed {} (dev BLEU {}), not {} seed {seed}; scoring this one again",
                        result_path.display(),
                        r.row,
                        r.seed,
                        r.dev_bleu,
                        row.name
                    )),
                    Err(e) => {
                        events.log(&format!("{}: unreadable ({e}); scoring the row again", result_path.display()))
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::Io { path: result_path, source: e }),
            }
            events.stage(&format!("training {} (seed {seed}){}", row.name, describe(row)));
            let cfg = row_config(&plan, &data, &bpe, row, seed, &dir)?;
            let summary = train_run(&cfg, events)?;
            let budget_spent = match (plan.budget, summary.stopped) {
                (Budget::Updates(n), crate::train::run::StopReason::Steps(s)) => s == n,
                (Budget::Minutes(_), crate::train::run::StopReason::TimeLimit(_)) => true,
                _ => false,
            };
            if !budget_spent {
                return Err(Error::Config(format!(
                    "{} seed {seed} stopped early ({}), not on the ablation's budget {:?}: its row would not be comparable",
                    row.name, summary.stopped, plan.budget
                )));
            }
            events.stage(&format!("scoring {} (seed {seed})", row.name));
            let r = score_row(&plan, &data, &bpe, row, seed, &dir, summary.state, events)?;
            events.log(&format!(
                "{} seed {seed}: {} updates, dev perplexity {:.2}, dev BLEU {:.2}",
                row.name, r.updates, r.dev_perplexity, r.dev_bleu
            ));
            let text = serde_json::to_string_pretty(&r).expect("a result serialises");
            write_atomically(&result_path, format!("{text}\n").as_bytes())?;
            results.push(r);
        }
        summaries.push(RowSummary { row: row.clone(), results });
    }
    let (markdown, csv) = render(&plan, &summaries);
    write_atomically(&out.join("table.md"), markdown.as_bytes())?;
    write_atomically(&out.join("table.csv"), csv.as_bytes())?;
    write_atomically(&out.join("bleu.svg"), bleu_svg(&summaries).as_bytes())?;
    Ok(AblateReport { plan, rows: summaries, markdown, csv })
}

/// ": n_heads=1, d_k=256" for a row with a change, "" for base.
fn describe(row: &Row) -> String {
    match row.change.is_empty() {
        true => String::new(),
        false => format!(": {}", row.change),
    }
}

#[cfg(test)]
mod tests {
    use super::report::{delta, within_spread};
    use super::*;

    fn quick_start_base() -> ModelConfig {
        let cfg = RunConfig::from_toml(MULTI30K_CONFIG, "built in", &[]).unwrap();
        cfg.model_config(cfg.data.vocab_size).unwrap()
    }

    fn settings(row: &Row) -> String {
        row.change.to_string()
    }

    #[test]
    fn rows_scale_in_proportion_to_the_quick_start_base() {
        let base = quick_start_base();
        assert_eq!((base.n_layers, base.d_model, base.d_ff, base.n_heads, base.d_k), (3, 256, 1024, 4, 64));
        let row = |p| scale_row(p, &base).unwrap();
        assert_eq!(settings(&row(Preset::A1)), "n_heads=1, d_k=256, d_v=256");
        assert_eq!(row(Preset::A1).paper_change, "n_heads=1, d_k=512, d_v=512");
        assert_eq!(settings(&row(Preset::A2)), "n_heads=2, d_k=128, d_v=128");
        assert_eq!(settings(&row(Preset::A3)), "n_heads=8, d_k=32, d_v=32");
        assert_eq!(settings(&row(Preset::A4)), "n_heads=16, d_k=16, d_v=16");
        assert_eq!(settings(&row(Preset::B1)), "d_k=16");
        assert_eq!(settings(&row(Preset::B2)), "d_k=32");
        assert_eq!(settings(&row(Preset::C1)), "n_layers=1");
        assert_eq!(settings(&row(Preset::C3)), "n_layers=4");
        assert_eq!(settings(&row(Preset::C4)), "d_model=128, d_k=32, d_v=32");
        assert_eq!(settings(&row(Preset::C5)), "d_model=512, d_k=128, d_v=128");
        assert_eq!(settings(&row(Preset::C7)), "d_ff=2048");
        assert_eq!(settings(&row(Preset::D1)), "dropout=0");
        assert_eq!(settings(&row(Preset::D2)), "dropout=0.4");
        assert_eq!(settings(&row(Preset::D3)), "label_smoothing=0");
        assert_eq!(settings(&row(Preset::D4)), "label_smoothing=0.2");
        assert_eq!(settings(&row(Preset::E)), "positions=learned");
        // Every scaled row builds a model.
        for p in parse_rows("A,B,C,D,E").unwrap() {
            let mut cfg = RunConfig::from_toml(MULTI30K_CONFIG, "built in", &[]).unwrap();
            cfg.model.change(&row(p).change);
            let m = cfg.model_config(500).unwrap();
            assert_eq!(m, row(p).change.apply(&cfg.model_config(500).unwrap()), "{}", p.name());
            crate::model::Transformer::new(m, 1).unwrap_or_else(|e| panic!("{}: {e}", p.name()));
        }
    }

    #[test]
    fn a_plan_written_before_rows_were_typed_reads_into_the_same_rows() {
        let base = quick_start_base();
        for p in parse_rows("A,B,C,D,E").unwrap() {
            let row = scale_row(p, &base).unwrap();
            // The old form: each set column as a TOML value ("\"learned\"" for positions).
            let settings: Vec<(String, String)> =
                toml::Table::try_from(row.change).unwrap().iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
            let old = serde_json::json!({ "name": row.name, "settings": settings, "paper_change": row.paper_change });
            assert_eq!(serde_json::from_value::<Row>(old).unwrap(), row, "{}", p.name());
            let new = serde_json::to_value(&row).unwrap();
            assert_eq!(serde_json::from_value::<Row>(new).unwrap(), row);
        }
        let d2 = serde_json::json!({ "name": "d2", "settings": [["dropout", "0.4"]], "paper_change": "dropout=0.2" });
        let d2: Row = serde_json::from_value(d2).unwrap();
        assert_eq!(d2.change, ModelChange { dropout: Some(0.4), ..Default::default() });
        let bad = serde_json::json!({ "name": "x", "settings": [["heads", "2"]], "paper_change": "" });
        assert!(serde_json::from_value::<Row>(bad).unwrap_err().to_string().contains("row x"));
    }

    #[test]
    fn row_specs_parse_into_table_order_and_bad_ones_are_named() {
        let names = |s: &str| parse_rows(s).unwrap().iter().map(|p| p.name()).collect::<Vec<_>>();
        assert_eq!(names("A,B,D,E"), ["a1", "a2", "a3", "a4", "b1", "b2", "d1", "d2", "d3", "d4", "e"]);
        assert_eq!(names("e, a3,A"), ["a1", "a2", "a3", "a4", "e"]);
        assert_eq!(names("d3"), ["d3"]);
        for (bad, says) in
            [("F", "unknown row 'F'"), ("base", "not a variation"), ("big", "not a variation"), ("", "no row")]
        {
            let e = parse_rows(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_table_says_how_many_checkpoints_were_really_averaged() {
        let base = base_row();
        let result = |averaged| RowResult {
            row: "base".into(),
            seed: 1,
            params: 10,
            updates: 4,
            train_seconds: 60.0,
            averaged,
            dev_perplexity: 9.0,
            dev_bleu: 20.0,
        };
        let plan = |average| Plan {
            rows: vec![base.clone()],
            budget: Budget::Minutes(1e-7),
            seeds: 1,
            dev_sentences: None,
            average,
            base_overrides: Vec::new(),
        };
        let rows = vec![RowSummary { row: base.clone(), results: vec![result(4)] }];
        let (md, _) = render(&plan(99), &rows);
        assert!(md.contains("the last 4 (--average 99: the rows wrote only 4) checkpoints"), "{md}");
        assert!(md.contains("1e-7 minutes of training per row"), "{md}");
        let (md, _) = render(&plan(4), &rows);
        assert!(md.contains("of the average of the last 4 checkpoints;"), "{md}");
    }

    #[test]
    fn minute_budgets_are_written_without_hundreds_of_digits() {
        assert_eq!(short_number(1e308), "1e308");
        assert_eq!(short_number(3e-7), "3e-7");
        assert_eq!(
            (short_number(0.75), short_number(30.0), short_number(1.333)),
            ("0.75".into(), "30".into(), "1.33".into())
        );
        let opts = AblateOptions { budget: Budget::Minutes(1e308), ..AblateOptions::default() };
        let err = plan(&opts).unwrap_err().to_string();
        assert!(err.contains("--minutes 1e308 is more than a week"), "{err}");
    }

    #[test]
    fn significance_is_marked_only_with_a_spread_to_judge_by() {
        // Ranges mean ± spread/2: 0.3 apart with half-spreads 0.25 + 0.1 overlap; 0.4 apart do not.
        assert_eq!(delta(-0.3, 0.5, 0.2, 3, 2), "-0.30 ~");
        assert_eq!(delta(-0.4, 0.5, 0.2, 3, 2), "-0.40");
        assert_eq!(delta(-0.3, 0.0, 0.0, 1, 2), "-0.30");
        assert!(!within_spread(0.0, 0.0, 0.0, 1), "one seed: no judgement");
    }
}
