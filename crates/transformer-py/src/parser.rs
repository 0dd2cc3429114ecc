//! `transformer.Parser`: a parsing model (what `transformer quickstart --task parsing` or a
//! `configs/ptb-parse.toml` run writes) parsing sentences into bracketed trees, as
//! `transformer parse` does: the library's [`transformer::Translator::parse`].

use crate::engine::{check_device, Engine};
use crate::interrupt::interruptible;
use crate::options::{batch_limits, compute_type_name};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;
use transformer::data::trees;
use transformer::decode::ParseOptions;
use transformer::Task;

/// A constituency parser loaded once: `parse(["The board met ."])` gives one bracketed tree a
/// sentence, over exactly its words.
#[pyclass(module = "transformer", frozen)]
pub(crate) struct Parser {
    engine: Arc<Engine>,
    #[pyo3(get)]
    compute_type: String,
}

#[pymethods]
impl Parser {
    /// Loads the model directory `model_path` (a run directory with best.safetensors and
    /// vocab.json, or the quick start's output directory) on the CPU at `compute_type`.
    #[new]
    #[pyo3(signature = (model_path, device="cpu", *, compute_type=None, inter_threads=1, intra_threads=0))]
    fn new(
        py: Python<'_>,
        model_path: PathBuf,
        device: &str,
        compute_type: Option<Bound<'_, PyAny>>,
        inter_threads: usize,
        intra_threads: usize,
    ) -> PyResult<Self> {
        check_device(device)?;
        let compute_type = match &compute_type {
            Some(c) => compute_type_name(c)?,
            None => "default".to_string(),
        };
        let engine = Engine::open(py, model_path, &compute_type, Task::Parsing, inter_threads, intra_threads)?;
        Ok(Parser { engine: Arc::new(engine), compute_type })
    }

    /// Parses sentences into bracketed trees, one a sentence, in order. The sentences are words
    /// separated by spaces, tokenised as the treebank's; `tokenize=True` tokenises plain text
    /// first (the Penn Treebank's rules, as `transformer parse --tokenize`). Defaults are §6.3's
    /// (beam 21, α 0.3, input length + 300) with the search constrained to valid trees (a named
    /// departure; `constrained=False` is the paper's search, its outputs repaired). A sentence
    /// longer than the model's positions is a `ValueError` unless `skip_long=True` (then `(TOP)`).
    #[pyo3(signature = (sentences, *, beam_size=21, length_penalty=0.3, constrained=true, tokenize=false,
                        skip_long=false, max_batch_size=0, batch_type="examples"))]
    #[allow(clippy::too_many_arguments)]
    fn parse(
        &self,
        py: Python<'_>,
        sentences: Vec<String>,
        beam_size: usize,
        length_penalty: f64,
        constrained: bool,
        tokenize: bool,
        skip_long: bool,
        max_batch_size: usize,
        batch_type: &str,
    ) -> PyResult<Vec<String>> {
        if beam_size == 0 {
            return Err(PyValueError::new_err("beam_size must be at least 1"));
        }
        let mut opts = ParseOptions { constrained, skip_long, ..ParseOptions::default() };
        opts.decode.search.beam = beam_size;
        opts.decode.search.alpha = length_penalty;
        batch_limits(&mut opts.decode, max_batch_size, batch_type)?;
        opts.decode = self.engine.options(&opts.decode);
        let lines: Vec<String> =
            if tokenize { sentences.iter().map(|s| trees::ptb_tokenize(s).join(" ")).collect() } else { sentences };
        let engine = self.engine.clone();
        interruptible(py, move |events| {
            let (parses, _) = engine.pool.install(|| engine.translator.parse(&lines, &opts, events))?;
            Ok(parses.iter().map(|p| p.tree.to_bracketed()).collect())
        })
    }

    fn __repr__(&self) -> String {
        format!("Parser(device=\"cpu\", compute_type={:?})", self.compute_type)
    }
}
