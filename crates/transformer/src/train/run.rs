//! §5 A training run from a TOML configuration ([`RunConfig`]): data preparation (BPE, filtering,
//! batching), the update loop with gradient accumulation, validation, checkpoints on a time or step
//! interval, a wall-clock limit, and exact resume: a run restarted with the same configuration
//! continues from its last checkpoint with the step, schedule, Adam moments, data position and
//! dropout counter restored, so its results are those of an uninterrupted run (same seed, same
//! thread count). Where checkpoints and metrics go is [`RunDir`]'s business.

use super::checkpoint;
pub use super::config::{Bf16Matmul, DataSection, ModelSection, RunConfig, TrainSection};
use super::distributed::{agree, check_accumulate, digest, share_of, Collective, SingleProcess};
pub use super::run_dir::list_checkpoints;
use super::run_dir::RunDir;
use super::schedule::Schedule;
use super::trainer::Trainer;
use crate::config::ModelConfig;
use crate::data::batching::{epoch_order, make_batches, BatchConfig};
use crate::data::binarized::{Binarized, Pairs};
use crate::data::bpe::Bpe;
use crate::data::parallel::{encode_and_filter_with, FilterConfig, TokenPairs};
use crate::error::{Error, Result};
use crate::eval::perplexity::SourceReading;
use crate::model::Batch;
use crate::task::{Task, Validation};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where a run is: saved in every checkpoint so a restart continues exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Updates done.
    pub step: u64,
    /// Forward/backward passes done, by every worker of the run (a batch's position keys its
    /// dropout masks).
    pub passes: u64,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Batches of the current epoch's order already consumed.
    pub cursor: usize,
    /// Seconds of training over all processes.
    pub elapsed_s: f64,
    /// Parsing: the best validation F1 so far (its checkpoint is `best.safetensors`).
    #[serde(default)]
    pub best_f1: Option<f64>,
    /// How many records `metrics.jsonl` held when this state was saved: a run resumed from it
    /// keeps those and drops the ones written after, which it writes again (none twice). `None`
    /// in a live state and in checkpoints of older runs (those drop the records after `step`).
    #[serde(default)]
    pub metrics_records: Option<u64>,
    /// The step at which the run scored its final model's F1 at the end: a run resumed there
    /// with nothing left to train does not score it again.
    #[serde(default)]
    pub f1_scored_at: Option<u64>,
    /// The step at which the run did all its end-of-run work (final F1, the average's F1): a run
    /// resumed there with nothing left to train does not do it again.
    #[serde(default)]
    pub ended_at: Option<u64>,
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// The state at the end.
    pub state: RunState,
    /// Why it stopped.
    pub stopped: String,
    /// The last checkpoint written.
    pub checkpoint: PathBuf,
    /// Validation loss per token at the end (label-smoothed, NLL).
    pub valid: (f64, f64),
    /// How much the final model reads its validation sources (rank 0).
    pub reading: Option<SourceReading>,
}

/// ", source gap G nats, spread S" for a log line (empty without a reading).
fn reading_text(v: &Validated) -> String {
    match v.reading {
        Some(r) => format!(
            ", shifted-source gap {} nats/token, encoder spread {:.3}",
            r.gap.map_or("n/a".to_string(), |g| format!("{g:.3}")),
            r.spread
        ),
        None => String::new(),
    }
}

/// Where training is, after every update: what a progress bar shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Progress {
    /// Updates done.
    pub step: u64,
    /// Current epoch (1-based).
    pub epoch: u64,
    /// Batches of this epoch consumed, of `epoch_batches`.
    pub cursor: usize,
    /// Batches in an epoch.
    pub epoch_batches: usize,
    /// Label-smoothed training loss per target token of this update.
    pub loss: f64,
    /// Learning rate of this update.
    pub lr: f64,
    /// Target tokens per second since the previous [`Progress`] of this process.
    pub tokens_per_s: f64,
    /// Seconds of training over every process of the run.
    pub elapsed_s: f64,
    /// Seconds left by the time or step limit (the nearer), when there is one.
    pub eta_s: Option<f64>,
    /// The run's whole budget in seconds, when it has a time limit.
    pub limit_s: Option<f64>,
    /// Validation perplexity at the last validation of this process, if any.
    pub valid_perplexity: Option<f64>,
}

