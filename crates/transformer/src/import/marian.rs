//! Marian / OPUS-MT models: a Hugging Face `MarianMTModel` directory or a native Marian model,
//! read into a checkpoint of this engine and the vocabularies of a tokenizer.
//!
//! What differs from the paper, and how each becomes a [`ModelConfig`] option (docs/deviations.md,
//! `imported-architectures`):
//! - the FFN activation: Marian's `transformer-ffn-activation` / HF's `activation_function`
//!   (swish for OPUS-MT) → `activation`;
//! - a bias on the output logits (`decoder_ff_logit_out_b` / `final_logits_bias`) → `output_bias`;
//! - sines in the first half of the position vector, cosines in the second → `sinusoid_layout`
//!   (`halves` for HF's frequencies, `marian` for Marian's own);
//! - separate source and target vocabularies → `source_vocab_size`;
//! - LayerNorm ε (1e-5 in HF's port) → `layer_norm_eps`; positions → `max_positions`;
//! - the decoder's first input (Marian's padding token, a zero row) → our BOS row ([`IdMap`]).
//!
//! The rows of the embeddings and of the bias are put in our id order ([`IdMap`]); the rows the
//! import adds (our padding row, and BOS for native models) are zero, and their logits are masked
//! with a bias of −10⁹ wherever the original model has no such token, so that softmax and
//! search see exactly the original vocabulary.

use super::files::{read_json_object, read_spm, read_text};
use super::npz::{read_npz, Array};
use super::pickle::{read_state_dict, Tensor};
use super::IdMap;
use crate::checkpoint::Checkpoint;
use crate::config::{Activation, ModelConfig, Positions, SinusoidLayout};
use crate::data::marian_tokenizer::{MarianSpecials, MarianTokenizer};
use crate::data::sentencepiece::SentencePiece;
use crate::data::tokenizer::Tokenizer;
use crate::error::{Error, Result};
use crate::params::ParamLayout;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The logit bias of rows that do not exist in the imported model: their probability is exactly
/// zero (exp(−10⁹) underflows) and no search ever picks them.
pub const MASKED_LOGIT: f32 = -1e9;

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
    /// The directory the model was read from: [`write`] never writes into it.
    pub dir: PathBuf,
}

fn err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Import(format!("{}: {msg}", path.display()))
}

/// Imports the Marian model in `dir`: a Hugging Face directory (`config.json` with
/// `model.safetensors` or `pytorch_model.bin`) or a native one (`*.npz`, with `decoder.yml` naming
/// the vocabularies, or `*.yml` vocabularies beside it).
pub fn import(dir: &Path) -> Result<Imported> {
    if !dir.is_dir() {
        return Err(err(dir, "not a directory: give the directory of a Marian or Hugging Face model"));
    }
    if dir.join("config.json").is_file() {
        import_hf(dir)
    } else if find_npz(dir)?.is_some() {
        import_native(dir)
    } else {
        Err(err(
            dir,
            "neither config.json (a Hugging Face MarianMTModel directory) nor a .npz model (native Marian) is there",
        ))
    }
}

/// A Hugging Face vocabulary (`vocab.json`: piece → id) as pieces by id; ids must be 0..n.
fn hf_vocab(path: &Path) -> Result<Vocab> {
    parse_hf_vocab(&read_text(path, "a vocabulary")?, path)
}

/// [`Vocab`] from the text of a Hugging Face `vocab.json` (piece → id, ids 0..n); `path` names the
/// file in errors.
pub fn parse_hf_vocab(text: &str, path: &Path) -> Result<Vocab> {
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| err(path, format!("not valid JSON: {e}")))?;
    let map = json.as_object().ok_or_else(|| err(path, "not a JSON object of piece → id"))?;
    let mut pieces = vec![None; map.len()];
    for (piece, id) in map {
        let id = id.as_u64().ok_or_else(|| err(path, format!("the id of {piece:?} is not an integer")))? as usize;
        match pieces.get_mut(id) {
            Some(slot @ None) => *slot = Some(piece.clone()),
            Some(Some(other)) => return Err(err(path, format!("id {id} is given to both {other:?} and {piece:?}"))),
            None => return Err(err(path, format!("id {id} of {piece:?} is outside 0..{}", map.len()))),
        }
    }
    Ok(Vocab { pieces: pieces.into_iter().map(|p| p.expect("every id is filled")).collect() })
}

/// The HF config's value of `key`, or the `transformers` default when absent.
struct HfConfig<'a> {
    json: &'a serde_json::Value,
    path: &'a Path,
}

impl HfConfig<'_> {
    fn usize(&self, key: &str, default: usize) -> Result<usize> {
        match self.json.get(key) {
            None | Some(serde_json::Value::Null) => Ok(default),
            Some(v) => v.as_u64().map(|v| v as usize).ok_or_else(|| err(self.path, format!("{key} is not an integer"))),
        }
    }
    fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        match self.json.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(_) => self.usize(key, 0).map(Some),
        }
    }
    fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.json.get(key) {
            None | Some(serde_json::Value::Null) => Ok(default),
            Some(v) => v.as_bool().ok_or_else(|| err(self.path, format!("{key} is not true or false"))),
        }
    }
    fn str(&self, key: &str, default: &str) -> Result<String> {
        match self.json.get(key) {
            None | Some(serde_json::Value::Null) => Ok(default.to_string()),
            Some(v) => v.as_str().map(str::to_string).ok_or_else(|| err(self.path, format!("{key} is not a string"))),
        }
    }
}

