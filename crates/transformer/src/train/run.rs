//! §5 A training run from a TOML configuration ([`RunConfig`]): data preparation (BPE, filtering,
//! batching), the update loop with gradient accumulation, validation, checkpoints on a time or step
//! interval, a wall-clock limit, and exact resume: a run restarted with the same configuration
//! continues from its last checkpoint with the step, schedule, Adam moments, data position and
//! dropout counter restored, so its results are those of an uninterrupted run (same seed, same
//! thread count). Where checkpoints and metrics go is [`RunDir`]'s business.

pub use super::config::{Bf16Matmul, DataSection, ModelSection, RunConfig, TrainSection};
use super::distributed::{agree, check_accumulate, digest, share_of, Collective, SingleProcess};
use super::prepare::{batch_of, prepare, Data};
pub use super::run_dir::list_checkpoints;
use super::run_dir::RunDir;
use super::schedule::Schedule;
use super::state::checkpoint_extra;
pub use super::state::RunState;
use super::trainer::Trainer;
use super::validation::{self, Validated, F1};
pub use super::validation::{ValidLoss, BEST};
use crate::checkpoint;
use crate::config::ModelConfig;
use crate::data::batching::epoch_order;
use crate::error::{Error, Result};
use crate::eval::perplexity::SourceReading;
use crate::events::{Events, Update};
use crate::model::Batch;
use crate::task::{Task, Validation};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    /// The state at the end.
    pub state: RunState,
    /// Why it stopped.
    pub stopped: StopReason,
    /// The last checkpoint written.
    pub checkpoint: PathBuf,
    /// Validation loss per token at the end.
    pub valid: ValidLoss,
    /// How much the final model reads its validation sources (rank 0).
    pub reading: Option<SourceReading>,
}

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StopReason {
    /// `train.max_epochs` reached (the epochs done).
    Epochs(u64),
    /// `train.max_steps` reached (the updates done).
    Steps(u64),
    /// `train.time_limit_minutes` reached (the limit).
    TimeLimit(f64),
    /// The caller asked it to stop ([`Events::interrupted`], asked before every update).
    Interrupted,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Epochs(e) => write!(f, "reached {e} epochs"),
            StopReason::Steps(s) => write!(f, "reached {s} steps"),
            StopReason::TimeLimit(m) => write!(f, "time limit of {m} minutes"),
            StopReason::Interrupted => write!(f, "interrupted"),
        }
    }
}

/// What a run's checkpoints must have been written for to resume from: the model, the vocabulary
/// (its hash) and, for parsing, the tree format.
struct ResumeFor<'a> {
    model: &'a ModelConfig,
    vocab_hash: &'a str,
    /// The tokenizer file the hash is of (`data.bpe`), named when a checkpoint's differs.
    vocab_file: &'a Path,
    tree_format: Option<crate::data::trees::TreeFormat>,
}

/// Restores `trainer` from the checkpoint at `path` (which must be written for `want`, with
/// finite values) and returns the run's position saved with it.
fn resume(trainer: &mut Trainer, path: &Path, want: &ResumeFor<'_>) -> Result<RunState> {
    let ck = checkpoint::load_for(path, want.model)?;
    check_written_for(path, &ck, want)?;
    let s = ck.extra.get("run_state").ok_or_else(|| Error::CorruptCheckpoint {
        path: path.to_path_buf(),
        reason: "no run_state to resume from".into(),
    })?;
    let state: RunState = serde_json::from_str(s)
        .map_err(|e| Error::CorruptCheckpoint { path: path.to_path_buf(), reason: format!("bad run_state ({e})") })?;
    trainer.resume(ck, state.passes, path)?;
    Ok(state)
}

/// Fine-tuning (`train.init`): `trainer` starts from the weights of the checkpoint at `path`,
/// which must be of the run's model (dropout and label smoothing aside: those are the run's to
/// choose) and vocabulary, with finite values.
fn init(trainer: &mut Trainer, path: &Path, want: &ResumeFor<'_>, keep_optimizer: bool) -> Result<u64> {
    let ck = checkpoint::load(path)?;
    let mut expected = want.model.clone();
    (expected.dropout, expected.attention_dropout, expected.label_smoothing) =
        (ck.config.dropout, ck.config.attention_dropout, ck.config.label_smoothing);
    checkpoint::check_config(path, &expected, &ck.config)?;
    check_written_for(path, &ck, want)?;
    let step = ck.step;
    trainer.init_from(ck, keep_optimizer, path)?;
    Ok(step)
}

