//! Where the library tells what it is doing: one sink, [`Events`], that a translator, a training
//! run, the quick starts and `ablate` all take. A front end implements the methods it shows (a
//! progress bar, a log file, a web page) and leaves the others at their defaults.

use std::time::Instant;

/// Messages, warnings and progress from long work. Every method has a default: a message goes
/// nowhere, a warning is a message starting "warning: ", progress is not shown.
pub trait Events {
    /// A one-line message: a step done, a file written, a validation score.
    fn log(&mut self, _message: &str) {}

    /// Something the user should know while the work goes on (a sentence cut into chunks, an
    /// empty line, a pair left out). The message does not start with "warning".
    fn warn(&mut self, message: &str) {
        self.log(&format!("warning: {message}"));
    }

    /// A step of a longer job begins (a short title, e.g. "training").
    fn stage(&mut self, _name: &str) {}

    /// Items done of `total` (sentences translated or parsed), after every batch.
    fn progress(&mut self, _done: usize, _total: usize) {}

    /// After every training update.
    fn update(&mut self, _update: &Update) {}

    /// Bytes of a download so far (`done`, and the `total` when the server says it).
    fn download(&mut self, _done: u64, _total: Option<u64>) {}

    /// A validation of a training run, its record as `metrics.jsonl` holds it (`kind` `valid`,
    /// `valid_f1` or `valid_f1_average`, with its step and scores).
    fn validation(&mut self, _record: &serde_json::Value) {}

    /// A training run wrote the checkpoint of `step` to `path`.
    fn checkpoint(&mut self, _step: u64, _path: &std::path::Path) {}

    /// Whether the caller wants the work stopped (Ctrl-C in a front end that catches it):
    /// asked after every batch of a translation or parse, which then ends with
    /// [`crate::Error::Interrupted`] and nothing half-written, and before every training update,
    /// where the run then stops as at its time limit (a checkpoint written, resumable).
    fn interrupted(&mut self) -> bool {
        false
    }
}

/// Nothing shown.
impl Events for () {}

/// Messages and warnings collected, each as given.
impl Events for Vec<String> {
    fn log(&mut self, message: &str) {
        self.push(message.to_string());
    }

    fn warn(&mut self, message: &str) {
        self.push(message.to_string());
    }
}

/// Another sink's messages, warnings, stages and updates, without its progress: for work too
/// short to show as a count of its own (the quick start's five examples).
pub struct WithoutProgress<'a>(pub &'a mut dyn Events);

impl Events for WithoutProgress<'_> {
    fn log(&mut self, message: &str) {
        self.0.log(message);
    }

    fn warn(&mut self, message: &str) {
        self.0.warn(message);
    }

    fn stage(&mut self, name: &str) {
        self.0.stage(name);
    }

    fn update(&mut self, update: &Update) {
        self.0.update(update);
    }

    fn validation(&mut self, record: &serde_json::Value) {
        self.0.validation(record);
    }

    fn checkpoint(&mut self, step: u64, path: &std::path::Path) {
        self.0.checkpoint(step, path);
    }

    fn interrupted(&mut self) -> bool {
        self.0.interrupted()
    }
}

/// Events as lines given to a function: every message and warning, and a training update's
/// [`Update::line`] at most every 2 seconds (what a plain log of a run shows).
pub struct Lines<F: FnMut(&str)> {
    write: F,
    last_update: Instant,
}

impl<F: FnMut(&str)> Lines<F> {
    /// Lines written by `write`; the first update line 2 seconds after this call.
    pub fn new(write: F) -> Self {
        Lines { write, last_update: Instant::now() }
    }
}

impl<F: FnMut(&str)> Events for Lines<F> {
    fn log(&mut self, message: &str) {
        (self.write)(message);
    }

    fn update(&mut self, update: &Update) {
        if self.last_update.elapsed().as_secs_f64() >= 2.0 {
            (self.write)(&update.line());
            self.last_update = Instant::now();
        }
    }
}

/// Where a training run is after an update: what a progress bar shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Update {
    /// Updates done.
    pub step: u64,
    /// Current epoch (1-based).
    pub epoch: u64,
    /// Batches of this epoch consumed, of `epoch_batches`.
    pub cursor: usize,
    /// Batches in an epoch.
    pub epoch_batches: usize,
    /// Label-smoothed training loss per target token of this update.
    pub loss: f64,
    /// Learning rate of this update.
    pub lr: f64,
    /// Target tokens per second since the previous [`Update`] of this process.
    pub tokens_per_s: f64,
    /// Seconds of training over every process of the run.
    pub elapsed_s: f64,
    /// Seconds left by the time or step limit (the nearer), when there is one.
    pub eta_s: Option<f64>,
    /// The run's whole budget in seconds, when it has a time limit.
    pub limit_s: Option<f64>,
    /// Validation perplexity at the last validation of this process, if any.
    pub valid_perplexity: Option<f64>,
}

impl Update {
    /// The one-line form written to logs: epoch, step, loss, speed, learning rate, ETA.
    pub fn line(&self) -> String {
        let eta = self.eta_s.map(|s| format!("  ETA {:.0} min {:02.0} s", (s / 60.0).floor(), s % 60.0));
        let ppl = self.valid_perplexity.map(|p| format!("  valid ppl {p:.2}"));
        format!(
            "epoch {} step {} ({}/{} batches)  loss {:.4}  {:.0} tgt tok/s  lr {:.2e}{}{}",
            self.epoch,
            self.step,
            self.cursor,
            self.epoch_batches,
            self.loss,
            self.tokens_per_s,
            self.lr,
            ppl.unwrap_or_default(),
            eta.unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_default_to_prefixed_messages_and_updates_to_a_line_at_most_every_2_seconds() {
        let mut lines = Vec::new();
        lines.warn("sentence 3: cut in 2 chunks");
        lines.log("done");
        assert_eq!(lines, ["sentence 3: cut in 2 chunks", "done"]);
        let update = Update {
            step: 7,
            epoch: 1,
            cursor: 3,
            epoch_batches: 9,
            loss: 2.5,
            lr: 1e-4,
            tokens_per_s: 1000.0,
            elapsed_s: 1.0,
            eta_s: Some(61.0),
            limit_s: None,
            valid_perplexity: None,
        };
        assert_eq!(
            update.line(),
            "epoch 1 step 7 (3/9 batches)  loss 2.5000  1000 tgt tok/s  lr 1.00e-4  ETA 1 min 01 s"
        );
        let mut written = Vec::new();
        {
            let mut sink = Lines::new(|m: &str| written.push(m.to_string()));
            sink.update(&update); // within 2 s of the start: not written
            sink.warn("w");
            sink.last_update -= std::time::Duration::from_secs(3);
            sink.update(&update);
        }
        assert_eq!(written, ["warning: w".to_string(), update.line()]);

        // WithoutProgress passes on all but the progress.
        #[derive(Default)]
        struct Count(Vec<String>, usize);
        impl Events for Count {
            fn log(&mut self, m: &str) {
                self.0.push(m.to_string());
            }
            fn progress(&mut self, _: usize, _: usize) {
                self.1 += 1;
            }
        }
        let mut inner = Count::default();
        let mut outer = WithoutProgress(&mut inner);
        outer.progress(1, 5);
        outer.warn("x");
        inner.progress(1, 5);
        assert_eq!((inner.0, inner.1), (vec!["warning: x".to_string()], 1));
    }
}
