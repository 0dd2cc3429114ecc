//! The decoder's weights packed once per model for the incremental decoder's products
//! ([`PackedDecoder`]), on the packed micro-kernel or the `gemm` crate ([`DecoderKernels`]).

use super::Transformer;
use crate::kernels::cpu::packed::PackedLinear;

/// Which kernels the incremental decoder's matrix products run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecoderKernels {
    /// The weights prepared once: f32 panels for the AVX-512 micro-kernel, bf16 tiles for the bf16
    /// unit, int8 codes (the model's own).
    #[default]
    Packed,
    /// Every f32 or bf16 product on the unpacked weights, packed at each call (for A/B timing;
    /// int8 products still read the model's codes).
    Gemm,
}

/// The decoder's weights packed for inference products ([`PackedLinear`]): built once per model
/// and shared by every batch it decodes. It is a copy: after the model's parameters change, pack
/// again. Only its shapes are checked against the model it decodes with, so packing one model and
/// decoding with another of the same shape is a caller's error that goes undetected.
#[derive(Debug)]
pub struct PackedDecoder {
    pub(super) precision: crate::precision::Precision,
    pub(super) d_model: usize,
    pub(super) vocab: usize,
    pub(super) layers: Vec<PackedLayer>,
    /// The tied embedding as the output projection (V, D).
    pub(super) output: PackedLinear,
}

/// One decoder layer's packed weights.
#[derive(Debug)]
pub(super) struct PackedLayer {
    pub(super) self_qkv: PackedLinear,
    pub(super) self_o: PackedLinear,
    pub(super) cross_q: PackedLinear,
    pub(super) cross_o: PackedLinear,
    pub(super) w_1: PackedLinear,
    pub(super) w_2: PackedLinear,
}

impl Transformer {
    /// Packs the decoder's weights for [`Transformer::restart_decoding`], at the model's
    /// precision.
    pub fn pack_decoder(&self) -> PackedDecoder {
        self.pack_decoder_with(DecoderKernels::Packed)
    }

    /// [`Transformer::pack_decoder`] on the given kernels ([`DecoderKernels::Gemm`]: the products
    /// run on the unpacked weights, for A/B timing).
    pub fn pack_decoder_with(&self, kernels: DecoderKernels) -> PackedDecoder {
        let pack = kernels == DecoderKernels::Packed;
        let prec = self.precision;
        // At int8 the model's quantised weights are shared, not quantised again.
        let new = |w: &[f32], n: usize, k: usize| match prec {
            crate::precision::Precision::Int8 => PackedLinear::int8(self.int8_weight(w).clone()),
            _ => PackedLinear::new(w, n, k, prec, pack),
        };
        let c = &self.config;
        let (d, f, v) = (c.d_model, c.d_ff, c.vocab_size);
        let (hk, hv) = (c.n_heads * c.d_k, c.n_heads * c.d_v);
        let p = &self.params;
        let o = &self.layout.offsets;
        let layers = o
            .decoder
            .iter()
            .map(|lo| {
                let lp = lo.params(p);
                PackedLayer {
                    self_qkv: new(lp.self_attn.attn.w_qkv, 2 * hk + hv, d),
                    self_o: new(lp.self_attn.attn.w_o, d, hv),
                    cross_q: new(lp.cross_attn.attn.w_q, hk, d),
                    cross_o: new(lp.cross_attn.attn.w_o, d, hv),
                    w_1: new(lp.ffn.ffn.w_1, f, d),
                    w_2: new(lp.ffn.ffn.w_2, d, f),
                }
            })
            .collect();
        let output = new(self.embedding(), v, d);
        PackedDecoder { precision: prec, d_model: d, vocab: v, layers, output }
    }
}

impl PackedDecoder {
    /// Bytes the packing holds beside the model's weights (int8 codes shared with the model are
    /// counted here, not there).
    pub fn bytes(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.self_qkv.bytes()
                    + l.self_o.bytes()
                    + l.cross_q.bytes()
                    + l.cross_o.bytes()
                    + l.w_1.bytes()
                    + l.w_2.bytes()
            })
            .sum();
        layers + self.output.bytes()
    }
}
