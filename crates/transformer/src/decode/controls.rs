//! What the search may do beyond the paper's beam: the minimum length and repetition controls
//! ([`Controls`]) and random sampling ([`Sampling`]), each as CTranslate2 defines it, applied to a
//! row of next-token logits before the search picks from it (decode/beam.rs's `row_candidates`).

use crate::error::{Error, Result};
use crate::vocab::{BOS, EOS, PAD, UNK};

/// What the search may emit beyond the model's scores, as CTranslate2 defines each (its
/// `decoding_utils.cc`): applied to a row's logits before they are normalised, so every
/// log-probability and score of a hypothesis is the controlled distribution's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Controls {
    /// No EOS before this many output tokens (`min_decoding_length`; the length limit still
    /// forces EOS). 0: none.
    pub min_len: usize,
    /// The logit of every token already in the hypothesis divided by this when positive and
    /// multiplied by it when negative (`repetition_penalty`, CTRL's; > 1 penalises). 1: none.
    pub repetition_penalty: f32,
    /// No n-gram of this size twice in a hypothesis: a token that would complete an n-gram the
    /// hypothesis holds already is not emitted (`no_repeat_ngram_size`). 0: none.
    pub no_repeat_ngram: usize,
}

impl Default for Controls {
    fn default() -> Self {
        Controls { min_len: 0, repetition_penalty: 1.0, no_repeat_ngram: 0 }
    }
}

impl Controls {
    /// Whether any control is on.
    pub fn active(&self) -> bool {
        *self != Controls::default()
    }

    /// Whether any control applies to a hypothesis of `tokens`.
    pub(super) fn applies(&self, tokens: &[u32]) -> bool {
        tokens.len() < self.min_len
            || (self.repetition_penalty != 1.0 && !tokens.is_empty())
            || (self.no_repeat_ngram > 0 && tokens.len() >= self.no_repeat_ngram)
    }

    /// `row` (one hypothesis' next-token logits) with the controls applied, in `out`: a disabled
    /// token gets [`DISABLED`], below every real logit, and is never emitted. At the length limit
    /// (`at_limit`) EOS stays allowed whatever the minimum length: the limit wins.
    pub(super) fn apply(&self, row: &[f32], tokens: &[u32], at_limit: bool, out: &mut Vec<f32>) {
        out.clear();
        // A token of probability 0 (a logit of −∞) stays out, and the row's log Σ exp finite.
        out.extend(row.iter().map(|&x| if x == f32::NEG_INFINITY { DISABLED } else { x }));
        if self.repetition_penalty != 1.0 {
            let p = self.repetition_penalty;
            // Each from the model's own logit, so a token written twice is penalised once (one of
            // probability 0 stays out).
            for &t in tokens {
                if let (Some(&x), Some(y)) = (row.get(t as usize), out.get_mut(t as usize)) {
                    if x > f32::NEG_INFINITY {
                        *y = if x < 0.0 { (x * p).max(DISABLED) } else { x / p };
                    }
                }
            }
        }
        if tokens.len() < self.min_len && !at_limit {
            out[EOS as usize] = DISABLED;
        }
        let n = self.no_repeat_ngram;
        if n > 0 && tokens.len() >= n {
            // The last n − 1 tokens, and every earlier place they occur: the token after each.
            let suffix = &tokens[tokens.len() + 1 - n..];
            for start in 0..=tokens.len() - n {
                if &tokens[start..start + n - 1] == suffix {
                    if let Some(x) = out.get_mut(tokens[start + n - 1] as usize) {
                        *x = DISABLED;
                    }
                }
            }
        }
    }

    /// Checks the settings.
    pub(super) fn validate(&self) -> Result<()> {
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(Error::Config(format!(
                "the repetition penalty must be finite and > 0 (got {})",
                self.repetition_penalty
            )));
        }
        Ok(())
    }
}

/// The logit of a token the controls disable: finite (so the row's log Σ exp stays finite) and far
/// below any real logit; such a token is dropped from the candidates.
pub(super) const DISABLED: f32 = -1e30;

