//! CTranslate2 model directories, both ways: [`export()`] writes one of our models as a directory
//! CTranslate2 decodes (`model.bin`, `config.json`, the vocabularies), and [`import()`] reads the
//! Transformer directories CTranslate2's converters write (float32, float16, bfloat16, int8 and
//! int16 weights) into a checkpoint of ours.
//!
//! `bin.rs` is the `model.bin` format, `names.rs` where our tensors sit in CTranslate2's
//! `TransformerSpec`, `export.rs` and `read.rs` the two directions.

mod bin;
mod export;
mod names;
mod read;

pub use bin::{DType, ModelBin, Variable, BINARY_VERSION, MAX_MODEL_BIN_BYTES};
pub use export::{export, model, Ct2Model, Ct2Weights, REVISION, SPEC, TOKENIZER_FILE};
pub use read::{import, is_ct2_dir, Ct2Import};
