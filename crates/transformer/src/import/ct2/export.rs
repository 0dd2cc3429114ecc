//! A model of ours as a CTranslate2 model directory: `model.bin` (a post-norm `TransformerSpec`,
//! revision 7, the variables CTranslate2's own converters write, in their order and with their
//! aliases for tensors that are equal), `config.json`, the vocabularies as JSON lists of tokens,
//! and our tokenizer file beside them (`transformer_tokenizer.json`, which CTranslate2 ignores and
//! `import ct2` reads back).
//!
//! The tokens are our vocabulary's pieces by our id, so CTranslate2 reads and writes our ids one to
//! one: `Ġthe`-style pieces for our byte-level BPE, `▁the`-style SentencePiece pieces for an
//! imported Marian model. Positions go in as the table itself (CTranslate2 adds whatever table
//! `position_encodings/encodings` holds), so the paper's interleaved sinusoids, the two halves
//! layouts and learned positions all leave unchanged.
//!
//! At int8 every linear map's and embedding's weight is quantized as CTranslate2's converter does
//! (`ModelSpec._quantize`: per row, scale = 127 / max |w|, codes rounded to nearest, ties to
//! even), from the f32 weights; biases, norms and positions stay f32.

use super::bin::{DType, ModelBin, Variable};
use super::names::{layer_slots, quantizable, ACTIVATIONS};
use crate::checkpoint::Checkpoint;
use crate::config::{ModelConfig, Positions};
use crate::data::tokenizer::{Side, Tokenizer};
use crate::error::{Error, Result};
use crate::params::ParamLayout;
use crate::vocab::{BOS, EOS, SPECIALS, UNK};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The name our tokenizer file has in an exported directory.
pub const TOKENIZER_FILE: &str = "transformer_tokenizer.json";

/// The specification and revision written (CTranslate2 4.x's `TransformerSpec`).
pub const SPEC: &str = "TransformerSpec";
/// Its revision.
pub const REVISION: u32 = 7;

/// Every file an export may write (none may exist before it).
const WRITTEN: [&str; 7] = [
    "model.bin",
    "config.json",
    "shared_vocabulary.json",
    "source_vocabulary.json",
    "target_vocabulary.json",
    "vmap.txt",
    TOKENIZER_FILE,
];

/// The weights' type in the written model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ct2Weights {
    /// float32 throughout.
    Float32,
    /// int8 linear and embedding weights with f32 scales (CTranslate2's `int8` quantization).
    Int8,
}

impl Ct2Weights {
    /// The name CTranslate2's converters give it.
    pub fn name(self) -> &'static str {
        match self {
            Ct2Weights::Float32 => "float32",
            Ct2Weights::Int8 => "int8",
        }
    }
}

/// A CTranslate2 model directory's contents.
#[derive(Clone, Debug)]
pub struct Ct2Model {
    /// `model.bin`.
    pub bin: ModelBin,
    /// `config.json`.
    pub config: serde_json::Value,
    /// The source tokens by id (the only list when shared).
    pub source_tokens: Vec<String>,
    /// The target tokens, when the vocabularies are separate.
    pub target_tokens: Option<Vec<String>>,
}

/// Writes `ckpt` with `tokenizer` (whose file's bytes are `tokenizer_file`) as a CTranslate2
/// model directory `out` (created; it must not hold a model already); returns the files written.
pub fn export(
    ckpt: &Checkpoint,
    tokenizer: &Tokenizer,
    tokenizer_file: &[u8],
    out: &Path,
    weights: Ct2Weights,
) -> Result<Vec<PathBuf>> {
    let m = model(ckpt, tokenizer, weights)?;
    let json = |v: &serde_json::Value| {
        let mut s = serde_json::to_string_pretty(v).expect("JSON values serialise");
        s.push('\n');
        s.into_bytes()
    };
    let bin = m.bin.to_bytes();
    let config = json(&m.config);
    let source = json(&serde_json::json!(m.source_tokens));
    let target = m.target_tokens.as_ref().map(|t| json(&serde_json::json!(t)));
    let mut files: Vec<(&str, &[u8])> = vec![("model.bin", &bin), ("config.json", &config)];
    match &target {
        None => files.push(("shared_vocabulary.json", &source)),
        Some(t) => {
            files.push(("source_vocabulary.json", &source));
            files.push(("target_vocabulary.json", t));
        }
    }
    files.push((TOKENIZER_FILE, tokenizer_file));
    crate::io::publish_new(out, &files, &WRITTEN).map_err(|e| Error::Input(format!("export ct2: {e}")))
}

