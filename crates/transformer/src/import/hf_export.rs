//! A model as a Hugging Face `MarianMTModel` directory (`config.json`, `model.safetensors` under
//! the port's names with `final_logits_bias`, `generation_config.json`, the tokenizer's files),
//! which `transformers`, CTranslate2's `ct2-transformers-converter`, candle and optimum read: a
//! model trained here with our BPE vocabulary (its `tokenizer.json`, which
//! `PreTrainedTokenizerFast` loads), or a model imported from such a directory, fine-tuned or not
//! (its `vocab.json` and SentencePiece models, as `MarianTokenizer` reads them).
//!
//! The port's sinusoids put the sines in the first half of the position vector and the cosines in
//! the second; the paper's interleave them (sin at even dimensions, cos at odd). The two differ by
//! a fixed permutation π of the model dimension (our dimension 2i is the port's i, 2i + 1 is its
//! d/2 + i). Applied to every weight that reads the residual stream (its columns: embeddings,
//! query, key, value, first FFN layer) or writes it (its rows and bias: attention output, second
//! FFN layer) and to the LayerNorms' gains and biases (which normalise over the whole vector, so
//! they commute with any permutation), it makes the exported model compute the same function
//! exactly: its residual stream is ours with the dimensions renamed.
//!
//! What MarianConfig cannot state is refused by name: learned positions, Marian's own sinusoid
//! frequencies (a native Marian import: `export marian` writes it), GELU's sigmoid form, heads
//! narrower than d_model / heads, the parser's inputs, and separate vocabularies with our BPE
//! (an imported model's go out as `vocab.json` and `target_vocab.json`). The port's LayerNorm ε is fixed at 1e-5 (`nn.LayerNorm`'s);
//! ours is written, as `layer_norm_eps`, where the port ignores it.

use crate::checkpoint::Checkpoint;
use crate::config::{Activation, ModelConfig, Positions, SinusoidLayout};
use crate::data::tokenizer::Tokenizer;
use crate::error::{Error, Result};
use crate::params::ParamLayout;
use crate::vocab::{BOS, EOS, PAD, UNK};
use safetensors::tensor::{Dtype, TensorView};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file an export may write (none may exist before it).
const WRITTEN: [&str; 9] = [
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "target_vocab.json",
    "source.spm",
    "target.spm",
];

/// The LayerNorm ε of `transformers`' Marian port (`nn.LayerNorm`'s default).
pub const HF_LAYER_NORM_EPS: f32 = 1e-5;

/// The permutation of the model dimension from ours to the port's: `perm[j]` is where our
/// dimension `j` goes. The identity when the positions are already in halves.
pub fn dimension_permutation(c: &ModelConfig) -> Vec<usize> {
    let d = c.d_model;
    match c.import.sinusoid_layout {
        SinusoidLayout::Interleaved => (0..d).map(|j| if j % 2 == 0 { j / 2 } else { d / 2 + j / 2 }).collect(),
        _ => (0..d).collect(),
    }
}

/// Writes `ckpt` (with its BPE `tokenizer`, whose file holds `tokenizer_file`) as a MarianMTModel
/// directory `out` (created; it must not hold a model already); returns the files written.
pub fn export(ckpt: &Checkpoint, tokenizer: &Tokenizer, tokenizer_file: &[u8], out: &Path) -> Result<Vec<PathBuf>> {
    export_with(ckpt, tokenizer, tokenizer_file, out, false)
}

