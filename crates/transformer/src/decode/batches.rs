//! Translating many sentences: sources longer than the model's positions cut into chunks that are
//! translated one after the other (with a warning) rather than cut short, or refused, as the
//! [`Task`] says; the pieces in length-sorted batches under a token budget; and each sentence's
//! n-best list joined again from its pieces', in input order, an empty source giving an empty
//! output.

use super::beam::{BeamConfig, Hypothesis};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::task::{LongInputs, Task};

/// How to batch and search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeOptions {
    /// Search settings.
    pub search: BeamConfig,
    /// Source tokens per batch, padding included (each sentence is decoded as `beam` rows).
    pub max_tokens: usize,
    /// Sentences per batch.
    pub max_sentences: usize,
    /// Batches decoded at once, each on a thread of its own (0: as many as rayon's pool has
    /// threads; 1: one batch at a time, its products split over the pool). The workers share
    /// `max_tokens` and `max_sentences`: each batch gets a `workers`-th of them. The results are
    /// those of the same batches one at a time; other batches change scores by float rounding, so
    /// with the default the last digits can differ between machines with other thread counts
    /// (give a fixed number for outputs that must match to the bit).
    pub workers: usize,
    /// Decode over the session's vocabulary shortlist (`Translator::set_shortlist`): the output
    /// layer over the targets the batch's sources may write only (Marian's `--shortlist`,
    /// CTranslate2's `use_vmap`). Off by default; on without a shortlist is an error.
    pub use_shortlist: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            search: BeamConfig::translation(),
            max_tokens: 2048,
            max_sentences: 128,
            workers: 0,
            use_shortlist: false,
        }
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
    /// Sentences whose best output was stopped by the model's positions before the search's
    /// length limit ([`BeamConfig::stopped_by_positions`]); each is also warned about.
    pub capped: usize,
    /// Batches decoded.
    pub batches: usize,
    /// Decoder rows (hypotheses) summed over steps: the search's work.
    pub rows_decoded: usize,
    /// Batches decoded at once, each on its own thread ([`DecodeOptions::workers`]); 1 when the
    /// batches ran one after the other.
    pub workers: usize,
}

/// The non-empty pieces of `srcs` to decode, as (sentence, ids): a sentence longer than the
/// model's `max_src` positions is cut into even chunks (with a warning), or refused by a task
/// that never splits its input.
pub(super) fn pieces<'a>(
    srcs: &'a [Vec<u32>],
    max_src: usize,
    task: Task,
    stats: &mut TranslateStats,
    events: &mut dyn Events,
) -> Result<Vec<(usize, &'a [u32])>> {
    // Pieces: (sentence, chunk) → ids. Most sentences are one piece.
    let mut pieces: Vec<(usize, &[u32])> = Vec::with_capacity(srcs.len());
    for (i, s) in srcs.iter().enumerate() {
        stats.src_tokens += s.len();
        if s.len() > max_src && task.long_inputs() == LongInputs::Refuse {
            return Err(Error::Decode(format!(
                "sentence {}: {} tokens exceed the model's max_positions = {max_src}; a {} model cannot split its input",
                i + 1,
                s.len(),
                task.name()
            )));
        }
        if s.len() > max_src {
            let n = s.len().div_ceil(max_src);
            let size = s.len().div_ceil(n);
            events.warn(&format!(
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
    Ok(pieces)
}

/// The batches of `order` (pieces, longest first), as ranges of it: each as many pieces as fit in
/// `max_tokens` padded source tokens, at most `max_sentences`. Several `workers` share that
/// budget (each batch gets a `workers`-th of it, so the rows decoded at once, and the memory they
/// hold, stay about those of one batch; the smaller batches were also the faster, 2 workers on 2
/// cores), and a batch holds at most a quarter of a worker's share of the pieces, so that the
/// workers end close together.
pub(super) fn plan_batches(
    order: &[usize],
    len: impl Fn(usize) -> usize,
    opts: &DecodeOptions,
    workers: usize,
) -> Vec<std::ops::Range<usize>> {
    let (mut max_tokens, mut max_sentences) = (opts.max_tokens, opts.max_sentences.max(1));
    if workers > 1 {
        max_tokens /= workers;
        max_sentences = (max_sentences / workers).min(order.len().div_ceil(4 * workers)).max(1);
    }
    let mut batches = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let longest = len(order[start]);
        let fit = (max_tokens / longest.max(1)).clamp(1, max_sentences);
        let end = (start + fit).min(order.len());
        batches.push(start..end);
        start = end;
    }
    batches
}

/// Each sentence's n-best list from its pieces' (`pieces` in sentence order): chunks joined rank by
/// rank, an empty source as `nbest` empty outputs; a warning for each output the model's positions
/// cut short.
pub(super) fn join_chunks(
    sentences: usize,
    pieces: &[(usize, &[u32])],
    piece_hyps: Vec<Vec<Hypothesis>>,
    opts: &DecodeOptions,
    max_src: usize,
    stats: &mut TranslateStats,
    events: &mut dyn Events,
) -> Vec<Vec<Hypothesis>> {
    // Join chunks rank by rank (a chunk with fewer hypotheses repeats its last).
    let empty = Hypothesis::default();
    let mut out: Vec<Vec<Hypothesis>> = vec![Vec::new(); sentences];
    let mut p = 0;
    for (i, o) in out.iter_mut().enumerate() {
        let first = p;
        while p < pieces.len() && pieces[p].0 == i {
            p += 1;
        }
        let chunks = &piece_hyps[first..p];
        if chunks.is_empty() {
            // An empty source has one output, the empty one; the n-best list still has its
            // n entries, so that every sentence has as many as asked for.
            o.extend(std::iter::repeat_n(empty.clone(), opts.search.nbest.max(1)));
            continue;
        }
        let ranks = chunks.iter().map(|c| c.len()).max().unwrap_or(0);
        for k in 0..ranks {
            let mut joined = empty.clone();
            for (j, c) in chunks.iter().enumerate() {
                let h = &c[k.min(c.len() - 1)];
                if j > 0 {
                    joined.chunk_starts.push(joined.tokens.len());
                }
                joined.tokens.extend_from_slice(&h.tokens);
                joined.log_prob += h.log_prob;
                joined.score += h.score;
            }
            o.push(joined);
        }
        stats.out_tokens += o[0].tokens.len();
        if chunks.iter().zip(pieces[first..p].iter()).any(|(c, (_, src))| {
            c.first().is_some_and(|h| opts.search.stopped_by_positions(src.len(), h.tokens.len(), max_src))
        }) {
            events.warn(&format!(
                "sentence {}: the output reached the model's limit of {} tokens (max_positions = {max_src}) before \
                 ending, and stops there: the length limit of this search (source × {} + {}) lies beyond what the \
                 model can write",
                i + 1,
                if opts.search.end_at_limit { max_src } else { max_src - 1 },
                opts.search.max_len_a,
                opts.search.max_len_b
            ));
            stats.capped += 1;
        }
    }
    out
}
