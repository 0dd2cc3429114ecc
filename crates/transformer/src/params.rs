//! The flat parameter layout: every tensor's hierarchical name, shape and offset into one `Vec<f32>`
//! shared by parameters, gradients and both Adam moments; and initialisation.
//!
//! Initialisation follows tensor2tensor/fairseq: Xavier-uniform for every projection matrix (each of
//! W^Q, W^K, W^V, W^O, W_1, W_2 on its own fan-in/fan-out), zero biases, LayerNorm gain 1 and bias 0,
//! the shared embedding N(0, d_model^-0.5) (so that after the √d_model scale tokens have unit
//! variance), learned positions N(0, d_model^-0.5).

use crate::config::{ModelConfig, Positions};
use crate::error::{Error, Result};
use crate::rng::Rng;
use std::collections::HashMap;

mod views;
pub use views::{
    AttnBlock, AttnBlockMut, AttnParams, AttnParamsMut, DecoderLayerParams, DecoderLayerParamsMut, EncoderLayerParams,
    EncoderLayerParamsMut, FfnBlock, FfnBlockMut, FfnParams, FfnParamsMut, NormParams, NormParamsMut,
};

/// Depths of the parser's next-closer input table (`decoder.open_depth.weight`): deeper stacks
/// share its last row.
pub const MAX_OPEN_DEPTH: usize = 32;

/// How a tensor is initialised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// U(−a, a), a = √(6 / (fan_in + fan_out)).
    XavierUniform,
    /// N(0, std²).
    Normal(f32),
}

/// One named tensor in the flat buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamEntry {
    /// Hierarchical name, e.g. `decoder.layers.3.cross_attn.w_q`.
    pub name: String,
    /// Shape; matrices are (out, in) like PyTorch's `nn.Linear`.
    pub shape: Vec<usize>,
    /// First element in the flat buffer.
    pub offset: usize,
    /// Initialisation.
    pub init: Init,
}

impl ParamEntry {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The element range in the flat buffer.
    pub fn range(&self) -> std::ops::Range<usize> {
        self.offset..self.offset + self.len()
    }
}

/// Offsets of one multi-head attention block. W^Q, W^K, W^V are adjacent (rows stacked), and so are
/// their biases, so self-attention projects Q, K and V with one matrix product, and
/// encoder–decoder attention K and V with one.
#[derive(Clone, Copy, Debug)]
pub struct AttnOffsets {
    /// W^Q (H·K, D), followed by W^K (H·K, D) and W^V (H·V, D).
    pub w_qkv: usize,
    /// b^Q (H·K), followed by b^K (H·K) and b^V (H·V).
    pub b_qkv: usize,
    /// W^O (D, H·V).
    pub w_o: usize,
    /// b^O (D).
    pub b_o: usize,
    /// D: the model width.
    pub d: usize,
    /// H·K: the queries' (and keys') width.
    pub hk: usize,
    /// H·V: the values' width.
    pub hv: usize,
    /// Whether W^Q|W^K|W^V and W^O are in the buffer (not in a model prepared for inference,
    /// where they are views of nothing).
    pub weights: bool,
}

/// Offsets of one LayerNorm.
#[derive(Clone, Copy, Debug)]
pub struct NormOffsets {
    /// Gain (D).
    pub gamma: usize,
    /// Bias (D).
    pub beta: usize,
    /// D.
    pub d: usize,
}

/// Offsets of one position-wise FFN (Eq. 2).
#[derive(Clone, Copy, Debug)]
pub struct FfnOffsets {
    /// W_1 (F, D).
    pub w_1: usize,
    /// b_1 (F).
    pub b_1: usize,
    /// W_2 (D, F).
    pub w_2: usize,
    /// b_2 (D).
    pub b_2: usize,
    /// D.
    pub d: usize,
    /// F: d_ff.
    pub f: usize,
    /// Whether W_1 and W_2 are in the buffer (see [`AttnOffsets::weights`]).
    pub weights: bool,
}

