//! A [`Translator`] from checkpoint files: each file's header read once ([`checkpoint::open`]),
//! what it says checked against the tokenizer and the session's options, and the model read from
//! the same open file, prepared as it is read; an ensemble's files checked against each other.

use super::translator::{SessionOptions, Translator};
use crate::checkpoint::{self, Opened};
use crate::data::tokenizer::Tokenizer;
use crate::error::{Error, Result};
use crate::model::Transformer;
use crate::precision::Precision;
use crate::task::Task;
use std::path::{Path, PathBuf};

/// The checkpoint names a model directory may hold, first found first: what `transformer import
/// marian` and the quick starts write, the best checkpoint of a training run, its average; a run
/// directory with none of them gives its last `ckpt-*.safetensors`.
const CHECKPOINT_NAMES: [&str; 3] = ["model.safetensors", "best.safetensors", "averaged.safetensors"];
/// The tokenizer names a model directory may hold: an import's, a training run's (`data.bpe`);
/// looked for in the directory, then in its `run/` (the quick starts' layout).
const TOKENIZER_NAMES: [&str; 3] = ["tokenizer.json", "vocab.json", "bpe.json"];
/// The vocabulary shortlist a model directory may hold (`transformer shortlist --output
/// DIR/shortlist.json`), as a CTranslate2 directory holds its vocabulary map.
pub const SHORTLIST_NAME: &str = "shortlist.json";

/// The newest `ckpt-NNNNNNNN.safetensors` of a run directory (the step is zero-padded, so the
/// last name is the last step).
fn last_checkpoint(dir: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("ckpt-") && n.ends_with(".safetensors"))
        })
        .max()
}

/// The (checkpoint, tokenizer) files of a model directory: `model.safetensors` (or a run's
/// `best.safetensors`, `averaged.safetensors`, else its last `ckpt-*.safetensors`) beside
/// `tokenizer.json` (or a run's `vocab.json`, `bpe.json`; in the directory or its `run/`): what
/// `import marian`, a quick start and a training run write. An error says what the directory lacks.
pub fn model_files(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    if !dir.exists() {
        return Err(Error::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such model directory"),
        });
    }
    if !dir.is_dir() {
        return Err(Error::Input(format!(
            "{}: not a model directory (give the directory `transformer import marian`, a quick start or a training run wrote)",
            dir.display()
        )));
    }
    if dir.join("config.json").is_file() {
        return Err(Error::Input(format!(
            "{} is a Hugging Face model directory: import it first (`transformer import marian`, or \
             transformer.import_marian from Python) and give the directory that writes",
            dir.display()
        )));
    }
    let first = |dir: &Path, names: &[&str]| names.iter().map(|n| dir.join(n)).find(|p| p.is_file());
    let checkpoint = first(dir, &CHECKPOINT_NAMES).or_else(|| last_checkpoint(dir)).ok_or_else(|| {
        Error::Input(format!(
            "{} holds no checkpoint: looked for {} and ckpt-*.safetensors",
            dir.display(),
            CHECKPOINT_NAMES.join(", ")
        ))
    })?;
    let tokenizer =
        first(dir, &TOKENIZER_NAMES).or_else(|| first(&dir.join("run"), &TOKENIZER_NAMES)).ok_or_else(|| {
            Error::Input(format!(
                "{} holds no tokenizer: looked for {} in it and in its run/",
                dir.display(),
                TOKENIZER_NAMES.join(", ")
            ))
        })?;
    Ok((checkpoint, tokenizer))
}

/// Whether `dir` is a model directory [`model_files`] reads, its checkpoint one of ours (its
/// header read, not its tensors), or a CTranslate2 model directory (`model.bin` and
/// `config.json`, as CTranslate2's own `contains_model` asks).
pub fn contains_model(dir: &Path) -> bool {
    crate::import::ct2::is_ct2_dir(dir)
        || model_files(dir).is_ok_and(|(checkpoint, _)| checkpoint::open(&checkpoint).is_ok())
}

impl Translator {
    /// [`Translator::load`] of a model directory ([`model_files`]).
    pub fn load_dir(dir: &Path, options: SessionOptions) -> Result<Self> {
        let (checkpoint, tokenizer) = model_files(dir)?;
        Self::load(&checkpoint, &tokenizer, options)
    }

    /// [`Translator::load_dir`] at CTranslate2's `compute_type`
    /// ([`Precision::from_compute_type`]: `default` is the checkpoint's own), for `task` (a
    /// model of another task is an error naming both); the checkpoint's header read once. A
    /// translation model's [`SHORTLIST_NAME`] in the directory becomes the session's shortlist
    /// (used by the calls that ask for it, [`DecodeOptions::use_shortlist`](crate::decode::translator::DecodeOptions::use_shortlist)).
    ///
    /// A CTranslate2 model directory ([`crate::import::ct2::is_ct2_dir`]) is imported as it is
    /// read ([`crate::import::ct2::import`], with the tokenizer it holds): `default` is then int8
    /// for int8 weights, else f32.
    pub fn load_dir_as(dir: &Path, compute_type: &str, task: Task) -> Result<Self> {
        if crate::import::ct2::is_ct2_dir(dir) {
            let imported = crate::import::ct2::import(dir, &[])?;
            let precision = Precision::from_compute_type(compute_type, imported.weights == "int8")?;
            let tokenizer = imported.tokenizer()?;
            let model = Transformer::from_params(imported.checkpoint.config.clone(), imported.checkpoint.params)?;
            return Self::new(model, tokenizer, SessionOptions { precision, task, ..SessionOptions::default() });
        }
        let (checkpoint, tokenizer) = model_files(dir)?;
        let vocab = Tokenizer::load(&tokenizer)?;
        let opened = checkpoint::open(&checkpoint)?;
        let precision = Precision::from_compute_type(compute_type, opened.header().int8)?;
        let options = SessionOptions { precision, task, ..SessionOptions::default() };
        let mut t = Self::from_opened(opened, vocab, &tokenizer, options)?;
        let shortlist = dir.join(SHORTLIST_NAME);
        if task == Task::Translation && shortlist.is_file() {
            t.load_shortlist(&shortlist)?;
        }
        Ok(t)
    }

