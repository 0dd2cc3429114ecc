//! Where a run is ([`RunState`], saved in every checkpoint so a restart continues exactly) and
//! the metadata a run's checkpoints carry.

use super::config::DataSection;
use crate::checkpoint;
use crate::task::Task;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a run is: saved in every checkpoint so a restart continues exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Updates done.
    pub step: u64,
    /// Forward/backward passes done, by every worker of the run (a batch's position keys its
    /// dropout masks).
    pub passes: u64,
    /// Current epoch (0-based).
    pub epoch: u64,
    /// Batches of the current epoch's order already consumed.
    pub cursor: usize,
    /// Seconds of training over all processes.
    pub elapsed_s: f64,
    /// Parsing: the best validation F1 so far (its checkpoint is `best.safetensors`).
    #[serde(default)]
    pub best_f1: Option<f64>,
    /// How many records `metrics.jsonl` held when this state was saved: a run resumed from it
    /// keeps those and drops the ones written after, which it writes again (none twice). `None`
    /// in a live state and in checkpoints of older runs (those drop the records after `step`).
    #[serde(default)]
    pub metrics_records: Option<u64>,
    /// The step at which the run scored its final model's F1 at the end: a run resumed there
    /// with nothing left to train does not score it again.
    #[serde(default)]
    pub f1_scored_at: Option<u64>,
    /// The step at which the run did all its end-of-run work (final F1, the average's F1): a run
    /// resumed there with nothing left to train does not do it again.
    #[serde(default)]
    pub ended_at: Option<u64>,
}

/// The metadata a run's checkpoints carry: its position, its task and (parsing) its tree format.
pub(super) fn checkpoint_extra(state: &RunState, data: &DataSection) -> BTreeMap<String, String> {
    let mut extra: BTreeMap<String, String> = [
        ("run_state".to_string(), serde_json::to_string(state).expect("state serialises")),
        (checkpoint::TASK_KEY.to_string(), data.task.name().to_string()),
    ]
    .into();
    if data.task == Task::Parsing {
        extra.insert(checkpoint::TREE_FORMAT_KEY.to_string(), data.tree_format.name().to_string());
    }
    extra
}
