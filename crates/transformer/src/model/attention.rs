//! §3.2.2 Multi-head attention sub-layers with their residual + LayerNorm (§3.1): self-attention
//! (encoder; causal in the decoder) and encoder–decoder attention.

use super::lins::{AttnLins, Lin};
use super::masks::SubLayerMasks;
use super::workspace::{AttnActs, Backward, Dims, Flow, GradScratch};
use super::Transformer;
use crate::kernels::cpu::attention::{attention_backward, attention_forward, AttnGrads, Heads};
use crate::kernels::cpu::guided::{guided_backward, GuidedHeads};
use crate::kernels::cpu::layer_norm::{residual_layer_norm_backward, residual_layer_norm_forward};
use crate::kernels::cpu::linear::linear_backward;
use crate::kernels::{AttnDims, Mask};
use crate::params::{AttnBlock, AttnBlockMut};
use crate::rng::DropoutMask;

/// The shape of one attention call: its dimensions, each sentence's key count and the mask.
#[derive(Clone, Copy, Debug)]
pub(super) struct AttnShape<'a> {
    pub dims: AttnDims,
    /// Keys per sentence (source or target lengths).
    pub key_lens: &'a [usize],
    pub mask: Mask,
    /// Packed query rows (the encoder's self-attention): where each sentence's rows start, and
    /// the end (see [`Heads::packed`]); `None` for padded rows.
    pub q_packed: Option<&'a [usize]>,
    /// Packed key and value rows: the encoder's, in its self-attention and in encoder–decoder
    /// attention.
    pub kv_packed: Option<&'a [usize]>,
}

impl<'a> AttnShape<'a> {
    /// Self-attention over `t` positions of `b` sentences.
    pub fn self_attn(m: &Transformer, b: usize, t: usize, key_lens: &'a [usize], mask: Mask) -> Self {
        let c = &m.config;
        let dims = AttnDims { b, h: c.n_heads, t, s: t, k: c.d_k, v: c.d_v };
        AttnShape { dims, key_lens, mask, q_packed: None, kv_packed: None }
    }

    /// The same self-attention over packed rows, sentence b at rows [offsets[b], offsets[b+1]).
    pub fn packed(self, offsets: &'a [usize]) -> Self {
        AttnShape { q_packed: Some(offsets), kv_packed: Some(offsets), ..self }
    }

    /// The same attention with packed keys and values, sentence b's at rows
    /// [offsets[b], offsets[b+1]).
    pub fn packed_keys(self, offsets: &'a [usize]) -> Self {
        AttnShape { kv_packed: Some(offsets), ..self }
    }

    /// Encoder–decoder attention: the decoder's T queries over the encoder's S positions.
    pub fn cross(m: &Transformer, dims: Dims, src_lens: &'a [usize]) -> Self {
        let c = &m.config;
        let d = AttnDims { b: dims.b, h: c.n_heads, t: dims.t, s: dims.s, k: c.d_k, v: c.d_v };
        AttnShape { dims: d, key_lens: src_lens, mask: Mask::Padding, q_packed: None, kv_packed: None }
    }

    /// Query rows: B·T, or the packed rows.
    fn q_rows(&self) -> usize {
        self.q_packed.map_or(self.dims.b * self.dims.t, |o| o[self.dims.b])
    }

    /// Key/value rows: B·S, or the packed rows.
    fn kv_rows(&self) -> usize {
        self.kv_packed.map_or(self.dims.b * self.dims.s, |o| o[self.dims.b])
    }
}

fn widths(m: &Transformer) -> (usize, usize, usize) {
    let c = &m.config;
    (c.d_model, c.n_heads * c.d_k, c.n_heads * c.d_v)
}

/// Output projection W^O and residual LayerNorm, shared by both kinds of attention. b^O is added
/// inside the fused residual + LayerNorm.
fn project_and_norm(
    m: &Transformer,
    (p, w_o): (&AttnBlock, Lin),
    x: &[f32],
    acts: &mut AttnActs,
    y: &mut [f32],
    rows: usize,
    drop: Option<DropoutMask>,
) {
    let d = m.config.d_model;
    let y = &mut y[..rows * d];
    // §3.2.2: the heads' outputs, concatenated, times W^O.
    w_o.forward(y, &acts.ctx, None, rows);
    let n = &mut acts.norm;
    // §3.1: LayerNorm(x + Sublayer(x)); §5.4: dropout on the sub-layer output.
    residual_layer_norm_forward(
        &mut n.out,
        &mut n.s,
        &mut n.mean,
        &mut n.rstd,
        x,
        y,
        Some(p.attn.b_o),
        p.norm.gamma,
        p.norm.beta,
        m.config.layer_norm_eps,
        drop,
    );
}

