//! The main job in one call: from the built-in Multi30k English–German data (or a downloaded
//! language pair) to a trained, averaged, evaluated model with a report. Every step is one of the
//! library's own objects: [`super::Multi30kFiles::fetch`] for the data, a [`RunConfig`] (the shipped
//! `configs/multi30k-en-de.toml`, with paths, budget and checkpoint interval set here) trained by
//! [`crate::train::run::run`], [`super::average_last`], a [`Translator`] for the test set, the examples
//! and the attention map. Running it again in the same output directory resumes: verified data and
//! the learned BPE are reused, training continues from its last checkpoint (and stops at once when
//! its budget is spent), and the later steps are redone from the files. [`super::parsing`] is the same
//! job for constituency parsing (§6.3) on the Penn Treebank sample.

use super::{
    average_last, lock_output, short_number, translate_and_score, Multi30kFiles, Scored, MAX_MINUTES, MULTI30K_CONFIG,
    MULTI30K_ORIGIN,
};
use crate::data::download::{multi30k_pair, Source};
use crate::data::ptb_sample::SAMPLE_SPLIT;
use crate::decode::translator::{DecodeOptions, SessionOptions, Translator};
use crate::error::{Error, Result};
use crate::eval::bleu::BleuScore;
use crate::eval::chrf::ChrfScore;
use crate::events::{Events, WithoutProgress};
use crate::io::{io_err, write_atomically};
use crate::task::Task;
use crate::train::run::{run as train_run, RunConfig};
use std::path::{Path, PathBuf};

/// English sentences in the style of Multi30k's image captions, translated at the end.
pub const EXAMPLES: [&str; 5] = [
    "A little girl is playing with a red ball in the park.",
    "Two men are sitting on a bench and talking.",
    "A dog runs through the snow.",
    "A woman in a blue dress is singing on a stage.",
    "People are waiting for the bus in the rain.",
];

/// Checkpoints averaged at the end (§6.1: "averaging the last 5 checkpoints").
pub const AVERAGE_LAST: usize = 5;

/// Checkpoints written per run: the interval is the budget divided by this, so the averaged five
/// span the last quarter of training.
pub const CHECKPOINTS_PER_RUN: f64 = 20.0;

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct QuickstartOptions {
    /// Where everything goes (data copy, run directory, averaged model, translations, report).
    pub output: PathBuf,
    /// Training budget in minutes (wall clock over every process of the run).
    pub minutes: f64,
    /// Source language (en, de, fr or cs).
    pub src: String,
    /// Target language.
    pub tgt: String,
    /// A directory with downloaded Multi30k files (`transformer data multi30k`), read for
    /// languages that are not built in.
    pub data_dir: PathBuf,
    /// Score only the first N test sentences (all 1,000 by default; smaller for smoke tests).
    pub test_sentences: Option<usize>,
    /// Validate (perplexity on val) every this many updates, besides at every epoch's end.
    pub valid_steps: u64,
    /// What to train: translation on Multi30k ([`run`]) or parsing on a treebank
    /// ([`super::parsing::run`]).
    pub task: Task,
    /// Parsing: the treebank, a directory searched for `.mrg` files (where `transformer data
    /// ptb-sample` puts the sample, or a full WSJ copy).
    pub treebank: PathBuf,
    /// Parsing: the treebank files trained on, `FIRST..LAST` by name.
    pub train_files: String,
    /// Parsing: the files validated on (the best checkpoint is picked by their F1).
    pub valid_files: String,
    /// Parsing: the files parsed and scored at the end.
    pub test_files: String,
}

impl Default for QuickstartOptions {
    fn default() -> Self {
        QuickstartOptions {
            output: PathBuf::from("quickstart"),
            minutes: 10.0,
            src: "en".into(),
            tgt: "de".into(),
            data_dir: PathBuf::from("data/multi30k"),
            test_sentences: None,
            valid_steps: 200,
            task: Task::Translation,
            treebank: PathBuf::from(crate::data::ptb_sample::PTB_SAMPLE_DIR),
            train_files: SAMPLE_SPLIT[0].into(),
            valid_files: SAMPLE_SPLIT[1].into(),
            test_files: SAMPLE_SPLIT[2].into(),
        }
    }
}

/// One translated example.
#[derive(Clone, Debug, PartialEq)]
pub struct Example {
    /// The source sentence.
    pub source: String,
    /// The model's translation (beam 4, α 0.6).
    pub translation: String,
}

