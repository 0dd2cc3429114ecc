//! The model's linear maps as the forward pass reads them ([`Lin`]): the prepared copy
//! ([`super::prepared`]) of a model prepared for inference, or W in the parameters at the model's
//! training precision; per layer, per attention block and per FFN.

use super::Transformer;
use crate::error::{Error, Result};
use crate::kernels::cpu::linear::linear_forward;
use crate::kernels::cpu::packed::PackedLinear;
use crate::params::{AttnParams, FfnParams};
use crate::precision::{Float, Precision};

/// One linear map as the forward pass reads it: Y = X · Wᵀ [+ bias].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lin<'a> {
    /// W (n, k) row-major in the parameters, computed at a training precision.
    Params { w: &'a [f32], n: usize, k: usize, precision: Float },
    /// The prepared copy.
    Prepared(&'a PackedLinear),
}

impl Lin<'_> {
    /// Y (m, n) = X (m, k) · Wᵀ [+ bias].
    pub fn forward(self, y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize) {
        match self {
            Lin::Params { w, n, k, precision } => linear_forward(precision, y, x, w, bias, m, n, k),
            Lin::Prepared(p) => p.forward(y, x, bias, m),
        }
    }

    /// Y (m, n) += X (m, k) · Wᵀ.
    pub fn forward_accumulate(self, y: &mut [f32], x: &[f32], m: usize) {
        match self {
            Lin::Params { w, n, k, precision } => {
                use crate::kernels::cpu::matmul::Op;
                crate::kernels::cpu::linear::product(precision, y, x, Op::N, w, Op::T, m, n, k, true)
            }
            Lin::Prepared(p) => p.forward_accumulate(y, x, m),
        }
    }
}

/// One attention block's maps: Q (self-attention: Q|K|V fused), K|V (encoder–decoder attention)
/// and W^O.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttnLins<'a> {
    pub q: Lin<'a>,
    pub kv: Option<Lin<'a>>,
    pub o: Lin<'a>,
}

/// One FFN's maps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FfnLins<'a> {
    pub w_1: Lin<'a>,
    pub w_2: Lin<'a>,
}

/// One encoder layer's maps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EncoderLayerLins<'a> {
    pub self_attn: AttnLins<'a>,
    pub ffn: FfnLins<'a>,
}

/// One decoder layer's maps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DecoderLayerLins<'a> {
    pub self_attn: AttnLins<'a>,
    pub cross_attn: AttnLins<'a>,
    pub ffn: FfnLins<'a>,
}

