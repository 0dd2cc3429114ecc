//! Model configuration: the columns of Table 3 (§6.2) plus the few choices the paper leaves open,
//! with the parser's inputs and imported models' options in groups of their own, and a literal
//! preset for every row of the table.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The largest sizes a model may have ([`ModelConfig::validate`]); importers check a foreign
/// header's counts against them before building anything from them.
pub const MAX_LAYERS: usize = 1 << 10;
pub const MAX_D_MODEL: usize = 1 << 16;
pub const MAX_D_FF: usize = 1 << 18;
pub const MAX_POSITIONS: usize = 1 << 20;

/// How positions enter the model (§3.5; Table 3 row E).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Positions {
    /// Fixed sinusoids, `PE(pos, 2i) = sin(pos / 10000^(2i/d))`, `PE(pos, 2i+1) = cos(…)`.
    Sinusoidal,
    /// A learned (max_positions, d_model) table, initialised N(0, d_model^-0.5).
    Learned,
}

/// The FFN's activation (Eq. 2 uses ReLU; models imported from other toolkits may use another).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// max(0, x), the paper's (Eq. 2).
    #[default]
    Relu,
    /// x · σ(x) (SiLU; Marian's `swish`, OPUS-MT's default).
    Swish,
    /// x · Φ(x), Φ the standard normal CDF (the exact, erf form; Hugging Face's `gelu`).
    Gelu,
    /// The tanh approximation of GELU, 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) (`gelu_new`).
    #[serde(rename = "gelu_tanh")]
    GeluTanh,
    /// The sigmoid approximation of GELU, x · σ(1.702x): Marian's `gelu` (what its
    /// `transformer-ffn-activation: gelu` computes; Hugging Face's port reads it as the exact form).
    #[serde(rename = "gelu_sigmoid")]
    GeluSigmoid,
}

impl Activation {
    /// The name used in configurations (`relu`, `swish`, `gelu`, `gelu_tanh`).
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Swish => "swish",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::GeluSigmoid => "gelu_sigmoid",
        }
    }
}

/// How the sinusoids of §3.5 are laid out across the d_model columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinusoidLayout {
    /// The paper's: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…).
    #[default]
    Interleaved,
    /// The same frequencies, sines in the first d/2 columns and cosines in the last d/2
    /// (Hugging Face's Marian).
    Halves,
    /// Sines then cosines at tensor2tensor's frequencies, pos · exp(−i · ln 10000 / (d/2 − 1))
    /// (Marian's own).
    Marian,
}

/// The hyper-parameters of one encoder–decoder Transformer: the paper's, then the parser's
/// ([`ParsingInputs`]) and imported models' ([`ImportOptions`]) groups.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// N: layers in the encoder and, equally many, in the decoder.
    pub n_layers: usize,
    /// d_model: width of every sub-layer output and embedding.
    pub d_model: usize,
    /// d_ff: inner width of the position-wise FFN (Eq. 2).
    pub d_ff: usize,
    /// h: attention heads.
    pub n_heads: usize,
    /// d_k: query/key width per head.
    pub d_k: usize,
    /// d_v: value width per head.
    pub d_v: usize,
    /// P_drop: residual dropout on sub-layer outputs and on embeddings + positions (§5.4).
    pub dropout: f32,
    /// Dropout on attention weights (named in §6.3; 0.0 in the base model, as in tensor2tensor).
    pub attention_dropout: f32,
    /// ε_ls: label smoothing of the training loss (§5.4).
    pub label_smoothing: f32,
    /// Sinusoidal or learned positions.
    pub positions: Positions,
    /// Longest sequence (source or target, including BOS/EOS) the model accepts.
    pub max_positions: usize,
    /// Size of the one shared source–target vocabulary (§3.4).
    pub vocab_size: usize,
    /// ε inside LayerNorm (1e-6 as in tensor2tensor; the paper is silent).
    pub layer_norm_eps: f32,
    /// What the parser adds to the paper's inputs (all off in the paper's model).
    #[serde(flatten)]
    pub parsing: ParsingInputs,
    /// The options of models imported from other toolkits (the paper's values by default).
    #[serde(flatten)]
    pub import: ImportOptions,
}