/// What the quick start produced.
#[derive(Clone, Debug, PartialEq)]
pub struct QuickstartReport {
    /// The options it ran with.
    pub options: QuickstartOptions,
    /// Updates trained.
    pub steps: u64,
    /// Seconds of training.
    pub train_seconds: f64,
    /// Why training stopped.
    pub stopped: String,
    /// Validation perplexity of the last checkpoint.
    pub valid_perplexity: f64,
    /// Checkpoints averaged into the model.
    pub averaged: usize,
    /// Test sentences scored.
    pub test_sentences: usize,
    /// Cased sacreBLEU (13a) on test_2016_flickr.
    pub bleu: BleuScore,
    /// chrF2 on test_2016_flickr.
    pub chrf: ChrfScore,
    /// Translated examples.
    pub examples: Vec<Example>,
    /// The files written, as (what, where).
    pub files: Vec<(String, PathBuf)>,
}

impl QuickstartReport {
    /// The report as text: results, files, next commands.
    pub fn text(&self) -> String {
        let o = &self.options;
        let pair = format!("{}-{}", o.src, o.tgt);
        let file = |what: &str| self.files.iter().find(|(w, _)| w == what).map(|(_, p)| p.display().to_string());
        let model = file("model").unwrap_or_default();
        let bpe = file("vocabulary").unwrap_or_default();
        let mut t = String::new();
        t.push_str(&format!(
            "# Quick start: Multi30k {pair}, {:.1} minutes of training\n\n",
            self.train_seconds / 60.0
        ));
        t.push_str(&format!(
            "Trained {} updates ({}); validation perplexity {:.2}.\nAveraged the last {} checkpoints.\n\n",
            self.steps, self.stopped, self.valid_perplexity, self.averaged
        ));
        t.push_str(&format!(
            "test_2016_flickr ({} sentences, beam 4, alpha 0.6):\n  {}\n  {}\n\n",
            self.test_sentences,
            self.bleu.line(),
            self.chrf.line()
        ));
        t.push_str("Examples:\n");
        for e in &self.examples {
            t.push_str(&format!("  {}\n  -> {}\n", e.source, e.translation));
        }
        t.push_str("\nFiles:\n");
        for (what, path) in &self.files {
            t.push_str(&format!("  {what:<22} {}\n", path.display()));
        }
        t.push_str("\nNext:\n");
        if let Some(longer) = longer_minutes(o.minutes) {
            t.push_str(&format!(
                "  train longer (same directory, resumes):  transformer quickstart --output {} --minutes {}\n",
                o.output.display(),
                short_number(longer)
            ));
        }
        t.push_str(&format!(
            "  translate your own sentences:            echo \"A man reads a book.\" | transformer translate --checkpoint {model} --bpe {bpe}\n"
        ));
        t.push_str(&format!(
            "  serve it over HTTP with a web page:      transformer serve --checkpoint {model} --bpe {bpe}\n"
        ));
        t.push_str(
            "  the full 30-minute recipe:               transformer train --config configs/multi30k-en-de.toml\n",
        );
        t
    }
}

