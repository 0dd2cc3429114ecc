//! §5.3 Learning rate, Eq. 3: lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), times an
//! optional `lr_scale` (1.0 in the paper).

use serde::{Deserialize, Serialize};

/// The inverse-square-root schedule with linear warmup.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// d_model of the model trained.
    pub d_model: usize,
    /// warmup_steps (4000 in the paper).
    pub warmup: u64,
    /// Multiplier on Eq. 3 (1.0 in the paper).
    pub lr_scale: f32,
}

impl Schedule {
    /// The paper's schedule for a model of width `d_model`.
    pub fn paper(d_model: usize) -> Self {
        Schedule { d_model, warmup: 4000, lr_scale: 1.0 }
    }

    /// The learning rate of update `step` (1-based).
    pub fn lr(&self, step: u64) -> f32 {
        let s = step.max(1) as f64;
        let w = self.warmup.max(1) as f64;
        (self.lr_scale as f64 * (self.d_model as f64).powf(-0.5) * s.powf(-0.5).min(s * w.powf(-1.5))) as f32
    }
}
