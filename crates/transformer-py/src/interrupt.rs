//! Long calls that Ctrl-C interrupts and that never panic across the boundary. The work runs on a
//! thread of its own with the GIL released, while the calling thread wakes every 50 ms to let
//! Python run its signal handlers: a `KeyboardInterrupt` (or whatever a handler raises) asks the
//! work to stop after the batch it is on ([`Events::interrupted`]), waits for it, and is raised.
//! A panic in the work is caught and becomes a `RuntimeError`, so the process stays usable.

use crate::py_err;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::any::Any;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use transformer::events::{Events, Update};

/// The events a call's work hears: whether it is to stop and, for a training run, a Python
/// callback told of every update, validation, checkpoint and message (called with the GIL taken
/// for the call; an exception it raises stops the work and is raised in its place).
pub(crate) struct CallEvents {
    stop: Arc<AtomicBool>,
    callback: Option<Py<PyAny>>,
    failed: Option<PyErr>,
}

impl CallEvents {
    /// Calls the callback with the dictionary `fill` makes (its `kind` first).
    fn tell(&mut self, kind: &str, fill: impl FnOnce(&Bound<'_, PyDict>) -> PyResult<()>) {
        let Some(callback) = &self.callback else { return };
        if self.failed.is_some() {
            return;
        }
        let r = Python::attach(|py| -> PyResult<()> {
            let d = PyDict::new(py);
            d.set_item("kind", kind)?;
            fill(&d)?;
            callback.call1(py, (d,)).map(|_| ())
        });
        if let Err(e) = r {
            self.failed = Some(e);
        }
    }
}

impl Events for CallEvents {
    fn log(&mut self, message: &str) {
        self.tell("log", |d| d.set_item("message", message));
    }

    fn warn(&mut self, message: &str) {
        self.tell("warning", |d| d.set_item("message", message));
    }

    fn stage(&mut self, name: &str) {
        self.tell("stage", |d| d.set_item("name", name));
    }

    fn update(&mut self, u: &Update) {
        self.tell("update", |d| {
            d.set_item("step", u.step)?;
            d.set_item("epoch", u.epoch)?;
            d.set_item("loss", u.loss)?;
            d.set_item("lr", u.lr)?;
            d.set_item("tokens_per_s", u.tokens_per_s)?;
            d.set_item("elapsed_s", u.elapsed_s)?;
            d.set_item("valid_perplexity", u.valid_perplexity)
        });
    }

    fn validation(&mut self, record: &serde_json::Value) {
        self.tell("validation", |d| {
            let json = d.py().import("json")?;
            let fields = json.call_method1("loads", (record.to_string(),))?;
            let fields = fields.cast::<PyDict>()?;
            // The record's own kind (valid, valid_f1, valid_f1_average) is its `record`.
            d.set_item("record", fields.get_item("kind")?)?;
            for (k, v) in fields.iter() {
                if k.extract::<String>()? != "kind" {
                    d.set_item(k, v)?;
                }
            }
            Ok(())
        });
    }

    fn checkpoint(&mut self, step: u64, path: &Path) {
        self.tell("checkpoint", |d| {
            d.set_item("step", step)?;
            d.set_item("path", path.display().to_string())
        });
    }

    fn interrupted(&mut self) -> bool {
        self.stop.load(Relaxed) || self.failed.is_some()
    }
}

/// A caught panic's message.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_string());
    format!("internal error in transformer (a bug: please report it): {what}")
}

/// Runs `job` off the GIL, interruptible by Ctrl-C; its error as the Python exception
/// [`py_err`] gives, a panic as a `RuntimeError`.
pub(crate) fn interruptible<T: Send + 'static>(
    py: Python<'_>,
    job: impl FnOnce(&mut CallEvents) -> transformer::Result<T> + Send + 'static,
) -> PyResult<T> {
    interruptible_telling(py, None, job)
}

/// [`interruptible`], with `callback` told of the work's events ([`CallEvents`]).
pub(crate) fn interruptible_telling<T: Send + 'static>(
    py: Python<'_>,
    callback: Option<Py<PyAny>>,
    job: impl FnOnce(&mut CallEvents) -> transformer::Result<T> + Send + 'static,
) -> PyResult<T> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let mut events = CallEvents { stop: stop.clone(), callback, failed: None };
    std::thread::Builder::new()
        .name("transformer-call".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut events)));
            let _ = tx.send((r, events.failed.take()));
        })
        .map_err(|e| PyRuntimeError::new_err(format!("could not start a thread for the call: {e}")))?;
    // A receiver is not Sync: the GIL-free closures borrow it through a lock.
    let rx = Mutex::new(rx);
    let wait = |timeout: Option<Duration>| {
        let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
        match timeout {
            Some(t) => rx.recv_timeout(t),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        }
    };
    loop {
        match py.detach(|| wait(Some(Duration::from_millis(50)))) {
            Ok((_, Some(raised))) => return Err(raised),
            Ok((Ok(r), None)) => return r.map_err(py_err),
            Ok((Err(payload), None)) => return Err(PyRuntimeError::new_err(panic_message(payload.as_ref()))),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(e) = py.check_signals() {
                    stop.store(true, Relaxed);
                    // The work ends after its current batch or update; a translation keeps
                    // nothing, a training run writes its checkpoint first.
                    let _ = py.detach(|| wait(None));
                    return Err(e);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err("the call's thread ended without a result"))
            }
        }
    }
}
