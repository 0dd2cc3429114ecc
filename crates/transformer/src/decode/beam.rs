//! §6.1 Beam search, batched over sentences, with the GNMT length penalty
//! lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016), as the paper uses (beam 4, α = 0.6, maximum output
//! length = input length + 50; for parsing beam 21, α = 0.3, input length + 300).
//!
//! The search, per sentence:
//! - Each sentence has `beam` slots. Every step extends its live hypotheses by every token (never
//!   PAD or BOS) and ranks the candidates by log-probability Σ log p. The best candidates fill the
//!   free slots: one that ends in EOS is finished and keeps its slot for good (it is scored
//!   log P / lp(|Y|), where |Y| counts the output tokens and the EOS), the others stay live. So the
//!   beam shrinks as hypotheses finish, and beam 1 is exactly greedy search.
//! - At the maximum length the only allowed token is EOS, so every live hypothesis finishes.
//! - Early termination: a sentence stops once it has `nbest` finished hypotheses and the `nbest`-th
//!   best of them scores at least the best any live hypothesis could still reach. With α ≥ 0 and
//!   log P only falling as a hypothesis grows, that bound is log P / lp(maximum |Y|). Stopping early
//!   therefore never changes the result.
//! - The result is the `nbest` best finished hypotheses by score.
//!
//! Ties are broken deterministically: by lower row, then lower token id.

use crate::error::{Error, Result};
use crate::kernels::cpu::elementwise::{all_finite, exp_shift_sum, max};
use crate::model::{DecoderState, Encoded, Transformer, Workspace};
use crate::{BOS, EOS, PAD};
use multiversion::multiversion;
use rayon::prelude::*;

/// Search settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BeamConfig {
    /// Beam size k (1 = greedy).
    pub beam: usize,
    /// Length-penalty exponent α (0 = no penalty).
    pub alpha: f64,
    /// Maximum output length a·|source| + b tokens (EOS not counted): a.
    pub max_len_a: f64,
    /// b.
    pub max_len_b: usize,
    /// Hypotheses returned per sentence (≤ beam).
    pub nbest: usize,
}

impl BeamConfig {
    /// §6.1 translation: beam 4, α 0.6, maximum length input + 50.
    pub const fn translation() -> Self {
        BeamConfig { beam: 4, alpha: 0.6, max_len_a: 1.0, max_len_b: 50, nbest: 1 }
    }

    /// §6.3 constituency parsing: beam 21, α 0.3, maximum length input + 300.
    pub const fn parsing() -> Self {
        BeamConfig { beam: 21, alpha: 0.3, max_len_a: 1.0, max_len_b: 300, nbest: 1 }
    }

    /// Greedy search: beam 1.
    pub const fn greedy() -> Self {
        BeamConfig { beam: 1, alpha: 0.6, max_len_a: 1.0, max_len_b: 50, nbest: 1 }
    }

    /// A preset by name: `translation`, `parsing` or `greedy`.
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "translation" => Ok(Self::translation()),
            "parsing" => Ok(Self::parsing()),
            "greedy" => Ok(Self::greedy()),
            _ => Err(Error::Config(format!(
                "unknown decoding preset {name:?}; the presets are translation, parsing and greedy"
            ))),
        }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.beam == 0 {
            return bad("beam size must be at least 1".into());
        }
        if self.nbest == 0 || self.nbest > self.beam {
            return bad(format!("nbest must be between 1 and the beam size {} (got {})", self.beam, self.nbest));
        }
        if !(self.alpha >= 0.0 && self.alpha.is_finite()) {
            return bad(format!("the length-penalty α must be finite and ≥ 0 (got {})", self.alpha));
        }
        if !(self.max_len_a >= 0.0 && self.max_len_a.is_finite()) {
            return bad(format!("max_len_a must be finite and ≥ 0 (got {})", self.max_len_a));
        }
        Ok(())
    }

    /// The maximum output length (EOS not counted) for a source of `src_len` tokens.
    pub fn max_len(&self, src_len: usize) -> usize {
        (self.max_len_a * src_len as f64).floor() as usize + self.max_len_b
    }

    /// lp(Y) = ((5 + |Y|) / 6)^α.
    pub fn length_penalty(&self, len: usize) -> f64 {
        ((5.0 + len as f64) / 6.0).powf(self.alpha)
    }
}

