//! §6.3 in one call, `transformer quickstart --task parsing`: from a treebank (the Penn Treebank
//! sample that `transformer data ptb-sample` fetches, or a full WSJ copy) to a trained parser, its
//! best checkpoint by validation F1, the test files parsed and scored as EVALB, and a report. The
//! steps are the library's own, as in the translation quick start: a [`RunConfig`] (the shipped
//! `configs/ptb-parse.toml`, with paths, budget and checkpoint interval set here) trained by
//! [`crate::train::run::run`], which keeps `best.safetensors` by validation F1; a [`Translator`] that
//! parses the test sentences with the decoding the validation used; [`Translator::parse_and_score`] scores them with EVALB. Running it
//! again in the same output directory resumes.

use super::quickstart::{check_common, check_marker, longer_minutes, QuickstartOptions, CHECKPOINTS_PER_RUN};
use super::{lock_output, short_number};
use crate::checkpoint;
use crate::data::ptb_sample::{PTB_SAMPLE_DIR, SAMPLE_SPLIT};
use crate::data::trees::{read_treebank, treebank_files, FileRange};
use crate::decode::translator::{SessionOptions, Translator};
use crate::error::{Error, Result};
use crate::eval::evalb;
use crate::events::Events;
use crate::io::{io_err, write_atomically};
use crate::task::Task;
use crate::train::run::{run as train_run, RunConfig, RunSummary, BEST};
use std::path::{Path, PathBuf};

/// The shipped parsing configuration: the quick start trains exactly this recipe, on a shorter
/// budget.
pub const PTB_PARSE_CONFIG: &str = include_str!("../../../../configs/ptb-parse.toml");

/// Where the parsing quick start writes by default (the translation one writes to `quickstart`).
pub const DEFAULT_OUTPUT: &str = "quickstart-parsing";

/// Example trees shown in the report.
pub const EXAMPLES: usize = 3;

/// Sentences of at most this many words are preferred as examples (their trees fit a line or two).
const EXAMPLE_WORDS: usize = 15;

/// One parsed test sentence.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedExample {
    /// The sentence (treebank tokens separated by spaces).
    pub sentence: String,
    /// The model's tree, bracketed on one line.
    pub tree: String,
}

/// What the parsing quick start produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsingReport {
    /// The options it ran with.
    pub options: QuickstartOptions,
    /// Updates trained.
    pub steps: u64,
    /// Seconds of training.
    pub train_seconds: f64,
    /// Why training stopped.
    pub stopped: String,
    /// Validation perplexity (per tree token) at the end.
    pub valid_perplexity: f64,
    /// The step of the checkpoint picked.
    pub picked_step: u64,
    /// Its validation F1 (`None` when no F1 was recorded and the last checkpoint was taken).
    pub picked_f1: Option<f64>,
    /// The decoding: beam, α, and whether constrained (those of the run's F1 validation).
    pub search: (usize, f64, bool),
    /// EVALB's report on the test sentences.
    pub evalb: evalb::Report,
    /// Test outputs that needed repair.
    pub repaired: usize,
    /// Example trees.
    pub examples: Vec<ParsedExample>,
    /// The files written, as (what, where).
    pub files: Vec<(String, PathBuf)>,
}