/// The checkpoint `ck` (at `path`) was written for `want`'s vocabulary and tree format, and holds
/// finite values.
fn check_written_for(path: &Path, ck: &checkpoint::Checkpoint, want: &ResumeFor<'_>) -> Result<()> {
    if ck.vocab_hash != want.vocab_hash {
        return Err(Error::CheckpointMismatch {
            path: path.to_path_buf(),
            what: format!("vocabulary (its hash; the run's is that of data.bpe = {})", want.vocab_file.display()),
            expected: want.vocab_hash.into(),
            found: ck.vocab_hash.clone(),
        });
    }
    if let Some(format) = want.tree_format {
        let found = checkpoint::tree_format_of(path, ck)?;
        if found != format {
            return Err(Error::CheckpointMismatch {
                path: path.to_path_buf(),
                what: "tree format (data.tree_format)".into(),
                expected: format.name().into(),
                found: found.name().into(),
            });
        }
    }
    checkpoint::check_finite(path, ck)
}

/// Resumes from the newest good checkpoint of the run: one that is damaged on disk (truncated,
/// corrupt) or poisoned (NaN or ∞ values) is passed over, saying so, for the one before it. A
/// checkpoint of another model or vocabulary is an error (the configuration changed), not skipped.
/// Returns `None` when the run has no checkpoint.
fn resume_newest_good(
    trainer: &mut Trainer,
    dir: &Path,
    want: &ResumeFor<'_>,
    events: &mut dyn Events,
) -> Result<Option<(PathBuf, RunState)>> {
    let mut all = list_checkpoints(dir)?;
    let mut damaged = Vec::new();
    while let Some((_, path)) = all.pop() {
        match resume(trainer, &path, want) {
            Ok(state) => return Ok(Some((path, state))),
            Err(e @ (Error::CorruptCheckpoint { .. } | Error::NonFiniteCheckpoint { .. } | Error::Io { .. })) => {
                events.warn(&format!("not resuming from {}: {e}; trying the checkpoint before it", path.display()));
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

/// Runs (or resumes) training in one process, telling `events` every message and an [`Update`]
/// after every update ([`crate::events::Lines`] writes one as a line every 2 s).
pub fn run(cfg: &RunConfig, events: &mut dyn Events) -> Result<RunSummary> {
    run_distributed(cfg, &SingleProcess, events)
}

/// Runs (or resumes) training like [`run`] as one of the workers of `comm` (data parallelism, see
/// [`super::distributed`]): every worker calls this with the same configuration and data (checked
/// at the start) and the same run directory; rank 0 writes it, tells `events`, and validates, and
/// the others only compute their share of each update. With [`SingleProcess`] this is [`run`].
pub fn run_distributed(cfg: &RunConfig, comm: &dyn Collective, events: &mut dyn Events) -> Result<RunSummary> {
    let mut run = Run::start(cfg, comm, Rank0::new(comm.is_root(), events))?;
    let stopped = 'run: loop {
        if cfg.train.max_epochs.is_some_and(|e| run.state.epoch >= e) {
            break StopReason::Epochs(run.state.epoch);
        }
        let order = epoch_order(run.data.batches.len(), cfg.train.seed, run.state.epoch);
        while run.state.cursor < order.len() {
            if let Some(stop) = run.limit_reached() {
                break 'run stop;
            }
            run.update(&order)?;
        }
        run.end_epoch()?;
    };
    run.finish(stopped)
}

/// What rank 0 does and the other workers of a data-parallel run do not: it tells the events,
/// writes the run directory, and runs the F1 validations that keep the best checkpoint.
/// (The others skip the loss validations too: theirs give NaN, and they record nothing.)
struct Rank0<'a> {
    /// `None` on the other workers.
    voice: Option<&'a mut dyn Events>,
}

/// Rank 0 tells its events; the other workers tell nothing.
impl Events for Rank0<'_> {
    fn log(&mut self, m: &str) {
        if let Some(events) = &mut self.voice {
            events.log(m);
        }
    }

    fn warn(&mut self, m: &str) {
        if let Some(events) = &mut self.voice {
            events.warn(m);
        }
    }

    fn update(&mut self, u: &Update) {
        if let Some(events) = &mut self.voice {
            events.update(u);
        }
    }

    fn validation(&mut self, record: &serde_json::Value) {
        if let Some(events) = &mut self.voice {
            events.validation(record);
        }
    }

    fn checkpoint(&mut self, step: u64, path: &std::path::Path) {
        if let Some(events) = &mut self.voice {
            events.checkpoint(step, path);
        }
    }

    fn interrupted(&mut self) -> bool {
        self.voice.as_mut().is_some_and(|events| events.interrupted())
    }
}

impl<'a> Rank0<'a> {
    fn new(root: bool, events: &'a mut dyn Events) -> Self {
        Rank0 { voice: root.then_some(events) }
    }

    fn is_root(&self) -> bool {
        self.voice.is_some()
    }

    /// The run directory: rank 0 opens (and locks) it, the others follow what rank 0 writes.
    fn run_dir(&mut self, t: &TrainSection) -> Result<RunDir> {
        match &mut self.voice {
            Some(events) => RunDir::open(&t.output_dir, t.keep_last, &mut **events),
            None => Ok(RunDir::follow(&t.output_dir, t.keep_last)),
        }
    }

    /// The data, prepared by rank 0 first (it learns and saves the BPE model if it is missing),
    /// which then says whether it could, and by the others after (reading that model).
    fn prepare(&mut self, cfg: &RunConfig, comm: &dyn Collective) -> Result<Data> {
        let mut root_ok = [0u64];
        if self.is_root() {
            let prepared = prepare(cfg, self);
            root_ok[0] = prepared.is_ok() as u64;
            comm.broadcast_u64(&mut root_ok);
            return prepared;
        }
        comm.broadcast_u64(&mut root_ok);
        if root_ok[0] == 0 {
            return Err(Error::Config("rank 0 could not prepare the data (its error says why)".into()));
        }
        prepare(cfg, &mut ())
    }
}

/// Training time over every process of the run: the time limit and the checkpoint interval count
/// it, so that a run killed and started again trains the same budget.
struct Clock {
    start: Instant,
    /// Seconds and updates done before this process started (by the run it resumed).
    base_elapsed: f64,
    start_step: u64,
    /// Target tokens since `window_start`, for the speed a progress report shows.
    tokens: usize,
    window_start: Instant,
}

impl Clock {
    fn new(state: &RunState) -> Self {
        let now = Instant::now();
        Clock { start: now, base_elapsed: state.elapsed_s, start_step: state.step, tokens: 0, window_start: now }
    }

    fn elapsed(&self) -> f64 {
        self.base_elapsed + self.start.elapsed().as_secs_f64()
    }

    /// Seconds per update in this process so far.
    fn per_step(&self, step: u64) -> f64 {
        self.start.elapsed().as_secs_f64() / (step - self.start_step).max(1) as f64
    }

    /// Counts an update's target tokens and returns the speed since the window opened; a window
    /// 2 s old starts again after.
    fn tokens_per_s(&mut self, tokens: usize) -> f64 {
        self.tokens += tokens;
        let speed = self.tokens as f64 / self.window_start.elapsed().as_secs_f64().max(1e-9);
        if self.window_start.elapsed().as_secs_f64() >= 2.0 {
            self.tokens = 0;
            self.window_start = Instant::now();
        }
        speed
    }
}

/// A run in progress: its data, the trainer, where it is, and what it reports.
struct Run<'a> {
    cfg: &'a RunConfig,
    comm: &'a dyn Collective,
    rank0: Rank0<'a>,
    run_dir: RunDir,
    data: Data,
    trainer: Trainer,
    state: RunState,
    /// The step the run started or resumed at.
    resumed_at: u64,
    clock: Clock,
    /// Elapsed seconds at the last checkpoint.
    last_ckpt: f64,
    valid_perplexity: Option<f64>,
    /// The step of the last validation recorded, and its scores.
    recorded: Option<(u64, Validated)>,
}

