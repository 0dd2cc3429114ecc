//! CTranslate2's arguments as the library's options: the search settings, the batch limits, the
//! device and compute type, and the refusal of what the engine cannot honour yet.

use crate::py_err;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::Path;
use transformer::decode::translator::DecodeOptions;
use transformer::decode::{BeamConfig, Controls, LengthNorm, Sampling, Stop};

/// A CTranslate2 argument this engine does not honour: refused with a `ValueError` naming it
/// unless it has its default.
pub(crate) fn refuse_unless<T: PartialEq + std::fmt::Debug>(name: &str, value: T, default: T) -> PyResult<()> {
    if value == default {
        return Ok(());
    }
    Err(PyValueError::new_err(format!(
        "{name}={value:?} is not supported yet by transformer's search (leave it at {default:?})"
    )))
}

/// How `max_batch_size` counts: sentences or tokens.
pub(crate) fn batch_limits(opts: &mut DecodeOptions, max_batch_size: usize, batch_type: &str) -> PyResult<()> {
    match (batch_type, max_batch_size) {
        ("examples" | "tokens", 0) => {}
        ("examples", n) => opts.max_sentences = n,
        ("tokens", n) => opts.max_tokens = n,
        (other, _) => {
            return Err(PyValueError::new_err(format!("batch_type {other:?}: use \"examples\" or \"tokens\"")))
        }
    }
    Ok(())
}

/// The search settings CTranslate2's arguments ask for, or the error for one this engine cannot
/// honour: CTranslate2's beam search (the beam kept full, `beam_size · patience` hypotheses to
/// finish; beam 1 is greedy search, where patience does not apply), `length_penalty` dividing the
/// log-probability by the output's length (the EOS counted) to that power.
#[allow(clippy::too_many_arguments)]
pub(crate) fn search_options(
    beam_size: usize,
    patience: f32,
    num_hypotheses: usize,
    length_penalty: f32,
    coverage_penalty: f32,
    repetition_penalty: f32,
    no_repeat_ngram_size: usize,
    disable_unk: bool,
    suppress_sequences: &Option<Vec<Vec<String>>>,
    end_token: &Option<Bound<'_, PyAny>>,
    prefix_bias_beta: f32,
    max_decoding_length: usize,
    min_decoding_length: usize,
    use_vmap: bool,
    (sampling_topk, sampling_topp, sampling_temperature): (usize, f32, f32),
    replace_unknowns: bool,
) -> PyResult<DecodeOptions> {
    refuse_unless("coverage_penalty", coverage_penalty, 0.0)?;
    refuse_unless("suppress_sequences", suppress_sequences.as_ref().is_some_and(|s| !s.is_empty()), false)?;
    refuse_unless("end_token", end_token.is_some(), false)?;
    refuse_unless("prefix_bias_beta", prefix_bias_beta, 0.0)?;
    refuse_unless("replace_unknowns", replace_unknowns, false)?;
    if beam_size == 0 || num_hypotheses == 0 {
        return Err(PyValueError::new_err("beam_size and num_hypotheses must be at least 1"));
    }
    // CTranslate2's sampling: sampling_topk 1 is the best token (greedy or beam search), 0 the
    // whole vocabulary, k > 1 the k most likely; with beam_size 1, num_hypotheses samples.
    let sampling = match sampling_topk {
        1 => {
            if sampling_topp != 1.0 {
                return Err(PyValueError::new_err(format!(
                    "sampling_topp={sampling_topp} applies to sampling: set sampling_topk to 0 (all tokens) or above 1"
                )));
            }
            None
        }
        topk => {
            if beam_size != 1 {
                return Err(PyValueError::new_err(format!(
                    "sampling_topk={topk} samples with beam_size=1 (got {beam_size}): num_hypotheses gives that many samples"
                )));
            }
            Some(Sampling { topk, topp: sampling_topp, temperature: sampling_temperature, seed: crate::random_seed() })
        }
    };
    if patience.is_nan() || patience <= 0.0 {
        return Err(PyValueError::new_err(format!("patience={patience}: the patience factor must be > 0")));
    }
    let candidates = if beam_size > 1 { (beam_size as f32 * patience).round() as usize } else { 1 };
    if sampling.is_none() && num_hypotheses > candidates {
        return Err(PyValueError::new_err(format!(
            "num_hypotheses={num_hypotheses} is more than beam_size * patience ({candidates}): raise beam_size or patience"
        )));
    }
    let beam_size = if sampling.is_some() { num_hypotheses } else { beam_size };
    let search = BeamConfig {
        beam: beam_size,
        alpha: f64::from(length_penalty),
        max_len_a: 0.0,
        max_len_b: max_decoding_length,
        nbest: num_hypotheses,
        stop: if beam_size > 1 && sampling.is_none() { Stop::Patience(patience) } else { Stop::Exact },
        length_norm: LengthNorm::Marian,
        suppress_unk: disable_unk,
        controls: Controls { min_len: min_decoding_length, repetition_penalty, no_repeat_ngram: no_repeat_ngram_size },
        sampling,
        // `max_decoding_length` counts steps, and the last one ends every hypothesis as it stands.
        end_at_limit: true,
    };
    search.validate().map_err(py_err)?;
    Ok(DecodeOptions { search, use_shortlist: use_vmap, ..DecodeOptions::default() })
}

