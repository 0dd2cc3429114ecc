//! A model's linear maps prepared for inference ([`Prepared`]): every W of the encoder, the
//! decoder, the encoder–decoder attention, the pointer and the output projection, built once in
//! the layout its products read (f32 panels, bf16 tiles, int8 codes with scales), in the style of
//! CTranslate2's `Dense` layers. A [`super::Transformer`] prepared for inference
//! ([`super::Transformer::prepare`]) owns it and no longer holds those weights in its parameters, so the
//! two cannot disagree and no weight is kept twice.
//!
//! The forward pass reads a linear map through [`super::lins::Lin`]: on the prepared copy, or, in a
//! model that is not prepared (training), on W in the parameters at the model's precision.

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::kernels::cpu::embedding::Rows;
use crate::kernels::cpu::int8::QuantizedLinear;
use crate::kernels::cpu::packed::PackedLinear;
use crate::params::ParamLayout;
use crate::precision::Precision;

/// Which kernels a prepared model's products run on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecoderKernels {
    /// The weights laid out once: f32 panels for the AVX-512 micro-kernel, bf16 tiles for the
    /// bf16 unit, int8 codes.
    #[default]
    Packed,
    /// f32 and bf16 products on W as given, packed at each call by the `gemm` path (for A/B
    /// timing; int8 products still read codes).
    Gemm,
}

/// Codes (row-major, the tensor's shape) and per-row scales of one parameter tensor, by its
/// layout name: what an int8 checkpoint stores.
pub type Int8Codes = std::collections::BTreeMap<String, (Vec<i8>, Vec<f32>)>;

/// Every linear map of a model at one precision, in its compute layout.
#[derive(Debug)]
pub struct Prepared {
    precision: Precision,
    pub(super) encoder: Vec<EncoderLinears>,
    pub(super) decoder: Vec<DecoderLinears>,
    /// The next-word pointer's W_p (D, D).
    pub(super) pointer: Option<PackedLinear>,
    /// The tied embedding E (V, D) as the output projection.
    pub(super) output: PackedLinear,
}

/// One encoder layer's maps.
#[derive(Debug)]
pub(super) struct EncoderLinears {
    pub qkv: PackedLinear,
    pub o: PackedLinear,
    pub w_1: PackedLinear,
    pub w_2: PackedLinear,
}

/// One decoder layer's maps.
#[derive(Debug)]
pub(super) struct DecoderLinears {
    pub self_qkv: PackedLinear,
    pub self_o: PackedLinear,
    pub cross_q: PackedLinear,
    pub cross_kv: PackedLinear,
    pub cross_o: PackedLinear,
    pub w_1: PackedLinear,
    pub w_2: PackedLinear,
}

/// One linear map of a configuration: the parameter tensors whose rows it stacks (adjacent in the
/// full layout), its input width, and whether it keeps W as given at f32 (the pointer's W_p, whose
/// product in the decoder accumulates into its input, which the panels' kernel does not do).
#[derive(Clone, Debug)]
pub(crate) struct MapSpec {
    pub tensors: Vec<String>,
    pub k: usize,
    pub as_given_at_f32: bool,
}

impl MapSpec {
    /// The map prepared from W (n, k). At f32 the maps become the micro-kernel's panels, the
    /// encoder's included (on the `gemm` path, which packed W at every product of a few rows, a
    /// sentence decoded alone took twice as long), except the pointer's; bf16 and int8 lay out
    /// every map.
    fn prepare(&self, w: &[f32], precision: Precision, kernels: DecoderKernels) -> PackedLinear {
        let pack = kernels == DecoderKernels::Packed && !(self.as_given_at_f32 && precision == Precision::F32);
        PackedLinear::new(w, w.len() / self.k, self.k, precision, pack)
    }
}

/// Every linear map of `c`, in the order [`Prepared`] holds them: per encoder layer Q|K|V, W^O,
/// W_1, W_2; per decoder layer Q|K|V, W^O, the encoder–decoder Q, K|V and W^O, W_1, W_2; the
/// pointer's W_p; the embedding as the output projection.
pub(crate) fn map_specs(c: &ModelConfig) -> Vec<MapSpec> {
    let (d, hv, f) = (c.d_model, c.n_heads * c.d_v, c.d_ff);
    let map = |names: &[String], k| MapSpec { tensors: names.to_vec(), k, as_given_at_f32: false };
    let as_given = |names: &[String], k| MapSpec { tensors: names.to_vec(), k, as_given_at_f32: true };
    let mut out = Vec::new();
    let attn = |p: &str| [format!("{p}.w_q"), format!("{p}.w_k"), format!("{p}.w_v"), format!("{p}.w_o")];
    for l in 0..c.n_layers {
        let p = format!("encoder.layers.{l}");
        let [q, k, v, o] = attn(&format!("{p}.self_attn"));
        out.push(map(&[q, k, v], d));
        out.push(map(&[o], hv));
        out.push(map(&[format!("{p}.ffn.w_1")], d));
        out.push(map(&[format!("{p}.ffn.w_2")], f));
    }
    for l in 0..c.n_layers {
        let p = format!("decoder.layers.{l}");
        let [q, k, v, o] = attn(&format!("{p}.self_attn"));
        out.push(map(&[q, k, v], d));
        out.push(map(&[o], hv));
        let [q, k, v, o] = attn(&format!("{p}.cross_attn"));
        out.push(map(&[q], d));
        out.push(map(&[k, v], d));
        out.push(map(&[o], hv));
        out.push(map(&[format!("{p}.ffn.w_1")], d));
        out.push(map(&[format!("{p}.ffn.w_2")], f));
    }
    if c.parsing.source_pointer {
        out.push(as_given(&["decoder.source_pointer.weight".into()], d));
    }
    out.push(map(&["embed.weight".into()], d));
    out
}

