//! The model's int8 weights ([`Int8Weights`]): every linear map's W quantised once, when the
//! model is set to [`Precision::Int8`](crate::Precision::Int8), and found again by where W sits
//! in the parameter buffer. [`Transformer::linear`] routes a model's linear maps to them.

use super::Transformer;
use crate::kernels::cpu::int8::QuantizedLinear;
use crate::kernels::cpu::linear::linear_forward;
use crate::precision::Precision;
use std::collections::HashMap;
use std::sync::Arc;

/// Quantised copies of a model's linear weights, keyed by each W's offset in the parameters.
#[derive(Debug, Default)]
pub struct Int8Weights {
    by_offset: HashMap<usize, Arc<QuantizedLinear>>,
}

/// Codes (row-major, the tensor's shape) and per-row scales of one parameter tensor, by its
/// layout name: what an int8 checkpoint stores.
pub type Int8Codes = std::collections::BTreeMap<String, (Vec<i8>, Vec<f32>)>;

impl Int8Weights {
    /// Every linear map of `model` as (offset, rows, columns) in its parameters: the encoder's and
    /// decoder's projections and FFNs, the encoder–decoder queries and keys|values, the pointer's
    /// W_p, and the tied embedding as the output projection.
    fn maps(model: &Transformer) -> Vec<(usize, usize, usize)> {
        let c = &model.config;
        let d = c.d_model;
        let p = &model.params[..];
        let o = &model.layout.offsets;
        // (W, rows): W is (rows, len / rows).
        let mut maps: Vec<(&[f32], usize)> = Vec::new();
        for lo in &o.encoder {
            let lp = lo.params(p);
            maps.push((lp.self_attn.attn.w_qkv, lp.self_attn.attn.w_qkv.len() / d));
            maps.push((lp.self_attn.attn.w_o, d));
            maps.push((lp.ffn.ffn.w_1, lp.ffn.ffn.w_1.len() / d));
            maps.push((lp.ffn.ffn.w_2, d));
        }
        for lo in &o.decoder {
            let lp = lo.params(p);
            maps.push((lp.self_attn.attn.w_qkv, lp.self_attn.attn.w_qkv.len() / d));
            maps.push((lp.self_attn.attn.w_o, d));
            maps.push((lp.cross_attn.attn.w_q, lp.cross_attn.attn.w_q.len() / d));
            maps.push((lp.cross_attn.attn.w_kv, lp.cross_attn.attn.w_kv.len() / d));
            maps.push((lp.cross_attn.attn.w_o, d));
            maps.push((lp.ffn.ffn.w_1, lp.ffn.ffn.w_1.len() / d));
            maps.push((lp.ffn.ffn.w_2, d));
        }
        if let Some(w_p) = o.pointer(p) {
            maps.push((w_p, d));
        }
        maps.push((o.embedding(p), c.vocab_size));
        maps.into_iter().map(|(w, rows)| (offset(p, w), rows, w.len() / rows)).collect()
    }

    /// Quantises every linear map of `model` (see [`Int8Weights::maps`]).
    pub(super) fn build(model: &Transformer) -> Self {
        let p = &model.params;
        let by_offset = Self::maps(model)
            .into_iter()
            .map(|(off, n, k)| (off, Arc::new(QuantizedLinear::new(&p[off..off + n * k], n, k))))
            .collect();
        Int8Weights { by_offset }
    }

