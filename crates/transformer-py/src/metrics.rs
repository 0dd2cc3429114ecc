//! The metrics, as the CLI computes them: `bleu` and `chrf` (sacreBLEU's, exactly) and `evalb`
//! (EVALB with COLLINS.prm, exactly), each the library's function; the result objects print as
//! the tools' own report lines.

use crate::py_err;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use transformer::eval::bleu::{corpus_bleu, BleuConfig, Smooth};
use transformer::eval::chrf::{corpus_chrf, ChrfConfig};
use transformer::eval::evalb::{score as evalb_score, Params};
use transformer::eval::tokenize::Tokenizer;

/// A corpus BLEU score (sacreBLEU's `BLEUScore`); `str()` is sacreBLEU's line.
#[pyclass(module = "transformer", frozen, get_all)]
pub(crate) struct BleuScore {
    /// BLEU in [0, 100].
    score: f64,
    /// Clipped n-gram matches, orders 1–4.
    counts: Vec<f64>,
    /// Hypothesis n-grams, orders 1–4.
    totals: Vec<f64>,
    /// Precisions in percent, orders 1–4.
    precisions: Vec<f64>,
    /// Brevity penalty.
    bp: f64,
    sys_len: usize,
    ref_len: usize,
    /// sacreBLEU's signature.
    signature: String,
    /// sacreBLEU's line.
    line: String,
}

#[pymethods]
impl BleuScore {
    fn __str__(&self) -> String {
        self.line.clone()
    }

    fn __repr__(&self) -> String {
        format!("BleuScore({})", self.line)
    }

    fn __float__(&self) -> f64 {
        self.score
    }
}

/// A corpus chrF score (sacreBLEU's `CHRFScore`); `str()` is sacreBLEU's line.
#[pyclass(module = "transformer", frozen, get_all)]
pub(crate) struct ChrfScore {
    /// chrF in [0, 100].
    score: f64,
    /// `chrF2`, `chrF2++`, …
    name: String,
    signature: String,
    /// sacreBLEU's line.
    line: String,
}

#[pymethods]
impl ChrfScore {
    fn __str__(&self) -> String {
        self.line.clone()
    }

    fn __repr__(&self) -> String {
        format!("ChrfScore({})", self.line)
    }

    fn __float__(&self) -> f64 {
        self.score
    }
}

/// EVALB's summary of test trees against gold trees (all sentences); `report` is EVALB's whole
/// output, as `transformer parse-eval` prints it.
#[pyclass(module = "transformer", frozen, get_all)]
pub(crate) struct EvalbScore {
    /// Bracketing FMeasure (NaN where EVALB prints -nan).
    f1: f64,
    recall: f64,
    precision: f64,
    complete_match: f64,
    tagging_accuracy: f64,
    sentences: usize,
    error_sentences: usize,
    /// EVALB's report, every sentence and both summaries.
    report: String,
}

#[pymethods]
impl EvalbScore {
    fn __repr__(&self) -> String {
        format!(
            "EvalbScore(f1={:.2}, recall={:.2}, precision={:.2}, sentences={}, error_sentences={})",
            self.f1, self.recall, self.precision, self.sentences, self.error_sentences
        )
    }
}

/// References as sacreBLEU takes them: a list of reference streams, each line-aligned with the
/// hypotheses; one stream may be given as a plain list of strings.
fn streams(references: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<String>>> {
    if let Ok(one) = references.extract::<Vec<String>>() {
        return Ok(vec![one]);
    }
    references.extract::<Vec<Vec<String>>>().map_err(|_| {
        PyValueError::new_err("references must be a list of strings, or a list of such lists (one per reference)")
    })
}

/// Corpus BLEU, sacreBLEU's defaults (`corpus_bleu(hypotheses, [references])`).
#[pyfunction]
#[pyo3(signature = (hypotheses, references, *, tokenize="13a", lowercase=false, smooth_method="exp",
                    smooth_value=None))]
fn bleu(
    hypotheses: Vec<String>,
    references: Bound<'_, PyAny>,
    tokenize: &str,
    lowercase: bool,
    smooth_method: &str,
    smooth_value: Option<f64>,
) -> PyResult<BleuScore> {
    let tokenizer = Tokenizer::from_name(tokenize)
        .ok_or_else(|| PyValueError::new_err(format!("tokenize={tokenize:?}: use 13a, intl, char or none")))?;
    let smooth = Smooth::from_name(smooth_method, smooth_value).ok_or_else(|| {
        PyValueError::new_err(format!("smooth_method={smooth_method:?}: use one of {}", Smooth::NAMES.join(", ")))
    })?;
    let cfg = BleuConfig { tokenizer, lowercase, smooth, ..BleuConfig::default() };
    let s = corpus_bleu(&hypotheses, &streams(&references)?, &cfg).map_err(py_err)?;
    Ok(BleuScore {
        line: s.line(),
        score: s.score,
        counts: s.correct.to_vec(),
        totals: s.total.to_vec(),
        precisions: s.precisions.to_vec(),
        bp: s.bp,
        sys_len: s.sys_len,
        ref_len: s.ref_len,
        signature: s.signature,
    })
}

/// Corpus chrF, sacreBLEU's defaults (chrF2; `word_order=2` for chrF++).
#[pyfunction]
#[pyo3(signature = (hypotheses, references, *, char_order=6, word_order=0, beta=2, lowercase=false,
                    whitespace=false, eps_smoothing=false))]
#[allow(clippy::too_many_arguments)]
fn chrf(
    hypotheses: Vec<String>,
    references: Bound<'_, PyAny>,
    char_order: usize,
    word_order: usize,
    beta: u32,
    lowercase: bool,
    whitespace: bool,
    eps_smoothing: bool,
) -> PyResult<ChrfScore> {
    let cfg = ChrfConfig { char_order, word_order, beta, lowercase, whitespace, eps_smoothing };
    let s = corpus_chrf(&hypotheses, &streams(&references)?, &cfg).map_err(py_err)?;
    Ok(ChrfScore { line: s.line(), score: s.score, name: s.name, signature: s.signature })
}

/// EVALB (COLLINS.prm) of test trees against gold trees, one bracketed tree each, line-aligned.
#[pyfunction]
fn evalb(gold: Vec<String>, test: Vec<String>) -> PyResult<EvalbScore> {
    let report = evalb_score(&gold, &test, &Params::collins()).map_err(py_err)?;
    let mut text = Vec::new();
    report.write_evalb(&mut text, false).map_err(|e| PyValueError::new_err(format!("writing the report: {e}")))?;
    let all = &report.all;
    Ok(EvalbScore {
        f1: all.fmeasure,
        recall: all.recall,
        precision: all.precision,
        complete_match: all.complete_match,
        tagging_accuracy: all.tagging_accuracy,
        sentences: all.sentences,
        error_sentences: all.error_sentences,
        report: String::from_utf8_lossy(&text).into_owned(),
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<BleuScore>()?;
    m.add_class::<ChrfScore>()?;
    m.add_class::<EvalbScore>()?;
    m.add_function(wrap_pyfunction!(bleu, m)?)?;
    m.add_function(wrap_pyfunction!(chrf, m)?)?;
    m.add_function(wrap_pyfunction!(evalb, m)?)?;
    Ok(())
}
