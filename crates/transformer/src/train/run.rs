//! §5 A training run from a TOML configuration: data preparation (BPE, filtering, batching), the
//! update loop with gradient accumulation, validation, checkpoints on a time or step interval that
//! keep the last k, metrics (JSONL and an SVG learning curve), a wall-clock limit, and exact resume:
//! a run restarted with the same configuration continues from its last checkpoint with the step,
//! schedule, Adam moments, data position and dropout counter restored, so its results are those of
//! an uninterrupted run (same seed, same thread count).

use super::checkpoint;
use super::schedule::Schedule;
use super::trainer::Trainer;
use crate::config::{ModelConfig, Positions};
use crate::data::batching::{epoch_order, make_batches, BatchConfig};
use crate::data::binarized::{Binarized, Pairs};
use crate::data::bpe::Bpe;
use crate::data::parallel::{encode_and_filter, read_parallel, FilterConfig, TokenPairs};
use crate::error::{Error, Result};
use crate::io::io_err;
use crate::model::Batch;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The model section: a Table 3 preset by name, with any field overridden. The vocabulary size
/// always comes from the BPE model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// Preset name (base, a1, …, big); default "base".
    pub preset: Option<String>,
    /// N.
    pub n_layers: Option<usize>,
    /// d_model.
    pub d_model: Option<usize>,
    /// d_ff.
    pub d_ff: Option<usize>,
    /// h.
    pub n_heads: Option<usize>,
    /// d_k.
    pub d_k: Option<usize>,
    /// d_v.
    pub d_v: Option<usize>,
    /// P_drop.
    pub dropout: Option<f32>,
    /// Attention dropout.
    pub attention_dropout: Option<f32>,
    /// ε_ls.
    pub label_smoothing: Option<f32>,
    /// sinusoidal or learned.
    pub positions: Option<Positions>,
    /// Longest sequence.
    pub max_positions: Option<usize>,
}

/// The data section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// Training source text (plain or .gz), line-aligned with `train_tgt`.
    pub train_src: PathBuf,
    /// Training target text.
    pub train_tgt: PathBuf,
    /// Validation source text.
    pub valid_src: PathBuf,
    /// Validation target text.
    pub valid_tgt: PathBuf,
    /// The shared BPE model; learned from the training text (and saved here) if it does not exist.
    pub bpe: PathBuf,
    /// A directory from `transformer prepare` to train from (memory-mapped) instead of
    /// `train_src`/`train_tgt`, which then only serve to learn the BPE model if it is missing.
    #[serde(default)]
    pub train_bin: Option<PathBuf>,
    /// Vocabulary size when the BPE model is learned.
    #[serde(default = "default_vocab")]
    pub vocab_size: usize,
    /// Longest side kept, in BPE tokens.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: usize,
    /// Largest length ratio kept.
    #[serde(default = "default_max_ratio")]
    pub max_ratio: f64,
}

/// The train section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSection {
    /// Where checkpoints, metrics and the learning curve go.
    pub output_dir: PathBuf,
    /// Seed of initialisation, data order and dropout.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Source tokens per batch (padding included).
    #[serde(default = "default_batch_tokens")]
    pub max_src_tokens: usize,
    /// Target tokens per batch (padding included).
    #[serde(default = "default_batch_tokens")]
    pub max_tgt_tokens: usize,
    /// Batches per update (gradient accumulation).
    #[serde(default = "one")]
    pub accumulate: usize,
    /// Eq. 3 warmup steps.
    #[serde(default = "default_warmup")]
    pub warmup: u64,
    /// Multiplier on Eq. 3.
    #[serde(default = "default_lr_scale")]
    pub lr_scale: f32,
    /// Stop after this many updates.
    pub max_steps: Option<u64>,
    /// Stop after this many epochs.
    pub max_epochs: Option<u64>,
    /// Stop cleanly (with a checkpoint) after this many minutes of training in this process.
    pub time_limit_minutes: Option<f64>,
    /// Write a checkpoint every this many minutes (the paper: 10).
    #[serde(default = "default_ckpt_minutes")]
    pub checkpoint_minutes: f64,
    /// Also write one every this many updates.
    pub checkpoint_steps: Option<u64>,
    /// Checkpoints kept (older ones are deleted).
    #[serde(default = "default_keep")]
    pub keep_last: usize,
    /// Validate every this many updates (and at every epoch's end).
    pub valid_steps: Option<u64>,
    /// Matrix products with bf16 operands and f32 sums on AMX or AVX512-BF16 (the `bf16-matmul` departure);
    /// weights, gradients, Adam and every other kernel stay f32. `true`, `false` or `"auto"`.
    #[serde(default)]
    pub bf16_matmul: Bf16Matmul,
}

