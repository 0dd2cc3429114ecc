//! §5 Training: the learning-rate schedule (Eq. 3), the training step with Adam, checkpoints, and
//! whole runs (their configuration, their directory, the update loop).

pub mod config;
pub mod curve;
pub mod distributed;
mod prepare;
pub mod run;
pub mod run_dir;
pub mod schedule;
mod state;
pub mod trainer;
mod validation;

pub use crate::kernels::cpu::adam::AdamConfig;
pub use schedule::Schedule;
pub use trainer::{StepStats, Trainer};