/// Backward of [`project_and_norm`]: writes `flow.dx` (residual path), leaves d(ctx) in
/// `gs.d_ctx`.
fn project_and_norm_backward(
    m: &Transformer,
    pg: &mut Backward<&AttnBlock, AttnBlockMut>,
    acts: &AttnActs,
    flow: &mut Flow,
    gs: &mut GradScratch,
    rows: usize,
    drop: Option<DropoutMask>,
) {
    let (d, _, hv) = widths(m);
    let dy = &mut gs.dy[..rows * d];
    let n = &acts.norm;
    let g = &mut pg.g;
    residual_layer_norm_backward(
        flow.dx,
        dy,
        g.norm.gamma,
        g.norm.beta,
        Some(&mut *g.attn.b_o),
        &mut gs.partials,
        flow.dout,
        &n.s,
        &n.mean,
        &n.rstd,
        pg.p.norm.gamma,
        drop,
    );
    linear_backward(
        m.float(),
        Some(&mut gs.d_ctx[..rows * hv]),
        false,
        g.attn.w_o,
        None,
        dy,
        &acts.ctx,
        pg.p.attn.w_o,
        rows,
        d,
        hv,
    );
}

/// Self-attention block over x (B·T, D): Q, K, V from one fused projection. `p` pairs the
/// block's tensors with its linear maps.
pub(super) fn self_forward(
    m: &Transformer,
    (p, lins): (&AttnBlock, AttnLins),
    x: &[f32],
    acts: &mut AttnActs,
    y: &mut [f32],
    shape: &AttnShape,
    masks: SubLayerMasks,
) {
    let (_, hk, hv) = widths(m);
    let nq = 2 * hk + hv;
    let rows = shape.q_rows();
    // §3.2.2: Q, K, V = x W^Q, x W^K, x W^V, every head's, in one product.
    lins.q.forward(&mut acts.q, x, Some(p.attn.b_qkv), rows);
    let head = |off| Heads { data: &acts.q, ld: nq, off, packed: shape.q_packed };
    let (dims, key_lens, mask) = (shape.dims, shape.key_lens, shape.mask);
    // Eq. 1: softmax(QKᵀ / √d_k) V per head, with dropout on the weights (`attention_dropout`).
    attention_forward(
        &mut acts.ctx,
        &mut acts.probs,
        head(0),
        head(hk),
        head(2 * hk),
        key_lens,
        mask,
        masks.weights,
        dims,
    );
    project_and_norm(m, (p, lins.o), x, acts, y, rows, masks.out);
}

/// Backward of [`self_forward`]: `flow.dx` (B·T, D) is overwritten with the gradient of `flow.x`.
pub(super) fn self_backward(
    m: &Transformer,
    mut pg: Backward<&AttnBlock, AttnBlockMut>,
    acts: &AttnActs,
    mut flow: Flow,
    gs: &mut GradScratch,
    shape: &AttnShape,
    masks: SubLayerMasks,
) {
    let (d, hk, hv) = widths(m);
    let nq = 2 * hk + hv;
    let (dims, rows) = (shape.dims, shape.q_rows());
    project_and_norm_backward(m, &mut pg, acts, &mut flow, gs, rows, masks.out);
    let head = |off| Heads { data: &acts.q, ld: nq, off, packed: shape.q_packed };
    attention_backward(
        AttnGrads::Fused { dqkv: &mut gs.d_qkv[..rows * nq], ld: nq, offs: [0, hk, 2 * hk] },
        &mut gs.dscores[..dims.b * dims.h * dims.t * dims.t],
        &gs.d_ctx[..rows * hv],
        &acts.probs,
        head(0),
        head(hk),
        head(2 * hk),
        shape.key_lens,
        shape.mask,
        masks.weights,
        dims,
    );
    linear_backward(
        m.float(),
        Some(flow.dx),
        true,
        pg.g.attn.w_qkv,
        Some(pg.g.attn.b_qkv),
        &gs.d_qkv[..rows * nq],
        flow.x,
        pg.p.attn.w_qkv,
        rows,
        nq,
        d,
    );
}

/// The keys and values of encoder–decoder attention, projected from the encoder output `enc`
/// (its packed rows) into `acts.kv`: the first half of [`cross_forward`].
pub(super) fn cross_kv_forward((p, lins): (&AttnBlock, AttnLins), enc: &[f32], acts: &mut AttnActs, shape: &AttnShape) {
    let kv = lins.kv.expect("encoder–decoder attention has a K|V map");
    // §3.2.3: K, V = enc W^K, enc W^V: the keys and values come from the encoder output.
    kv.forward(&mut acts.kv, enc, Some(p.attn.b_kv), shape.kv_rows());
}

