//! The decoder's weights packed once per model for the incremental decoder's products
//! ([`PackedDecoder`]), on the packed micro-kernel or the `gemm` crate ([`DecoderKernels`]).

use super::Transformer;
use crate::kernels::cpu::packed::PackedLinear;

/// Which kernels the incremental decoder's matrix products run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecoderKernels {
    /// The weights packed into panels for the AVX-512 micro-kernel (f32; bf16 products use their
    /// own layout).
    #[default]
    Packed,
    /// Every product on the `gemm` crate over the unpacked weights (for A/B timing).
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
                    self_qkv: PackedLinear::new(lp.self_attn.attn.w_qkv, 2 * hk + hv, d, prec, pack),
                    self_o: PackedLinear::new(lp.self_attn.attn.w_o, d, hv, prec, pack),
                    cross_q: PackedLinear::new(lp.cross_attn.attn.w_q, hk, d, prec, pack),
                    cross_o: PackedLinear::new(lp.cross_attn.attn.w_o, d, hv, prec, pack),
                    w_1: PackedLinear::new(lp.ffn.ffn.w_1, f, d, prec, pack),
                    w_2: PackedLinear::new(lp.ffn.ffn.w_2, d, f, prec, pack),
                }
            })
            .collect();
        let output = PackedLinear::new(self.embedding(), v, d, prec, pack);
        PackedDecoder { precision: prec, d_model: d, vocab: v, layers, output }
    }
}
