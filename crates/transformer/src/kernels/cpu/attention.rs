//! §3.2.1 Scaled dot-product attention (Eq. 1) over all heads at once, with key-padding and causal
//! masks and dropout on the attention weights, fused: scores, mask, softmax, dropout, weighted sum.
//!
//! Queries, keys and values are read in place from the projection outputs: row r of a (rows, ld)
//! buffer holds every head, head h at columns `off + h·K` (`off + h·V` for values), so the fused QKV
//! projection feeds this kernel without transposes. Padding is given as the number of valid keys of
//! each sentence (batches are right-padded). A query with no valid key gets zero weights and output.

use super::elementwise::{axpy, dot, exp_shift_sum, max};
use crate::kernels::AttnDims;
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
    #[inline(always)]
    fn row(&self, r: usize, h: usize, width: usize) -> &'a [f32] {
        let s = r * self.ld + self.off + h * width;
        &self.data[s..s + width]
    }
}

thread_local! {
    /// Per-thread scratch for one head's keys or values transposed to (width, S): scores and
    /// dP rows are then sums of contiguous rows (vectorised across keys), with no horizontal
    /// reductions. Grows once, then is reused.
    static TRANSPOSED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// dst (width, n) = the first n rows of head h of `src` for sentence b, transposed.
#[inline(always)]
fn transpose_head(dst: &mut [f32], src: Heads, base_row: usize, h: usize, width: usize, n: usize) {
    for j in 0..n {
        let row = src.row(base_row + j, h, width);
        for (c, &x) in row.iter().enumerate() {
            dst[c * n + j] = x;
        }
    }
}

/// Which keys query i of sentence b may see: [0, n) with n from the key length and causality.
#[inline(always)]
fn visible(key_len: usize, causal: bool, i: usize) -> usize {
    if causal {
        key_len.min(i + 1)
    } else {
        key_len
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
    causal: bool,
    dropout: Option<DropoutMask>,
    d: AttnDims,
) {
    assert_eq!(out.len(), d.b * d.t * d.h * d.v);
    assert_eq!(probs.len(), d.b * d.h * d.t * d.s);
    assert_eq!(key_lens.len(), d.b);
    assert!(
        key_lens.iter().all(|&l| l <= d.s),
        "a key length exceeds S = {}",
        d.s
    );
    if d.b == 0 || d.t == 0 {
        return;
    }
    out.par_chunks_mut(d.t * d.h * d.v)
        .zip(probs.par_chunks_mut(d.h * d.t * d.s))
        .enumerate()
        .for_each(|(b, (out, probs))| {
            attend_sentence(out, probs, q, k, v, key_lens[b], causal, dropout, d, b)
        });
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
#[allow(clippy::too_many_arguments)]
fn attend_sentence(
    out: &mut [f32],
    probs: &mut [f32],
    q: Heads,
    k: Heads,
    v: Heads,
    key_len: usize,
    causal: bool,
    dropout: Option<DropoutMask>,
    d: AttnDims,
    b: usize,
) {
    let scale = 1.0 / (d.k as f32).sqrt();
    let hv = d.h * d.v;
    let n_all = key_len;
    TRANSPOSED.with(|kt| {
        let mut kt = kt.borrow_mut();
        if kt.len() < d.k * n_all {
            kt.resize(d.k * n_all, 0.0);
        }
        for h in 0..d.h {
            transpose_head(&mut kt, k, b * d.s, h, d.k, n_all);
            for i in 0..d.t {
                let row = &mut probs[(h * d.t + i) * d.s..(h * d.t + i + 1) * d.s];
                let o = &mut out[i * hv + h * d.v..i * hv + (h + 1) * d.v];
                o.fill(0.0);
                let n = visible(key_len, causal, i);
                row[n..].fill(0.0);
                if n == 0 {
                    continue;
                }
                // Scores of all visible keys at once: q_i · Kᵀ, over the first n columns.
                let qi = q.row(b * d.t + i, h, d.k);
                row[..n].fill(0.0);
                for (c, &qc) in qi.iter().enumerate() {
                    axpy(&mut row[..n], qc * scale, &kt[c * n_all..c * n_all + n]);
                }
                let mx = max(&row[..n]);
                let inv = 1.0 / exp_shift_sum(&mut row[..n], mx);
                for x in row[..n].iter_mut() {
                    *x *= inv;
                }
                let base = ((b * d.h + h) * d.t + i) * d.s;
                for j in 0..n {
                    let p = match dropout {
                        Some(mask) => row[j] * mask.factor(base + j),
                        None => row[j],
                    };
                    axpy(o, p, v.row(b * d.s + j, h, d.v));
                }
            }
        }
    });
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
    causal: bool,
    dropout: Option<DropoutMask>,
    d: AttnDims,
) {
    assert_eq!(dout.len(), d.b * d.t * d.h * d.v);
    assert_eq!(probs.len(), d.b * d.h * d.t * d.s);
    assert_eq!(dscores.len(), probs.len());
    if d.b == 0 || d.t == 0 {
        return;
    }
    let per = d.h * d.t * d.s;
    match grads {
        AttnGrads::Fused { dqkv, ld, offs } => {
            assert_eq!(d.t, d.s, "fused attention gradients need T == S");
            assert_eq!(dqkv.len(), d.b * d.t * ld);
            dqkv.par_chunks_mut(d.t * ld)
                .zip(dscores.par_chunks_mut(per))
                .enumerate()
                .for_each(|(b, (g, ds))| {
                    let p = &probs[b * per..(b + 1) * per];
                    score_grads(ds, p, dout, v, key_lens[b], causal, dropout, d, b);
                    query_grads(g, ld, offs[0], ds, k, d, b);
                    key_value_grads(g, ld, [offs[1], offs[2]], ds, p, dout, q, dropout, d, b);
                });
        }
        AttnGrads::Split {
            dq,
            ldq,
            qoff,
            dkv,
            ldkv,
            offs,
        } => {
            assert_eq!(dq.len(), d.b * d.t * ldq);
            assert_eq!(dkv.len(), d.b * d.s * ldkv);
            dq.par_chunks_mut(d.t * ldq)
                .zip(dkv.par_chunks_mut(d.s * ldkv))
                .zip(dscores.par_chunks_mut(per))
                .enumerate()
                .for_each(|(b, ((gq, gkv), ds))| {
                    let p = &probs[b * per..(b + 1) * per];
                    score_grads(ds, p, dout, v, key_lens[b], causal, dropout, d, b);
                    query_grads(gq, ldq, qoff, ds, k, d, b);
                    key_value_grads(gkv, ldkv, offs, ds, p, dout, q, dropout, d, b);
                });
        }
    }
}

/// dscores = scale · P ⊙ (dP − rowsum(P ⊙ dP)), dP = (dO Vᵀ) ⊙ mask: the gradient of the pre-softmax
/// scores, with the 1/√d_k folded in.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
#[allow(clippy::too_many_arguments)]
fn score_grads(
    ds: &mut [f32],
    probs: &[f32],
    dout: &[f32],
    v: Heads,
    key_len: usize,
    causal: bool,
    dropout: Option<DropoutMask>,
    d: AttnDims,
    b: usize,
) {
    let scale = 1.0 / (d.k as f32).sqrt();
    let hv = d.h * d.v;
    let n_all = key_len;
    TRANSPOSED.with(|vt| {
        let mut vt = vt.borrow_mut();
        if vt.len() < d.v * n_all {
            vt.resize(d.v * n_all, 0.0);
        }
        for h in 0..d.h {
            transpose_head(&mut vt, v, b * d.s, h, d.v, n_all);
            for i in 0..d.t {
                let off = (h * d.t + i) * d.s;
                let row = &mut ds[off..off + d.s];
                let p = &probs[off..off + d.s];
                let n = visible(key_len, causal, i);
                row[n..].fill(0.0);
                if n == 0 {
                    continue;
                }
                let go = &dout[(b * d.t + i) * hv + h * d.v..(b * d.t + i) * hv + (h + 1) * d.v];
                // dP over the visible keys: dO_i · Vᵀ.
                row[..n].fill(0.0);
                for (c, &gc) in go.iter().enumerate() {
                    axpy(&mut row[..n], gc, &vt[c * n_all..c * n_all + n]);
                }
                if let Some(mask) = dropout {
                    let base = b * d.h * d.t * d.s + off;
                    for (j, x) in row[..n].iter_mut().enumerate() {
                        *x *= mask.factor(base + j);
                    }
                }
                let sum = dot(&row[..n], &p[..n]);
                for j in 0..n {
                    row[j] = scale * p[j] * (row[j] - sum);
                }
            }
        }
    });
}

/// dQ_i = Σ_j dscores_ij K_j (overwrite), into rows of sentence b (`g` starts at its first row).
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn query_grads(g: &mut [f32], ld: usize, qoff: usize, ds: &[f32], k: Heads, d: AttnDims, b: usize) {
    for i in 0..d.t {
        for h in 0..d.h {
            let dq = &mut g[i * ld + qoff + h * d.k..i * ld + qoff + (h + 1) * d.k];
            dq.fill(0.0);
            let row = &ds[(h * d.t + i) * d.s..(h * d.t + i + 1) * d.s];
            for (j, &w) in row.iter().enumerate() {
                if w != 0.0 {
                    axpy(dq, w, k.row(b * d.s + j, h, d.k));
                }
            }
        }
    }
}

/// dK_j = Σ_i dscores_ij Q_i and dV_j = Σ_i (P ⊙ mask)_ij dO_i (overwrite), into sentence b's rows.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
#[allow(clippy::too_many_arguments)]
fn key_value_grads(
    g: &mut [f32],
    ld: usize,
    offs: [usize; 2],
    ds: &[f32],
    probs: &[f32],
    dout: &[f32],
    q: Heads,
    dropout: Option<DropoutMask>,
    d: AttnDims,
    b: usize,
) {
    let hv = d.h * d.v;
    for j in 0..d.s {
        for h in 0..d.h {
            g[j * ld + offs[0] + h * d.k..j * ld + offs[0] + (h + 1) * d.k].fill(0.0);
            g[j * ld + offs[1] + h * d.v..j * ld + offs[1] + (h + 1) * d.v].fill(0.0);
        }
    }
    for h in 0..d.h {
        for i in 0..d.t {
            let off = (h * d.t + i) * d.s;
            let qi = q.row(b * d.t + i, h, d.k);
            let go = &dout[(b * d.t + i) * hv + h * d.v..(b * d.t + i) * hv + (h + 1) * d.v];
            let base = b * d.h * d.t * d.s + off;
            for j in 0..d.s {
                let w = ds[off + j];
                let p = match dropout {
                    Some(mask) if probs[off + j] != 0.0 => probs[off + j] * mask.factor(base + j),
                    _ => probs[off + j],
                };
                if w != 0.0 {
                    axpy(
                        &mut g[j * ld + offs[0] + h * d.k..j * ld + offs[0] + (h + 1) * d.k],
                        w,
                        qi,
                    );
                }
                if p != 0.0 {
                    axpy(
                        &mut g[j * ld + offs[1] + h * d.v..j * ld + offs[1] + (h + 1) * d.v],
                        p,
                        go,
                    );
                }
            }
        }
    }
}
