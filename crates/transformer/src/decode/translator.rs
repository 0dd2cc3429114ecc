//! Translating many sentences: length-sorted batches under a token budget, results in input
//! order, empty sources giving empty outputs, and sources longer than the model's positions split
//! into chunks that are translated one after the other (with a warning) rather than cut.

use super::beam::{search_batch, BeamConfig, Hypothesis};
use crate::error::Result;
use crate::model::{Transformer, Workspace};

/// How to batch and search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TranslateOptions {
    /// Search settings.
    pub search: BeamConfig,
    /// Source tokens per batch, padding included (each sentence is decoded as `beam` rows).
    pub max_tokens: usize,
    /// Sentences per batch.
    pub max_sentences: usize,
}

impl Default for TranslateOptions {
    fn default() -> Self {
        TranslateOptions { search: BeamConfig::translation(), max_tokens: 2048, max_sentences: 128 }
    }
}

/// Counts for a speed report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TranslateStats {
    /// Sentences translated (empty ones included).
    pub sentences: usize,
    /// Source tokens.
    pub src_tokens: usize,
    /// Output tokens of the best hypotheses (EOS not counted).
    pub out_tokens: usize,
    /// Sentences split into chunks because they exceed the model's positions.
    pub chunked: usize,
    /// Batches decoded.
    pub batches: usize,
    /// Decoder rows (hypotheses) summed over steps: the search's work.
    pub rows_decoded: usize,
}

/// Translates `srcs` (token ids without BOS/EOS). Returns each sentence's n-best list, best first,
/// in input order. `warn` receives one message per chunked sentence (naming its 1-based index).
pub fn translate_all(
    model: &Transformer,
    srcs: &[Vec<u32>],
    opts: &TranslateOptions,
    ws: &mut Workspace,
    warn: &mut dyn FnMut(String),
) -> Result<(Vec<Vec<Hypothesis>>, TranslateStats)> {
    opts.search.validate()?;
    let max_src = model.config.max_positions;
    let mut stats = TranslateStats { sentences: srcs.len(), ..Default::default() };
    // Pieces: (sentence, chunk) → ids. Most sentences are one piece.
    let mut pieces: Vec<(usize, &[u32])> = Vec::with_capacity(srcs.len());
    for (i, s) in srcs.iter().enumerate() {
        stats.src_tokens += s.len();
        if s.len() > max_src {
            let n = s.len().div_ceil(max_src);
            let size = s.len().div_ceil(n);
            warn(format!(
                "sentence {}: {} tokens exceed the model's max_positions = {max_src}; translated in {n} chunks of ≤ {size} tokens, joined",
                i + 1,
                s.len()
            ));
            stats.chunked += 1;
            pieces.extend(s.chunks(size).map(|c| (i, c)));
        } else if !s.is_empty() {
            pieces.push((i, s));
        }
    }
    // Longest first, so the first batch shows the peak memory; stable for equal lengths.
    let mut order: Vec<usize> = (0..pieces.len()).collect();
    order.sort_by_key(|&p| std::cmp::Reverse(pieces[p].1.len()));
    let mut piece_hyps: Vec<Vec<Hypothesis>> = vec![Vec::new(); pieces.len()];
    let packed = std::sync::Arc::new(model.pack_decoder());
    let mut state = crate::model::DecoderState::default();
    let mut start = 0;
    while start < order.len() {
        let longest = pieces[order[start]].1.len();
        let fit = (opts.max_tokens / longest.max(1)).clamp(1, opts.max_sentences.max(1));
        let end = (start + fit).min(order.len());
        let batch: Vec<&[u32]> = order[start..end].iter().map(|&p| pieces[p].1).collect();
        let (hyps, rows) = search_batch(model, &batch, &opts.search, ws, &packed, &mut state)?;
        stats.rows_decoded += rows;
        for (&p, h) in order[start..end].iter().zip(hyps) {
            piece_hyps[p] = h;
        }
        stats.batches += 1;
        start = end;
    }
    // Join chunks rank by rank (a chunk with fewer hypotheses repeats its last).
    let empty = Hypothesis { tokens: Vec::new(), log_prob: 0.0, score: 0.0 };
    let mut out: Vec<Vec<Hypothesis>> = vec![Vec::new(); srcs.len()];
    let mut p = 0;
    for (i, o) in out.iter_mut().enumerate() {
        let first = p;
        while p < pieces.len() && pieces[p].0 == i {
            p += 1;
        }
        let chunks = &piece_hyps[first..p];
        if chunks.is_empty() {
            o.push(empty.clone());
            continue;
        }
        let ranks = chunks.iter().map(|c| c.len()).max().unwrap_or(0);
        for k in 0..ranks {
            let mut joined = empty.clone();
            for c in chunks {
                let h = &c[k.min(c.len() - 1)];
                joined.tokens.extend_from_slice(&h.tokens);
                joined.log_prob += h.log_prob;
                joined.score += h.score;
            }
            o.push(joined);
        }
        stats.out_tokens += o[0].tokens.len();
    }
    Ok((out, stats))
}