/// Parsing only: the inputs the constituency parser adds to the paper's model (named deviations,
/// docs/deviations.md); off, the model is the paper's. Serialised flat, beside the paper's
/// options ([`ModelConfig`]'s `#[serde(flatten)]`), so configs and checkpoints read as before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParsingInputs {
    /// Parsing only: the next-word pointer adds W_p · enc_out[j] to each decoder input, j the
    /// source word the tree is at (`model/pointer.rs`; a named deviation, `next-word-pointer`).
    #[serde(default)]
    pub source_pointer: bool,
    /// Parsing only: the next-closer input adds C[c] + H[k] to each decoder input, c the token
    /// that closes the innermost open constituent (EOS when none is open) and k how many are open,
    /// C and H learned tables that start at zero (`model/pointer.rs`; a named deviation,
    /// `next-closer-input`).
    #[serde(default)]
    pub next_closer: bool,
    /// Parsing only, with `next_closer`: whether the depth row H[k] is added (true, the default);
    /// false adds C[c] alone, the innermost open constituent's closer (docs/parsing.md).
    #[serde(default = "yes")]
    pub next_closer_depth: bool,
    /// Parsing only, with `next_closer`: in training, the probability that a decoder position
    /// gets no next-closer input at all (the whole C[c] + H[k] term left out, kept terms not
    /// rescaled), so the decoder cannot lean on it alone (docs/parsing.md). 0 by default.
    #[serde(default)]
    pub next_closer_dropout: f32,
    /// Parsing only: the width of the character encoder's byte embedding, 0 (the default, the
    /// paper's) for none. With it, every source word's bytes go through a small CNN (filters of
    /// width 3, D of them, max-pooled) whose output is added to each of the word's piece
    /// embeddings (`kernels/cpu/char_cnn.rs`; a named deviation, `char-word-encoder`).
    #[serde(default)]
    pub char_dim: usize,
}

impl Default for ParsingInputs {
    /// None of the inputs, as in the paper (and in a config that omits them).
    fn default() -> Self {
        ParsingInputs {
            source_pointer: false,
            next_closer: false,
            next_closer_depth: true,
            next_closer_dropout: 0.0,
            char_dim: 0,
        }
    }
}

/// The architecture options of models imported from other toolkits (Marian, OPUS-MT); each
/// default is the paper's choice. Serialised flat, beside the paper's options ([`ModelConfig`]'s
/// `#[serde(flatten)]`), so configs and checkpoints read as before.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportOptions {
    /// The FFN's activation (ReLU in the paper; see [`Activation`]).
    #[serde(default)]
    pub activation: Activation,
    /// Whether a learned bias (V) is added to the output logits (Marian's `final_logits_bias`;
    /// the paper has none).
    #[serde(default)]
    pub output_bias: bool,
    /// A source vocabulary of its own, with its own embedding, of this size; `None` (the
    /// paper's) shares one vocabulary and one embedding between source and target (§3.4). The
    /// target embedding stays tied to the output projection either way.
    #[serde(default)]
    pub source_vocab_size: Option<usize>,
    /// The sinusoids' layout and frequencies (with sinusoidal positions).
    #[serde(default)]
    pub sinusoid_layout: SinusoidLayout,
    /// Whether embeddings are multiplied by √d_model (§3.4; true in the paper).
    #[serde(default = "yes")]
    pub scale_embedding: bool,
}

impl Default for ImportOptions {
    /// The paper's architecture (and what a config that omits the options gets).
    fn default() -> Self {
        ImportOptions {
            activation: Activation::Relu,
            output_bias: false,
            source_vocab_size: None,
            sinusoid_layout: SinusoidLayout::Interleaved,
            scale_embedding: true,
        }
    }
}

fn yes() -> bool {
    true
}

/// The paper's vocabulary for WMT14 En–De (§5.1), used by the presets.
pub const PAPER_VOCAB: usize = 37000;