impl ParsingReport {
    /// The report as text: results, files, next commands.
    pub fn text(&self) -> String {
        let o = &self.options;
        let file = |what: &str| self.files.iter().find(|(w, _)| w == what).map(|(_, p)| p.display().to_string());
        let (model, vocab) = (file("model").unwrap_or_default(), file("vocabulary").unwrap_or_default());
        let (beam, alpha, constrained) = self.search;
        let constrained_flag = if constrained { " --constrained" } else { "" };
        let mut t = String::new();
        t.push_str(&format!(
            "# Quick start: parsing the Penn Treebank, {:.1} minutes of training\n\n",
            self.train_seconds / 60.0
        ));
        t.push_str(&format!(
            "Trained {} updates ({}); validation perplexity {:.2}.\n",
            self.steps, self.stopped, self.valid_perplexity
        ));
        match self.picked_f1 {
            Some(f1) => t.push_str(&format!(
                "Picked the checkpoint of step {}, the best by validation F1 ({f1:.2} on {}).\n\n",
                self.picked_step, o.valid_files
            )),
            None => t.push_str(&format!(
                "Took the last checkpoint, of step {} (no validation F1 was recorded).\n\n",
                self.picked_step
            )),
        }
        t.push_str(&format!(
            "Test {} ({} sentences; beam {beam}, alpha {alpha}{}), EVALB (COLLINS.prm):\n",
            o.test_files,
            self.evalb.sentences.len(),
            if constrained { ", constrained" } else { "" }
        ));
        let mut summary = Vec::new();
        self.evalb.write_evalb(&mut summary, true).expect("writing to memory");
        for line in String::from_utf8_lossy(&summary).lines() {
            t.push_str(&if line.is_empty() { "\n".to_string() } else { format!("  {line}\n") });
        }
        let n = self.evalb.sentences.len().max(1);
        t.push_str(&format!(
            "  Outputs repaired          = {} of {} ({:.2}%)\n\n",
            self.repaired,
            self.evalb.sentences.len(),
            100.0 * self.repaired as f64 / n as f64
        ));
        t.push_str("Examples:\n");
        for e in &self.examples {
            t.push_str(&format!("  {}\n  -> {}\n", e.sentence, e.tree));
        }
        t.push_str("\nFiles:\n");
        for (what, path) in &self.files {
            t.push_str(&format!("  {what:<22} {}\n", path.display()));
        }
        t.push_str("\nNext:\n");
        if let Some(longer) = longer_minutes(o.minutes) {
            t.push_str(&format!(
                "  train longer (same directory, resumes):  transformer quickstart --task parsing --output {}{} --minutes {}\n",
                o.output.display(),
                same_data_args(o),
                short_number(longer)
            ));
        }
        t.push_str(&format!(
            "  parse your own sentences:                echo \"The board met on Tuesday.\" | transformer parse --tokenize{constrained_flag} --checkpoint {model} --bpe {vocab}\n"
        ));
        t.push_str(&format!(
            "  score the test trees again:              transformer parse-eval --gold {} --test {}\n",
            file("gold trees").unwrap_or_default(),
            file("test trees").unwrap_or_default()
        ));
        t.push_str("  the full 30-minute recipe:               transformer train --config configs/ptb-parse.toml\n");
        t
    }
}

/// The options that name the data, when they are not the defaults (for the report's commands).
fn same_data_args(o: &QuickstartOptions) -> String {
    let mut s = String::new();
    if o.treebank != Path::new(PTB_SAMPLE_DIR) {
        s.push_str(&format!(" --treebank {}", o.treebank.display()));
    }
    for (flag, value, default) in [
        ("--train-files", &o.train_files, SAMPLE_SPLIT[0]),
        ("--valid-files", &o.valid_files, SAMPLE_SPLIT[1]),
        ("--test-files", &o.test_files, SAMPLE_SPLIT[2]),
    ] {
        if value != default {
            s.push_str(&format!(" {flag} {value}"));
        }
    }
    s
}

/// The run configuration the quick start trains: the shipped parsing recipe on `opts.treebank`
/// and its files, writing to `run`, with the budget and checkpoint interval of `opts`.
pub fn run_config(opts: &QuickstartOptions, run: &Path) -> Result<RunConfig> {
    let mut cfg = RunConfig::from_toml(PTB_PARSE_CONFIG, "configs/ptb-parse.toml (built in)", &[])?;
    let d = &mut cfg.data;
    (d.train_src, d.train_files) = (opts.treebank.clone(), Some(opts.train_files.clone()));
    (d.valid_src, d.valid_files) = (opts.treebank.clone(), Some(opts.valid_files.clone()));
    d.bpe = run.join("vocab.json");
    let t = &mut cfg.train;
    t.output_dir = run.to_path_buf();
    t.time_limit_minutes = Some(opts.minutes);
    t.checkpoint_minutes = opts.minutes / CHECKPOINTS_PER_RUN;
    t.valid_steps = Some(opts.valid_steps);
    Ok(cfg)
}

/// The treebank is there and holds files in every range, or an error that says how to get it.
fn check_treebank(opts: &QuickstartOptions, ranges: &[(&str, FileRange)], events: &mut dyn Events) -> Result<()> {
    let tb = &opts.treebank;
    if !tb.is_dir() {
        let fetch = if tb == Path::new(PTB_SAMPLE_DIR) {
            "transformer data ptb-sample".to_string()
        } else {
            format!("transformer data ptb-sample --cache {}", tb.display())
        };
        return Err(Error::Config(format!(
            "the treebank {} does not exist: fetch the Penn Treebank sample with `{fetch}` (from this \
             directory), or give --treebank DIR, a directory of .mrg files such as your own WSJ copy",
            tb.display()
        )));
    }
    for (what, range) in ranges {
        let n = treebank_files(tb, Some(range))?.len();
        events.log(&format!("{what}: {n} files {}..{} of {}", range.first, range.last, tb.display()));
    }
    Ok(())
}

