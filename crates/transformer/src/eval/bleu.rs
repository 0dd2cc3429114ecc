//! Corpus BLEU (Papineni et al., 2002) as sacreBLEU 2.x computes it: n-grams up to 4 clipped by
//! the maximum count over references, the closest reference length (the shorter on ties), the
//! brevity penalty, and the smoothing methods of Chen & Cherry (2014).

use super::tokenize::Tokenizer;
use super::{check_streams, python_rstrip, python_split, SACREBLEU_VERSION};
use crate::error::{Error, Result};
use std::collections::HashMap;

/// Smoothing of zero n-gram precisions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Smooth {
    /// None: a zero precision makes BLEU 0.
    None,
    /// Method 1: a zero count becomes `value` (default 0.1).
    Floor(f64),
    /// Method 2: add `value` (default 1) to counts and totals of orders ≥ 2.
    AddK(f64),
    /// Method 3 (NIST, mteval-v13a; sacreBLEU's default): the k-th zero precision is 1/(2^k · total).
    Exp,
}

impl Smooth {
    /// The names [`Smooth::from_name`] takes.
    pub const NAMES: [&'static str; 4] = ["exp", "floor", "add-k", "none"];

    /// The smoothing called `name` (none, floor, add-k, exp), with `value` or the method's default.
    pub fn from_name(name: &str, value: Option<f64>) -> Option<Self> {
        Some(match name {
            "none" => Smooth::None,
            "floor" => Smooth::Floor(value.unwrap_or(0.1)),
            "add-k" => Smooth::AddK(value.unwrap_or(1.0)),
            "exp" => Smooth::Exp,
            _ => return None,
        })
    }

    fn signature(self) -> String {
        match self {
            Smooth::None => "none".into(),
            Smooth::Exp => "exp".into(),
            Smooth::Floor(v) => format!("floor[{v:.2}]"),
            Smooth::AddK(v) => format!("add-k[{v:.2}]"),
        }
    }
}

/// How BLEU is computed; the defaults are sacreBLEU's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BleuConfig {
    /// Tokenizer applied to hypotheses and references.
    pub tokenizer: Tokenizer,
    /// Lowercase before tokenizing.
    pub lowercase: bool,
    /// Smoothing.
    pub smooth: Smooth,
    /// Stop at the highest order with any n-grams (for sentence-level BLEU).
    pub effective_order: bool,
}

impl Default for BleuConfig {
    fn default() -> Self {
        BleuConfig { tokenizer: Tokenizer::Thirteen13a, lowercase: false, smooth: Smooth::Exp, effective_order: false }
    }
}

/// Highest n-gram order.
pub const MAX_ORDER: usize = 4;

/// A corpus BLEU score with its statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct BleuScore {
    /// BLEU in [0, 100].
    pub score: f64,
    /// Clipped matches per order.
    pub correct: [f64; MAX_ORDER],
    /// Hypothesis n-grams per order.
    pub total: [f64; MAX_ORDER],
    /// Precisions in percent per order (after smoothing).
    pub precisions: [f64; MAX_ORDER],
    /// Brevity penalty.
    pub bp: f64,
    /// Hypothesis length in tokens.
    pub sys_len: usize,
    /// Effective reference length in tokens.
    pub ref_len: usize,
    /// sacreBLEU's signature of the computation.
    pub signature: String,
    /// The metric's name in the report: `BLEU`, or `tokenized-BLEU` for [`tokenized_bleu`].
    pub name: &'static str,
}

impl BleuScore {
    /// sacreBLEU's one-line report: `BLEU|<signature> = 35.12 67.5/41.2/27.3/18.9 (BP = … )`.
    pub fn line(&self) -> String {
        let prec: Vec<String> = self.precisions.iter().map(|p| format!("{p:.1}")).collect();
        let ratio = if self.ref_len > 0 { self.sys_len as f64 / self.ref_len as f64 } else { 0.0 };
        format!(
            "{}|{} = {:.2} {} (BP = {:.3} ratio = {:.3} hyp_len = {} ref_len = {})",
            self.name,
            self.signature,
            self.score,
            prec.join("/"),
            self.bp,
            ratio,
            self.sys_len,
            self.ref_len
        )
    }
}

fn preprocess(line: &str, cfg: &BleuConfig) -> String {
    let line = if cfg.lowercase { line.to_lowercase() } else { line.to_string() };
    cfg.tokenizer.tokenize(python_rstrip(&line))
}