/// A named row of Table 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    /// "base".
    Base,
    /// (A) 1 head of width 512.
    A1,
    /// (A) 4 heads of width 128.
    A2,
    /// (A) 16 heads of width 32.
    A3,
    /// (A) 32 heads of width 16.
    A4,
    /// (B) d_k = 16.
    B1,
    /// (B) d_k = 32.
    B2,
    /// (C) N = 2.
    C1,
    /// (C) N = 4.
    C2,
    /// (C) N = 8.
    C3,
    /// (C) d_model = 256.
    C4,
    /// (C) d_model = 1024.
    C5,
    /// (C) d_ff = 1024.
    C6,
    /// (C) d_ff = 4096.
    C7,
    /// (D) P_drop = 0.
    D1,
    /// (D) P_drop = 0.2.
    D2,
    /// (D) ε_ls = 0.
    D3,
    /// (D) ε_ls = 0.2.
    D4,
    /// (E) learned positional embeddings.
    E,
    /// "big".
    Big,
}

impl Preset {
    /// Every row, in the table's order.
    pub const ALL: [Preset; 20] = {
        use Preset::*;
        [Base, A1, A2, A3, A4, B1, B2, C1, C2, C3, C4, C5, C6, C7, D1, D2, D3, D4, E, Big]
    };

    /// The row's name in Table 3 (`base`, `a1`, …, `e`, `big`).
    pub const fn name(self) -> &'static str {
        PRESET_NAMES[self as usize]
    }

    /// The row named `name`.
    pub fn from_name(name: &str) -> Result<Self> {
        match Preset::ALL.iter().find(|p| p.name() == name) {
            Some(&p) => Ok(p),
            None => Err(Error::Config(format!("unknown preset '{name}'; choose one of {}", PRESET_NAMES.join(", ")))),
        }
    }

    /// The row's configuration, at the paper's vocabulary.
    pub const fn config(self) -> ModelConfig {
        use Preset::*;
        match self {
            Base => ModelConfig::base(),
            // (A) heads and key/value widths at constant computation.
            A1 => row(6, 512, 2048, 1, 512, 512, 0.1, 0.1, S),
            A2 => row(6, 512, 2048, 4, 128, 128, 0.1, 0.1, S),
            A3 => row(6, 512, 2048, 16, 32, 32, 0.1, 0.1, S),
            A4 => row(6, 512, 2048, 32, 16, 16, 0.1, 0.1, S),
            // (B) smaller key width only.
            B1 => row(6, 512, 2048, 8, 16, 64, 0.1, 0.1, S),
            B2 => row(6, 512, 2048, 8, 32, 64, 0.1, 0.1, S),
            // (C) model size.
            C1 => row(2, 512, 2048, 8, 64, 64, 0.1, 0.1, S),
            C2 => row(4, 512, 2048, 8, 64, 64, 0.1, 0.1, S),
            C3 => row(8, 512, 2048, 8, 64, 64, 0.1, 0.1, S),
            C4 => row(6, 256, 2048, 8, 32, 32, 0.1, 0.1, S),
            C5 => row(6, 1024, 2048, 8, 128, 128, 0.1, 0.1, S),
            C6 => row(6, 512, 1024, 8, 64, 64, 0.1, 0.1, S),
            C7 => row(6, 512, 4096, 8, 64, 64, 0.1, 0.1, S),
            // (D) regularisation.
            D1 => row(6, 512, 2048, 8, 64, 64, 0.0, 0.1, S),
            D2 => row(6, 512, 2048, 8, 64, 64, 0.2, 0.1, S),
            D3 => row(6, 512, 2048, 8, 64, 64, 0.1, 0.0, S),
            D4 => row(6, 512, 2048, 8, 64, 64, 0.1, 0.2, S),
            // (E) learned positional embeddings.
            E => row(6, 512, 2048, 8, 64, 64, 0.1, 0.1, L),
            Big => ModelConfig::big(),
        }
    }

    /// The paper's parameter count for the row (Table 3, ×10^6 at vocabulary 37000), where
    /// listed.
    pub fn paper_params_millions(self) -> Option<f64> {
        ModelConfig::paper_params_millions(self.name())
    }

    /// The paper's Table 3 dev (newstest2013) perplexity per word-piece and BLEU of the row (no
    /// checkpoint averaging there); `None` for big, which Table 3 lists without them.
    pub fn paper_dev_scores(self) -> Option<(f64, f64)> {
        use Preset::*;
        Some(match self {
            Base => (4.92, 25.8),
            A1 => (5.29, 24.9),
            A2 => (5.00, 25.5),
            A3 => (4.91, 25.8),
            A4 => (5.01, 25.4),
            B1 => (5.16, 25.1),
            B2 => (5.01, 25.4),
            C1 => (6.11, 23.7),
            C2 => (5.19, 25.3),
            C3 => (4.88, 25.5),
            C4 => (5.75, 24.5),
            C5 => (4.66, 26.0),
            C6 => (5.12, 25.4),
            C7 => (4.75, 26.2),
            D1 => (5.77, 24.6),
            D2 => (4.95, 25.5),
            D3 => (4.67, 25.3),
            D4 => (5.47, 25.7),
            E => (4.92, 25.7),
            Big => return None,
        })
    }
}

