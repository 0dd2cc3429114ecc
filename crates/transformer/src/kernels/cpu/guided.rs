//! Guided alignment (Marian's `--guided-alignment`; Garg et al. 2019): one head of one layer's
//! encoder–decoder attention is trained towards a given alignment by the cross-entropy
//! L = −w · Σ A ⊙ log(P + ε), A a distribution over the source positions for each aligned target
//! position (its rows zero elsewhere). [`guided_loss`] gives L and ∂L/∂P; [`guided_backward`]
//! takes ∂L/∂P through that head's softmax and scores into dQ and dK, adding to what the
//! attention's own backward wrote there. Naive twin: `kernels::reference::guided_alignment`.

use crate::kernels::AttnDims;
use rayon::prelude::*;

/// ε inside the log: a weight of 0 costs −log ε, never infinity (Marian's 1e-6).
pub const EPSILON: f32 = 1e-6;

/// L = −`weight` · Σ_{b,t,s} A[b,t,s] · ln(P[b,head,t,s] + ε) over the probabilities `probs`
/// (B, H, T, S) of one layer, and `dprobs` (B, T, S) = `scale` · ∂L/∂P of `head` (`scale`: the
/// loss's normaliser, as the cross-entropy's `grad_scale`). `guide` is A, (B, T, S).
pub fn guided_loss(
    probs: &[f32],
    guide: &[f32],
    dprobs: &mut [f32],
    head: usize,
    weight: f32,
    scale: f32,
    d: AttnDims,
) -> f64 {
    let (ts, per) = (d.t * d.s, d.h * d.t * d.s);
    assert_eq!(probs.len(), d.b * per);
    assert_eq!(guide.len(), d.b * ts);
    assert_eq!(dprobs.len(), d.b * ts);
    assert!(head < d.h, "head {head} of {}", d.h);
    let mut loss = 0.0f64;
    for b in 0..d.b {
        let p = &probs[b * per + head * ts..][..ts];
        for i in 0..ts {
            let a = guide[b * ts + i];
            if a == 0.0 {
                dprobs[b * ts + i] = 0.0;
                continue;
            }
            let x = p[i] + EPSILON;
            loss -= (weight * a) as f64 * (x as f64).ln();
            dprobs[b * ts + i] = -scale * weight * a / x;
        }
    }
    loss
}

/// Where a head's queries and keys are: queries in padded rows (sentence b's at b·T) of `q`
/// (row stride `ldq`), keys in `k` (row stride `ldk`), sentence b's at `key_rows(b)`.
pub struct GuidedHeads<'a> {
    pub q: &'a [f32],
    pub ldq: usize,
    pub k: &'a [f32],
    pub ldk: usize,
    /// `None`: padded key rows (b·S); `Some(offsets)`: packed, sentence b's at offsets[b].
    pub k_packed: Option<&'a [usize]>,
}

/// Adds ∂L/∂Q and ∂L/∂K of `head` to `dq` (the queries' layout, stride `ldq`) and `dk` (the keys'
/// layout, stride `ldk`) from `dprobs` (B, T, S; [`guided_loss`]): dscores = P ⊙ (dP − Σ P ⊙ dP)
/// / √d_k over each query's valid keys, dQ += dscores · K, dK += dscoresᵀ · Q.
#[allow(clippy::too_many_arguments)]
pub fn guided_backward(
    dq: &mut [f32],
    dk: &mut [f32],
    heads: &GuidedHeads,
    probs: &[f32],
    dprobs: &[f32],
    key_lens: &[usize],
    head: usize,
    d: AttnDims,
) {
    let (ts, per) = (d.t * d.s, d.h * d.t * d.s);
    let scale = 1.0 / (d.k as f32).sqrt();
    let col = head * d.k;
    let key_row = |b: usize, s: usize| heads.k_packed.map_or(b * d.s + s, |o| o[b] + s);
    // dscores per sentence in parallel; the dQ rows are each sentence's own, the dK rows too.
    let ds: Vec<Vec<f32>> = (0..d.b)
        .into_par_iter()
        .map(|b| {
            let n = key_lens[b];
            let p = &probs[b * per + head * ts..][..ts];
            let mut out = vec![0f32; ts];
            for t in 0..d.t {
                let (dp, pr) = (&dprobs[b * ts + t * d.s..][..n], &p[t * d.s..][..n]);
                if dp.iter().all(|&x| x == 0.0) {
                    continue;
                }
                let sum: f32 = dp.iter().zip(pr).map(|(a, b)| a * b).sum();
                for s in 0..n {
                    out[t * d.s + s] = scale * pr[s] * (dp[s] - sum);
                }
            }
            out
        })
        .collect();
    for (b, ds) in ds.iter().enumerate() {
        let n = key_lens[b];
        for t in 0..d.t {
            let row = &ds[t * d.s..][..n];
            if row.iter().all(|&x| x == 0.0) {
                continue;
            }
            let qi = (b * d.t + t) * heads.ldq + col;
            for (s, &g) in row.iter().enumerate() {
                if g == 0.0 {
                    continue;
                }
                let kj = key_row(b, s) * heads.ldk + col;
                for c in 0..d.k {
                    dq[qi + c] += g * heads.k[kj + c];
                    dk[kj + c] += g * heads.q[qi + c];
                }
            }
        }
    }
}
