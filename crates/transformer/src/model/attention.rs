//! §3.2.2 Multi-head attention sub-layers with their residual + LayerNorm (§3.1): self-attention
//! (encoder; causal in the decoder) and encoder–decoder attention.

use super::workspace::{AttnActs, Dims, GradScratch};
use super::Transformer;
use crate::kernels::cpu::attention::{attention_backward, attention_forward, AttnGrads, Heads};
use crate::kernels::cpu::layer_norm::{residual_layer_norm_backward, residual_layer_norm_forward};
use crate::kernels::cpu::linear::{linear_backward, linear_forward};
use crate::kernels::{AttnDims, Mask};
use crate::params::{AttnParams, AttnParamsMut, NormParams, NormParamsMut};
use crate::rng::DropoutMask;

fn widths(m: &Transformer) -> (usize, usize, usize) {
    let c = &m.config;
    (c.d_model, c.n_heads * c.d_k, c.n_heads * c.d_v)
}

/// Output projection W^O and residual LayerNorm, shared by both kinds of attention. b^O is added
/// inside the fused residual + LayerNorm.
#[allow(clippy::too_many_arguments)]
fn project_and_norm(
    m: &Transformer,
    ap: &AttnParams,
    np: &NormParams,
    x: &[f32],
    acts: &mut AttnActs,
    y: &mut [f32],
    rows: usize,
    drop: Option<DropoutMask>,
) {
    let (d, _, hv) = widths(m);
    let y = &mut y[..rows * d];
    linear_forward(m.precision, y, &acts.ctx, ap.w_o, None, rows, d, hv);
    let n = &mut acts.norm;
    residual_layer_norm_forward(
        &mut n.out,
        &mut n.s,
        &mut n.mean,
        &mut n.rstd,
        x,
        y,
        Some(ap.b_o),
        np.gamma,
        np.beta,
        m.config.layer_norm_eps,
        drop,
    );
}

/// Backward of [`project_and_norm`]: writes dx (residual path), leaves d(ctx) in `gs.d_ctx`.
#[allow(clippy::too_many_arguments)]
fn project_and_norm_backward(
    m: &Transformer,
    ap: &AttnParams,
    np: &NormParams,
    ag: &mut AttnParamsMut,
    ng: &mut NormParamsMut,
    acts: &AttnActs,
    dout: &[f32],
    dx: &mut [f32],
    gs: &mut GradScratch,
    rows: usize,
    drop: Option<DropoutMask>,
) {
    let (d, _, hv) = widths(m);
    let dy = &mut gs.dy[..rows * d];
    let n = &acts.norm;
    residual_layer_norm_backward(
        dx,
        dy,
        ng.gamma,
        ng.beta,
        Some(&mut *ag.b_o),
        &mut gs.partials,
        dout,
        &n.s,
        &n.mean,
        &n.rstd,
        np.gamma,
        drop,
    );
    linear_backward(
        m.precision,
        Some(&mut gs.d_ctx[..rows * hv]),
        false,
        ag.w_o,
        None,
        dy,
        &acts.ctx,
        ap.w_o,
        rows,
        d,
        hv,
    );
}

/// Self-attention block over x (B·T, D): Q, K, V from one fused projection.
#[allow(clippy::too_many_arguments)]
pub(super) fn self_forward(
    m: &Transformer,
    ap: &AttnParams,
    np: &NormParams,
    x: &[f32],
    acts: &mut AttnActs,
    y: &mut [f32],
    key_lens: &[usize],
    mask: Mask,
    b: usize,
    t: usize,
    drop: Option<DropoutMask>,
    drop_attn: Option<DropoutMask>,
) {
    let (d, hk, hv) = widths(m);
    let nq = 2 * hk + hv;
    let rows = b * t;
    linear_forward(m.precision, &mut acts.q, x, ap.w_qkv, Some(ap.b_qkv), rows, nq, d);
    let dims = AttnDims { b, h: m.config.n_heads, t, s: t, k: m.config.d_k, v: m.config.d_v };
    let head = |off| Heads { data: &acts.q, ld: nq, off };
    attention_forward(&mut acts.ctx, &mut acts.probs, head(0), head(hk), head(2 * hk), key_lens, mask, drop_attn, dims);
    project_and_norm(m, ap, np, x, acts, y, rows, drop);
}

