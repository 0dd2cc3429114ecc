//! A model with an imported tokenizer written back out as a native Marian model: `model.npz`
//! (its tensors under Marian's names and in Marian's orientation, `special:model.yml` inside),
//! `decoder.yml`, and its vocabularies: the SentencePiece models themselves where the ids are
//! theirs (what Marian's trainer writes), else `.yml` piece lists beside `source.spm` and
//! `target.spm` (what an OPUS-MT release holds). The inverse of the native import
//! ([`super::native`]): importing what this writes gives the same tensors back.
//!
//! Only what Marian has is written; anything else is refused by name: learned positions, the
//! paper's or the port's sinusoid layouts, an unscaled embedding, GELU's tanh form (and the
//! sigmoid form, which only Marian before v1.12.3 computes), a LayerNorm ε other than Marian's,
//! heads whose width is not d_model / heads, this project's parsing inputs, a BPE vocabulary, and
//! a start token whose row is not zero (Marian's decoder starts from a zero vector).

use super::assemble::transpose;
use super::native::names;
use crate::checkpoint::Checkpoint;
use crate::config::{Activation, ModelConfig, Positions, SinusoidLayout};
use crate::data::sentencepiece::SentencePiece;
use crate::data::tokenizer::{IdMap, ImportedTokenizer, Tokenizer};
use crate::error::{Error, Result};
use crate::import::yaml;
use crate::params::ParamLayout;
use crate::vocab::BOS;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Marian's LayerNorm ε (the native import reads every Marian model with it).
const MARIAN_LAYER_NORM_EPS: f32 = 1e-6;

/// The Marian version whose arithmetic the written model has (exact GELU: v1.12.3 and later).
const WRITTEN_AS: &str = "v1.12.42";

/// Writes `ckpt` with `tokenizer` into the directory `out` (created; it must not hold a Marian
/// model already) and returns the files written. A checkpoint whose parameters do not fit its
/// configuration, or a tokenizer of another vocabulary size, is an error.
pub fn export(ckpt: &Checkpoint, tokenizer: &Tokenizer, out: &Path) -> Result<Vec<PathBuf>> {
    export_with(ckpt, tokenizer, out, false)
}

