//! §6.1 Decoding: batched beam search over incremental decoder states ([`beam`]); greedy search
//! is beam size 1.

pub mod beam;

pub use beam::{beam_search, search_batch, translate_batch, BeamConfig, Hypothesis, ModelScorer, Scorer, StepScores};
pub mod translator;
pub mod tree_constraint;