/// One encoder layer (§3.1).
#[derive(Clone, Copy, Debug)]
pub struct EncoderLayerOffsets {
    /// Self-attention.
    pub self_attn: AttnOffsets,
    /// Its LayerNorm.
    pub self_attn_norm: NormOffsets,
    /// FFN.
    pub ffn: FfnOffsets,
    /// Its LayerNorm.
    pub ffn_norm: NormOffsets,
}

/// One decoder layer (§3.1).
#[derive(Clone, Copy, Debug)]
pub struct DecoderLayerOffsets {
    /// Causal self-attention.
    pub self_attn: AttnOffsets,
    /// Its LayerNorm.
    pub self_attn_norm: NormOffsets,
    /// Encoder–decoder attention.
    pub cross_attn: AttnOffsets,
    /// Its LayerNorm.
    pub cross_attn_norm: NormOffsets,
    /// FFN.
    pub ffn: FfnOffsets,
    /// Its LayerNorm.
    pub ffn_norm: NormOffsets,
}

/// Typed offsets of the whole model, for the wiring code.
#[derive(Clone, Debug)]
pub struct ModelOffsets {
    /// The shared embedding (V, D), also the pre-softmax projection.
    pub embed: usize,
    /// Learned positions (max_positions, D), if any.
    pub positions: Option<usize>,
    /// V·D: the embedding's size.
    pub embed_len: usize,
    /// max_positions·D: the learned positions' size (with learned positions).
    pub positions_len: usize,
    /// Encoder layers, bottom first.
    pub encoder: Vec<EncoderLayerOffsets>,
    /// Decoder layers, bottom first.
    pub decoder: Vec<DecoderLayerOffsets>,
    /// The next-word pointer's W_p (D, D), with `source_pointer`.
    pub pointer: Option<usize>,
    /// D·D.
    pub pointer_len: usize,
    /// The next-closer input's tables, with `next_closer`: (V, D) one row per closer id, then
    /// (MAX_OPEN_DEPTH, D) one per depth, contiguous.
    pub closer: Option<usize>,
    /// (V + MAX_OPEN_DEPTH)·D.
    pub closer_len: usize,
    /// The character encoder's byte embedding (CHAR_VOCAB, dc), then its filters
    /// (CHAR_WIDTH·dc, D) and their bias (D), contiguous, with `char_dim`.
    pub chars: Option<usize>,
    /// The three lengths of `chars`.
    pub chars_len: [usize; 3],
    /// The source vocabulary's own embedding (V_src, D), with `source_vocab_size`.
    pub source_embed: Option<usize>,
    /// V_src·D.
    pub source_embed_len: usize,
    /// The output logits' bias (V), with `output_bias`.
    pub output_bias: Option<usize>,
    /// V: the (target) vocabulary's size.
    pub vocab: usize,
    /// The tensors the buffer leaves out.
    pub leave_out: LeaveOut,
}

/// The named layout of all parameters of a model.
#[derive(Clone, Debug)]
pub struct ParamLayout {
    entries: Vec<ParamEntry>,
    index: HashMap<String, usize>,
    total: usize,
    /// Typed offsets for the model's wiring.
    pub offsets: ModelOffsets,
}

struct Builder {
    entries: Vec<ParamEntry>,
    total: usize,
    /// Which tensors are left out of the buffer.
    leave_out: LeaveOut,
}

/// Tensors a layout leaves out of the buffer: a model prepared for inference holds the linear
/// maps' weights (and at f32 the tied embedding) in their compute layout instead
/// (`model::Prepared`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaveOut {
    /// Every linear map's W: attention projections, FFN matrices, the pointer's W_p.
    pub linear_weights: bool,
    /// The shared embedding E (V, D) (its rows are then read from the prepared output
    /// projection).
    pub embedding: bool,
}

impl Builder {
    fn add(&mut self, name: String, shape: &[usize], init: Init) -> usize {
        let offset = self.total;
        self.total += shape.iter().product::<usize>();
        self.entries.push(ParamEntry { name, shape: shape.to_vec(), offset, init });
        offset
    }