/// Phrases each output must contain (`constraints`, an addition to CTranslate2's API) share the
/// beam by dynamic beam allocation (fairseq's), which ends on the exact stop rather than
/// CTranslate2's patience: the search for guides that hold phrases.
pub(crate) fn with_phrases(opts: &mut DecodeOptions, guides: &[transformer::decode::Guide]) {
    if guides.iter().any(|g| !g.phrases.is_empty()) {
        opts.search.stop = Stop::Exact;
    }
}

/// The arguments of a translation that are not search settings.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Returns {
    pub(crate) scores: bool,
    pub(crate) attention: bool,
}

pub(crate) fn refuse_returns(
    return_end_token: bool,
    return_logits_vocab: bool,
    return_alternatives: bool,
    min_alternative_expansion_prob: f32,
    callback: &Option<Py<PyAny>>,
) -> PyResult<()> {
    refuse_unless("return_end_token", return_end_token, false)?;
    refuse_unless("return_logits_vocab", return_logits_vocab, false)?;
    refuse_unless("return_alternatives", return_alternatives, false)?;
    refuse_unless("min_alternative_expansion_prob", min_alternative_expansion_prob, 0.0)?;
    refuse_unless("callback", callback.is_some(), false)
}

/// `device_index` as CTranslate2 takes it: one index or a list; this engine has device 0 only.
pub(crate) fn device_indices(device_index: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    let idx: Vec<i64> = match device_index.extract::<i64>() {
        Ok(i) => vec![i],
        Err(_) => device_index.extract::<Vec<i64>>()?,
    };
    if idx.is_empty() || idx.iter().any(|&i| i != 0) {
        return Err(PyValueError::new_err(format!("device_index={idx:?}: the CPU is device 0, the only one")));
    }
    Ok(idx)
}

/// `compute_type` as CTranslate2 takes it: a name, or a dictionary from device name to name.
pub(crate) fn compute_type_name(compute_type: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(name) = compute_type.extract::<String>() {
        return Ok(name);
    }
    let d = compute_type.cast::<PyDict>().map_err(|_| {
        PyValueError::new_err("compute_type must be a string or a dictionary from device name to compute type")
    })?;
    match d.get_item("cpu")? {
        Some(v) => v.extract::<String>(),
        None => Ok("default".to_string()),
    }
}

/// An output never overwrites an input.
pub(crate) fn refuse_same_file(input: &Path, output: &Path) -> PyResult<()> {
    let same = match (std::fs::canonicalize(input), std::fs::canonicalize(output)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(PyValueError::new_err(format!(
            "output_path {} is the source file: give another path",
            output.display()
        )));
    }
    Ok(())
}
