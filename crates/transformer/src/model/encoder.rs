//! §3.1 The encoder stack: N identical layers over the embedded source, each a multi-head
//! self-attention sub-layer and a position-wise feed-forward sub-layer, each with its residual
//! connection and LayerNorm, LayerNorm(x + Sublayer(x)).
//!
//! The layers run on packed rows, each sentence's valid positions only (`super::packing`): the
//! embedding is packed in place before the first layer, and the decoder's encoder–decoder
//! attention reads the packed output (its gradient comes back packed); the backward unpacks the
//! input's gradient for the embedding. [`Transformer::encoder_output`] is the output padded again.

use super::attention::AttnShape;
use super::batch::{Batch, DropoutCtx};
use super::masks::{EmbeddingMasks, EncoderLayerMasks};
use super::packing;
use super::workspace::{Backward, EncoderActs, Flow, Workspace};
use super::{attention, feed_forward, Transformer};
use crate::kernels::cpu::embedding::{embedding_backward, embedding_forward};
use crate::kernels::Mask;

impl Transformer {
    /// The encoder stack over `batch.src` into `ws.enc_in` and `ws.enc` (the workspace must be
    /// prepared for the batch's shape). With fewer activation slots than layers
    /// ([`Workspace::prepare_encoder`]), layers take the slots in turn.
    pub(crate) fn encoder_forward(&self, batch: &Batch, ws: &mut Workspace, dropout: Option<DropoutCtx>) {
        let c = &self.config;
        let d = c.d_model;
        let p = &self.params;
        let o = &self.layout.offsets;
        self.drop_words(batch, dropout, &mut ws.embed_ids);
        // §3.4: embeddings × √d_model; §3.5: + positional encodings; §5.4: dropout on the sum.
        embedding_forward(
            &mut ws.enc_in,
            if ws.embed_ids.is_empty() { &batch.src } else { &ws.embed_ids },
            self.source_rows(),
            self.positions(),
            batch.s,
            d,
            self.embedding_scale(),
            EmbeddingMasks::new(c, dropout).source,
        );
        // The character encoder's word vectors, with `char_dim` (parsing; a named deviation).
        self.char_forward(batch, ws, dropout);
        let (ms, ns) = (batch.b * batch.s, ws.src_rows[batch.b]);
        packing::pack(&mut ws.enc_in[..ms * d], d, batch.s, &batch.src_lens);

        let slots = ws.enc.len();
        assert!(slots >= c.n_layers.min(2), "the workspace is not prepared for this encoder");
        for l in 0..c.n_layers {
            let lp = o.encoder[l].params(p);
            let masks = EncoderLayerMasks::new(c, dropout, l);
            let (cur, prev) = (l % slots, (l + slots - 1) % slots);
            let (x, acts): (&[f32], _) = if l == 0 {
                (&ws.enc_in[..ns * d], &mut ws.enc[cur])
            } else if prev < cur {
                let (a, b) = ws.enc.split_at_mut(cur);
                (&a[prev].ffn.norm.out, &mut b[0])
            } else {
                let (a, b) = ws.enc.split_at_mut(prev);
                (&b[0].ffn.norm.out, &mut a[cur])
            };
            let dims = ws.dims;
            let shape = AttnShape::self_attn(self, dims.b, dims.s, &batch.src_lens, Mask::Padding).packed(&ws.src_rows);
            let lins = self.encoder_lins(l);
            // §3.2.2: multi-head self-attention; §3.1: residual + LayerNorm.
            let attn = (&lp.self_attn, lins.self_attn);
            attention::self_forward(self, attn, x, &mut acts.self_attn, &mut ws.y, &shape, masks.self_attn);
            // §3.3 Eq. 2: position-wise FFN; §3.1: residual + LayerNorm.
            let ffn = (&lp.ffn, lins.ffn);
            feed_forward::forward(self, ffn, &mut acts.ffn, &acts.self_attn.norm.out, &mut ws.y, masks.ffn);
        }
        // The last layer's output, padded again (`encoder_output`).
        let last = packed_output(c.n_layers, &ws.enc_in, &ws.enc, ns * d);
        packing::unpack_into(&mut ws.enc_out, last, d, batch.s, &batch.src_lens);
    }

    /// The encoder output (B·S, D) after [`Transformer::encoder_forward`], padded (zero at padding
    /// positions).
    pub fn encoder_output<'w>(&self, ws: &'w Workspace) -> &'w [f32] {
        &ws.enc_out
    }

    /// Backward through the encoder stack, top layer first, down to the source embedding, from the
    /// encoder output's gradient in `ws.d_enc` (packed rows: `src_rows[B]` × D, the layout the
    /// encoder's layers run on). Accumulates parameter gradients.
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
        let (ms, ns) = (dims.b * dims.s, ws.src_rows[dims.b]);

        // The decoder left the output's gradient in packed rows.
        std::mem::swap(&mut ws.g_a, &mut ws.d_enc);
        for l in (0..n).rev() {
            let lp = o.encoder[l].params(p);
            let masks = EncoderLayerMasks::new(c, dropout, l);
            let (prev, rest) = ws.enc.split_at(l);
            let x: &[f32] = if l == 0 { &ws.enc_in[..ns * d] } else { &prev[l - 1].ffn.norm.out };
            let acts = &rest[0];
            let g = &mut ws.grad;
            let lg = o.encoder[l].params_mut(grads);
            let (ga, gb) = (&mut ws.g_a[..ns * d], &mut ws.g_b[..ns * d]);
            let attn_out = &acts.self_attn.norm.out;
            let ffn = Backward { p: &lp.ffn, g: lg.ffn };
            feed_forward::backward(self, ffn, &acts.ffn, Flow { x: attn_out, dout: ga, dx: gb }, g, masks.ffn);
            let shape = AttnShape::self_attn(self, dims.b, dims.s, &batch.src_lens, Mask::Padding).packed(&ws.src_rows);
            let attn = Backward { p: &lp.self_attn, g: lg.self_attn };
            attention::self_backward(
                self,
                attn,
                &acts.self_attn,
                Flow { x, dout: gb, dx: ga },
                g,
                &shape,
                masks.self_attn,
            );
        }
        packing::unpack(&mut ws.g_a[..ms * d], d, dims.s, &batch.src_lens);
        self.char_backward(&ws.g_a[..ms * d], &mut ws.chars, dropout, grads);
        let (emb_g, pos_g) = o.source_embedding_mut(grads);
        embedding_backward(
            emb_g,
            pos_g,
            &ws.g_a[..ms * d],
            if ws.embed_ids.is_empty() { &batch.src } else { &ws.embed_ids },
            dims.s,
            d,
            self.embedding_scale(),
            EmbeddingMasks::new(c, dropout).source,
        );
        std::mem::swap(&mut ws.g_a, &mut ws.d_enc);
    }
}

/// The encoder output's packed rows after [`Transformer::encoder_forward`] (`rows` = packed rows ×
/// D): the last layer's output, or with no layers the packed input.
pub(super) fn packed_output<'w>(n_layers: usize, enc_in: &'w [f32], enc: &'w [EncoderActs], rows: usize) -> &'w [f32] {
    if n_layers == 0 {
        &enc_in[..rows]
    } else {
        &enc[(n_layers - 1) % enc.len()].ffn.norm.out
    }
}