impl Progress {
    /// The one-line form written to logs: epoch, step, loss, speed, learning rate, ETA.
    pub fn line(&self) -> String {
        let eta = self.eta_s.map(|s| format!("  ETA {:.0} min {:02.0} s", (s / 60.0).floor(), s % 60.0));
        let ppl = self.valid_perplexity.map(|p| format!("  valid ppl {p:.2}"));
        format!(
            "epoch {} step {} ({}/{} batches)  loss {:.4}  {:.0} tgt tok/s  lr {:.2e}{}{}",
            self.epoch,
            self.step,
            self.cursor,
            self.epoch_batches,
            self.loss,
            self.tokens_per_s,
            self.lr,
            ppl.unwrap_or_default(),
            eta.unwrap_or_default()
        )
    }
}

/// Prepared data: the BPE model, the model configuration it implies, filtered training pairs,
/// their batches, validation pairs.
struct Data {
    bpe: Bpe,
    model: ModelConfig,
    train: Box<dyn Pairs>,
    batches: Vec<Vec<usize>>,
    valid: TokenPairs,
    /// The validation text pairs (for parsing: sentence, linearised gold tree).
    valid_text: Vec<(String, String)>,
}

impl Data {
    /// A digest of what the workers of a data-parallel run must share: the vocabulary, the
    /// training pairs' lengths (hence the batches and their order) and the validation pairs.
    fn fingerprint(&self) -> [u64; 4] {
        let mut bytes = self.bpe.hash().as_bytes().to_vec();
        for i in 0..self.train.count() {
            let (s, t) = self.train.lengths_of(i);
            bytes.extend_from_slice(&(s as u32).to_le_bytes());
            bytes.extend_from_slice(&(t as u32).to_le_bytes());
        }
        for (s, t) in &self.valid {
            bytes.extend(s.iter().chain(t).flat_map(|x| x.to_le_bytes()));
            bytes.push(0xff);
        }
        digest(&bytes)
    }
}

fn prepare(cfg: &RunConfig, log: &mut dyn FnMut(&str)) -> Result<Data> {
    let d = &cfg.data;
    let bpe = if d.bpe.exists() {
        Bpe::load(&d.bpe)?
    } else {
        log(&format!("learning a {}-entry BPE vocabulary from the training text", d.vocab_size));
        let text = d.task.read_pairs(&d.train_src, &d.train_tgt, d.train_files.as_deref())?;
        let bpe = d.task.learn_vocabulary(&text, d.vocab_size)?;
        if let Some(w) = bpe.shortfall(d.vocab_size) {
            log(&format!("warning: {w}"));
        }
        bpe.save(&d.bpe)?;
        bpe
    };
    let train: Box<dyn Pairs> = match &d.train_bin {
        Some(dir) => {
            let b = Binarized::open(dir)?;
            if b.vocab_hash != bpe.hash() {
                return Err(Error::Config(format!(
                    "{} was prepared with vocabulary {} but {} is {}; run `transformer prepare` again",
                    dir.display(),
                    b.vocab_hash,
                    d.bpe.display(),
                    bpe.hash()
                )));
            }
            log(&format!("train: {} prepared pairs, memory-mapped from {}", b.len(), dir.display()));
            Box::new(b)
        }
        None => {
            let filter = FilterConfig { max_tokens: d.max_tokens, max_ratio: d.max_ratio };
            let text = d.task.read_pairs(&d.train_src, &d.train_tgt, d.train_files.as_deref())?;
            let (pairs, report) = encode_and_filter_with(d.task.target_encoding(), &text, &bpe, &filter)?;
            log(&format!("train: {report}"));
            Box::new(pairs)
        }
    };
    let model = cfg.model_config(bpe.vocab_size())?;
    cfg.validate_for(&model, super::config::machine_memory_bytes())?;
    let valid_text = d.task.read_pairs(&d.valid_src, &d.valid_tgt, d.valid_files.as_deref())?;
    let valid = validation_pairs(&valid_text, &bpe, &model, d, log)?;
    if train.count() == 0 {
        return Err(Error::Config(
            "no training pairs left after filtering; check data.max_tokens and data.max_ratio".into(),
        ));
    }
    let lengths: Vec<(usize, usize)> = (0..train.count()).map(|i| train.lengths_of(i)).collect();
    // Checked up front, not hours in: every training pair fits the model's positions.
    if let Some(i) = lengths.iter().position(|&(s, t)| s > model.max_positions || t + 1 > model.max_positions) {
        let from = d.train_bin.as_ref().map_or_else(
            || format!("{} / {}", d.train_src.display(), d.train_tgt.display()),
            |dir| dir.display().to_string(),
        );
        return Err(Error::Config(format!(
            "training pair {} of {from} has {} source and {} target tokens, more than model.max_positions = {} \
             allows (the target also takes an EOS): prepare the data with a lower max_tokens or raise \
             model.max_positions",
            i + 1,
            lengths[i].0,
            lengths[i].1,
            model.max_positions
        )));
    }
    let bc = BatchConfig { max_src_tokens: cfg.train.max_src_tokens, max_tgt_tokens: cfg.train.max_tgt_tokens };
    let batches = make_batches(&lengths, &bc);
    Ok(Data { bpe, model, train, batches, valid, valid_text })
}