/// Backward of [`self_forward`]: dx (B·T, D) is overwritten with the gradient of x.
#[allow(clippy::too_many_arguments)]
pub(super) fn self_backward(
    m: &Transformer,
    ap: &AttnParams,
    np: &NormParams,
    mut ag: AttnParamsMut,
    mut ng: NormParamsMut,
    acts: &AttnActs,
    x: &[f32],
    dout: &[f32],
    dx: &mut [f32],
    gs: &mut GradScratch,
    key_lens: &[usize],
    mask: Mask,
    b: usize,
    t: usize,
    drop: Option<DropoutMask>,
    drop_attn: Option<DropoutMask>,
) {
    let (d, hk, hv) = widths(m);
    let nq = 2 * hk + hv;
    let rows = b * t;
    project_and_norm_backward(m, ap, np, &mut ag, &mut ng, acts, dout, dx, gs, rows, drop);
    let dims = AttnDims { b, h: m.config.n_heads, t, s: t, k: m.config.d_k, v: m.config.d_v };
    let head = |off| Heads { data: &acts.q, ld: nq, off };
    attention_backward(
        AttnGrads::Fused { dqkv: &mut gs.d_qkv[..rows * nq], ld: nq, offs: [0, hk, 2 * hk] },
        &mut gs.dscores[..b * dims.h * t * t],
        &gs.d_ctx[..rows * hv],
        &acts.probs,
        head(0),
        head(hk),
        head(2 * hk),
        key_lens,
        mask,
        drop_attn,
        dims,
    );
    linear_backward(
        m.precision,
        Some(dx),
        true,
        ag.w_qkv,
        Some(ag.b_qkv),
        &gs.d_qkv[..rows * nq],
        x,
        ap.w_qkv,
        rows,
        nq,
        d,
    );
}

/// Encoder–decoder attention block: queries from the decoder state x (B·T, D), keys and values
/// from the encoder output (B·S, D).
#[allow(clippy::too_many_arguments)]
pub(super) fn cross_forward(
    m: &Transformer,
    ap: &AttnParams,
    np: &NormParams,
    x: &[f32],
    enc: &[f32],
    acts: &mut AttnActs,
    y: &mut [f32],
    src_lens: &[usize],
    dims: Dims,
    drop: Option<DropoutMask>,
    drop_attn: Option<DropoutMask>,
) {
    let (d, hk, hv) = widths(m);
    let (mt, ms) = (dims.b * dims.t, dims.b * dims.s);
    linear_forward(m.precision, &mut acts.q, x, ap.w_q, Some(ap.b_q), mt, hk, d);
    linear_forward(m.precision, &mut acts.kv, enc, ap.w_kv, Some(ap.b_kv), ms, hk + hv, d);
    let ad = AttnDims { b: dims.b, h: m.config.n_heads, t: dims.t, s: dims.s, k: m.config.d_k, v: m.config.d_v };
    let q = Heads { data: &acts.q, ld: hk, off: 0 };
    let kv = |off| Heads { data: &acts.kv, ld: hk + hv, off };
    attention_forward(&mut acts.ctx, &mut acts.probs, q, kv(0), kv(hk), src_lens, Mask::Padding, drop_attn, ad);
    project_and_norm(m, ap, np, x, acts, y, mt, drop);
}

/// Backward of [`cross_forward`]: overwrites dx (B·T, D), accumulates into d_enc (B·S, D).
#[allow(clippy::too_many_arguments)]
pub(super) fn cross_backward(
    m: &Transformer,
    ap: &AttnParams,
    np: &NormParams,
    mut ag: AttnParamsMut,
    mut ng: NormParamsMut,
    acts: &AttnActs,
    x: &[f32],
    enc: &[f32],
    dout: &[f32],
    dx: &mut [f32],
    d_enc: &mut [f32],
    gs: &mut GradScratch,
    src_lens: &[usize],
    dims: Dims,
    drop: Option<DropoutMask>,
    drop_attn: Option<DropoutMask>,
) {
    let (d, hk, hv) = widths(m);
    let (mt, ms) = (dims.b * dims.t, dims.b * dims.s);
    project_and_norm_backward(m, ap, np, &mut ag, &mut ng, acts, dout, dx, gs, mt, drop);
    let ad = AttnDims { b: dims.b, h: m.config.n_heads, t: dims.t, s: dims.s, k: m.config.d_k, v: m.config.d_v };
    let q = Heads { data: &acts.q, ld: hk, off: 0 };
    let kv = |off| Heads { data: &acts.kv, ld: hk + hv, off };
    attention_backward(
        AttnGrads::Split {
            dq: &mut gs.d_qkv[..mt * hk],
            ldq: hk,
            qoff: 0,
            dkv: &mut gs.d_kv[..ms * (hk + hv)],
            ldkv: hk + hv,
            offs: [0, hk],
        },
        &mut gs.dscores[..ad.b * ad.h * ad.t * ad.s],
        &gs.d_ctx[..mt * hv],
        &acts.probs,
        q,
        kv(0),
        kv(hk),
        src_lens,
        Mask::Padding,
        drop_attn,
        ad,
    );
    let (dwq, dbq, dwkv, dbkv) = ag.q_kv();
    linear_backward(m.precision, Some(dx), true, dwq, Some(dbq), &gs.d_qkv[..mt * hk], x, ap.w_q, mt, hk, d);
    linear_backward(
        m.precision,
        Some(d_enc),
        true,
        dwkv,
        Some(dbkv),
        &gs.d_kv[..ms * (hk + hv)],
        enc,
        ap.w_kv,
        ms,
        hk + hv,
        d,
    );
}