/// `train.bf16_matmul`: `false` (f32 products, the paper), `true` (bf16 products; an error on a CPU
/// with no bf16 unit) or `"auto"` (bf16 products where the CPU has a unit, f32 elsewhere, said in the log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bf16Matmul {
    /// f32 products.
    #[default]
    Off,
    /// bf16 products, or an error.
    On,
    /// bf16 products where available, else f32.
    Auto,
}

impl Serialize for Bf16Matmul {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Bf16Matmul::Off => s.serialize_bool(false),
            Bf16Matmul::On => s.serialize_bool(true),
            Bf16Matmul::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for Bf16Matmul {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Bool(bool),
            Word(String),
        }
        match Form::deserialize(d)? {
            Form::Bool(true) => Ok(Bf16Matmul::On),
            Form::Bool(false) => Ok(Bf16Matmul::Off),
            Form::Word(w) if w == "auto" => Ok(Bf16Matmul::Auto),
            Form::Word(w) => {
                Err(serde::de::Error::custom(format!("bf16_matmul: expected true, false or \"auto\", got \"{w}\"")))
            }
        }
    }
}

fn default_vocab() -> usize {
    8000
}
fn default_max_tokens() -> usize {
    250
}
fn default_max_ratio() -> f64 {
    3.0
}
fn default_seed() -> u64 {
    1
}
fn default_batch_tokens() -> usize {
    4096
}
fn one() -> usize {
    1
}
fn default_warmup() -> u64 {
    4000
}
fn default_lr_scale() -> f32 {
    1.0
}
fn default_ckpt_minutes() -> f64 {
    10.0
}
fn default_keep() -> usize {
    5
}

/// A whole run's configuration (the TOML file).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// The model.
    #[serde(default)]
    pub model: ModelSection,
    /// The data.
    pub data: DataSection,
    /// The training recipe.
    pub train: TrainSection,
}

impl RunConfig {
    /// Parses TOML, then applies `overrides` of the form `section.field=value` (value in TOML
    /// syntax; bare words are taken as strings). Errors name the file or the override.
    pub fn from_toml(text: &str, origin: &str, overrides: &[String]) -> Result<RunConfig> {
        let mut doc: toml::Table = text.parse().map_err(|e| Error::Config(format!("{origin}: {e}")))?;
        for o in overrides {
            let (key, value) = o
                .split_once('=')
                .ok_or_else(|| Error::Config(format!("override '{o}': expected section.field=value")))?;
            let (section, field) = key
                .trim()
                .split_once('.')
                .ok_or_else(|| Error::Config(format!("override '{o}': expected section.field=value")))?;
            let value = value.trim();
            let parsed: toml::Value = format!("v = {value}")
                .parse::<toml::Table>()
                .ok()
                .and_then(|t| t.get("v").cloned())
                .unwrap_or_else(|| toml::Value::String(value.to_string()));
            let table = doc.entry(section.to_string()).or_insert_with(|| toml::Value::Table(Default::default()));
            let table = table
                .as_table_mut()
                .ok_or_else(|| Error::Config(format!("override '{o}': {section} is not a section")))?;
            table.insert(field.to_string(), parsed);
        }
        toml::Value::Table(doc).try_into().map_err(|e| Error::Config(format!("{origin}: {e}")))
    }

