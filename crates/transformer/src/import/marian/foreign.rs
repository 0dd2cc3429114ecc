//! A Marian model in neutral form: what `hf.rs` reads a Hugging Face directory into and
//! `native.rs` a native Marian model into, and what `assemble.rs` builds our checkpoint and
//! tokenizer from; with the pieces both formats share (vocabularies, the tensors
//! by name, the FFN activation's name) and the import's result ([`Imported`]).

use crate::checkpoint::Checkpoint;
use crate::config::{Activation, SinusoidLayout};
use crate::error::{Error, Result};
use crate::import::pickle::Tensor;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// An import error that names `path`.
pub(crate) fn err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Import(format!("{}: {msg}", path.display()))
}

/// A vocabulary as Marian numbers it: the piece of every id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocab {
    /// Pieces by id.
    pub pieces: Vec<String>,
}

impl Vocab {
    /// Pieces in the vocabulary.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether it has no piece.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The id of `piece`.
    pub fn id(&self, piece: &str) -> Option<u32> {
        self.pieces.iter().position(|p| p == piece).map(|i| i as u32)
    }

    /// Piece → id, as a tokenizer looks pieces up.
    pub(crate) fn ids_by_piece(&self) -> HashMap<String, u32> {
        self.pieces.iter().enumerate().map(|(i, p)| (p.clone(), i as u32)).collect()
    }
}

/// What the tokenizer of an imported model is made of.
#[derive(Clone, Debug)]
pub struct TokenizerParts {
    /// The source and target SentencePiece models (`.spm` bytes).
    pub source_spm: Vec<u8>,
    /// Target side.
    pub target_spm: Vec<u8>,
    /// The source vocabulary (the only one when shared).
    pub source_vocab: Vocab,
    /// The target vocabulary, when separate.
    pub target_vocab: Option<Vocab>,
    /// `</s>`, `<unk>` and (HF) `<pad>` pieces.
    pub eos: String,
    /// Unknown piece.
    pub unk: String,
    /// Padding piece, the decoder's first input (a native Marian vocabulary has none: the import
    /// appends `<pad>` after its last id, as Hugging Face's converter does).
    pub pad: String,
}

/// An imported model: the checkpoint, its tokenizer's parts, and what was read.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The model, in our layout and id order.
    pub checkpoint: Checkpoint,
    /// Vocabularies and SentencePiece models.
    pub tokenizer: TokenizerParts,
    /// The files read, and the format (`hf-safetensors`, `hf-pytorch`, `marian-npz`).
    pub source: String,
    /// The directory the model was read from: `write` never writes into it.
    pub dir: PathBuf,
}

/// What our configuration takes from a Marian Transformer; the rest is the same for every one
/// (post-norm, sinusoids, a bias on the logits, no dropout).
pub(crate) struct Architecture {
    /// Layers of each stack.
    pub(crate) layers: usize,
    /// D.
    pub(crate) d_model: usize,
    /// H.
    pub(crate) heads: usize,
    /// F.
    pub(crate) d_ff: usize,
    /// Positions the sinusoids are computed for.
    pub(crate) max_positions: usize,
    /// LayerNorm ε.
    pub(crate) layer_norm_eps: f32,
    /// The FFN's activation.
    pub(crate) activation: Activation,
    /// Where the sines and cosines of a position vector are.
    pub(crate) sinusoid_layout: SinusoidLayout,
    /// Whether embeddings are scaled by √D.
    pub(crate) scale_embedding: bool,
    /// A position table (max_positions, D) to learn from, in place of the sinusoids (a
    /// CTranslate2 model whose table is no sinusoid layout of ours).
    pub(crate) learned_positions: Option<Vec<f32>>,
}

