//! §5 Training: the learning-rate schedule (Eq. 3), the training step with Adam, and checkpoints.

pub mod checkpoint;
pub mod curve;
pub mod run;
pub mod schedule;
pub mod trainer;

pub use crate::kernels::cpu::adam::AdamConfig;
pub use schedule::Schedule;
pub use trainer::{StepStats, Trainer};
