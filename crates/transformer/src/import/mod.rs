//! Models trained by other toolkits, imported into this engine: Marian / OPUS-MT
//! ([`marian`]), from a Hugging Face `MarianMTModel` directory (`model.safetensors` or
//! `pytorch_model.bin`) or from a native Marian model (`model.npz`, `decoder.yml`, vocabularies).
//!
//! An import writes an ordinary checkpoint (the paper's model with the options of
//! [`crate::config::ModelConfig`] that the imported architecture needs: its FFN activation, a
//! final logits bias, the sinusoid layout, separate vocabularies) and one tokenizer file
//! ([`crate::data::tokenizer::Tokenizer`]) that every verb accepts in place of a BPE model.

pub mod marian;
pub mod npz;
pub mod pickle;

pub use crate::data::tokenizer::IdMap;