    /// A linear map's weight: [`Builder::add`], or nothing where linear weights are left out.
    fn add_weight(&mut self, name: String, shape: &[usize], init: Init) -> usize {
        if self.leave_out.linear_weights {
            return self.total;
        }
        self.add(name, shape, init)
    }

    fn attention(&mut self, p: &str, c: &ModelConfig) -> AttnOffsets {
        let (d, hk, hv) = (c.d_model, c.n_heads * c.d_k, c.n_heads * c.d_v);
        let w_qkv = self.add_weight(format!("{p}.w_q"), &[hk, d], Init::XavierUniform);
        self.add_weight(format!("{p}.w_k"), &[hk, d], Init::XavierUniform);
        self.add_weight(format!("{p}.w_v"), &[hv, d], Init::XavierUniform);
        let b_qkv = self.add(format!("{p}.b_q"), &[hk], Init::Zeros);
        self.add(format!("{p}.b_k"), &[hk], Init::Zeros);
        self.add(format!("{p}.b_v"), &[hv], Init::Zeros);
        let w_o = self.add_weight(format!("{p}.w_o"), &[d, hv], Init::XavierUniform);
        let b_o = self.add(format!("{p}.b_o"), &[d], Init::Zeros);
        AttnOffsets { w_qkv, b_qkv, w_o, b_o, d, hk, hv, weights: !self.leave_out.linear_weights }
    }

    fn norm(&mut self, p: &str, d: usize) -> NormOffsets {
        let gamma = self.add(format!("{p}.gamma"), &[d], Init::Ones);
        let beta = self.add(format!("{p}.beta"), &[d], Init::Zeros);
        NormOffsets { gamma, beta, d }
    }

    fn ffn(&mut self, p: &str, c: &ModelConfig) -> FfnOffsets {
        let w_1 = self.add_weight(format!("{p}.w_1"), &[c.d_ff, c.d_model], Init::XavierUniform);
        let b_1 = self.add(format!("{p}.b_1"), &[c.d_ff], Init::Zeros);
        let w_2 = self.add_weight(format!("{p}.w_2"), &[c.d_model, c.d_ff], Init::XavierUniform);
        let b_2 = self.add(format!("{p}.b_2"), &[c.d_model], Init::Zeros);
        FfnOffsets { w_1, b_1, w_2, b_2, d: c.d_model, f: c.d_ff, weights: !self.leave_out.linear_weights }
    }
}

/// Parameter count of a configuration (exact: the size of its layout).
pub fn param_count(c: &ModelConfig) -> usize {
    ParamLayout::new(c).total()
}

impl ParamLayout {
    /// The layout of a model with configuration `c`.
    pub fn new(c: &ModelConfig) -> Self {
        Self::leaving_out(c, LeaveOut::default())
    }

