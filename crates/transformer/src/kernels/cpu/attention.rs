//! §3.2.1 Scaled dot-product attention (Eq. 1) over all heads at once, with key-padding and causal
//! masks and dropout on the attention weights, fused: scores, mask, softmax, dropout, weighted sum.
//!
//! Queries, keys and values are read in place from the projection outputs: row r of a (rows, ld)
//! buffer holds every head, head h at columns `off + h·K` (`off + h·V` for values), so the fused QKV
//! projection feeds this kernel without copies. Padding is given as the number of valid keys of
//! each sentence (batches are right-padded). A query with no valid key gets zero weights and output.
//!
//! Rows are either padded (sentence b at rows [b·T, (b+1)·T) of the queries, [b·S, (b+1)·S) of the
//! keys) or packed ([`Heads::packed`]): only each sentence's valid positions, one sentence after
//! another, so that the position-wise layers around the encoder's self-attention skip the padding.
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
    /// `None`: padded rows, sentence b at rows [b·n, (b+1)·n) (n = T for queries, S for keys).
    /// `Some(offsets)` (B + 1 of them): packed rows, sentence b at rows [offsets[b], offsets[b+1]),
    /// exactly its valid positions (its key length). The queries' layout is also that of the
    /// output and of dQ; the keys' that of dK and dV.
    pub packed: Option<&'a [usize]>,
}

impl<'a> Heads<'a> {
    /// Padded heads (see [`Heads::packed`]).
    pub fn padded(data: &'a [f32], ld: usize, off: usize) -> Self {
        Heads { data, ld, off, packed: None }
    }

    /// Rows [r0, r0 + rows) of head h, `width` columns wide, as a matrix view.
    #[inline(always)]
    fn head(&self, r0: usize, rows: usize, h: usize, width: usize) -> MatRef<'a> {
        MatRef::rows(self.data, r0 * self.ld + self.off + h * width, rows, width, self.ld)
    }

    /// (first row, rows) of sentence b, `per` rows a sentence when padded.
    #[inline(always)]
    fn span(&self, b: usize, per: usize) -> (usize, usize) {
        match self.packed {
            Some(o) => (o[b], o[b + 1] - o[b]),
            None => (b * per, per),
        }
    }

    /// Rows over all B sentences.
    fn total_rows(&self, b: usize, per: usize) -> usize {
        self.packed.map_or(b * per, |o| o[b])
    }

    /// Checks packed offsets against the key lengths: B + 1 of them from 0, sentence b holding
    /// exactly key_lens[b] rows.
    fn check(&self, key_lens: &[usize], what: &str) {
        if let Some(o) = self.packed {
            assert_eq!(o.len(), key_lens.len() + 1, "{what}: one packed offset per sentence and the end");
            assert_eq!(o[0], 0, "{what}: packed rows start at 0");
            for (b, (w, &n)) in o.windows(2).zip(key_lens).enumerate() {
                assert!(
                    w[0] <= w[1] && w[1] - w[0] == n,
                    "{what}: sentence {b} packs {} rows for {n} keys",
                    w[1] - w[0]
                );
            }
        }
    }
}

/// One sentence's place in the buffers: its index, its queries' first row and count, its keys'
/// first row.
#[derive(Clone, Copy)]
struct Sent {
    b: usize,
    q0: usize,
    nq: usize,
    k0: usize,
}

impl Sent {
    fn new(b: usize, q: &Heads, k: &Heads, d: AttnDims) -> Self {
        let (q0, nq) = q.span(b, d.t);
        Sent { b, q0, nq, k0: k.span(b, d.s).0 }
    }
}

/// `buf` (rows, ld) cut into each sentence's rows, in the layout of `heads`.
fn split_sentences<'x>(mut buf: &'x mut [f32], ld: usize, heads: &Heads, b: usize, per: usize) -> Vec<&'x mut [f32]> {
    let mut parts = Vec::with_capacity(b);
    for i in 0..b {
        let (_, n) = heads.span(i, per);
        let (part, rest) = std::mem::take(&mut buf).split_at_mut(n * ld);
        parts.push(part);
        buf = rest;
    }
    parts
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
    assert_eq!(key_lens.len(), d.b);
    assert!(key_lens.iter().all(|&l| l <= d.s), "a key length exceeds S = {}", d.s);
    check_layouts(&q, &k, &v, key_lens, d);
    assert_eq!(out.len(), q.total_rows(d.b, d.t) * d.h * d.v);
    assert_eq!(probs.len(), d.b * d.h * d.t * d.s);
    if d.b == 0 || d.t == 0 {
        return;
    }
    split_sentences(out, d.h * d.v, &q, d.b, d.t)
        .into_par_iter()
        .zip(probs.par_chunks_mut(d.h * d.t * d.s))
        .enumerate()
        .for_each(|(b, (out, probs))| {
            attend_sentence(out, probs, q, k, v, key_lens[b], attn_mask, dropout, d, Sent::new(b, &q, &k, d))
        });
}