/// n-gram counts for orders 1..=MAX_ORDER, keyed by the joined n-gram.
fn ngrams(tokens: &[&str]) -> HashMap<(usize, String), u64> {
    let mut counts = HashMap::new();
    for n in 1..=MAX_ORDER {
        for w in tokens.windows(n) {
            *counts.entry((n, w.join(" "))).or_insert(0) += 1;
        }
    }
    counts
}

/// Corpus BLEU of `hyps` against reference streams `refs` (each stream line-aligned with `hyps`).
/// No stream, or a stream whose length differs from the hypotheses', is an [`Error::Input`].
pub fn corpus_bleu(hyps: &[String], refs: &[Vec<String>], cfg: &BleuConfig) -> Result<BleuScore> {
    check_streams("BLEU", hyps.len(), refs)?;
    let (mut sys_len, mut ref_len) = (0usize, 0usize);
    let mut correct = [0u64; MAX_ORDER];
    let mut total = [0u64; MAX_ORDER];
    for (i, hyp) in hyps.iter().enumerate() {
        // Reference n-grams: the maximum count of each over the references.
        let mut ref_counts: HashMap<(usize, String), u64> = HashMap::new();
        let mut ref_lens = Vec::with_capacity(refs.len());
        for stream in refs {
            let r = preprocess(&stream[i], cfg);
            let toks: Vec<&str> = python_split(&r).collect();
            ref_lens.push(toks.len());
            for (k, c) in ngrams(&toks) {
                let e = ref_counts.entry(k).or_insert(0);
                *e = (*e).max(c);
            }
        }
        let h = preprocess(hyp, cfg);
        let toks: Vec<&str> = python_split(&h).collect();
        let hyp_len = toks.len();
        // Closest reference length, the shorter one on ties.
        let closest = ref_lens.iter().copied().min_by_key(|&l| (l.abs_diff(hyp_len), l)).unwrap_or(0);
        sys_len += hyp_len;
        ref_len += closest;
        for ((n, g), c) in ngrams(&toks) {
            total[n - 1] += c;
            if let Some(&rc) = ref_counts.get(&(n, g)) {
                correct[n - 1] += c.min(rc);
            }
        }
    }
    Ok(compute(correct, total, sys_len, ref_len, cfg, refs.len()))
}

/// BLEU from sufficient statistics, in sacreBLEU's order of operations.
fn compute(
    correct: [u64; MAX_ORDER],
    total: [u64; MAX_ORDER],
    sys_len: usize,
    ref_len: usize,
    cfg: &BleuConfig,
    nrefs: usize,
) -> BleuScore {
    let signature = format!(
        "nrefs:{nrefs}|case:{}|eff:{}|tok:{}|smooth:{}|version:{SACREBLEU_VERSION}",
        if cfg.lowercase { "lc" } else { "mixed" },
        if cfg.effective_order { "yes" } else { "no" },
        cfg.tokenizer.name(),
        cfg.smooth.signature()
    );
    let mut correct = correct.map(|c| c as f64);
    let mut total = total.map(|t| t as f64);
    let bp = if sys_len < ref_len {
        if sys_len > 0 {
            (1.0 - ref_len as f64 / sys_len as f64).exp()
        } else {
            0.0
        }
    } else {
        1.0
    };
    let mut precisions = [0.0; MAX_ORDER];
    let mut score = BleuScore { score: 0.0, correct, total, precisions, bp, sys_len, ref_len, signature, name: "BLEU" };
    if correct.iter().all(|&c| c == 0.0) {
        return score;
    }
    let mut smooth_mteval = 1.0;
    let mut eff_order = MAX_ORDER;
    for n in 1..=MAX_ORDER {
        if let Smooth::AddK(k) = cfg.smooth {
            if n > 1 {
                correct[n - 1] += k;
                total[n - 1] += k;
            }
        }
        if total[n - 1] == 0.0 {
            break;
        }
        if cfg.effective_order {
            eff_order = n;
        }
        if correct[n - 1] == 0.0 {
            match cfg.smooth {
                Smooth::Exp => {
                    smooth_mteval *= 2.0;
                    precisions[n - 1] = 100.0 / (smooth_mteval * total[n - 1]);
                }
                Smooth::Floor(v) => precisions[n - 1] = 100.0 * v / total[n - 1],
                _ => {}
            }
        } else {
            precisions[n - 1] = 100.0 * correct[n - 1] / total[n - 1];
        }
    }
    // sacreBLEU floors log(0) at −9999999999 rather than −∞.
    let log = |p: f64| if p == 0.0 { -9_999_999_999.0 } else { p.ln() };
    let sum: f64 = precisions[..eff_order].iter().map(|&p| log(p)).sum();
    score.score = bp * (sum / eff_order as f64).exp();
    score.correct = correct;
    score.total = total;
    score.precisions = precisions;
    score
}