/// The activation named by HF (`activation_function`) or Marian (`transformer-ffn-activation`).
fn activation(name: &str, path: &Path) -> Result<Activation> {
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

/// The tensors of a model, by name, with their shapes, from whichever file holds them.
struct Tensors {
    map: BTreeMap<String, Tensor>,
    path: PathBuf,
}

impl Tensors {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
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

    fn take_any(&mut self, names: &[&str], shape: &[usize]) -> Result<Vec<f32>> {
        match names.iter().find(|n| self.map.contains_key(**n)) {
            Some(n) => self.take(n, shape),
            None => Err(err(&self.path, format!("none of the tensors {names:?} is there"))),
        }
    }

    fn has(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }
}

fn safetensors_file(path: &Path) -> Result<BTreeMap<String, Tensor>> {
    let bytes = std::fs::read(path).map_err(crate::io::io_err(path))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| err(path, format!("not safetensors: {e}")))?;
    let mut out = BTreeMap::new();
    for (name, view) in st.tensors() {
        let b = view.data();
        let data: Vec<f32> = match view.dtype() {
            safetensors::Dtype::F32 => {
                b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
            }
            safetensors::Dtype::F16 => {
                b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
            }
            safetensors::Dtype::BF16 => {
                b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
            }
            other => return Err(err(path, format!("{name}: dtype {other:?} is not read (F32, F16, BF16 are)"))),
        };
        out.insert(name, Tensor { shape: view.shape().to_vec(), data });
    }
    Ok(out)
}

/// Our parameters from a foreign model: fills the layout of `config` from `get`, a function of
/// our tensor name giving the foreign values (already in our orientation).
fn fill(config: &ModelConfig, mut get: impl FnMut(&str, &[usize]) -> Result<Vec<f32>>) -> Result<Vec<f32>> {
    let layout = ParamLayout::new(config);
    let mut params = vec![0f32; layout.total()];
    for e in layout.entries() {
        let v = get(&e.name, &e.shape)?;
        params[e.range()].copy_from_slice(&v);
    }
    Ok(params)
}

/// Embedding rows (V_foreign, D) in our id order: added rows, and ids past the foreign rows (a
/// native model's appended `<pad>`), are zero.
fn reorder_rows(rows: &[f32], d: usize, map: &IdMap) -> Vec<f32> {
    let mut out = vec![0f32; map.len() * d];
    for (ours, f) in map.order().iter().enumerate() {
        if let Some(f) = f.filter(|&f| (f as usize + 1) * d <= rows.len()) {
            out[ours * d..][..d].copy_from_slice(&rows[f as usize * d..][..d]);
        }
    }
    out
}

/// The output bias in our id order: added rows, and ids the foreign model has no logit for,
/// masked.
fn reorder_bias(bias: &[f32], map: &IdMap) -> Vec<f32> {
    map.order().iter().map(|f| f.and_then(|f| bias.get(f as usize).copied()).unwrap_or(MASKED_LOGIT)).collect()
}

/// The foreign name of each of our layers' tensors (attention, FFN, LayerNorm), in one format's
/// naming scheme: [`hf_names`] and [`marian_names`] walk the same layers, each spelling its own.
struct Names {
    /// Our `encoder.layers.{i}.self_attn.w_q` etc. → foreign name.
    map: HashMap<String, String>,
}

fn hf_names(n_layers: usize, prefix: &str) -> Names {
    let mut map = HashMap::new();
    for side in ["encoder", "decoder"] {
        for i in 0..n_layers {
            let (ours, hf) = (format!("{side}.layers.{i}"), format!("{prefix}{side}.layers.{i}"));
            let mut attn = vec![("self_attn", "self_attn")];
            if side == "decoder" {
                attn.push(("cross_attn", "encoder_attn"));
            }
            for (a, h) in attn {
                for (w, p) in [("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")] {
                    map.insert(format!("{ours}.{a}.w_{w}"), format!("{hf}.{h}.{p}.weight"));
                    map.insert(format!("{ours}.{a}.b_{w}"), format!("{hf}.{h}.{p}.bias"));
                }
                map.insert(format!("{ours}.{a}_norm.gamma"), format!("{hf}.{h}_layer_norm.weight"));
                map.insert(format!("{ours}.{a}_norm.beta"), format!("{hf}.{h}_layer_norm.bias"));
            }
            for (o, h) in [("w_1", "fc1.weight"), ("b_1", "fc1.bias"), ("w_2", "fc2.weight"), ("b_2", "fc2.bias")] {
                map.insert(format!("{ours}.ffn.{o}"), format!("{hf}.{h}"));
            }
            map.insert(format!("{ours}.ffn_norm.gamma"), format!("{hf}.final_layer_norm.weight"));
            map.insert(format!("{ours}.ffn_norm.beta"), format!("{hf}.final_layer_norm.bias"));
        }
    }
    Names { map }
}