/// [`export`]; with `tool_defaults` (`--tool-defaults`, the `export-tool-defaults` departure) a
/// model imported from the Hugging Face port goes out too: Marian computes its own sinusoids
/// (tensor2tensor's frequencies, not the port's) and its own LayerNorm ε (1e-6, not the port's
/// 1e-5), so the function changes slightly, the tensors not at all.
pub fn export_with(ckpt: &Checkpoint, tokenizer: &Tokenizer, out: &Path, tool_defaults: bool) -> Result<Vec<PathBuf>> {
    let ckpt = &*crate::import::rounded_sinusoids_as_computed(ckpt);
    let c = &ckpt.config;
    c.validate()?;
    check_options(c, tool_defaults)?;
    let Tokenizer::Marian(tok) = tokenizer else {
        return Err(Error::Unsupported(
            "export marian: the model's vocabulary is a BPE model of ours, which Marian cannot read (export models \
             imported from Marian / OPUS-MT, fine-tuned or not)"
                .into(),
        ));
    };
    let layout = ParamLayout::new(c);
    let total = layout.total();
    if ckpt.params.len() != total {
        return Err(Error::Mismatch(format!(
            "export marian: the checkpoint has {} parameters, its configuration needs {total}",
            ckpt.params.len()
        )));
    }
    if tokenizer.vocab_size() != c.vocab_size || tokenizer.source_vocab_size() != c.import.source_vocab_size {
        return Err(Error::Mismatch(format!(
            "export marian: the model's vocabulary is {} (source: {:?}) but the tokenizer's is {} (source: {:?}): \
             pass the tokenizer the checkpoint was trained with",
            c.vocab_size,
            c.import.source_vocab_size,
            tokenizer.vocab_size(),
            tokenizer.source_vocab_size()
        )));
    }
    let (src_map, tgt_map) = tok.maps();
    let m = tok.inner();
    let shared = !m.separate_vocabs();
    let param = |name: &str| layout.get(name).map(|e| &ckpt.params[e.range()]);
    let target_embedding = param("embed.weight").expect("every model has its target embedding");
    check_start(target_embedding, c.d_model)?;
    let source_embedding = param("encoder.embed.weight").unwrap_or(target_embedding);
    let vocabs = vocab_files(tok, [source_embedding, target_embedding], c.d_model)?;
    let [src_rows, tgt_rows] = vocabs.rows;
    let names = names(c.n_layers);
    let d = c.d_model;
    let mut arrays: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for e in layout.entries() {
        let v = &ckpt.params[e.range()];
        match e.name.as_str() {
            "embed.weight" => {
                let name = if shared { "Wemb" } else { "decoder_Wemb" };
                arrays.push((name.into(), vec![tgt_rows, d], marian_rows(v, d, tgt_map, tgt_rows)));
            }
            "encoder.embed.weight" => {
                arrays.push(("encoder_Wemb".into(), vec![src_rows, d], marian_rows(v, d, src_map, src_rows)));
            }
            "output.bias" => {
                let bias = (0..tgt_rows as u32).map(|f| v[tgt_map.ours(f) as usize]).collect();
                arrays.push(("decoder_ff_logit_out_b".into(), vec![1, tgt_rows], bias));
            }
            n => {
                let foreign = names.map.get(n).ok_or_else(|| {
                    Error::Unsupported(format!("export marian: our tensor {n} has no Marian counterpart"))
                })?;
                match e.shape.as_slice() {
                    // Ours (out, in): y = W·x; Marian's (in, out): y = x·W.
                    [rows, cols] => arrays.push((foreign.clone(), vec![*cols, *rows], transpose(v, *rows, *cols))),
                    [n] => arrays.push((foreign.clone(), vec![1, *n], v.to_vec())),
                    s => return Err(Error::Unsupported(format!("export marian: {n} has shape {s:?}"))),
                }
            }
        }
    }
    if !c.import.output_bias {
        arrays.push(("decoder_ff_logit_out_b".into(), vec![1, tgt_rows], vec![0.0; tgt_rows]));
    }
    let yml = model_yml(c, shared, src_rows, tgt_rows);
    let npz = npz_bytes(&out.join("model.npz"), &arrays, &yml)?;
    let [sv, tv] = vocabs.names;
    let decoder = format!(
        "models:\n  - model.npz\nvocabs:\n  - {sv}\n  - {tv}\nrelative-paths: true\nbeam-size: 4\nnormalize: 0\n\
         word-penalty: 0\nmini-batch: 16\nmaxi-batch: 100\nmaxi-batch-sort: src\n"
    );
    // All or nothing, never over a file or through a link (a dangling one included).
    let mut files: Vec<(&str, &[u8])> = vec![("model.npz", &npz)];
    files.extend(vocabs.files.iter().map(|(n, b)| (*n, b.as_slice())));
    files.push(("decoder.yml", decoder.as_bytes()));
    crate::io::publish_new(out, &files, &WRITTEN).map_err(|e| Error::Input(format!("export marian: {e}")))
}

/// Refuses, by name, each option of `c` that Marian's Transformer does not have.
fn check_options(c: &ModelConfig, tool_defaults: bool) -> Result<()> {
    let refuse = |what: String| Err(Error::Unsupported(format!("export marian: Marian has no {what}")));
    if c.positions != Positions::Sinusoidal {
        return refuse("learned positions (model.positions = learned)".into());
    }
    let port = tool_defaults && c.import.sinusoid_layout == SinusoidLayout::Halves;
    if c.import.sinusoid_layout != SinusoidLayout::Marian && !port {
        let hint = match c.import.sinusoid_layout {
            SinusoidLayout::Halves => "; --tool-defaults writes the port's as Marian's own",
            _ => "",
        };
        return refuse(format!("sinusoid layout {:?} (only its own, `marian`{hint})", c.import.sinusoid_layout));
    }
    if !c.import.scale_embedding {
        return refuse("unscaled embedding (scale_embedding = false)".into());
    }
    if matches!(c.import.activation, Activation::GeluTanh | Activation::GeluSigmoid) {
        return refuse(format!("activation {} (relu, swish and the exact gelu are its)", c.import.activation.name()));
    }
    if c.layer_norm_eps != MARIAN_LAYER_NORM_EPS && !tool_defaults {
        return refuse(format!(
            "LayerNorm ε {} (its is {MARIAN_LAYER_NORM_EPS}; --tool-defaults writes the model for Marian's)",
            c.layer_norm_eps
        ));
    }
    if c.d_k * c.n_heads != c.d_model || c.d_v != c.d_k {
        return refuse(format!(
            "heads of d_k {} and d_v {} with d_model {} and {} heads",
            c.d_k, c.d_v, c.d_model, c.n_heads
        ));
    }
    if c.parsing.source_pointer || c.parsing.next_closer || c.parsing.char_dim > 0 {
        return refuse("parsing inputs (source_pointer, next_closer, char_dim)".into());
    }
    Ok(())
}