/// Encoder–decoder attention block: queries from the decoder state x (B·T, D), keys and values
/// in `acts.kv` from [`cross_kv_forward`].
pub(super) fn cross_forward(
    m: &Transformer,
    (p, lins): (&AttnBlock, AttnLins),
    x: &[f32],
    acts: &mut AttnActs,
    y: &mut [f32],
    shape: &AttnShape,
    masks: SubLayerMasks,
) {
    let (_, hk, hv) = widths(m);
    let mt = shape.q_rows();
    // §3.2.3: the queries come from the previous decoder sub-layer.
    lins.q.forward(&mut acts.q, x, Some(p.attn.b_q), mt);
    let q = Heads::padded(&acts.q, hk, 0);
    let kv = |off| Heads { data: &acts.kv, ld: hk + hv, off, packed: shape.kv_packed };
    let (dims, key_lens, mask) = (shape.dims, shape.key_lens, shape.mask);
    // Eq. 1 per head over the source positions.
    attention_forward(&mut acts.ctx, &mut acts.probs, q, kv(0), kv(hk), key_lens, mask, masks.weights, dims);
    project_and_norm(m, (p, lins.o), x, acts, y, mt, masks.out);
}

/// Backward of [`cross_forward`]: overwrites `flow.dx` (B·T, D) and leaves the keys' and values'
/// gradient in `gs.d_kv` for [`cross_kv_backward`]. `guided`: a head of this layer trained
/// towards an alignment, with ∂loss/∂P of that head (B, T, S), whose gradient joins the head's
/// queries' and keys'.
#[allow(clippy::too_many_arguments)]
pub(super) fn cross_backward(
    m: &Transformer,
    pg: &mut Backward<&AttnBlock, AttnBlockMut>,
    acts: &AttnActs,
    mut flow: Flow,
    gs: &mut GradScratch,
    shape: &AttnShape,
    masks: SubLayerMasks,
    guided: Option<(usize, &[f32])>,
) {
    let (d, hk, hv) = widths(m);
    let (dims, mt, ms) = (shape.dims, shape.q_rows(), shape.kv_rows());
    project_and_norm_backward(m, pg, acts, &mut flow, gs, mt, masks.out);
    let q = Heads::padded(&acts.q, hk, 0);
    let kv = |off| Heads { data: &acts.kv, ld: hk + hv, off, packed: shape.kv_packed };
    attention_backward(
        AttnGrads::Split {
            dq: &mut gs.d_qkv[..mt * hk],
            ldq: hk,
            qoff: 0,
            dkv: &mut gs.d_kv[..ms * (hk + hv)],
            ldkv: hk + hv,
            offs: [0, hk],
        },
        &mut gs.dscores[..dims.b * dims.h * dims.t * dims.s],
        &gs.d_ctx[..mt * hv],
        &acts.probs,
        q,
        kv(0),
        kv(hk),
        shape.key_lens,
        shape.mask,
        masks.weights,
        dims,
    );
    if let Some((head, dprobs)) = guided {
        let heads = GuidedHeads { q: &acts.q, ldq: hk, k: &acts.kv, ldk: hk + hv, k_packed: shape.kv_packed };
        let (dq, dkv) = (&mut gs.d_qkv[..mt * hk], &mut gs.d_kv[..ms * (hk + hv)]);
        guided_backward(dq, dkv, &heads, &acts.probs, dprobs, shape.key_lens, head, dims);
    }
    let (dwq, dbq, _, _) = pg.g.attn.q_kv();
    linear_backward(
        m.float(),
        Some(flow.dx),
        true,
        dwq,
        Some(dbq),
        &gs.d_qkv[..mt * hk],
        flow.x,
        pg.p.attn.w_q,
        mt,
        hk,
        d,
    );
}

/// Backward of [`cross_kv_forward`], after [`cross_backward`]: accumulates into `d_enc` (the encoder's packed rows, D)
/// and the key/value projections' gradients from `gs.d_kv`.
pub(super) fn cross_kv_backward(
    m: &Transformer,
    pg: &mut Backward<&AttnBlock, AttnBlockMut>,
    enc: &[f32],
    d_enc: &mut [f32],
    gs: &GradScratch,
    shape: &AttnShape,
) {
    let (d, hk, hv) = widths(m);
    let ms = shape.kv_rows();
    let (_, _, dwkv, dbkv) = pg.g.attn.q_kv();
    linear_backward(
        m.float(),
        Some(d_enc),
        true,
        dwkv,
        Some(dbkv),
        &gs.d_kv[..ms * (hk + hv)],
        enc,
        pg.p.attn.w_kv,
        ms,
        hk + hv,
        d,
    );
}
