//! Models trained by other toolkits, imported into this engine (and written back out): CTranslate2's
//! model directories ([`ct2`]), Marian / OPUS-MT ([`marian`]), from a Hugging Face `MarianMTModel` directory (`model.safetensors` or
//! `pytorch_model.bin`) or from a native Marian model (`model.npz`, `decoder.yml`, vocabularies).
//!
//! An import writes an ordinary checkpoint (the paper's model with the options of
//! [`crate::config::ModelConfig`] that the imported architecture needs: its FFN activation, a
//! final logits bias, the sinusoid layout, separate vocabularies) and one tokenizer file
//! ([`crate::data::tokenizer::Tokenizer`]) that every verb accepts in place of a BPE model.

pub mod ct2;
mod files;
pub mod hf_export;
pub mod marian;
pub mod npz;
pub mod pickle;
mod yaml;

pub use crate::data::tokenizer::IdMap;

/// The most bytes one entry of a zip archive of `archive_bytes` may expand to: model archives
/// store their arrays (numpy's `savez`, `torch.save`) or deflate them little, so an entry over four
/// times its whole archive (plus 1 MiB) is a zip bomb, refused before it is read.
pub(crate) fn max_entry_bytes(archive_bytes: u64) -> u64 {
    archive_bytes.saturating_mul(4).saturating_add(1 << 20)
}