    /// The layout of `c` without the tensors `leave_out` names: the same names in the same
    /// order, the others absent from [`ParamLayout::entries`] and from the buffer, and their
    /// typed views empty.
    pub fn leaving_out(c: &ModelConfig, leave_out: LeaveOut) -> Self {
        let mut b = Builder { entries: Vec::new(), total: 0, leave_out };
        let std = (c.d_model as f32).powf(-0.5);
        let embed = if leave_out.embedding {
            b.total
        } else {
            b.add("embed.weight".into(), &[c.vocab_size, c.d_model], Init::Normal(std))
        };
        let positions = match c.positions {
            Positions::Learned => {
                Some(b.add("embed.positions".into(), &[c.max_positions, c.d_model], Init::Normal(std)))
            }
            Positions::Sinusoidal => None,
        };
        let encoder = (0..c.n_layers)
            .map(|i| {
                let p = format!("encoder.layers.{i}");
                EncoderLayerOffsets {
                    self_attn: b.attention(&format!("{p}.self_attn"), c),
                    self_attn_norm: b.norm(&format!("{p}.self_attn_norm"), c.d_model),
                    ffn: b.ffn(&format!("{p}.ffn"), c),
                    ffn_norm: b.norm(&format!("{p}.ffn_norm"), c.d_model),
                }
            })
            .collect();
        let decoder = (0..c.n_layers)
            .map(|i| {
                let p = format!("decoder.layers.{i}");
                DecoderLayerOffsets {
                    self_attn: b.attention(&format!("{p}.self_attn"), c),
                    self_attn_norm: b.norm(&format!("{p}.self_attn_norm"), c.d_model),
                    cross_attn: b.attention(&format!("{p}.cross_attn"), c),
                    cross_attn_norm: b.norm(&format!("{p}.cross_attn_norm"), c.d_model),
                    ffn: b.ffn(&format!("{p}.ffn"), c),
                    ffn_norm: b.norm(&format!("{p}.ffn_norm"), c.d_model),
                }
            })
            .collect();
        let pointer = c.parsing.source_pointer.then(|| {
            b.add_weight("decoder.source_pointer.weight".into(), &[c.d_model, c.d_model], Init::XavierUniform)
        });
        // Zeros: at initialisation the decoder input is the paper's.
        let closer = c.parsing.next_closer.then(|| {
            let off = b.add("decoder.next_closer.weight".into(), &[c.vocab_size, c.d_model], Init::Zeros);
            b.add("decoder.open_depth.weight".into(), &[MAX_OPEN_DEPTH, c.d_model], Init::Zeros);
            off
        });
        use crate::kernels::cpu::char_cnn::{CHAR_VOCAB, CHAR_WIDTH};
        let chars_len = [CHAR_VOCAB * c.parsing.char_dim, CHAR_WIDTH * c.parsing.char_dim * c.d_model, c.d_model];
        let chars = (c.parsing.char_dim > 0).then(|| {
            // Bytes embedded N(0, 1), so that at initialisation the word's vector is of the size
            // of its pieces' scaled embeddings.
            let off = b.add("encoder.char_embed.weight".into(), &[CHAR_VOCAB, c.parsing.char_dim], Init::Normal(1.0));
            b.add(
                "encoder.char_conv.weight".into(),
                &[CHAR_WIDTH * c.parsing.char_dim, c.d_model],
                Init::XavierUniform,
            );
            b.add("encoder.char_conv.bias".into(), &[c.d_model], Init::Zeros);
            off
        });
        // The options for imported models come last, so that the paper's layout is unchanged.
        let source_embed = c
            .import
            .source_vocab_size
            .map(|v| b.add("encoder.embed.weight".into(), &[v, c.d_model], Init::Normal(std)));
        let output_bias = c.import.output_bias.then(|| b.add("output.bias".into(), &[c.vocab_size], Init::Zeros));
        let index = b.entries.iter().enumerate().map(|(i, e)| (e.name.clone(), i)).collect();
        ParamLayout {
            entries: b.entries,
            index,
            total: b.total,
            offsets: ModelOffsets {
                embed,
                positions,
                embed_len: if leave_out.embedding { 0 } else { c.vocab_size * c.d_model },
                positions_len: c.max_positions * c.d_model,
                encoder,
                decoder,
                pointer,
                pointer_len: if leave_out.linear_weights { 0 } else { c.d_model * c.d_model },
                closer,
                closer_len: (c.vocab_size + MAX_OPEN_DEPTH) * c.d_model,
                chars,
                chars_len,
                source_embed,
                source_embed_len: c.source_vocab() * c.d_model,
                leave_out,
                output_bias,
                vocab: c.vocab_size,
            },
        }
    }

    /// Total number of scalar parameters.
    pub fn total(&self) -> usize {
        self.total
    }

    /// All tensors in buffer order.
    pub fn entries(&self) -> &[ParamEntry] {
        &self.entries
    }

    /// The tensor called `name`.
    pub fn get(&self, name: &str) -> Option<&ParamEntry> {
        self.index.get(name).map(|&i| &self.entries[i])
    }

