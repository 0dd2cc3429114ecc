//! The session behind a Python `Translator`: the library's translator, the threads it decodes
//! on, and the jobs that turn token strings into ids, decode or score, and back.

use crate::interrupt::interruptible;
use crate::options::Returns;
use crate::results::{Outcome, Shared};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use transformer::data::tokenizer::Side;
use transformer::decode::translator::DecodeOptions;
use transformer::decode::{AlignmentKind, AlignmentOptions, Guide, Hypothesis};
use transformer::events::Events;
use transformer::Task;

/// Per sentence, its hypotheses as token strings, their scores and their attention.
#[derive(Clone, Debug, Default)]
pub(crate) struct Translations {
    /// Per sentence, its hypotheses as target token strings.
    pub(crate) tokens: Vec<Vec<Vec<String>>>,
    /// Their scores, with `return_scores`.
    pub(crate) scores: Vec<Vec<f64>>,
    /// Their attention over the source tokens (one row a hypothesis token), with `return_attention`.
    pub(crate) attention: Vec<Vec<Vec<Vec<f32>>>>,
}
/// Per pair, its scored target tokens and their log-probabilities.
pub(crate) type Scores = (Vec<Vec<String>>, Vec<Vec<f32>>);

/// A session: the library's translator and the threads it decodes on.
pub(crate) struct Engine {
    pub(crate) translator: transformer::Translator,
    /// `intra_threads` × `inter_threads` threads (all cores for `intra_threads=0`).
    pub(crate) pool: rayon::ThreadPool,
    /// Batches decoded at once (`inter_threads`).
    pub(crate) workers: usize,
}

/// CTranslate2's `device`: the CPU (or `auto`, which is the CPU here).
pub(crate) fn check_device(device: &str) -> PyResult<()> {
    match device {
        "cpu" | "auto" => Ok(()),
        "cuda" => {
            Err(PyValueError::new_err("device=\"cuda\": transformer decodes on the CPU only; use device=\"cpu\""))
        }
        other => Err(PyValueError::new_err(format!("device {other:?}: use \"cpu\""))),
    }
}

impl Engine {
    /// Loads the model directory `model_path` for `task` at CTranslate2's `compute_type`, on
    /// `intra_threads` × `inter_threads` threads (all cores for `intra_threads=0`), with the
    /// GIL released.
    pub(crate) fn open(
        py: Python<'_>,
        model_path: PathBuf,
        compute_type: &str,
        task: Task,
        inter_threads: usize,
        intra_threads: usize,
    ) -> PyResult<Engine> {
        if inter_threads == 0 {
            return Err(PyValueError::new_err("inter_threads must be at least 1"));
        }
        let threads = match intra_threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n * inter_threads,
        };
        let ct = compute_type.to_string();
        let translator = interruptible(py, move |_| transformer::Translator::load_dir_as(&model_path, &ct, task))?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| PyRuntimeError::new_err(format!("could not start {threads} threads: {e}")))?;
        Ok(Engine { translator, pool, workers: inter_threads })
    }

    pub(crate) fn source_ids(&self, tokens: &[String], max_input_length: usize) -> Vec<u32> {
        let mut ids = self.translator.tokenizer().source_ids_of_pieces(tokens);
        if max_input_length > 0 && ids.len() > max_input_length {
            // CTranslate2 truncates the input after max_input_length tokens.
            ids.truncate(max_input_length);
        }
        ids
    }

    pub(crate) fn target_ids(&self, tokens: &[String]) -> Vec<u32> {
        let t = self.translator.tokenizer();
        tokens.iter().map(|p| t.id_of_piece(Side::Target, p).unwrap_or(transformer::UNK)).collect()
    }

    pub(crate) fn target_pieces(&self, ids: &[u32]) -> Vec<String> {
        let t = self.translator.tokenizer();
        ids.iter().map(|&id| t.piece_of_id(Side::Target, id).unwrap_or_default()).collect()
    }

    pub(crate) fn translate(
        &self,
        srcs: &[Vec<u32>],
        guides: &[Guide],
        opts: &DecodeOptions,
        events: &mut (dyn Events + Send),
    ) -> transformer::Result<Vec<Vec<Hypothesis>>> {
        self.check_vmap(opts)?;
        let opts = self.options(opts);
        self.pool.install(|| self.translator.translate_ids_guided(srcs, guides, &opts, events)).map(|(h, _)| h)
    }

    /// `use_vmap=True` needs the model directory's shortlist: without one, the error says where it goes.
    pub(crate) fn check_vmap(&self, opts: &DecodeOptions) -> transformer::Result<()> {
        if opts.use_shortlist && self.translator.shortlist().is_none() {
            return Err(transformer::Error::Config(format!(
                "use_vmap=True decodes over a vocabulary shortlist, and this model has none: write one into its \
                 directory as {} (`transformer shortlist ... --output DIR/{}`)",
                transformer::decode::SHORTLIST_NAME,
                transformer::decode::SHORTLIST_NAME
            )));
        }
        Ok(())
    }

    /// The guides of `target_prefix` and `constraints` (target token strings; each `None`, or
    /// one entry a source of `n`): none when neither is given.
    pub(crate) fn guides(
        &self,
        n: usize,
        target_prefix: &Option<Vec<Option<Vec<String>>>>,
        constraints: &Option<Vec<Vec<Vec<String>>>>,
    ) -> Result<Vec<Guide>, String> {
        for (name, len) in [
            ("target_prefix", target_prefix.as_ref().map(Vec::len)),
            ("constraints", constraints.as_ref().map(Vec::len)),
        ] {
            if let Some(len) = len.filter(|&l| l != n) {
                return Err(format!("{name} has {len} entries for {n} sources: give one a source"));
            }
        }
        if target_prefix.is_none() && constraints.is_none() {
            return Ok(Vec::new());
        }
        Ok((0..n)
            .map(|i| Guide {
                prefix: target_prefix.as_ref().and_then(|p| p[i].as_ref()).map_or(Vec::new(), |p| self.target_ids(p)),
                phrases: constraints.as_ref().map_or(Vec::new(), |c| c[i].iter().map(|p| self.target_ids(p)).collect()),
            })
            .collect())
    }

    /// `opts` with this session's workers (`inter_threads`).
    pub(crate) fn options(&self, opts: &DecodeOptions) -> DecodeOptions {
        DecodeOptions { workers: self.workers, ..*opts }
    }

    pub(crate) fn score(&self, pairs: &[(Vec<u32>, Vec<u32>)]) -> transformer::Result<Vec<Vec<f32>>> {
        self.pool.install(|| self.translator.token_log_probs(pairs))
    }
}

