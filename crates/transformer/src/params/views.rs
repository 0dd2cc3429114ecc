//! Typed views of the flat buffers: one attention block's, LayerNorm's, FFN's or layer's tensors
//! borrowed from the parameters (or, mutably, from the gradients) at the offsets of the layout, so
//! that the wiring names tensors instead of computing offsets.

use super::{AttnOffsets, DecoderLayerOffsets, EncoderLayerOffsets, FfnOffsets, ModelOffsets, NormOffsets};

/// Cuts consecutive tensors off the front of a mutable buffer (parameters or gradients), checking
/// that each starts where the previous one ended: how one layer's contiguous block is split into
/// disjoint mutable views.
struct Carve<'a> {
    rest: &'a mut [f32],
    at: usize,
}

impl<'a> Carve<'a> {
    fn new(buf: &'a mut [f32], at: usize) -> Self {
        Carve { rest: &mut buf[at..], at }
    }

    fn take(&mut self, offset: usize, len: usize) -> &'a mut [f32] {
        assert_eq!(offset, self.at, "tensors are not adjacent in the layout");
        let (head, tail) = std::mem::take(&mut self.rest).split_at_mut(len);
        self.rest = tail;
        self.at += len;
        head
    }
}

/// One attention block's tensors (§3.2.2), borrowed from a flat buffer. W^Q, W^K, W^V are stacked
/// rows of `w_qkv` (and their biases of `b_qkv`); `w_q`, `w_kv` and `b_q`, `b_kv` view the same
/// memory split after the queries, for encoder–decoder attention.
#[derive(Clone, Copy, Debug)]
pub struct AttnParams<'a> {
    /// W^Q|W^K|W^V (2·H·K + H·V, D).
    pub w_qkv: &'a [f32],
    /// b^Q|b^K|b^V (2·H·K + H·V).
    pub b_qkv: &'a [f32],
    /// W^Q (H·K, D).
    pub w_q: &'a [f32],
    /// b^Q (H·K).
    pub b_q: &'a [f32],
    /// W^K|W^V (H·K + H·V, D).
    pub w_kv: &'a [f32],
    /// b^K|b^V (H·K + H·V).
    pub b_kv: &'a [f32],
    /// W^O (D, H·V).
    pub w_o: &'a [f32],
    /// b^O (D).
    pub b_o: &'a [f32],
}

/// One attention block's tensors, mutably (gradients).
#[derive(Debug)]
pub struct AttnParamsMut<'a> {
    /// W^Q|W^K|W^V (2·H·K + H·V, D).
    pub w_qkv: &'a mut [f32],
    /// b^Q|b^K|b^V (2·H·K + H·V).
    pub b_qkv: &'a mut [f32],
    /// W^O (D, H·V).
    pub w_o: &'a mut [f32],
    /// b^O (D).
    pub b_o: &'a mut [f32],
    hk: usize,
    d: usize,
}

impl AttnParamsMut<'_> {
    /// (W^Q, b^Q, W^K|W^V, b^K|b^V): the stacked tensors split after the queries.
    pub fn q_kv(&mut self) -> (&mut [f32], &mut [f32], &mut [f32], &mut [f32]) {
        let (w_q, w_kv) = self.w_qkv.split_at_mut(self.hk * self.d);
        let (b_q, b_kv) = self.b_qkv.split_at_mut(self.hk);
        (w_q, b_q, w_kv, b_kv)
    }
}

impl AttnOffsets {
    /// The block's tensors in `p`.
    pub fn params<'a>(&self, p: &'a [f32]) -> AttnParams<'a> {
        let (d, hk, hv) = (self.d, self.hk, self.hv);
        let n = 2 * hk + hv;
        let b_qkv = &p[self.b_qkv..][..n];
        let (b_q, b_kv) = b_qkv.split_at(hk);
        let (w_qkv, w_q, w_kv, w_o): (&[f32], &[f32], &[f32], &[f32]) = if self.weights {
            let w_qkv = &p[self.w_qkv..][..n * d];
            let (w_q, w_kv) = w_qkv.split_at(hk * d);
            (w_qkv, w_q, w_kv, &p[self.w_o..][..d * hv])
        } else {
            (&[], &[], &[], &[])
        };
        AttnParams { w_qkv, b_qkv, w_q, b_q, w_kv, b_kv, w_o, b_o: &p[self.b_o..][..d] }
    }

    fn params_mut<'a>(&self, g: &mut Carve<'a>) -> AttnParamsMut<'a> {
        assert!(self.weights, "gradients of a layout without its linear weights");
        let (d, hk, hv) = (self.d, self.hk, self.hv);
        let n = 2 * hk + hv;
        AttnParamsMut {
            w_qkv: g.take(self.w_qkv, n * d),
            b_qkv: g.take(self.b_qkv, n),
            w_o: g.take(self.w_o, d * hv),
            b_o: g.take(self.b_o, d),
            hk,
            d,
        }
    }
}