    /// This layout's buffer filled from `params`, laid out by `from` (a layout of the same
    /// configuration that holds every tensor this one does): each tensor copied by name. A buffer
    /// that is not `from`'s size, and a tensor `from` lacks or shapes otherwise, are an
    /// [`Error::Mismatch`].
    pub fn gather(&self, from: &ParamLayout, params: &[f32]) -> Result<Vec<f32>> {
        if params.len() != from.total() {
            return Err(Error::Mismatch(format!("{} parameters given for a layout of {}", params.len(), from.total())));
        }
        let mut out = Vec::with_capacity(self.total);
        for e in &self.entries {
            let src = from
                .get(&e.name)
                .ok_or_else(|| Error::Mismatch(format!("the source layout has no tensor '{}' to gather", e.name)))?;
            if src.shape != e.shape || out.len() != e.offset {
                return Err(Error::Mismatch(format!(
                    "the layouts disagree on '{}': shape {:?} there, {:?} here",
                    e.name, src.shape, e.shape
                )));
            }
            out.extend_from_slice(&params[src.range()]);
        }
        Ok(out)
    }

    /// A freshly initialised parameter buffer (deterministic for `seed`).
    pub fn init(&self, seed: u64) -> Vec<f32> {
        let mut data = vec![0f32; self.total];
        let mut rng = Rng::new(seed);
        for e in &self.entries {
            let dst = &mut data[e.range()];
            match e.init {
                Init::Zeros => dst.fill(0.0),
                Init::Ones => dst.fill(1.0),
                Init::XavierUniform => {
                    let (fan_out, fan_in) = (e.shape[0], e.shape[1]);
                    let a = (6.0 / (fan_in + fan_out) as f64).sqrt();
                    for v in dst.iter_mut() {
                        *v = ((rng.uniform() * 2.0 - 1.0) * a) as f32;
                    }
                }
                Init::Normal(std) => {
                    for v in dst.iter_mut() {
                        *v = (rng.normal() * std as f64) as f32;
                    }
                }
            }
        }
        data
    }
}

/// Multiply-adds of one forward pass, per token, counted layer by layer (docs/cost.md writes the
/// formulas out): the Table 2 "training cost" column computed rather than estimated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Per source token: the encoder layers, plus the decoder's encoder–decoder keys and values
    /// (computed once per source token per decoder layer).
    pub per_src_token: u64,
    /// Per target token: the decoder layers and the output projection.
    pub per_tgt_token: u64,
}

/// How a training step relates to a forward pass: the backward pass computes two products (the
/// gradients of the inputs and of the weights) for every product of the forward.
pub const TRAIN_STEP_OVER_FORWARD: u64 = 3;

impl Cost {
    /// Forward multiply-adds of a batch of `src` and `tgt` tokens.
    pub fn forward(&self, src: u64, tgt: u64) -> u64 {
        src * self.per_src_token + tgt * self.per_tgt_token
    }

    /// FLOPs (2 per multiply-add) of a training step on `src` + `tgt` tokens.
    pub fn train_step_flops(&self, src: u64, tgt: u64) -> f64 {
        2.0 * TRAIN_STEP_OVER_FORWARD as f64 * self.forward(src, tgt) as f64
    }
}

/// The forward multiply-adds per token of `c` on sentences of `src_len` source and `tgt_len`
/// target tokens (the attention products grow with them). Matrix products only: softmax, layer
/// normalisation, the embedding lookup and the activations are left out (each is linear in
/// d_model, not quadratic). Decoder self-attention is counted over all `tgt_len` positions, as a
/// batched training forward computes it (the causal mask hides half).
pub fn cost(c: &ModelConfig, src_len: u64, tgt_len: u64) -> Cost {
    let (d, f, v) = (c.d_model as u64, c.d_ff as u64, c.vocab_size as u64);
    let (a, o) = ((c.n_heads * c.d_k) as u64, (c.n_heads * c.d_v) as u64);
    let layers = c.n_layers as u64;
    // Projections of one attention sublayer for its own queries, keys and values, and its output.
    let self_proj = d * (2 * a + o) + o * d;
    let ffn = 2 * d * f;
    let enc_layer = self_proj + (a + o) * src_len + ffn;
    let dec_layer = self_proj + (a + o) * tgt_len + (d * a + o * d + (a + o) * src_len) + ffn;
    Cost { per_src_token: layers * (enc_layer + d * (a + o)), per_tgt_token: layers * dec_layer + d * v }
}
