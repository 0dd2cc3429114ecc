//! §3.2.1 Scaled dot-product attention (Eq. 1) over all heads at once, with key-padding and causal
//! masks and dropout on the attention weights, fused: scores, mask, softmax, dropout, weighted sum.
//!
//! Queries, keys and values are read in place from the projection outputs: row r of a (rows, ld)
//! buffer holds every head, head h at columns `off + h·K` (`off + h·V` for values), so the fused QKV
//! projection feeds this kernel without copies. Padding is given as the number of valid keys of
//! each sentence (batches are right-padded). A query with no valid key gets zero weights and output.
//!
//! Work is parallel over sentences. Per sentence and head, the four products (QKᵀ, PV and, backward,
//! dO·Vᵀ, dS·K, dSᵀ·Q, Pᵀ·dO) are small single-threaded GEMMs on strided views; masking, softmax and
//! dropout are row loops in between.

use super::elementwise::{dot, exp_shift_sum, max};
use super::matmul::{gemm_small, MatRef};
use crate::kernels::{AttnDims, Mask};
use crate::rng::DropoutMask;
use multiversion::multiversion;
use rayon::prelude::*;
use std::cell::RefCell;

/// A read-only view of heads in a (rows, ld) buffer, head h at columns `off + h·width`.
#[derive(Clone, Copy, Debug)]
pub struct Heads<'a> {
    /// The buffer (rows, ld).
    pub data: &'a [f32],
    /// Row stride.
    pub ld: usize,
    /// Column of head 0.
    pub off: usize,
}

impl<'a> Heads<'a> {
    /// Rows [r0, r0 + rows) of head h, `width` columns wide, as a matrix view.
    #[inline(always)]
    fn head(&self, r0: usize, rows: usize, h: usize, width: usize) -> MatRef<'a> {
        MatRef::rows(self.data, r0 * self.ld + self.off + h * width, rows, width, self.ld)
    }
}

thread_local! {
    /// Per-thread scratch for one head's dropped-out weights P ⊙ mask, (T, S). Grows once.
    static DROPPED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with the weights of head h as used in the weighted sum: `probs` itself without dropout,
/// or P ⊙ mask in thread-local scratch. `base` is the flat (B, H, T, S) index of the head's (0, 0).
fn with_dropped<R>(probs: &[f32], dropout: Option<DropoutMask>, base: usize, f: impl FnOnce(&[f32]) -> R) -> R {
    match dropout {
        None => f(probs),
        Some(mask) => DROPPED.with(|s| {
            let mut s = s.borrow_mut();
            s.clear();
            s.extend(probs.iter().enumerate().map(|(i, &p)| if p == 0.0 { 0.0 } else { p * mask.factor(base + i) }));
            f(&s)
        }),
    }
}

/// Forward. out (B·T, H·V) = Attention(Q, K, V); saves `probs` (B, H, T, S), the softmax weights before
/// dropout (zero on masked keys). `dropout` indexes the flat (B, H, T, S) position.
#[allow(clippy::too_many_arguments)]
pub fn attention_forward(
    out: &mut [f32],
    probs: &mut [f32],
    q: Heads,
    k: Heads,
    v: Heads,
    key_lens: &[usize],
    attn_mask: Mask,
    dropout: Option<DropoutMask>,
    d: AttnDims,
) {
    let _t = super::profile::scope(super::profile::Slot::Attention);
    assert_eq!(out.len(), d.b * d.t * d.h * d.v);
    assert_eq!(probs.len(), d.b * d.h * d.t * d.s);
    assert_eq!(key_lens.len(), d.b);
    assert!(key_lens.iter().all(|&l| l <= d.s), "a key length exceeds S = {}", d.s);
    if d.b == 0 || d.t == 0 {
        return;
    }
    out.par_chunks_mut(d.t * d.h * d.v)
        .zip(probs.par_chunks_mut(d.h * d.t * d.s))
        .enumerate()
        .for_each(|(b, (out, probs))| attend_sentence(out, probs, q, k, v, key_lens[b], attn_mask, dropout, d, b));
}

#[allow(clippy::too_many_arguments)]
fn attend_sentence(
    out: &mut [f32],
    probs: &mut [f32],
    q: Heads,
    k: Heads,
    v: Heads,
    key_len: usize,
    attn_mask: Mask,
    dropout: Option<DropoutMask>,
    d: AttnDims,
    b: usize,
) {
    let scale = 1.0 / (d.k as f32).sqrt();
    let (hv, n) = (d.h * d.v, key_len);
    for h in 0..d.h {
        let ph = &mut probs[h * d.t * d.s..(h + 1) * d.t * d.s];
        if n == 0 {
            ph.fill(0.0);
            for i in 0..d.t {
                out[i * hv + h * d.v..i * hv + (h + 1) * d.v].fill(0.0);
            }
            continue;
        }
        // Scores of the valid keys: (T, n) = scale · Q_h K_hᵀ, into the first n columns of probs.
        gemm_small(ph, 0, d.s, q.head(b * d.t, d.t, h, d.k), k.head(b * d.s, n, h, d.k).t(), scale, false);
        softmax_rows(ph, key_len, attn_mask, d);
        let base = (b * d.h + h) * d.t * d.s;
        with_dropped(ph, dropout, base, |p| {
            // (T, V) = P (T, n) · V_h (n, V), into head h's columns of the output.
            gemm_small(out, h * d.v, hv, MatRef::rows(p, 0, d.t, n, d.s), v.head(b * d.s, n, h, d.v), 1.0, false);
        });
    }
}

/// Row-wise softmax over each query's visible keys; zero on the rest of the row.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn softmax_rows(ph: &mut [f32], key_len: usize, attn_mask: Mask, d: AttnDims) {
    for (i, row) in ph.chunks_exact_mut(d.s).enumerate() {
        let n = attn_mask.visible(key_len, i);
        row[n..].fill(0.0);
        if n == 0 {
            continue;
        }
        let mx = max(&row[..n]);
        let inv = 1.0 / exp_shift_sum(&mut row[..n], mx);
        for x in row[..n].iter_mut() {
            *x *= inv;
        }
    }
}

