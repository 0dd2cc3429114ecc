//! `import transformer`: CTranslate2's `Translator`, argument for argument, over this project's
//! library. A thin layer: the model, its tokenizer and the search are the library's
//! [`transformer::Translator`]; this file turns Python arguments into its options, token strings
//! into ids and back, and our errors into Python exceptions. Every call that decodes or scores
//! releases the GIL.
//!
//! CTranslate2's arguments this engine cannot honour yet (sampling, prefixes, repetition
//! penalties, attention, …) are accepted at their defaults and refused with a `ValueError`
//! otherwise, naming the argument: nothing is silently ignored. docs/python.md lists them.
//!
//! Beyond CTranslate2's API, as pymarian's: `Translator.translate` on text, a `Parser`, and the
//! metrics `bleu`, `chrf` and `evalb`, each the library's own function.

mod engine;
mod interrupt;
mod iterate;
mod metrics;
mod options;
mod parser;
mod results;
mod train;
mod translator;

use pyo3::exceptions::{PyFileNotFoundError, PyKeyboardInterrupt, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use results::{AsyncScoringResult, AsyncTranslationResult, ExecutionStats, ScoringResult, TranslationResult};
use std::path::PathBuf;
use transformer::{Error, Precision};
use translator::Translator;

/// Our error as the Python exception a caller expects: a missing file `FileNotFoundError`, another
/// failed read or write `OSError`, a failed decode `RuntimeError`, an interrupted call
/// `KeyboardInterrupt`, and bad arguments, inputs and files (what the engine cannot do among
/// them) `ValueError`, each with the library's message.
pub(crate) fn py_err(e: Error) -> PyErr {
    match &e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(e.to_string())
        }
        Error::Io { .. } => PyOSError::new_err(e.to_string()),
        Error::Decode(_) => PyRuntimeError::new_err(e.to_string()),
        Error::Interrupted { .. } => PyKeyboardInterrupt::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// Whether `model_path` is a model directory `Translator` loads.
#[pyfunction]
fn contains_model(model_path: PathBuf) -> bool {
    transformer::decode::contains_model(&model_path)
}

/// The (checkpoint, tokenizer) files `Translator` reads from a model directory, as strings; a
/// directory without them is a `ValueError` saying what it lacks (the library's `model_files`).
#[pyfunction]
fn model_files(model_path: PathBuf) -> PyResult<(String, String)> {
    let (c, t) = transformer::decode::model_files(&model_path).map_err(py_err)?;
    Ok((c.display().to_string(), t.display().to_string()))
}

/// The compute types this CPU runs, as CTranslate2 names them.
#[pyfunction]
#[pyo3(signature = (device, device_index=0))]
fn get_supported_compute_types(device: &str, device_index: i64) -> PyResult<std::collections::BTreeSet<String>> {
    if device != "cpu" || device_index != 0 {
        return Err(PyValueError::new_err(format!(
            "device {device:?} index {device_index}: transformer decodes on the CPU (device \"cpu\", index 0) only"
        )));
    }
    let mut names = std::collections::BTreeSet::new();
    for p in Precision::supported() {
        let n: &[&str] = match p {
            Precision::F32 => &["float32"],
            Precision::Bf16 => &["bfloat16", "int8_bfloat16"],
            Precision::Int8 => &["int8", "int8_float32"],
        };
        names.extend(n.iter().map(|s| s.to_string()));
    }
    Ok(names)
}

/// The seed of the samples a later call draws (`sampling_topk` ≠ 1); 0 until set. The same seed
/// gives the same samples on any batching and thread count.
#[pyfunction]
fn set_random_seed(seed: u64) {
    SEED.store(seed, std::sync::atomic::Ordering::Relaxed);
}

static SEED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The seed [`set_random_seed`] set.
pub(crate) fn random_seed() -> u64 {
    SEED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Imports a Marian / OPUS-MT model (a Hugging Face or native directory) into `output_dir`
/// (model.safetensors and tokenizer.json), the directory `Translator` loads; the library's
/// `import marian` (an addition to CTranslate2's API, whose converters do this job).
#[pyfunction]
fn import_marian(py: Python<'_>, model_dir: PathBuf, output_dir: PathBuf) -> PyResult<()> {
    interrupt::interruptible(py, move |_| {
        let imported = transformer::import::marian::import(&model_dir)?;
        transformer::import::marian::write(&imported, &output_dir).map(|_| ())
    })
}

/// Panics inside a call, as a bug would: for the test that a panic reaches Python as a
/// `RuntimeError` and leaves the process usable. Not part of the API.
#[pyfunction]
fn _panic_inside_a_call(py: Python<'_>, message: String) -> PyResult<()> {
    interrupt::interruptible(py, move |_| -> transformer::Result<()> { panic!("{message}") })
}

#[pymodule]
#[pyo3(name = "transformer")]
fn transformer_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Translator>()?;
    m.add_class::<TranslationResult>()?;
    m.add_class::<ScoringResult>()?;
    m.add_class::<AsyncTranslationResult>()?;
    m.add_class::<AsyncScoringResult>()?;
    m.add_class::<ExecutionStats>()?;
    m.add_function(wrap_pyfunction!(contains_model, m)?)?;
    m.add_function(wrap_pyfunction!(model_files, m)?)?;
    m.add_function(wrap_pyfunction!(get_supported_compute_types, m)?)?;
    m.add_function(wrap_pyfunction!(set_random_seed, m)?)?;
    m.add_function(wrap_pyfunction!(import_marian, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_inside_a_call, m)?)?;
    m.add_class::<parser::Parser>()?;
    metrics::register(m)?;
    m.add_function(wrap_pyfunction!(train::train, m)?)?;
    Ok(())
}