impl Transformer {
    /// Encoder layer `l`'s linear maps.
    pub(crate) fn encoder_lins(&self, l: usize) -> EncoderLayerLins<'_> {
        match self.prepared() {
            Some(p) => {
                let e = &p.encoder[l];
                EncoderLayerLins {
                    self_attn: AttnLins { q: Lin::Prepared(&e.qkv), kv: None, o: Lin::Prepared(&e.o) },
                    ffn: FfnLins { w_1: Lin::Prepared(&e.w_1), w_2: Lin::Prepared(&e.w_2) },
                }
            }
            None => {
                let lp = self.layout.offsets.encoder[l].params(&self.params);
                EncoderLayerLins {
                    self_attn: self.attn_lins(&lp.self_attn.attn, false),
                    ffn: self.ffn_lins(&lp.ffn.ffn),
                }
            }
        }
    }

    /// Decoder layer `l`'s linear maps.
    pub(crate) fn decoder_lins(&self, l: usize) -> DecoderLayerLins<'_> {
        match self.prepared() {
            Some(p) => {
                let e = &p.decoder[l];
                DecoderLayerLins {
                    self_attn: AttnLins { q: Lin::Prepared(&e.self_qkv), kv: None, o: Lin::Prepared(&e.self_o) },
                    cross_attn: AttnLins {
                        q: Lin::Prepared(&e.cross_q),
                        kv: Some(Lin::Prepared(&e.cross_kv)),
                        o: Lin::Prepared(&e.cross_o),
                    },
                    ffn: FfnLins { w_1: Lin::Prepared(&e.w_1), w_2: Lin::Prepared(&e.w_2) },
                }
            }
            None => {
                let lp = self.layout.offsets.decoder[l].params(&self.params);
                DecoderLayerLins {
                    self_attn: self.attn_lins(&lp.self_attn.attn, false),
                    cross_attn: self.attn_lins(&lp.cross_attn.attn, true),
                    ffn: self.ffn_lins(&lp.ffn.ffn),
                }
            }
        }
    }

    /// An attention block's maps on the parameters: Q|K|V fused, or for encoder–decoder attention
    /// (`cross`) Q and K|V apart.
    fn attn_lins<'a>(&self, a: &AttnParams<'a>, cross: bool) -> AttnLins<'a> {
        let (d, hv) = (self.config.d_model, self.config.n_heads * self.config.d_v);
        let o = self.params_lin(a.w_o, hv);
        match cross {
            false => AttnLins { q: self.params_lin(a.w_qkv, d), kv: None, o },
            true => AttnLins { q: self.params_lin(a.w_q, d), kv: Some(self.params_lin(a.w_kv, d)), o },
        }
    }

    /// An FFN's maps on the parameters.
    fn ffn_lins<'a>(&self, f: &FfnParams<'a>) -> FfnLins<'a> {
        FfnLins { w_1: self.params_lin(f.w_1, self.config.d_model), w_2: self.params_lin(f.w_2, self.config.d_ff) }
    }

    /// The output projection (the tied embedding, V × D).
    pub(crate) fn output_lin(&self) -> Lin<'_> {
        match self.prepared() {
            Some(p) => Lin::Prepared(&p.output),
            None => self.params_lin(self.layout.offsets.embedding(&self.params), self.config.d_model),
        }
    }

    /// The next-word pointer's W_p, with `source_pointer`.
    pub(crate) fn pointer_lin(&self) -> Option<Lin<'_>> {
        if !self.config.parsing.source_pointer {
            return None;
        }
        Some(match self.prepared() {
            Some(p) => Lin::Prepared(p.pointer.as_ref().expect("a pointer model prepares W_p")),
            None => self.params_lin(self.layout.offsets.pointer(&self.params)?, self.config.d_model),
        })
    }

    /// W (n, k) in the parameters at this model's training precision.
    fn params_lin<'a>(&self, w: &'a [f32], k: usize) -> Lin<'a> {
        Lin::Params { w, n: w.len() / k, k, precision: self.float() }
    }

    /// The output layer over the target ids `ids` only ([`OutputColumns`]): a vocabulary
    /// shortlist's. Ids must be distinct and in the vocabulary; a parsing model's next-word
    /// pointer (whose logits are not the projection's) is refused.
    pub fn output_columns(&self, ids: &[u32]) -> Result<OutputColumns> {
        let v = self.config.vocab_size;
        if self.config.parsing.source_pointer {
            return Err(Error::Unsupported(
                "a vocabulary shortlist applies to translation models, not to a parser's next-word pointer".into(),
            ));
        }
        if let Some(&t) = ids.iter().find(|&&t| t as usize >= v) {
            return Err(Error::Input(format!("shortlist id {t} outside the vocabulary of {v}")));
        }
        let mut seen = vec![false; v];
        if let Some(&t) = ids.iter().find(|&&t| std::mem::replace(&mut seen[t as usize], true)) {
            return Err(Error::Input(format!("shortlist id {t} given twice")));
        }
        let lin = match self.output_lin() {
            Lin::Prepared(p) => p.select_rows(ids, Some(self.embedding_rows())),
            Lin::Params { w, k, precision, .. } => {
                let mut rows = vec![0.0; ids.len() * k];
                for (out, &t) in rows.chunks_mut(k.max(1)).zip(ids) {
                    out.copy_from_slice(&w[t as usize * k..][..k]);
                }
                let precision = match precision {
                    Float::F32 => Precision::F32,
                    Float::Bf16 => Precision::Bf16,
                };
                PackedLinear::new(&rows, ids.len(), k, precision, false)
            }
        };
        let bias = self.output_bias().map(|b| ids.iter().map(|&t| b[t as usize]).collect());
        Ok(OutputColumns { ids: ids.to_vec(), lin, bias })
    }
}

/// The output layer over some target ids only: the projection's rows and the bias of those ids,
/// in their order, so that column j of the logits is token `ids[j]`'s logit, computed by the
/// kernel that computes it over the whole vocabulary ([`Transformer::output_columns`]).
#[derive(Clone, Debug)]
pub struct OutputColumns {
    ids: Vec<u32>,
    lin: PackedLinear,
    bias: Option<Vec<f32>>,
}

impl OutputColumns {
    /// The target ids, one a column.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Logits (m, columns) = X (m, D) · the rows' Eᵀ + their bias.
    pub(crate) fn forward(&self, y: &mut [f32], x: &[f32], m: usize) {
        self.lin.forward(y, x, self.bias.as_deref(), m)
    }
}
