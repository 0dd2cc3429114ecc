//! The second half of every import: from a Marian model in neutral form ([`ForeignModel`]) to our
//! checkpoint. It builds the id maps onto our vocabulary ([`IdMap`]), our configuration, and our
//! parameters: each layer tensor found by its foreign name (transposed where the format stores
//! (in, out)), the embeddings' rows and the output bias put in our id order.

use super::foreign::{err, Architecture, ForeignModel, Imported, Side, TokenizerParts};
use crate::checkpoint::Checkpoint;
use crate::config::{ImportOptions, ModelConfig, Positions};
use crate::data::tokenizer::IdMap;
use crate::error::Result;
use crate::params::ParamLayout;
use std::collections::BTreeMap;
use std::path::Path;

pub use crate::vocab::MASKED_LOGIT;

/// Our model and tokenizer parts from `model`.
pub(crate) fn assemble(model: ForeignModel) -> Result<Imported> {
    let ForeignModel {
        dir,
        format,
        architecture,
        target,
        source,
        mut tensors,
        names,
        output_bias,
        transposed,
        tokenizer,
    } = model;
    let tgt_map = id_map(&target)?;
    check_special_pieces(&dir, &target, &tokenizer)?;
    let src_map = source.as_ref().map(id_map).transpose()?;
    let config = config(&architecture, &tgt_map, src_map.as_ref());
    config.validate()?;
    let d = config.d_model;
    let tgt_emb = tensors.take_any(&embedding_names(&target), &[target.rows, d])?;
    let src_emb = match &source {
        Some(s) => Some(tensors.take_any(&embedding_names(s), &[s.rows, d])?),
        None => None,
    };
    let bias =
        if tensors.has(&output_bias) { tensors.take(&output_bias, &[target.rows])? } else { vec![0.0; target.rows] };
    let params = fill(&config, |name, shape| match name {
        "embed.weight" => Ok(reorder_rows(&tgt_emb, d, &tgt_map)),
        "encoder.embed.weight" => {
            Ok(reorder_rows(src_emb.as_ref().expect("separate"), d, src_map.as_ref().expect("separate")))
        }
        "output.bias" => Ok(reorder_bias(&bias, &tgt_map)),
        "embed.positions" => Ok(architecture.learned_positions.clone().expect("learned positions are in the layout")),
        n => {
            let foreign = names.map.get(n).ok_or_else(|| err(&dir, format!("no source for our tensor {n}")))?;
            if transposed && shape.len() == 2 {
                let v = tensors.take(foreign, &[shape[1], shape[0]])?;
                Ok(transpose(&v, shape[1], shape[0]))
            } else {
                tensors.take(foreign, shape)
            }
        }
    })?;
    Ok(Imported { checkpoint: checkpoint(config, params, format), tokenizer, source: format.to_string(), dir })
}

/// Our configuration of a Marian Transformer with these id maps.
fn config(a: &Architecture, tgt_map: &IdMap, src_map: Option<&IdMap>) -> ModelConfig {
    a.model_config(tgt_map.len(), src_map.map(IdMap::len), true)
}

impl Architecture {
    /// Our configuration of this architecture for inference and fine-tuning (no dropout or
    /// smoothing of its own): a target vocabulary of `vocab_size`, a separate source one of
    /// `source_vocab_size`, and whether the logits have a bias.
    pub(crate) fn model_config(
        &self,
        vocab_size: usize,
        source_vocab_size: Option<usize>,
        output_bias: bool,
    ) -> ModelConfig {
        ModelConfig {
            n_layers: self.layers,
            d_model: self.d_model,
            d_ff: self.d_ff,
            n_heads: self.heads,
            d_k: self.d_model / self.heads,
            d_v: self.d_model / self.heads,
            dropout: 0.0,
            attention_dropout: 0.0,
            label_smoothing: 0.0,
            positions: if self.learned_positions.is_some() { Positions::Learned } else { Positions::Sinusoidal },
            max_positions: self.max_positions,
            vocab_size,
            layer_norm_eps: self.layer_norm_eps,
            import: ImportOptions {
                activation: self.activation,
                output_bias,
                source_vocab_size,
                sinusoid_layout: self.sinusoid_layout,
                scale_embedding: self.scale_embedding,
            },
            ..ModelConfig::base()
        }
    }
}

/// The foreign names a side's embedding may have.
fn embedding_names(side: &Side) -> Vec<&str> {
    side.embedding.iter().map(String::as_str).collect()
}

/// The map of one side's foreign ids onto ours.
fn id_map(side: &Side) -> Result<IdMap> {
    IdMap::new(side.ids, side.start, side.eos, side.unk)
}

/// The target vocabulary's pieces at the end and start ids must be the tokenizer's `</s>` and
/// padding pieces. Only a Hugging Face model takes these ids from a file (`config.json`); a native
/// model's are found by their pieces, so they always agree.
fn check_special_pieces(dir: &Path, target: &Side, t: &TokenizerParts) -> Result<()> {
    let Some(start) = target.start else { return Ok(()) };
    let vocab = t.target_vocab.as_ref().unwrap_or(&t.source_vocab);
    let piece = |id: u32| vocab.pieces.get(id as usize).map(String::as_str);
    if piece(target.eos) != Some(&t.eos) || piece(start) != Some(&t.pad) {
        return Err(err(
            dir,
            format!(
                "config.json's eos/pad ids {}/{start} are not {:?}/{:?} in the vocabulary",
                target.eos, t.eos, t.pad
            ),
        ));
    }
    Ok(())
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

/// A (rows, cols) matrix as (cols, rows).
pub(super) fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

/// A checkpoint at step 0 that records the format it was imported from.
fn checkpoint(config: ModelConfig, params: Vec<f32>, format: &str) -> Checkpoint {
    let mut extra = BTreeMap::new();
    extra.insert("imported_from".to_string(), format.to_string());
    Checkpoint { config, step: 0, vocab_hash: String::new(), params, adam: None, extra }
}
