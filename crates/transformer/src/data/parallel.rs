//! Line-aligned parallel corpora: reading (misalignment is an error naming both files), BPE
//! encoding, and filtering of empty and over-long pairs with every removal counted and reported.

use super::bpe::Bpe;
use super::corpus;
use super::encoding::TargetEncoding;
use crate::error::{Error, Result};
use std::path::Path;

/// Sentence pairs as BPE token ids (source, target), without BOS/EOS.
pub type TokenPairs = Vec<(Vec<u32>, Vec<u32>)>;

/// Which pairs are kept for training.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FilterConfig {
    /// Longest side, in BPE tokens (without BOS/EOS); longer pairs are removed, never truncated.
    pub max_tokens: usize,
    /// Largest ratio of the longer to the shorter side, in tokens.
    pub max_ratio: f64,
}

impl FilterConfig {
    /// The largest `max_tokens` accepted.
    pub const MAX_TOKENS: usize = 1 << 20;

    /// Checks the filter: `max_tokens` in [1, 2^20], `max_ratio` a finite number ≥ 1. Errors call
    /// the two fields by `names` (`("data.max_tokens", "data.max_ratio")` in a run config,
    /// `("--max-tokens", "--max-ratio")` on the command line).
    pub fn validate(&self, names: (&str, &str)) -> crate::error::Result<()> {
        if self.max_tokens == 0 || self.max_tokens > Self::MAX_TOKENS {
            return Err(crate::error::Error::Config(format!(
                "{} = {}: it must be at least 1 and at most {}",
                names.0,
                self.max_tokens,
                Self::MAX_TOKENS
            )));
        }
        if !(self.max_ratio.is_finite() && self.max_ratio >= 1.0) {
            return Err(crate::error::Error::Config(format!(
                "{} = {} must be a finite number ≥ 1",
                names.1, self.max_ratio
            )));
        }
        Ok(())
    }
}

impl Default for FilterConfig {
    fn default() -> Self {
        FilterConfig { max_tokens: 250, max_ratio: 3.0 }
    }
}

/// What filtering did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterReport {
    /// Pairs read.
    pub read: usize,
    /// Pairs kept.
    pub kept: usize,
    /// Removed: one side empty.
    pub empty: usize,
    /// Removed: a side longer than `max_tokens`.
    pub too_long: usize,
    /// Removed: length ratio above `max_ratio`.
    pub bad_ratio: usize,
}

impl std::fmt::Display for FilterReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} pairs read, {} kept; removed {} with an empty side, {} too long, {} with a length ratio too large",
            self.read, self.kept, self.empty, self.too_long, self.bad_ratio
        )
    }
}

/// Reads two line-aligned files; different line counts are an error naming both files and where
/// the shorter one ended.
pub fn read_parallel(src: &Path, tgt: &Path) -> Result<Vec<(String, String)>> {
    let s = corpus::read_lines(src)?;
    let t = corpus::read_lines(tgt)?;
    if s.len() != t.len() {
        let (short, long, n) = if s.len() < t.len() { (src, tgt, s.len()) } else { (tgt, src, t.len()) };
        return Err(Error::Corpus {
            path: long.to_path_buf(),
            line: n + 1,
            reason: format!(
                "{} ends after {n} lines but this file goes on ({} vs {} lines): the corpora are not line-aligned",
                short.display(),
                s.len(),
                t.len()
            ),
        });
    }
    Ok(s.into_iter().zip(t).collect())
}

/// BPE-encodes translation pairs and keeps those that pass `filter`.
pub fn encode_and_filter(
    pairs: &[(String, String)],
    bpe: &Bpe,
    filter: &FilterConfig,
) -> Result<(TokenPairs, FilterReport)> {
    encode_and_filter_with(TargetEncoding::Bpe, pairs, bpe, filter)
}

/// Encodes pairs (sources with BPE, targets with `target`) and keeps those that pass `filter`.
pub fn encode_and_filter_with(
    target: TargetEncoding,
    pairs: &[(String, String)],
    bpe: &Bpe,
    filter: &FilterConfig,
) -> Result<(TokenPairs, FilterReport)> {
    encode_and_filter_by(pairs, filter, |s| target.encode_source(bpe, s), |t| target.encode(bpe, t))
}

/// Encodes pairs with a model's tokenizer and keeps those that pass `filter`: our BPE with
/// `target`'s encoding of the targets, or an imported model's SentencePiece vocabularies
/// (translation only; the source's `</s>` included, as its model reads it).
pub fn encode_and_filter_for(
    target: TargetEncoding,
    pairs: &[(String, String)],
    tokenizer: &crate::data::tokenizer::Tokenizer,
    filter: &FilterConfig,
) -> Result<(TokenPairs, FilterReport)> {
    if tokenizer.bpe().is_none() && target != TargetEncoding::Bpe {
        return Err(crate::error::Error::Config(
            "an imported model's tokenizer encodes translation pairs only (trees need a BPE vocabulary of ours)".into(),
        ));
    }
    encode_and_filter_by(pairs, filter, |s| tokenizer.encode_source(target, s), |t| tokenizer.encode_target(target, t))
}

/// Encodes pairs with the given source and target encoders and keeps those that pass `filter`
/// (both sides non-empty, neither over `max_tokens`, their length ratio within `max_ratio`).
pub fn encode_and_filter_by(
    pairs: &[(String, String)],
    filter: &FilterConfig,
    source: impl Fn(&str) -> Result<Vec<u32>>,
    target: impl Fn(&str) -> Result<Vec<u32>>,
) -> Result<(TokenPairs, FilterReport)> {
    let mut report = FilterReport { read: pairs.len(), ..Default::default() };
    let mut kept = Vec::with_capacity(pairs.len());
    for (s, t) in pairs {
        if s.trim().is_empty() || t.trim().is_empty() {
            report.empty += 1;
            continue;
        }
        let (se, te) = (source(s)?, target(t)?);
        if se.len() > filter.max_tokens || te.len() > filter.max_tokens {
            report.too_long += 1;
            continue;
        }
        let (a, b) = (se.len().max(te.len()) as f64, se.len().min(te.len()).max(1) as f64);
        if a / b > filter.max_ratio {
            report.bad_ratio += 1;
            continue;
        }
        kept.push((se, te));
    }
    report.kept = kept.len();
    Ok((kept, report))
}