/// Saves the model the run picked as `model_path`: its best checkpoint by validation F1 when it
/// kept one, else its last. Returns the picked step and F1.
fn pick(
    run_dir: &Path,
    summary: &RunSummary,
    model_path: &Path,
    events: &mut dyn Events,
) -> Result<(u64, Option<f64>)> {
    let best = run_dir.join(BEST);
    let (picked, picked_f1) = match (best.is_file(), summary.state.best_f1) {
        (true, Some(f1)) => (best, Some(f1)),
        _ => (summary.checkpoint.clone(), None),
    };
    let mut ckpt = checkpoint::load(&picked)?;
    ckpt.adam = None; // the model alone: the run directory keeps what resuming needs
    checkpoint::save(model_path, &ckpt)?;
    events.log(&format!(
        "{} (step {}{}) -> {}",
        picked.display(),
        ckpt.step,
        picked_f1.map(|f| format!(", validation F1 {f:.2}")).unwrap_or_default(),
        model_path.display()
    ));
    Ok((ckpt.step, picked_f1))
}

/// Runs the parsing quick start (or resumes it): see the module's documentation.
pub fn run(opts: &QuickstartOptions, events: &mut dyn Events) -> Result<ParsingReport> {
    check_common(opts)?;
    let ranges = [
        ("train", FileRange::parse(&opts.train_files)?),
        ("valid", FileRange::parse(&opts.valid_files)?),
        ("test", FileRange::parse(&opts.test_files)?),
    ];
    events.stage("data");
    check_treebank(opts, &ranges, events)?;
    let out = &opts.output;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let _lock = lock_output(out, "quick start", events)?;
    check_marker(
        out,
        &serde_json::json!({
            "task": Task::Parsing.name(),
            "train_files": opts.train_files,
            "valid_files": opts.valid_files,
        }),
    )?;
    let mut files: Vec<(String, PathBuf)> = vec![("treebank".into(), opts.treebank.clone())];

    events.stage("training");
    let run_dir = out.join("run");
    let cfg = run_config(opts, &run_dir)?;
    let summary = train_run(&cfg, events)?;
    let vocab = run_dir.join("vocab.json");
    files.push(("run directory".into(), run_dir.clone()));
    files.push(("vocabulary".into(), vocab.clone()));
    files.push(("learning curve".into(), run_dir.join("learning_curve.svg")));
    files.push(("metrics".into(), run_dir.join("metrics.jsonl")));

    events.stage("picking");
    let model_path = out.join("model.safetensors");
    let (picked_step, picked_f1) = pick(&run_dir, &summary, &model_path, events)?;
    files.push(("model".into(), model_path.clone()));

    events.stage("parsing");
    let translator =
        Translator::load(&model_path, &vocab, SessionOptions { task: Task::Parsing, ..Default::default() })?;
    let mut gold = read_treebank(&opts.treebank, Some(&ranges[2].1))?;
    if let Some(n) = opts.test_sentences {
        gold.truncate(n);
    }
    let sentences: Vec<String> = gold.iter().map(|t| t.words().join(" ")).collect();
    // The decoding the run's validation picked the checkpoint with.
    let popts = cfg.train.valid_f1_parse_options();
    let scored = translator.parse_and_score(&sentences, &gold, &popts, events)?;
    let parses = &scored.parses;
    let gold_lines: Vec<String> = gold.iter().map(|t| t.to_bracketed()).collect();
    let test_lines: Vec<String> = parses.iter().map(|p| p.tree.to_bracketed()).collect();
    let mut full = Vec::new();
    scored.report.write_evalb(&mut full, false).expect("writing to memory");
    for (what, name, text) in [
        ("test sentences", "test.words", lines(&sentences)),
        ("gold trees", "test.gold", lines(&gold_lines)),
        ("test trees", "test.trees", lines(&test_lines)),
        ("EVALB report", "test.evalb", String::from_utf8_lossy(&full).into_owned()),
    ] {
        let path = out.join(name);
        write_atomically(&path, text.as_bytes())?;
        files.push((what.into(), path));
    }

    // Short sentences first (their trees fit the report), in test order.
    let mut order: Vec<usize> = (0..sentences.len()).filter(|&i| !parses[i].skipped).collect();
    order.sort_by_key(|&i| (gold[i].words().len() > EXAMPLE_WORDS, i));
    let examples = order
        .into_iter()
        .take(EXAMPLES)
        .map(|i| ParsedExample { sentence: sentences[i].clone(), tree: test_lines[i].clone() })
        .collect();

    files.push(("report".into(), out.join("report.txt")));
    let search = &popts.decode.search;
    let report = ParsingReport {
        options: opts.clone(),
        steps: summary.state.step,
        train_seconds: summary.state.elapsed_s,
        stopped: summary.stopped.to_string(),
        valid_perplexity: summary.valid.perplexity(),
        picked_step,
        picked_f1,
        search: (search.beam, search.alpha, popts.constrained),
        repaired: scored.malformed(),
        evalb: scored.report,
        examples,
        files,
    };
    write_atomically(&out.join("report.txt"), report.text().as_bytes())?;
    Ok(report)
}

/// One entry a line, each ended by a newline.
fn lines(items: &[String]) -> String {
    items.iter().map(|s| format!("{s}\n")).collect()
}
