//! `translate_iterable` and `score_iterable`: an iterator that feeds the batch methods.

use crate::translator::Translator;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyList};
use std::collections::VecDeque;

/// The iterator `translate_iterable` and `score_iterable` return: it reads `max_batch_size`
/// items (or tokens) from the inputs, calls the batch method on them and yields its results.
#[pyclass(module = "transformer")]
pub(crate) struct Results {
    translator: Py<Translator>,
    method: &'static str,
    inputs: Vec<Py<PyIterator>>,
    max_batch_size: usize,
    by_tokens: bool,
    kwargs: Option<Py<PyDict>>,
    ready: VecDeque<Py<PyAny>>,
    exhausted: bool,
}

impl Results {
    pub(crate) fn new(
        translator: Bound<'_, Translator>,
        method: &'static str,
        inputs: Vec<Bound<'_, PyIterator>>,
        max_batch_size: usize,
        batch_type: &str,
        kwargs: Option<Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let by_tokens = match batch_type {
            "examples" => false,
            "tokens" => true,
            other => {
                return Err(PyValueError::new_err(format!("batch_type {other:?}: use \"examples\" or \"tokens\"")))
            }
        };
        Ok(Results {
            translator: translator.unbind(),
            method,
            inputs: inputs.into_iter().map(Bound::unbind).collect(),
            max_batch_size: max_batch_size.max(1),
            by_tokens,
            kwargs: kwargs.map(Bound::unbind),
            ready: VecDeque::new(),
            exhausted: false,
        })
    }
}

#[pymethods]
impl Results {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if self.ready.is_empty() && !self.exhausted {
            let mut columns: Vec<Vec<Py<PyAny>>> = self.inputs.iter().map(|_| Vec::new()).collect();
            let mut size = 0;
            while size < self.max_batch_size {
                let mut row = Vec::with_capacity(self.inputs.len());
                for it in &self.inputs {
                    match it.bind(py).clone().next() {
                        Some(item) => row.push(item?.unbind()),
                        None => break,
                    }
                }
                if row.len() < self.inputs.len() {
                    if !row.is_empty() {
                        return Err(PyValueError::new_err("the source and target iterables have different lengths"));
                    }
                    self.exhausted = true;
                    break;
                }
                size += if self.by_tokens { row[0].bind(py).len()?.max(1) } else { 1 };
                for (c, item) in columns.iter_mut().zip(row) {
                    c.push(item);
                }
            }
            if !columns[0].is_empty() {
                let args: Vec<Bound<'_, PyList>> =
                    columns.into_iter().map(|c| PyList::new(py, c)).collect::<PyResult<_>>()?;
                let args = pyo3::types::PyTuple::new(py, args)?;
                let out = self.translator.bind(py).call_method(
                    self.method,
                    args,
                    self.kwargs.as_ref().map(|k| k.bind(py)),
                )?;
                for r in out.try_iter()? {
                    self.ready.push_back(r?.unbind());
                }
            }
        }
        Ok(self.ready.pop_front())
    }
}