/// A finished hypothesis.
#[derive(Clone, Debug, PartialEq)]
pub struct Hypothesis {
    /// Output tokens, without BOS and EOS.
    pub tokens: Vec<u32>,
    /// log P(tokens, EOS | source), natural log.
    pub log_prob: f64,
    /// log_prob / lp(|tokens| + 1): what the search ranks by.
    pub score: f64,
}

/// What the search queries: next-token log-probabilities for a set of rows (hypotheses), each row
/// belonging to one sentence. The search starts with one row per sentence, in order.
pub trait Scorer {
    /// Vocabulary size V.
    fn vocab(&self) -> usize;
    /// Feeds one token per row (BOS first) and returns (rows, V) normalised log-probabilities of
    /// the next token.
    fn step(&mut self, tokens: &[u32]) -> Result<&[f32]>;
    /// Keeps rows `keep`: new row i continues old row `keep[i]`.
    fn reorder(&mut self, keep: &[usize]);
}

struct Live {
    sent: usize,
    tokens: Vec<u32>,
    log_prob: f64,
}

/// A ranked candidate: extend row `row` by `token`.
#[derive(Clone, Copy)]
struct Cand {
    log_prob: f64,
    row: usize,
    token: u32,
}

/// Best first; ties by lower row, then lower token.
fn better(a: &Cand, b: &Cand) -> std::cmp::Ordering {
    b.log_prob.total_cmp(&a.log_prob).then(a.row.cmp(&b.row)).then(a.token.cmp(&b.token))
}

/// The `k` best next tokens of one row of log-probabilities (never PAD or BOS; only EOS when
/// `eos_only`), as (log p, token), best first. NaN counts as −∞.
fn top_k(row: &[f32], k: usize, eos_only: bool) -> Vec<(f64, u32)> {
    let key = |x: f32| if x.is_nan() { f64::NEG_INFINITY } else { x as f64 };
    if eos_only {
        return vec![(key(row[EOS as usize]), EOS)];
    }
    let mut best: Vec<(f64, u32)> = Vec::with_capacity(k + 1);
    for (j, &x) in row.iter().enumerate() {
        if j as u32 == PAD || j as u32 == BOS {
            continue;
        }
        let x = key(x);
        if best.len() == k && x <= best[k - 1].0 {
            continue; // not better than the k-th (ties keep the lower id, seen first)
        }
        let at = best.partition_point(|&(y, _)| y >= x);
        best.insert(at, (x, j as u32));
        best.truncate(k);
    }
    best
}

/// Beam search over `src_lens.len()` sentences. Returns, per sentence, its `nbest` best finished
/// hypotheses, best first. `max_len` caps the output length (EOS not counted) whatever the config
/// says, e.g. at the model's positions.
pub fn beam_search(
    scorer: &mut impl Scorer,
    src_lens: &[usize],
    cfg: &BeamConfig,
    max_len: usize,
) -> Result<Vec<Vec<Hypothesis>>> {
    cfg.validate()?;
    let v = scorer.vocab();
    if v <= EOS as usize {
        return Err(Error::Config(format!("a vocabulary of {v} has no EOS")));
    }
    let n = src_lens.len();
    let limit: Vec<usize> = src_lens.iter().map(|&l| cfg.max_len(l).min(max_len)).collect();
    let mut finished: Vec<Vec<Hypothesis>> = vec![Vec::new(); n];
    let mut live: Vec<Live> = (0..n).map(|i| Live { sent: i, tokens: Vec::new(), log_prob: 0.0 }).collect();
    while !live.is_empty() {
        let tokens: Vec<u32> = live.iter().map(|h| h.tokens.last().copied().unwrap_or(BOS)).collect();
        let lp = scorer.step(&tokens)?;
        assert_eq!(lp.len(), live.len() * v, "scorer returned the wrong number of log-probabilities");
        // Each row contributes at most its sentence's free slots.
        let per_row: Vec<Vec<(f64, u32)>> = lp
            .par_chunks(v)
            .zip(live.par_iter())
            .map(|(row, h)| top_k(row, cfg.beam - finished[h.sent].len(), h.tokens.len() >= limit[h.sent]))
            .collect();
        let mut next: Vec<Live> = Vec::with_capacity(live.len());
        let mut keep: Vec<usize> = Vec::with_capacity(live.len());
        // Rows of one sentence are contiguous and sentences stay in order.
        let mut r0 = 0;
        while r0 < live.len() {
            let sent = live[r0].sent;
            let r1 = r0 + live[r0..].iter().take_while(|h| h.sent == sent).count();
            let mut cands: Vec<Cand> = (r0..r1)
                .flat_map(|r| {
                    let base = live[r].log_prob;
                    per_row[r].iter().map(move |&(x, token)| Cand { log_prob: base + x, row: r, token })
                })
                .collect();
            cands.sort_by(better);
            let slots = cfg.beam - finished[sent].len();
            let first_live = next.len();
            for c in cands.into_iter().take(slots) {
                let h = &live[c.row];
                if c.token == EOS {
                    let score = c.log_prob / cfg.length_penalty(h.tokens.len() + 1);
                    finished[sent].push(Hypothesis { tokens: h.tokens.clone(), log_prob: c.log_prob, score });
                } else {
                    let mut tokens = h.tokens.clone();
                    tokens.push(c.token);
                    next.push(Live { sent, tokens, log_prob: c.log_prob });
                    keep.push(c.row);
                }
            }
            if early_stop(&mut finished[sent], &next[first_live..], cfg, limit[sent]) {
                next.truncate(first_live);
                keep.truncate(first_live);
            }
            r0 = r1;
        }
        scorer.reorder(&keep);
        live = next;
    }
    for f in &mut finished {
        // Stable: equal scores keep the order they finished in.
        f.sort_by(|a, b| b.score.total_cmp(&a.score));
        f.truncate(cfg.nbest);
    }
    Ok(finished)
}