/// [`export`]; with `tool_defaults` (`--tool-defaults`, the `export-tool-defaults` departure) a
/// native Marian model goes out too, its sinusoids at Marian's frequencies becoming the port's
/// (which `transformers`' own `convert_marian_to_pytorch` does to every OPUS-MT model): the
/// positions change slightly, the tensors not at all.
pub fn export_with(
    ckpt: &Checkpoint,
    tokenizer: &Tokenizer,
    tokenizer_file: &[u8],
    out: &Path,
    tool_defaults: bool,
) -> Result<Vec<PathBuf>> {
    let ckpt = &*super::rounded_sinusoids_as_computed(ckpt);
    let c = &ckpt.config;
    c.validate()?;
    let activation = check_options(c, tool_defaults)?;
    let layout = ParamLayout::new(c);
    if ckpt.params.len() != layout.total() || tokenizer.vocab_size() != c.vocab_size {
        return Err(Error::Mismatch(format!(
            "export hf: the checkpoint has {} parameters and a vocabulary of {}; its configuration needs {} and the \
             tokenizer has {}",
            ckpt.params.len(),
            c.vocab_size,
            layout.total(),
            tokenizer.vocab_size()
        )));
    }
    if let Tokenizer::Marian(m) = tokenizer {
        return export_imported(ckpt, m, activation, out);
    }
    if c.import.source_vocab_size.is_some() {
        return Err(Error::Unsupported(
            "export hf: separate source and target vocabularies go out with a Marian tokenizer (an imported model's); \
             this model's tokenizer is our BPE"
                .into(),
        ));
    }
    let tensors = tensors(ckpt)?;
    let model = safetensors_bytes(&tensors)?;
    let eps: f64 = c.layer_norm_eps.to_string().parse().expect("an f32 prints as a number");
    let mut config =
        marian_config(c, activation, (c.vocab_size, c.vocab_size), [Some(BOS), Some(PAD), Some(EOS), Some(BOS)]);
    config["layer_norm_eps"] = serde_json::json!(eps);
    config["encoder_layerdrop"] = serde_json::json!(0.0);
    config["decoder_layerdrop"] = serde_json::json!(0.0);
    let config = json(config);
    let generation = json(serde_json::json!({
        "bos_token_id": BOS,
        "decoder_start_token_id": BOS,
        "eos_token_id": EOS,
        "forced_eos_token_id": EOS,
        "pad_token_id": PAD,
        // Our search never emits padding or the start token.
        "bad_words_ids": [[PAD], [BOS]],
        "max_length": 256,
        "num_beams": 4,
    }));
    let piece = |id: u32| tokenizer.piece_of_id(crate::data::tokenizer::Side::Target, id).unwrap_or_default();
    let tokenizer_config = json(serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": piece(PAD),
        "bos_token": piece(BOS),
        "eos_token": piece(EOS),
        "unk_token": piece(UNK),
        "model_max_length": c.max_positions,
        "clean_up_tokenization_spaces": false,
    }));
    let files: Vec<(&str, &[u8])> = vec![
        ("config.json", &config),
        ("model.safetensors", &model),
        ("generation_config.json", &generation),
        ("tokenizer.json", tokenizer_file),
        ("tokenizer_config.json", &tokenizer_config),
    ];
    crate::io::publish_new(out, &files, &WRITTEN).map_err(|e| Error::Input(format!("export hf: {e}")))
}

/// Refuses, by name, what MarianConfig cannot state; returns the activation's name there.
fn check_options(c: &ModelConfig, tool_defaults: bool) -> Result<&'static str> {
    let refuse = |what: String| Err(Error::Unsupported(format!("export hf: MarianConfig has no {what}")));
    if c.positions != Positions::Sinusoidal {
        return refuse("learned positions (model.positions = learned)".into());
    }
    if c.import.sinusoid_layout == SinusoidLayout::Marian && !tool_defaults {
        return refuse(
            "sinusoids at Marian's own frequencies (sinusoid_layout = marian); --tool-defaults writes them as the \
             port's, as transformers' own Marian converter does"
                .into(),
        );
    }
    if c.parsing.source_pointer || c.parsing.next_closer || c.parsing.char_dim > 0 {
        return refuse("parsing inputs (source_pointer, next_closer, char_dim)".into());
    }
    if c.d_k * c.n_heads != c.d_model || c.d_v != c.d_k {
        return refuse(format!("heads of d_k {} and d_v {} with d_model {}", c.d_k, c.d_v, c.d_model));
    }
    Ok(match c.import.activation {
        Activation::Relu => "relu",
        Activation::Swish => "swish",
        Activation::Gelu => "gelu",
        Activation::GeluTanh => "gelu_new",
        Activation::GeluSigmoid => return refuse("GELU's sigmoid form (activation = gelu_sigmoid)".into()),
    })
}

/// A tensor to write: its shape and little-endian f32 bytes.
type Tensor = (Vec<usize>, Vec<u8>);

