//! Per-token loss and perplexity of reference targets given their sources, teacher-forced and
//! without dropout: the validation score of a training run and the perplexity `evaluate` prints
//! (Table 3 lists per-token perplexities). One routine serves both.

use crate::data::batching::{make_batches, BatchConfig};
use crate::error::Result;
use crate::model::{Batch, Transformer, Workspace};

/// Summed scores over a set of pairs.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    /// Σ label-smoothed loss (equal to `nll` when scored with ε = 0).
    pub loss: f64,
    /// Σ negative log-likelihood.
    pub nll: f64,
    /// Target tokens scored (EOS included).
    pub tokens: usize,
    /// Pairs scored.
    pub pairs: usize,
}

impl Totals {
    /// Loss per target token; `None` when no token was scored (no score is made up from nothing).
    pub fn loss_per_token(&self) -> Option<f64> {
        (self.tokens > 0).then(|| self.loss / self.tokens as f64)
    }

    /// NLL per target token; `None` when no token was scored.
    pub fn nll_per_token(&self) -> Option<f64> {
        (self.tokens > 0).then(|| self.nll / self.tokens as f64)
    }

    /// exp(NLL per token); `None` when no token was scored.
    pub fn perplexity(&self) -> Option<f64> {
        self.nll_per_token().map(f64::exp)
    }
}

/// Which pairs can be scored: indices of those whose source is non-empty and whose source and
/// target (with EOS) fit the model's positions, and indices of the ones that do not fit.
pub fn scorable(model: &Transformer, pairs: &[(Vec<u32>, Vec<u32>)]) -> (Vec<usize>, Vec<usize>) {
    let max = model.config.max_positions;
    let (mut keep, mut too_long) = (Vec::new(), Vec::new());
    for (i, (s, t)) in pairs.iter().enumerate() {
        if s.len() > max || t.len() + 1 > max {
            too_long.push(i);
        } else if !s.is_empty() {
            keep.push(i);
        }
    }
    (keep, too_long)
}

/// Scores `pairs` (token ids without BOS/EOS) in batches of at most `budget` tokens, with label
/// smoothing `label_smoothing` in `loss`. Every pair must fit the model (see [`scorable`]).
pub fn score(
    model: &Transformer,
    pairs: &[(Vec<u32>, Vec<u32>)],
    budget: &BatchConfig,
    label_smoothing: f32,
    ws: &mut Workspace,
) -> Result<Totals> {
    Ok(score_batches(model, pairs, budget, label_smoothing, ws, false)?.0)
}

/// One pair's score: its log-probability and the target tokens it sums over.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PairScore {
    /// Σ log p(target token), natural log, EOS included.
    pub log_prob: f64,
    /// Target tokens scored (EOS included).
    pub tokens: usize,
}

/// Each pair's log-probability under the model, Σ log p(target token) (natural log, EOS included,
/// teacher-forced, no label smoothing), in the order of `pairs` (token ids without BOS/EOS),
/// scored in batches of at most `budget` tokens; what Marian's `score` prints. Every pair must fit
/// the model (see [`scorable`]).
pub fn log_probs(
    model: &Transformer,
    pairs: &[(Vec<u32>, Vec<u32>)],
    budget: &BatchConfig,
    ws: &mut Workspace,
) -> Result<Vec<PairScore>> {
    Ok(token_log_probs(model, pairs, budget, ws)?
        .iter()
        .map(|t| PairScore { log_prob: t.iter().map(|&x| f64::from(x)).sum(), tokens: t.len() })
        .collect())
}

