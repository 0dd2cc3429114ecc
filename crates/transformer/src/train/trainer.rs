//! The training step (§5): forward, label-smoothed loss, backward, Adam with the Eq. 3 schedule, over
//! flat parameter, gradient and moment buffers.

use super::schedule::Schedule;
use crate::error::{Error, Result};
use crate::kernels::cpu::adam::{adam_update, AdamConfig};
use crate::kernels::cpu::elementwise::all_finite;
use crate::model::{Batch, DropoutCtx, Transformer, Workspace};
use rayon::prelude::*;

/// What one update reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepStats {
    /// The update's number (1-based).
    pub step: u64,
    /// Label-smoothed loss per target token.
    pub loss: f64,
    /// Negative log-likelihood per target token (ln of perplexity).
    pub nll: f64,
    /// Target tokens in the update.
    pub tokens: usize,
    /// Learning rate used.
    pub lr: f32,
}

/// A model with its gradient and Adam buffers, schedule and step counter.
pub struct Trainer {
    /// The model trained.
    pub model: Transformer,
    /// Gradients (same layout as the parameters).
    pub grads: Vec<f32>,
    /// Adam first moments.
    pub adam_m: Vec<f32>,
    /// Adam second moments.
    pub adam_v: Vec<f32>,
    /// Adam constants.
    pub adam: AdamConfig,
    /// Learning-rate schedule.
    pub schedule: Schedule,
    /// Updates done so far.
    pub step: u64,
    /// Seed of the dropout masks.
    pub seed: u64,
    /// Forward/backward passes done so far (keys the dropout masks).
    pub passes: u64,
    /// Activations and scratch.
    pub workspace: Workspace,
}

impl Trainer {
    /// A trainer at step 0 with the paper's Adam and the given schedule.
    pub fn new(model: Transformer, schedule: Schedule, seed: u64) -> Self {
        let n = model.params.len();
        Trainer {
            model,
            grads: vec![0.0; n],
            adam_m: vec![0.0; n],
            adam_v: vec![0.0; n],
            adam: AdamConfig::paper(),
            schedule,
            step: 0,
            seed,
            passes: 0,
            workspace: Workspace::new(),
        }
    }

    /// Forward + backward of one (micro-)batch with dropout, accumulating gradients scaled by
    /// `grad_scale` (1 / target tokens of the whole update). Returns the loss sums.
    pub fn accumulate(&mut self, batch: &Batch, grad_scale: f32) -> Result<crate::model::LossSums> {
        let ctx = DropoutCtx { seed: self.seed, counter: self.passes };
        self.passes += 1;
        self.model.forward(batch, &mut self.workspace, Some(ctx))?;
        let sums = self.model.loss(batch, &mut self.workspace, self.model.config.label_smoothing, grad_scale);
        self.model.backward(batch, &mut self.workspace, Some(ctx), &mut self.grads);
        Ok(sums)
    }

    /// One update from `batches` (gradient accumulation over all of them), normalised per target
    /// token. A non-finite loss leaves parameters and moments untouched and returns an error.
    pub fn train_step(&mut self, batches: &[Batch]) -> Result<StepStats> {
        let tokens: usize = batches.iter().map(|b| b.target_tokens()).sum();
        if tokens == 0 {
            return Err(Error::Batch("the update has no target tokens".into()));
        }
        {
            let _t = crate::kernels::cpu::profile::scope(crate::kernels::cpu::profile::Slot::Elementwise);
            self.grads.par_chunks_mut(1 << 16).for_each(|c| c.fill(0.0));
        }
        let (mut loss, mut nll) = (0.0, 0.0);
        for b in batches {
            let s = self.accumulate(b, 1.0 / tokens as f32)?;
            loss += s.loss;
            nll += s.nll;
        }
        let step = self.step + 1;
        if !loss.is_finite() || !all_finite(&self.grads) {
            return Err(Error::NonFiniteLoss { step, loss: loss as f32 });
        }
        let lr = self.schedule.lr(step);
        adam_update(&mut self.model.params, &self.grads, &mut self.adam_m, &mut self.adam_v, self.adam, lr, step);
        self.step = step;
        Ok(StepStats { step, loss: loss / tokens as f64, nll: nll / tokens as f64, tokens, lr })
    }

    /// Loss sums of `batch` without dropout and without touching gradients.
    pub fn evaluate(&mut self, batch: &Batch) -> Result<crate::model::LossSums> {
        self.model.forward(batch, &mut self.workspace, None)?;
        Ok(self.model.loss(batch, &mut self.workspace, self.model.config.label_smoothing, 0.0))
    }
}