/// One LayerNorm's tensors, borrowed from a flat buffer.
#[derive(Clone, Copy, Debug)]
pub struct NormParams<'a> {
    /// Gain (D).
    pub gamma: &'a [f32],
    /// Bias (D).
    pub beta: &'a [f32],
}

/// One LayerNorm's tensors, mutably (gradients).
#[derive(Debug)]
pub struct NormParamsMut<'a> {
    /// Gain (D).
    pub gamma: &'a mut [f32],
    /// Bias (D).
    pub beta: &'a mut [f32],
}

impl NormOffsets {
    /// The LayerNorm's tensors in `p`.
    pub fn params<'a>(&self, p: &'a [f32]) -> NormParams<'a> {
        NormParams { gamma: &p[self.gamma..][..self.d], beta: &p[self.beta..][..self.d] }
    }

    fn params_mut<'a>(&self, g: &mut Carve<'a>) -> NormParamsMut<'a> {
        NormParamsMut { gamma: g.take(self.gamma, self.d), beta: g.take(self.beta, self.d) }
    }
}

/// One FFN's tensors (Eq. 2), borrowed from a flat buffer.
#[derive(Clone, Copy, Debug)]
pub struct FfnParams<'a> {
    /// W_1 (F, D).
    pub w_1: &'a [f32],
    /// b_1 (F).
    pub b_1: &'a [f32],
    /// W_2 (D, F).
    pub w_2: &'a [f32],
    /// b_2 (D).
    pub b_2: &'a [f32],
}

/// One FFN's tensors, mutably (gradients).
#[derive(Debug)]
pub struct FfnParamsMut<'a> {
    /// W_1 (F, D).
    pub w_1: &'a mut [f32],
    /// b_1 (F).
    pub b_1: &'a mut [f32],
    /// W_2 (D, F).
    pub w_2: &'a mut [f32],
    /// b_2 (D).
    pub b_2: &'a mut [f32],
}

impl FfnOffsets {
    /// The FFN's tensors in `p`.
    pub fn params<'a>(&self, p: &'a [f32]) -> FfnParams<'a> {
        let (d, f) = (self.d, self.f);
        let (w_1, w_2): (&[f32], &[f32]) =
            if self.weights { (&p[self.w_1..][..f * d], &p[self.w_2..][..d * f]) } else { (&[], &[]) };
        FfnParams { w_1, b_1: &p[self.b_1..][..f], w_2, b_2: &p[self.b_2..][..d] }
    }

    fn params_mut<'a>(&self, g: &mut Carve<'a>) -> FfnParamsMut<'a> {
        assert!(self.weights, "gradients of a layout without its linear weights");
        let (d, f) = (self.d, self.f);
        FfnParamsMut {
            w_1: g.take(self.w_1, f * d),
            b_1: g.take(self.b_1, f),
            w_2: g.take(self.w_2, d * f),
            b_2: g.take(self.b_2, d),
        }
    }
}

/// An attention sub-layer's tensors: the attention and the LayerNorm after its residual.
#[derive(Clone, Copy, Debug)]
pub struct AttnBlock<'a> {
    /// The attention's projections.
    pub attn: AttnParams<'a>,
    /// Its LayerNorm.
    pub norm: NormParams<'a>,
}

/// An attention sub-layer's tensors, mutably (gradients).
#[derive(Debug)]
pub struct AttnBlockMut<'a> {
    /// The attention's projections.
    pub attn: AttnParamsMut<'a>,
    /// Its LayerNorm.
    pub norm: NormParamsMut<'a>,
}

/// A feed-forward sub-layer's tensors: the FFN and the LayerNorm after its residual.
#[derive(Clone, Copy, Debug)]
pub struct FfnBlock<'a> {
    /// The FFN (Eq. 2).
    pub ffn: FfnParams<'a>,
    /// Its LayerNorm.
    pub norm: NormParams<'a>,
}

/// A feed-forward sub-layer's tensors, mutably (gradients).
#[derive(Debug)]
pub struct FfnBlockMut<'a> {
    /// The FFN (Eq. 2).
    pub ffn: FfnParamsMut<'a>,
    /// Its LayerNorm.
    pub norm: NormParamsMut<'a>,
}