/// Each pair's log p of each target token, EOS last (natural log, teacher-forced, no label
/// smoothing), in the order of `pairs`; [`log_probs`] sums them. Every pair must fit the model.
pub fn token_log_probs(
    model: &Transformer,
    pairs: &[(Vec<u32>, Vec<u32>)],
    budget: &BatchConfig,
    ws: &mut Workspace,
) -> Result<Vec<Vec<f32>>> {
    let lengths: Vec<(usize, usize)> = pairs.iter().map(|(s, t)| (s.len(), t.len())).collect();
    let mut out = vec![Vec::new(); pairs.len()];
    for b in make_batches(&lengths, budget) {
        let sel: Vec<(Vec<u32>, Vec<u32>)> = b.iter().map(|&i| pairs[i].clone()).collect();
        let batch = Batch::from_pairs(&sel);
        model.forward(&batch, ws, None)?;
        model.loss(&batch, ws, 0.0, 0.0)?;
        for (k, &i) in b.iter().enumerate() {
            let rows = k * batch.t..(k + 1) * batch.t;
            out[i] = ws.row_nll[rows.clone()]
                .iter()
                .zip(&batch.tgt_out[rows])
                .filter(|&(_, &t)| t != crate::vocab::PAD)
                .map(|(&nll, _)| -nll)
                .collect();
        }
    }
    Ok(out)
}

/// [`score`], and with `spread` the sum over pairs of [`encoder_spread`] of each source.
fn score_batches(
    model: &Transformer,
    pairs: &[(Vec<u32>, Vec<u32>)],
    budget: &BatchConfig,
    label_smoothing: f32,
    ws: &mut Workspace,
    spread: bool,
) -> Result<(Totals, f64)> {
    let lengths: Vec<(usize, usize)> = pairs.iter().map(|(s, t)| (s.len(), t.len())).collect();
    let mut totals = Totals::default();
    let mut spread_sum = 0.0;
    let d = model.config.d_model;
    for b in make_batches(&lengths, budget) {
        let sel: Vec<(Vec<u32>, Vec<u32>)> = b.iter().map(|&i| pairs[i].clone()).collect();
        let batch = Batch::from_pairs(&sel);
        model.forward(&batch, ws, None)?;
        if spread {
            let enc = model.encoder_output(ws);
            for (i, &len) in batch.src_lens.iter().enumerate() {
                spread_sum += encoder_spread(&enc[i * batch.s * d..(i * batch.s + len) * d], d);
            }
        }
        let s = model.loss(&batch, ws, label_smoothing, 0.0)?;
        totals.loss += s.loss;
        totals.nll += s.nll;
        totals.tokens += s.tokens;
        totals.pairs += b.len();
    }
    Ok((totals, spread_sum))
}

/// Below this encoder-output spread a run without a gap (one validation pair) warns that its
/// source path is dead. A low spread alone is no proof: a translation model of short captions
/// read its sources (gap 0.8 nats) with a spread of 0.005 (docs/parsing.md).
pub const DEAD_SPREAD: f64 = 0.3;
/// Below this shifted-sentence gap (nats per target token) a run warns that its decoder ignores
/// the source.
pub const DEAD_GAP: f64 = 0.1;

/// How much a model reads its sources: two measures taken at every validation (docs/parsing.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SourceReading {
    /// Teacher-forced NLL per target token with every source replaced by the next pair's, minus
    /// the NLL with the right sources (nats). Near 0: the decoder ignores its source. `None` with
    /// fewer than two pairs.
    pub gap: Option<f64>,
    /// Mean over sources of [`encoder_spread`]: near 0, every position of the encoder output is
    /// the same vector and encoder–decoder attention carries nothing about the sentence.
    pub spread: f64,
}

impl SourceReading {
    /// A warning when the source path looks dead, naming both measures: a gap under
    /// [`DEAD_GAP`], or, where there is no gap, a spread under [`DEAD_SPREAD`].
    pub fn warning(&self) -> Option<String> {
        let dead = match self.gap {
            Some(g) => g < DEAD_GAP,
            None => self.spread < DEAD_SPREAD,
        };
        dead.then(|| {
            format!(
                "the decoder hardly reads its source: shifted-sentence gap {} nats/token (dead below {DEAD_GAP}), encoder-output spread {:.3}; see docs/parsing.md, \"Reading the sentence\"",
                self.gap.map_or("n/a".to_string(), |g| format!("{g:.3}")),
                self.spread
            )
        })
    }
}