/// One side's vocabulary as the foreign model numbers it: its size, its special ids and where its
/// embedding is.
pub(crate) struct Side {
    /// Foreign ids (the size of the side's id map).
    pub(crate) ids: usize,
    /// The decoder's first input (Marian's padding token), where the vocabulary has one.
    pub(crate) start: Option<u32>,
    /// End of sentence.
    pub(crate) eos: u32,
    /// Unknown.
    pub(crate) unk: u32,
    /// Rows of the stored embedding (a native vocabulary's appended `<pad>` has none).
    pub(crate) rows: usize,
    /// The embedding's foreign names: the first one present is read.
    pub(crate) embedding: Vec<String>,
}

/// A Marian model as read, in either format: our configuration, the foreign tensors and their
/// names, the vocabularies' special ids and the tokenizer's parts.
pub(crate) struct ForeignModel {
    /// The directory read (errors that name no one file name it).
    pub(crate) dir: PathBuf,
    /// `hf-safetensors`, `hf-pytorch` or `marian-npz`.
    pub(crate) format: &'static str,
    /// The architecture (our configuration but for the vocabulary sizes, which the id maps give).
    pub(crate) architecture: Architecture,
    /// The target vocabulary, whose embedding is also the output projection.
    pub(crate) target: Side,
    /// The source vocabulary, when the encoder has an embedding of its own.
    pub(crate) source: Option<Side>,
    /// The foreign tensors, by foreign name.
    pub(crate) tensors: Tensors,
    /// The foreign name of each of our layers' tensors.
    pub(crate) names: Names,
    /// The foreign name of the output logits' bias (zero where absent).
    pub(crate) output_bias: String,
    /// Whether matrices are stored (in, out), as Marian's `y = x·W`, rather than ours (out, in).
    pub(crate) transposed: bool,
    /// The tokenizer's files.
    pub(crate) tokenizer: TokenizerParts,
}

/// The tensors of a model, by name, with their shapes, from whichever file holds them.
pub(crate) struct Tensors {
    /// Foreign name → tensor.
    pub(crate) map: BTreeMap<String, Tensor>,
    /// The file they were read from, named in errors.
    pub(crate) path: PathBuf,
}

impl Tensors {
    /// Takes tensor `name`, which must have `shape` (up to dimensions of 1) and finite values.
    pub(crate) fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let t = self.map.remove(name).ok_or_else(|| err(&self.path, format!("no tensor {name}")))?;
        let n: usize = shape.iter().product();
        // A (1, n) bias and an (n) one are the same values.
        let squeeze = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
        if squeeze(&t.shape) != squeeze(shape) || t.data.len() != n {
            return Err(err(&self.path, format!("{name} has shape {:?}, the configuration needs {shape:?}", t.shape)));
        }
        if let Some(i) = t.data.iter().position(|x| !x.is_finite()) {
            return Err(err(&self.path, format!("{name} holds {} at element {i}: the model is corrupt", t.data[i])));
        }
        Ok(t.data)
    }

    /// Takes the first of `names` that is there.
    pub(crate) fn take_any(&mut self, names: &[&str], shape: &[usize]) -> Result<Vec<f32>> {
        match names.iter().find(|n| self.map.contains_key(**n)) {
            Some(n) => self.take(n, shape),
            None => Err(err(&self.path, format!("none of the tensors {names:?} is there"))),
        }
    }

    /// Whether tensor `name` is there.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }
}

/// The foreign name of each of our layers' tensors (attention, FFN, LayerNorm), in one format's
/// naming scheme: `hf::names` and `native::names` walk the same layers, each spelling its own.
pub(crate) struct Names {
    /// Our `encoder.layers.{i}.self_attn.w_q` etc. → foreign name.
    pub(crate) map: HashMap<String, String>,
}

/// The activation named by HF (`activation_function`) or Marian (`transformer-ffn-activation`).
pub(crate) fn activation(name: &str, path: &Path) -> Result<Activation> {
    Ok(match name {
        "relu" => Activation::Relu,
        "swish" | "silu" => Activation::Swish,
        "gelu" => Activation::Gelu,
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
        other => {
            return Err(err(
                path,
                format!("FFN activation {other:?} is not supported (relu, swish, gelu, gelu_new are)"),
            ))
        }
    })
}
