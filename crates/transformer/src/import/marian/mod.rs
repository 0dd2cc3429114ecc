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
//!
//! The import runs by job: `hf.rs` (with `hf_tokenizer.rs`, which [`MarianTokenizer::from_hf_dir`]
//! shares) or `native.rs` reads a model into one neutral form (`foreign.rs`), `assemble.rs` builds
//! our checkpoint from it, and `output.rs` writes it out ([`write`]).
//!
//! [`ModelConfig`]: crate::config::ModelConfig
//! [`IdMap`]: crate::data::tokenizer::IdMap
//! [`MarianTokenizer::from_hf_dir`]: crate::data::marian_tokenizer::MarianTokenizer::from_hf_dir

mod assemble;
mod export;
mod foreign;
mod hf;
mod hf_tokenizer;
mod native;
mod output;

pub(crate) use assemble::assemble;
pub use assemble::MASKED_LOGIT;
pub use export::{export, export_with};
pub(crate) use foreign::{Architecture, ForeignModel, Names, Side, Tensors};
pub use foreign::{Imported, TokenizerParts, Vocab};
pub use hf_tokenizer::parse_hf_vocab;
pub use native::parse_yml_vocab;
pub use output::write;
pub(crate) use output::{tokenizer as tokenizer_of, write_model};

use crate::error::Result;
use foreign::err;
use std::path::Path;

/// Imports the Marian model in `dir`: a Hugging Face directory (`config.json` with
/// `model.safetensors` or `pytorch_model.bin`) or a native one (`*.npz`, with `decoder.yml` naming
/// the vocabularies, or `*.yml` vocabularies beside it).
pub fn import(dir: &Path) -> Result<Imported> {
    if !dir.is_dir() {
        return Err(err(dir, "not a directory: give the directory of a Marian or Hugging Face model"));
    }
    if dir.join("config.json").is_file() {
        assemble::assemble(hf::read(dir)?)
    } else if native::find_npz(dir)?.is_some() {
        assemble::assemble(native::read(dir)?)
    } else {
        Err(err(
            dir,
            "neither config.json (a Hugging Face MarianMTModel directory) nor a .npz model (native Marian) is there",
        ))
    }
}
