//! §5.4 Pre-softmax logits → log-softmax → label-smoothed cross-entropy, fused with its gradient.
//!
//! Smoothed target distribution (as PyTorch's `cross_entropy(label_smoothing=ε)`):
//! q = (1 − ε)·onehot(y) + ε/V on every entry. Per token: loss = −Σ_v q_v log p_v; nll = −log p_y. Rows whose target is the
//! padding id contribute nothing and get zero gradient. Entries listed as `excluded` (an imported
//! model's masked output rows, whose probability is zero) are outside the smoothing's support:
//! q = ε/(V − |excluded|) on the others and 0 on them.

use super::elementwise::{exp_shift_sum, max, sum};
use super::ROW_BLOCK;
use multiversion::multiversion;
use rayon::prelude::*;

/// Sums over the non-padding rows of one batch.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct XentSums {
    /// Σ label-smoothed loss.
    pub loss: f64,
    /// Σ −log p(target): the perplexity's numerator.
    pub nll: f64,
    /// Non-padding target tokens.
    pub tokens: usize,
}

/// Computes the loss and, in place, replaces `logits` (M, V) by `grad_scale · ∂loss/∂logits`.
/// `row_loss` and `row_nll` (M) are scratch that receive each row's values (0 for padding).
/// `excluded` (sorted, distinct) lists the entries outside label smoothing's support.
#[allow(clippy::too_many_arguments)]
pub fn softmax_xent_forward_backward(
    logits: &mut [f32],
    row_loss: &mut [f32],
    row_nll: &mut [f32],
    targets: &[u32],
    pad: u32,
    epsilon: f32,
    grad_scale: f32,
    vocab: usize,
    excluded: &[u32],
) -> XentSums {
    let _t = super::profile::scope(super::profile::Slot::Loss);
    let m = targets.len();
    assert_eq!(logits.len(), m * vocab);
    assert!(row_loss.len() == m && row_nll.len() == m);
    logits
        .par_chunks_mut(vocab * ROW_BLOCK / 4)
        .zip(row_loss.par_chunks_mut(ROW_BLOCK / 4).zip(row_nll.par_chunks_mut(ROW_BLOCK / 4)))
        .zip(targets.par_chunks(ROW_BLOCK / 4))
        .for_each(|((z, (rl, rn)), t)| xent_rows(z, rl, rn, t, pad, epsilon, grad_scale, vocab, excluded));
    let mut sums = XentSums::default();
    for ((l, n), t) in row_loss.iter().zip(row_nll.iter()).zip(targets) {
        if *t != pad {
            sums.loss += *l as f64;
            sums.nll += *n as f64;
            sums.tokens += 1;
        }
    }
    sums
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
#[allow(clippy::too_many_arguments)]
fn xent_rows(
    z: &mut [f32],
    row_loss: &mut [f32],
    row_nll: &mut [f32],
    targets: &[u32],
    pad: u32,
    epsilon: f32,
    grad_scale: f32,
    vocab: usize,
    excluded: &[u32],
) {
    assert!(excluded.windows(2).all(|w| w[0] < w[1]), "excluded ids must be sorted and distinct");
    let support = vocab - excluded.len();
    let uniform = epsilon / support as f32;
    for (r, row) in z.chunks_exact_mut(vocab).enumerate() {
        let y = targets[r];
        if y == pad {
            row.fill(0.0);
            row_loss[r] = 0.0;
            row_nll[r] = 0.0;
            continue;
        }
        let y = y as usize;
        assert!(y < vocab, "target id {y} outside the vocabulary of {vocab}");
        let mx = max(row);
        // Σ z over the support, segment by segment between the excluded ids (never a sum of the
        // −10⁹ entries taken back out: that would cancel away the f32 sum's precision).
        let mut sum_z = 0.0;
        let mut from = 0;
        for &e in excluded {
            sum_z += sum(&row[from..e as usize]);
            from = e as usize + 1;
        }
        sum_z += sum(&row[from..]);
        let zy = row[y];
        let sum_e = exp_shift_sum(row, mx);
        let lse = mx + sum_e.ln();
        let lp_y = zy - lse;
        let sum_lp = sum_z - support as f32 * lse;
        row_nll[r] = -lp_y;
        row_loss[r] = -(1.0 - epsilon) * lp_y - uniform * sum_lp;
        let inv = grad_scale / sum_e;
        let sub = uniform * grad_scale;
        for v in row.iter_mut() {
            *v = *v * inv - sub;
        }
        row[y] -= (1.0 - epsilon) * grad_scale;
        for &e in excluded {
            row[e as usize] += sub; // q = 0 there
        }
    }
}