/// One encoder layer's tensors, borrowed from a flat buffer.
#[derive(Clone, Copy, Debug)]
pub struct EncoderLayerParams<'a> {
    /// Self-attention and its LayerNorm.
    pub self_attn: AttnBlock<'a>,
    /// FFN and its LayerNorm.
    pub ffn: FfnBlock<'a>,
}

/// One encoder layer's tensors, mutably (gradients): disjoint views of its contiguous block.
#[derive(Debug)]
pub struct EncoderLayerParamsMut<'a> {
    /// Self-attention and its LayerNorm.
    pub self_attn: AttnBlockMut<'a>,
    /// FFN and its LayerNorm.
    pub ffn: FfnBlockMut<'a>,
}

impl EncoderLayerOffsets {
    /// The layer's tensors in `p`.
    pub fn params<'a>(&self, p: &'a [f32]) -> EncoderLayerParams<'a> {
        EncoderLayerParams {
            self_attn: AttnBlock { attn: self.self_attn.params(p), norm: self.self_attn_norm.params(p) },
            ffn: FfnBlock { ffn: self.ffn.params(p), norm: self.ffn_norm.params(p) },
        }
    }

    /// The layer's tensors in `g`, mutably.
    pub fn params_mut<'a>(&self, g: &'a mut [f32]) -> EncoderLayerParamsMut<'a> {
        let mut g = Carve::new(g, self.self_attn.w_qkv);
        let self_attn =
            AttnBlockMut { attn: self.self_attn.params_mut(&mut g), norm: self.self_attn_norm.params_mut(&mut g) };
        let ffn = FfnBlockMut { ffn: self.ffn.params_mut(&mut g), norm: self.ffn_norm.params_mut(&mut g) };
        EncoderLayerParamsMut { self_attn, ffn }
    }
}

/// One decoder layer's tensors, borrowed from a flat buffer.
#[derive(Clone, Copy, Debug)]
pub struct DecoderLayerParams<'a> {
    /// Causal self-attention and its LayerNorm.
    pub self_attn: AttnBlock<'a>,
    /// Encoder–decoder attention and its LayerNorm.
    pub cross_attn: AttnBlock<'a>,
    /// FFN and its LayerNorm.
    pub ffn: FfnBlock<'a>,
}

/// One decoder layer's tensors, mutably (gradients): disjoint views of its contiguous block.
#[derive(Debug)]
pub struct DecoderLayerParamsMut<'a> {
    /// Causal self-attention and its LayerNorm.
    pub self_attn: AttnBlockMut<'a>,
    /// Encoder–decoder attention and its LayerNorm.
    pub cross_attn: AttnBlockMut<'a>,
    /// FFN and its LayerNorm.
    pub ffn: FfnBlockMut<'a>,
}

impl DecoderLayerOffsets {
    /// The layer's tensors in `p`.
    pub fn params<'a>(&self, p: &'a [f32]) -> DecoderLayerParams<'a> {
        DecoderLayerParams {
            self_attn: AttnBlock { attn: self.self_attn.params(p), norm: self.self_attn_norm.params(p) },
            cross_attn: AttnBlock { attn: self.cross_attn.params(p), norm: self.cross_attn_norm.params(p) },
            ffn: FfnBlock { ffn: self.ffn.params(p), norm: self.ffn_norm.params(p) },
        }
    }

    /// The layer's tensors in `g`, mutably.
    pub fn params_mut<'a>(&self, g: &'a mut [f32]) -> DecoderLayerParamsMut<'a> {
        let mut g = Carve::new(g, self.self_attn.w_qkv);
        let self_attn =
            AttnBlockMut { attn: self.self_attn.params_mut(&mut g), norm: self.self_attn_norm.params_mut(&mut g) };
        let cross_attn =
            AttnBlockMut { attn: self.cross_attn.params_mut(&mut g), norm: self.cross_attn_norm.params_mut(&mut g) };
        let ffn = FfnBlockMut { ffn: self.ffn.params_mut(&mut g), norm: self.ffn_norm.params_mut(&mut g) };
        DecoderLayerParamsMut { self_attn, cross_attn, ffn }
    }
}

