//! Evaluation: corpus BLEU and chrF exactly as sacreBLEU 2.x computes them (every tokenizer and
//! smoothing named in the signature), so the scores we print are the scores others print; and
//! attention heatmaps like the paper's Figures 3–5 (`heatmap`, behind the default-on `heatmap` feature);
//! and constituency parsing's labeled bracketing F1 exactly as EVALB computes it (`evalb`).

pub mod aer;
pub mod attention;
pub mod bleu;
pub mod chrf;
pub mod evalb;
#[cfg(feature = "heatmap")]
pub mod heatmap;
pub mod perplexity;
pub mod tokenize;

use crate::error::{Error, Result};

/// Checks that there is a reference stream and that each is line-aligned with the `hyps`
/// hypotheses: a corpus metric's inputs come from files, and a difference is its caller's input
/// error, never a panic.
pub(crate) fn check_streams(metric: &str, hyps: usize, refs: &[Vec<String>]) -> Result<()> {
    if refs.is_empty() {
        return Err(Error::Input(format!("{metric} needs at least one reference stream")));
    }
    for (k, r) in refs.iter().enumerate() {
        if r.len() != hyps {
            return Err(Error::Input(format!(
                "{metric}: reference stream {} has {} lines and the hypotheses {hyps}: they must be line-aligned",
                k + 1,
                r.len()
            )));
        }
    }
    Ok(())
}

/// A corpus metric the `bleu` command prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// sacreBLEU's BLEU.
    Bleu,
    /// sacreBLEU's chrF2.
    Chrf,
    /// Tokenized BLEU as multi-bleu.perl computes it (13a tokens, no smoothing).
    TokenizedBleu,
}

impl Metric {
    /// Every metric.
    pub const ALL: [Metric; 3] = [Metric::Bleu, Metric::Chrf, Metric::TokenizedBleu];

    /// The name (`bleu`, `chrf`, `tokenized-bleu`).
    pub fn name(self) -> &'static str {
        match self {
            Metric::Bleu => "bleu",
            Metric::Chrf => "chrf",
            Metric::TokenizedBleu => "tokenized-bleu",
        }
    }
}

/// The sacreBLEU release whose results this module reproduces; it is tested against fixtures made
/// with it (dev/reference/sacrebleu_fixtures.py) and stands in our signatures' `version:` field.
pub const SACREBLEU_VERSION: &str = "2.6.0";

/// Python's `str.isspace` for one character: Unicode White_Space plus U+001C–U+001F (information
/// separators), which Python also treats as whitespace.
pub(crate) fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.split()` without arguments.
pub(crate) fn python_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(is_python_space).filter(|w| !w.is_empty())
}

/// Python's `str.rstrip()` without arguments.
pub(crate) fn python_rstrip(s: &str) -> &str {
    s.trim_end_matches(is_python_space)
}