/// The CTranslate2 model of `ckpt` with `tokenizer`, or the error naming what CTranslate2's
/// Transformer cannot state.
pub fn model(ckpt: &Checkpoint, tokenizer: &Tokenizer, weights: Ct2Weights) -> Result<Ct2Model> {
    let c = &ckpt.config;
    c.validate()?;
    check_options(c)?;
    let layout = ParamLayout::new(c);
    if ckpt.params.len() != layout.total() {
        return Err(Error::Mismatch(format!(
            "export ct2: the checkpoint has {} parameters, its configuration needs {}",
            ckpt.params.len(),
            layout.total()
        )));
    }
    if tokenizer.vocab_size() != c.vocab_size || tokenizer.source_vocab_size() != c.import.source_vocab_size {
        return Err(Error::Mismatch(format!(
            "export ct2: the model's vocabulary is {} (source: {:?}) but the tokenizer's is {} (source: {:?}): pass \
             the tokenizer the checkpoint was trained with",
            c.vocab_size,
            c.import.source_vocab_size,
            tokenizer.vocab_size(),
            tokenizer.source_vocab_size()
        )));
    }
    let param = |name: &str| -> &[f32] {
        let e = layout.get(name).unwrap_or_else(|| panic!("the layout of a validated configuration has {name}"));
        &ckpt.params[e.range()]
    };
    let d = c.d_model;
    let mut vars: BTreeMap<String, Variable> = BTreeMap::new();
    let mut put = |name: String, shape: &[usize], v: &[f32]| {
        vars.insert(name, Variable::f32(shape, v));
    };
    for s in layer_slots(c) {
        let mut values = Vec::new();
        let mut rows = 0;
        let mut cols = None;
        for n in &s.ours {
            let e = layout.get(n).unwrap_or_else(|| panic!("the layout has {n}"));
            values.extend_from_slice(&ckpt.params[e.range()]);
            rows += e.shape[0];
            cols = e.shape.get(1).copied();
        }
        match cols {
            Some(cols) => put(s.ct2, &[rows, cols], &values),
            None => put(s.ct2, &[rows], &values),
        }
    }
    let target = param("embed.weight");
    let source = if c.import.source_vocab_size.is_some() { param("encoder.embed.weight") } else { target };
    let v_src = c.import.source_vocab_size.unwrap_or(c.vocab_size);
    put("decoder/embeddings/weight".into(), &[c.vocab_size, d], target);
    put("encoder/embeddings_0/weight".into(), &[v_src, d], source);
    put("decoder/projection/weight".into(), &[c.vocab_size, d], target);
    let zeros;
    let bias = if c.import.output_bias {
        param("output.bias")
    } else {
        zeros = vec![0f32; c.vocab_size];
        &zeros
    };
    put("decoder/projection/bias".into(), &[c.vocab_size], bias);
    let table = match c.positions {
        Positions::Sinusoidal => {
            crate::kernels::cpu::embedding::sinusoid_table(c.max_positions, d, c.import.sinusoid_layout)
        }
        Positions::Learned => param("embed.positions").to_vec(),
    };
    for side in ["encoder", "decoder"] {
        put(format!("{side}/position_encodings/encodings"), &[c.max_positions, d], &table);
    }
    let activation = ACTIVATIONS.iter().find(|(a, _)| *a == c.import.activation).expect("every activation").1;
    let scalars: [(&str, DType, i64); 16] = [
        ("decoder/activation", DType::I8, activation),
        ("decoder/alibi", DType::I8, 0),
        ("decoder/alibi_use_positive_positions", DType::I8, 0),
        ("decoder/alignment_heads", DType::I16, 1),
        ("decoder/alignment_layer", DType::I16, -1),
        ("decoder/num_heads", DType::I16, c.n_heads as i64),
        ("decoder/pre_norm", DType::I8, 0),
        ("decoder/scale_alibi", DType::I8, 0),
        ("decoder/scale_embeddings", DType::I8, i64::from(c.import.scale_embedding)),
        ("decoder/start_from_zero_embedding", DType::I8, 0),
        ("encoder/activation", DType::I8, activation),
        ("encoder/embeddings_merge", DType::I8, 0),
        ("encoder/multi_query_attention", DType::I8, 0),
        ("encoder/num_heads", DType::I16, c.n_heads as i64),
        ("encoder/pre_norm", DType::I8, 0),
        ("encoder/scale_embeddings", DType::I8, i64::from(c.import.scale_embedding)),
    ];
    for (name, dtype, value) in scalars {
        vars.insert(name.into(), Variable::scalar(dtype, value));
    }
    let mut bin = ModelBin { spec: SPEC.into(), revision: REVISION, variables: vars, aliases: BTreeMap::new() };
    alias_equal(&mut bin);
    if weights == Ct2Weights::Int8 {
        quantize_int8(&mut bin);
    }
    let separate = c.import.source_vocab_size.is_some();
    let target_tokens = tokens(tokenizer, Side::Target, c.vocab_size)?;
    let source_tokens = if separate { tokens(tokenizer, Side::Source, v_src)? } else { target_tokens.clone() };
    let marian = matches!(tokenizer, Tokenizer::Marian(_));
    let t = |id: u32| serde_json::Value::String(target_tokens[id as usize].clone());
    // ε as its shortest decimal (1e-6, not the f32's widening 9.99999997e-7), as Python writes it.
    let eps: f64 = c.layer_norm_eps.to_string().parse().expect("an f32 prints as a number");
    let config = serde_json::json!({
        "add_source_bos": false,
        // An imported Marian model's encoder reads `</s>` at the end (Tokenizer::source_ids_of_pieces).
        "add_source_eos": marian,
        "bos_token": t(BOS),
        "decoder_start_token": t(BOS),
        "eos_token": t(EOS),
        "layer_norm_epsilon": eps,
        "multi_query_attention": false,
        "unk_token": t(UNK),
    });
    Ok(Ct2Model {
        bin,
        config,
        source_tokens: if separate { source_tokens } else { target_tokens.clone() },
        target_tokens: separate.then_some(target_tokens),
    })
}