/// A change to a model's Table 3 columns: each field given replaces the model's, the others stay.
/// What a row of Table 3 does to its base ([`ModelChange::between`]), and what `ablate` trains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelChange {
    /// N.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_layers: Option<usize>,
    /// d_model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub d_model: Option<usize>,
    /// d_ff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub d_ff: Option<usize>,
    /// h.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_heads: Option<usize>,
    /// d_k.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub d_k: Option<usize>,
    /// d_v.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub d_v: Option<usize>,
    /// P_drop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropout: Option<f32>,
    /// ε_ls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_smoothing: Option<f32>,
    /// Sinusoidal or learned positions (row E).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub positions: Option<Positions>,
}

impl ModelChange {
    /// The Table 3 columns in which `to` differs from `from`, at `to`'s values.
    pub fn between(from: &ModelConfig, to: &ModelConfig) -> ModelChange {
        fn differs<T: PartialEq + Copy>(a: T, b: T) -> Option<T> {
            (a != b).then_some(b)
        }
        ModelChange {
            n_layers: differs(from.n_layers, to.n_layers),
            d_model: differs(from.d_model, to.d_model),
            d_ff: differs(from.d_ff, to.d_ff),
            n_heads: differs(from.n_heads, to.n_heads),
            d_k: differs(from.d_k, to.d_k),
            d_v: differs(from.d_v, to.d_v),
            dropout: differs(from.dropout, to.dropout),
            label_smoothing: differs(from.label_smoothing, to.label_smoothing),
            positions: differs(from.positions, to.positions),
        }
    }

    /// `c` with this change made.
    pub fn apply(&self, c: &ModelConfig) -> ModelConfig {
        ModelConfig {
            n_layers: self.n_layers.unwrap_or(c.n_layers),
            d_model: self.d_model.unwrap_or(c.d_model),
            d_ff: self.d_ff.unwrap_or(c.d_ff),
            n_heads: self.n_heads.unwrap_or(c.n_heads),
            d_k: self.d_k.unwrap_or(c.d_k),
            d_v: self.d_v.unwrap_or(c.d_v),
            dropout: self.dropout.unwrap_or(c.dropout),
            label_smoothing: self.label_smoothing.unwrap_or(c.label_smoothing),
            positions: self.positions.unwrap_or(c.positions),
            ..c.clone()
        }
    }

    /// Whether no column is given.
    pub fn is_empty(&self) -> bool {
        *self == ModelChange::default()
    }
}

