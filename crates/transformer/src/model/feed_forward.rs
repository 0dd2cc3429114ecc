//! §3.3 Position-wise feed-forward network, Eq. 2: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, with its
//! residual + LayerNorm. b_1 is fused with the ReLU, b_2 with the residual LayerNorm.

use super::three_mut;
use super::workspace::{FfnActs, GradScratch};
use super::Transformer;
use crate::kernels::cpu::elementwise::{bias_relu_backward, bias_relu_forward};
use crate::kernels::cpu::layer_norm::{residual_layer_norm_backward, residual_layer_norm_forward};
use crate::kernels::cpu::linear::{linear_backward, linear_forward};
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
    linear_forward(m.precision, &mut acts.h, x, &p[fo.w_1..fo.w_1 + f * d], None, rows, f, d);
    bias_relu_forward(&mut acts.h, &p[fo.b_1..fo.b_1 + f]);
    let y = &mut y[..rows * d];
    linear_forward(m.precision, y, &acts.h, &p[fo.w_2..fo.w_2 + d * f], None, rows, d, f);
    let n = &mut acts.norm;
    let (gamma, beta, b2) = (&p[no.gamma..no.gamma + d], &p[no.beta..no.beta + d], &p[fo.b_2..fo.b_2 + d]);
    residual_layer_norm_forward(
        &mut n.out,
        &mut n.s,
        &mut n.mean,
        &mut n.rstd,
        x,
        y,
        Some(b2),
        gamma,
        beta,
        m.config.layer_norm_eps,
        drop,
    );
}

/// Backward: overwrites dx (M, D) with the gradient of x; accumulates parameter gradients.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward(
    m: &Transformer,
    p: &[f32],
    grads: &mut [f32],
    fo: &FfnOffsets,
    no: &NormOffsets,
    acts: &FfnActs,
    x: &[f32],
    dout: &[f32],
    dx: &mut [f32],
    gs: &mut GradScratch,
    drop: Option<DropoutMask>,
) {
    let (d, f) = (m.config.d_model, m.config.d_ff);
    let rows = x.len() / d;
    let dy = &mut gs.dy[..rows * d];
    let (db2, dg, db) = three_mut(grads, fo.b_2, d, no.gamma, d, no.beta, d);
    let n = &acts.norm;
    residual_layer_norm_backward(
        dx,
        dy,
        dg,
        db,
        Some(db2),
        &mut gs.partials,
        dout,
        &n.s,
        &n.mean,
        &n.rstd,
        &p[no.gamma..no.gamma + d],
        drop,
    );
    let dh = &mut gs.d_h[..rows * f];
    let w2 = &p[fo.w_2..fo.w_2 + d * f];
    linear_backward(
        m.precision,
        Some(&mut *dh),
        false,
        &mut grads[fo.w_2..fo.w_2 + d * f],
        None,
        dy,
        &acts.h,
        w2,
        rows,
        d,
        f,
    );
    bias_relu_backward(dh, &acts.h, &mut grads[fo.b_1..fo.b_1 + f], &mut gs.partials);
    let w1 = &p[fo.w_1..fo.w_1 + f * d];
    linear_backward(m.precision, Some(dx), true, &mut grads[fo.w_1..fo.w_1 + f * d], None, dh, x, w1, rows, f, d);
}
