//! §3.3 Position-wise feed-forward network, Eq. 2: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, with its
//! residual + LayerNorm. b_1 is fused with the ReLU, b_2 with the residual LayerNorm. An imported
//! model's smooth activation (swish, the GELUs) replaces the ReLU; its backward reads the
//! pre-activations the forward keeps.

use super::lins::FfnLins;
use super::workspace::{Backward, FfnActs, Flow, GradScratch};
use super::Transformer;
use crate::config::Activation;
use crate::kernels::cpu::elementwise::{bias_activation_backward, bias_activation_forward, bias_relu_backward};
use crate::kernels::cpu::layer_norm::{residual_layer_norm_backward, residual_layer_norm_forward};
use crate::kernels::cpu::linear::linear_backward;
use crate::params::{FfnBlock, FfnBlockMut};
use crate::rng::DropoutMask;

/// Forward over x (M, D); the block output lands in `acts.norm.out`.
/// `p` pairs the block's tensors with its linear maps.
pub(super) fn forward(
    m: &Transformer,
    (p, lins): (&FfnBlock, FfnLins),
    acts: &mut FfnActs,
    x: &[f32],
    y: &mut [f32],
    drop: Option<DropoutMask>,
) {
    let d = m.config.d_model;
    let (fp, np) = (&p.ffn, &p.norm);
    let rows = x.len() / d;
    // Eq. 2: x W_1 (+ b_1 with the activation below).
    lins.w_1.forward(&mut acts.h, x, None, rows);
    if !acts.pre.is_empty() {
        // A smooth activation's backward reads its pre-activation z = x·W_1 + b_1.
        let f = fp.b_1.len();
        let pre = &mut acts.pre[..rows * f];
        pre.copy_from_slice(&acts.h[..rows * f]);
        for row in pre.chunks_exact_mut(f) {
            for (z, b) in row.iter_mut().zip(fp.b_1) {
                *z += b;
            }
        }
    }
    // Eq. 2: max(0, · + b_1) (an imported model's activation in place of the ReLU).
    bias_activation_forward(&mut acts.h, fp.b_1, m.config.import.activation);
    let y = &mut y[..rows * d];
    // Eq. 2: · W_2 (+ b_2 inside the residual LayerNorm).
    lins.w_2.forward(y, &acts.h, None, rows);
    let n = &mut acts.norm;
    // §3.1: LayerNorm(x + FFN(x)); §5.4: dropout on FFN(x).
    residual_layer_norm_forward(
        &mut n.out,
        &mut n.s,
        &mut n.mean,
        &mut n.rstd,
        x,
        y,
        Some(fp.b_2),
        np.gamma,
        np.beta,
        m.config.layer_norm_eps,
        drop,
    );
}

/// Backward: overwrites `flow.dx` (M, D) with the gradient of `flow.x`; accumulates parameter
/// gradients.
pub(super) fn backward(
    m: &Transformer,
    pg: Backward<&FfnBlock, FfnBlockMut>,
    acts: &FfnActs,
    flow: Flow,
    gs: &mut GradScratch,
    drop: Option<DropoutMask>,
) {
    let (d, f) = (m.config.d_model, m.config.d_ff);
    let (fp, np, fg, ng) = (&pg.p.ffn, &pg.p.norm, pg.g.ffn, pg.g.norm);
    let rows = flow.x.len() / d;
    let dy = &mut gs.dy[..rows * d];
    let n = &acts.norm;
    residual_layer_norm_backward(
        flow.dx,
        dy,
        ng.gamma,
        ng.beta,
        Some(fg.b_2),
        &mut gs.partials,
        flow.dout,
        &n.s,
        &n.mean,
        &n.rstd,
        np.gamma,
        drop,
    );
    let dh = &mut gs.d_h[..rows * f];
    linear_backward(m.float(), Some(&mut *dh), false, fg.w_2, None, dy, &acts.h, fp.w_2, rows, d, f);
    match m.config.import.activation {
        Activation::Relu => bias_relu_backward(dh, &acts.h, fg.b_1, &mut gs.partials),
        act => {
            assert_eq!(acts.pre.len(), rows * f, "the forward kept no pre-activations for {}'s backward", act.name());
            bias_activation_backward(dh, &acts.pre, act, fg.b_1, &mut gs.partials)
        }
    }
    linear_backward(m.float(), Some(flow.dx), true, fg.w_1, None, dh, flow.x, fp.w_1, rows, f, d);
}