/// Refuses, by name, what CTranslate2's `TransformerSpec` cannot state.
fn check_options(c: &ModelConfig) -> Result<()> {
    let refuse = |what: &str| Err(Error::Unsupported(format!("export ct2: CTranslate2's Transformer has no {what}")));
    if c.parsing.source_pointer || c.parsing.next_closer || c.parsing.char_dim > 0 {
        return refuse("parsing inputs (source_pointer, next_closer, char_dim)");
    }
    if c.d_k * c.n_heads != c.d_model || c.d_v != c.d_k {
        return Err(Error::Unsupported(format!(
            "export ct2: CTranslate2's heads are d_model / heads wide; this model's d_k {} and d_v {} with d_model {} \
             and {} heads are not",
            c.d_k, c.d_v, c.d_model, c.n_heads
        )));
    }
    Ok(())
}

/// Every variable equal to one before it in name order (shape, type and values) becomes an alias
/// of the first such, as `LayerSpec._alias_variables` does; scalars never do.
fn alias_equal(bin: &mut ModelBin) {
    let names: Vec<String> = bin.variables.keys().cloned().collect();
    let mut aliases = BTreeMap::new();
    for (i, name) in names.iter().enumerate().rev() {
        let v = &bin.variables[name];
        if v.shape.is_empty() {
            continue;
        }
        if let Some(first) = names[..i].iter().find(|o| same(&bin.variables[*o], v)) {
            aliases.insert(name.clone(), first.clone());
        }
    }
    for a in aliases.keys() {
        bin.variables.remove(a);
    }
    bin.aliases = aliases;
}