impl MapSpec {
    /// The map's W (n, k) in `params` laid out by the full `layout`: its tensors are adjacent.
    pub(crate) fn weights<'p>(&self, layout: &ParamLayout, params: &'p [f32]) -> &'p [f32] {
        let entry = |name: &str| layout.get(name).unwrap_or_else(|| panic!("the layout has no tensor '{name}'"));
        let first = entry(&self.tensors[0]);
        let end = self.tensors.iter().fold(first.offset, |at, name| {
            let e = entry(name);
            assert_eq!(e.offset, at, "the tensors of a linear map are adjacent");
            at + e.len()
        });
        &params[first.offset..end]
    }
}

impl Prepared {
    /// The maps built in `map_specs` order from `make` (given each map's spec).
    fn assemble(
        c: &ModelConfig,
        precision: Precision,
        mut make: impl FnMut(&MapSpec) -> Result<PackedLinear>,
    ) -> Result<Self> {
        let specs = map_specs(c);
        let mut it = specs.iter();
        let mut next = || make(it.next().expect("map_specs lists every map"));
        let mut encoder = Vec::with_capacity(c.n_layers);
        for _ in 0..c.n_layers {
            encoder.push(EncoderLinears { qkv: next()?, o: next()?, w_1: next()?, w_2: next()? });
        }
        let mut decoder = Vec::with_capacity(c.n_layers);
        for _ in 0..c.n_layers {
            decoder.push(DecoderLinears {
                self_qkv: next()?,
                self_o: next()?,
                cross_q: next()?,
                cross_kv: next()?,
                cross_o: next()?,
                w_1: next()?,
                w_2: next()?,
            });
        }
        let pointer = if c.parsing.source_pointer { Some(next()?) } else { None };
        let output = next()?;
        Ok(Prepared { precision, encoder, decoder, pointer, output })
    }

    /// Prepares every linear map of the model whose parameters `params` are laid out by the full
    /// `layout`, at `precision` on `kernels`.
    pub(crate) fn build(
        c: &ModelConfig,
        layout: &ParamLayout,
        params: &[f32],
        precision: Precision,
        kernels: DecoderKernels,
    ) -> Self {
        Self::assemble(c, precision, |spec| Ok(spec.prepare(spec.weights(layout, params), precision, kernels)))
            .expect("building from parameters cannot fail")
    }

    /// The int8 maps from codes stored per parameter tensor (an int8 checkpoint), without
    /// quantising: each map's rows are the tensors it stacks. An error names a missing tensor, one
    /// that does not fit its map, or codes for a tensor that is no linear map's weight.
    pub(crate) fn from_codes(c: &ModelConfig, layout: &ParamLayout, codes: &Int8Codes) -> Result<Self> {
        let mut used = 0;
        let prepared = Self::assemble(c, Precision::Int8, |spec| {
            let k = spec.k;
            let (mut q, mut s) = (Vec::new(), Vec::new());
            for name in &spec.tensors {
                let (ec, es) = codes.get(name).ok_or_else(|| {
                    Error::Mismatch(format!("the int8 codes have no tensor '{name}', a linear map's weights"))
                })?;
                let len = layout.get(name).map_or(0, |e| e.len());
                if ec.len() != len || es.len() * k != len {
                    return Err(Error::Mismatch(format!("the int8 tensor '{name}' does not fit its linear map")));
                }
                q.extend_from_slice(ec);
                s.extend_from_slice(es);
                used += 1;
            }
            let n = s.len();
            Ok(PackedLinear::int8(QuantizedLinear::from_codes(&q, s, n, k).map_err(Error::Mismatch)?))
        })?;
        if used != codes.len() {
            // Codes for a tensor that is no linear map's weight (a bias, a LayerNorm gain): its f32
            // values, which the model reads, would be missing.
            let specs = map_specs(c);
            let stray =
                codes.keys().find(|name| !specs.iter().any(|s| s.tensors.contains(name))).cloned().unwrap_or_default();
            return Err(Error::Mismatch(format!("the int8 codes hold '{stray}', which is not a linear map's weights")));
        }
        Ok(prepared)
    }