fn marian_names(n_layers: usize) -> Names {
    let mut map = HashMap::new();
    for side in ["encoder", "decoder"] {
        for i in 0..n_layers {
            let (ours, m) = (format!("{side}.layers.{i}"), format!("{side}_l{}", i + 1));
            let mut attn = vec![("self_attn", "self")];
            if side == "decoder" {
                attn.push(("cross_attn", "context"));
            }
            for (a, k) in attn {
                for w in ["q", "k", "v", "o"] {
                    map.insert(format!("{ours}.{a}.w_{w}"), format!("{m}_{k}_W{w}"));
                    map.insert(format!("{ours}.{a}.b_{w}"), format!("{m}_{k}_b{w}"));
                }
                map.insert(format!("{ours}.{a}_norm.gamma"), format!("{m}_{k}_Wo_ln_scale"));
                map.insert(format!("{ours}.{a}_norm.beta"), format!("{m}_{k}_Wo_ln_bias"));
            }
            for (o, k) in [("w_1", "W1"), ("b_1", "b1"), ("w_2", "W2"), ("b_2", "b2")] {
                map.insert(format!("{ours}.ffn.{o}"), format!("{m}_ffn_{k}"));
            }
            map.insert(format!("{ours}.ffn_norm.gamma"), format!("{m}_ffn_ffn_ln_scale"));
            map.insert(format!("{ours}.ffn_norm.beta"), format!("{m}_ffn_ffn_ln_bias"));
        }
    }
    Names { map }
}

fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