/// Whether no live hypothesis of a sentence can enter its `nbest` best finished ones.
fn early_stop(finished: &mut [Hypothesis], live: &[Live], cfg: &BeamConfig, limit: usize) -> bool {
    if live.is_empty() {
        return true;
    }
    if finished.len() < cfg.nbest {
        return false;
    }
    finished.sort_by(|a, b| b.score.total_cmp(&a.score));
    let threshold = finished[cfg.nbest - 1].score;
    let best_lp = cfg.length_penalty(limit + 1);
    live.iter().all(|h| threshold >= h.log_prob / best_lp)
}

/// The model as a [`Scorer`]: incremental decoding over an encoded batch.
pub struct ModelScorer<'m> {
    model: &'m Transformer,
    enc: Encoded,
    state: DecoderState,
    log_probs: Vec<f32>,
}

impl<'m> ModelScorer<'m> {
    /// Encodes `srcs` and prepares to decode up to `max_steps` positions.
    pub fn new(model: &'m Transformer, srcs: &[&[u32]], max_steps: usize, ws: &mut Workspace) -> Result<Self> {
        let enc = model.encode(srcs, ws)?;
        let state = model.start_decoding(&enc, max_steps)?;
        Ok(ModelScorer { model, enc, state, log_probs: Vec::new() })
    }
}

impl Scorer for ModelScorer<'_> {
    fn vocab(&self) -> usize {
        self.model.config.vocab_size
    }

    fn step(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        let v = self.model.config.vocab_size;
        let logits = self.model.decode_step(&self.enc, &mut self.state, tokens)?;
        if !all_finite(logits) {
            return Err(Error::Decode(
                "the model produced non-finite logits while decoding; the checkpoint is damaged or diverged".into(),
            ));
        }
        self.log_probs.resize(logits.len(), 0.0);
        self.log_probs.par_chunks_mut(v).zip(logits.par_chunks(v)).for_each(|(out, row)| log_softmax(out, row));
        Ok(&self.log_probs)
    }

    fn reorder(&mut self, keep: &[usize]) {
        self.state.reorder(keep);
    }
}

/// out = row − log Σ exp(row), with the vectorised exp of the training softmax.
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn log_softmax(out: &mut [f32], row: &[f32]) {
    let mx = max(row);
    out.copy_from_slice(row);
    let shift = mx + exp_shift_sum(out, mx).ln();
    for (o, &x) in out.iter_mut().zip(row) {
        *o = x - shift;
    }
}

/// Translates a batch of sources (token ids without BOS/EOS) with beam search. The output length
/// is capped by the model's positions as well as by the config.
pub fn translate_batch(
    model: &Transformer,
    srcs: &[&[u32]],
    cfg: &BeamConfig,
    ws: &mut Workspace,
) -> Result<Vec<Vec<Hypothesis>>> {
    cfg.validate()?;
    let cap = model.config.max_positions - 1;
    let steps = srcs.iter().map(|s| cfg.max_len(s.len()).min(cap) + 1).max().unwrap_or(0);
    let mut scorer = ModelScorer::new(model, srcs, steps, ws)?;
    let lens: Vec<usize> = srcs.iter().map(|s| s.len()).collect();
    beam_search(&mut scorer, &lens, cfg, cap)
}
