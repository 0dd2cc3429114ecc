//! §3.2.1 Scaled dot-product attention for one query per row (Eq. 1), over keys and values that
//! are cached between decoder steps (§6.1 incremental decoding): a decoder row's self-attention
//! keys live in per-position slots named by a position → slot map, and encoder–decoder keys are
//! the encoded source, projected once per sentence. Each key and value is read once for all heads.

use super::elementwise::{axpy, dot, exp_shift_sum, max, sum};
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
    let wide = avx512_fits(dk, dv);
    ctx.par_chunks_mut(heads * dv).enumerate().for_each_init(Vec::new, |scores: &mut Vec<f32>, (r, out)| {
        let (q, kv) = row(r);
        if wide {
            #[cfg(target_arch = "x86_64")]
            {
                // SAFETY: `avx512_fits` checked the CPU and the widths.
                unsafe { attend_row_avx512(out, q, &kv, heads, dk, dv, scale, scores) };
                return;
            }
        }
        attend_row(out, q, &kv, heads, dk, dv, scale, scores);
    });
}

/// Whether [`attend`] runs its AVX-512 row: AVX-512 on this CPU, and heads whose key and value
/// widths are whole vectors of 16, a value head's sums fitting in 8 registers (dv ≤ 128). Public
/// for the tests, which check that both rows are reached.
#[doc(hidden)]
pub fn avx512_fits(dk: usize, dv: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        dk > 0
            && dk.is_multiple_of(16)
            && dv > 0
            && dv.is_multiple_of(16)
            && dv <= 128
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dk, dv);
        false
    }
}

/// The softmax of each head's row of `scores` (H, n), in place: each head's maximum taken off its
/// scores, then one exponential pass over all H·n of them (a head's n is often under one vector's
/// 16 lanes, where a pass per head would run the exponential one value at a time), then each head
/// divided by its sum.
#[inline(always)]
fn softmax_heads(scores: &mut [f32], n: usize) {
    for s in scores.chunks_exact_mut(n) {
        let mx = max(s);
        s.iter_mut().for_each(|x| *x -= mx);
    }
    exp_shift_sum(scores, 0.0);
    for s in scores.chunks_exact_mut(n) {
        let inv = 1.0 / sum(s);
        s.iter_mut().for_each(|x| *x *= inv);
    }
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
    softmax_heads(scores, n);
    for j in 0..n {
        let v = &kv.v[kv.value(j)..][..heads * dv];
        for h in 0..heads {
            axpy(&mut out[h * dv..(h + 1) * dv], scores[h * n + j], &v[h * dv..(h + 1) * dv]);
        }
    }
}

/// [`attend_row`] on AVX-512 for heads of whole vectors: a score is a chain of fused multiply-adds
/// over its head's vectors and one tree sum (the portable dot's 16 lanes end in a serial sum of
/// 16); a head's output stays in registers over all its keys (the portable loop loads and stores
/// it once per key).
///
/// # Safety
/// The CPU has AVX-512F and FMA, and `dk`, `dv` are multiples of 16 with dv ≤ 128
/// ([`avx512_fits`]).
#[allow(clippy::too_many_arguments)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn attend_row_avx512(
    out: &mut [f32],
    q: &[f32],
    kv: &KeyValues,
    heads: usize,
    dk: usize,
    dv: usize,
    scale: f32,
    scores: &mut Vec<f32>,
) {
    use std::arch::x86_64::*;
    assert!(dk > 0 && dv > 0 && dk.is_multiple_of(16) && dv.is_multiple_of(16) && dv <= 128);
    assert!(q.len() >= heads * dk && out.len() >= heads * dv);
    let n = kv.n;
    if n == 0 {
        out.fill(0.0);
        return;
    }
    scores.resize(heads * n, 0.0);
    // SAFETY: key j spans `heads · dk` floats from `kv.key(j)` and value j `heads · dv` from
    // `kv.value(j)` (the slices are indexed, so out of range panics); q and out hold the heads
    // (asserted); every load and store is of 16 floats inside those spans.
    unsafe {
        for j in 0..n {
            let k = kv.k[kv.key(j)..][..heads * dk].as_ptr();
            for h in 0..heads {
                let (qh, kh) = (q.as_ptr().add(h * dk), k.add(h * dk));
                let mut acc = _mm512_mul_ps(_mm512_loadu_ps(qh), _mm512_loadu_ps(kh));
                for c in 1..dk / 16 {
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(qh.add(16 * c)), _mm512_loadu_ps(kh.add(16 * c)), acc);
                }
                scores[h * n + j] = scale * _mm512_reduce_add_ps(acc);
            }
        }
        softmax_heads(scores, n);
        for h in 0..heads {
            let (p, o) = (&scores[h * n..][..n], out[h * dv..][..dv].as_mut_ptr());
            match dv / 16 {
                1 => weigh_values::<1>(kv, p, h * dv, o),
                2 => weigh_values::<2>(kv, p, h * dv, o),
                3 => weigh_values::<3>(kv, p, h * dv, o),
                4 => weigh_values::<4>(kv, p, h * dv, o),
                5 => weigh_values::<5>(kv, p, h * dv, o),
                6 => weigh_values::<6>(kv, p, h * dv, o),
                7 => weigh_values::<7>(kv, p, h * dv, o),
                8 => weigh_values::<8>(kv, p, h * dv, o),
                _ => unreachable!("dv {dv} is asserted a multiple of 16 in 16..=128"),
            }
        }
    }
}

/// out[..16·C] = Σ_j p[j] · (value j from float `at` on), the sums in C registers (a count known
/// at compile time, so they stay there).
///
/// # Safety
/// AVX-512F and FMA; `out` is valid for 16·C writes; value j has 16·C floats from `at`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn weigh_values<const C: usize>(kv: &KeyValues, p: &[f32], at: usize, out: *mut f32) {
    use std::arch::x86_64::*;
    // SAFETY: each value's 16·C floats are sliced (out of range panics); `out` per the contract.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); C];
        for (j, &pj) in p.iter().enumerate() {
            let v = kv.v[kv.value(j) + at..][..16 * C].as_ptr();
            let pj = _mm512_set1_ps(pj);
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(pj, _mm512_loadu_ps(v.add(16 * c)), *a);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.add(16 * c), *a);
        }
    }
}