/// Keys and values share a layout; packed queries need packed keys of the same sentences
/// (self-attention, T = S); padded queries may read packed keys (encoder–decoder attention over
/// the encoder's packed rows).
fn check_layouts(q: &Heads, k: &Heads, v: &Heads, key_lens: &[usize], d: AttnDims) {
    assert!(k.packed == v.packed, "keys and values must be both packed or both padded");
    assert!(q.packed.is_none() || q.packed == k.packed, "packed queries need keys packed the same way");
    assert!(
        q.packed.is_none() || d.t == d.s,
        "packed queries (self-attention) need T = S, got T {} and S {}",
        d.t,
        d.s
    );
    q.check(key_lens, "queries");
    k.check(key_lens, "keys");
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
    at: Sent,
) {
    let scale = 1.0 / (d.k as f32).sqrt();
    let (hv, n, nq) = (d.h * d.v, key_len, at.nq);
    for h in 0..d.h {
        let ph = &mut probs[h * d.t * d.s..(h + 1) * d.t * d.s];
        // Packed rows hold no padding queries: their weights stay zero.
        ph[nq * d.s..].fill(0.0);
        if n == 0 {
            ph.fill(0.0);
            for i in 0..nq {
                out[i * hv + h * d.v..i * hv + (h + 1) * d.v].fill(0.0);
            }
            continue;
        }
        // Scores of the valid keys: (nq, n) = scale · Q_h K_hᵀ, into the first n columns of probs.
        gemm_small(ph, 0, d.s, q.head(at.q0, nq, h, d.k), k.head(at.k0, n, h, d.k).t(), scale, false);
        softmax_rows(&mut ph[..nq * d.s], key_len, attn_mask, d);
        let base = (at.b * d.h + h) * d.t * d.s;
        with_dropped(ph, dropout, base, |p| {
            // (nq, V) = P (nq, n) · V_h (n, V), into head h's columns of the output.
            gemm_small(out, h * d.v, hv, MatRef::rows(p, 0, nq, n, d.s), v.head(at.k0, n, h, d.v), 1.0, false);
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
    /// dQ (B·T, ldq) at qoff; dK, dV (B·S, ldkv) at koff, voff, or in the keys' packed rows where
    /// the keys are packed.
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
    assert_eq!(key_lens.len(), d.b);
    assert!(key_lens.iter().all(|&l| l <= d.s), "a key length exceeds S = {}", d.s);
    check_layouts(&q, &k, &v, key_lens, d);
    let q_rows = q.total_rows(d.b, d.t);
    assert_eq!(dout.len(), q_rows * d.h * d.v);
    assert_eq!(probs.len(), d.b * d.h * d.t * d.s);
    assert_eq!(dscores.len(), probs.len());
    if d.b == 0 || d.t == 0 {
        return;
    }
    let per = d.h * d.t * d.s;
    let dout_heads = Heads { data: dout, ld: d.h * d.v, off: 0, packed: q.packed };
    match grads {
        AttnGrads::Fused { dqkv, ld, offs } => {
            assert_eq!(d.t, d.s, "fused attention gradients need T == S");
            assert_eq!(q.packed, k.packed, "fused attention gradients need one layout for queries and keys");
            assert_eq!(dqkv.len(), q_rows * ld);
            split_sentences(dqkv, ld, &q, d.b, d.t)
                .into_par_iter()
                .zip(dscores.par_chunks_mut(per))
                .enumerate()
                .for_each(|(b, (g, ds))| {
                    let p = &probs[b * per..(b + 1) * per];
                    let (n, at) = (key_lens[b], Sent::new(b, &q, &k, d));
                    for h in 0..d.h {
                        let (dsh, ph) =
                            (&mut ds[h * d.t * d.s..(h + 1) * d.t * d.s], &p[h * d.t * d.s..(h + 1) * d.t * d.s]);
                        score_grads(dsh, ph, dout_heads, v, n, attn_mask, dropout, d, at, h);
                        query_grads(g, ld, offs[0], dsh, k, n, d, at, h);
                        key_value_grads(g, ld, [offs[1], offs[2]], dsh, ph, dout_heads, q, n, dropout, d, at, h);
                    }
                });
        }
        AttnGrads::Split { dq, ldq, qoff, dkv, ldkv, offs } => {
            assert_eq!(dq.len(), q_rows * ldq);
            assert_eq!(dkv.len(), k.total_rows(d.b, d.s) * ldkv);
            split_sentences(dq, ldq, &q, d.b, d.t)
                .into_par_iter()
                .zip(split_sentences(dkv, ldkv, &k, d.b, d.s))
                .zip(dscores.par_chunks_mut(per))
                .enumerate()
                .for_each(|(b, ((gq, gkv), ds))| {
                    let p = &probs[b * per..(b + 1) * per];
                    let (n, at) = (key_lens[b], Sent::new(b, &q, &k, d));
                    for h in 0..d.h {
                        let (dsh, ph) =
                            (&mut ds[h * d.t * d.s..(h + 1) * d.t * d.s], &p[h * d.t * d.s..(h + 1) * d.t * d.s]);
                        score_grads(dsh, ph, dout_heads, v, n, attn_mask, dropout, d, at, h);
                        query_grads(gq, ldq, qoff, dsh, k, n, d, at, h);
                        key_value_grads(gkv, ldkv, offs, dsh, ph, dout_heads, q, n, dropout, d, at, h);
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
    at: Sent,
    h: usize,
) {
    if key_len == 0 {
        ds.fill(0.0);
        return;
    }
    // dP over the valid keys: (nq, n) = dO_h (nq, V) · V_hᵀ (V, n).
    gemm_small(ds, 0, d.s, dout.head(at.q0, at.nq, h, d.v), v.head(at.k0, key_len, h, d.v).t(), 1.0, false);
    let base = (at.b * d.h + h) * d.t * d.s;
    softmax_backward_rows(&mut ds[..at.nq * d.s], probs, key_len, attn_mask, dropout, base, d);
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

/// dQ_h (nq, K) = dscores (nq, n) · K_h (n, K), overwriting head h's columns of sentence b's rows
/// of `g`.
#[allow(clippy::too_many_arguments)]
fn query_grads(
    g: &mut [f32],
    ld: usize,
    qoff: usize,
    ds: &[f32],
    k: Heads,
    key_len: usize,
    d: AttnDims,
    at: Sent,
    h: usize,
) {
    let off = qoff + h * d.k;
    if key_len == 0 {
        for i in 0..at.nq {
            g[i * ld + off..i * ld + off + d.k].fill(0.0);
        }
        return;
    }
    gemm_small(g, off, ld, MatRef::rows(ds, 0, at.nq, key_len, d.s), k.head(at.k0, key_len, h, d.k), 1.0, false);
}

/// dK_h (n, K) = dscoresᵀ · Q_h and dV_h (n, V) = (P ⊙ mask)ᵀ · dO_h, overwriting head h's columns of
/// sentence b's key rows of `g` (its part of the buffer); padding keys get zero.
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
    at: Sent,
    h: usize,
) {
    let (koff, voff) = (offs[0] + h * d.k, offs[1] + h * d.v);
    // The sentence's key rows: S when padded, key_len when packed.
    for j in key_len..g.len() / ld {
        g[j * ld + koff..j * ld + koff + d.k].fill(0.0);
        g[j * ld + voff..j * ld + voff + d.v].fill(0.0);
    }
    if key_len == 0 {
        return;
    }
    let (q0, nq) = (at.q0, at.nq);
    gemm_small(g, koff, ld, MatRef::rows(ds, 0, nq, key_len, d.s).t(), q.head(q0, nq, h, d.k), 1.0, false);
    let base = (at.b * d.h + h) * d.t * d.s;
    with_dropped(probs, dropout, base, |p| {
        gemm_small(g, voff, ld, MatRef::rows(p, 0, nq, key_len, d.s).t(), dout.head(q0, nq, h, d.v), 1.0, false);
    });
}