    /// Every map in `map_specs` order.
    fn all(&self) -> Vec<&PackedLinear> {
        let mut out = Vec::new();
        for l in &self.encoder {
            out.extend([&l.qkv, &l.o, &l.w_1, &l.w_2]);
        }
        for l in &self.decoder {
            out.extend([&l.self_qkv, &l.self_o, &l.cross_q, &l.cross_kv, &l.cross_o, &l.w_1, &l.w_2]);
        }
        out.extend(self.pointer.as_ref());
        out.push(&self.output);
        out
    }

    /// At int8: the codes and scales of every parameter tensor that is part of a linear map, by
    /// name (what `transformer quantize` writes). `None` at another precision.
    pub fn codes(&self, c: &ModelConfig) -> Option<Int8Codes> {
        let layout = ParamLayout::new(c);
        let mut out = Int8Codes::new();
        for (spec, lin) in map_specs(c).iter().zip(self.all()) {
            let (q, s) = lin.quantized()?.codes();
            let k = spec.k;
            let mut row = 0;
            for name in &spec.tensors {
                let rows = layout.get(name).expect("map_specs names layout tensors").len() / k;
                out.insert(name.clone(), (q[row * k..(row + rows) * k].to_vec(), s[row..row + rows].to_vec()));
                row += rows;
            }
        }
        Some(out)
    }

    /// The precision of the products.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Bytes held by the prepared maps.
    pub fn bytes(&self) -> usize {
        self.all().iter().map(|l| l.bytes()).sum()
    }

    /// The embedding's rows, where the output projection keeps them exactly (f32).
    pub(super) fn embedding_rows(&self) -> Option<Rows<'_>> {
        self.output.rows()
    }
}

/// Builds a prepared model from its tensors given one at a time in layout order (a checkpoint
/// read tensor by tensor): each linear map is prepared as soon as its last tensor arrives and its
/// f32 rows are dropped, every other tensor is kept. Loading then never holds more f32 weights
/// than one map's beside what is prepared.
pub(crate) struct PreparedLoader {
    config: ModelConfig,
    precision: Precision,
    kernels: DecoderKernels,
    specs: Vec<MapSpec>,
    /// Tensor name → (its map, whether it is the map's last tensor).
    owner: std::collections::HashMap<String, (usize, bool)>,
    maps: Vec<Option<PackedLinear>>,
    /// The rows of the map being read.
    pending: Vec<f32>,
    /// Every tensor that is no map's weight, in layout order (and E where its map's layout does
    /// not keep its rows exactly).
    kept: Vec<f32>,
}

impl PreparedLoader {
    /// A loader for a model of configuration `c` prepared at `precision` on `kernels`.
    pub(crate) fn new(c: &ModelConfig, precision: Precision, kernels: DecoderKernels) -> Self {
        let specs = map_specs(c);
        let mut owner = std::collections::HashMap::new();
        for (i, spec) in specs.iter().enumerate() {
            for (j, name) in spec.tensors.iter().enumerate() {
                owner.insert(name.clone(), (i, j + 1 == spec.tensors.len()));
            }
        }
        let maps = (0..specs.len()).map(|_| None).collect();
        PreparedLoader {
            config: c.clone(),
            precision,
            kernels,
            specs,
            owner,
            maps,
            pending: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// The next tensor in layout order, `name` with values `data`.
    pub(crate) fn tensor(&mut self, name: &str, data: &[f32]) {
        let Some(&(i, last)) = self.owner.get(name) else {
            self.kept.extend_from_slice(data);
            return;
        };
        let lin = if last && self.pending.is_empty() {
            self.specs[i].prepare(data, self.precision, self.kernels)
        } else {
            self.pending.extend_from_slice(data);
            if !last {
                return;
            }
            let lin = self.specs[i].prepare(&self.pending, self.precision, self.kernels);
            self.pending = Vec::new();
            lin
        };
        if name == "embed.weight" && lin.rows().is_none() {
            // The lookups read E itself where the output projection holds rounded values.
            self.kept.extend_from_slice(data);
        }
        self.maps[i] = Some(lin);
    }

    /// Once every tensor has been given: the configuration, the parameters kept (those the
    /// prepared maps do not hold) and the prepared maps, for [`Transformer::from_prepared`].
    pub(crate) fn finish(self) -> Result<(ModelConfig, Vec<f32>, Prepared)> {
        let mut maps = self.maps.into_iter();
        let prepared = Prepared::assemble(&self.config, self.precision, |spec| {
            maps.next().flatten().ok_or_else(|| Error::Mismatch(format!("no tensor '{}' was read", spec.tensors[0])))
        })?;
        Ok((self.config, self.kept, prepared))
    }
}