fn import_hf(dir: &Path) -> Result<Imported> {
    let cfg_path = dir.join("config.json");
    let json = read_json_object(&cfg_path)?;
    let c = HfConfig { json: &json, path: &cfg_path };
    let model_type = c.str("model_type", "marian")?;
    if model_type != "marian" {
        return Err(err(
            &cfg_path,
            format!("model_type is {model_type:?}: only Marian (MarianMTModel) models are read"),
        ));
    }
    if c.bool("normalize_before", false)? || c.bool("normalize_embedding", false)? {
        return Err(err(&cfg_path, "pre-norm or an embedding LayerNorm is not Marian's post-norm Transformer"));
    }
    let d = c.usize("d_model", 1024)?;
    let (el, dl) = (c.usize("encoder_layers", 12)?, c.usize("decoder_layers", 12)?);
    let (eh, dh) = (c.usize("encoder_attention_heads", 16)?, c.usize("decoder_attention_heads", 16)?);
    let (ef, df) = (c.usize("encoder_ffn_dim", 4096)?, c.usize("decoder_ffn_dim", 4096)?);
    if el != dl || eh != dh || ef != df {
        return Err(err(
            &cfg_path,
            format!(
                "encoder and decoder differ (layers {el}/{dl}, heads {eh}/{dh}, FFN {ef}/{df}): this engine's stacks have \
                 one shape"
            ),
        ));
    }
    if eh == 0 || d % eh != 0 {
        return Err(err(&cfg_path, format!("d_model {d} is not a multiple of the {eh} heads")));
    }
    let shared = c.bool("share_encoder_decoder_embeddings", true)?;
    if !c.bool("tie_word_embeddings", true)? {
        return Err(err(&cfg_path, "tie_word_embeddings = false (an output projection of its own) is not supported"));
    }
    let v_src = c.usize("vocab_size", 58101)?;
    let v_tgt = if shared { v_src } else { c.opt_usize("decoder_vocab_size")?.unwrap_or(v_src) };
    let pad = c.usize("pad_token_id", 58100)? as u32;
    let eos = c.usize("eos_token_id", 0)? as u32;
    let start = c.usize("decoder_start_token_id", 58100)? as u32;
    if start != pad {
        return Err(err(
            &cfg_path,
            format!("decoder_start_token_id {start} is not the padding id {pad}, as in every Marian model"),
        ));
    }

    // Tokenizer files.
    let tok_cfg = match dir.join("tokenizer_config.json") {
        p if p.is_file() => read_json_object(&p)?,
        _ => serde_json::Value::Null,
    };
    let special = |key: &str, default: &str| -> String {
        match tok_cfg.get(key) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.get("content").and_then(|c| c.as_str()).unwrap_or(default).to_string(),
            None => default.to_string(),
        }
    };
    let (eos_piece, unk_piece, pad_piece) =
        (special("eos_token", "</s>"), special("unk_token", "<unk>"), special("pad_token", "<pad>"));
    let separate = tok_cfg.get("separate_vocabs").and_then(|v| v.as_bool()).unwrap_or(false) || !shared;
    let source_vocab = hf_vocab(&dir.join("vocab.json"))?;
    let target_vocab = if separate { Some(hf_vocab(&dir.join("target_vocab.json"))?) } else { None };
    let tgt_vocab = target_vocab.as_ref().unwrap_or(&source_vocab);
    for (v, size, name) in [(&source_vocab, v_src, "vocab.json"), (tgt_vocab, v_tgt, "the target vocabulary")] {
        if v.pieces.len() != size {
            return Err(err(dir, format!("{name} has {} pieces, config.json says {size}", v.pieces.len())));
        }
    }
    let id_of = |v: &Vocab, piece: &str, what: &str| {
        v.id(piece).ok_or_else(|| err(dir, format!("the vocabulary has no {what} token {piece:?}")))
    };
    let tgt_map = IdMap::new(v_tgt, Some(pad), eos, id_of(tgt_vocab, &unk_piece, "unknown")?)?;
    if tgt_vocab.pieces[eos as usize] != eos_piece || tgt_vocab.pieces[pad as usize] != pad_piece {
        return Err(err(
            dir,
            format!("config.json's eos/pad ids {eos}/{pad} are not {eos_piece:?}/{pad_piece:?} in the vocabulary"),
        ));
    }
    let src_map = if separate {
        let src_pad = source_vocab.id(&pad_piece);
        Some(IdMap::new(
            v_src,
            src_pad,
            id_of(&source_vocab, &eos_piece, "end")?,
            id_of(&source_vocab, &unk_piece, "unknown")?,
        )?)
    } else {
        None
    };

    let config = ModelConfig {
        n_layers: el,
        d_model: d,
        d_ff: ef,
        n_heads: eh,
        d_k: d / eh,
        d_v: d / eh,
        dropout: 0.0,
        attention_dropout: 0.0,
        label_smoothing: 0.0,
        positions: Positions::Sinusoidal,
        max_positions: c.usize("max_position_embeddings", 1024)?,
        vocab_size: tgt_map.len(),
        layer_norm_eps: 1e-5,
        activation: activation(&c.str("activation_function", "gelu")?, &cfg_path)?,
        output_bias: true,
        source_vocab_size: src_map.as_ref().map(IdMap::len),
        sinusoid_layout: SinusoidLayout::Halves,
        scale_embedding: c.bool("scale_embedding", false)?,
        ..ModelConfig::base()
    };
    config.validate()?;

    let (map, format) = if dir.join("model.safetensors").is_file() {
        (safetensors_file(&dir.join("model.safetensors"))?, "hf-safetensors")
    } else if dir.join("pytorch_model.bin").is_file() {
        (read_state_dict(&dir.join("pytorch_model.bin"))?, "hf-pytorch")
    } else {
        return Err(err(dir, "neither model.safetensors nor pytorch_model.bin is there"));
    };
    let file = dir.join(if format == "hf-safetensors" { "model.safetensors" } else { "pytorch_model.bin" });
    // MarianMTModel prefixes its names with `model.`; a bare MarianModel does not.
    let prefix = if map.keys().any(|k| k.starts_with("model.")) { "model." } else { "" };
    let mut t = Tensors { map, path: file };
    let names = hf_names(el, prefix);
    let p = |s: &str| format!("{prefix}{s}");
    let tgt_emb =
        t.take_any(&[&p("decoder.embed_tokens.weight"), &p("shared.weight"), "lm_head.weight"], &[v_tgt, d])?;
    let src_emb = match src_map {
        Some(_) => Some(t.take_any(&[&p("encoder.embed_tokens.weight")], &[v_src, d])?),
        None => None,
    };
    let bias = if t.has("final_logits_bias") { t.take("final_logits_bias", &[v_tgt])? } else { vec![0.0; v_tgt] };
    let params = fill(&config, |name, shape| match name {
        "embed.weight" => Ok(reorder_rows(&tgt_emb, d, &tgt_map)),
        "encoder.embed.weight" => {
            Ok(reorder_rows(src_emb.as_ref().expect("separate"), d, src_map.as_ref().expect("separate")))
        }
        "output.bias" => Ok(reorder_bias(&bias, &tgt_map)),
        n => {
            let foreign = names.map.get(n).ok_or_else(|| err(dir, format!("no source for our tensor {n}")))?;
            t.take(foreign, shape)
        }
    })?;
    let parts = TokenizerParts {
        source_spm: read_spm(&dir.join("source.spm"))?,
        target_spm: read_spm(&dir.join("target.spm"))?,
        source_vocab,
        target_vocab,
        eos: eos_piece,
        unk: unk_piece,
        pad: pad_piece,
    };
    Ok(Imported {
        checkpoint: checkpoint(config, params, format),
        tokenizer: parts,
        source: format.to_string(),
        dir: dir.to_path_buf(),
    })
}

