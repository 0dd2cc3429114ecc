//! Synthetic tasks for smoke-testing learning: copy and reverse a random symbol sequence.

use crate::config::{ModelConfig, Positions};
use crate::model::Batch;
use crate::rng::Rng;
use crate::SPECIAL_TOKENS;

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
        source_pointer: false,
        next_closer: false,
        next_closer_depth: true,
        next_closer_dropout: 0.0,
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
/// of a forward pass over `batch`: (correct, total).
pub fn token_accuracy(logits: &[f32], batch: &Batch, vocab: usize) -> (usize, usize) {
    let mut correct = 0;
    let mut total = 0;
    for (r, &t) in batch.tgt_out.iter().enumerate() {
        if t == crate::PAD {
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
    (correct, total)
}
