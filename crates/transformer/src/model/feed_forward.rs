//! §3.3 Position-wise feed-forward network, Eq. 2: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, with its
//! residual + LayerNorm.

use super::workspace::{FfnActs, GradScratch};
use super::{two_mut, Transformer};
use crate::kernels::cpu::elementwise::{relu_backward, relu_forward};
use crate::kernels::cpu::layer_norm::{residual_layer_norm_backward, residual_layer_norm_forward};
use crate::kernels::cpu::matmul::{linear_backward, linear_forward};
use crate::params::{FfnOffsets, NormOffsets};
use crate::rng::DropoutMask;

/// Forward over x (M, D); the block output lands in `acts.norm.out`.
#[allow(clippy::too_many_arguments)]
pub(super) fn forward(
    m: &Transformer,
    p: &[f32],
    fo: &FfnOffsets,
    no: &NormOffsets,
    acts: &mut FfnActs,
    x: &[f32],
    y: &mut [f32],
    drop: Option<DropoutMask>,
) {
    let (d, f) = (m.config.d_model, m.config.d_ff);
    let rows = x.len() / d;
    linear_forward(
        &mut acts.h,
        x,
        &p[fo.w_1..fo.w_1 + f * d],
        Some(&p[fo.b_1..fo.b_1 + f]),
        rows,
        f,
        d,
    );
    relu_forward(&mut acts.h);
    let y = &mut y[..rows * d];
    linear_forward(
        y,
        &acts.h,
        &p[fo.w_2..fo.w_2 + d * f],
        Some(&p[fo.b_2..fo.b_2 + d]),
        rows,
        d,
        f,
    );
    let n = &mut acts.norm;
    residual_layer_norm_forward(
        &mut n.out,
        &mut n.s,
        &mut n.mean,
        &mut n.rstd,
        x,
        y,
        &p[no.gamma..no.gamma + d],
        &p[no.beta..no.beta + d],
        m.config.layer_norm_eps,
        drop,
    );
}

/// Backward: overwrites dx (M, D) with the gradient of x; accumulates parameter gradients.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    p: &[f32],
    grads: &mut [f32],
    fo: &FfnOffsets,
    no: &NormOffsets,
    acts: &FfnActs,
    x: &[f32],
    dout: &[f32],
    dx: &mut [f32],
    gs: &mut GradScratch,
    d: usize,
    f: usize,
    drop: Option<DropoutMask>,
) {
    let rows = x.len() / d;
    let dy = &mut gs.dy[..rows * d];
    let (dg, db) = two_mut(grads, no.gamma, d, no.beta, d);
    residual_layer_norm_backward(
        dx,
        dy,
        dg,
        db,
        dout,
        &acts.norm.s,
        &acts.norm.mean,
        &acts.norm.rstd,
        &p[no.gamma..no.gamma + d],
        drop,
    );
    let dh = &mut gs.d_h[..rows * f];
    let (dw, db) = two_mut(grads, fo.w_2, d * f, fo.b_2, d);
    linear_backward(
        Some(&mut *dh),
        false,
        dw,
        Some(db),
        dy,
        &acts.h,
        &p[fo.w_2..fo.w_2 + d * f],
        rows,
        d,
        f,
    );
    relu_backward(dh, &acts.h);
    let (dw, db) = two_mut(grads, fo.w_1, f * d, fo.b_1, f);
    linear_backward(
        Some(dx),
        true,
        dw,
        Some(db),
        dh,
        x,
        &p[fo.w_1..fo.w_1 + f * d],
        rows,
        f,
        d,
    );
}