impl<'a> Run<'a> {
    /// Checks the configuration, prepares the data, builds the model and resumes from the run's
    /// newest good checkpoint, every worker agreeing on each.
    fn start(cfg: &'a RunConfig, comm: &'a dyn Collective, mut rank0: Rank0<'a>) -> Result<Self> {
        let t = &cfg.train;
        cfg.validate()?;
        check_accumulate(t.accumulate, comm.size())?;
        let precision = t.bf16_matmul.precision(crate::kernels::cpu::bf16::available(), &mut rank0)?;
        let fingerprint = format!("{}\n{precision:?}", serde_json::to_string(cfg).expect("a run config serialises"));
        agree(
            comm,
            "run configuration (the TOML file with its --set overrides, or train.bf16_matmul's outcome)",
            digest(fingerprint.as_bytes()),
            "start every worker with the same configuration file and options",
        )?;
        let run_dir = rank0.run_dir(t)?;
        let data = rank0.prepare(cfg, comm)?;
        agree(
            comm,
            "training data (BPE vocabulary, pair lengths or validation pairs)",
            data.fingerprint(),
            &format!(
                "every worker must read the same files: check {} and the data paths on every host",
                cfg.data.bpe.display()
            ),
        )?;
        let mut model = crate::model::Transformer::new(data.model.clone(), t.seed)?.with_precision(precision)?;
        if let Some(bpe) = data.tokenizer.bpe() {
            model =
                model.with_pointer_table(crate::model::pointer::PointerTable::from_bpe(bpe, cfg.data.tree_format))?;
        }
        let schedule = Schedule { d_model: data.model.d_model, warmup: t.warmup, lr_scale: t.lr_scale };
        let mut trainer = Trainer::new(model, schedule, t.seed)?;
        if data.alignments.is_some() {
            let layer = t.guided_alignment_layer.unwrap_or(data.model.n_layers) - 1;
            let weight = t.guided_alignment_weight;
            trainer.set_guided(Some(super::trainer::Guided { weight, layer, head: 0 }));
            rank0.log(&format!(
                "guided alignment: head 1 of decoder layer {} trained towards the alignments, weight {weight}",
                layer + 1
            ));
        }
        let state = resume_run(&mut trainer, cfg, comm, &run_dir, &data, &mut rank0)?;
        rank0.log(&format!(
            "{} parameters, {} training pairs in {} batches, {} per update{}",
            trainer.model().params.len(),
            data.train.count(),
            data.batches.len(),
            t.accumulate,
            if comm.size() > 1 {
                format!(" over {} workers ({} each)", comm.size(), t.accumulate / comm.size())
            } else {
                String::new()
            }
        ));
        let clock = Clock::new(&state);
        let (resumed_at, last_ckpt) = (state.step, state.elapsed_s);
        Ok(Run {
            cfg,
            comm,
            rank0,
            run_dir,
            data,
            trainer,
            state,
            resumed_at,
            clock,
            last_ckpt,
            valid_perplexity: None,
            recorded: None,
        })
    }

