//! §3.1 The encoder stack: N identical layers over the embedded source, each a multi-head
//! self-attention sub-layer and a position-wise feed-forward sub-layer, each with its residual
//! connection and LayerNorm, LayerNorm(x + Sublayer(x)).

use super::masks::{EmbeddingMasks, EncoderLayerMasks};
use super::workspace::Workspace;
use super::{attention, feed_forward, Batch, DropoutCtx, Transformer};
use crate::kernels::cpu::embedding::{embedding_backward, embedding_forward};
use crate::kernels::Mask;

impl Transformer {
    /// The encoder stack over `batch.src` into `ws.enc_in` and `ws.enc` (the workspace must be
    /// prepared for the batch's shape).
    pub(crate) fn encoder_forward(&self, batch: &Batch, ws: &mut Workspace, dropout: Option<DropoutCtx>) {
        let c = &self.config;
        let d = c.d_model;
        let p = &self.params;
        let o = &self.layout.offsets;
        embedding_forward(
            &mut ws.enc_in,
            &batch.src,
            self.embedding(),
            self.positions(),
            batch.s,
            d,
            self.embedding_scale(),
            EmbeddingMasks::new(c, dropout).source,
        );

        for l in 0..c.n_layers {
            let lp = o.encoder[l].params(p);
            let masks = EncoderLayerMasks::new(c, dropout, l);
            let (prev, rest) = ws.enc.split_at_mut(l);
            let x: &[f32] = if l == 0 { &ws.enc_in } else { &prev[l - 1].ffn.norm.out };
            let acts = &mut rest[0];
            let dims = ws.dims;
            attention::self_forward(
                self,
                &lp.self_attn,
                &lp.self_attn_norm,
                x,
                &mut acts.self_attn,
                &mut ws.y,
                &batch.src_lens,
                Mask::Padding,
                dims.b,
                dims.s,
                masks.self_attn,
                masks.self_attn_weights,
            );
            feed_forward::forward(
                self,
                &lp.ffn,
                &lp.ffn_norm,
                &mut acts.ffn,
                &acts.self_attn.norm.out,
                &mut ws.y,
                masks.ffn,
            );
        }
    }

    /// The encoder output (B·S, D) after [`Transformer::encoder_forward`].
    pub(crate) fn encoder_output<'w>(&self, ws: &'w Workspace) -> &'w [f32] {
        let n = self.config.n_layers;
        if n == 0 {
            &ws.enc_in
        } else {
            &ws.enc[n - 1].ffn.norm.out
        }
    }

    /// Backward through the encoder stack, top layer first, down to the source embedding, from the
    /// encoder output's gradient in `ws.d_enc` (B·S, D). Accumulates parameter gradients.
    pub(super) fn encoder_backward(
        &self,
        batch: &Batch,
        ws: &mut Workspace,
        dropout: Option<DropoutCtx>,
        grads: &mut [f32],
    ) {
        let c = &self.config;
        let (d, n) = (c.d_model, c.n_layers);
        let p = &self.params;
        let o = &self.layout.offsets;
        let dims = ws.dims;
        let ms = dims.b * dims.s;

        std::mem::swap(&mut ws.g_a, &mut ws.d_enc);
        for l in (0..n).rev() {
            let lp = o.encoder[l].params(p);
            let masks = EncoderLayerMasks::new(c, dropout, l);
            let (prev, rest) = ws.enc.split_at(l);
            let x: &[f32] = if l == 0 { &ws.enc_in } else { &prev[l - 1].ffn.norm.out };
            let acts = &rest[0];
            let g = &mut ws.grad;
            let lg = o.encoder[l].params_mut(grads);
            feed_forward::backward(
                self,
                &lp.ffn,
                &lp.ffn_norm,
                lg.ffn,
                lg.ffn_norm,
                &acts.ffn,
                &acts.self_attn.norm.out,
                &ws.g_a[..ms * d],
                &mut ws.g_b[..ms * d],
                g,
                masks.ffn,
            );
            attention::self_backward(
                self,
                &lp.self_attn,
                &lp.self_attn_norm,
                lg.self_attn,
                lg.self_attn_norm,
                &acts.self_attn,
                x,
                &ws.g_b[..ms * d],
                &mut ws.g_a[..ms * d],
                g,
                &batch.src_lens,
                Mask::Padding,
                dims.b,
                dims.s,
                masks.self_attn,
                masks.self_attn_weights,
            );
        }
        let (emb_g, pos_g) = o.embedding_mut(grads);
        embedding_backward(
            emb_g,
            pos_g,
            &ws.g_a[..ms * d],
            &batch.src,
            dims.s,
            d,
            self.embedding_scale(),
            EmbeddingMasks::new(c, dropout).source,
        );
        std::mem::swap(&mut ws.g_a, &mut ws.d_enc);
    }
}
