//! What a model is trained and used for. Translation (§6.1) and English constituency parsing
//! (§6.3) share the model, the training loop and the search; they differ in a few places, each a
//! plain `match` on [`Task`]: how over-long inputs are handled, the decoding defaults, and what
//! evaluation reports, and how targets are read, encoded and decoded.

use crate::data::bpe::Bpe;
use crate::data::encoding::TargetEncoding;
use crate::data::trees::{read_treebank, training_pair, FileRange, TreeFormat};
use crate::error::{Error, Result};
use std::path::Path;

/// The task of a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// Translation from one language to another (§6.1).
    #[default]
    Translation,
    /// English constituency parsing (§6.3): sentences in, linearised trees out
    /// ([`crate::data::trees`]).
    Parsing,
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
    /// Perplexity, and every few epochs bracketing F1 (EVALB) of beam-decoded trees of the
    /// validation sentences; the best checkpoint is picked on it.
    PerplexityAndF1,
}

/// What evaluation reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evaluation {
    /// sacreBLEU BLEU and chrF2, tokenized BLEU, and per-token perplexity of the references.
    BleuChrfPerplexity,
    /// EVALB bracketing recall, precision and F1 (COLLINS.prm), complete match, tagging accuracy,
    /// the number of outputs that needed repair, and per-token perplexity of the gold trees.
    Evalb,
}

impl Task {
    /// Every task.
    pub const ALL: [Task; 2] = [Task::Translation, Task::Parsing];

    /// The policy for inputs longer than the model's positions.
    pub fn long_inputs(self) -> LongInputs {
        match self {
            Task::Translation => LongInputs::Chunk,
            Task::Parsing => LongInputs::Refuse,
        }
    }

    /// What a training run's validation measures.
    pub fn validation(self) -> Validation {
        match self {
            Task::Translation => Validation::Perplexity,
            Task::Parsing => Validation::PerplexityAndF1,
        }
    }

    /// What `evaluate` reports.
    pub fn evaluation(self) -> Evaluation {
        match self {
            Task::Translation => Evaluation::BleuChrfPerplexity,
            Task::Parsing => Evaluation::Evalb,
        }
    }

    /// Reads a training or validation corpus as (source, target) text pairs. For translation,
    /// two line-aligned text files (`range` must be `None`). For parsing, `src` is a treebank (a
    /// bracketed file, or a directory of `.mrg` files, restricted to the file range `range`,
    /// `FIRST..LAST`, if given) and `tgt` must be empty: each tree gives its words and its
    /// linearisation. Errors name the file and line.
    pub fn read_pairs(self, src: &Path, tgt: &Path, range: Option<&str>) -> Result<Vec<(String, String)>> {
        match self {
            Task::Translation => {
                if let Some(r) = range {
                    return Err(Error::Config(format!("a file range ({r}) applies to parsing treebanks only")));
                }
                crate::data::parallel::read_parallel(src, tgt)
            }
            Task::Parsing => {
                if !tgt.as_os_str().is_empty() {
                    return Err(Error::Config(format!(
                        "{}: parsing reads its targets from the trees of {}; give no target file",
                        tgt.display(),
                        src.display()
                    )));
                }
                let range = range.map(FileRange::parse).transpose()?;
                Ok(read_treebank(src, range.as_ref())?.iter().map(training_pair).collect())
            }
        }
    }

    /// Learns the vocabulary from training pairs ([`TargetEncoding::learn_vocabulary`]):
    /// translation one BPE model over both sides (§5.1's shared vocabulary), parsing BPE over the
    /// sentences with every bracket and tag of the trees as one whole entry (the same vocabulary
    /// for every [`TreeFormat`]).
    pub fn learn_vocabulary(self, pairs: &[(String, String)], vocab_size: usize) -> Result<Bpe> {
        self.target_encoding(TreeFormat::default()).learn_vocabulary(pairs, vocab_size)
    }

    /// How targets become ids: BPE for translation, one whole entry per tree token for parsing,
    /// the words after their tags or not as `format` says (ignored for translation).
    pub fn target_encoding(self, format: TreeFormat) -> TargetEncoding {
        match self {
            Task::Translation => TargetEncoding::Bpe,
            Task::Parsing => TargetEncoding::Tree(format),
        }
    }

    /// Token ids of a source line (no BOS/EOS): BPE; for parsing after a leading space, so that
    /// the first word is encoded as it is inside the tree ([`TargetEncoding::encode_source`]; the
    /// same for every [`TreeFormat`]).
    pub fn encode_source(self, bpe: &Bpe, text: &str) -> Result<Vec<u32>> {
        self.target_encoding(TreeFormat::default()).encode_source(bpe, text)
    }

    /// Token ids of a target (no BOS/EOS); `format` as in [`Task::target_encoding`].
    pub fn encode_target(self, format: TreeFormat, bpe: &Bpe, text: &str) -> Result<Vec<u32>> {
        self.target_encoding(format).encode(bpe, text)
    }

    /// The text of output ids ([`TargetEncoding::decode`]; for parsing the linearised tree, with
    /// no words in the `tags` format).
    pub fn decode_target(self, format: TreeFormat, bpe: &Bpe, ids: &[u32]) -> Result<String> {
        self.target_encoding(format).decode(bpe, ids)
    }

    /// The lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Task::Translation => "translation",
            Task::Parsing => "parsing",
        }
    }
}
