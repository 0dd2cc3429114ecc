//! §6.1 Decoding: batched beam search over incremental decoder states ([`beam`]); greedy search
//! is beam size 1. [`translator::Translator`] is a model, its tokenizer and this search: loaded
//! from checkpoints in `load.rs`, its sentences batched in `batches.rs` and decoded by the pool of
//! `workers.rs`; parsing (`parse.rs`) and teacher-forced scoring (`scoring.rs`) are its other verbs.

pub mod alignment;
mod batches;
pub mod beam;
mod controls;
pub mod guide;
mod load;
pub use load::{contains_model, model_files, SHORTLIST_NAME};
mod parse;
mod scorer;
mod scoring;
pub mod shortlist;
pub mod translator;
pub mod tree_constraint;
mod workers;

pub use scorer::{search_batch, search_batch_ensemble, EnsembleScorer};

pub use alignment::{Alignment, AlignmentKind, AlignmentOptions};
pub use beam::{
    beam_search, beam_search_with, BeamConfig, Hypothesis, LengthNorm, Scorer, SearchOverrides, SearchPreset,
    SentenceInputs, StepScores, Stop,
};
pub use controls::{Controls, Sampling};
pub use guide::Guide;
pub use parse::{Parse, ParseOptions, ScoredParses};