    /// The model configuration: the preset with the section's overrides, at `vocab_size`.
    pub fn model_config(&self, vocab_size: usize) -> Result<ModelConfig> {
        let m = &self.model;
        let mut c = ModelConfig::preset(m.preset.as_deref().unwrap_or("base"))?;
        macro_rules! set {
            ($($f:ident),*) => { $(if let Some(v) = m.$f { c.$f = v; })* };
        }
        set!(
            n_layers,
            d_model,
            d_ff,
            n_heads,
            d_k,
            d_v,
            dropout,
            attention_dropout,
            label_smoothing,
            positions,
            max_positions
        );
        c.vocab_size = vocab_size;
        c.validate()?;
        Ok(c)
    }
}

/// Where a run is: saved in every checkpoint so a restart continues exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Updates done.
    pub step: u64,
    /// Forward/backward passes done (keys the dropout masks).
    pub passes: u64,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Batches of the current epoch's order already consumed.
    pub cursor: usize,
    /// Seconds of training over all processes.
    pub elapsed_s: f64,
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
}

/// Checkpoints in `dir` as (step, path), oldest first.
pub fn list_checkpoints(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let p = e.map_err(io_err(dir))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(step) =
            name.strip_prefix("ckpt-").and_then(|r| r.strip_suffix(".safetensors")).and_then(|n| n.parse().ok())
        {
            out.push((step, p));
        }
    }
    out.sort();
    Ok(out)
}

/// Prepared data: the BPE model, filtered training pairs, their batches, validation pairs.
struct Data {
    bpe: Bpe,
    train: Box<dyn Pairs>,
    batches: Vec<Vec<usize>>,
    valid: TokenPairs,
}

fn prepare(cfg: &RunConfig, log: &mut dyn FnMut(&str)) -> Result<Data> {
    let d = &cfg.data;
    let bpe = if d.bpe.exists() {
        Bpe::load(&d.bpe)?
    } else {
        log(&format!("learning a {}-entry BPE vocabulary from the training text", d.vocab_size));
        let text = read_parallel(&d.train_src, &d.train_tgt)?;
        let bpe = Bpe::learn(text.iter().flat_map(|(s, t)| [s, t]), d.vocab_size, 2)?;
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
            let (pairs, report) = encode_and_filter(&read_parallel(&d.train_src, &d.train_tgt)?, &bpe, &filter)?;
            log(&format!("train: {report}"));
            Box::new(pairs)
        }
    };
    let valid = read_parallel(&d.valid_src, &d.valid_tgt)?;
    // Validation keeps every non-empty pair: long ones are scored, not dropped.
    let keep_all = FilterConfig { max_tokens: usize::MAX, max_ratio: f64::INFINITY };
    let (valid, vreport) = encode_and_filter(&valid, &bpe, &keep_all)?;
    log(&format!("valid: {vreport}"));
    if train.count() == 0 {
        return Err(Error::Config(
            "no training pairs left after filtering; check data.max_tokens and data.max_ratio".into(),
        ));
    }
    let lengths: Vec<(usize, usize)> = (0..train.count()).map(|i| train.lengths_of(i)).collect();
    let bc = BatchConfig { max_src_tokens: cfg.train.max_src_tokens, max_tgt_tokens: cfg.train.max_tgt_tokens };
    let batches = make_batches(&lengths, &bc);
    Ok(Data { bpe, train, batches, valid })
}

fn batch_of(pairs: &dyn Pairs, idx: &[usize]) -> Batch {
    let sel: Vec<(Vec<u32>, Vec<u32>)> = idx.iter().map(|&i| pairs.get(i)).collect();
    Batch::from_pairs(&sel)
}

/// Label-smoothed loss and NLL per target token over `pairs`, without dropout.
fn validate(trainer: &mut Trainer, pairs: &TokenPairs, cfg: &RunConfig) -> Result<(f64, f64)> {
    let lengths: Vec<(usize, usize)> = pairs.iter().map(|(s, t)| (s.len(), t.len())).collect();
    let bc = BatchConfig { max_src_tokens: cfg.train.max_src_tokens, max_tgt_tokens: cfg.train.max_tgt_tokens };
    let (mut loss, mut nll, mut tokens) = (0.0, 0.0, 0usize);
    for b in make_batches(&lengths, &bc) {
        let s = trainer.evaluate(&batch_of(pairs as &dyn Pairs, &b))?;
        loss += s.loss;
        nll += s.nll;
        tokens += s.tokens;
    }
    Ok((loss / tokens.max(1) as f64, nll / tokens.max(1) as f64))
}