pub(crate) fn translation_job(
    engine: &Engine,
    source: &[Vec<String>],
    guides: &[Guide],
    opts: &DecodeOptions,
    max_input_length: usize,
    returns: Returns,
    events: &mut (dyn Events + Send),
) -> transformer::Result<Translations> {
    let srcs: Vec<Vec<u32>> = source.iter().map(|s| engine.source_ids(s, max_input_length)).collect();
    let hyps = engine.translate(&srcs, guides, opts, events)?;
    let tokens = hyps.iter().map(|n| n.iter().map(|h| engine.target_pieces(&h.tokens)).collect()).collect();
    let scores =
        hyps.iter().map(|n| if returns.scores { n.iter().map(|h| h.score).collect() } else { Vec::new() }).collect();
    let mut attention = Vec::new();
    if returns.attention {
        // CTranslate2's attention vectors: a row per output token over the source tokens, here
        // the mean of the last layer's heads (decode::alignment, as `--alignment soft`).
        let soft = AlignmentOptions::new(AlignmentKind::Soft);
        for (src, nbest) in srcs.iter().zip(&hyps) {
            let mut each = Vec::with_capacity(nbest.len());
            for h in nbest {
                let a = engine.translator.align_hypothesis(src, h, &soft)?;
                each.push((0..a.target).map(|t| a.weights[t * a.source..(t + 1) * a.source].to_vec()).collect());
            }
            attention.push(each);
        }
    }
    Ok(Translations { tokens, scores, attention })
}

pub(crate) fn scoring_job(
    engine: &Engine,
    source: &[Vec<String>],
    target: &[Vec<String>],
    max_input_length: usize,
    offset: usize,
) -> transformer::Result<Scores> {
    let pairs: Vec<(Vec<u32>, Vec<u32>)> = source
        .iter()
        .zip(target)
        .map(|(s, t)| (engine.source_ids(s, max_input_length), engine.target_ids(t)))
        .collect();
    let log_probs = engine.score(&pairs)?;
    let mut tokens = Vec::with_capacity(pairs.len());
    let mut kept = Vec::with_capacity(pairs.len());
    for ((_, t), lp) in pairs.iter().zip(log_probs) {
        let mut pieces = engine.target_pieces(t);
        pieces.push(engine.target_pieces(&[transformer::EOS]).remove(0));
        // CTranslate2's `offset`: the first tokens are conditioned on but not scored.
        let skip = offset.min(pieces.len());
        tokens.push(pieces.split_off(skip));
        kept.push(lp[skip.min(lp.len())..].to_vec());
    }
    Ok((tokens, kept))
}

/// Runs `job` on a thread of its own (`asynchronous=True`); every result of the batch waits on the
/// outcome it leaves (a panic's message as its error).
pub(crate) fn spawn(job: impl FnOnce() -> Result<Outcome, String> + Send + 'static) -> Shared {
    let shared: Shared = Arc::new((Mutex::new(None), Condvar::new()));
    let done = shared.clone();
    std::thread::spawn(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
            .unwrap_or_else(|payload| Err(crate::interrupt::panic_message(payload.as_ref())));
        let (lock, ready) = &*done;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = Some(out);
        ready.notify_all();
    });
    shared
}
