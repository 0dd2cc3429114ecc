//! A CTranslate2 Transformer directory (`model.bin`, `config.json`, the vocabularies as JSON or
//! text lists) read into a checkpoint of ours and a tokenizer.
//!
//! The architecture comes from `model.bin`'s own settings (`num_heads`, `pre_norm`, `activation`,
//! `scale_embeddings`, `start_from_zero_embedding`), the sizes from its tensors, LayerNorm ε from
//! `config.json` (CTranslate2's 1e-6 where it is null). Weights of every type CTranslate2 stores
//! are read as f32: float16 and bfloat16 widened, int8 and int16 codes divided by their
//! `_scale`. The position table is matched against our three sinusoid layouts and taken as
//! learned positions when it is none of them. Whatever this engine does not run (pre-norm, ALiBi,
//! rotary or relative positions, multi-query attention, source features, an output layer untied
//! from the target embedding) is refused by name, and so is every variable left unread.
//!
//! The tokens need their tokenizer: the one `export ct2` puts beside them
//! (`transformer_tokenizer.json`, read back as it was), or the SentencePiece models the tokens were
//! cut with (`source.spm` and `target.spm` or one `*.spm` in the directory, as
//! `ct2-transformers-converter --copy_files` leaves them, or given), with which the model imports
//! as a Marian model does ([`crate::import::marian`]).

use super::bin::{DType, ModelBin, Variable};
use super::export::TOKENIZER_FILE;
use super::names::{layer_slots, ACTIVATIONS};
use crate::checkpoint::Checkpoint;
use crate::config::{ModelConfig, SinusoidLayout};
use crate::data::tokenizer::{Side as TokSide, Tokenizer};
use crate::error::{Error, Result};
use crate::import::files::{read_json_object, read_spm, read_text};
use crate::import::marian::{
    assemble, write_model, Architecture, ForeignModel, Imported, Names, Side, Tensors, TokenizerParts, Vocab,
};
use crate::import::pickle::Tensor;
use crate::params::ParamLayout;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// CTranslate2's LayerNorm ε where `config.json` gives none (`layer_norm_epsilon` null): 1e-5
/// for a LayerNorm with a bias, as every one of a Transformer's is (its src/layers/common.cc;
/// 1e-6 is its RMSNorm's, which has none).
const CT2_LAYER_NORM_EPS: f32 = 1e-5;

fn err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Import(format!("{}: {msg}", path.display()))
}

/// Whether `dir` looks like a CTranslate2 model directory (`model.bin` and `config.json`).
pub fn is_ct2_dir(dir: &Path) -> bool {
    dir.join("model.bin").is_file() && dir.join("config.json").is_file()
}

/// An imported CTranslate2 model: the checkpoint and what its tokenizer is made of.
#[derive(Clone, Debug)]
pub struct Ct2Import {
    /// The model, in our layout and id order.
    pub checkpoint: Checkpoint,
    /// The weights' type as read (`float32`, `int8`, `float16`, …, the most common one).
    pub weights: String,
    /// The directory read: `write` never writes into it.
    pub dir: PathBuf,
    tokenizer: Ct2Tokenizer,
}

#[derive(Clone, Debug)]
enum Ct2Tokenizer {
    /// The bytes of our tokenizer file an export put beside the model.
    Ours(Vec<u8>),
    /// An import through the Marian path (SentencePiece models and the token lists).
    Marian(Box<Imported>),
}

impl Ct2Import {
    /// The model's tokenizer.
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        // The tokenizer is what its file holds (its hash is the file's): written once to a
        // private temporary file and read back.
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A new directory of its own (create_dir fails on anything there, a link included).
        let dir = std::env::temp_dir().join(format!(".transformer-ct2-{}.{n}", std::process::id()));
        std::fs::create_dir(&dir).map_err(crate::io::io_err(&dir))?;
        let tmp = dir.join("tokenizer.json");
        let result = self.save_tokenizer(&tmp).and_then(|()| Tokenizer::load(&tmp));
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_dir(&dir);
        result
    }

    fn save_tokenizer(&self, path: &Path) -> Result<()> {
        match &self.tokenizer {
            Ct2Tokenizer::Ours(bytes) => std::fs::write(path, bytes).map_err(crate::io::io_err(path)),
            Ct2Tokenizer::Marian(imported) => crate::import::marian::tokenizer_of(imported)?.save(path),
        }
    }

    /// Writes `out/model.safetensors` and `out/tokenizer.json`, as `import marian` does (together or
    /// not at all, never into the directory read).
    pub fn write(&self, out: &Path) -> Result<(PathBuf, PathBuf)> {
        let checkpoint = match &self.tokenizer {
            Ct2Tokenizer::Marian(imported) => &imported.checkpoint,
            Ct2Tokenizer::Ours(_) => &self.checkpoint,
        };
        write_model(&self.dir, out, checkpoint, &|path| self.save_tokenizer(path))
    }
}