/// Where the backward writes dQ, dK, dV (overwriting): one buffer with all three (self-attention,
/// T = S, rows B·T), or separate dQ (B·T, ld) and dK/dV (B·S, ld) buffers (encoder–decoder attention).
pub enum AttnGrads<'a> {
    /// dQ, dK and dV in one (B·T, ld) buffer at column offsets qoff, koff, voff.
    Fused {
        /// The buffer.
        dqkv: &'a mut [f32],
        /// Row stride.
        ld: usize,
        /// Columns of head 0 of dQ, dK, dV.
        offs: [usize; 3],
    },
    /// dQ (B·T, ldq) at qoff; dK, dV (B·S, ldkv) at koff, voff.
    Split {
        /// dQ buffer.
        dq: &'a mut [f32],
        /// Its row stride.
        ldq: usize,
        /// Column of head 0.
        qoff: usize,
        /// dK/dV buffer.
        dkv: &'a mut [f32],
        /// Its row stride.
        ldkv: usize,
        /// Columns of head 0 of dK, dV.
        offs: [usize; 2],
    },
}

/// Backward of [`attention_forward`]. `dscores` (B, H, T, S) is workspace. Writes dQ, dK, dV.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    grads: AttnGrads,
    dscores: &mut [f32],
    dout: &[f32],
    probs: &[f32],
    q: Heads,
    k: Heads,
    v: Heads,
    key_lens: &[usize],
    attn_mask: Mask,
    dropout: Option<DropoutMask>,
    d: AttnDims,
) {
    let _t = super::profile::scope(super::profile::Slot::AttentionBackward);
    assert_eq!(dout.len(), d.b * d.t * d.h * d.v);
    assert_eq!(probs.len(), d.b * d.h * d.t * d.s);
    assert_eq!(dscores.len(), probs.len());
    assert_eq!(key_lens.len(), d.b);
    assert!(key_lens.iter().all(|&l| l <= d.s), "a key length exceeds S = {}", d.s);
    if d.b == 0 || d.t == 0 {
        return;
    }
    let per = d.h * d.t * d.s;
    let dout_heads = Heads { data: dout, ld: d.h * d.v, off: 0 };
    match grads {
        AttnGrads::Fused { dqkv, ld, offs } => {
            assert_eq!(d.t, d.s, "fused attention gradients need T == S");
            assert_eq!(dqkv.len(), d.b * d.t * ld);
            dqkv.par_chunks_mut(d.t * ld).zip(dscores.par_chunks_mut(per)).enumerate().for_each(|(b, (g, ds))| {
                let p = &probs[b * per..(b + 1) * per];
                let n = key_lens[b];
                for h in 0..d.h {
                    let (dsh, ph) =
                        (&mut ds[h * d.t * d.s..(h + 1) * d.t * d.s], &p[h * d.t * d.s..(h + 1) * d.t * d.s]);
                    score_grads(dsh, ph, dout_heads, v, n, attn_mask, dropout, d, b, h);
                    query_grads(g, ld, offs[0], dsh, k, n, d, b, h);
                    key_value_grads(g, ld, [offs[1], offs[2]], dsh, ph, dout_heads, q, n, dropout, d, b, h);
                }
            });
        }
        AttnGrads::Split { dq, ldq, qoff, dkv, ldkv, offs } => {
            assert_eq!(dq.len(), d.b * d.t * ldq);
            assert_eq!(dkv.len(), d.b * d.s * ldkv);
            dq.par_chunks_mut(d.t * ldq)
                .zip(dkv.par_chunks_mut(d.s * ldkv))
                .zip(dscores.par_chunks_mut(per))
                .enumerate()
                .for_each(|(b, ((gq, gkv), ds))| {
                    let p = &probs[b * per..(b + 1) * per];
                    let n = key_lens[b];
                    for h in 0..d.h {
                        let (dsh, ph) =
                            (&mut ds[h * d.t * d.s..(h + 1) * d.t * d.s], &p[h * d.t * d.s..(h + 1) * d.t * d.s]);
                        score_grads(dsh, ph, dout_heads, v, n, attn_mask, dropout, d, b, h);
                        query_grads(gq, ldq, qoff, dsh, k, n, d, b, h);
                        key_value_grads(gkv, ldkv, offs, dsh, ph, dout_heads, q, n, dropout, d, b, h);
                    }
                });
        }
    }
}