/// Random sampling instead of the beam's best (Edunov et al. 2018, for back-translation; fairseq's
/// `--sampling`, CTranslate2's `sampling_topk`): each output token drawn from the model's
/// distribution, its logits divided by `temperature`, cut to the `topk` most likely tokens and
/// then to the smallest set whose probability reaches `topp`. The search's `beam` is the number
/// of samples a sentence gets (each its own draws), all returned (`nbest` = `beam`). A draw
/// depends only on the seed, the sentence's key, the sample and the step: the same output for the
/// same seed on any batching and thread count. A sample's log-probability and score are the
/// model's (with the [`Controls`]), not the sampling distribution's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Draw among this many most likely tokens (0: all).
    pub topk: usize,
    /// Then among the fewest most likely whose probability sums to at least this (1: all).
    pub topp: f32,
    /// Logits divided by this (> 0; towards 0 it is greedy search).
    pub temperature: f32,
    /// The draws' seed.
    pub seed: u64,
}

impl Sampling {
    /// Checks the settings.
    pub(super) fn validate(&self) -> Result<()> {
        if !(self.temperature > 0.0 && self.temperature.is_finite()) {
            return Err(Error::Config(format!(
                "the sampling temperature must be finite and > 0 (got {})",
                self.temperature
            )));
        }
        if !(self.topp > 0.0 && self.topp <= 1.0) {
            return Err(Error::Config(format!("the sampling top-p must lie in (0, 1] (got {})", self.topp)));
        }
        Ok(())
    }

    /// The uniform draw in [0, 1) of sample `lineage` of sentence `key` at `step`.
    fn uniform(&self, key: u64, lineage: usize, step: usize) -> f64 {
        use crate::rng::mix64;
        let h = mix64(
            mix64(self.seed ^ 0x2545_f491_4f6c_dd1d)
                ^ mix64(key.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                ^ mix64((lineage as u64) << 32 | step as u64),
        );
        (h >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Draws `n` tokens of sentence `key` from `row` (logits, after the controls) at `step`, sample
    /// `lineage(j)` for draw j: each (the model's log p, token), with `norm` the row's log Σ exp.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn draw(
        &self,
        row: &[f32],
        norm: f32,
        no_unk: bool,
        key: u64,
        step: usize,
        n: usize,
        lineage: impl Fn(usize) -> usize,
    ) -> Vec<(f64, u32)> {
        // The candidates, most likely first (ties by id): what may be written at all.
        let mut cands: Vec<(f32, u32)> = row
            .iter()
            .enumerate()
            .map(|(t, &x)| (x, t as u32))
            .filter(|&(x, t)| x > DISABLED && !x.is_nan() && t != PAD && t != BOS && !(no_unk && t == UNK))
            .collect();
        cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        if self.topk > 0 {
            cands.truncate(self.topk);
        }
        // The sampling distribution over them, in f64: exp((x − max) / T), then the nucleus.
        let top = cands.first().map_or(0.0, |c| f64::from(c.0));
        let t = f64::from(self.temperature);
        let mut weights: Vec<f64> = cands.iter().map(|c| ((f64::from(c.0) - top) / t).exp()).collect();
        let total: f64 = weights.iter().sum();
        if self.topp < 1.0 {
            let (mut acc, mut keep) = (0.0, weights.len());
            for (i, w) in weights.iter().enumerate() {
                acc += w / total;
                if acc >= f64::from(self.topp) {
                    keep = i + 1;
                    break;
                }
            }
            weights.truncate(keep);
        }
        let total: f64 = weights.iter().sum();
        (0..n)
            .filter_map(|j| {
                let mut u = self.uniform(key, lineage(j), step) * total;
                let mut pick = weights.len().checked_sub(1)?;
                for (i, w) in weights.iter().enumerate() {
                    if u < *w {
                        pick = i;
                        break;
                    }
                    u -= w;
                }
                let (x, tok) = cands[pick];
                Some((f64::from(x) - f64::from(norm), tok))
            })
            .collect()
    }
}
