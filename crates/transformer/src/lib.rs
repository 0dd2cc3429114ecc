//! # transformer
//!
//! "Attention Is All You Need" (Vaswani et al., 2017) on an own CPU engine: explicit forward and
//! backward kernels over flat parameter, gradient and Adam buffers, in the manner of llm.c.
//!
//! ## Dimension legend (used in every shape comment)
//! | letter | meaning |
//! |---|---|
//! | B | sentences in a batch |
//! | S | source positions (padded) |
//! | T | target positions (padded) |
//! | M | rows of a flattened activation, B·S or B·T |
//! | D | d_model |
//! | H | heads |
//! | K | d_k, query/key width per head |
//! | V | d_v, value width per head (in attention); vocabulary size elsewhere |
//! | F | d_ff |
//!
//! ## Modules
//! From the bottom up; each imports only from those above it (and [`error`], [`io`]).
//! - [`error`], [`io`]: errors that say what to do, atomic writes, I/O errors that name their file.
//! - [`events`]: where the library tells what it is doing (messages, warnings, progress).
//! - [`vocab`]: the special tokens' ids and strings.
//! - [`rng`]: counter-based dropout masks and the initialisation generator.
//! - [`precision`]: f32, bf16 or int8 matrix products, a value each model carries.
//! - [`config`]: Table 3 columns and a preset per row.
//! - [`params`]: the named flat layout, its typed views and initialisation.
//! - [`kernels`]: fused CPU kernels ([`kernels::cpu`]) and their naive twins ([`kernels::reference`]).
//! - [`data`]: shared BPE, corpora, target encodings ([`data::encoding`]), downloads (Multi30k,
//!   the Penn Treebank sample), batching, binarised data (§5.1), treebanks (§6.3).
//! - [`task`]: translation or parsing, and where they differ.
//! - [`model`]: wiring of the encoder–decoder (§3), teacher-forced and incremental.
//! - [`checkpoint`]: safetensors checkpoints, their checks, and averaging (§6.1).
//! - [`eval`]: sacreBLEU-exact BLEU, chrF, EVALB-exact F1, perplexity, attention maps.
//! - [`decode`]: batched beam search (§6.1) and the [`Translator`] session: model, tokenizer,
//!   packed weights and state pool, for translating, parsing and scoring.
//! - [`train`]: learning-rate schedule (Eq. 3), Adam (§5.3), the training step, whole training
//!   runs with exact resume, and data-parallel runs over MPI (feature `mpi`).
//! - [`recipes`]: whole jobs over the library: the main job in one call ([`recipes::quickstart`]:
//!   built-in Multi30k to a scored model and a report; [`recipes::parsing`]: a treebank to a
//!   parser, its EVALB scores and a report) and Table 3 at this machine's scale ([`recipes::ablate`]).
//! - [`synthetic`]: copy/reverse tasks and the recipe that learns them.

// Numeric kernels index several slices with one loop variable; iterator chains would obscure them.
#![allow(clippy::needless_range_loop)]

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod decode;
pub mod error;
pub mod eval;
pub mod events;
pub mod import;
pub mod io;
pub mod kernels;
pub mod model;
pub mod params;
pub mod precision;
pub mod recipes;
pub mod rng;
pub mod synthetic;
pub mod task;
#[doc(hidden)]
pub mod test_support;
pub mod train;
pub mod vocab;

pub use config::{Activation, ImportOptions, ModelConfig, ParsingInputs, Positions, SinusoidLayout};
pub use decode::translator::Translator;
pub use error::{Error, Result};
pub use model::{Batch, DropoutCtx, Transformer, Workspace};
pub use precision::{Float, Precision};
pub use task::Task;
pub use vocab::{BOS, EOS, PAD, SPECIAL_TOKENS, UNK};