/// Tokenized BLEU, the way papers before sacreBLEU scored (multi-bleu.perl on Moses-tokenized,
/// often lowercased text): text tokenized with the 13a tokenizer, no smoothing. Scores depend on
/// the tokenization, so they are only comparable with numbers computed the same way; the report is
/// named `tokenized-BLEU`, never `BLEU`, to keep it apart from sacreBLEU scores.
pub fn tokenized_bleu(hyps: &[String], refs: &[Vec<String>], lowercase: bool) -> Result<BleuScore> {
    let cfg = BleuConfig { tokenizer: Tokenizer::Thirteen13a, lowercase, smooth: Smooth::None, effective_order: false };
    let mut s = corpus_bleu(hyps, refs, &cfg)?;
    s.name = "tokenized-BLEU";
    s.signature = format!(
        "nrefs:{}|case:{}|tok:13a|smooth:none|multi-bleu.perl-style",
        refs.len(),
        if lowercase { "lc" } else { "mixed" }
    );
    Ok(s)
}

/// BLEU of one bucket of sentences by source length ([`bleu_by_source_length`]).
#[derive(Clone, Debug, PartialEq)]
pub struct BucketBleu {
    /// The bucket's source lengths in words, inclusive (`hi` = `usize::MAX`: open-ended).
    pub lo: usize,
    /// See `lo`.
    pub hi: usize,
    /// Sentences in the bucket.
    pub sentences: usize,
    /// Corpus BLEU of those sentences (`None` for an empty bucket).
    pub score: Option<BleuScore>,
}

impl BucketBleu {
    /// `source words 9–12 (312 sentences): BLEU|… = 36.10 …` (the score as [`BleuScore::line`]).
    pub fn line(&self) -> String {
        let range = match self.hi {
            usize::MAX => format!("{}+", self.lo),
            hi => format!("{}–{hi}", self.lo),
        };
        match &self.score {
            Some(s) => format!("source words {range} ({} sentences): {}", self.sentences, s.line()),
            None => format!("source words {range}: no sentences"),
        }
    }
}

/// Corpus BLEU per bucket of source length in whitespace-separated words: bucket k holds the
/// sentences of more than `upper[k − 1]` and at most `upper[k]` words (the first bucket also
/// holds empty sources, so every sentence is in one bucket), and a last bucket the rest
/// (`upper` ascending). Streams as [`corpus_bleu`]; `srcs` line-aligned with `hyps`.
pub fn bleu_by_source_length(
    srcs: &[String],
    hyps: &[String],
    refs: &[Vec<String>],
    upper: &[usize],
    cfg: &BleuConfig,
) -> Result<Vec<BucketBleu>> {
    if srcs.len() != hyps.len() {
        return Err(Error::Input(format!(
            "BLEU by source length: {} sources and {} hypotheses: they must be line-aligned",
            srcs.len(),
            hyps.len()
        )));
    }
    check_streams("BLEU", hyps.len(), refs)?;
    let mut out = Vec::with_capacity(upper.len() + 1);
    let mut lo = 0;
    for hi in upper.iter().copied().chain(std::iter::once(usize::MAX)) {
        let idx: Vec<usize> = (0..srcs.len())
            .filter(|&i| {
                let n = srcs[i].split_whitespace().count();
                (n > lo || out.is_empty()) && n <= hi
            })
            .collect();
        let score = if idx.is_empty() {
            None
        } else {
            let h: Vec<String> = idx.iter().map(|&i| hyps[i].clone()).collect();
            let r: Vec<Vec<String>> = refs.iter().map(|s| idx.iter().map(|&i| s[i].clone()).collect()).collect();
            Some(corpus_bleu(&h, &r, cfg)?)
        };
        out.push(BucketBleu { lo: lo.saturating_add(1), hi, sentences: idx.len(), score });
        lo = hi;
    }
    Ok(out)
}

/// The buckets `evaluate --by-length` reports (Multi30k's captions are 12 words on average).
pub const LENGTH_BUCKETS: [usize; 4] = [8, 12, 16, 24];
