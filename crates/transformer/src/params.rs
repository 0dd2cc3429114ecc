//! The flat parameter layout: every tensor's hierarchical name, shape and offset into one `Vec<f32>`
//! shared by parameters, gradients and both Adam moments; and initialisation.
//!
//! Initialisation follows tensor2tensor/fairseq: Xavier-uniform for every projection matrix (each of
//! W^Q, W^K, W^V, W^O, W_1, W_2 on its own fan-in/fan-out), zero biases, LayerNorm gain 1 and bias 0,
//! the shared embedding N(0, d_model^-0.5) (so that after the √d_model scale tokens have unit
//! variance), learned positions N(0, d_model^-0.5).

use crate::config::{ModelConfig, Positions};
use crate::rng::Rng;
use std::collections::HashMap;

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
}

/// Offsets of one LayerNorm.
#[derive(Clone, Copy, Debug)]
pub struct NormOffsets {
    /// Gain (D).
    pub gamma: usize,
    /// Bias (D).
    pub beta: usize,
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
    /// Encoder layers, bottom first.
    pub encoder: Vec<EncoderLayerOffsets>,
    /// Decoder layers, bottom first.
    pub decoder: Vec<DecoderLayerOffsets>,
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
}

impl Builder {
    fn add(&mut self, name: String, shape: &[usize], init: Init) -> usize {
        let offset = self.total;
        self.total += shape.iter().product::<usize>();
        self.entries.push(ParamEntry { name, shape: shape.to_vec(), offset, init });
        offset
    }

    fn attention(&mut self, p: &str, c: &ModelConfig) -> AttnOffsets {
        let (d, hk, hv) = (c.d_model, c.n_heads * c.d_k, c.n_heads * c.d_v);
        let w_qkv = self.add(format!("{p}.w_q"), &[hk, d], Init::XavierUniform);
        self.add(format!("{p}.w_k"), &[hk, d], Init::XavierUniform);
        self.add(format!("{p}.w_v"), &[hv, d], Init::XavierUniform);
        let b_qkv = self.add(format!("{p}.b_q"), &[hk], Init::Zeros);
        self.add(format!("{p}.b_k"), &[hk], Init::Zeros);
        self.add(format!("{p}.b_v"), &[hv], Init::Zeros);
        let w_o = self.add(format!("{p}.w_o"), &[d, hv], Init::XavierUniform);
        let b_o = self.add(format!("{p}.b_o"), &[d], Init::Zeros);
        AttnOffsets { w_qkv, b_qkv, w_o, b_o }
    }

    fn norm(&mut self, p: &str, d: usize) -> NormOffsets {
        let gamma = self.add(format!("{p}.gamma"), &[d], Init::Ones);
        let beta = self.add(format!("{p}.beta"), &[d], Init::Zeros);
        NormOffsets { gamma, beta }
    }

    fn ffn(&mut self, p: &str, c: &ModelConfig) -> FfnOffsets {
        let w_1 = self.add(format!("{p}.w_1"), &[c.d_ff, c.d_model], Init::XavierUniform);
        let b_1 = self.add(format!("{p}.b_1"), &[c.d_ff], Init::Zeros);
        let w_2 = self.add(format!("{p}.w_2"), &[c.d_model, c.d_ff], Init::XavierUniform);
        let b_2 = self.add(format!("{p}.b_2"), &[c.d_model], Init::Zeros);
        FfnOffsets { w_1, b_1, w_2, b_2 }
    }
}

/// Parameter count of a configuration (exact: the size of its layout).
pub fn param_count(c: &ModelConfig) -> usize {
    ParamLayout::new(c).total()
}

impl ParamLayout {
    /// The layout of a model with configuration `c`.
    pub fn new(c: &ModelConfig) -> Self {
        let mut b = Builder { entries: Vec::new(), total: 0 };
        let std = (c.d_model as f32).powf(-0.5);
        let embed = b.add("embed.weight".into(), &[c.vocab_size, c.d_model], Init::Normal(std));
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
        let index = b.entries.iter().enumerate().map(|(i, e)| (e.name.clone(), i)).collect();
        ParamLayout {
            entries: b.entries,
            index,
            total: b.total,
            offsets: ModelOffsets { embed, positions, encoder, decoder },
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