/// The spread of one encoder output `h` (L, D) over its positions: mean ‖hᵢ − h̄‖ / mean ‖hᵢ‖,
/// where h̄ is the mean over the L positions. 0 when every position carries the same vector;
/// about 1 for unrelated vectors. 0 for an empty or all-zero output.
pub fn encoder_spread(h: &[f32], d: usize) -> f64 {
    let l = h.len() / d;
    if l == 0 {
        return 0.0;
    }
    let mut mean = vec![0.0f64; d];
    for row in h.chunks_exact(d) {
        for (m, &x) in mean.iter_mut().zip(row) {
            *m += f64::from(x) / l as f64;
        }
    }
    let norm = |it: &mut dyn Iterator<Item = f64>| it.map(|x| x * x).sum::<f64>().sqrt();
    let (mut dev, mut size) = (0.0, 0.0);
    for row in h.chunks_exact(d) {
        dev += norm(&mut row.iter().zip(&mean).map(|(&x, m)| f64::from(x) - m));
        size += norm(&mut row.iter().map(|&x| f64::from(x)));
    }
    if size > 0.0 {
        dev / size
    } else {
        0.0
    }
}

/// [`score`] and the [`SourceReading`] of `pairs`: the pairs are scored as given (their totals
/// returned) and again with each source replaced by the next pair's (the last takes the first's).
pub fn score_and_reading(
    model: &Transformer,
    pairs: &[(Vec<u32>, Vec<u32>)],
    budget: &BatchConfig,
    label_smoothing: f32,
    ws: &mut Workspace,
) -> Result<(Totals, SourceReading)> {
    let (right, spread_sum) = score_batches(model, pairs, budget, label_smoothing, ws, true)?;
    let spread = spread_sum / pairs.len().max(1) as f64;
    if pairs.len() < 2 {
        return Ok((right, SourceReading { gap: None, spread }));
    }
    let shifted: Vec<(Vec<u32>, Vec<u32>)> =
        pairs.iter().enumerate().map(|(i, (_, t))| (pairs[(i + 1) % pairs.len()].0.clone(), t.clone())).collect();
    let (wrong, _) = score_batches(model, &shifted, budget, label_smoothing, ws, false)?;
    let gap = match (wrong.nll_per_token(), right.nll_per_token()) {
        (Some(w), Some(r)) => Some(w - r),
        _ => None,
    };
    Ok((right, SourceReading { gap, spread }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_identical_and_opposite_rows() {
        assert_eq!(encoder_spread(&[1.0, 2.0, 1.0, 2.0, 1.0, 2.0], 2), 0.0);
        // Two opposite vectors: mean 0, each row its own distance from it.
        assert!((encoder_spread(&[3.0, 4.0, -3.0, -4.0], 2) - 1.0).abs() < 1e-12);
        // (1,0) and (0,1): mean (½,½), distances √½ each, norms 1 each.
        assert!((encoder_spread(&[1.0, 0.0, 0.0, 1.0], 2) - 0.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(encoder_spread(&[], 4), 0.0);
        assert_eq!(encoder_spread(&[0.0; 8], 4), 0.0);
    }

    #[test]
    fn warning_names_both_measures_only_when_dead() {
        let alive = SourceReading { gap: Some(1.5), spread: 0.9 };
        assert_eq!(alive.warning(), None);
        let w = SourceReading { gap: Some(0.02), spread: 0.9 }.warning().expect("dead gap");
        assert!(w.contains("0.020") && w.contains("0.900"), "{w}");
        // A low spread with a clear gap reads its source (short captions do).
        assert_eq!(SourceReading { gap: Some(0.8), spread: 0.005 }.warning(), None);
        assert!(SourceReading { gap: None, spread: 0.1 }.warning().is_some());
        assert_eq!(SourceReading { gap: None, spread: 0.5 }.warning(), None);
    }
}