fn save(trainer: &Trainer, state: &RunState, vocab_hash: &str, dir: &Path, keep: usize) -> Result<PathBuf> {
    let path = dir.join(format!("ckpt-{:08}.safetensors", state.step));
    let extra = [("run_state".to_string(), serde_json::to_string(state).expect("state serialises"))].into();
    let ckpt = trainer.to_checkpoint(vocab_hash, extra);
    checkpoint::save(&path, &ckpt)?;
    let all = list_checkpoints(dir)?;
    for (_, old) in all.iter().take(all.len().saturating_sub(keep.max(1))) {
        std::fs::remove_file(old).map_err(io_err(old))?;
    }
    Ok(path)
}

/// After a crash (SIGKILL, power loss): remove checkpoint temp files that were never renamed, and
/// cut a metrics line that was half written, so new records start on a line of their own.
fn recover_after_crash(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let p = e.map_err(io_err(dir))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with(".ckpt-") && name.contains(".safetensors.tmp.") {
            std::fs::remove_file(&p).map_err(io_err(&p))?;
        }
    }
    let metrics = dir.join("metrics.jsonl");
    if let Ok(bytes) = std::fs::read(&metrics) {
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let f = std::fs::OpenOptions::new().write(true).open(&metrics).map_err(io_err(&metrics))?;
            f.set_len(keep as u64).map_err(io_err(&metrics))?;
        }
    }
    Ok(())
}

/// Appends one JSON line to `path`.
fn append_jsonl(path: &Path, v: &serde_json::Value) -> Result<()> {
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io_err(path))?;
    writeln!(f, "{v}").map_err(io_err(path))
}