/// Imports the CTranslate2 model in `dir`; `spm` are the SentencePiece models (source, then target;
/// one for both) when the directory holds neither them nor our tokenizer file.
pub fn import(dir: &Path, spm: &[PathBuf]) -> Result<Ct2Import> {
    if !dir.is_dir() {
        return Err(err(dir, "not a directory: give the directory of a CTranslate2 model"));
    }
    let bin_path = dir.join("model.bin");
    let bin = ModelBin::read(&bin_path)?;
    let cfg_path = dir.join("config.json");
    let config = read_json_object(&cfg_path)?;
    let mut m = Ct2Reader::new(bin, bin_path)?;
    let arch = m.architecture(&config, &cfg_path)?;
    let (source_tokens, target_tokens) = vocabularies(dir)?;
    let weights = m.weights_type();
    let ours = dir.join(TOKENIZER_FILE);
    if ours.is_file() && spm.is_empty() {
        let bytes = crate::import::files::read_text(&ours, "a tokenizer file")?.into_bytes();
        let tok = Tokenizer::load(&ours)?;
        let checkpoint = m.ours(&arch, &tok, &source_tokens, target_tokens.as_deref(), &ours)?;
        return Ok(Ct2Import { checkpoint, weights, dir: dir.to_path_buf(), tokenizer: Ct2Tokenizer::Ours(bytes) });
    }
    let spms = find_spm(dir, spm)?;
    let foreign = m.foreign(dir, arch, &config, &cfg_path, source_tokens, target_tokens, spms)?;
    let imported = assemble(foreign)?;
    Ok(Ct2Import {
        checkpoint: imported.checkpoint.clone(),
        weights,
        dir: dir.to_path_buf(),
        tokenizer: Ct2Tokenizer::Marian(Box::new(imported)),
    })
}

/// The source and target token lists (`None` for the target when shared): `shared_vocabulary`, or
/// `source_vocabulary` and `target_vocabulary`, each `.json` (a list of strings) or `.txt` (a token
/// a line).
fn vocabularies(dir: &Path) -> Result<(Vec<String>, Option<Vec<String>>)> {
    let find = |name: &str| -> Option<PathBuf> {
        ["json", "txt"].iter().map(|e| dir.join(format!("{name}.{e}"))).find(|p| p.is_file())
    };
    if let Some(p) = find("shared_vocabulary") {
        return Ok((read_tokens(&p)?, None));
    }
    match (find("source_vocabulary"), find("target_vocabulary")) {
        (Some(s), Some(t)) => Ok((read_tokens(&s)?, Some(read_tokens(&t)?))),
        _ => Err(err(
            dir,
            "no vocabulary: a CTranslate2 model directory holds shared_vocabulary.json, or source_vocabulary.json \
             and target_vocabulary.json (or their .txt forms)",
        )),
    }
}

fn read_tokens(path: &Path) -> Result<Vec<String>> {
    let text = read_text(path, "a vocabulary")?;
    let tokens: Vec<String> = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| err(path, format!("not a JSON list of token strings: {e}")))?
    } else {
        text.lines().map(str::to_string).collect()
    };
    let mut seen = HashMap::new();
    for (i, t) in tokens.iter().enumerate() {
        if let Some(j) = seen.insert(t.as_str(), i) {
            return Err(err(path, format!("tokens {j} and {i} are both {t:?}: a token must be there once")));
        }
    }
    if tokens.is_empty() {
        return Err(err(path, "no tokens"));
    }
    Ok(tokens)
}