/// The port's tensors by name, permuted.
fn tensors(ckpt: &Checkpoint) -> Result<BTreeMap<String, Tensor>> {
    let c = &ckpt.config;
    let layout = ParamLayout::new(c);
    let perm = dimension_permutation(c);
    let d = c.d_model;
    let mut out = BTreeMap::new();
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    // Columns of a (rows, d) matrix renamed: out[r][perm[j]] = v[r][j].
    let cols = |v: &[f32]| {
        let mut o = vec![0f32; v.len()];
        for (src, dst) in v.chunks(d).zip(o.chunks_mut(d)) {
            for (j, &x) in src.iter().enumerate() {
                dst[perm[j]] = x;
            }
        }
        o
    };
    // Rows of a (d, cols) matrix (or a d vector) renamed.
    let rows = |v: &[f32]| {
        let w = v.len() / d;
        let mut o = vec![0f32; v.len()];
        for (i, src) in v.chunks(w).enumerate() {
            o[perm[i] * w..][..w].copy_from_slice(src);
        }
        o
    };
    let mut put = |name: String, shape: Vec<usize>, v: Vec<f32>| {
        out.insert(name, (shape, bytes(&v)));
    };
    for e in layout.entries() {
        let v = &ckpt.params[e.range()];
        let shape = e.shape.clone();
        let n = e.name.as_str();
        if n == "embed.weight" {
            let t = cols(v);
            let names: &[&str] = match c.import.source_vocab_size {
                Some(_) => &["model.decoder.embed_tokens.weight"],
                None => {
                    &["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"]
                }
            };
            for &name in names {
                put(name.into(), shape.clone(), t.clone());
            }
            continue;
        }
        if n == "encoder.embed.weight" {
            put("model.encoder.embed_tokens.weight".into(), shape, cols(v));
            continue;
        }
        if n == "output.bias" {
            put("final_logits_bias".into(), vec![1, c.vocab_size], v.to_vec());
            continue;
        }
        let (side, rest) = n.split_once(".layers.").ok_or_else(|| unsupported(n))?;
        let (i, tail) = rest.split_once('.').ok_or_else(|| unsupported(n))?;
        let p = format!("model.{side}.layers.{i}");
        let (hf, value) = match tail {
            "self_attn.w_q" | "self_attn.w_k" | "self_attn.w_v" | "cross_attn.w_q" | "cross_attn.w_k"
            | "cross_attn.w_v" | "ffn.w_1" => (hf_name(&p, tail), cols(v)),
            "self_attn.w_o"
            | "cross_attn.w_o"
            | "ffn.w_2"
            | "self_attn.b_o"
            | "cross_attn.b_o"
            | "ffn.b_2"
            | "self_attn_norm.gamma"
            | "self_attn_norm.beta"
            | "cross_attn_norm.gamma"
            | "cross_attn_norm.beta"
            | "ffn_norm.gamma"
            | "ffn_norm.beta" => (hf_name(&p, tail), rows(v)),
            "self_attn.b_q" | "self_attn.b_k" | "self_attn.b_v" | "cross_attn.b_q" | "cross_attn.b_k"
            | "cross_attn.b_v" | "ffn.b_1" => (hf_name(&p, tail), v.to_vec()),
            _ => return Err(unsupported(n)),
        };
        put(hf, shape, value);
    }
    if !c.import.output_bias {
        put("final_logits_bias".into(), vec![1, c.vocab_size], vec![0.0; c.vocab_size]);
    }
    // The port's position tables (what it computes itself; written so any reader has them):
    // ours renamed, which is the halves layout (Marian's frequencies become the port's).
    let layout = match c.import.sinusoid_layout {
        SinusoidLayout::Marian => SinusoidLayout::Halves,
        l => l,
    };
    let table = cols(&crate::kernels::cpu::embedding::sinusoid_table(c.max_positions, d, layout));
    for side in ["encoder", "decoder"] {
        put(format!("model.{side}.embed_positions.weight"), vec![c.max_positions, d], table.clone());
    }
    Ok(out)
}