    /// Why the run stops before its next update, if it does: the step or the time limit, or the
    /// caller's interruption (rank 0's clock and events decide for every worker, so that all stop
    /// at the same update).
    fn limit_reached(&mut self) -> Option<StopReason> {
        let t = &self.cfg.train;
        if t.max_steps.is_some_and(|m| self.state.step >= m) {
            return Some(StopReason::Steps(self.state.step));
        }
        let time_up = t.time_limit_minutes.is_some_and(|m| self.clock.elapsed() >= m * 60.0);
        let stop = self.rank0.interrupted();
        let mut up = [u64::from(time_up) | u64::from(stop) << 1];
        self.comm.broadcast_u64(&mut up);
        match (up[0] & 1 != 0, up[0] & 2 != 0) {
            (_, true) => Some(StopReason::Interrupted),
            (true, false) => t.time_limit_minutes.map(StopReason::TimeLimit),
            (false, false) => None,
        }
    }

    /// One update over the next `train.accumulate` batches of the epoch's `order` (this worker's
    /// share of them), then its record, its progress report, and a validation or checkpoint when
    /// one is due.
    fn update(&mut self, order: &[usize]) -> Result<()> {
        let (t, n_batches) = (&self.cfg.train, order.len());
        let end = (self.state.cursor + t.accumulate).min(n_batches);
        let share = share_of(end - self.state.cursor, self.comm.rank(), self.comm.size())?;
        let mine = &order[self.state.cursor + share.start..self.state.cursor + share.end];
        let group: Vec<Batch> = mine.iter().map(|&b| batch_of(&self.data, &self.data.batches[b])).collect();
        let stats = self.trainer.train_step_shared(&group, share.start, end - self.state.cursor, self.comm)?;
        let state = &mut self.state;
        state.cursor = end;
        state.step = self.trainer.step();
        state.passes = self.trainer.passes();
        state.elapsed_s = self.clock.elapsed();
        self.run_dir.append_metrics(
            &serde_json::json!({"kind": "train", "step": state.step, "epoch": state.epoch + 1, "loss": stats.loss, "nll": stats.nll, "lr": stats.lr, "tokens": stats.tokens}),
        )?;
        let by_steps = t.max_steps.map(|m| self.clock.per_step(state.step) * m.saturating_sub(state.step) as f64);
        let by_time = t.time_limit_minutes.map(|m| (m * 60.0 - self.clock.elapsed()).max(0.0));
        let report = Update {
            step: state.step,
            epoch: state.epoch + 1,
            cursor: state.cursor,
            epoch_batches: n_batches,
            loss: stats.loss,
            lr: f64::from(stats.lr),
            tokens_per_s: self.clock.tokens_per_s(stats.tokens),
            elapsed_s: state.elapsed_s,
            eta_s: match (by_steps, by_time) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            limit_s: t.time_limit_minutes.map(|m| m * 60.0),
            valid_perplexity: self.valid_perplexity,
        };
        self.rank0.update(&report);
        // A validation due at the epoch's last update is the epoch's own ([`Run::end_epoch`] runs
        // next, at the same step): validating here too would record the step twice.
        let epoch_ends = self.state.cursor == n_batches;
        if t.valid_steps.is_some_and(|v| self.state.step.is_multiple_of(v)) && !epoch_ends {
            let v = self.validate()?;
            self.record(self.state.epoch + 1, &v)?;
        }
        let due_steps = t.checkpoint_steps.is_some_and(|c| self.state.step.is_multiple_of(c));
        if due_steps || self.state.elapsed_s - self.last_ckpt >= t.checkpoint_minutes * 60.0 {
            self.save()?;
            self.last_ckpt = self.state.elapsed_s;
        }
        Ok(())
    }

