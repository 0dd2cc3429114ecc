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
    let lengths: Vec<(usize, usize)> = pairs.iter().map(|(s, t)| (s.len(), t.len())).collect();
    let mut totals = Totals::default();
    for b in make_batches(&lengths, budget) {
        let sel: Vec<(Vec<u32>, Vec<u32>)> = b.iter().map(|&i| pairs[i].clone()).collect();
        let batch = Batch::from_pairs(&sel);
        model.forward(&batch, ws, None)?;
        let s = model.loss(&batch, ws, label_smoothing, 0.0);
        totals.loss += s.loss;
        totals.nll += s.nll;
        totals.tokens += s.tokens;
        totals.pairs += b.len();
    }
    Ok(totals)
}