/// dscores (T, S) of head h = scale · P ⊙ (dP − rowsum(P ⊙ dP)), dP = (dO Vᵀ) ⊙ mask: the gradient of
/// the pre-softmax scores, with the 1/√d_k folded in. Zero outside each query's visible keys.
#[allow(clippy::too_many_arguments)]
fn score_grads(
    ds: &mut [f32],
    probs: &[f32],
    dout: Heads,
    v: Heads,
    key_len: usize,
    attn_mask: Mask,
    dropout: Option<DropoutMask>,
    d: AttnDims,
    b: usize,
    h: usize,
) {
    if key_len == 0 {
        ds.fill(0.0);
        return;
    }
    // dP over the valid keys: (T, n) = dO_h (T, V) · V_hᵀ (V, n).
    gemm_small(ds, 0, d.s, dout.head(b * d.t, d.t, h, d.v), v.head(b * d.s, key_len, h, d.v).t(), 1.0, false);
    let base = (b * d.h + h) * d.t * d.s;
    softmax_backward_rows(ds, probs, key_len, attn_mask, dropout, base, d);
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn softmax_backward_rows(
    ds: &mut [f32],
    probs: &[f32],
    key_len: usize,
    attn_mask: Mask,
    dropout: Option<DropoutMask>,
    base: usize,
    d: AttnDims,
) {
    let scale = 1.0 / (d.k as f32).sqrt();
    for (i, (row, p)) in ds.chunks_exact_mut(d.s).zip(probs.chunks_exact(d.s)).enumerate() {
        let n = attn_mask.visible(key_len, i);
        row[n..].fill(0.0);
        if let Some(mask) = dropout {
            for (j, x) in row[..n].iter_mut().enumerate() {
                *x *= mask.factor(base + i * d.s + j);
            }
        }
        let sum = dot(&row[..n], &p[..n]);
        for j in 0..n {
            row[j] = scale * p[j] * (row[j] - sum);
        }
    }
}

/// dQ_h (T, K) = dscores (T, n) · K_h (n, K), overwriting head h's columns of sentence b's rows of `g`.
#[allow(clippy::too_many_arguments)]
fn query_grads(
    g: &mut [f32],
    ld: usize,
    qoff: usize,
    ds: &[f32],
    k: Heads,
    key_len: usize,
    d: AttnDims,
    b: usize,
    h: usize,
) {
    let off = qoff + h * d.k;
    if key_len == 0 {
        for i in 0..d.t {
            g[i * ld + off..i * ld + off + d.k].fill(0.0);
        }
        return;
    }
    gemm_small(g, off, ld, MatRef::rows(ds, 0, d.t, key_len, d.s), k.head(b * d.s, key_len, h, d.k), 1.0, false);
}

/// dK_h (n, K) = dscoresᵀ · Q_h and dV_h (n, V) = (P ⊙ mask)ᵀ · dO_h, overwriting head h's columns of
/// sentence b's key rows of `g`; padding keys get zero.
#[allow(clippy::too_many_arguments)]
fn key_value_grads(
    g: &mut [f32],
    ld: usize,
    offs: [usize; 2],
    ds: &[f32],
    probs: &[f32],
    dout: Heads,
    q: Heads,
    key_len: usize,
    dropout: Option<DropoutMask>,
    d: AttnDims,
    b: usize,
    h: usize,
) {
    let (koff, voff) = (offs[0] + h * d.k, offs[1] + h * d.v);
    for j in key_len..d.s {
        g[j * ld + koff..j * ld + koff + d.k].fill(0.0);
        g[j * ld + voff..j * ld + voff + d.v].fill(0.0);
    }
    if key_len == 0 {
        return;
    }
    gemm_small(g, koff, ld, MatRef::rows(ds, 0, d.t, key_len, d.s).t(), q.head(b * d.t, d.t, h, d.k), 1.0, false);
    let base = (b * d.h + h) * d.t * d.s;
    with_dropped(probs, dropout, base, |p| {
        gemm_small(g, voff, ld, MatRef::rows(p, 0, d.t, key_len, d.s).t(), dout.head(b * d.t, d.t, h, d.v), 1.0, false);
    });
}