/// The SentencePiece models (source, target) given, or found in `dir`.
fn find_spm(dir: &Path, given: &[PathBuf]) -> Result<(PathBuf, PathBuf)> {
    match given {
        [one] => return Ok((one.clone(), one.clone())),
        [s, t] => return Ok((s.clone(), t.clone())),
        [] => {}
        more => {
            return Err(err(dir, format!("{} SentencePiece models given: give one, or source then target", more.len())))
        }
    }
    let (s, t) = (dir.join("source.spm"), dir.join("target.spm"));
    if s.is_file() && t.is_file() {
        return Ok((s, t));
    }
    let mut spms: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(crate::io::io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "spm" || e == "model") && p.is_file())
        .collect();
    spms.sort();
    match spms.as_slice() {
        [one] => Ok((one.clone(), one.clone())),
        _ => Err(err(
            dir,
            "the model's tokens need their tokenizer: neither transformer_tokenizer.json (what `export ct2` writes) nor \
             source.spm and target.spm (or one .spm) is there; give the SentencePiece models the tokens were cut with \
             (--spm SOURCE [TARGET])",
        )),
    }
}

/// `model.bin`'s variables as this engine reads them: each taken once, so what is left unread at
/// the end is refused.
struct Ct2Reader {
    bin: ModelBin,
    path: PathBuf,
    /// Names read (after aliases).
    read: BTreeSet<String>,
}

impl Ct2Reader {
    fn new(bin: ModelBin, path: PathBuf) -> Result<Self> {
        if bin.spec != "TransformerSpec" {
            return Err(err(
                &path,
                format!(
                    "a {:?} model: only CTranslate2's encoder-decoder Transformer (TransformerSpec) is read",
                    bin.spec
                ),
            ));
        }
        Ok(Ct2Reader { bin, path, read: BTreeSet::new() })
    }

    fn err(&self, msg: impl std::fmt::Display) -> Error {
        err(&self.path, msg)
    }

    fn var(&mut self, name: &str) -> Result<&Variable> {
        let resolved = self.bin.resolve(name).to_string();
        self.read.insert(name.to_string());
        self.read.insert(resolved.clone());
        self.bin.variables.get(&resolved).ok_or_else(|| err(&self.path, format!("no variable {name}")))
    }

    /// A scalar setting, or `default` when the spec's revision has none.
    fn scalar(&mut self, name: &str, default: i64) -> Result<i64> {
        if !self.bin.has(name) {
            return Ok(default);
        }
        let v = self.var(name)?;
        match v.values().as_slice() {
            [x] if x.fract() == 0.0 => Ok(*x as i64),
            _ => Err(err(&self.path, format!("{name} is not one whole number"))),
        }
    }

    /// The same setting of the encoder and the decoder.
    fn both(&mut self, name: &str, default: i64) -> Result<i64> {
        let (e, d) =
            (self.scalar(&format!("encoder/{name}"), default)?, self.scalar(&format!("decoder/{name}"), default)?);
        if e != d {
            return Err(self.err(format!("encoder/{name} is {e} but decoder/{name} is {d}: this engine has one")));
        }
        Ok(e)
    }

    /// Variable `name` as f32 values of `shape`: floats widened, int8/int16 codes over their scale.
    fn floats(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let v = self.var(name)?.clone();
        if v.shape != shape {
            return Err(self.err(format!("{name} has shape {:?}, the model needs {shape:?}", v.shape)));
        }
        let values: Vec<f32> = match v.dtype {
            DType::F32 | DType::F16 | DType::BF16 => v.values().into_iter().map(|x| x as f32).collect(),
            DType::I8 | DType::I16 => {
                let scale_name = format!("{}_scale", self.bin.resolve(name));
                if self.bin.has(&format!("{}_zero", self.bin.resolve(name))) {
                    return Err(self.err(format!("{name} is quantized with zero points (AWQ): not read")));
                }
                if !self.bin.has(&scale_name) {
                    return Err(self.err(format!("{name} holds integer codes but {scale_name} is not there")));
                }
                let scales = self.var(&scale_name)?.values();
                let rows = shape.first().copied().unwrap_or(1);
                let per = v.len() / rows.max(1);
                if scales.len() != rows && scales.len() != 1 {
                    return Err(self.err(format!("{scale_name} has {} scales for {rows} rows", scales.len())));
                }
                v.values()
                    .iter()
                    .enumerate()
                    .map(|(i, &q)| {
                        let s = if scales.len() == 1 { scales[0] } else { scales[i / per.max(1)] };
                        (q / s) as f32
                    })
                    .collect()
            }
            DType::I32 => return Err(self.err(format!("{name} holds int32 values, not weights"))),
        };
        if let Some(i) = values.iter().position(|x| !x.is_finite()) {
            return Err(self.err(format!("{name} holds {} at element {i}: the model is corrupt", values[i])));
        }
        Ok(values)
    }

    fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.bin.get(name).map(|v| v.shape.clone())
    }

    /// The type most of the weights have (what CTranslate2 calls the model's type).
    fn weights_type(&self) -> String {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for (n, v) in &self.bin.variables {
            if n.ends_with("/weight") {
                let t = match v.dtype {
                    DType::F32 => "float32",
                    DType::I8 => "int8",
                    DType::I16 => "int16",
                    DType::I32 => "int32",
                    DType::F16 => "float16",
                    DType::BF16 => "bfloat16",
                };
                *count.entry(t).or_default() += v.len();
            }
        }
        count.into_iter().max_by_key(|(_, n)| *n).map_or("float32", |(t, _)| t).to_string()
    }

    /// Our configuration's architecture from the settings and shapes.
    fn architecture(&mut self, config: &serde_json::Value, cfg_path: &Path) -> Result<Architecture> {
        let path = self.path.clone();
        let refuse =
            |what: &str| Err(err(&path, format!("{what}: this engine runs the paper's post-norm Transformer")));
        for (name, what) in [
            ("pre_norm", "pre-norm layers (pre_norm = 1)"),
            ("alibi", "ALiBi positions"),
            ("multi_query_attention", "multi-query attention"),
        ] {
            for side in ["encoder", "decoder"] {
                if self.scalar(&format!("{side}/{name}"), 0)? != 0 {
                    return refuse(what);
                }
            }
        }
        if self.bin.has("encoder/embeddings_1/weight") {
            return refuse("source features (more than one source embedding)");
        }
        let heads = self.both("num_heads", 0)?;
        let id = self.both("activation", 0)?;
        let activation = ACTIVATIONS
            .iter()
            .find(|(_, i)| *i == id)
            .map(|(a, _)| *a)
            .ok_or_else(|| self.err(format!("activation {id}: relu, gelu (both forms), swish are read")))?;
        let mut layers = 0;
        while self.bin.has(&format!("encoder/layer_{layers}/self_attention/linear_0/weight")) {
            layers += 1;
        }
        let dec =
            (0..).take_while(|i| self.bin.has(&format!("decoder/layer_{i}/self_attention/linear_0/weight"))).count();
        if layers == 0 || layers != dec {
            return Err(self.err(format!(
                "{layers} encoder and {dec} decoder layers: this engine's stacks have as many layers, at least one"
            )));
        }
        let emb = self.shape("decoder/embeddings/weight").ok_or_else(|| self.err("no decoder/embeddings/weight"))?;
        let [_, d] = emb[..] else { return Err(self.err(format!("decoder/embeddings/weight has shape {emb:?}"))) };
        let ffn = self.shape("encoder/layer_0/ffn/linear_0/weight").unwrap_or_default();
        let d_ff = *ffn.first().ok_or_else(|| self.err("no encoder/layer_0/ffn/linear_0/weight"))?;
        if heads <= 0 || d % heads as usize != 0 {
            return Err(self.err(format!("{heads} heads do not divide d_model {d}")));
        }
        let scale = self.embedding_scale(d)?;
        let eps = match config.get("layer_norm_epsilon") {
            None | Some(serde_json::Value::Null) => CT2_LAYER_NORM_EPS,
            Some(v) => v
                .as_f64()
                .filter(|e| *e > 0.0)
                .map(|e| e as f32)
                .ok_or_else(|| err(cfg_path, "layer_norm_epsilon is not a number above 0"))?,
        };
        let (max_positions, sinusoid_layout, learned_positions) = self.positions(d)?;
        Ok(Architecture {
            layers,
            d_model: d,
            heads: heads as usize,
            d_ff,
            max_positions,
            layer_norm_eps: eps,
            activation,
            sinusoid_layout,
            scale_embedding: scale,
            learned_positions,
        })
    }

    /// Whether the embeddings are scaled by √d_model: `scale_embeddings` is a flag (an integer,
    /// as the model-spec API stores a bool) or the multiplier itself (a float, as the
    /// `transformers` converter stores it: √d_model, or 1).
    fn embedding_scale(&mut self, d: usize) -> Result<bool> {
        let mut sides = Vec::new();
        for side in ["encoder", "decoder"] {
            let name = format!("{side}/scale_embeddings");
            if !self.bin.has(&name) {
                sides.push(true);
                continue;
            }
            let v = self.var(&name)?.clone();
            let x = match v.values().as_slice() {
                [x] => *x,
                _ => return Err(self.err(format!("{name} is not one value"))),
            };
            let root = (d as f64).sqrt();
            sides.push(match v.dtype {
                DType::I8 | DType::I16 | DType::I32 => x != 0.0,
                _ if (x - root).abs() <= 1e-3 * root => true,
                _ if (x - 1.0).abs() <= 1e-6 => false,
                _ => {
                    return Err(self.err(format!(
                        "{name} is {x}: this engine scales embeddings by √d_model ({root}) or not at all"
                    )))
                }
            });
        }
        if sides[0] != sides[1] {
            return Err(self.err("the encoder and the decoder scale their embeddings differently: this engine has one"));
        }
        Ok(sides[0])
    }

    /// The position table: one of our sinusoid layouts (to the stored type's rounding), else learned
    /// positions.
    fn positions(&mut self, d: usize) -> Result<(usize, SinusoidLayout, Option<Vec<f32>>)> {
        let name = "encoder/position_encodings/encodings";
        let Some(shape) = self.shape(name) else {
            return Err(self.err(
                "no position table (encoder/position_encodings/encodings): a model whose positions CTranslate2 \
                 computes itself, or rotary or relative positions, is not read",
            ));
        };
        let [rows, cols] = shape[..] else { return Err(self.err(format!("{name} has shape {shape:?}"))) };
        if cols != d || rows == 0 {
            return Err(self.err(format!("{name} has shape {shape:?}, d_model is {d}")));
        }
        // Sinusoids stored at float16 or bfloat16 are ours rounded: matched to within that
        // rounding (half an ulp at 1: 2^-11, 2^-8), which no two layouts are.
        let tolerance = match self.bin.get(name).map(|v| v.dtype) {
            Some(DType::F16) => 1e-3,
            Some(DType::BF16) => 8e-3,
            _ => 1e-5,
        };
        let table = self.floats(name, &[rows, d])?;
        let dec = self.floats("decoder/position_encodings/encodings", &[rows, d])?;
        if dec != table {
            return Err(self.err("the encoder's and the decoder's position tables differ: this engine has one"));
        }
        // Rounded sinusoids are what CTranslate2 adds (it reads the table back to float32): they
        // stay a table, so that scores match its to 1e-3, not to that rounding.
        let rounded = tolerance > 1e-5;
        for layout in [SinusoidLayout::Interleaved, SinusoidLayout::Halves, SinusoidLayout::Marian] {
            let ours = crate::kernels::cpu::embedding::sinusoid_table(rows, d, layout);
            if ours.iter().zip(&table).all(|(a, b)| (a - b).abs() <= tolerance) {
                return Ok((rows, layout, rounded.then_some(table)));
            }
        }
        Ok((rows, SinusoidLayout::default(), Some(table)))
    }

    /// Every layer tensor of `c`, split from CTranslate2's fused ones, by our name.
    fn layer_tensors(&mut self, c: &ModelConfig) -> Result<BTreeMap<String, Tensor>> {
        let layout = ParamLayout::new(c);
        let mut out = BTreeMap::new();
        for s in layer_slots(c) {
            let parts: Vec<Vec<usize>> =
                s.ours.iter().map(|n| layout.get(n).expect("the layout has every slot").shape.clone()).collect();
            let rows: usize = parts.iter().map(|p| p[0]).sum();
            let mut shape = vec![rows];
            shape.extend(parts[0].iter().skip(1));
            let values = self.floats(&s.ct2, &shape)?;
            let mut at = 0;
            for (n, p) in s.ours.iter().zip(parts) {
                let len: usize = p.iter().product();
                out.insert(n.clone(), Tensor { shape: p, data: values[at..at + len].to_vec() });
                at += len;
            }
        }
        Ok(out)
    }

    /// The output layer must be the target embedding (tied, §3.4).
    fn check_tied(&mut self, v: usize, d: usize) -> Result<()> {
        let (p, e) = ("decoder/projection/weight", "decoder/embeddings/weight");
        if self.bin.resolve(p) != self.bin.resolve(e) && self.floats(p, &[v, d])? != self.floats(e, &[v, d])? {
            return Err(self.err("the output layer is not the target embedding: this engine ties them (§3.4)"));
        }
        self.read.insert(p.into());
        Ok(())
    }

    /// Refuses every variable not read (a layer this engine does not have).
    fn check_all_read(&self) -> Result<()> {
        let ignored =
            ["decoder/alignment_heads", "decoder/alignment_layer", "encoder/embeddings_merge", "decoder/scale_alibi"];
        let left: Vec<&String> = self
            .bin
            .variables
            .keys()
            .chain(self.bin.aliases.keys())
            .filter(|n| !self.read.contains(*n) && !ignored.contains(&n.as_str()) && !n.ends_with("_scale"))
            .filter(|n| !n.starts_with("decoder/alibi"))
            .collect();
        match left.first() {
            None => Ok(()),
            Some(n) => Err(self.err(format!(
                "{n} (and {} more) is a layer this engine does not have: the model is not read",
                left.len() - 1
            ))),
        }
    }

    /// The checkpoint of a model `export ct2` wrote: our ids are its token ids.
    fn ours(
        &mut self,
        a: &Architecture,
        tok: &Tokenizer,
        source_tokens: &[String],
        target_tokens: Option<&[String]>,
        tok_path: &Path,
    ) -> Result<Checkpoint> {
        let v = target_tokens.unwrap_or(source_tokens).len();
        let separate = target_tokens.is_some();
        let d = a.d_model;
        if self.scalar("decoder/start_from_zero_embedding", 0)? != 0 {
            return Err(self.err("start_from_zero_embedding is set, which `export ct2` never writes"));
        }
        let bias = if self.bin.has("decoder/projection/bias") {
            self.floats("decoder/projection/bias", &[v])?
        } else {
            vec![0.0; v]
        };
        // `export ct2` writes zeros for a model without a bias on its logits.
        let output_bias = bias.iter().any(|&b| b != 0.0);
        let config = a.model_config(v, separate.then_some(source_tokens.len()), output_bias);
        config.validate()?;
        if tok.vocab_size() != v || tok.source_vocab_size() != config.import.source_vocab_size {
            return Err(err(tok_path, "this tokenizer's vocabulary is not the model's token lists"));
        }
        for (side, tokens) in
            [(TokSide::Target, target_tokens.unwrap_or(source_tokens)), (TokSide::Source, source_tokens)]
        {
            for (id, t) in tokens.iter().enumerate() {
                let piece = tok.piece_of_id(side, id as u32).unwrap_or_default();
                if &piece != t && !t.starts_with("<transformer:") {
                    return Err(err(
                        tok_path,
                        format!("token {id} is {t:?} in the model's vocabulary but {piece:?} in this tokenizer"),
                    ));
                }
            }
        }
        self.check_tied(v, d)?;
        let mut tensors = self.layer_tensors(&config)?;
        let target = self.floats("decoder/embeddings/weight", &[v, d])?;
        let source = if separate {
            Some(self.floats("encoder/embeddings_0/weight", &[source_tokens.len(), d])?)
        } else {
            if self.floats("encoder/embeddings_0/weight", &[v, d])? != target {
                return Err(self.err("the source and target embeddings differ with one vocabulary"));
            }
            None
        };
        self.check_all_read()?;
        let layout = ParamLayout::new(&config);
        let mut params = vec![0f32; layout.total()];
        for e in layout.entries() {
            let values = match e.name.as_str() {
                "embed.weight" => target.clone(),
                "encoder.embed.weight" => source.clone().expect("separate"),
                "output.bias" => bias.clone(),
                "embed.positions" => a.learned_positions.clone().expect("learned"),
                n => tensors.remove(n).ok_or_else(|| self.err(format!("no source for our tensor {n}")))?.data,
            };
            params[e.range()].copy_from_slice(&values);
        }
        let mut extra = BTreeMap::new();
        extra.insert("imported_from".to_string(), "ct2".to_string());
        Ok(Checkpoint { config, step: 0, vocab_hash: tok.hash().to_string(), params, adam: None, extra })
    }

    /// The model in the Marian import's neutral form, with SentencePiece models `spm`.
    #[allow(clippy::too_many_arguments)]
    fn foreign(
        &mut self,
        dir: &Path,
        arch: Architecture,
        config: &serde_json::Value,
        cfg_path: &Path,
        source_tokens: Vec<String>,
        target_tokens: Option<Vec<String>>,
        (src_spm, tgt_spm): (PathBuf, PathBuf),
    ) -> Result<ForeignModel> {
        let token = |key: &str, default: &str| -> Result<String> {
            match config.get(key) {
                None | Some(serde_json::Value::Null) => Ok(default.to_string()),
                Some(v) => {
                    v.as_str().map(str::to_string).ok_or_else(|| err(cfg_path, format!("{key} is not a string")))
                }
            }
        };
        if config.get("add_source_bos").and_then(|b| b.as_bool()) == Some(true) {
            return Err(err(cfg_path, "add_source_bos is true: this engine's encoder never reads a start token"));
        }
        let (eos, unk) = (token("eos_token", "</s>")?, token("unk_token", "<unk>")?);
        let zero_start = self.scalar("decoder/start_from_zero_embedding", 0)? != 0;
        let start_token = if zero_start { "<pad>".to_string() } else { token("decoder_start_token", "<s>")? };
        let d = arch.d_model;
        let v_tgt = target_tokens.as_ref().unwrap_or(&source_tokens).len();
        let v_src = source_tokens.len();
        let separate_embedding =
            self.bin.resolve("encoder/embeddings_0/weight") != self.bin.resolve("decoder/embeddings/weight");
        let separate = target_tokens.is_some() || separate_embedding;
        self.check_tied(v_tgt, d)?;
        // Marian's decoder starts from a zero vector: as the native import does, `<pad>` is
        // appended where the vocabulary has none, as the start token with a zero row.
        let vocab = |tokens: Vec<String>| {
            let mut v = Vocab { pieces: tokens };
            if v.id(&start_token).is_none() && zero_start {
                v.pieces.push(start_token.clone());
            }
            v
        };
        let source_vocab = vocab(source_tokens);
        // Separate embeddings over one token list are two vocabularies that happen to be equal.
        let target_vocab = target_tokens.map(vocab).or_else(|| separate.then(|| source_vocab.clone()));
        let side = |v: &Vocab, rows: usize, embedding: &str, what: &str| -> Result<Side> {
            let id = |t: &str| v.id(t).ok_or_else(|| err(cfg_path, format!("the {what} vocabulary has no {t:?}")));
            Ok(Side {
                ids: v.len(),
                start: Some(id(&start_token)?),
                eos: id(&eos)?,
                unk: id(&unk)?,
                rows,
                embedding: vec![embedding.to_string()],
            })
        };
        let target =
            side(target_vocab.as_ref().unwrap_or(&source_vocab), v_tgt, "decoder/embeddings/weight", "target")?;
        let source =
            if separate { Some(side(&source_vocab, v_src, "encoder/embeddings_0/weight", "source")?) } else { None };
        // The layer tensors by our names (split from the fused ones), the embeddings and the bias
        // by CTranslate2's; the names map is then the identity.
        let probe = arch.model_config(v_tgt, None, false);
        let mut map = self.layer_tensors(&probe)?;
        let names = Names { map: map.keys().map(|k| (k.clone(), k.clone())).collect() };
        map.insert(
            "decoder/embeddings/weight".into(),
            Tensor { shape: vec![v_tgt, d], data: self.floats("decoder/embeddings/weight", &[v_tgt, d])? },
        );
        if separate {
            map.insert(
                "encoder/embeddings_0/weight".into(),
                Tensor { shape: vec![v_src, d], data: self.floats("encoder/embeddings_0/weight", &[v_src, d])? },
            );
        } else {
            self.var("encoder/embeddings_0/weight")?;
        }
        if self.bin.has("decoder/projection/bias") {
            map.insert(
                "decoder/projection/bias".into(),
                Tensor { shape: vec![v_tgt], data: self.floats("decoder/projection/bias", &[v_tgt])? },
            );
        }
        self.check_all_read()?;
        Ok(ForeignModel {
            dir: dir.to_path_buf(),
            format: "ct2",
            architecture: arch,
            target,
            source,
            tensors: Tensors { map, path: self.path.clone() },
            names,
            output_bias: "decoder/projection/bias".into(),
            transposed: false,
            tokenizer: TokenizerParts {
                source_spm: read_spm(&src_spm)?,
                target_spm: read_spm(&tgt_spm)?,
                source_vocab,
                target_vocab,
                eos,
                unk,
                pad: start_token,
            },
        })
    }
}