/// Every file an export may write (none may exist before it).
const WRITTEN: [&str; 8] = [
    "model.npz",
    "decoder.yml",
    "vocab.spm",
    "source.spm",
    "target.spm",
    "vocab.yml",
    "vocab.src.yml",
    "vocab.trg.yml",
];

/// The vocabulary files of an export and the rows each side has in Marian's model.
struct VocabFiles {
    /// (file name, contents), written beside the model.
    files: Vec<(&'static str, Vec<u8>)>,
    /// The source and target vocabularies `decoder.yml` names.
    names: [&'static str; 2],
    /// Marian's embedding rows on the source and target sides.
    rows: [usize; 2],
}

/// The vocabularies as Marian reads them. Where a side's ids are its SentencePiece model's (a
/// model Marian trained with `.spm` vocabularies), the `.spm` files themselves; otherwise (an
/// OPUS-MT release's `vocab.yml`, a Hugging Face port's `vocab.json`) `.yml` lists of `piece: id`,
/// with the SentencePiece models beside them under the release names (`source.spm`, `target.spm`):
/// Marian then reads text already cut into pieces, as OPUS-MT releases do. A vocabulary's last
/// entry `<pad>` with a zero row (the start token the import adds; Marian starts from a zero
/// vector instead) is not written. `embeddings` are the (source, target) embeddings, D wide.
fn vocab_files(tok: &ImportedTokenizer, embeddings: [&[f32]; 2], d: usize) -> Result<VocabFiles> {
    let m = tok.inner();
    let shared = !m.separate_vocabs();
    let (src, tgt) = (m.source_model(), m.target_model());
    let (_, _, pad) = m.special_tokens();
    let pieces = |target: bool| {
        m.pieces_by_id(target).ok_or_else(|| {
            Error::Unsupported(format!(
                "export marian: the {} vocabulary's ids are not 0..n without gaps",
                if target { "target" } else { "source" }
            ))
        })
    };
    let (sp, tp) = (pieces(false)?, pieces(true)?);
    if is_spm_list(&sp, src, pad) && is_spm_list(&tp, tgt, pad) {
        return Ok(if shared {
            VocabFiles {
                files: vec![("vocab.spm", src.to_bytes().to_vec())],
                names: ["vocab.spm"; 2],
                rows: [src.len(); 2],
            }
        } else {
            VocabFiles {
                files: vec![("source.spm", src.to_bytes().to_vec()), ("target.spm", tgt.to_bytes().to_vec())],
                names: ["source.spm", "target.spm"],
                rows: [src.len(), tgt.len()],
            }
        });
    }
    let (src_map, tgt_map) = tok.maps();
    // The rows a side has in Marian: its pieces, but for a last `<pad>` with a zero row. `<pad>` is
    // the start token on each side (IdMap), so on the target side its row is our BOS row, which
    // check_start has found zero; the test decides on a separate source side.
    let rows = |pieces: &[&str], map: &IdMap, embedding: &[f32]| {
        let n = pieces.len();
        let added_pad =
            n > 0 && pieces[n - 1] == pad && row(embedding, d, map.ours(n as u32 - 1)).iter().all(|&x| x == 0.0);
        if added_pad {
            n - 1
        } else {
            n
        }
    };
    let yml = |pieces: &[&str]| -> Vec<u8> {
        pieces.iter().enumerate().map(|(id, p)| format!("{}: {id}\n", yaml::quote(p))).collect::<String>().into_bytes()
    };
    let spms = [("source.spm", src.to_bytes().to_vec()), ("target.spm", tgt.to_bytes().to_vec())];
    let sn = rows(&sp, src_map, embeddings[0]);
    Ok(if shared {
        VocabFiles {
            files: [("vocab.yml", yml(&sp[..sn]))].into_iter().chain(spms).collect(),
            names: ["vocab.yml"; 2],
            rows: [sn; 2],
        }
    } else {
        let tn = rows(&tp, tgt_map, embeddings[1]);
        VocabFiles {
            files: [("vocab.src.yml", yml(&sp[..sn])), ("vocab.trg.yml", yml(&tp[..tn]))]
                .into_iter()
                .chain(spms)
                .collect(),
            names: ["vocab.src.yml", "vocab.trg.yml"],
            rows: [sn, tn],
        }
    })
}

/// Whether a side's vocabulary (its pieces in id order) is its SentencePiece model's: the same
/// pieces under the same ids, and no others but a last `pad` (the start token the import adds).
fn is_spm_list(pieces: &[&str], spm: &SentencePiece, pad: &str) -> bool {
    let own = match pieces.last() {
        Some(&last) if last == pad && pieces.len() == spm.len() + 1 => &pieces[..spm.len()],
        _ => pieces,
    };
    own.len() == spm.len() && own.iter().enumerate().all(|(id, &p)| spm.id_to_piece(id as u32) == Some(p))
}

/// Marian's decoder starts from a zero vector, so the row of our start token must be zero (the
/// import adds it so, and fine-tuning keeps it).
fn check_start(target_embedding: &[f32], d: usize) -> Result<()> {
    if row(target_embedding, d, BOS).iter().any(|&x| x != 0.0) {
        return Err(Error::Unsupported(
            "export marian: Marian has no start token (its decoder starts from a zero vector), and this model's start \
             row is not zero"
                .into(),
        ));
    }
    Ok(())
}

/// Row `id` of a D-wide embedding.
fn row(embedding: &[f32], d: usize, id: u32) -> &[f32] {
    &embedding[id as usize * d..][..d]
}

/// Embedding rows (ours, D) in Marian's id order, `rows` of them.
fn marian_rows(v: &[f32], d: usize, map: &IdMap, rows: usize) -> Vec<f32> {
    (0..rows as u32).flat_map(|f| v[map.ours(f) as usize * d..][..d].iter().copied()).collect()
}

/// Marian's `special:model.yml` for `c`: every option its Transformer reads, with its values.
fn model_yml(c: &ModelConfig, shared: bool, src_rows: usize, tgt_rows: usize) -> String {
    let activation = match c.import.activation {
        Activation::Relu => "relu",
        Activation::Swish => "swish",
        _ => "gelu",
    };
    format!(
        "type: transformer\ndim-emb: {}\ndim-vocabs:\n  - {src_rows}\n  - {tgt_rows}\nenc-depth: {n}\ndec-depth: {n}\n\
         transformer-heads: {}\ntransformer-dim-ffn: {}\ntransformer-decoder-dim-ffn: 0\ntransformer-ffn-depth: 2\n\
         transformer-decoder-ffn-depth: 0\ntransformer-ffn-activation: {activation}\ntransformer-postprocess: dan\n\
         transformer-postprocess-emb: d\ntransformer-postprocess-top: \"\"\ntransformer-preprocess: \"\"\n\
         transformer-decoder-autoreg: self-attention\ntransformer-tied-layers:\n  []\n\
         transformer-train-position-embeddings: false\ntransformer-disable-position-embeddings: false\n\
         transformer-no-bias: false\ntransformer-no-affine: false\ntied-embeddings: true\ntied-embeddings-all: {shared}\n\
         tied-embeddings-src: false\nlayer-normalization: false\nright-left: false\noutput-omit-bias: false\n\
         version: {WRITTEN_AS} (written by transformer export marian)\n",
        c.d_model,
        c.n_heads,
        c.d_ff,
        n = c.n_layers,
    )
}

/// A NumPy `.npz` (a zip of `.npy` files, stored): f32 arrays, then `special:model.yml`
/// as int8 bytes ending in a NUL, as Marian writes it.
fn npz_bytes(path: &Path, arrays: &[(String, Vec<usize>, Vec<f32>)], yml: &str) -> Result<Vec<u8>> {
    let fail = |e: &dyn std::fmt::Display| Error::Input(format!("{}: {e}", path.display()));
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut buf);
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        let mut entry = |name: &str, descr: &str, shape: &[usize], data: &[u8]| -> Result<()> {
            zip.start_file(format!("{name}.npy"), opts).map_err(|e| fail(&e))?;
            zip.write_all(&npy_header(descr, shape)).map_err(|e| fail(&e))?;
            zip.write_all(data).map_err(|e| fail(&e))
        };
        for (name, shape, v) in arrays {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            entry(name, "<f4", shape, &bytes)?;
        }
        let mut yml = yml.as_bytes().to_vec();
        yml.push(0);
        entry("special:model.yml", "|i1", &[yml.len()], &yml)?;
        zip.finish().map_err(|e| fail(&e))?;
    }
    Ok(buf.into_inner())
}

/// A `.npy` version 1.0 header: magic, length, the dictionary padded with spaces to a multiple of
/// 64 bytes (as numpy pads it), ending in a newline.
fn npy_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}
