//! Synthetic tasks for smoke-testing learning: copy and reverse a random symbol sequence, with
//! the recipe that learns them (`transformer synthetic`, the `learns` tests).

use crate::config::{ModelConfig, Positions};
use crate::error::{Error, Result};
use crate::model::{Batch, Transformer};
use crate::rng::Rng;
use crate::train::{Schedule, StepStats, Trainer};
use crate::vocab::SPECIAL_TOKENS;

/// Symbols of the recipe's sequences.
pub const SYMBOLS: usize = 20;
/// Pairs per training batch.
pub const BATCH: usize = 64;
/// Shortest sequence.
pub const MIN_LEN: usize = 4;
/// Longest sequence.
pub const MAX_LEN: usize = 12;
/// Held-out pairs scored at the end.
pub const HELD_OUT: usize = 500;

/// A trainer for the recipe: [`model_config`] over [`SYMBOLS`], warmup 400, lr_scale 0.5.
pub fn trainer(seed: u64) -> Result<Trainer> {
    let cfg = model_config(SYMBOLS);
    let schedule = Schedule { d_model: cfg.d_model, warmup: 400, lr_scale: 0.5 };
    Trainer::new(Transformer::new(cfg, seed)?, schedule, seed)
}

/// A batch of [`BATCH`] (or `n`) random pairs of the recipe drawn from `rng`.
pub fn batch(task: SyntheticTask, rng: &mut Rng, n: usize) -> Batch {
    Batch::from_pairs(&pairs(task, rng, n, SYMBOLS, MIN_LEN, MAX_LEN))
}

/// Trains `task` from scratch for `steps` updates (data from `seed`), calling `on_step` after
/// each; returns the trainer and its teacher-forced token accuracy on [`HELD_OUT`] pairs drawn
/// from another seed, as (correct, total).
pub fn train(
    task: SyntheticTask,
    steps: u64,
    seed: u64,
    on_step: &mut dyn FnMut(u64, &StepStats),
) -> Result<(Trainer, (usize, usize))> {
    let mut trainer = trainer(seed)?;
    let mut rng = Rng::new(seed ^ 0xdead_beef);
    for step in 1..=steps {
        let stats = trainer.train_step(&[batch(task, &mut rng, BATCH)])?;
        on_step(step, &stats);
    }
    let held_out = batch(task, &mut Rng::new(seed ^ 0x1234_5678), HELD_OUT);
    let accuracy = token_accuracy(trainer.logits(&held_out)?, &held_out, SPECIAL_TOKENS + SYMBOLS)?;
    Ok((trainer, accuracy))
}

/// Which synthetic task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyntheticTask {
    /// Target = source.
    Copy,
    /// Target = source reversed.
    Reverse,
}

impl SyntheticTask {
    /// Both tasks.
    pub const ALL: [SyntheticTask; 2] = [SyntheticTask::Copy, SyntheticTask::Reverse];

    /// The name (`copy`, `reverse`).
    pub fn name(self) -> &'static str {
        match self {
            SyntheticTask::Copy => "copy",
            SyntheticTask::Reverse => "reverse",
        }
    }
}

/// The small model used for synthetic tasks: 2+2 layers, d_model 64, 4 heads, no dropout or label
/// smoothing, over `symbols` symbols plus the special tokens.
pub fn model_config(symbols: usize) -> ModelConfig {
    ModelConfig {
        n_layers: 2,
        d_model: 64,
        d_ff: 256,
        n_heads: 4,
        d_k: 16,
        d_v: 16,
        dropout: 0.0,
        attention_dropout: 0.0,
        label_smoothing: 0.0,
        positions: Positions::Sinusoidal,
        max_positions: 64,
        vocab_size: SPECIAL_TOKENS + symbols,
        layer_norm_eps: 1e-6,
        ..ModelConfig::base()
    }
}

/// Random (source, target) pairs over `symbols` symbols (ids SPECIAL_TOKENS..) with lengths in
/// [min_len, max_len].
pub fn pairs(
    task: SyntheticTask,
    rng: &mut Rng,
    n: usize,
    symbols: usize,
    min_len: usize,
    max_len: usize,
) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..n)
        .map(|_| {
            let len = min_len + rng.below((max_len - min_len + 1) as u64) as usize;
            let src: Vec<u32> = (0..len).map(|_| (SPECIAL_TOKENS as u64 + rng.below(symbols as u64)) as u32).collect();
            let tgt = match task {
                SyntheticTask::Copy => src.clone(),
                SyntheticTask::Reverse => src.iter().rev().cloned().collect(),
            };
            (src, tgt)
        })
        .collect()
}

/// Teacher-forced token accuracy of argmax predictions over non-padding targets, given the logits
/// of a forward pass over `batch`: (correct, total). Logits that are not `vocab` a target
/// position are an [`Error::Input`].
pub fn token_accuracy(logits: &[f32], batch: &Batch, vocab: usize) -> Result<(usize, usize)> {
    let positions = batch.tgt_out.len();
    if vocab == 0 || positions.checked_mul(vocab) != Some(logits.len()) {
        return Err(Error::Input(format!(
            "{} logits for {positions} target positions of a vocabulary of {vocab}: there must be {} (one a \
             position and id)",
            logits.len(),
            positions.saturating_mul(vocab)
        )));
    }
    let mut correct = 0;
    let mut total = 0;
    for (r, &t) in batch.tgt_out.iter().enumerate() {
        if t == crate::vocab::PAD {
            continue;
        }
        let row = &logits[r * vocab..(r + 1) * vocab];
        let arg = row
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best })
            .0;
        correct += (arg as u32 == t) as usize;
        total += 1;
    }
    Ok((correct, total))
}
