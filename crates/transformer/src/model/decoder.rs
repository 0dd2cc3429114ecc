//! §3.1 The decoder stack: N identical layers over the embedded (shifted-right) target, each a
//! masked multi-head self-attention sub-layer, a multi-head attention sub-layer over the encoder
//! output and a position-wise feed-forward sub-layer, each with its residual connection and
//! LayerNorm.

use super::attention::AttnShape;
use super::batch::{Batch, DropoutCtx};
use super::encoder::packed_output;
use super::masks::{DecoderLayerMasks, EmbeddingMasks};
use super::workspace::{Backward, Flow, Workspace};
use super::{attention, feed_forward, Transformer};
use crate::kernels::cpu::embedding::{embedding_backward, embedding_forward};
use crate::kernels::Mask;

impl Transformer {
    /// The decoder stack over `batch.tgt_in` into `ws.dec_in` and `ws.dec`, attending to the
    /// encoder output (after [`Transformer::encoder_forward`] on the same workspace).
    pub(super) fn decoder_forward(&self, batch: &Batch, ws: &mut Workspace, dropout: Option<DropoutCtx>) {
        let c = &self.config;
        let d = c.d_model;
        let p = &self.params;
        let o = &self.layout.offsets;
        // §3.4: the shifted-right target's embeddings × √d_model; §3.5: + positional encodings;
        // §5.4: dropout on the sum.
        embedding_forward(
            &mut ws.dec_in,
            &batch.tgt_in,
            self.embedding_rows(),
            self.positions(),
            batch.t,
            d,
            self.embedding_scale(),
            EmbeddingMasks::new(c, dropout).target,
        );
        // The parser's decoder inputs (next-word pointer, next-closer), where the model has them.
        self.tree_inputs_forward(ws);
        // The encoder output's packed rows (sentence b's at ws.src_rows[b]..).
        let enc_out = packed_output(c.n_layers, &ws.enc_in, &ws.enc, ws.src_rows[ws.dims.b] * d);
        for l in 0..c.n_layers {
            let lp = o.decoder[l].params(p);
            let masks = DecoderLayerMasks::new(c, dropout, l);
            let (prev, rest) = ws.dec.split_at_mut(l);
            let x: &[f32] = if l == 0 { &ws.dec_in } else { &prev[l - 1].ffn.norm.out };
            let acts = &mut rest[0];
            let dims = ws.dims;
            let shape = AttnShape::self_attn(self, dims.b, dims.t, &batch.tgt_lens, Mask::Causal);
            let lins = self.decoder_lins(l);
            // §3.2.3: masked (causal) multi-head self-attention; §3.1: residual + LayerNorm.
            let attn = (&lp.self_attn, lins.self_attn);
            attention::self_forward(self, attn, x, &mut acts.self_attn, &mut ws.y, &shape, masks.self_attn);
            // §3.2.3: encoder–decoder attention, keys and values from the encoder output.
            let (attn_out, cross) = (&acts.self_attn.norm.out, &mut acts.cross_attn);
            let shape = AttnShape::cross(self, dims, &batch.src_lens).packed_keys(&ws.src_rows);
            let cross_attn = (&lp.cross_attn, lins.cross_attn);
            attention::cross_kv_forward(cross_attn, enc_out, cross, &shape);
            attention::cross_forward(self, cross_attn, attn_out, cross, &mut ws.y, &shape, masks.cross_attn);
            // §3.3 Eq. 2: position-wise FFN; §3.1: residual + LayerNorm.
            let ffn = (&lp.ffn, lins.ffn);
            feed_forward::forward(self, ffn, &mut acts.ffn, &acts.cross_attn.norm.out, &mut ws.y, masks.ffn);
        }
    }

    /// Backward through the decoder stack, top layer first, down to the target embedding, from the
    /// decoder output's gradient in `ws.g_a` (B·T, D). Leaves the encoder output's gradient in
    /// `ws.d_enc` (its packed rows, D); accumulates parameter gradients.
    pub(super) fn decoder_backward(
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
        let (ns, mt) = (ws.src_rows[dims.b], dims.b * dims.t);

        ws.d_enc[..ns * d].fill(0.0);
        for l in (0..n).rev() {
            let lp = o.decoder[l].params(p);
            let masks = DecoderLayerMasks::new(c, dropout, l);
            let (prev, rest) = ws.dec.split_at(l);
            let x: &[f32] = if l == 0 { &ws.dec_in } else { &prev[l - 1].ffn.norm.out };
            let acts = &rest[0];
            let enc_out = packed_output(n, &ws.enc_in, &ws.enc, ns * d);
            let g = &mut ws.grad;
            let lg = o.decoder[l].params_mut(grads);
            let (ga, gb) = (&mut ws.g_a[..mt * d], &mut ws.g_b[..mt * d]);
            let (self_out, cross_out) = (&acts.self_attn.norm.out, &acts.cross_attn.norm.out);
            let ffn = Backward { p: &lp.ffn, g: lg.ffn };
            feed_forward::backward(self, ffn, &acts.ffn, Flow { x: cross_out, dout: ga, dx: gb }, g, masks.ffn);
            let shape = AttnShape::cross(self, dims, &batch.src_lens).packed_keys(&ws.src_rows);
            let mut cross = Backward { p: &lp.cross_attn, g: lg.cross_attn };
            let flow = Flow { x: self_out, dout: gb, dx: ga };
            let guided = ws.guided.as_ref().filter(|x| x.0 == l).map(|(_, head, dp)| (*head, dp.as_slice()));
            attention::cross_backward(self, &mut cross, &acts.cross_attn, flow, g, &shape, masks.cross_attn, guided);
            attention::cross_kv_backward(self, &mut cross, enc_out, &mut ws.d_enc[..ns * d], g, &shape);
            let shape = AttnShape::self_attn(self, dims.b, dims.t, &batch.tgt_lens, Mask::Causal);
            let attn = Backward { p: &lp.self_attn, g: lg.self_attn };
            attention::self_backward(
                self,
                attn,
                &acts.self_attn,
                Flow { x, dout: ga, dx: gb },
                g,
                &shape,
                masks.self_attn,
            );
            std::mem::swap(&mut ws.g_a, &mut ws.g_b);
        }
        // g_a holds d(dec_in). With no decoder layers the encoder output is unused.
        // The parser's decoder inputs: their parameters' gradients, and the pointer's into d(enc_out).
        self.tree_inputs_backward(ws, grads);
        let (emb_g, pos_g) = o.embedding_mut(grads);
        embedding_backward(
            emb_g,
            pos_g,
            &ws.g_a[..mt * d],
            &batch.tgt_in,
            dims.t,
            d,
            self.embedding_scale(),
            EmbeddingMasks::new(c, dropout).target,
        );
    }
}