/// Runs (or resumes) training. `log` receives one-line progress messages.
pub fn run(cfg: &RunConfig, log: &mut dyn FnMut(&str)) -> Result<RunSummary> {
    let t = &cfg.train;
    if t.accumulate == 0 || t.keep_last == 0 {
        return Err(Error::Config("train.accumulate and train.keep_last must be at least 1".into()));
    }
    match t.bf16_matmul {
        Bf16Matmul::Off => {}
        Bf16Matmul::On => crate::kernels::cpu::matmul::set_bf16(true)
            .map_err(|e| Error::Config(format!("train.bf16_matmul = true, but {e}; set it to false or \"auto\"")))?,
        Bf16Matmul::Auto => {
            if let Err(why) = crate::kernels::cpu::matmul::set_bf16(true) {
                log(&format!("matrix products in f32: train.bf16_matmul = \"auto\" and {why}"));
            }
        }
    }
    if t.bf16_matmul != Bf16Matmul::Off && crate::kernels::cpu::matmul::bf16_enabled() {
        let unit = crate::kernels::cpu::bf16::unit().map_err(Error::Config)?;
        log(&format!("matrix products in bf16 with f32 sums ({unit:?}; the bf16-matmul departure)"));
    }
    std::fs::create_dir_all(&t.output_dir).map_err(io_err(&t.output_dir))?;
    recover_after_crash(&t.output_dir)?;
    let data = prepare(cfg, log)?;
    let model_cfg = cfg.model_config(data.bpe.vocab_size())?;
    let model = crate::model::Transformer::new(model_cfg.clone(), t.seed)?;
    let schedule = Schedule { d_model: model_cfg.d_model, warmup: t.warmup, lr_scale: t.lr_scale };
    let mut trainer = Trainer::new(model, schedule, t.seed);
    let mut state = RunState::default();
    if let Some((_, last)) = list_checkpoints(&t.output_dir)?.pop() {
        let ck = checkpoint::load_for(&last, &model_cfg)?;
        if ck.vocab_hash != data.bpe.hash() {
            return Err(Error::CheckpointMismatch {
                path: last,
                what: "vocabulary".into(),
                expected: data.bpe.hash().into(),
                found: ck.vocab_hash,
            });
        }
        let s = ck.extra.get("run_state").ok_or_else(|| Error::CorruptCheckpoint {
            path: last.clone(),
            reason: "no run_state to resume from".into(),
        })?;
        state = serde_json::from_str(s)
            .map_err(|e| Error::CorruptCheckpoint { path: last.clone(), reason: format!("bad run_state ({e})") })?;
        trainer.resume(ck, state.passes, &last)?;
        log(&format!("resuming from {} (step {}, epoch {})", last.display(), state.step, state.epoch + 1));
    }
    let metrics = t.output_dir.join("metrics.jsonl");
    let n_batches = data.batches.len();
    log(&format!(
        "{} parameters, {} training pairs in {n_batches} batches, {} per update",
        trainer.model().params.len(),
        data.train.count(),
        t.accumulate
    ));
    let start = Instant::now();
    let (base_elapsed, start_step) = (state.elapsed_s, state.step);
    let mut last_ckpt = Instant::now();
    let mut last_log = Instant::now();
    let mut last_path = PathBuf::new();
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
            if t.time_limit_minutes.is_some_and(|m| start.elapsed().as_secs_f64() >= m * 60.0) {
                stopped = format!("time limit of {} minutes", t.time_limit_minutes.unwrap_or(0.0));
                break 'run;
            }
            let end = (state.cursor + t.accumulate).min(n_batches);
            let group: Vec<Batch> =
                order[state.cursor..end].iter().map(|&b| batch_of(data.train.as_ref(), &data.batches[b])).collect();
            let stats = trainer.train_step(&group)?;
            state.cursor = end;
            state.step = trainer.step();
            state.passes = trainer.passes();
            state.elapsed_s = base_elapsed + start.elapsed().as_secs_f64();
            tok_window += stats.tokens;
            append_jsonl(
                &metrics,
                &serde_json::json!({"kind": "train", "step": state.step, "epoch": state.epoch + 1, "loss": stats.loss, "nll": stats.nll, "lr": stats.lr, "tokens": stats.tokens}),
            )?;
            if last_log.elapsed().as_secs_f64() >= 2.0 {
                let tps = tok_window as f64 / window_start.elapsed().as_secs_f64();
                let per_step = start.elapsed().as_secs_f64() / (state.step - start_step).max(1) as f64;
                let by_steps = t.max_steps.map(|m| per_step * m.saturating_sub(state.step) as f64);
                let by_time = t.time_limit_minutes.map(|m| (m * 60.0 - start.elapsed().as_secs_f64()).max(0.0));
                let eta = match (by_steps, by_time) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
                .map(|s| format!("  ETA {:.0} min {:02.0} s", (s / 60.0).floor(), s % 60.0));
                log(&format!(
                    "epoch {} step {} ({}/{n_batches} batches)  loss {:.4}  {:.0} tgt tok/s  lr {:.2e}{}",
                    state.epoch + 1,
                    state.step,
                    state.cursor,
                    stats.loss,
                    tps,
                    stats.lr,
                    eta.unwrap_or_default()
                ));
                last_log = Instant::now();
                tok_window = 0;
                window_start = Instant::now();
            }
            if t.valid_steps.is_some_and(|v| state.step % v == 0) {
                let (vl, vn) = validate(&mut trainer, &data.valid, cfg)?;
                append_jsonl(
                    &metrics,
                    &serde_json::json!({"kind": "valid", "step": state.step, "epoch": state.epoch + 1, "loss": vl, "nll": vn, "ppl": vn.exp()}),
                )?;
            }
            let due_steps = t.checkpoint_steps.is_some_and(|c| state.step % c == 0);
            if due_steps || last_ckpt.elapsed().as_secs_f64() >= t.checkpoint_minutes * 60.0 {
                last_path = save(&trainer, &state, data.bpe.hash(), &t.output_dir, t.keep_last)?;
                last_ckpt = Instant::now();
            }
        }
        state.epoch += 1;
        state.cursor = 0;
        let (vl, vn) = validate(&mut trainer, &data.valid, cfg)?;
        log(&format!(
            "epoch {} done at step {}: valid loss {vl:.4}, perplexity {:.2}",
            state.epoch,
            state.step,
            vn.exp()
        ));
        append_jsonl(
            &metrics,
            &serde_json::json!({"kind": "valid", "step": state.step, "epoch": state.epoch, "loss": vl, "nll": vn, "ppl": vn.exp()}),
        )?;
    }
    state.elapsed_s = base_elapsed + start.elapsed().as_secs_f64();
    if list_checkpoints(&t.output_dir)?.last().is_none_or(|(s, _)| *s != state.step) {
        last_path = save(&trainer, &state, data.bpe.hash(), &t.output_dir, t.keep_last)?;
    } else if last_path.as_os_str().is_empty() {
        last_path = list_checkpoints(&t.output_dir)?.pop().map(|(_, p)| p).unwrap_or_default();
    }
    let valid = validate(&mut trainer, &data.valid, cfg)?;
    append_jsonl(
        &metrics,
        &serde_json::json!({"kind": "valid", "step": state.step, "epoch": state.epoch + 1, "loss": valid.0, "nll": valid.1, "ppl": valid.1.exp()}),
    )?;
    super::curve::write_svg(&metrics, &t.output_dir.join("learning_curve.svg"))?;
    log(&format!(
        "stopped: {stopped}; valid loss {:.4}, perplexity {:.2}; checkpoint {}",
        valid.0,
        valid.1.exp(),
        last_path.display()
    ));
    Ok(RunSummary { state, stopped, checkpoint: last_path, valid })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[data]\ntrain_src = \"a\"\ntrain_tgt = \"b\"\nvalid_src = \"e\"\nvalid_tgt = \"f\"\nbpe = \"c\"\n[train]\noutput_dir = \"d\"\n";

    fn bf16_of(extra: &str, overrides: &[&str]) -> Result<Bf16Matmul> {
        let text = format!("{MINIMAL}{extra}");
        let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        RunConfig::from_toml(&text, "test.toml", &o).map(|c| c.train.bf16_matmul)
    }

    #[test]
    fn bf16_matmul_reads_true_false_and_auto() {
        assert_eq!(bf16_of("", &[]).unwrap(), Bf16Matmul::Off);
        assert_eq!(bf16_of("bf16_matmul = false\n", &[]).unwrap(), Bf16Matmul::Off);
        assert_eq!(bf16_of("bf16_matmul = true\n", &[]).unwrap(), Bf16Matmul::On);
        assert_eq!(bf16_of("bf16_matmul = \"auto\"\n", &[]).unwrap(), Bf16Matmul::Auto);
        // --set: a bare word is a string, true/false are booleans.
        assert_eq!(bf16_of("bf16_matmul = true\n", &["train.bf16_matmul=auto"]).unwrap(), Bf16Matmul::Auto);
        assert_eq!(bf16_of("bf16_matmul = \"auto\"\n", &["train.bf16_matmul=false"]).unwrap(), Bf16Matmul::Off);
        let err = bf16_of("bf16_matmul = \"yes\"\n", &[]).unwrap_err().to_string();
        assert!(err.contains("test.toml") && err.contains("\"auto\"") && err.contains("yes"), "{err}");
        // It round-trips through the serialised form that checkpoints and logs keep.
        for mode in [Bf16Matmul::Off, Bf16Matmul::On, Bf16Matmul::Auto] {
            let v = serde_json::to_value(mode).unwrap();
            assert_eq!(serde_json::from_value::<Bf16Matmul>(v).unwrap(), mode);
        }
    }

    #[test]
    fn shipped_configs_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&path).unwrap();
                RunConfig::from_toml(&text, &path.display().to_string(), &[])
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                n += 1;
            }
        }
        assert!(n >= 2, "found {n} configs in {}", dir.display());
    }
}