/// Equal as numpy's `array_equal` finds them (so −0 equals 0).
fn same(a: &Variable, b: &Variable) -> bool {
    a.dtype == b.dtype && a.shape == b.shape && a.values() == b.values()
}

/// CTranslate2's int8 quantization of every quantizable variable, with its `_scale` beside it.
fn quantize_int8(bin: &mut ModelBin) {
    let names: Vec<String> = bin.variables.keys().filter(|n| quantizable(n)).cloned().collect();
    for name in names {
        let v = &bin.variables[&name];
        let rows = v.shape[0];
        let w: Vec<f32> = v.values().into_iter().map(|x| x as f32).collect();
        let (codes, scales) = quantize_rows(&w, rows);
        let shape = v.shape.clone();
        bin.variables.insert(name.clone(), Variable::i8(&shape, &codes));
        bin.variables.insert(format!("{name}_scale"), Variable::f32(&[rows], &scales));
    }
}

/// Per-row int8 codes and scales of a (rows, …) matrix, as CTranslate2's converter makes them:
/// scale = 127 / max |w| (127 for a zero row, and never above f32's range), code = w · scale
/// rounded to nearest, ties to even.
pub(crate) fn quantize_rows(w: &[f32], rows: usize) -> (Vec<i8>, Vec<f32>) {
    let cols = w.len().checked_div(rows).unwrap_or(0);
    let mut codes = Vec::with_capacity(w.len());
    let mut scales = Vec::with_capacity(rows);
    for r in w.chunks(cols.max(1)).take(rows) {
        let mut amax = r.iter().fold(0f32, |m, x| m.max(x.abs()));
        if amax == 0.0 {
            amax = 127.0;
        }
        let amax = amax.max(127f32 / f32::MAX);
        let scale = 127f32 / amax;
        codes.extend(r.iter().map(|&x| (x * scale).round_ties_even().clamp(-127.0, 127.0) as i8));
        scales.push(scale);
    }
    (codes, scales)
}

/// Our tokens by id on `side`, `size` of them, each once: a row an import added whose name (from
/// [`SPECIALS`]) the foreign vocabulary already uses is renamed `<transformer:NAME>`.
fn tokens(tokenizer: &Tokenizer, side: Side, size: usize) -> Result<Vec<String>> {
    let mut out: Vec<String> = (0..size as u32)
        .map(|id| {
            tokenizer.piece_of_id(side, id).ok_or_else(|| {
                Error::Unsupported(format!("export ct2: the vocabulary has no token for id {id} of {size}"))
            })
        })
        .collect::<Result<_>>()?;
    let added = |id: usize| match tokenizer {
        Tokenizer::Marian(m) => {
            let (src, tgt) = m.maps();
            (if side == Side::Source { src } else { tgt }).foreign(id as u32).is_none()
        }
        Tokenizer::Bpe(_) => false,
    };
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for id in 0..out.len() {
        if added(id) {
            continue;
        }
        if let Some(first) = seen.insert(out[id].clone(), id) {
            return Err(Error::Unsupported(format!(
                "export ct2: ids {first} and {id} are both the token {:?}: CTranslate2 looks tokens up by their text",
                out[id]
            )));
        }
    }
    for id in (0..out.len()).filter(|&id| added(id)) {
        if seen.contains_key(&out[id]) || out[id].is_empty() {
            let name = SPECIALS.get(id).map_or("added", |s| s.trim_matches(['<', '>']));
            out[id] = format!("<transformer:{name}>");
        }
        if let Some(first) = seen.insert(out[id].clone(), id) {
            return Err(Error::Unsupported(format!("export ct2: ids {first} and {id} are both {:?}", out[id])));
        }
    }
    Ok(out)
}
