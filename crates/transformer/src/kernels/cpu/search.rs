//! §6.1 The beam's per-step kernels: the log-normaliser of each row of next-token scores, and the
//! k best next tokens of a row. The search reads raw logits plus one normaliser per row and never
//! writes a normalised copy of the (rows × V) scores.

use super::elementwise::{exp_sum, max, row_is_finite};
use crate::vocab::{BOS, EOS, PAD, UNK};
use multiversion::multiversion;

/// The `k` best next tokens of one row (never PAD or BOS, nor UNK when `no_unk`; only EOS when
/// `eos_only`), as
/// (log p, token), best first, where log p = score − `norm` in f32. NaN counts as −∞. Blocks of 64
/// scores whose maximum cannot beat the k-th best so far are skipped whole: f32 subtraction is
/// monotone, so max(score) − norm bounds every log p of the block.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
pub fn top_k(row: &[f32], norm: f32, k: usize, eos_only: bool, no_unk: bool) -> Vec<(f64, u32)> {
    let key = |x: f32| log_prob(x, norm);
    if eos_only {
        return vec![(key(row[EOS as usize]), EOS)];
    }
    let mut best: Vec<(f64, u32)> = Vec::with_capacity(k + 1);
    for (b, block) in row.chunks(64).enumerate() {
        if best.len() == k && key(max(block)) <= best[k - 1].0 {
            continue;
        }
        for (i, &x) in block.iter().enumerate() {
            let j = (b * 64 + i) as u32;
            if j == PAD || j == BOS || (no_unk && j == UNK) {
                continue;
            }
            let x = key(x);
            if best.len() == k && x <= best[k - 1].0 {
                continue; // not better than the k-th (ties keep the lower id, seen first)
            }
            let at = best.partition_point(|&(y, _)| y >= x);
            best.insert(at, (x, j));
            best.truncate(k);
        }
    }
    best
}

/// log Σ exp(row) with the vectorised exp of the training softmax; NaN when the row holds a NaN or
/// an infinity.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
pub fn log_sum_exp(row: &[f32]) -> f32 {
    if !row_is_finite(row) {
        return f32::NAN;
    }
    let mx = max(row);
    mx + exp_sum(row, mx).ln()
}

/// log p of a score under a normaliser, NaN ranked as −∞.
pub(crate) fn log_prob(x: f32, norm: f32) -> f64 {
    let y = x - norm;
    if y.is_nan() {
        f64::NEG_INFINITY
    } else {
        y as f64
    }
}

/// [`top_k`] restricted to the tokens `allowed` (a constrained search's choices): the `k` best of
/// them by log-probability, ties by lower id, each token once.
pub fn top_k_among(row: &[f32], norm: f32, k: usize, allowed: &[u32]) -> Vec<(f64, u32)> {
    let mut c: Vec<(f64, u32)> = allowed.iter().map(|&t| (log_prob(row[t as usize], norm), t)).collect();
    c.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    c.dedup_by_key(|x| x.1);
    c.truncate(k);
    c
}
