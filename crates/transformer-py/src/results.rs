//! The result classes: CTranslate2's `TranslationResult`, `ScoringResult`, `ExecutionStats`, and
//! the asynchronous results that wait on a job's thread.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use std::sync::{Arc, Condvar, Mutex};

/// One sentence's translations (`ctranslate2.TranslationResult`).
#[pyclass(module = "transformer", frozen, get_all)]
pub(crate) struct TranslationResult {
    /// The hypotheses, best first, as token strings.
    pub(crate) hypotheses: Vec<Vec<String>>,
    /// Their scores (log-probability over the length penalty), with `return_scores=True`.
    pub(crate) scores: Vec<f64>,
    /// Each hypothesis' attention over the source tokens, a row per output token (the mean of the
    /// last layer's heads), with `return_attention=True`.
    pub(crate) attention: Vec<Vec<Vec<f32>>>,
    /// Logits over the vocabulary (not returned yet: always empty).
    pub(crate) logits: Vec<Vec<f32>>,
}

#[pymethods]
impl TranslationResult {
    fn __repr__(&self) -> String {
        format!(
            "TranslationResult(hypotheses={:?}, scores={:?}, attention=[], logits=[])",
            self.hypotheses, self.scores
        )
    }
}

/// One pair's scores (`ctranslate2.ScoringResult`).
#[pyclass(module = "transformer", frozen, get_all)]
pub(crate) struct ScoringResult {
    /// The scored target tokens, `</s>` last.
    pub(crate) tokens: Vec<String>,
    /// The log-probability of each, natural log.
    pub(crate) log_probs: Vec<f32>,
}

#[pymethods]
impl ScoringResult {
    fn __repr__(&self) -> String {
        format!("ScoringResult(tokens={:?}, log_probs={:?})", self.tokens, self.log_probs)
    }
}

/// What `translate_file` did (`ctranslate2.ExecutionStats`).
#[pyclass(module = "transformer", frozen, get_all)]
pub(crate) struct ExecutionStats {
    /// Target tokens written (the best hypothesis of each line).
    pub(crate) num_tokens: usize,
    /// Lines translated.
    pub(crate) num_examples: usize,
    /// Wall time of the whole call, in milliseconds.
    pub(crate) total_time_in_ms: f64,
}

#[pymethods]
impl ExecutionStats {
    fn __repr__(&self) -> String {
        format!(
            "ExecutionStats(num_tokens={}, num_examples={}, total_time_in_ms={:.1})",
            self.num_tokens, self.num_examples, self.total_time_in_ms
        )
    }
}

/// The outcome of a job run on a thread of its own (`asynchronous=True`).
pub(crate) enum Outcome {
    Translations(crate::engine::Translations),
    Scores(Vec<Vec<String>>, Vec<Vec<f32>>),
}

/// A job's outcome, filled once by its thread; every result of the batch waits on it.
pub(crate) type Shared = Arc<(Mutex<Option<Result<Outcome, String>>>, Condvar)>;

pub(crate) fn wait(py: Python<'_>, job: &Shared) -> PyResult<()> {
    py.detach(|| {
        let (lock, ready) = &**job;
        let mut g = lock.lock().unwrap_or_else(|p| p.into_inner());
        while g.is_none() {
            g = ready.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    });
    let (lock, _) = &**job;
    match lock.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        Some(Err(e)) => Err(PyRuntimeError::new_err(e.clone())),
        _ => Ok(()),
    }
}

pub(crate) fn is_done(job: &Shared) -> bool {
    job.0.lock().unwrap_or_else(|p| p.into_inner()).is_some()
}

/// A translation being computed (`ctranslate2.AsyncTranslationResult`).
#[pyclass(module = "transformer", frozen)]
pub(crate) struct AsyncTranslationResult {
    pub(crate) job: Shared,
    pub(crate) index: usize,
}

#[pymethods]
impl AsyncTranslationResult {
    /// Blocks until the batch is translated; returns this sentence's result.
    fn result(&self, py: Python<'_>) -> PyResult<TranslationResult> {
        wait(py, &self.job)?;
        match self.job.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(Ok(Outcome::Translations(t))) => Ok(TranslationResult {
                hypotheses: t.tokens[self.index].clone(),
                scores: t.scores[self.index].clone(),
                attention: t.attention.get(self.index).cloned().unwrap_or_default(),
                logits: Vec::new(),
            }),
            _ => Err(PyRuntimeError::new_err("the asynchronous job holds no translations")),
        }
    }

    /// Whether the result is ready.
    fn done(&self) -> bool {
        is_done(&self.job)
    }
}

/// A score being computed (`ctranslate2.AsyncScoringResult`).
#[pyclass(module = "transformer", frozen)]
pub(crate) struct AsyncScoringResult {
    pub(crate) job: Shared,
    pub(crate) index: usize,
}

#[pymethods]
impl AsyncScoringResult {
    /// Blocks until the batch is scored; returns this pair's result.
    fn result(&self, py: Python<'_>) -> PyResult<ScoringResult> {
        wait(py, &self.job)?;
        match self.job.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(Ok(Outcome::Scores(t, l))) => {
                Ok(ScoringResult { tokens: t[self.index].clone(), log_probs: l[self.index].clone() })
            }
            _ => Err(PyRuntimeError::new_err("the asynchronous job holds no scores")),
        }
    }

    /// Whether the result is ready.
    fn done(&self) -> bool {
        is_done(&self.job)
    }
}