    /// The end of an epoch: its validation, and for parsing its F1 validation when one is due.
    fn end_epoch(&mut self) -> Result<()> {
        self.state.epoch += 1;
        self.state.cursor = 0;
        let v = self.validate()?;
        self.rank0.log(&format!(
            "epoch {} done at step {}: valid loss {:.4}, perplexity {:.2}{}",
            self.state.epoch,
            self.state.step,
            v.loss.smoothed,
            v.loss.perplexity(),
            v.reading_text()
        ));
        self.record(self.state.epoch, &v)?;
        let t = &self.cfg.train;
        if self.f1_validates() && self.state.epoch.is_multiple_of(t.valid_f1_epochs) {
            self.f1_checkpoint()?;
        }
        Ok(())
    }

    /// The end of the run: parsing scores the final model's F1 (before the last checkpoint, so
    /// that the best F1 it records is current) and the average's; then the last checkpoint, a
    /// final validation and the learning curve. A run resumed after the end's work, with nothing
    /// trained since, keeps the records of it and does not do it again.
    fn finish(mut self, stopped: StopReason) -> Result<RunSummary> {
        self.state.elapsed_s = self.clock.elapsed();
        let f1_at_end = self.f1_validates();
        let nothing_trained = self.state.step == self.resumed_at;
        let scored_before = nothing_trained && self.state.f1_scored_at == Some(self.state.step);
        let ended_before = nothing_trained && self.state.ended_at == Some(self.state.step);
        if f1_at_end && !scored_before {
            self.f1_checkpoint()?;
        }
        if f1_at_end {
            self.state.f1_scored_at = Some(self.state.step);
        }
        let mut last_path = match self.run_dir.latest_checkpoint()? {
            Some((step, path)) if step == self.state.step && (!f1_at_end || ended_before) => path,
            _ => self.save()?,
        };
        if f1_at_end && !ended_before {
            if self.rank0.is_root() {
                let f1 = F1 { data: &self.data, cfg: self.cfg, run_dir: &self.run_dir };
                f1.average(&self.trainer, &mut self.state, &mut self.rank0)?;
            }
            // The last checkpoint records the best F1 (so that a resumed run keeps the average)
            // and that the end's work is done.
            self.state.ended_at = Some(self.state.step);
            last_path = self.save()?;
        }
        // A run that stops where an epoch ended has just validated this model: its record stands
        // (a second would repeat the step under the next epoch's number).
        let v = match self.recorded {
            Some((step, v)) if step == self.state.step => v,
            _ => {
                let v = self.validate()?;
                self.record(self.state.epoch + 1, &v)?;
                v
            }
        };
        self.run_dir.write_learning_curve()?;
        self.rank0.log(&format!(
            "stopped: {stopped}; valid loss {:.4}, perplexity {:.2}{}; checkpoint {}",
            v.loss.smoothed,
            v.loss.perplexity(),
            v.reading_text(),
            last_path.display()
        ));
        Ok(RunSummary { state: self.state, stopped, checkpoint: last_path, valid: v.loss, reading: v.reading })
    }