/// The validation pairs: every pair with two non-empty sides, encoded; a pair too long for the
/// model's positions is left out with a warning naming its file and line (it cannot be scored).
/// No pair at all is an error: a run must have something to validate on.
fn validation_pairs(
    text: &[(String, String)],
    bpe: &Bpe,
    model: &ModelConfig,
    d: &DataSection,
    log: &mut dyn FnMut(&str),
) -> Result<TokenPairs> {
    let keep_all = FilterConfig { max_tokens: usize::MAX, max_ratio: f64::INFINITY };
    let (encoded, mut report) = encode_and_filter_with(d.task.target_encoding(), text, bpe, &keep_all)?;
    let max = model.max_positions;
    let mut valid = Vec::with_capacity(encoded.len());
    let non_empty = text.iter().enumerate().filter(|(_, (s, t))| !s.trim().is_empty() && !t.trim().is_empty());
    for ((line, _), (s, t)) in non_empty.zip(encoded) {
        if s.len() > max || t.len() + 1 > max {
            log(&format!(
                "warning: {}:{}: a validation pair of {} source and {} target tokens does not fit model.max_positions = {max}; left out of validation",
                d.valid_src.display(),
                line + 1,
                s.len(),
                t.len()
            ));
            report.too_long += 1;
            report.kept -= 1;
        } else {
            valid.push((s, t));
        }
    }
    log(&format!("valid: {report}"));
    if valid.is_empty() {
        return Err(Error::Config(format!(
            "{} / {}: no validation pair to score ({} read, {} with an empty side, {} too long): give a validation set",
            d.valid_src.display(),
            d.valid_tgt.display(),
            report.read,
            report.empty,
            report.too_long
        )));
    }
    Ok(valid)
}

/// Whether the run's time limit is reached: rank 0's clock decides for every worker, so that all
/// stop at the same update (a collective when there is a limit and more than one worker).
fn time_is_up(comm: &dyn Collective, limit_minutes: Option<f64>, elapsed_s: f64) -> bool {
    let Some(m) = limit_minutes else { return false };
    let mut up = [(elapsed_s >= m * 60.0) as u64];
    comm.broadcast_u64(&mut up);
    up[0] != 0
}

fn batch_of(pairs: &dyn Pairs, idx: &[usize]) -> Batch {
    let sel: Vec<(Vec<u32>, Vec<u32>)> = idx.iter().map(|&i| pairs.get(i)).collect();
    Batch::from_pairs(&sel)
}

/// One validation's scores.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Validated {
    /// Label-smoothed loss per target token.
    loss: f64,
    /// NLL per target token.
    nll: f64,
    /// How much the model reads its sources (rank 0 only).
    reading: Option<SourceReading>,
}

/// The run's validation, as its task measures it: label-smoothed loss and NLL per target token over
/// `pairs`, without dropout (the validation set is never empty: `prepare` says), and the
/// [`SourceReading`] (encoder-output spread, shifted-sentence gap). Rank 0 validates; the other
/// workers of a data-parallel run get NaN (they record nothing).
fn validate(trainer: &mut Trainer, pairs: &TokenPairs, cfg: &RunConfig, comm: &dyn Collective) -> Result<Validated> {
    if !comm.is_root() {
        return Ok(Validated { loss: f64::NAN, nll: f64::NAN, reading: None });
    }
    match cfg.data.task.validation() {
        Validation::Perplexity | Validation::PerplexityAndF1 => {
            let bc = BatchConfig { max_src_tokens: cfg.train.max_src_tokens, max_tgt_tokens: cfg.train.max_tgt_tokens };
            let (totals, reading) = trainer.score_and_reading(pairs, &bc)?;
            let tokens = totals.tokens.max(1) as f64;
            Ok(Validated { loss: totals.loss / tokens, nll: totals.nll / tokens, reading: Some(reading) })
        }
    }
}

