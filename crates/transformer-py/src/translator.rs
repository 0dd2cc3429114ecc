//! The Python `Translator`: CTranslate2's constructor and methods, each a thin call into the
//! session ([`Engine`]) with the GIL released.

use crate::engine::{check_device, scoring_job, spawn, translation_job, Engine, Translations};
use crate::interrupt::interruptible;
use crate::iterate::Results;
use crate::options::{
    batch_limits, compute_type_name, device_indices, refuse_returns, refuse_same_file, refuse_unless, search_options,
    with_phrases, Returns,
};
use crate::py_err;
use crate::results::{
    AsyncScoringResult, AsyncTranslationResult, ExecutionStats, Outcome, ScoringResult, TranslationResult,
};
use pyo3::exceptions::{PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::Arc;
use transformer::data::tokenizer::Side;
use transformer::decode::translator::DecodeOptions;
use transformer::decode::Guide;
use transformer::Task;

/// CTranslate2's `ctranslate2.Translator`: a model directory loaded once for translating and
/// scoring batches of token strings.
#[pyclass(module = "transformer", frozen)]
pub(crate) struct Translator {
    engine: Arc<Engine>,
    #[pyo3(get)]
    device: String,
    #[pyo3(get)]
    device_index: Vec<i64>,
    #[pyo3(get)]
    compute_type: String,
    #[pyo3(get)]
    num_translators: usize,
}

impl Translator {
    /// Decodes source token strings with the GIL released: each sentence's hypotheses as token
    /// strings and their scores.
    /// The guides of `translate`'s `target_prefix` and `constraints` for `n` lines (`one`: the
    /// text was a string, and each argument is that line's entry, not a list of them).
    fn text_guides(
        &self,
        n: usize,
        one: bool,
        target_prefix: Option<Bound<'_, PyAny>>,
        constraints: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Guide>> {
        let bad = |name: &str, form: &str| PyValueError::new_err(format!("{name} must be {form}"));
        let prefixes: Option<Vec<Option<String>>> = match (target_prefix, one) {
            (None, _) => None,
            (Some(p), true) => Some(vec![p.extract().map_err(|_| bad("target_prefix", "a string or None"))?]),
            (Some(p), false) => {
                Some(p.extract().map_err(|_| bad("target_prefix", "a list of strings or None, one a line"))?)
            }
        };
        let phrases: Option<Vec<Vec<String>>> = match (constraints, one) {
            (None, _) => None,
            (Some(c), true) => Some(vec![c.extract().map_err(|_| bad("constraints", "a list of strings"))?]),
            (Some(c), false) => {
                Some(c.extract().map_err(|_| bad("constraints", "a list of lists of strings, one a line"))?)
            }
        };
        for (name, len) in
            [("target_prefix", prefixes.as_ref().map(Vec::len)), ("constraints", phrases.as_ref().map(Vec::len))]
        {
            if let Some(len) = len.filter(|&l| l != n) {
                return Err(PyValueError::new_err(format!("{name} has {len} entries for {n} lines: give one a line")));
            }
        }
        if prefixes.is_none() && phrases.is_none() {
            return Ok(Vec::new());
        }
        let t = &self.engine.translator;
        (0..n)
            .map(|i| {
                let prefix = prefixes.as_ref().and_then(|p| p[i].as_deref());
                let none = Vec::new();
                t.encode_guide(prefix, phrases.as_ref().map_or(&none, |p| &p[i])).map_err(py_err)
            })
            .collect()
    }

    fn run_translation(
        &self,
        py: Python<'_>,
        source: &[Vec<String>],
        guides: Vec<Guide>,
        opts: &DecodeOptions,
        max_input_length: usize,
        returns: &Returns,
    ) -> PyResult<Translations> {
        let engine = self.engine.clone();
        let source = source.to_vec();
        let opts = *opts;
        let returns = *returns;
        interruptible(py, move |events| {
            translation_job(&engine, &source, &guides, &opts, max_input_length, returns, events)
        })
    }
}

#[pymethods]
impl Translator {
    /// Loads the model directory `model_path` (what `transformer import marian` writes:
    /// model.safetensors and tokenizer.json; or a training run's best.safetensors and
    /// vocab.json) on the CPU at `compute_type`.
    #[new]
    #[pyo3(signature = (model_path, device="cpu", *, device_index=None, compute_type=None, inter_threads=1,
                        intra_threads=0, max_queued_batches=0, flash_attention=false, tensor_parallel=false,
                        files=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model_path: PathBuf,
        device: &str,
        device_index: Option<Bound<'_, PyAny>>,
        compute_type: Option<Bound<'_, PyAny>>,
        inter_threads: usize,
        intra_threads: usize,
        max_queued_batches: i64,
        flash_attention: bool,
        tensor_parallel: bool,
        files: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        check_device(device)?;
        let device_index = match &device_index {
            Some(d) => device_indices(d)?,
            None => vec![0],
        };
        let compute_type = match &compute_type {
            Some(c) => compute_type_name(c)?,
            None => "default".to_string(),
        };
        // Calls decode when made (an asynchronous one on a thread of its own): there is no queue
        // to bound, so any max_queued_batches is accepted. Flash attention and tensor
        // parallelism have no counterpart on one CPU: their defaults only.
        let _ = max_queued_batches;
        refuse_unless("flash_attention", flash_attention, false)?;
        refuse_unless("tensor_parallel", tensor_parallel, false)?;
        refuse_unless("files", files.is_some(), false)?;
        let ct = compute_type.clone();
        let engine = Engine::open(py, model_path, &ct, Task::Translation, inter_threads, intra_threads)?;
        Ok(Translator {
            engine: Arc::new(engine),
            device: "cpu".to_string(),
            device_index,
            compute_type,
            num_translators: inter_threads,
        })
    }

    /// Translates a batch of token lists; CTranslate2's `translate_batch`.
    #[pyo3(signature = (source, target_prefix=None, *, max_batch_size=0, batch_type="examples", asynchronous=false,
                        beam_size=2, patience=1.0, num_hypotheses=1, length_penalty=1.0, coverage_penalty=0.0,
                        repetition_penalty=1.0, no_repeat_ngram_size=0, disable_unk=false, suppress_sequences=None,
                        end_token=None, return_end_token=false, prefix_bias_beta=0.0, max_input_length=1024,
                        max_decoding_length=256, min_decoding_length=1, use_vmap=false, return_scores=false,
                        return_logits_vocab=false, return_attention=false, return_alternatives=false,
                        min_alternative_expansion_prob=0.0, sampling_topk=1, sampling_topp=1.0,
                        sampling_temperature=1.0, replace_unknowns=false, callback=None, constraints=None))]
    #[allow(clippy::too_many_arguments)]
    fn translate_batch(
        &self,
        py: Python<'_>,
        source: Vec<Vec<String>>,
        target_prefix: Option<Vec<Option<Vec<String>>>>,
        max_batch_size: usize,
        batch_type: &str,
        asynchronous: bool,
        beam_size: usize,
        patience: f32,
        num_hypotheses: usize,
        length_penalty: f32,
        coverage_penalty: f32,
        repetition_penalty: f32,
        no_repeat_ngram_size: usize,
        disable_unk: bool,
        suppress_sequences: Option<Vec<Vec<String>>>,
        end_token: Option<Bound<'_, PyAny>>,
        return_end_token: bool,
        prefix_bias_beta: f32,
        max_input_length: usize,
        max_decoding_length: usize,
        min_decoding_length: usize,
        use_vmap: bool,
        return_scores: bool,
        return_logits_vocab: bool,
        return_attention: bool,
        return_alternatives: bool,
        min_alternative_expansion_prob: f32,
        sampling_topk: usize,
        sampling_topp: f32,
        sampling_temperature: f32,
        replace_unknowns: bool,
        callback: Option<Py<PyAny>>,
        constraints: Option<Vec<Vec<Vec<String>>>>,
    ) -> PyResult<Py<PyAny>> {
        // `constraints` (an addition to CTranslate2's API): the phrases each output contains.
        let guides = self.engine.guides(source.len(), &target_prefix, &constraints).map_err(PyValueError::new_err)?;
        refuse_returns(
            return_end_token,
            return_logits_vocab,
            return_alternatives,
            min_alternative_expansion_prob,
            &callback,
        )?;
        let mut opts = search_options(
            beam_size,
            patience,
            num_hypotheses,
            length_penalty,
            coverage_penalty,
            repetition_penalty,
            no_repeat_ngram_size,
            disable_unk,
            &suppress_sequences,
            &end_token,
            prefix_bias_beta,
            max_decoding_length,
            min_decoding_length,
            use_vmap,
            (sampling_topk, sampling_topp, sampling_temperature),
            replace_unknowns,
        )?;
        with_phrases(&mut opts, &guides);
        batch_limits(&mut opts, max_batch_size, batch_type)?;
        let returns = Returns { scores: return_scores, attention: return_attention };
        if asynchronous {
            let (engine, n) = (self.engine.clone(), source.len());
            let job = spawn(move || {
                translation_job(&engine, &source, &guides, &opts, max_input_length, returns, &mut ())
                    .map(Outcome::Translations)
                    .map_err(|e| e.to_string())
            });
            let list: Vec<AsyncTranslationResult> =
                (0..n).map(|index| AsyncTranslationResult { job: job.clone(), index }).collect();
            return Ok(PyList::new(py, list)?.into_any().unbind());
        }
        let t = self.run_translation(py, &source, guides, &opts, max_input_length, &returns)?;
        let mut attention = t.attention.into_iter();
        let list: Vec<TranslationResult> = t
            .tokens
            .into_iter()
            .zip(t.scores)
            .map(|(hypotheses, scores)| TranslationResult {
                hypotheses,
                scores,
                attention: attention.next().unwrap_or_default(),
                logits: Vec::new(),
            })
            .collect();
        Ok(PyList::new(py, list)?.into_any().unbind())
    }

    /// Scores target token lists given source token lists; CTranslate2's `score_batch`.
    #[pyo3(signature = (source, target, *, max_batch_size=0, batch_type="examples", max_input_length=1024, offset=0,
                        asynchronous=false))]
    #[allow(clippy::too_many_arguments)]
    fn score_batch(
        &self,
        py: Python<'_>,
        source: Vec<Vec<String>>,
        target: Vec<Vec<String>>,
        max_batch_size: usize,
        batch_type: &str,
        max_input_length: usize,
        offset: usize,
        asynchronous: bool,
    ) -> PyResult<Py<PyAny>> {
        if source.len() != target.len() {
            return Err(PyValueError::new_err(format!(
                "{} sources but {} targets: give one target per source",
                source.len(),
                target.len()
            )));
        }
        // Scoring batches by its own token budget; the limits are checked for their form only.
        batch_limits(&mut DecodeOptions::default(), max_batch_size, batch_type)?;
        let engine = self.engine.clone();
        if asynchronous {
            let n = source.len();
            let job = spawn(move || {
                scoring_job(&engine, &source, &target, max_input_length, offset)
                    .map(|(t, l)| Outcome::Scores(t, l))
                    .map_err(|e| e.to_string())
            });
            let list: Vec<AsyncScoringResult> =
                (0..n).map(|index| AsyncScoringResult { job: job.clone(), index }).collect();
            return Ok(PyList::new(py, list)?.into_any().unbind());
        }
        let (tokens, log_probs) =
            interruptible(py, move |_| scoring_job(&engine, &source, &target, max_input_length, offset))?;
        let list: Vec<ScoringResult> =
            tokens.into_iter().zip(log_probs).map(|(tokens, log_probs)| ScoringResult { tokens, log_probs }).collect();
        Ok(PyList::new(py, list)?.into_any().unbind())
    }

    /// Translates an iterable of token lists, `max_batch_size` at a time, yielding one result a
    /// source; CTranslate2's `translate_iterable` (other arguments as `translate_batch`'s).
    #[pyo3(signature = (source, target_prefix=None, max_batch_size=32, batch_type="examples", **kwargs))]
    fn translate_iterable(
        slf: Bound<'_, Self>,
        source: Bound<'_, PyAny>,
        target_prefix: Option<Bound<'_, PyAny>>,
        max_batch_size: usize,
        batch_type: &str,
        kwargs: Option<Bound<'_, PyDict>>,
    ) -> PyResult<Results> {
        let mut inputs = vec![source.try_iter()?];
        if let Some(p) = target_prefix {
            inputs.push(p.try_iter()?);
        }
        Results::new(slf, "translate_batch", inputs, max_batch_size, batch_type, kwargs)
    }

    /// Scores an iterable of (source, target) token lists, `max_batch_size` at a time, yielding
    /// one result a pair; CTranslate2's `score_iterable`.
    #[pyo3(signature = (source, target, max_batch_size=64, batch_type="examples", **kwargs))]
    fn score_iterable(
        slf: Bound<'_, Self>,
        source: Bound<'_, PyAny>,
        target: Bound<'_, PyAny>,
        max_batch_size: usize,
        batch_type: &str,
        kwargs: Option<Bound<'_, PyDict>>,
    ) -> PyResult<Results> {
        Results::new(
            slf,
            "score_batch",
            vec![source.try_iter()?, target.try_iter()?],
            max_batch_size,
            batch_type,
            kwargs,
        )
    }

    /// Translates a file of tokenized lines into `output_path` (one line each, the best
    /// hypothesis; `score ||| tokens` with `with_scores`); CTranslate2's `translate_file`.
    #[pyo3(signature = (source_path, output_path, target_path=None, *, max_batch_size=32, read_batch_size=0,
                        batch_type="examples", beam_size=2, patience=1.0, num_hypotheses=1, length_penalty=1.0,
                        coverage_penalty=0.0, repetition_penalty=1.0, no_repeat_ngram_size=0, disable_unk=false,
                        suppress_sequences=None, end_token=None, prefix_bias_beta=0.0, max_input_length=1024,
                        max_decoding_length=256, min_decoding_length=1, use_vmap=false, with_scores=false,
                        sampling_topk=1, sampling_topp=1.0, sampling_temperature=1.0, replace_unknowns=false,
                        source_tokenize_fn=None, target_tokenize_fn=None, target_detokenize_fn=None))]
    #[allow(clippy::too_many_arguments)]
    fn translate_file(
        &self,
        py: Python<'_>,
        source_path: PathBuf,
        output_path: PathBuf,
        target_path: Option<PathBuf>,
        max_batch_size: usize,
        read_batch_size: usize,
        batch_type: &str,
        beam_size: usize,
        patience: f32,
        num_hypotheses: usize,
        length_penalty: f32,
        coverage_penalty: f32,
        repetition_penalty: f32,
        no_repeat_ngram_size: usize,
        disable_unk: bool,
        suppress_sequences: Option<Vec<Vec<String>>>,
        end_token: Option<Bound<'_, PyAny>>,
        prefix_bias_beta: f32,
        max_input_length: usize,
        max_decoding_length: usize,
        min_decoding_length: usize,
        use_vmap: bool,
        with_scores: bool,
        sampling_topk: usize,
        sampling_topp: f32,
        sampling_temperature: f32,
        replace_unknowns: bool,
        source_tokenize_fn: Option<Bound<'_, PyAny>>,
        target_tokenize_fn: Option<Bound<'_, PyAny>>,
        target_detokenize_fn: Option<Bound<'_, PyAny>>,
    ) -> PyResult<ExecutionStats> {
        let _ = read_batch_size;
        refuse_unless("target_path", target_path.is_some(), false)?;
        refuse_unless("target_tokenize_fn", target_tokenize_fn.is_some(), false)?;
        let start = std::time::Instant::now();
        let mut opts = search_options(
            beam_size,
            patience,
            num_hypotheses,
            length_penalty,
            coverage_penalty,
            repetition_penalty,
            no_repeat_ngram_size,
            disable_unk,
            &suppress_sequences,
            &end_token,
            prefix_bias_beta,
            max_decoding_length,
            min_decoding_length,
            use_vmap,
            (sampling_topk, sampling_topp, sampling_temperature),
            replace_unknowns,
        )?;
        batch_limits(&mut opts, max_batch_size, batch_type)?;
        refuse_same_file(&source_path, &output_path)?;
        let text = std::fs::read_to_string(&source_path)
            .map_err(|e| PyFileNotFoundError::new_err(format!("{}: {e}", source_path.display())))?;
        let mut source = Vec::new();
        for line in text.lines() {
            source.push(match &source_tokenize_fn {
                Some(f) => f.call1((line,))?.extract::<Vec<String>>()?,
                None => line.split_whitespace().map(str::to_string).collect(),
            });
        }
        let returns = Returns { scores: true, ..Default::default() };
        let Translations { tokens: hyps, scores, .. } =
            self.run_translation(py, &source, Vec::new(), &opts, max_input_length, &returns)?;
        let mut out = String::new();
        let mut num_tokens = 0;
        for (nbest, scores) in hyps.iter().zip(&scores) {
            for (h, score) in nbest.iter().zip(scores) {
                num_tokens += h.len();
                let line = match &target_detokenize_fn {
                    Some(f) => f.call1((h.clone(),))?.extract::<String>()?,
                    None => h.join(" "),
                };
                if with_scores {
                    out.push_str(&format!("{score:.6} ||| {line}\n"));
                } else {
                    out.push_str(&line);
                    out.push('\n');
                }
            }
        }
        std::fs::write(&output_path, out)
            .map_err(|e| PyFileNotFoundError::new_err(format!("{}: {e}", output_path.display())))?;
        Ok(ExecutionStats {
            num_tokens,
            num_examples: source.len(),
            total_time_in_ms: start.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// Translates text with the model's own tokenizer, as `transformer translate` does (an
    /// addition to CTranslate2's API, as pymarian's `Translator.translate`): a string gives a
    /// string, a list of strings a list; with `num_hypotheses` > 1 each line gives a list of that
    /// many, best first. The options are `translate_batch`'s, at its defaults; `target_prefix`
    /// (text each output starts with) and `constraints` (phrases each output contains) are one
    /// entry for a string and a list of entries, one a line, for a list.
    #[pyo3(signature = (text, *, beam_size=2, patience=1.0, num_hypotheses=1, length_penalty=1.0, repetition_penalty=1.0,
                        no_repeat_ngram_size=0, max_decoding_length=256, min_decoding_length=1, disable_unk=false,
                        sampling_topk=1, sampling_topp=1.0, sampling_temperature=1.0, max_batch_size=0,
                        batch_type="examples", target_prefix=None, constraints=None, use_vmap=false))]
    #[allow(clippy::too_many_arguments)]
    fn translate(
        &self,
        py: Python<'_>,
        text: Bound<'_, PyAny>,
        beam_size: usize,
        patience: f32,
        num_hypotheses: usize,
        length_penalty: f32,
        repetition_penalty: f32,
        no_repeat_ngram_size: usize,
        max_decoding_length: usize,
        min_decoding_length: usize,
        disable_unk: bool,
        sampling_topk: usize,
        sampling_topp: f32,
        sampling_temperature: f32,
        max_batch_size: usize,
        batch_type: &str,
        target_prefix: Option<Bound<'_, PyAny>>,
        constraints: Option<Bound<'_, PyAny>>,
        use_vmap: bool,
    ) -> PyResult<Py<PyAny>> {
        let (lines, one) = match text.extract::<String>() {
            Ok(line) => (vec![line], true),
            Err(_) => (
                text.extract::<Vec<String>>()
                    .map_err(|_| PyValueError::new_err("text must be a string or a list of strings"))?,
                false,
            ),
        };
        let guides = self.text_guides(lines.len(), one, target_prefix, constraints)?;
        let mut opts = search_options(
            beam_size,
            patience,
            num_hypotheses,
            length_penalty,
            0.0,
            repetition_penalty,
            no_repeat_ngram_size,
            disable_unk,
            &None,
            &None,
            0.0,
            max_decoding_length,
            min_decoding_length,
            use_vmap,
            (sampling_topk, sampling_topp, sampling_temperature),
            false,
        )?;
        with_phrases(&mut opts, &guides);
        batch_limits(&mut opts, max_batch_size, batch_type)?;
        let engine = self.engine.clone();
        let out: Vec<Vec<String>> = interruptible(py, move |events| {
            engine.check_vmap(&opts)?;
            let opts = engine.options(&opts);
            let translate = || engine.translator.translate_guided(&lines, &guides, &opts, events);
            let (out, _) = engine.pool.install(translate)?;
            Ok(out.into_iter().map(|n| n.into_iter().map(|t| t.text).collect()).collect())
        })?;
        let nbest = num_hypotheses > 1;
        let items: Vec<Py<PyAny>> = out
            .into_iter()
            .map(|mut n| {
                if nbest {
                    n.into_pyobject(py).map(|o| o.into_any().unbind())
                } else {
                    Ok(n.swap_remove(0).into_pyobject(py)?.into_any().unbind())
                }
            })
            .collect::<PyResult<_>>()?;
        if one {
            return Ok(items.into_iter().next().unwrap_or_else(|| py.None()));
        }
        Ok(PyList::new(py, items)?.into_any().unbind())
    }

    /// The source token strings of a line of text, as this model's own tokenizer cuts it (an
    /// addition to CTranslate2's API, which leaves tokenizing to the caller).
    fn tokenize(&self, text: &str) -> PyResult<Vec<String>> {
        let t = &self.engine.translator;
        let ids = t.encode_source(text).map_err(py_err)?;
        let tok = t.tokenizer();
        Ok(ids
            .iter()
            .filter(|&&id| id != transformer::EOS)
            .map(|&id| tok.piece_of_id(Side::Source, id).unwrap_or_default())
            .collect())
    }

    /// The text of target token strings, as this model's tokenizer joins them.
    fn detokenize(&self, tokens: Vec<String>) -> PyResult<String> {
        let e = &self.engine;
        e.translator.decode_target(&e.target_ids(&tokens)).map_err(py_err)
    }

    /// Always loaded (CTranslate2 can unload to save memory).
    fn model_is_loaded(&self) -> bool {
        true
    }

    fn __repr__(&self) -> String {
        format!("Translator(device={:?}, compute_type={:?})", self.device, self.compute_type)
    }
}