/// Writes an import as `out/model.safetensors` and `out/tokenizer.json` (the checkpoint tied to
/// the tokenizer by its hash), creating `out` if needed; returns the two paths.
///
/// Refuses an `out` that is the directory the model was read from, or whose output files are
/// files of that directory (through links): an import never overwrites what it read. Everything
/// is checked before the first file is written; both files are written under temporary names and
/// renamed into place once both are written, and a failure removes the temporary files and the
/// directories this import made, so a failed import leaves no partial output.
pub fn write(imported: &Imported, out: &Path) -> Result<(PathBuf, PathBuf)> {
    let (ckpt_path, tok_path) = (out.join("model.safetensors"), out.join("tokenizer.json"));
    refuse_input_dir(&imported.dir, out, &[&ckpt_path, &tok_path])?;
    let t = &imported.tokenizer;
    let map = |v: &Vocab| v.pieces.iter().enumerate().map(|(i, p)| (p.clone(), i as u32)).collect();
    let specials = MarianSpecials {
        eos_token: t.eos.clone(),
        unk_token: t.unk.clone(),
        pad_token: t.pad.clone(),
        clean_up_tokenization_spaces: false,
    };
    let spm = |bytes: &[u8], which: &str| {
        SentencePiece::from_bytes(bytes)
            .map_err(|e| err(&imported.dir, format!("the {which} SentencePiece model: {e}")))
    };
    let tokenizer = MarianTokenizer::new(
        spm(&t.source_spm, "source")?,
        spm(&t.target_spm, "target")?,
        map(&t.source_vocab),
        t.target_vocab.as_ref().map(map),
        specials,
    )?;
    crate::checkpoint::check_finite(&imported.dir, &imported.checkpoint)?;
    // The directories this import creates, deepest first, to remove again if it fails.
    let created: Vec<PathBuf> =
        out.ancestors().take_while(|d| !d.as_os_str().is_empty() && !d.exists()).map(Path::to_path_buf).collect();
    std::fs::create_dir_all(out).map_err(crate::io::io_err(out))?;
    // Both files are written under temporary names and renamed into place only when both are
    // written, so a failure leaves neither, and never a new tokenizer beside an old model.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tag = format!("{}.{}", std::process::id(), SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let (ckpt_tmp, tok_tmp) =
        (out.join(format!(".model.safetensors.import.{tag}")), out.join(format!(".tokenizer.json.import.{tag}")));
    let result = (|| {
        tokenizer.save(&tok_tmp)?;
        let tokens = Tokenizer::load(&tok_tmp)?;
        if tokens.vocab_size() != imported.checkpoint.config.vocab_size
            || tokens.source_vocab_size() != imported.checkpoint.config.source_vocab_size
        {
            return Err(err(out, "the tokenizer's vocabulary does not match the model's (an import bug)"));
        }
        let mut ckpt = imported.checkpoint.clone();
        ckpt.vocab_hash = tokens.hash().to_string();
        crate::checkpoint::save(&ckpt_tmp, &ckpt)?;
        std::fs::rename(&ckpt_tmp, &ckpt_path).map_err(crate::io::io_err(&ckpt_path))?;
        std::fs::rename(&tok_tmp, &tok_path).map_err(crate::io::io_err(&tok_path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&ckpt_tmp);
        let _ = std::fs::remove_file(&tok_tmp);
        for d in &created {
            // Only while empty (remove_dir refuses a directory with anything in it).
            let _ = std::fs::remove_dir(d);
        }
    }
    result.map(|()| (ckpt_path, tok_path))
}

/// Refuses an output directory `out` that is the input directory `input`, or output `files` that
/// already exist as files of `input` (through a link).
fn refuse_input_dir(input: &Path, out: &Path, files: &[&Path]) -> Result<()> {
    let Ok(input) = input.canonicalize() else { return Ok(()) };
    let same_dir = out.canonicalize().is_ok_and(|o| o == input);
    let linked = files.iter().find(|f| f.canonicalize().is_ok_and(|f| f.parent() == Some(input.as_path())));
    if same_dir || linked.is_some() {
        return Err(err(
            out,
            format!(
                "this is where the model is read from ({}): the import would overwrite its files; give --output \
                 another directory",
                input.display()
            ),
        ));
    }
    Ok(())
}

fn checkpoint(config: ModelConfig, params: Vec<f32>, format: &str) -> Checkpoint {
    let mut extra = BTreeMap::new();
    extra.insert("imported_from".to_string(), format.to_string());
    Checkpoint { config, step: 0, vocab_hash: String::new(), params, adam: None, extra }
}

fn find_npz(dir: &Path) -> Result<Option<PathBuf>> {
    // decoder.yml names the model; otherwise the one .npz of the directory.
    let dec = dir.join("decoder.yml");
    if dec.is_file() {
        let y = read_yaml(&dec)?;
        if let Some(m) = y.get("models").and_then(|m| m.first()) {
            return Ok(Some(dir.join(m)));
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(crate::io::io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "npz"))
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(err(dir, format!("{} .npz files and no decoder.yml to say which is the model", found.len()))),
    }
}

/// A flat YAML mapping as Marian writes it: `key: value` lines, lists as `  - item` lines under
/// their key. Values are unquoted.
fn parse_yaml(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(item) = t.strip_prefix("- ") {
            if let Some(k) = &last {
                out.entry(k.clone()).or_default().push(unquote(item.trim()));
            }
            continue;
        }
        if let Some((k, v)) = t.split_once(':') {
            let (k, v) = (k.trim().to_string(), v.trim());
            if v.is_empty() {
                out.insert(k.clone(), Vec::new());
            } else if let Some(inner) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                out.insert(k.clone(), inner.split(',').map(|s| unquote(s.trim())).filter(|s| !s.is_empty()).collect());
            } else {
                out.insert(k.clone(), vec![unquote(v)]);
            }
            last = Some(k);
        }
    }
    out
}

