//! §6.1 Decoding: batched beam search over incremental decoder states ([`beam`]); greedy search
//! is beam size 1.

pub mod beam;
mod scorer;

pub use scorer::{search_batch, search_batch_ensemble, EnsembleScorer};

pub use beam::{beam_search, BeamConfig, Hypothesis, LengthNorm, Scorer, SearchOverrides, SearchPreset, StepScores};
pub mod translator;
pub mod tree_constraint;
