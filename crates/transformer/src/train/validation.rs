//! A run's validation: the loss of the validation pairs (label-smoothed and NLL per target token)
//! with how much the model reads its sources, recorded at every validation; for parsing also the
//! validation F1 (§6.3's decoding, EVALB), which keeps the best checkpoint as [`BEST`], and at the
//! end the F1 of the average of the last checkpoints (§6.1), which competes for it.

use super::config::RunConfig;
use super::distributed::Collective;
use super::prepare::Data;
use super::run_dir::{last_checkpoints, RunDir};
use super::state::{checkpoint_extra, RunState};
use super::trainer::Trainer;
use crate::checkpoint;
use crate::data::batching::BatchConfig;
use crate::data::parallel::TokenPairs;
use crate::data::trees::{delinearise, Tree};
use crate::decode::translator::{SessionOptions, Translator};
use crate::error::Result;
use crate::eval::perplexity::SourceReading;
use crate::events::Events;
use crate::model::Transformer;
use crate::task::Validation;
use std::path::PathBuf;
use std::time::Instant;

/// The file name of a parsing run's best checkpoint by validation F1.
pub const BEST: &str = "best.safetensors";

/// The validation loss per target token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ValidLoss {
    /// Label-smoothed, as training minimises it.
    pub smoothed: f64,
    /// Negative log-likelihood.
    pub nll: f64,
}

impl ValidLoss {
    /// The perplexity, exp(NLL per token).
    pub fn perplexity(&self) -> f64 {
        self.nll.exp()
    }
}

/// One validation's scores.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Validated {
    pub loss: ValidLoss,
    /// How much the model reads its sources (rank 0 only).
    pub reading: Option<SourceReading>,
    /// Wall seconds the validation took (it counts in the run's time budget; the metrics record
    /// says how much, so that a throughput can leave it out).
    pub seconds: f64,
}

impl Validated {
    /// ", shifted-source gap G nats/token, encoder spread S" for a log line (empty without a
    /// reading).
    pub fn reading_text(&self) -> String {
        match self.reading {
            Some(r) => format!(
                ", shifted-source gap {} nats/token, encoder spread {:.3}",
                r.gap.map_or("n/a".to_string(), |g| format!("{g:.3}")),
                r.spread
            ),
            None => String::new(),
        }
    }

    /// The metrics record: loss and NLL per target token, perplexity, the source reading
    /// (shifted-sentence gap in nats per token, encoder-output spread) and the seconds it took.
    fn record(&self, step: u64, epoch: u64) -> serde_json::Value {
        let (gap, spread) = (self.reading.and_then(|r| r.gap), self.reading.map(|r| r.spread));
        let (loss, nll) = (self.loss.smoothed, self.loss.nll);
        serde_json::json!({"kind": "valid", "step": step, "epoch": epoch, "loss": loss, "nll": nll, "ppl": nll.exp(), "gap": gap, "spread": spread, "seconds": self.seconds})
    }
}

/// The run's validation, as its task measures it: label-smoothed loss and NLL per target token over
/// `pairs`, without dropout (the validation set is never empty: `prepare` says), and the
/// [`SourceReading`] (encoder-output spread, shifted-sentence gap). Rank 0 validates; the other
/// workers of a data-parallel run get NaN (they record nothing).
pub(super) fn validate(
    trainer: &mut Trainer,
    pairs: &TokenPairs,
    cfg: &RunConfig,
    comm: &dyn Collective,
) -> Result<Validated> {
    if !comm.is_root() {
        return Ok(Validated { loss: ValidLoss { smoothed: f64::NAN, nll: f64::NAN }, reading: None, seconds: 0.0 });
    }
    let start = std::time::Instant::now();
    match cfg.data.task.validation() {
        Validation::Perplexity | Validation::PerplexityAndF1 => {
            let bc = BatchConfig { max_src_tokens: cfg.train.max_src_tokens, max_tgt_tokens: cfg.train.max_tgt_tokens };
            let (totals, reading) = trainer.score_and_reading(pairs, &bc)?;
            let tokens = totals.tokens.max(1) as f64;
            let loss = ValidLoss { smoothed: totals.loss / tokens, nll: totals.nll / tokens };
            Ok(Validated { loss, reading: Some(reading), seconds: start.elapsed().as_secs_f64() })
        }
    }
}

/// Records a validation in the metrics and warns, once warmup is over, when the source path looks
/// dead.
pub(super) fn record(
    run_dir: &RunDir,
    state: &RunState,
    epoch: u64,
    v: &Validated,
    warmup: u64,
    events: &mut dyn Events,
) -> Result<()> {
    if let Some(w) = v.reading.and_then(|r| r.warning()).filter(|_| state.step >= warmup) {
        events.warn(&format!("step {}: {w}", state.step));
    }
    let rec = v.record(state.step, epoch);
    run_dir.append_metrics(&rec)?;
    events.validation(&rec);
    Ok(())
}