/// Records a validation in the metrics and warns, once warmup is over, when the source path looks
/// dead.
fn record_validation(
    run_dir: &RunDir,
    state: &RunState,
    epoch: u64,
    v: &Validated,
    warmup: u64,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    if let Some(w) = v.reading.and_then(|r| r.warning()).filter(|_| state.step >= warmup) {
        log(&format!("warning: step {}: {w}", state.step));
    }
    run_dir.append_metrics(&valid_record(state.step, epoch, v))
}

/// Parsing validation: beam-decodes the validation sentences (beam `train.valid_f1_beam`, §6.3's α
/// and length) and scores the trees against the gold ones with EVALB (COLLINS.prm). Returns the
/// F-measure over all lengths (0 where EVALB has no valid sentence) and the number of outputs
/// that needed repair.
fn validate_f1(model: crate::model::Transformer, data: &Data, cfg: &RunConfig) -> Result<(f64, usize)> {
    use crate::data::trees::delinearise;
    use crate::decode::translator::{Translator, TranslatorOptions};
    let precision = model.precision();
    let options = TranslatorOptions { precision, pack: true, task: cfg.data.task };
    let translator = Translator::new(model, data.bpe.clone(), options)?;
    let popts = cfg.train.valid_f1_parse_options();
    let sentences: Vec<String> = data.valid_text.iter().map(|(s, _)| s.clone()).collect();
    let (parses, _) = translator.parse(&sentences, &popts, &mut |_| {})?;
    let mut gold = Vec::with_capacity(parses.len());
    let mut test = Vec::with_capacity(parses.len());
    for ((s, t), p) in data.valid_text.iter().zip(&parses) {
        let words: Vec<&str> = s.split_whitespace().collect();
        let tokens: Vec<String> = t.split_whitespace().map(str::to_string).collect();
        gold.push(delinearise(&tokens, &words).to_bracketed());
        test.push(p.tree.to_bracketed());
    }
    let report = crate::eval::evalb::score(&gold, &test, &crate::eval::evalb::Params::collins());
    let f1 = report.all.fmeasure;
    Ok((if f1.is_finite() { f1 } else { 0.0 }, parses.iter().filter(|p| p.malformed).count()))
}

/// Runs the F1 validation, logs and records it, and keeps the checkpoint `ckpt` as
/// `best.safetensors` when it is the best so far.
fn f1_checkpoint(
    trainer: &Trainer,
    data: &Data,
    cfg: &RunConfig,
    state: &mut RunState,
    run_dir: &RunDir,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let start = Instant::now();
    let (f1, malformed) = validate_f1(trainer.model().clone(), data, cfg)?;
    let best = state.best_f1.is_none_or(|b| f1 > b);
    if best {
        state.best_f1 = Some(f1);
        let extra = checkpoint_extra(state, cfg.data.task);
        checkpoint::save(&cfg.train.output_dir.join(BEST), &trainer.to_checkpoint(data.bpe.hash(), extra))?;
    }
    log(&format!(
        "validation F1 {f1:.2} at step {} ({malformed} of {} outputs repaired, {:.0} s){}",
        state.step,
        data.valid_text.len(),
        start.elapsed().as_secs_f64(),
        if best { "; best so far, saved as best.safetensors" } else { "" }
    ));
    run_dir.append_metrics(&serde_json::json!({"kind": "valid_f1", "step": state.step, "epoch": state.epoch, "f1": f1, "malformed": malformed, "best": best}))
}