    /// Whether this run validates F1 (parsing, with `train.valid_f1_epochs` > 0).
    fn f1_validates(&self) -> bool {
        self.cfg.data.task.validation() == Validation::PerplexityAndF1 && self.cfg.train.valid_f1_epochs > 0
    }

    /// Validates, keeping the perplexity for progress reports.
    fn validate(&mut self) -> Result<Validated> {
        let v = validation::validate(&mut self.trainer, &self.data.valid, self.cfg, self.comm)?;
        self.valid_perplexity = Some(v.loss.perplexity());
        Ok(v)
    }

    /// Records a validation under `epoch` (and warns when the source path looks dead).
    fn record(&mut self, epoch: u64, v: &Validated) -> Result<()> {
        let warmup = self.cfg.train.warmup;
        validation::record(&self.run_dir, &self.state, epoch, v, warmup, &mut self.rank0)?;
        self.recorded = Some((self.state.step, *v));
        Ok(())
    }

    /// Rank 0: the F1 validation of the current model, kept as the best checkpoint when it is.
    fn f1_checkpoint(&mut self) -> Result<()> {
        if !self.rank0.is_root() {
            return Ok(());
        }
        let f1 = F1 { data: &self.data, cfg: self.cfg, run_dir: &self.run_dir };
        f1.checkpoint(&self.trainer, &mut self.state, &mut self.rank0)
    }

    /// Saves the trainer with the run's position, so that a restart continues exactly.
    fn save(&mut self) -> Result<PathBuf> {
        if !self.run_dir.writes() {
            // A follower: rank 0 writes this checkpoint; copying the model and moments is not needed.
            return Ok(self.run_dir.checkpoint_path(self.state.step));
        }
        // The records written so far precede this state: a run resumed from it keeps them.
        let saved = RunState { metrics_records: Some(self.run_dir.metrics_records()?), ..self.state };
        let extra = checkpoint_extra(&saved, &self.cfg.data);
        let path = self.run_dir.save(&self.trainer.to_checkpoint(self.data.tokenizer.hash(), extra))?;
        self.rank0.checkpoint(self.state.step, &path);
        Ok(path)
    }
}

/// Resumes `trainer` from the run directory's newest good checkpoint, every worker from the same
/// one (Adam moments included), and gives all rank 0's parameters; returns the run's position
/// (the start, without a checkpoint). The metrics records written after that checkpoint go: they
/// are written again from there (a run without a checkpoint starts again, its records with it).
fn resume_run(
    trainer: &mut Trainer,
    cfg: &RunConfig,
    comm: &dyn Collective,
    run_dir: &RunDir,
    data: &Data,
    rank0: &mut Rank0,
) -> Result<RunState> {
    let dir = &cfg.train.output_dir;
    let want = ResumeFor {
        model: &data.model,
        vocab_hash: data.tokenizer.hash(),
        vocab_file: &cfg.data.bpe,
        tree_format: (cfg.data.task == Task::Parsing).then_some(cfg.data.tree_format),
    };
    let resumed = resume_newest_good(trainer, dir, &want, rank0)?;
    if let (None, Some(from)) = (&resumed, &cfg.train.init) {
        let step = init(trainer, from, &want, cfg.train.init_optimizer)?;
        let optimiser = if cfg.train.init_optimizer { "its Adam moments" } else { "fresh Adam moments" };
        rank0.log(&format!(
            "starting from the weights of {} (its step {step}): a fresh schedule, {optimiser}",
            from.display()
        ));
    }
    let position = resumed.as_ref().map(|(_, s)| serde_json::to_string(s).expect("state serialises"));
    agree(
        comm,
        "checkpoint to resume from",
        digest(position.unwrap_or_default().as_bytes()),
        &format!(
            "every worker must see rank 0's checkpoints in {}: put it on a filesystem all hosts share",
            dir.display()
        ),
    )?;
    if comm.size() > 1 {
        trainer.broadcast_params(comm);
    }
    let Some((last, mut state)) = resumed else {
        run_dir.keep_metrics_records(0, rank0)?;
        return Ok(RunState::default());
    };
    rank0.log(&format!("resuming from {} (step {}, epoch {})", last.display(), state.step, state.epoch + 1));
    match state.metrics_records.take() {
        Some(n) => run_dir.keep_metrics_records(n, rank0)?,
        None => run_dir.drop_metrics_after(state.step, rank0)?,
    };
    Ok(state)
}
