//! Synthetic tasks for smoke-testing learning: copy and reverse a random symbol sequence.

use crate::model::Batch;
use crate::rng::Rng;
use crate::SPECIAL_TOKENS;

/// Which synthetic task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// Target = source.
    Copy,
    /// Target = source reversed.
    Reverse,
}

/// Random (source, target) pairs over `symbols` symbols (ids SPECIAL_TOKENS..) with lengths in
/// [min_len, max_len].
pub fn pairs(
    task: Task,
    rng: &mut Rng,
    n: usize,
    symbols: usize,
    min_len: usize,
    max_len: usize,
) -> Vec<(Vec<u32>, Vec<u32>)> {
    (0..n)
        .map(|_| {
            let len = min_len + rng.below((max_len - min_len + 1) as u64) as usize;
            let src: Vec<u32> = (0..len)
                .map(|_| (SPECIAL_TOKENS as u64 + rng.below(symbols as u64)) as u32)
                .collect();
            let tgt = match task {
                Task::Copy => src.clone(),
                Task::Reverse => src.iter().rev().cloned().collect(),
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
            .fold((0, f32::NEG_INFINITY), |best, (i, &v)| {
                if v > best.1 {
                    (i, v)
                } else {
                    best
                }
            })
            .0;
        correct += (arg as u32 == t) as usize;
        total += 1;
    }
    (correct, total)
}