/// At the end of a parsing run: averages the newest `train.valid_f1_average` checkpoints of the run
/// (the final one included), scores the average's validation F1 as `f1_checkpoint` scores a model
/// (same decoding, the training precision), records it (`valid_f1_average` in `metrics.jsonl`) and
/// keeps it as `best.safetensors` when it beats the best so far.
fn f1_average(
    trainer: &Trainer,
    data: &Data,
    cfg: &RunConfig,
    state: &mut RunState,
    run_dir: &RunDir,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let n = cfg.train.valid_f1_average;
    let all = super::run_dir::list_checkpoints(&cfg.train.output_dir)?;
    let newest: Vec<PathBuf> = all.iter().skip(all.len().saturating_sub(n)).map(|(_, p)| p.clone()).collect();
    if n < 2 || newest.len() < 2 {
        if n >= 2 {
            log(&format!("validation F1 of an average: skipped, the run has {} checkpoint(s)", newest.len()));
        }
        return Ok(());
    }
    let start = Instant::now();
    let averaged = checkpoint::average(&newest)?;
    let first_step = all[all.len() - newest.len()].0;
    let model = crate::model::Transformer::from_params(averaged.config.clone(), averaged.params.clone())?
        .with_precision(trainer.model().precision())?;
    let (f1, malformed) = validate_f1(model, data, cfg)?;
    let best = state.best_f1.is_none_or(|b| f1 > b);
    if best {
        state.best_f1 = Some(f1);
        checkpoint::save(&cfg.train.output_dir.join(BEST), &averaged)?;
    }
    log(&format!(
        "validation F1 {f1:.2} of the average of the last {} checkpoints (steps {first_step}..{}; {malformed} of {} outputs repaired, {:.0} s){}",
        newest.len(),
        state.step,
        data.valid_text.len(),
        start.elapsed().as_secs_f64(),
        if best { "; best, saved as best.safetensors" } else { "; the best stays" }
    ));
    run_dir.append_metrics(&serde_json::json!({"kind": "valid_f1_average", "step": state.step, "epoch": state.epoch, "f1": f1, "malformed": malformed, "best": best, "averaged": newest.len(), "from_step": first_step}))
}

/// The file name of a parsing run's best checkpoint by validation F1.
pub const BEST: &str = "best.safetensors";

/// The metrics record of a validation: loss and NLL per target token, perplexity, and the source
/// reading (shifted-sentence gap in nats per token, encoder-output spread).
fn valid_record(step: u64, epoch: u64, v: &Validated) -> serde_json::Value {
    let (gap, spread) = (v.reading.and_then(|r| r.gap), v.reading.map(|r| r.spread));
    serde_json::json!({"kind": "valid", "step": step, "epoch": epoch, "loss": v.loss, "nll": v.nll, "ppl": v.nll.exp(), "gap": gap, "spread": spread})
}

/// Saves the trainer with the run's position, so that a restart continues exactly.
fn save(run_dir: &RunDir, trainer: &Trainer, state: &RunState, vocab_hash: &str, task: Task) -> Result<PathBuf> {
    if !run_dir.writes() {
        // A follower: rank 0 writes this checkpoint; copying the model and moments is not needed.
        return Ok(run_dir.checkpoint_path(state.step));
    }
    // The records written so far precede this state: a run resumed from it keeps them.
    let saved = RunState { metrics_records: Some(run_dir.metrics_records()?), ..*state };
    run_dir.save(&trainer.to_checkpoint(vocab_hash, checkpoint_extra(&saved, task)))
}

/// The metadata a run's checkpoints carry: its position and its task.
fn checkpoint_extra(state: &RunState, task: Task) -> std::collections::BTreeMap<String, String> {
    [
        ("run_state".to_string(), serde_json::to_string(state).expect("state serialises")),
        (checkpoint::TASK_KEY.to_string(), task.name().to_string()),
    ]
    .into()
}

/// Restores `trainer` from the checkpoint at `path` (which must be for `model_cfg` and the
/// vocabulary `vocab_hash`, with finite values) and returns the run's position saved with it.
fn resume(trainer: &mut Trainer, path: &Path, model_cfg: &ModelConfig, vocab_hash: &str) -> Result<RunState> {
    let ck = checkpoint::load_for(path, model_cfg)?;
    if ck.vocab_hash != vocab_hash {
        return Err(Error::CheckpointMismatch {
            path: path.to_path_buf(),
            what: "vocabulary".into(),
            expected: vocab_hash.into(),
            found: ck.vocab_hash,
        });
    }
    checkpoint::check_finite(path, &ck)?;
    let s = ck.extra.get("run_state").ok_or_else(|| Error::CorruptCheckpoint {
        path: path.to_path_buf(),
        reason: "no run_state to resume from".into(),
    })?;
    let state: RunState = serde_json::from_str(s)
        .map_err(|e| Error::CorruptCheckpoint { path: path.to_path_buf(), reason: format!("bad run_state ({e})") })?;
    trainer.resume(ck, state.passes, path)?;
    Ok(state)
}

