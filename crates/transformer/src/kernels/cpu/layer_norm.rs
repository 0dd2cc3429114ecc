//! §3.1 Residual connection, dropout and layer normalisation, fused with the bias of the sub-layer's
//! last linear map: out = LN(x + Dropout(y + b)).

use super::elementwise::{reduce_partials, sum};
use super::ROW_BLOCK;
use crate::rng::DropoutMask;
use multiversion::multiversion;
use rayon::prelude::*;

/// Forward. Saves for the backward: `s` (M, D) the normalised sum, `mean` (M) and `rstd` (M).
///
/// x (M, D) is the residual input, y (M, D) the sub-layer output before its bias `y_bias` (D);
/// `dropout` masks y + b, its element index being the flat index into (M, D).
#[allow(clippy::too_many_arguments)]
pub fn residual_layer_norm_forward(
    out: &mut [f32],
    s: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    x: &[f32],
    y: &[f32],
    y_bias: Option<&[f32]>,
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    dropout: Option<DropoutMask>,
) {
    let _t = super::profile::scope(super::profile::Slot::LayerNorm);
    let d = gamma.len();
    let m = mean.len();
    assert!(out.len() == m * d && s.len() == m * d && x.len() == m * d && y.len() == m * d);
    assert!(rstd.len() == m && beta.len() == d && y_bias.is_none_or(|b| b.len() == d));
    let rb = ROW_BLOCK * d;
    out.par_chunks_mut(rb)
        .zip(s.par_chunks_mut(rb))
        .zip(mean.par_chunks_mut(ROW_BLOCK).zip(rstd.par_chunks_mut(ROW_BLOCK)))
        .enumerate()
        .for_each(|(blk, ((out, s), (mean, rstd)))| {
            let r0 = blk * ROW_BLOCK;
            ln_forward_rows(out, s, mean, rstd, &x[r0 * d..], &y[r0 * d..], y_bias, gamma, beta, eps, dropout, r0 * d);
        });
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
#[allow(clippy::too_many_arguments)]
fn ln_forward_rows(
    out: &mut [f32],
    s: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    x: &[f32],
    y: &[f32],
    y_bias: Option<&[f32]>,
    gamma: &[f32],
    beta: &[f32],
    eps: f32,
    dropout: Option<DropoutMask>,
    base: usize,
) {
    let d = gamma.len();
    for (r, (o, sr)) in out.chunks_exact_mut(d).zip(s.chunks_exact_mut(d)).enumerate() {
        let xr = &x[r * d..(r + 1) * d];
        let yr = &y[r * d..(r + 1) * d];
        // o holds y + b as scratch.
        match y_bias {
            Some(b) => {
                for j in 0..d {
                    o[j] = yr[j] + b[j];
                }
            }
            None => o.copy_from_slice(yr),
        }
        match dropout {
            Some(mask) => mask.for_chunks(base + r * d, d, |j0, f| {
                for (t, &f) in f.iter().enumerate() {
                    sr[j0 + t] = xr[j0 + t] + o[j0 + t] * f;
                }
            }),
            None => {
                for j in 0..d {
                    sr[j] = xr[j] + o[j];
                }
            }
        }
        let mu = sum(sr) / d as f32;
        // Centred second pass for accuracy; o holds (s − μ)² as scratch.
        for j in 0..d {
            o[j] = (sr[j] - mu) * (sr[j] - mu);
        }
        let var = sum(o);
        let rs = 1.0 / (var / d as f32 + eps).sqrt();
        for j in 0..d {
            o[j] = (sr[j] - mu) * rs * gamma[j] + beta[j];
        }
        mean[r] = mu;
        rstd[r] = rs;
    }
}

/// Rows of `partials` per row block: dgamma, dbeta, d(bias).
pub const PARTIAL_ROWS: usize = 3;

/// Backward. Writes dx (M, D) (overwrite: the residual path's gradient) and dy (M, D) (overwrite: the
/// sub-layer output's gradient, through the dropout mask); accumulates dgamma, dbeta and, if given,
/// the sub-layer bias's gradient Σ_rows dy. `partials` is workspace of at least
/// ⌈M / ROW_BLOCK⌉ · 3 · D: per-row-block sums, reduced in block order (deterministic).
#[allow(clippy::too_many_arguments)]
pub fn residual_layer_norm_backward(
    dx: &mut [f32],
    dy: &mut [f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
    dbias: Option<&mut [f32]>,
    partials: &mut [f32],
    dout: &[f32],
    s: &[f32],
    mean: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    dropout: Option<DropoutMask>,
) {
    let _t = super::profile::scope(super::profile::Slot::LayerNorm);
    let d = gamma.len();
    let m = mean.len();
    assert!(dx.len() == m * d && dy.len() == m * d && dout.len() == m * d && s.len() == m * d);
    let blocks = m.div_ceil(ROW_BLOCK);
    let partials = &mut partials[..blocks * PARTIAL_ROWS * d];
    let rb = ROW_BLOCK * d;
    dx.par_chunks_mut(rb)
        .zip(dy.par_chunks_mut(rb))
        .zip(partials.par_chunks_mut(PARTIAL_ROWS * d))
        .enumerate()
        .for_each(|(blk, ((dx, dy), part))| {
            let r0 = blk * ROW_BLOCK;
            ln_backward_rows(
                dx,
                dy,
                part,
                &dout[r0 * d..],
                &s[r0 * d..],
                &mean[r0..],
                &rstd[r0..],
                gamma,
                dropout,
                r0 * d,
            );
        });
    reduce_partials(dgamma, partials, PARTIAL_ROWS, 0);
    reduce_partials(dbeta, partials, PARTIAL_ROWS, 1);
    if let Some(db) = dbias {
        reduce_partials(db, partials, PARTIAL_ROWS, 2);
    }
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
#[allow(clippy::too_many_arguments)]
fn ln_backward_rows(
    dx: &mut [f32],
    dy: &mut [f32],
    part: &mut [f32],
    dout: &[f32],
    s: &[f32],
    mean: &[f32],
    rstd: &[f32],
    gamma: &[f32],
    dropout: Option<DropoutMask>,
    base: usize,
) {
    let d = gamma.len();
    let inv_d = 1.0 / d as f32;
    part.fill(0.0);
    let (pg, rest) = part.split_at_mut(d);
    let (pb, pbias) = rest.split_at_mut(d);
    for (r, (dxr, dyr)) in dx.chunks_exact_mut(d).zip(dy.chunks_exact_mut(d)).enumerate() {
        let g = &dout[r * d..(r + 1) * d];
        let sr = &s[r * d..(r + 1) * d];
        let (mu, rs) = (mean[r], rstd[r]);
        // dxhat = dout·gamma; ds = rstd·(dxhat − mean(dxhat) − xhat·mean(dxhat·xhat)).
        // dyr holds dout·gamma and dxr holds dout·gamma·xhat as scratch for the two sums.
        for j in 0..d {
            let xhat = (sr[j] - mu) * rs;
            dyr[j] = g[j] * gamma[j];
            dxr[j] = dyr[j] * xhat;
            pg[j] += g[j] * xhat;
            pb[j] += g[j];
        }
        let (mg, mgx) = (sum(dyr) * inv_d, sum(dxr) * inv_d);
        for j in 0..d {
            let xhat = (sr[j] - mu) * rs;
            dxr[j] = rs * (g[j] * gamma[j] - mg - xhat * mgx);
        }
        match dropout {
            Some(mask) => mask.for_chunks(base + r * d, d, |j0, f| {
                for (t, &f) in f.iter().enumerate() {
                    dyr[j0 + t] = dxr[j0 + t] * f;
                }
            }),
            None => dyr.copy_from_slice(dxr),
        }
        for j in 0..d {
            pbias[j] += dyr[j];
        }
    }
}