fn read_yaml(path: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let text = read_text(path, "a YAML file")?;
    Ok(parse_yaml(&text))
}

/// A YAML scalar without its quotes: `"…"` with its escapes, `'…'` with `''` for a quote.
fn unquote(s: &str) -> String {
    if let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        unescape_double(inner)
    } else if let Some(inner) = s.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
        inner.replace("''", "'")
    } else {
        s.to_string()
    }
}

/// YAML double-quoted escapes (a superset of JSON's): \\ \" \/ \0 \a \b \t \n \v \f \r \e \  \N
/// \_ \L \P \xXX \uXXXX \UXXXXXXXX.
fn unescape_double(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let hex = |it: &mut std::str::Chars, n: usize| -> Option<char> {
            let h: String = it.by_ref().take(n).collect();
            u32::from_str_radix(&h, 16).ok().and_then(char::from_u32)
        };
        let e = match it.next() {
            Some('0') => Some('\0'),
            Some('a') => Some('\x07'),
            Some('b') => Some('\x08'),
            Some('t') | Some('\t') => Some('\t'),
            Some('n') => Some('\n'),
            Some('v') => Some('\x0b'),
            Some('f') => Some('\x0c'),
            Some('r') => Some('\r'),
            Some('e') => Some('\x1b'),
            Some(' ') => Some(' '),
            Some('N') => Some('\u{85}'),
            Some('_') => Some('\u{a0}'),
            Some('L') => Some('\u{2028}'),
            Some('P') => Some('\u{2029}'),
            Some('x') => hex(&mut it, 2),
            Some('u') => hex(&mut it, 4),
            Some('U') => hex(&mut it, 8),
            Some(other) => Some(other),
            None => None,
        };
        out.extend(e);
    }
    out
}

/// A Marian vocabulary: `.yml` (`piece: id` per line) or `.spm` (the SentencePiece model's own
/// pieces and ids).
fn marian_vocab(path: &Path) -> Result<Vocab> {
    let is_spm = path.extension().is_some_and(|e| e == "spm" || e == "model");
    if is_spm {
        let sp = SentencePiece::from_bytes(&read_spm(path)?)?;
        let pieces = (0..sp.len() as u32).map(|i| sp.id_to_piece(i).unwrap_or_default().to_string()).collect();
        return Ok(Vocab { pieces });
    }
    parse_yml_vocab(&read_text(path, "a vocabulary")?, path)
}

/// [`Vocab`] from the text of a Marian `.yml` vocabulary (`piece: id` lines, ids 0..n); `path`
/// names the file in errors.
pub fn parse_yml_vocab(text: &str, path: &Path) -> Result<Vocab> {
    let mut pieces: Vec<Option<String>> = Vec::new();
    // Ids run 0..n, one a line, so none can reach the number of lines.
    let lines = text.lines().count();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_end();
        if t.trim().is_empty() || t.starts_with('#') {
            continue;
        }
        let (k, v) = t.rsplit_once(':').ok_or_else(|| err(path, format!("line {}: not `piece: id`", n + 1)))?;
        let id: usize = v.trim().parse().map_err(|_| err(path, format!("line {}: {v:?} is not an id", n + 1)))?;
        if id >= lines {
            return Err(err(
                path,
                format!("line {}: id {id} is beyond the file's {lines} lines (ids must run 0..n without gaps)", n + 1),
            ));
        }
        if pieces.len() <= id {
            pieces.resize(id + 1, None);
        }
        if pieces[id].is_some() {
            return Err(err(path, format!("line {}: id {id} given twice", n + 1)));
        }
        pieces[id] = Some(unquote(k.trim()));
    }
    let pieces: Option<Vec<String>> = pieces.into_iter().collect();
    pieces.map(|pieces| Vocab { pieces }).ok_or_else(|| err(path, "its ids are not 0..n without gaps"))
}