/// Resumes from the newest good checkpoint of the run: one that is damaged on disk (truncated,
/// corrupt) or poisoned (NaN or ∞ values) is passed over, saying so, for the one before it. A
/// checkpoint of another model or vocabulary is an error (the configuration changed), not skipped.
/// Returns `None` when the run has no checkpoint.
fn resume_newest_good(
    trainer: &mut Trainer,
    dir: &Path,
    model_cfg: &ModelConfig,
    vocab_hash: &str,
    log: &mut dyn FnMut(&str),
) -> Result<Option<(PathBuf, RunState)>> {
    let mut all = list_checkpoints(dir)?;
    let mut damaged = Vec::new();
    while let Some((_, path)) = all.pop() {
        match resume(trainer, &path, model_cfg, vocab_hash) {
            Ok(state) => return Ok(Some((path, state))),
            Err(e @ (Error::CorruptCheckpoint { .. } | Error::NonFiniteCheckpoint { .. } | Error::Io { .. })) => {
                log(&format!("warning: not resuming from {}: {e}; trying the checkpoint before it", path.display()));
                damaged.push(path);
            }
            Err(e) => return Err(e),
        }
    }
    if damaged.is_empty() {
        return Ok(None);
    }
    Err(Error::Config(format!(
        "every checkpoint of {} is damaged ({}): move them out of the directory to start the run afresh",
        dir.display(),
        damaged.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )))
}

/// Runs (or resumes) training in one process. `log` receives one-line messages, among them a
/// progress line every 2 s.
pub fn run(cfg: &RunConfig, log: &mut dyn FnMut(&str)) -> Result<RunSummary> {
    let log = std::cell::RefCell::new(log);
    let mut last = Instant::now();
    run_with_progress(cfg, &mut |m| (*log.borrow_mut())(m), &mut |p| {
        if last.elapsed().as_secs_f64() >= 2.0 {
            (*log.borrow_mut())(&p.line());
            last = Instant::now();
        }
    })
}

/// Runs (or resumes) training in one process like [`run`], giving `progress` a [`Progress`] after
/// every update (for a progress bar) and `log` every other message.
pub fn run_with_progress(
    cfg: &RunConfig,
    log: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(&Progress),
) -> Result<RunSummary> {
    run_distributed(cfg, &SingleProcess, log, progress)
}