/// The columns given, `field=value` in Table 3's order: `n_heads=1, d_k=512, d_v=512`.
impl std::fmt::Display for ModelChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let positions = self.positions.map(|p| match p {
            Positions::Sinusoidal => "sinusoidal",
            Positions::Learned => "learned",
        });
        let columns = [
            ("n_layers", self.n_layers.map(|v| v.to_string())),
            ("d_model", self.d_model.map(|v| v.to_string())),
            ("d_ff", self.d_ff.map(|v| v.to_string())),
            ("n_heads", self.n_heads.map(|v| v.to_string())),
            ("d_k", self.d_k.map(|v| v.to_string())),
            ("d_v", self.d_v.map(|v| v.to_string())),
            ("dropout", self.dropout.map(|v| v.to_string())),
            ("label_smoothing", self.label_smoothing.map(|v| v.to_string())),
            ("positions", positions.map(str::to_string)),
        ];
        let shown: Vec<String> = columns.iter().filter_map(|(k, v)| Some(format!("{k}={}", v.as_ref()?))).collect();
        write!(f, "{}", shown.join(", "))
    }
}

/// Every named row of Table 3, in the table's order ([`Preset::name`] of [`Preset::ALL`]).
pub const PRESET_NAMES: [&str; 20] = [
    "base", "a1", "a2", "a3", "a4", "b1", "b2", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "d1", "d2", "d3", "d4", "e",
    "big",
];

/// One row of Table 3, every column spelled out. The rest are the paper's defaults.
#[allow(clippy::too_many_arguments)]
const fn row(
    n_layers: usize,
    d_model: usize,
    d_ff: usize,
    n_heads: usize,
    d_k: usize,
    d_v: usize,
    dropout: f32,
    label_smoothing: f32,
    positions: Positions,
) -> ModelConfig {
    ModelConfig {
        n_layers,
        d_model,
        d_ff,
        n_heads,
        d_k,
        d_v,
        dropout,
        attention_dropout: 0.0,
        label_smoothing,
        positions,
        max_positions: 1024,
        vocab_size: PAPER_VOCAB,
        layer_norm_eps: 1e-6,
        parsing: ParsingInputs {
            source_pointer: false,
            next_closer: false,
            next_closer_depth: true,
            next_closer_dropout: 0.0,
            char_dim: 0,
        },
        import: ImportOptions {
            activation: Activation::Relu,
            output_bias: false,
            source_vocab_size: None,
            sinusoid_layout: SinusoidLayout::Interleaved,
            scale_embedding: true,
        },
    }
}

use Positions::{Learned as L, Sinusoidal as S};

impl ModelConfig {
    /// Table 3 "base": N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1, ε_ls=0.1.
    pub const fn base() -> Self {
        row(6, 512, 2048, 8, 64, 64, 0.1, 0.1, S)
    }
    /// Table 3 "big": N=6, d_model=1024, d_ff=4096, h=16, d_k=d_v=64, P_drop=0.3.
    pub const fn big() -> Self {
        row(6, 1024, 4096, 16, 64, 64, 0.3, 0.1, S)
    }

    /// The preset of a Table 3 row by name (see [`Preset`]), at the paper's vocabulary.
    pub fn preset(name: &str) -> Result<Self> {
        Ok(Preset::from_name(name)?.config())
    }

    /// The paper's parameter count for a preset (Table 3, ×10^6 at vocabulary 37000), where listed.
    pub fn paper_params_millions(name: &str) -> Option<f64> {
        Some(match name {
            "base" => 65.0,
            "b1" => 58.0,
            "b2" => 60.0,
            "c1" => 36.0,
            "c2" => 50.0,
            "c3" => 80.0,
            "c4" => 28.0,
            "c5" => 168.0,
            "c6" => 53.0,
            "c7" => 90.0,
            "big" => 213.0,
            _ => return None,
        })
    }

    /// The source vocabulary's size: `source_vocab_size`, or the shared `vocab_size`.
    pub fn source_vocab(&self) -> usize {
        self.import.source_vocab_size.unwrap_or(self.vocab_size)
    }

