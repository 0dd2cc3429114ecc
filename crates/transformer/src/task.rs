//! What a model is trained and used for. Translation (§6.1) and English constituency parsing
//! (§6.3) share the model, the training loop and the search; they differ in a few places, each a
//! plain `match` on [`Task`]: how over-long inputs are handled, the decoding defaults, and what
//! evaluation reports. Parsing arrives with its own issue; this enum is the seam it plugs into.

use crate::decode::BeamConfig;
use crate::error::Result;
use std::path::Path;

/// The task of a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// Translation from one language to another (§6.1).
    #[default]
    Translation,
}

/// What to do with an input longer than the model's `max_positions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LongInputs {
    /// Translate it in consecutive chunks and join the outputs, with a warning naming the line.
    /// Never cut: every input token is translated.
    Chunk,
    /// Refuse it with an error naming the line (for tasks whose output must cover the whole
    /// input as one structure, such as a parse tree).
    Refuse,
}

/// What a training run's validation measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validation {
    /// Per-token loss and perplexity of the validation targets, teacher-forced.
    Perplexity,
}

/// What evaluation reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// sacreBLEU BLEU and chrF2, tokenized BLEU, and per-token perplexity of the references.
    BleuChrfPerplexity,
}

impl Task {
    /// Every task.
    pub const ALL: [Task; 1] = [Task::Translation];

    /// The policy for inputs longer than the model's positions.
    pub fn long_inputs(self) -> LongInputs {
        match self {
            Task::Translation => LongInputs::Chunk,
        }
    }

    /// The paper's search settings for the task (§6.1: beam 4, α 0.6, +50).
    pub fn search_defaults(self) -> BeamConfig {
        match self {
            Task::Translation => BeamConfig::translation(),
        }
    }

    /// What a training run's validation measures.
    pub fn validation(self) -> Validation {
        match self {
            Task::Translation => Validation::Perplexity,
        }
    }

    /// What `evaluate` reports.
    pub fn report(self) -> Report {
        match self {
            Task::Translation => Report::BleuChrfPerplexity,
        }
    }

    /// Reads a training or validation corpus as (source, target) text pairs, line-aligned: for
    /// translation, two parallel text files. Errors name the file and line.
    pub fn read_pairs(self, src: &Path, tgt: &Path) -> Result<Vec<(String, String)>> {
        match self {
            Task::Translation => crate::data::parallel::read_parallel(src, tgt),
        }
    }

    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Task::Translation => "translation",
        }
    }
}
