//! A Hugging Face `MarianMTModel` directory (`config.json`, `model.safetensors` or
//! `pytorch_model.bin`, and the tokenizer's files) read into the neutral [`ForeignModel`]: the
//! architecture from `config.json` with `transformers`' defaults, the vocabularies' special ids,
//! the tensors under their HF names.

use super::foreign::{activation, err, Architecture, ForeignModel, Names, Side, Tensors, TokenizerParts, Vocab};
use super::hf_tokenizer::{read_models, read_settings, read_vocabs};
use crate::config::SinusoidLayout;
use crate::data::marian_tokenizer::MarianSpecials;
use crate::error::Result;
use crate::import::files::read_json_object;
use crate::import::pickle::{read_state_dict, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// Reads the Hugging Face Marian model in `dir`.
pub(super) fn read(dir: &Path) -> Result<ForeignModel> {
    let cfg_path = dir.join("config.json");
    let json = read_json_object(&cfg_path)?;
    let c = HfConfig { json: &json, path: &cfg_path };
    let a = checked_config(&c)?;
    let settings = read_settings(dir)?;
    // `clean_up_tokenization_spaces` is not carried into the import: its tokenizer never cleans up.
    let MarianSpecials { eos_token: eos, unk_token: unk, pad_token: pad, .. } = settings.specials;
    let separate = settings.separate_vocabs || !a.shared;
    let (source_vocab, target_vocab) = read_vocabs(dir, separate)?;
    let ids = special_ids(dir, &a, [&eos, &unk, &pad], &source_vocab, target_vocab.as_ref(), separate)?;
    let architecture = architecture(&c, &a)?;
    let (map, format, file) = tensor_file(dir)?;
    // MarianMTModel prefixes its names with `model.`; a bare MarianModel does not.
    let prefix = if map.keys().any(|k| k.starts_with("model.")) { "model." } else { "" };
    let (source_spm, target_spm) = read_models(dir)?;
    let p = |s: &str| format!("{prefix}{s}");
    let target = Side {
        ids: a.v_tgt,
        start: Some(a.pad),
        eos: a.eos,
        unk: ids.target_unk,
        rows: a.v_tgt,
        embedding: vec![p("decoder.embed_tokens.weight"), p("shared.weight"), "lm_head.weight".into()],
    };
    let source = ids.source.map(|(start, eos, unk)| Side {
        ids: a.v_src,
        start,
        eos,
        unk,
        rows: a.v_src,
        embedding: vec![p("encoder.embed_tokens.weight")],
    });
    Ok(ForeignModel {
        dir: dir.to_path_buf(),
        format,
        architecture,
        target,
        source,
        tensors: Tensors { map, path: file },
        names: names(a.layers, prefix),
        output_bias: "final_logits_bias".into(),
        transposed: false,
        tokenizer: TokenizerParts { source_spm, target_spm, source_vocab, target_vocab, eos, unk, pad },
    })
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

/// What `config.json` says of the stacks and vocabularies, once checked to be what this engine
/// runs.
struct ConfigJson {
    d: usize,
    layers: usize,
    heads: usize,
    ffn: usize,
    /// `share_encoder_decoder_embeddings`.
    shared: bool,
    /// The source and target vocabularies' sizes.
    v_src: usize,
    v_tgt: usize,
    /// The padding id (also the decoder's start) and the end id.
    pad: u32,
    eos: u32,
}

fn checked_config(c: &HfConfig) -> Result<ConfigJson> {
    let cfg_path = c.path;
    let model_type = c.str("model_type", "marian")?;
    if model_type != "marian" {
        return Err(err(
            cfg_path,
            format!("model_type is {model_type:?}: only Marian (MarianMTModel) models are read"),
        ));
    }
    if c.bool("normalize_before", false)? || c.bool("normalize_embedding", false)? {
        return Err(err(cfg_path, "pre-norm or an embedding LayerNorm is not Marian's post-norm Transformer"));
    }
    let d = c.usize("d_model", 1024)?;
    let (el, dl) = (c.usize("encoder_layers", 12)?, c.usize("decoder_layers", 12)?);
    let (eh, dh) = (c.usize("encoder_attention_heads", 16)?, c.usize("decoder_attention_heads", 16)?);
    let (ef, df) = (c.usize("encoder_ffn_dim", 4096)?, c.usize("decoder_ffn_dim", 4096)?);
    if el != dl || eh != dh || ef != df {
        return Err(err(
            cfg_path,
            format!(
                "encoder and decoder differ (layers {el}/{dl}, heads {eh}/{dh}, FFN {ef}/{df}): this engine's stacks have \
                 one shape"
            ),
        ));
    }
    if eh == 0 || d % eh != 0 {
        return Err(err(cfg_path, format!("d_model {d} is not a multiple of the {eh} heads")));
    }
    let shared = c.bool("share_encoder_decoder_embeddings", true)?;
    if !c.bool("tie_word_embeddings", true)? {
        return Err(err(cfg_path, "tie_word_embeddings = false (an output projection of its own) is not supported"));
    }
    let v_src = c.usize("vocab_size", 58101)?;
    let v_tgt = if shared { v_src } else { c.opt_usize("decoder_vocab_size")?.unwrap_or(v_src) };
    let pad = c.usize("pad_token_id", 58100)? as u32;
    let eos = c.usize("eos_token_id", 0)? as u32;
    let start = c.usize("decoder_start_token_id", 58100)? as u32;
    if start != pad {
        return Err(err(
            cfg_path,
            format!("decoder_start_token_id {start} is not the padding id {pad}, as in every Marian model"),
        ));
    }
    Ok(ConfigJson { d, layers: el, heads: eh, ffn: ef, shared, v_src, v_tgt, pad, eos })
}

/// The special ids found by piece: the target's unknown id, and with separate vocabularies the
/// source's padding (where it has one), end and unknown ids.
struct SpecialIds {
    target_unk: u32,
    source: Option<(Option<u32>, u32, u32)>,
}

/// Checks the vocabularies' sizes against `config.json` and finds the special pieces
/// (`[eos, unk, pad]`) in them.
fn special_ids(
    dir: &Path,
    a: &ConfigJson,
    [eos, unk, pad]: [&str; 3],
    source_vocab: &Vocab,
    target_vocab: Option<&Vocab>,
    separate: bool,
) -> Result<SpecialIds> {
    let tgt_vocab = target_vocab.unwrap_or(source_vocab);
    for (v, size, name) in [(source_vocab, a.v_src, "vocab.json"), (tgt_vocab, a.v_tgt, "the target vocabulary")] {
        if v.pieces.len() != size {
            return Err(err(dir, format!("{name} has {} pieces, config.json says {size}", v.pieces.len())));
        }
    }
    let id_of = |v: &Vocab, piece: &str, what: &str| {
        v.id(piece).ok_or_else(|| err(dir, format!("the vocabulary has no {what} token {piece:?}")))
    };
    let target_unk = id_of(tgt_vocab, unk, "unknown")?;
    let source = if separate {
        let eos = id_of(source_vocab, eos, "end")?;
        Some((source_vocab.id(pad), eos, id_of(source_vocab, unk, "unknown")?))
    } else {
        None
    };
    Ok(SpecialIds { target_unk, source })
}

/// The architecture of `config.json`'s model: HF's port has LayerNorm ε 1e-5 and its own sinusoid
/// frequencies.
fn architecture(c: &HfConfig, a: &ConfigJson) -> Result<Architecture> {
    Ok(Architecture {
        layers: a.layers,
        d_model: a.d,
        heads: a.heads,
        d_ff: a.ffn,
        max_positions: c.usize("max_position_embeddings", 1024)?,
        layer_norm_eps: 1e-5,
        activation: activation(&c.str("activation_function", "gelu")?, c.path)?,
        sinusoid_layout: SinusoidLayout::Halves,
        scale_embedding: c.bool("scale_embedding", false)?,
        learned_positions: None,
    })
}

/// The model's tensors, the format's name and the file they were read from: `model.safetensors`
/// where there is one, else `pytorch_model.bin`.
fn tensor_file(dir: &Path) -> Result<(BTreeMap<String, Tensor>, &'static str, PathBuf)> {
    let (safetensors, pytorch) = (dir.join("model.safetensors"), dir.join("pytorch_model.bin"));
    if safetensors.is_file() {
        Ok((safetensors_file(&safetensors)?, "hf-safetensors", safetensors))
    } else if pytorch.is_file() {
        Ok((read_state_dict(&pytorch)?, "hf-pytorch", pytorch))
    } else {
        Err(err(dir, "neither model.safetensors nor pytorch_model.bin is there"))
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

/// The HF names of our layers' tensors (`{prefix}encoder.layers.{i}.self_attn.q_proj.weight` …).
fn names(n_layers: usize, prefix: &str) -> Names {
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
