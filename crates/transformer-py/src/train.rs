//! `transformer.train`: the run `transformer train --config FILE --set KEY=VALUE … [--init CKPT]`
//! runs, from Python: the library's [`transformer::train::run::run`], the same run directory (a
//! second call resumes it), its events told to a callback. Ctrl-C stops it before the next update
//! as its time limit would (a checkpoint written, resumable) and raises `KeyboardInterrupt`.

use crate::interrupt::interruptible_telling;
use pyo3::exceptions::{PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
use std::path::PathBuf;
use transformer::train::run::{run, RunConfig};

/// A Python value as the TOML value an override (`--set key=value`) gives.
fn toml_value(v: &Bound<'_, PyAny>) -> PyResult<String> {
    if v.is_instance_of::<PyBool>() {
        return Ok(if v.extract::<bool>()? { "true" } else { "false" }.to_string());
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(v.extract::<i64>()?.to_string());
    }
    if v.is_instance_of::<PyFloat>() {
        let x = v.extract::<f64>()?;
        // TOML's floats need a point or an exponent.
        return Ok(if x.fract() == 0.0 && x.is_finite() { format!("{x:.1}") } else { format!("{x:e}") });
    }
    if v.is_instance_of::<PyString>() {
        // A JSON string is a TOML basic string: the value stays a string whatever it holds.
        return serde_json::to_string(&v.extract::<String>()?).map_err(|e| PyValueError::new_err(e.to_string()));
    }
    if let Ok(list) = v.cast::<PyList>() {
        let items = list.iter().map(|x| toml_value(&x)).collect::<PyResult<Vec<_>>>()?;
        return Ok(format!("[{}]", items.join(", ")));
    }
    Err(PyValueError::new_err(format!("override value {v}: give a bool, an int, a float, a string or a list of them")))
}

/// Trains as `transformer train --config config` does, with `overrides` (`{"train.max_steps":
/// 100}` is `--set train.max_steps=100`) and `init` (`--init`: start from a checkpoint's
/// parameters). `on_event(dict)` hears every update (`kind` "update": step, epoch, loss, lr,
/// tokens_per_s, elapsed_s, valid_perplexity), validation ("validation": the metrics record,
/// its own kind as `record`), checkpoint ("checkpoint": step, path), message ("log",
/// "warning") and stage ("stage"); an exception it raises stops the run after its update (a
/// checkpoint written) and is raised here. Returns what the CLI prints at the end.
#[pyfunction]
#[pyo3(signature = (config, overrides=None, init=None, on_event=None))]
pub(crate) fn train(
    py: Python<'_>,
    config: PathBuf,
    overrides: Option<Bound<'_, PyDict>>,
    init: Option<PathBuf>,
    on_event: Option<Py<PyAny>>,
) -> PyResult<Py<PyDict>> {
    let text = std::fs::read_to_string(&config)
        .map_err(|e| PyFileNotFoundError::new_err(format!("{}: {e}", config.display())))?;
    let mut sets = Vec::new();
    if let Some(o) = &overrides {
        for (k, v) in o.iter() {
            sets.push(format!("{}={}", k.extract::<String>()?, toml_value(&v)?));
        }
    }
    let mut cfg = RunConfig::from_toml(&text, &config.display().to_string(), &sets).map_err(crate::py_err)?;
    if let Some(p) = init {
        cfg.train.init = Some(p);
    }
    let summary = interruptible_telling(py, on_event, move |events| run(&cfg, events))?;
    let d = PyDict::new(py);
    d.set_item("step", summary.state.step)?;
    d.set_item("epoch", summary.state.epoch + 1)?;
    d.set_item("stopped", summary.stopped.to_string())?;
    d.set_item("elapsed_s", summary.state.elapsed_s)?;
    d.set_item("valid_perplexity", summary.valid.perplexity())?;
    d.set_item("checkpoint", summary.checkpoint.display().to_string())?;
    Ok(d.unbind())
}