fn import_native(dir: &Path) -> Result<Imported> {
    let npz_path = find_npz(dir)?.ok_or_else(|| err(dir, "no .npz model"))?;
    let mut arrays = read_npz(&npz_path)?;
    let yml = match arrays.remove("special:model.yml") {
        // YAML text then one or more NULs (Marian reads up to the first).
        Some(Array::Bytes(b)) => String::from_utf8_lossy(b.split(|&c| c == 0).next().unwrap_or(&[])).to_string(),
        _ => match npz_path.with_extension("yml") {
            p if p.is_file() => read_text(&p, "a model YAML file")?,
            _ => return Err(err(&npz_path, "no special:model.yml inside it and no model .yml beside it")),
        },
    };
    let y = parse_yaml(&yml);
    let get = |k: &str| y.get(k).and_then(|v| v.first()).map(String::as_str);
    let num = |k: &str, default: usize| -> Result<usize> {
        match get(k) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| err(&npz_path, format!("model.yml: {k} = {v:?} is not a number"))),
        }
    };
    let yes = |k: &str| get(k) == Some("true");
    let kind = get("type").unwrap_or("transformer");
    if kind != "transformer" {
        return Err(err(&npz_path, format!("model type {kind:?}: only Marian's transformer is read")));
    }
    for (k, want) in [
        ("transformer-postprocess", "dan"),
        ("transformer-preprocess", ""),
        ("transformer-decoder-autoreg", "self-attention"),
    ] {
        let v = get(k).unwrap_or(want);
        if v != want {
            return Err(err(
                &npz_path,
                format!("{k}: {v:?} is not supported (the paper's post-norm layer wants {want:?})"),
            ));
        }
    }
    if let Some(v) = get("transformer-postprocess-emb").filter(|v| !v.is_empty() && *v != "d") {
        return Err(err(&npz_path, format!("transformer-postprocess-emb: {v:?} (only dropout, \"d\", is supported)")));
    }
    if num("transformer-ffn-depth", 2)? != 2 || ![0, 2].contains(&num("transformer-decoder-ffn-depth", 0)?) {
        return Err(err(&npz_path, "an FFN depth other than 2 is not supported"));
    }
    for k in [
        "right-left",
        "layer-normalization",
        "transformer-no-projection",
        "transformer-train-position-embeddings",
        "transformer-disable-position-embeddings",
    ] {
        if yes(k) {
            return Err(err(&npz_path, format!("{k}: true is not supported")));
        }
    }
    if get("transformer-postprocess-top").is_some_and(|v| !v.is_empty()) {
        return Err(err(&npz_path, "transformer-postprocess-top (a final LayerNorm) is not supported"));
    }
    let dec_ffn = num("transformer-decoder-dim-ffn", 0)?;
    if dec_ffn != 0 && dec_ffn != num("transformer-dim-ffn", 2048)? {
        return Err(err(&npz_path, format!("transformer-decoder-dim-ffn {dec_ffn} differs from the encoder's")));
    }
    if get("transformer-tied-layers").is_some_and(|v| !v.is_empty())
        || y.keys().any(|k| k.starts_with("transformer-aan"))
            && get("transformer-decoder-autoreg") == Some("average-attention")
    {
        return Err(err(&npz_path, "tied layers or average attention are not supported"));
    }
    let d = num("dim-emb", 512)?;
    let (el, dl) = (num("enc-depth", 6)?, num("dec-depth", 6)?);
    let heads = num("transformer-heads", 8)?;
    let ffn = num("transformer-dim-ffn", 2048)?;
    if el != dl {
        return Err(err(
            &npz_path,
            format!("encoder depth {el} and decoder depth {dl} differ: this engine's stacks are equal"),
        ));
    }
    if heads == 0 || d % heads != 0 {
        return Err(err(&npz_path, format!("dim-emb {d} is not a multiple of the {heads} heads")));
    }
    // Wemb serves encoder and decoder with tied-embeddings-all or -src; the output projection is
    // the decoder's embedding with tied-embeddings(-all).
    let tied_all = yes("tied-embeddings-all") || yes("tied-embeddings-src");
    if !yes("tied-embeddings-all") && !yes("tied-embeddings") {
        return Err(err(
            &npz_path,
            "an untied output layer (decoder_ff_logit_out_Wt; tied-embeddings: false) is not supported",
        ));
    }

    // Vocabularies: decoder.yml's `vocabs`, else vocab(.src/.trg).yml beside the model.
    let dec = dir.join("decoder.yml");
    let vocab_paths: Vec<PathBuf> = match dec.is_file().then(|| read_yaml(&dec)).transpose()? {
        Some(y) if y.get("vocabs").is_some_and(|v| v.len() == 2) => y["vocabs"].iter().map(|v| dir.join(v)).collect(),
        _ => {
            let shared = dir.join("vocab.yml");
            if shared.is_file() {
                vec![shared.clone(), shared]
            } else {
                vec![dir.join("vocab.src.yml"), dir.join("vocab.trg.yml")]
            }
        }
    };
    // Marian's decoder starts from a zero vector; the import gives it an id of its own, `<pad>`
    // after the last (a zero row whose logit is masked), as Hugging Face's converter does.
    let with_pad = |mut v: Vocab| {
        if v.id("<pad>").is_none() {
            v.pieces.push("<pad>".into());
        }
        v
    };
    let (source_vocab, target_vocab) = (marian_vocab(&vocab_paths[0])?, marian_vocab(&vocab_paths[1])?);
    // The embeddings' rows: the vocabularies as Marian has them.
    let (v_src, v_tgt) = (source_vocab.len(), target_vocab.len());
    // Two files with the same pieces are one vocabulary.
    let separate = source_vocab != target_vocab;
    if !tied_all && !separate {
        return Err(err(
            &npz_path,
            "separate source and target embeddings (encoder_Wemb, decoder_Wemb) over one vocabulary are not supported",
        ));
    }
    let source_vocab = with_pad(source_vocab);
    let target_vocab = if separate { Some(with_pad(target_vocab)) } else { None };
    if tied_all && separate && target_vocab.as_ref() != Some(&source_vocab) {
        return Err(err(&npz_path, "tied-embeddings-all with two different vocabularies"));
    }
    let tgt_vocab = target_vocab.as_ref().unwrap_or(&source_vocab);
    let specials = |v: &Vocab, path: &Path| -> Result<(u32, u32, u32)> {
        let eos = v.id("</s>").ok_or_else(|| err(path, "no </s> in the vocabulary"))?;
        let unk = v.id("<unk>").ok_or_else(|| err(path, "no <unk> in the vocabulary"))?;
        Ok((eos, unk, v.id("<pad>").expect("appended")))
    };
    let (teos, tunk, tpad) = specials(tgt_vocab, &vocab_paths[1])?;
    let tgt_map = IdMap::new(tgt_vocab.pieces.len(), Some(tpad), teos, tunk)?;
    let src_map = if separate && !tied_all {
        let (seos, sunk, spad) = specials(&source_vocab, &vocab_paths[0])?;
        Some(IdMap::new(source_vocab.pieces.len(), Some(spad), seos, sunk)?)
    } else {
        None
    };
    let config = ModelConfig {
        n_layers: el,
        d_model: d,
        d_ff: ffn,
        n_heads: heads,
        d_k: d / heads,
        d_v: d / heads,
        dropout: 0.0,
        attention_dropout: 0.0,
        label_smoothing: 0.0,
        positions: Positions::Sinusoidal,
        max_positions: num("max-length", 0)?.max(1024),
        vocab_size: tgt_map.len(),
        layer_norm_eps: 1e-6,
        activation: activation(get("transformer-ffn-activation").unwrap_or("swish"), &npz_path)?,
        output_bias: true,
        source_vocab_size: src_map.as_ref().map(IdMap::len),
        sinusoid_layout: SinusoidLayout::Marian,
        scale_embedding: true,
        ..ModelConfig::base()
    };
    config.validate()?;
    let map = arrays
        .into_iter()
        .filter_map(|(k, a)| match a {
            Array::Float(t) => Some((k, t)),
            Array::Bytes(_) => None,
        })
        .collect();
    let mut t = Tensors { map, path: npz_path.clone() };
    let names = marian_names(el);
    let tgt_emb = if separate && !tied_all {
        t.take_any(&["decoder_Wemb", "Wemb"], &[v_tgt, d])?
    } else {
        t.take_any(&["Wemb", "decoder_Wemb"], &[v_tgt, d])?
    };
    let src_emb = match &src_map {
        Some(_) => Some(t.take_any(&["encoder_Wemb"], &[v_src, d])?),
        None => None,
    };
    let bias =
        if t.has("decoder_ff_logit_out_b") { t.take("decoder_ff_logit_out_b", &[v_tgt])? } else { vec![0.0; v_tgt] };
    let params = fill(&config, |name, shape| match name {
        "embed.weight" => Ok(reorder_rows(&tgt_emb, d, &tgt_map)),
        "encoder.embed.weight" => {
            Ok(reorder_rows(src_emb.as_ref().expect("separate"), d, src_map.as_ref().expect("separate")))
        }
        "output.bias" => Ok(reorder_bias(&bias, &tgt_map)),
        n => {
            let foreign = names.map.get(n).ok_or_else(|| err(dir, format!("no source for our tensor {n}")))?;
            if shape.len() == 2 {
                // Marian stores matrices (in, out): y = x·W.
                let v = t.take(foreign, &[shape[1], shape[0]])?;
                Ok(transpose(&v, shape[1], shape[0]))
            } else {
                t.take(foreign, shape)
            }
        }
    })?;
    let spm = |names: &[&str]| -> Result<Vec<u8>> {
        let p = names.iter().map(|n| dir.join(n)).find(|p| p.is_file());
        let p = p.ok_or_else(|| err(dir, format!("no SentencePiece model ({})", names.join(" or "))))?;
        read_spm(&p)
    };
    let parts = TokenizerParts {
        source_spm: spm(&["source.spm", "source.model"])?,
        target_spm: spm(&["target.spm", "target.model"])?,
        source_vocab,
        target_vocab,
        eos: "</s>".into(),
        unk: "<unk>".into(),
        pad: "<pad>".into(),
    };
    Ok(Imported {
        checkpoint: checkpoint(config, params, "marian-npz"),
        tokenizer: parts,
        source: "marian-npz".into(),
        dir: dir.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_scalars_and_lists() {
        let y = parse_yaml("models:\n  - model.npz\nvocabs: [a.yml, 'b''s.yml']\nbeam-size: 4\nx: \"\\u2581a\\\"\"\n");
        assert_eq!(y["models"], vec!["model.npz"]);
        assert_eq!(y["vocabs"], vec!["a.yml", "b's.yml"]);
        assert_eq!(y["beam-size"], vec!["4"]);
        assert_eq!(y["x"], vec!["▁a\""]);
    }
}