    /// The settings of this configuration that differ from the paper's architecture (for models
    /// imported from other toolkits), as `name = value`; empty for every preset.
    pub fn departures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.import.activation != Activation::Relu {
            out.push(format!("activation = {}", self.import.activation.name()));
        }
        if self.import.output_bias {
            out.push("output_bias = true".into());
        }
        if let Some(v) = self.import.source_vocab_size {
            out.push(format!("source_vocab_size = {v}"));
        }
        if self.import.sinusoid_layout != SinusoidLayout::Interleaved {
            out.push(format!("sinusoid_layout = {:?}", self.import.sinusoid_layout).to_lowercase());
        }
        if !self.import.scale_embedding {
            out.push("scale_embedding = false".into());
        }
        out
    }

    /// Checks that every field is in range, naming the first that is not.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        for (name, v) in [
            ("n_layers", self.n_layers),
            ("d_model", self.d_model),
            ("d_ff", self.d_ff),
            ("n_heads", self.n_heads),
            ("d_k", self.d_k),
            ("d_v", self.d_v),
            ("max_positions", self.max_positions),
        ] {
            if v == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if self.vocab_size < crate::vocab::SPECIAL_TOKENS {
            return bad(format!(
                "vocab_size {} is smaller than the {} special tokens",
                self.vocab_size,
                crate::vocab::SPECIAL_TOKENS
            ));
        }
        for (name, p) in [
            ("dropout", self.dropout),
            ("attention_dropout", self.attention_dropout),
            ("label_smoothing", self.label_smoothing),
            ("next_closer_dropout", self.parsing.next_closer_dropout),
        ] {
            if !(0.0..1.0).contains(&p) {
                return bad(format!("{name} = {p} must lie in [0, 1)"));
            }
        }
        if !self.parsing.next_closer && (self.parsing.next_closer_dropout > 0.0 || !self.parsing.next_closer_depth) {
            return bad("next_closer_dropout and next_closer_depth = false refine the next-closer input: \
                        they need next_closer = true"
                .into());
        }
        if self.parsing.char_dim > 1024 {
            return bad(format!(
                "char_dim = {} is past 1024 (the character encoder's byte embedding)",
                self.parsing.char_dim
            ));
        }
        if let Some(v) = self.import.source_vocab_size {
            if !(crate::vocab::SPECIAL_TOKENS..=1 << 24).contains(&v) {
                return bad(format!(
                    "source_vocab_size {v} must lie between the {} special tokens and 2^24",
                    crate::vocab::SPECIAL_TOKENS
                ));
            }
        }
        if self.positions == Positions::Sinusoidal
            && self.import.sinusoid_layout == SinusoidLayout::Marian
            && self.d_model < 4
        {
            return bad(format!("Marian's sinusoid frequencies need d_model ≥ 4, got {}", self.d_model));
        }
        if self.positions == Positions::Sinusoidal && !self.d_model.is_multiple_of(2) {
            return bad(format!("sinusoidal positions need an even d_model, got {}", self.d_model));
        }
        if self.layer_norm_eps.is_nan() || self.layer_norm_eps <= 0.0 {
            return bad(format!("layer_norm_eps must be positive, got {}", self.layer_norm_eps));
        }
        // Upper bounds keep every size computable without overflow and reject corrupt configs
        // (from a damaged checkpoint, say) before they ask for absurd allocations.
        for (name, v, max) in [
            ("n_layers", self.n_layers, MAX_LAYERS),
            ("d_model", self.d_model, MAX_D_MODEL),
            ("d_ff", self.d_ff, MAX_D_FF),
            ("n_heads · d_k", self.n_heads.saturating_mul(self.d_k), 1 << 16),
            ("n_heads · d_v", self.n_heads.saturating_mul(self.d_v), 1 << 16),
            ("vocab_size", self.vocab_size, 1 << 24),
            ("max_positions", self.max_positions, MAX_POSITIONS),
        ] {
            if v > max {
                return bad(format!("{name} = {v} exceeds the supported maximum of {max}"));
            }
        }
        if self.max_positions * self.d_model > 1 << 28 {
            return bad(format!(
                "max_positions · d_model = {} exceeds 2^28 (the position table would not fit in memory)",
                self.max_positions * self.d_model
            ));
        }
        Ok(())
    }
}