fn unsupported(name: &str) -> Error {
    Error::Unsupported(format!("export hf: our tensor {name} has no MarianMTModel counterpart"))
}

/// The port's name of our layer tensor `tail` in layer prefix `p`.
fn hf_name(p: &str, tail: &str) -> String {
    let (module, param) = tail.split_once('.').expect("a dotted name");
    let module = match module {
        "self_attn" => "self_attn",
        "cross_attn" => "encoder_attn",
        "self_attn_norm" => "self_attn_layer_norm",
        "cross_attn_norm" => "encoder_attn_layer_norm",
        "ffn_norm" => "final_layer_norm",
        _ => "",
    };
    match (module, param) {
        ("", "w_1") => format!("{p}.fc1.weight"),
        ("", "b_1") => format!("{p}.fc1.bias"),
        ("", "w_2") => format!("{p}.fc2.weight"),
        ("", "b_2") => format!("{p}.fc2.bias"),
        (m, "gamma") => format!("{p}.{m}.weight"),
        (m, "beta") => format!("{p}.{m}.bias"),
        (m, x) => {
            let (kind, which) = x.split_at(2);
            let proj = match which {
                "q" => "q_proj",
                "k" => "k_proj",
                "v" => "v_proj",
                _ => "out_proj",
            };
            format!("{p}.{m}.{proj}.{}", if kind == "w_" { "weight" } else { "bias" })
        }
    }
}

/// An imported Marian model (from a Hugging Face directory, fine-tuned here or not) back in the
/// port's form: its rows in Marian's id order (the rows the import added left out), its own
/// vocabulary and SentencePiece models, its special ids. Importing the result gives the same
/// tensors back, and the tensors are the original directory's, bit for bit.
fn export_imported(
    ckpt: &Checkpoint,
    tok: &crate::data::tokenizer::ImportedTokenizer,
    activation: &str,
    out: &Path,
) -> Result<Vec<PathBuf>> {
    let c = &ckpt.config;
    let m = tok.inner();
    let separate = m.separate_vocabs();
    let (source_map, map) = tok.maps();
    let gaps = || Error::Unsupported("export hf: the vocabulary's ids are not 0..n without gaps".into());
    let pieces = m.pieces_by_id(separate).ok_or_else(gaps)?;
    let source_pieces = m.pieces_by_id(false).ok_or_else(gaps)?;
    let (size, source_size) = (pieces.len(), source_pieces.len());
    let fits = |map: &crate::data::tokenizer::IdMap, n: usize, ours: usize| {
        map.len() == ours && (0..n as u32).all(|f| (map.ours(f) as usize) < ours)
    };
    if !fits(map, size, c.vocab_size) || !fits(source_map, source_size, c.source_vocab()) {
        return Err(Error::Mismatch("export hf: the tokenizer's id map does not fit the model".into()));
    }
    let foreign = |ours: u32| map.foreign(ours).expect("the specials are the foreign model's");
    let (pad, eos) = (foreign(BOS), foreign(EOS));
    let layout = ParamLayout::new(c);
    let d = c.d_model;
    let mut all = tensors(ckpt)?;
    // Only what the port itself stores: the embeddings (one shared, or one a side), the logits
    // bias and the layers.
    all.retain(|n, _| n.contains(".layers."));
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let param = |n: &str| &ckpt.params[layout.get(n).expect("in the layout").range()];
    // An embedding's rows in the foreign model's id order.
    let rows = |emb: &[f32], map: &crate::data::tokenizer::IdMap, n: usize| -> Tensor {
        let r: Vec<f32> = (0..n as u32).flat_map(|f| emb[map.ours(f) as usize * d..][..d].iter().copied()).collect();
        (vec![n, d], bytes(&r))
    };
    let target_rows = rows(param("embed.weight"), map, size);
    if separate {
        all.insert("model.decoder.embed_tokens.weight".into(), target_rows);
        let source = rows(param("encoder.embed.weight"), source_map, source_size);
        all.insert("model.encoder.embed_tokens.weight".into(), source);
    } else {
        all.insert("model.shared.weight".into(), target_rows);
    }
    let bias: Vec<f32> = if c.import.output_bias {
        let b = param("output.bias");
        (0..size as u32).map(|f| b[map.ours(f) as usize]).collect()
    } else {
        vec![0.0; size]
    };
    all.insert("final_logits_bias".into(), (vec![1, size], bytes(&bias)));
    let model = safetensors_bytes(&all)?;
    let config = json(marian_config(c, activation, (source_size, size), [None, Some(pad), Some(eos), Some(pad)]));
    let generation = json(serde_json::json!({
        "decoder_start_token_id": pad,
        "eos_token_id": eos,
        "forced_eos_token_id": eos,
        "pad_token_id": pad,
        "bad_words_ids": [[pad]],
    }));
    let vocab_json = |pieces: &[&str]| {
        let v: serde_json::Map<String, serde_json::Value> =
            pieces.iter().enumerate().map(|(i, p)| (p.to_string(), serde_json::json!(i))).collect();
        json(serde_json::Value::Object(v))
    };
    let (vocab, target_vocab) = (vocab_json(&source_pieces), vocab_json(&pieces));
    let (e, u, p) = m.special_tokens();
    let tokenizer_config = json(serde_json::json!({
        "tokenizer_class": "MarianTokenizer",
        "eos_token": e,
        "unk_token": u,
        "pad_token": p,
        "model_max_length": c.max_positions,
        "separate_vocabs": separate,
    }));
    let mut files: Vec<(&str, &[u8])> = vec![
        ("config.json", &config),
        ("model.safetensors", &model),
        ("generation_config.json", &generation),
        ("vocab.json", &vocab),
        ("source.spm", m.source_model().to_bytes()),
        ("target.spm", m.target_model().to_bytes()),
        ("tokenizer_config.json", &tokenizer_config),
    ];
    if separate {
        files.push(("target_vocab.json", &target_vocab));
    }
    crate::io::publish_new(out, &files, &WRITTEN).map_err(|e| Error::Input(format!("export hf: {e}")))
}

