//! chrF (Popović, 2015) as sacreBLEU 2.x computes it: character n-grams up to 6 (and optionally word
//! n-grams, chrF++), F-beta with beta 2 over precision and recall averaged across orders, the best
//! reference per sentence by its own chrF.

use super::{check_streams, python_split, SACREBLEU_VERSION};
use crate::error::Result;
use std::collections::HashMap;

/// How chrF is computed; the defaults are sacreBLEU's chrF2.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChrfConfig {
    /// Character n-gram order.
    pub char_order: usize,
    /// Word n-gram order (2 gives chrF++).
    pub word_order: usize,
    /// Weight of recall against precision.
    pub beta: u32,
    /// Lowercase first.
    pub lowercase: bool,
    /// Keep whitespace inside character n-grams.
    pub whitespace: bool,
    /// Add ε to every order instead of averaging only the orders present.
    pub eps_smoothing: bool,
}

impl Default for ChrfConfig {
    fn default() -> Self {
        ChrfConfig { char_order: 6, word_order: 0, beta: 2, lowercase: false, whitespace: false, eps_smoothing: false }
    }
}

/// A corpus chrF score.
#[derive(Clone, Debug, PartialEq)]
pub struct ChrfScore {
    /// chrF in [0, 100].
    pub score: f64,
    /// `chrF2`, `chrF2++`, …
    pub name: String,
    /// sacreBLEU's signature.
    pub signature: String,
}

impl ChrfScore {
    /// sacreBLEU's one-line report: `chrF2|<signature> = 55.12`.
    pub fn line(&self) -> String {
        format!("{}|{} = {:.2}", self.name, self.signature, self.score)
    }
}

const PUNCTS: &str = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";

/// Words with one leading or trailing ASCII punctuation mark split off (as the original chrF++).
fn words_without_punctuation(sent: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in python_split(sent) {
        let chars: Vec<char> = w.chars().collect();
        if chars.len() == 1 {
            out.push(w.to_string());
        } else if PUNCTS.contains(chars[chars.len() - 1]) {
            out.push(chars[..chars.len() - 1].iter().collect());
            out.push(chars[chars.len() - 1].to_string());
        } else if PUNCTS.contains(chars[0]) {
            out.push(chars[0].to_string());
            out.push(chars[1..].iter().collect());
        } else {
            out.push(w.to_string());
        }
    }
    out
}

/// Counts per order: character n-grams 1..=char_order, then word n-grams 1..=word_order.
fn all_ngrams(line: &str, cfg: &ChrfConfig) -> Vec<HashMap<String, u64>> {
    let text: String = if cfg.whitespace { line.to_string() } else { python_split(line).collect() };
    let chars: Vec<char> = text.chars().collect();
    let mut orders = Vec::with_capacity(cfg.char_order + cfg.word_order);
    for n in 1..=cfg.char_order {
        let mut m = HashMap::new();
        for w in chars.windows(n) {
            *m.entry(w.iter().collect::<String>()).or_insert(0) += 1;
        }
        orders.push(m);
    }
    if cfg.word_order > 0 {
        let words = words_without_punctuation(line);
        for n in 1..=cfg.word_order {
            let mut m = HashMap::new();
            for w in words.windows(n) {
                *m.entry(w.join(" ")).or_insert(0) += 1;
            }
            orders.push(m);
        }
    }
    orders
}

/// F-score from flattened [hyp, ref, match] statistics per order.
fn f_score(stats: &[u64], cfg: &ChrfConfig) -> f64 {
    let eps = 1e-16;
    let factor = (cfg.beta * cfg.beta) as f64;
    let order = cfg.char_order + cfg.word_order;
    let (mut score, mut avg_prec, mut avg_rec, mut eff) = (0.0, 0.0, 0.0, 0usize);
    for i in 0..order {
        let (n_hyp, n_ref, n_match) = (stats[3 * i] as f64, stats[3 * i + 1] as f64, stats[3 * i + 2] as f64);
        let prec = if n_hyp > 0.0 { n_match / n_hyp } else { eps };
        let rec = if n_ref > 0.0 { n_match / n_ref } else { eps };
        let denom = factor * prec + rec;
        score += if denom > 0.0 { (1.0 + factor) * prec * rec / denom } else { eps };
        if n_hyp > 0.0 && n_ref > 0.0 {
            avg_prec += prec;
            avg_rec += rec;
            eff += 1;
        }
    }
    if cfg.eps_smoothing {
        return 100.0 * score / order as f64;
    }
    if eff == 0 {
        avg_prec = 0.0;
        avg_rec = 0.0;
    } else {
        avg_prec /= eff as f64;
        avg_rec /= eff as f64;
    }
    if avg_prec + avg_rec != 0.0 {
        100.0 * (1.0 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec)
    } else {
        0.0
    }
}

/// Corpus chrF of `hyps` against reference streams `refs` (each line-aligned with `hyps`). No
/// stream, or a stream whose length differs from the hypotheses', is an [`crate::Error::Input`].
pub fn corpus_chrf(hyps: &[String], refs: &[Vec<String>], cfg: &ChrfConfig) -> Result<ChrfScore> {
    check_streams("chrF", hyps.len(), refs)?;
    let prep = |s: &str| if cfg.lowercase { s.to_lowercase() } else { s.to_string() };
    let order = cfg.char_order + cfg.word_order;
    let mut totals = vec![0u64; 3 * order];
    for (i, hyp) in hyps.iter().enumerate() {
        let h = all_ngrams(&prep(hyp), cfg);
        let mut best: Option<(f64, Vec<u64>)> = None;
        for stream in refs {
            let r = all_ngrams(&prep(&stream[i]), cfg);
            let mut stats = Vec::with_capacity(3 * order);
            for (hn, rn) in h.iter().zip(&r) {
                let hyp_count: u64 = hn.values().sum();
                let matches: u64 = hn.iter().filter_map(|(g, c)| rn.get(g).map(|rc| (*c).min(*rc))).sum();
                // No hits are counted for an order the reference lacks entirely.
                stats.push(if rn.is_empty() { 0 } else { hyp_count });
                stats.push(rn.values().sum());
                stats.push(matches);
            }
            let f = f_score(&stats, cfg);
            if best.as_ref().is_none_or(|(bf, _)| f > *bf) {
                best = Some((f, stats));
            }
        }
        for (t, s) in totals.iter_mut().zip(best.expect("at least one reference").1) {
            *t += s;
        }
    }
    let name = format!("chrF{}{}", cfg.beta, "+".repeat(cfg.word_order));
    let signature = format!(
        "nrefs:{}|case:{}|eff:{}|nc:{}|nw:{}|space:{}|version:{SACREBLEU_VERSION}",
        refs.len(),
        if cfg.lowercase { "lc" } else { "mixed" },
        if cfg.eps_smoothing { "no" } else { "yes" },
        cfg.char_order,
        cfg.word_order,
        if cfg.whitespace { "yes" } else { "no" }
    );
    Ok(ChrfScore { score: f_score(&totals, cfg), name, signature })
}