/// What an output directory was made for, in `quickstart.json`: the task, and the language pair
/// or the treebank's split. A directory made for one is never resumed with another (the run would
/// go on training the first model, with its vocabulary, on other data).
pub(super) fn check_marker(out: &Path, want: &serde_json::Value) -> Result<()> {
    let marker = out.join("quickstart.json");
    match std::fs::read_to_string(&marker) {
        Ok(text) => {
            let bad = |e: String| {
                Error::Config(format!("{}: {e}; remove the file or choose another --output", marker.display()))
            };
            let mut found: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
            let fields = found.as_object_mut().ok_or_else(|| bad("not a JSON object".into()))?;
            // Markers written before parsing existed name no task: they are translation ones.
            fields.entry("task").or_insert_with(|| Task::Translation.name().into());
            if found != *want {
                return Err(Error::Config(format!(
                    "{} holds a quick start of {}, not {}: choose another --output (or remove that directory)",
                    out.display(),
                    marker_name(&found),
                    marker_name(want)
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => write_atomically(&marker, format!("{want}\n").as_bytes()),
        Err(e) => Err(Error::Io { path: marker, source: e }),
    }
}

/// A marker's contents in words: `en-de`, or `parsing (train wsj_0001..wsj_0159, valid …)`.
fn marker_name(v: &serde_json::Value) -> String {
    let field = |k: &str| v[k].as_str().unwrap_or("?").to_string();
    if field("task") == Task::Parsing.name() {
        format!("parsing (train {}, valid {})", field("train_files"), field("valid_files"))
    } else {
        format!("{}-{}", field("src"), field("tgt"))
    }
}

/// The budget a report suggests for training longer: three times this one, within
/// [`MAX_MINUTES`]; `None` when this one is already the longest.
pub(super) fn longer_minutes(minutes: f64) -> Option<f64> {
    (minutes < MAX_MINUTES).then(|| (minutes * 3.0).min(MAX_MINUTES))
}

/// The run configuration the quick start trains: the shipped Multi30k recipe, reading the copied
/// `files`, writing to `run`, with the budget and checkpoint interval of `opts`.
pub fn run_config(opts: &QuickstartOptions, files: &Multi30kFiles, run: &Path) -> Result<RunConfig> {
    let mut cfg = RunConfig::from_toml(MULTI30K_CONFIG, MULTI30K_ORIGIN, &[])?;
    files.train_on(&mut cfg.data);
    cfg.data.bpe = run.join("bpe.json");
    let t = &mut cfg.train;
    t.output_dir = run.to_path_buf();
    t.time_limit_minutes = Some(opts.minutes);
    t.checkpoint_minutes = opts.minutes / CHECKPOINTS_PER_RUN;
    t.keep_last = AVERAGE_LAST;
    t.valid_steps = Some(opts.valid_steps);
    Ok(cfg)
}

/// Checks the options every quick start shares.
pub(super) fn check_common(opts: &QuickstartOptions) -> Result<()> {
    if !(opts.minutes.is_finite() && opts.minutes > 0.0) {
        return Err(Error::Config(format!("--minutes {} must be a positive number", short_number(opts.minutes))));
    }
    if opts.minutes > MAX_MINUTES {
        return Err(Error::Config(format!(
            "--minutes {} is more than a week ({MAX_MINUTES} minutes), the longest budget a quick start takes; \
             for longer runs train a config with `transformer train`",
            short_number(opts.minutes)
        )));
    }
    if opts.test_sentences == Some(0) {
        return Err(Error::Config("--test-sentences 0 scores nothing: give at least 1".into()));
    }
    Ok(())
}

/// Where the language pair of `opts` comes from: built in (English and German), or the directory
/// of downloaded files, which must exist.
fn data_source(opts: &QuickstartOptions) -> Result<Source> {
    multi30k_pair(&opts.src, &opts.tgt)?; // languages checked before anything is written
    let builtin = ["en", "de"].contains(&opts.src.as_str()) && ["en", "de"].contains(&opts.tgt.as_str());
    let source = if builtin { Source::Embedded } else { Source::Dir(opts.data_dir.clone()) };
    if !builtin && !opts.data_dir.is_dir() {
        return Err(Error::Config(format!(
            "{}-{} is not built in (English and German are) and {} does not exist: download it first with `transformer data multi30k --cache {}`",
            opts.src,
            opts.tgt,
            opts.data_dir.display(),
            opts.data_dir.display()
        )));
    }
    Ok(source)
}

/// Runs the translation quick start (or resumes it): see the module's documentation.
pub fn run(opts: &QuickstartOptions, events: &mut dyn Events) -> Result<QuickstartReport> {
    if opts.task != Task::Translation {
        return Err(Error::Config(format!(
            "quickstart::run trains translation, not {}: see parsing::run",
            opts.task.name()
        )));
    }
    check_common(opts)?;
    let source = data_source(opts)?;
    let out = &opts.output;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let _lock = lock_output(out, "quick start", events)?;
    let task = Task::Translation.name();
    check_marker(out, &serde_json::json!({ "task": task, "src": opts.src, "tgt": opts.tgt }))?;
    let mut files: Vec<(String, PathBuf)> = Vec::new();

    events.stage("data");
    let data = Multi30kFiles::fetch(&source, &opts.src, &opts.tgt, &out.join("data"), events)?;
    files.push(("data (verified copy)".into(), out.join("data")));

    events.stage("training");
    let run_dir = out.join("run");
    let cfg = run_config(opts, &data, &run_dir)?;
    let summary = train_run(&cfg, events)?;
    files.push(("run directory".into(), run_dir.clone()));
    files.push(("vocabulary".into(), run_dir.join("bpe.json")));
    files.push(("learning curve".into(), run_dir.join("learning_curve.svg")));
    files.push(("metrics".into(), run_dir.join("metrics.jsonl")));

    events.stage("averaging");
    let model_path = out.join("model.safetensors");
    let (_, averaged) = average_last(&run_dir, AVERAGE_LAST, &model_path)?;
    events.log(&format!("averaged {averaged} checkpoints -> {}", model_path.display()));
    files.push(("model".into(), model_path.clone()));

    events.stage("evaluating");
    let translator = Translator::load(&model_path, &run_dir.join("bpe.json"), SessionOptions::default())?;
    let read = |p: &Path| crate::data::corpus::read_lines(p);
    let (mut test_src, mut test_ref) = (read(&data.test.src)?, read(&data.test.tgt)?);
    if let Some(n) = opts.test_sentences {
        test_src.truncate(n);
        test_ref.truncate(n);
    }
    let Scored { hyps, bleu, chrf } = translate_and_score(&translator, &test_src, test_ref, events)?;
    let hyp_path = out.join(format!("test_2016_flickr.hyp.{}", opts.tgt));
    let mut text = hyps.join("\n");
    text.push('\n');
    write_atomically(&hyp_path, text.as_bytes())?;
    files.push(("test translations".into(), hyp_path));

    events.stage("examples");
    let sources: Vec<String> = if opts.src == "en" {
        EXAMPLES.iter().map(|s| s.to_string()).collect()
    } else {
        read(&data.valid.src)?.into_iter().take(EXAMPLES.len()).collect()
    };
    let (outs, _) = translator.translate(&sources, &DecodeOptions::default(), &mut WithoutProgress(events))?;
    // The first example's output tokens, for its attention map.
    #[cfg(feature = "heatmap")]
    let first_tokens = outs[0][0].hypothesis.tokens.clone();
    let examples: Vec<Example> = sources
        .into_iter()
        .zip(outs)
        .map(|(source, mut n)| Example { source, translation: std::mem::take(&mut n[0].text) })
        .collect();

    #[cfg(feature = "heatmap")]
    {
        let path = out.join("attention.png");
        write_heatmap(&translator, &translator.encode_source(&examples[0].source)?, &first_tokens, &path)?;
        files.push(("attention heatmap".into(), path));
    }

    let report = QuickstartReport {
        options: opts.clone(),
        steps: summary.state.step,
        train_seconds: summary.state.elapsed_s,
        stopped: summary.stopped.to_string(),
        valid_perplexity: summary.valid.perplexity(),
        averaged,
        test_sentences: hyps.len(),
        bleu,
        chrf,
        examples,
        files: {
            let mut f = files;
            f.push(("report".into(), out.join("report.txt")));
            f
        },
    };
    write_atomically(&out.join("report.txt"), report.text().as_bytes())?;
    Ok(report)
}

/// Draws the encoder–decoder attention of the last layer (mean over heads) of the model fed `src`
/// and producing `tgt` (token ids without BOS/EOS: a sentence and its translation).
#[cfg(feature = "heatmap")]
pub fn write_heatmap(translator: &Translator, src: &[u32], tgt: &[u32], path: &Path) -> Result<()> {
    use crate::eval::attention::{AxisLabels, Kind};
    let w = translator.attention(src, tgt)?;
    let c = &translator.model().config;
    let (first, rows, cols) = w.get(Kind::EncoderDecoder, c.n_layers - 1, 0)?;
    let mut mean = vec![0f32; first.len()];
    for head in 0..c.n_heads {
        let (m, _, _) = w.get(Kind::EncoderDecoder, c.n_layers - 1, head)?;
        for (a, b) in mean.iter_mut().zip(m) {
            *a += b / c.n_heads as f32;
        }
    }
    debug_assert_eq!(mean.len(), rows * cols);
    let labels = AxisLabels::new(translator.tokenizer(), src, tgt)?;
    let (row_labels, col_labels) = labels.of(Kind::EncoderDecoder);
    let title =
        format!("encoder-decoder attention, layer {} of {}, mean of {} heads", c.n_layers, c.n_layers, c.n_heads);
    crate::eval::heatmap::render(&mean, row_labels, col_labels, &title)?.save_png(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report's "train longer" suggestion is a budget the quick start accepts: three times
    /// this one, never past a week, and none once a run has had the longest budget.
    #[test]
    fn the_suggested_budget_is_never_one_that_is_refused() {
        assert_eq!(longer_minutes(10.0), Some(30.0));
        assert_eq!(longer_minutes(MAX_MINUTES / 2.0), Some(MAX_MINUTES));
        assert_eq!(longer_minutes(MAX_MINUTES), None);
        for m in [0.25, 10.0, 5000.0, MAX_MINUTES - 1.0] {
            let longer = longer_minutes(m).unwrap();
            let opts = QuickstartOptions { minutes: longer, ..Default::default() };
            assert!(check_common(&opts).is_ok(), "{m} minutes suggests {longer}, which is refused");
        }
    }
}