/// Runs (or resumes) training like [`run_with_progress`] as one of the workers of `comm` (data
/// parallelism, see [`super::distributed`]): every worker calls this with the same configuration
/// and data (checked at the start) and the same run directory; rank 0 writes it, logs, reports
/// progress and validates, and the others only compute their share of each update. With
/// [`SingleProcess`] this is [`run_with_progress`].
pub fn run_distributed(
    cfg: &RunConfig,
    comm: &dyn Collective,
    log: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(&Progress),
) -> Result<RunSummary> {
    let t = &cfg.train;
    let root = comm.is_root();
    let (mut quiet, mut no_progress) = (|_: &str| {}, |_: &Progress| {});
    let log: &mut dyn FnMut(&str) = if root { log } else { &mut quiet };
    let progress: &mut dyn FnMut(&Progress) = if root { progress } else { &mut no_progress };
    cfg.validate()?;
    check_accumulate(t.accumulate, comm.size())?;
    let precision = t.bf16_matmul.precision(crate::kernels::cpu::bf16::available(), log)?;
    let fingerprint = format!("{}\n{precision:?}", serde_json::to_string(cfg).expect("a run config serialises"));
    agree(
        comm,
        "run configuration (the TOML file with its --set overrides, or train.bf16_matmul's outcome)",
        digest(fingerprint.as_bytes()),
        "start every worker with the same configuration file and options",
    )?;
    let run_dir =
        if root { RunDir::open(&t.output_dir, t.keep_last, log)? } else { RunDir::follow(&t.output_dir, t.keep_last) };
    // Rank 0 prepares first (it learns and saves the BPE model if it is missing), then says
    // whether it could, and the others prepare (reading that model).
    let mut root_ok = [0u64];
    let data = if root {
        let prepared = prepare(cfg, log);
        root_ok[0] = prepared.is_ok() as u64;
        comm.broadcast_u64(&mut root_ok);
        prepared?
    } else {
        comm.broadcast_u64(&mut root_ok);
        if root_ok[0] == 0 {
            return Err(Error::Config("rank 0 could not prepare the data (its error says why)".into()));
        }
        prepare(cfg, log)?
    };
    agree(
        comm,
        "training data (BPE vocabulary, pair lengths or validation pairs)",
        data.fingerprint(),
        &format!(
            "every worker must read the same files: check {} and the data paths on every host",
            cfg.data.bpe.display()
        ),
    )?;
    let model_cfg = data.model.clone();
    let model = crate::model::Transformer::new(model_cfg.clone(), t.seed)?
        .with_precision(precision)?
        .with_pointer_table(crate::model::pointer::PointerTable::from_bpe(&data.bpe))?;
    let schedule = Schedule { d_model: model_cfg.d_model, warmup: t.warmup, lr_scale: t.lr_scale };
    let mut trainer = Trainer::new(model, schedule, t.seed);
    let mut state = RunState::default();
    let resumed = resume_newest_good(&mut trainer, &t.output_dir, &model_cfg, data.bpe.hash(), log)?;
    // Every worker resumes from the run directory itself (Adam moments included); they must have
    // found the same checkpoint, and rank 0's parameters are then given to all.
    let position = resumed.as_ref().map(|(_, s)| serde_json::to_string(s).expect("state serialises"));
    agree(
        comm,
        "checkpoint to resume from",
        digest(position.unwrap_or_default().as_bytes()),
        &format!(
            "every worker must see rank 0's checkpoints in {}: put it on a filesystem all hosts share",
            t.output_dir.display()
        ),
    )?;
    if comm.size() > 1 {
        trainer.broadcast_params(comm);
    }
    match resumed {
        Some((last, resumed)) => {
            state = resumed;
            log(&format!("resuming from {} (step {}, epoch {})", last.display(), state.step, state.epoch + 1));
            // The records written after this checkpoint are written again from here.
            match state.metrics_records.take() {
                Some(n) => run_dir.keep_metrics_records(n, log)?,
                None => run_dir.drop_metrics_after(state.step, log)?,
            };
        }
        // A run that left no checkpoint starts again: its records go with it.
        None => {
            run_dir.keep_metrics_records(0, log)?;
        }
    }
    let resumed_at = state.step;
    let n_batches = data.batches.len();
    log(&format!(
        "{} parameters, {} training pairs in {n_batches} batches, {} per update{}",
        trainer.model().params.len(),
        data.train.count(),
        t.accumulate,
        if comm.size() > 1 {
            format!(" over {} workers ({} each)", comm.size(), t.accumulate / comm.size())
        } else {
            String::new()
        }
    ));
    let start = Instant::now();
    let (base_elapsed, start_step) = (state.elapsed_s, state.step);
    // Training time over every process of the run: the time limit and the checkpoint interval
    // count it, so that a run killed and started again trains the same budget.
    let elapsed = || base_elapsed + start.elapsed().as_secs_f64();
    let mut last_ckpt = base_elapsed;
    let mut valid_perplexity = None;
    let (mut tok_window, mut window_start) = (0usize, Instant::now());
    let stopped;
    'run: loop {
        if t.max_epochs.is_some_and(|e| state.epoch >= e) {
            stopped = format!("reached {} epochs", state.epoch);
            break;
        }
        let order = epoch_order(n_batches, t.seed, state.epoch);
        while state.cursor < n_batches {
            if t.max_steps.is_some_and(|m| state.step >= m) {
                stopped = format!("reached {} steps", state.step);
                break 'run;
            }
            if time_is_up(comm, t.time_limit_minutes, elapsed()) {
                stopped = format!("time limit of {} minutes", t.time_limit_minutes.unwrap_or(0.0));
                break 'run;
            }
            let end = (state.cursor + t.accumulate).min(n_batches);
            let share = share_of(end - state.cursor, comm.rank(), comm.size());
            let mine = &order[state.cursor + share.start..state.cursor + share.end];
            let group: Vec<Batch> = mine.iter().map(|&b| batch_of(data.train.as_ref(), &data.batches[b])).collect();
            let stats = trainer.train_step_shared(&group, share.start, end - state.cursor, comm)?;
            state.cursor = end;
            state.step = trainer.step();
            state.passes = trainer.passes();
            state.elapsed_s = elapsed();
            tok_window += stats.tokens;
            run_dir.append_metrics(
                &serde_json::json!({"kind": "train", "step": state.step, "epoch": state.epoch + 1, "loss": stats.loss, "nll": stats.nll, "lr": stats.lr, "tokens": stats.tokens}),
            )?;
            let per_step = start.elapsed().as_secs_f64() / (state.step - start_step).max(1) as f64;
            let by_steps = t.max_steps.map(|m| per_step * m.saturating_sub(state.step) as f64);
            let by_time = t.time_limit_minutes.map(|m| (m * 60.0 - elapsed()).max(0.0));
            progress(&Progress {
                step: state.step,
                epoch: state.epoch + 1,
                cursor: state.cursor,
                epoch_batches: n_batches,
                loss: stats.loss,
                lr: f64::from(stats.lr),
                tokens_per_s: tok_window as f64 / window_start.elapsed().as_secs_f64().max(1e-9),
                elapsed_s: state.elapsed_s,
                eta_s: match (by_steps, by_time) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                },
                limit_s: t.time_limit_minutes.map(|m| m * 60.0),
                valid_perplexity,
            });
            if window_start.elapsed().as_secs_f64() >= 2.0 {
                tok_window = 0;
                window_start = Instant::now();
            }
            if t.valid_steps.is_some_and(|v| state.step % v == 0) {
                let v = validate(&mut trainer, &data.valid, cfg, comm)?;
                valid_perplexity = Some(v.nll.exp());
                record_validation(&run_dir, &state, state.epoch + 1, &v, t.warmup, log)?;
            }
            let due_steps = t.checkpoint_steps.is_some_and(|c| state.step % c == 0);
            if due_steps || state.elapsed_s - last_ckpt >= t.checkpoint_minutes * 60.0 {
                save(&run_dir, &trainer, &state, data.bpe.hash(), cfg.data.task)?;
                last_ckpt = state.elapsed_s;
            }
        }
        state.epoch += 1;
        state.cursor = 0;
        let v = validate(&mut trainer, &data.valid, cfg, comm)?;
        valid_perplexity = Some(v.nll.exp());
        log(&format!(
            "epoch {} done at step {}: valid loss {:.4}, perplexity {:.2}{}",
            state.epoch,
            state.step,
            v.loss,
            v.nll.exp(),
            reading_text(&v)
        ));
        record_validation(&run_dir, &state, state.epoch, &v, t.warmup, log)?;
        let f1_due = t.valid_f1_epochs > 0 && state.epoch % t.valid_f1_epochs == 0;
        if cfg.data.task.validation() == Validation::PerplexityAndF1 && f1_due && root {
            f1_checkpoint(&trainer, &data, cfg, &mut state, &run_dir, log)?;
        }
    }
    state.elapsed_s = elapsed();
    // Parsing scores the final model too, before the last checkpoint, so that the best F1 it
    // records is current. A run resumed after it did this (or all the end's work), with nothing
    // trained since, keeps the records of it and does not do it again.
    let f1_at_end = cfg.data.task.validation() == Validation::PerplexityAndF1 && t.valid_f1_epochs > 0;
    let nothing_trained = state.step == resumed_at;
    let scored_before = nothing_trained && state.f1_scored_at == Some(state.step);
    let ended_before = nothing_trained && state.ended_at == Some(state.step);
    if f1_at_end && root && !scored_before {
        f1_checkpoint(&trainer, &data, cfg, &mut state, &run_dir, log)?;
    }
    if f1_at_end {
        state.f1_scored_at = Some(state.step);
    }
    let mut last_path = match run_dir.latest_checkpoint()? {
        Some((step, path)) if step == state.step && (!f1_at_end || ended_before) => path,
        _ => save(&run_dir, &trainer, &state, data.bpe.hash(), cfg.data.task)?,
    };
    if f1_at_end && root && !ended_before {
        f1_average(&trainer, &data, cfg, &mut state, &run_dir, log)?;
        // The last checkpoint records the best F1 (so that a resumed run keeps the average) and
        // that the end's work is done.
        state.ended_at = Some(state.step);
        last_path = save(&run_dir, &trainer, &state, data.bpe.hash(), cfg.data.task)?;
    }
    let v = validate(&mut trainer, &data.valid, cfg, comm)?;
    record_validation(&run_dir, &state, state.epoch + 1, &v, t.warmup, log)?;
    run_dir.write_learning_curve()?;
    log(&format!(
        "stopped: {stopped}; valid loss {:.4}, perplexity {:.2}{}; checkpoint {}",
        v.loss,
        v.nll.exp(),
        reading_text(&v),
        last_path.display()
    ));
    Ok(RunSummary { state, stopped, checkpoint: last_path, valid: (v.loss, v.nll), reading: v.reading })
}