    /// The linear maps of `model` from codes stored per parameter tensor (an int8 checkpoint),
    /// without quantising: each map's rows are the tensors it stacks, in layout order.
    pub(super) fn from_codes(model: &Transformer, codes: &Int8Codes) -> crate::error::Result<Self> {
        use crate::error::Error;
        let mut by_offset = HashMap::new();
        let mut used = 0;
        for (off, n, k) in Self::maps(model) {
            let (mut q, mut s) = (Vec::with_capacity(n * k), Vec::with_capacity(n));
            let mut at = off;
            for e in model.layout.entries().iter().filter(|e| e.offset >= off && e.offset < off + n * k) {
                let (ec, es) = codes.get(&e.name).ok_or_else(|| {
                    Error::Mismatch(format!("the int8 codes have no tensor '{}', a linear map's weights", e.name))
                })?;
                if e.offset != at || ec.len() != e.len() || es.len() * k != e.len() {
                    return Err(Error::Mismatch(format!("the int8 tensor '{}' does not fit its linear map", e.name)));
                }
                q.extend_from_slice(ec);
                s.extend_from_slice(es);
                at += e.len();
                used += 1;
            }
            if at != off + n * k {
                return Err(Error::Mismatch(format!(
                    "the int8 codes cover {} of a linear map's {} weights",
                    at - off,
                    n * k
                )));
            }
            let lin = QuantizedLinear::from_codes(&q, s, n, k).map_err(Error::Mismatch)?;
            by_offset.insert(off, Arc::new(lin));
        }
        if used != codes.len() {
            // Codes for a tensor that is no linear map's weight (a bias, a LayerNorm gain): its f32
            // values, which the model reads, would be missing.
            let maps = Self::maps(model);
            let stray = codes
                .keys()
                .find(|name| {
                    model
                        .layout
                        .get(name)
                        .is_none_or(|e| !maps.iter().any(|&(off, n, k)| e.offset >= off && e.offset < off + n * k))
                })
                .cloned()
                .unwrap_or_default();
            return Err(Error::Mismatch(format!("the int8 codes hold '{stray}', which is not a linear map's weights")));
        }
        Ok(Int8Weights { by_offset })
    }

    /// The codes and scales of every parameter tensor that is part of a linear map, by name.
    pub fn codes(&self, model: &Transformer) -> Int8Codes {
        let mut out = Int8Codes::new();
        for (off, n, k) in Self::maps(model) {
            let (q, s) = self.by_offset[&off].codes();
            for e in model.layout.entries().iter().filter(|e| e.offset >= off && e.offset < off + n * k) {
                let (r0, rows) = ((e.offset - off) / k, e.len() / k);
                out.insert(e.name.clone(), (q[r0 * k..(r0 + rows) * k].to_vec(), s[r0..r0 + rows].to_vec()));
            }
        }
        out
    }

    /// The quantised copy of `w`, a slice of `params`.
    pub(super) fn get(&self, params: &[f32], w: &[f32]) -> &Arc<QuantizedLinear> {
        let q = self.by_offset.get(&offset(params, w)).expect("an int8 product on a weight that was not quantised");
        assert_eq!(q.n() * q.k(), w.len(), "the int8 weight at this offset has another shape");
        q
    }

    /// Bytes held by the quantised copies.
    pub fn bytes(&self) -> usize {
        self.by_offset.values().map(|q| q.bytes()).sum()
    }
}

/// Where `w` starts in `params` (it must be a slice of it).
fn offset(params: &[f32], w: &[f32]) -> usize {
    let start = params.as_ptr() as usize;
    let at = w.as_ptr() as usize;
    assert!(at >= start && at + 4 * w.len() <= start + 4 * params.len(), "a weight outside the model's parameters");
    (at - start) / 4
}

impl Transformer {
    /// Y (m, n) = X (m, k) · Wᵀ [+ bias] for one of this model's linear maps, W a slice of its
    /// parameters: on the quantised copy at int8, otherwise on W at the model's precision.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn linear(
        &self,
        y: &mut [f32],
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        m: usize,
        n: usize,
        k: usize,
    ) {
        match self.precision {
            Precision::Int8 => self.int8_weight(w).forward(y, x, bias, m),
            p => linear_forward(p, y, x, w, bias, m, n, k),
        }
    }

    /// The quantised copy of `w` (the model is at int8).
    pub(crate) fn int8_weight(&self, w: &[f32]) -> &Arc<QuantizedLinear> {
        self.int8.as_ref().expect("an int8 model without quantised weights").get(&self.params, w)
    }

    /// The int8 weights, at [`Precision::Int8`].
    pub fn int8_weights(&self) -> Option<&Int8Weights> {
        self.int8.as_deref()
    }

    /// The same model at [`Precision::Int8`] with the linear maps' weights taken from `codes` (an
    /// int8 checkpoint's) instead of quantised from the parameters, whose values for those maps
    /// are then unused: such a model cannot be set to another precision.
    pub fn with_int8_codes(mut self, codes: &Int8Codes) -> crate::error::Result<Self> {
        let weights = Int8Weights::from_codes(&self, codes)?;
        self.precision = Precision::Int8;
        self.int8 = Some(Arc::new(weights));
        self.int8_only = true;
        Ok(self)
    }
}