    /// Loads a checkpoint and the tokenizer it was trained with (a BPE model of ours, or the
    /// tokenizer file `transformer import` wrote), checking that they belong together (by the
    /// vocabulary's hash).
    pub fn load(checkpoint: &Path, tokenizer: &Path, options: SessionOptions) -> Result<Self> {
        let vocab = Tokenizer::load(tokenizer)?;
        Self::from_opened(checkpoint::open(checkpoint)?, vocab, tokenizer, options)
    }

    /// [`Translator::load`] of a checkpoint whose header is read (`opened`), with the tokenizer
    /// read from the file `tokenizer`.
    fn from_opened(opened: Opened, vocab: Tokenizer, tokenizer: &Path, mut options: SessionOptions) -> Result<Self> {
        let checkpoint = opened.header().path().to_path_buf();
        let int8 = opened.header().int8;
        // What the header says of the task and the tree format, checked below after the load.
        let (stored, tree_format) = (opened.header().task(), opened.header().tree_format());
        if int8 && options.precision != Precision::Int8 {
            return Err(Error::Mismatch(format!(
                "{} is an int8 checkpoint (from `transformer quantize`): decode it with --precision int8, or decode the f32 \
                 checkpoint it was made from at {}",
                checkpoint.display(),
                options.precision
            )));
        }
        // The model is prepared as it is read: its f32 weights are never all in memory at once.
        let (ckpt, model) = if int8 {
            let (mut ckpt, codes) = opened.int8()?;
            let params = std::mem::take(&mut ckpt.params);
            let model = Transformer::from_params(ckpt.config.clone(), params)?.with_int8_codes(&codes)?;
            (ckpt, model)
        } else {
            opened.prepared(options.precision, options.kernels)?
        };
        if ckpt.vocab_hash != vocab.hash() {
            return Err(Error::Mismatch(format!(
                "{} was trained with vocabulary {} but {} is {}: pass the tokenizer the checkpoint was trained with",
                checkpoint.display(),
                ckpt.vocab_hash,
                tokenizer.display(),
                vocab.hash()
            )));
        }
        let stored = stored?;
        if stored != options.task {
            return Err(Error::Mismatch(format!(
                "{} is a {} model, not a {} one{}",
                checkpoint.display(),
                stored.name(),
                options.task.name(),
                if stored == Task::Parsing { ": use `transformer parse` (transformer.Parser from Python)" } else { "" }
            )));
        }
        options.tree_format = tree_format?;
        Self::new(model, vocab, options)
    }

    /// An ensemble session (`--checkpoint A --checkpoint B …`): the checkpoints, all trained with the
    /// tokenizer `tokenizer` (checked first, naming the two files that differ) and for the same task
    /// and tree format, decoded together: at every step of one beam search the models'
    /// log-probabilities are averaged. One checkpoint is [`Translator::load`].
    pub fn load_ensemble(checkpoints: &[PathBuf], tokenizer: &Path, options: SessionOptions) -> Result<Self> {
        let Some(first) = checkpoints.first() else {
            return Err(Error::Config("no checkpoint to load".into()));
        };
        // Every header first (read once, the files kept open for the loads below).
        let mut opened = vec![checkpoint::open(first)?];
        for c in &checkpoints[1..] {
            let o = checkpoint::open(c)?;
            let (hash, h) = (&opened[0].header().vocab_hash, &o.header().vocab_hash);
            if h != hash {
                return Err(Error::Mismatch(format!(
                    "{} and {} were trained with different vocabularies ({hash} and {h}): the models of an \
                     ensemble must share one",
                    first.display(),
                    c.display()
                )));
            }
            opened.push(o);
        }
        let vocab = Tokenizer::load(tokenizer)?;
        let mut opened = opened.into_iter();
        let mut main = Self::from_opened(opened.next().expect("the first"), vocab.clone(), tokenizer, options)?;
        for (c, o) in checkpoints[1..].iter().zip(opened) {
            let other = Self::from_opened(o, vocab.clone(), tokenizer, options)?;
            if other.model.config.max_positions != main.model.config.max_positions {
                return Err(Error::Mismatch(format!(
                    "{} has max_positions = {} but {} has {}: the models of an ensemble read and write the same lengths",
                    first.display(),
                    main.model.config.max_positions,
                    c.display(),
                    other.model.config.max_positions
                )));
            }
            if other.tree_format != main.tree_format {
                return Err(Error::Mismatch(format!(
                    "{} writes trees as {:?} but {} as {:?}: the models of an ensemble must write the same",
                    first.display(),
                    main.tree_format.name(),
                    c.display(),
                    other.tree_format.name()
                )));
            }
            main.others.push(other.model);
        }
        if checkpoints.len() > 1 {
            main.member_files = checkpoints.to_vec();
        }
        Ok(main)
    }
}