/// Parsing validation: beam-decodes the validation sentences (beam `train.valid_f1_beam`, §6.3's α
/// and length) and scores the trees against the gold ones with EVALB (COLLINS.prm). Returns the
/// F-measure over all lengths (0 where EVALB has no valid sentence) and the number of outputs
/// that needed repair.
fn validate_f1(model: Transformer, data: &Data, cfg: &RunConfig) -> Result<(f64, usize)> {
    let options = SessionOptions {
        precision: model.precision(),
        task: cfg.data.task,
        tree_format: cfg.data.tree_format,
        ..Default::default()
    };
    let translator = Translator::new(model, data.tokenizer.clone(), options)?;
    let sentences: Vec<String> = data.valid_text.iter().map(|(s, _)| s.clone()).collect();
    let gold: Vec<Tree> = data
        .valid_text
        .iter()
        .map(|(s, t)| {
            let words: Vec<&str> = s.split_whitespace().collect();
            let tokens: Vec<String> = t.split_whitespace().map(str::to_string).collect();
            delinearise(&tokens, &words)
        })
        .collect();
    let popts = cfg.train.valid_f1_parse_options();
    let scored = translator.parse_and_score(&sentences, &gold, &popts, &mut ())?;
    let f1 = scored.report.all.fmeasure;
    Ok((if f1.is_finite() { f1 } else { 0.0 }, scored.malformed()))
}

/// A parsing run's F1 validations and its best checkpoint (rank 0's).
pub(super) struct F1<'a> {
    pub data: &'a Data,
    pub cfg: &'a RunConfig,
    pub run_dir: &'a RunDir,
}

impl F1<'_> {
    /// Runs the F1 validation of the trainer's model, logs and records it, and saves the model as
    /// `best.safetensors` when it is the best so far.
    pub fn checkpoint(&self, trainer: &Trainer, state: &mut RunState, events: &mut dyn Events) -> Result<()> {
        let start = Instant::now();
        let (f1, malformed) = validate_f1(trainer.model().clone(), self.data, self.cfg)?;
        let best = state.best_f1.is_none_or(|b| f1 > b);
        if best {
            state.best_f1 = Some(f1);
            let extra = checkpoint_extra(state, &self.cfg.data);
            let ckpt = trainer.to_checkpoint(self.data.tokenizer.hash(), extra);
            checkpoint::save(&self.cfg.train.output_dir.join(BEST), &ckpt)?;
        }
        events.log(&format!(
            "validation F1 {f1:.2} at step {} ({malformed} of {} outputs repaired, {:.0} s){}",
            state.step,
            self.data.valid_text.len(),
            start.elapsed().as_secs_f64(),
            if best { "; best so far, saved as best.safetensors" } else { "" }
        ));
        let rec = serde_json::json!({"kind": "valid_f1", "step": state.step, "epoch": state.epoch, "f1": f1, "malformed": malformed, "best": best});
        self.run_dir.append_metrics(&rec)?;
        events.validation(&rec);
        Ok(())
    }

    /// At the end of the run: averages the newest `train.valid_f1_average` checkpoints (the final
    /// one included), scores the average's validation F1 as [`F1::checkpoint`] scores a model (same
    /// decoding, the training precision), records it (`valid_f1_average` in `metrics.jsonl`) and
    /// keeps it as `best.safetensors` when it beats the best so far.
    pub fn average(&self, trainer: &Trainer, state: &mut RunState, events: &mut dyn Events) -> Result<()> {
        let n = self.cfg.train.valid_f1_average;
        let last = last_checkpoints(&self.cfg.train.output_dir, n)?;
        let newest: Vec<PathBuf> = last.iter().map(|(_, p)| p.clone()).collect();
        if n < 2 || newest.len() < 2 {
            if n >= 2 {
                events
                    .log(&format!("validation F1 of an average: skipped, the run has {} checkpoint(s)", newest.len()));
            }
            return Ok(());
        }
        let start = Instant::now();
        let averaged = checkpoint::average(&newest)?;
        let first_step = last.first().map_or(0, |l| l.0);
        let model = Transformer::from_params(averaged.config.clone(), averaged.params.clone())?
            .with_precision(trainer.model().precision())?;
        let (f1, malformed) = validate_f1(model, self.data, self.cfg)?;
        let best = state.best_f1.is_none_or(|b| f1 > b);
        if best {
            state.best_f1 = Some(f1);
            checkpoint::save(&self.cfg.train.output_dir.join(BEST), &averaged)?;
        }
        events.log(&format!(
            "validation F1 {f1:.2} of the average of the last {} checkpoints (steps {first_step}..{}; {malformed} of {} outputs repaired, {:.0} s){}",
            newest.len(),
            state.step,
            self.data.valid_text.len(),
            start.elapsed().as_secs_f64(),
            if best { "; best, saved as best.safetensors" } else { "; the best stays" }
        ));
        let rec = serde_json::json!({"kind": "valid_f1_average", "step": state.step, "epoch": state.epoch, "f1": f1, "malformed": malformed, "best": best, "averaged": newest.len(), "from_step": first_step});
        self.run_dir.append_metrics(&rec)?;
        events.validation(&rec);
        Ok(())
    }
}