impl ModelOffsets {
    /// The shared embedding (V, D) in `p`.
    pub fn embedding<'a>(&self, p: &'a [f32]) -> &'a [f32] {
        &p[self.embed..][..self.embed_len]
    }

    /// The source embedding in `p`: the shared one (V, D), or with `source_vocab_size` the
    /// source vocabulary's own (V_src, D).
    pub fn source_embedding<'a>(&self, p: &'a [f32]) -> &'a [f32] {
        match self.source_embed {
            Some(off) => &p[off..][..self.source_embed_len],
            None => self.embedding(p),
        }
    }

    /// The output bias (V) in `p`, with `output_bias`.
    pub fn output_bias<'a>(&self, p: &'a [f32]) -> Option<&'a [f32]> {
        self.output_bias.map(|off| &p[off..][..self.vocab])
    }

    /// Its gradient in `g`, with `output_bias`.
    pub fn output_bias_mut<'a>(&self, g: &'a mut [f32]) -> Option<&'a mut [f32]> {
        self.output_bias.map(|off| &mut g[off..][..self.vocab])
    }

    /// The next-word pointer's W_p (D, D) in `p`, with `source_pointer`.
    pub fn pointer<'a>(&self, p: &'a [f32]) -> Option<&'a [f32]> {
        self.pointer.map(|off| &p[off..][..self.pointer_len])
    }

    /// W_p's gradient in `g`, with `source_pointer`.
    pub fn pointer_mut<'a>(&self, g: &'a mut [f32]) -> Option<&'a mut [f32]> {
        self.pointer.map(|off| &mut g[off..][..self.pointer_len])
    }

    /// The next-closer input's tables in `p`, with `next_closer`: (V, D) per closer id, then
    /// (MAX_OPEN_DEPTH, D) per depth.
    pub fn closer<'a>(&self, p: &'a [f32]) -> Option<&'a [f32]> {
        self.closer.map(|off| &p[off..][..self.closer_len])
    }

    /// Their gradient in `g`, with `next_closer`.
    pub fn closer_mut<'a>(&self, g: &'a mut [f32]) -> Option<&'a mut [f32]> {
        self.closer.map(|off| &mut g[off..][..self.closer_len])
    }

    /// The character encoder's (byte embedding, filters, bias) in `p`, with `char_dim`.
    pub fn chars<'a>(&self, p: &'a [f32]) -> Option<[&'a [f32]; 3]> {
        let [e, w, b] = self.chars_len;
        self.chars.map(|off| [&p[off..][..e], &p[off + e..][..w], &p[off + e + w..][..b]])
    }

    /// Their gradients in `g`, with `char_dim`.
    pub fn chars_mut<'a>(&self, g: &'a mut [f32]) -> Option<[&'a mut [f32]; 3]> {
        let [e, w, b] = self.chars_len;
        let off = self.chars?;
        let (de, rest) = g[off..][..e + w + b].split_at_mut(e);
        let (dw, db) = rest.split_at_mut(w);
        Some([de, dw, db])
    }

    /// The learned positions (max_positions, D) in `p`, if any.
    pub fn learned_positions<'a>(&self, p: &'a [f32]) -> Option<&'a [f32]> {
        self.positions.map(|off| &p[off..][..self.positions_len])
    }

    /// The source embedding's gradient and, with learned positions, the positions' in `g`: the
    /// shared embedding's ([`ModelOffsets::embedding_mut`]) or the source vocabulary's own.
    pub fn source_embedding_mut<'a>(&self, g: &'a mut [f32]) -> (&'a mut [f32], Option<&'a mut [f32]>) {
        let Some(off) = self.source_embed else { return self.embedding_mut(g) };
        // The source embedding lies after the positions (it is laid out near the end).
        let (head, tail) = g.split_at_mut(off);
        let pos = self.positions.map(|p| &mut head[p..][..self.positions_len]);
        (&mut tail[..self.source_embed_len], pos)
    }

    /// The embedding and, with learned positions, the positions (which follow it) in `g`, mutably.
    pub fn embedding_mut<'a>(&self, g: &'a mut [f32]) -> (&'a mut [f32], Option<&'a mut [f32]>) {
        let mut g = Carve::new(g, self.embed);
        let embed = g.take(self.embed, self.embed_len);
        (embed, self.positions.map(|off| g.take(off, self.positions_len)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ModelConfig, Positions};
    use crate::params::ParamLayout;

    /// Where `view` lies in the buffer starting at `base`.
    fn range(base: *const f32, view: &[f32]) -> std::ops::Range<usize> {
        let start = (view.as_ptr() as usize - base as usize) / std::mem::size_of::<f32>();
        start..start + view.len()
    }

    #[test]
    fn views_are_the_named_tensors() {
        let c = ModelConfig {
            n_layers: 2,
            d_model: 8,
            n_heads: 2,
            d_k: 3,
            d_v: 5,
            d_ff: 16,
            vocab_size: 11,
            max_positions: 7,
            positions: Positions::Learned,
            ..ModelConfig::base()
        };
        let layout = ParamLayout::new(&c);
        let named = |n: String| layout.get(&n).unwrap_or_else(|| panic!("no tensor {n}")).range();
        let o = &layout.offsets;
        let mut buf = vec![0f32; layout.total()];
        let base = buf.as_ptr();
        let p = &buf;
        assert_eq!(range(base, o.embedding(p)), named("embed.weight".into()));
        assert_eq!(range(base, o.learned_positions(p).unwrap()), named("embed.positions".into()));
        let attn = |pre: String, a: AttnParams| {
            for (name, v) in [("w_q", a.w_q), ("b_q", a.b_q), ("w_o", a.w_o), ("b_o", a.b_o)] {
                assert_eq!(range(base, v), named(format!("{pre}.{name}")));
            }
            assert_eq!(range(base, a.w_kv), named(format!("{pre}.w_k")).start..named(format!("{pre}.w_v")).end);
            assert_eq!(range(base, a.b_qkv), named(format!("{pre}.b_q")).start..named(format!("{pre}.b_v")).end);
        };
        let norm = |pre: String, n: NormParams| {
            assert_eq!(range(base, n.gamma), named(format!("{pre}.gamma")));
            assert_eq!(range(base, n.beta), named(format!("{pre}.beta")));
        };
        let ffn = |pre: String, f: FfnParams| {
            for (name, v) in [("w_1", f.w_1), ("b_1", f.b_1), ("w_2", f.w_2), ("b_2", f.b_2)] {
                assert_eq!(range(base, v), named(format!("{pre}.{name}")));
            }
        };
        for (l, lo) in o.encoder.iter().enumerate() {
            let (pre, lp) = (format!("encoder.layers.{l}"), lo.params(p));
            attn(format!("{pre}.self_attn"), lp.self_attn.attn);
            norm(format!("{pre}.self_attn_norm"), lp.self_attn.norm);
            ffn(format!("{pre}.ffn"), lp.ffn.ffn);
            norm(format!("{pre}.ffn_norm"), lp.ffn.norm);
        }
        for (l, lo) in o.decoder.iter().enumerate() {
            let (pre, lp) = (format!("decoder.layers.{l}"), lo.params(p));
            attn(format!("{pre}.self_attn"), lp.self_attn.attn);
            norm(format!("{pre}.self_attn_norm"), lp.self_attn.norm);
            attn(format!("{pre}.cross_attn"), lp.cross_attn.attn);
            norm(format!("{pre}.cross_attn_norm"), lp.cross_attn.norm);
            ffn(format!("{pre}.ffn"), lp.ffn.ffn);
            norm(format!("{pre}.ffn_norm"), lp.ffn.norm);
        }
        // The mutable views are the same tensors.
        for l in 0..c.n_layers {
            let want: Vec<_> = {
                let lp = o.decoder[l].params(&buf);
                [
                    lp.self_attn.attn.w_qkv,
                    lp.self_attn.attn.b_o,
                    lp.cross_attn.attn.w_o,
                    lp.cross_attn.norm.beta,
                    lp.ffn.ffn.w_2,
                ]
                .map(|v| range(base, v))
                .to_vec()
            };
            let mut lg = o.decoder[l].params_mut(&mut buf);
            let (w_q, _, w_kv, _) = lg.cross_attn.attn.q_kv();
            let (w_q, w_kv) = (range(base, w_q), range(base, w_kv));
            let pre = format!("decoder.layers.{l}.cross_attn");
            assert_eq!(w_q, named(format!("{pre}.w_q")));
            assert_eq!(w_kv, named(format!("{pre}.w_k")).start..named(format!("{pre}.w_v")).end);
            let got = [
                &*lg.self_attn.attn.w_qkv,
                &*lg.self_attn.attn.b_o,
                &*lg.cross_attn.attn.w_o,
                &*lg.cross_attn.norm.beta,
                &*lg.ffn.ffn.w_2,
            ]
            .map(|v| range(base, v));
            assert_eq!(got.to_vec(), want);
            let lg = o.encoder[l].params_mut(&mut buf);
            let enc = o.encoder[l];
            assert_eq!(range(base, lg.ffn.norm.gamma).start, enc.ffn_norm.gamma);
            assert_eq!(range(base, lg.self_attn.attn.b_qkv).start, enc.self_attn.b_qkv);
        }
        let (emb, pos) = o.embedding_mut(&mut buf);
        assert_eq!(range(base, emb), named("embed.weight".into()));
        assert_eq!(range(base, pos.unwrap()), named("embed.positions".into()));
    }
}