/// MarianConfig of `c` with (source, target) vocabularies of `sizes` ids (shared when `c` has one
/// vocabulary), and its (bos, pad, eos, decoder start) ids.
fn marian_config(c: &ModelConfig, activation: &str, sizes: (usize, usize), ids: [Option<u32>; 4]) -> serde_json::Value {
    let [bos, pad, eos, start] = ids;
    serde_json::json!({
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": sizes.0,
        "decoder_vocab_size": sizes.1,
        "d_model": c.d_model,
        "encoder_layers": c.n_layers,
        "decoder_layers": c.n_layers,
        "encoder_attention_heads": c.n_heads,
        "decoder_attention_heads": c.n_heads,
        "encoder_ffn_dim": c.d_ff,
        "decoder_ffn_dim": c.d_ff,
        "activation_function": activation,
        "max_position_embeddings": c.max_positions,
        "scale_embedding": c.import.scale_embedding,
        "share_encoder_decoder_embeddings": c.import.source_vocab_size.is_none(),
        "tie_word_embeddings": true,
        "static_position_embeddings": true,
        "dropout": c.dropout,
        "attention_dropout": c.attention_dropout,
        "activation_dropout": 0.0,
        "init_std": 0.02,
        "is_encoder_decoder": true,
        "use_cache": true,
        "bos_token_id": bos,
        "pad_token_id": pad,
        "eos_token_id": eos,
        "decoder_start_token_id": start,
        "forced_eos_token_id": eos,
    })
}

/// `model.safetensors` of `tensors` (f32, with the `format: pt` metadata `transformers` writes).
fn safetensors_bytes(tensors: &BTreeMap<String, Tensor>) -> Result<Vec<u8>> {
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, (shape, b))| (n.clone(), TensorView::new(Dtype::F32, shape.clone(), b).expect("shapes match")))
        .collect();
    let mut meta = std::collections::HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    safetensors::serialize(views, &Some(meta)).map_err(|e| Error::Input(format!("export hf: model.safetensors: {e}")))
}

/// A JSON file's bytes as `transformers` writes them (indented, ending in a newline).
fn json(v: serde_json::Value) -> Vec<u8> {
    let mut s = serde_json::to_string_pretty(&v).expect("JSON values serialise");
    s.push('\n');
    s.into_bytes()
}
