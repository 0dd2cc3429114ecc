//! §3.2.1 Scaled dot-product attention for one query per row (Eq. 1), over keys and values that
//! are cached between decoder steps (§6.1 incremental decoding): a decoder row's self-attention
//! keys live in per-position slots named by a position → slot map, and encoder–decoder keys are
//! the encoded source, projected once per sentence. Each key and value is read once for all heads.

use super::elementwise::{axpy, dot, exp_shift_sum, max};
use super::profile::{self, Slot};
use multiversion::multiversion;
use rayon::prelude::*;

/// Keys and values of one row: key j of head h at `k[key(j) + h·K..]`, value at
/// `v[value(j) + h·V..]`, for j < n.
pub struct KeyValues<'a> {
    /// Keys.
    pub k: &'a [f32],
    /// Distance between consecutive keys of one slot.
    pub ldk: usize,
    /// Values.
    pub v: &'a [f32],
    /// Distance between consecutive values of one slot.
    pub ldv: usize,
    /// Keys (and values) visible to the query.
    pub n: usize,
    /// For a decoder cache: key j lives in slot `origin[j]`, slots being this many floats apart in
    /// `k` and in `v`.
    pub origin: Option<(&'a [u32], usize, usize)>,
}

impl KeyValues<'_> {
    #[inline(always)]
    fn key(&self, j: usize) -> usize {
        match self.origin {
            Some((o, sk, _)) => o[j] as usize * sk + j * self.ldk,
            None => j * self.ldk,
        }
    }

    #[inline(always)]
    fn value(&self, j: usize) -> usize {
        match self.origin {
            Some((o, _, sv)) => o[j] as usize * sv + j * self.ldv,
            None => j * self.ldv,
        }
    }
}

/// ctx (rows, H·V) = softmax(q Kᵀ / √K) V per row and head, for one query per row. A row with no
/// keys gets a zero output, as in the batched kernel. Each key and value is read once for all
/// heads.
pub fn attend<'a>(
    ctx: &mut [f32],
    heads: usize,
    dk: usize,
    dv: usize,
    row: impl Fn(usize) -> (&'a [f32], KeyValues<'a>) + Sync,
) {
    let _t = profile::scope(Slot::Attention);
    let scale = 1.0 / (dk as f32).sqrt();
    ctx.par_chunks_mut(heads * dv).enumerate().for_each_init(Vec::new, |scores: &mut Vec<f32>, (r, out)| {
        let (q, kv) = row(r);
        attend_row(out, q, &kv, heads, dk, dv, scale, scores);
    });
}

/// One row of [`attend`], compiled for the vector units the machine has.
#[allow(clippy::too_many_arguments)]
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn attend_row(
    out: &mut [f32],
    q: &[f32],
    kv: &KeyValues,
    heads: usize,
    dk: usize,
    dv: usize,
    scale: f32,
    scores: &mut Vec<f32>,
) {
    out.fill(0.0);
    let n = kv.n;
    if n == 0 {
        return;
    }
    // scores (H, n).
    scores.resize(heads * n, 0.0);
    for j in 0..n {
        let k = &kv.k[kv.key(j)..][..heads * dk];
        for h in 0..heads {
            scores[h * n + j] = scale * dot(&q[h * dk..(h + 1) * dk], &k[h * dk..(h + 1) * dk]);
        }
    }
    for s in scores.chunks_exact_mut(n) {
        let mx = max(s);
        let inv = 1.0 / exp_shift_sum(s, mx);
        for x in s.iter_mut() {
            *x *= inv;
        }
    }
    for j in 0..n {
        let v = &kv.v[kv.value(j)..][..heads * dv];
        for h in 0..heads {
            axpy(&mut out[h * dv..(h + 1) * dv], scores[h * n + j], &v[h * dv..(h + 1) * dv]);
        }
    }
}
