//! The library's error type: every variant carries the context a user needs to act on it.

use std::path::PathBuf;

/// Errors the library reports to its callers. Programmer bugs inside kernels are `assert!`s instead.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file failed.
    #[error("{path}: {source}{}", io_hint(.source))]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A checkpoint file is truncated, corrupt or not a checkpoint of this project.
    #[error("{path}: not a valid checkpoint: {reason}. Re-create it or pick another checkpoint file")]
    CorruptCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A checkpoint's values are not all finite: it is never written, and never resumed from.
    #[error("{path}: the checkpoint's {what} hold NaN or ∞ values: it is not written or resumed from")]
    NonFiniteCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// Which values (parameters, Adam moments).
        what: String,
    },
    /// A checkpoint does not fit the model it is loaded into.
    #[error(
        "{path}: checkpoint does not match the model: {what}: checkpoint has {found}, model expects {expected}. \
         Load it with the configuration it was trained with"
    )]
    CheckpointMismatch {
        /// The checkpoint file.
        path: PathBuf,
        /// Which field or tensor differs.
        what: String,
        /// What the model expects.
        expected: String,
        /// What the checkpoint holds.
        found: String,
    },
    /// A BPE model could not be learned, loaded or applied.
    #[error("BPE: {0}")]
    Bpe(String),
    /// A corpus file is malformed (misaligned, not UTF-8, …).
    #[error("{path}:{line}: {reason}")]
    Corpus {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A download failed.
    #[error("downloading {url}: {reason}")]
    Download {
        /// What was fetched.
        url: String,
        /// Why it failed and what to do.
        reason: String,
    },
    /// A file's SHA-256 differs from the expected one.
    #[error("{file}: SHA-256 is {found}, expected {expected}: the file is corrupt or not the published one; it was not kept, fetch it again")]
    Checksum {
        /// The file.
        file: String,
        /// The published checksum.
        expected: String,
        /// What the file has.
        found: String,
    },
    /// An archive (a downloaded or local zip file) cannot be read, or lacks a file it must hold.
    #[error("{archive}: {reason}")]
    Archive {
        /// The archive: its URL or path.
        archive: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A configuration value is out of range or inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Two things that must belong together do not: a checkpoint and its configuration or
    /// vocabulary, a model and its task, prepared data and its vocabulary, the workers of a run.
    #[error("{0}")]
    Mismatch(String),
    /// What a caller asked to process cannot be: sentences and references (or gold trees) that do
    /// not align, an empty or over-long sentence, training data with nothing left to train on.
    #[error("{0}")]
    Input(String),
    /// The machine cannot do what was asked (bf16 products without AMX or AVX512-BF16).
    #[error("{0}")]
    Unsupported(String),
    /// The caller stopped the work ([`crate::events::Events::interrupted`]) before it was done.
    #[error("interrupted after {done} of {total} items")]
    Interrupted {
        /// Items (sentences or chunks) done when it stopped.
        done: usize,
        /// Items asked for.
        total: usize,
    },
    /// A model from another toolkit that cannot be imported (the message names the file).
    #[error("import: {0}")]
    Import(String),
    /// A batch cannot be fed to the model.
    #[error("invalid batch: {0}")]
    Batch(String),
    /// Training produced a non-finite loss.
    #[error("loss is {loss} at step {step}: training diverged. Lower the learning rate (lr_scale) or raise warmup")]
    NonFiniteLoss {
        /// The update step at which it happened.
        step: u64,
        /// The loss value (NaN or ±inf).
        loss: f32,
    },
    /// An update made parameters non-finite (it overflowed); the run stops before saving them.
    #[error(
        "the update of step {step} (learning rate {lr:e}) made parameters non-finite: training stopped \
         before anything was saved, and the checkpoints on disk are intact. Lower the learning rate \
         (lr_scale) or raise warmup, then run again"
    )]
    NonFiniteParameters {
        /// The update step at which it happened.
        step: u64,
        /// The learning rate of that update.
        lr: f32,
    },
    /// Another live process holds a run directory's lock.
    #[error(
        "{dir}: another training run (pid {pid} on {host}) is using this directory; wait for it to end, \
         stop it, or set another train.output_dir"
    )]
    RunDirLocked {
        /// The run directory.
        dir: PathBuf,
        /// The process holding it, as written in its `.lock` file.
        pid: String,
        /// The host it runs on.
        host: String,
    },
    /// A prepared (binarised) data directory is corrupt, truncated or from an older version.
    #[error("{path}: {reason}; run `transformer prepare` again to rebuild the directory")]
    PreparedData {
        /// The file at fault.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Decoding cannot go on.
    #[error("decoding failed: {0}")]
    Decode(String),
    /// One model of an ensemble failed (`index` counts from 0, in the order given); a session that
    /// knows the models' files names the file instead.
    #[error("model {} of the ensemble: {source}", .index + 1)]
    EnsembleMember {
        /// Which model.
        index: usize,
        /// What went wrong with it.
        source: Box<Error>,
    },
}

/// Shorthand for `Result<T, Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// What to do about an I/O error, by its kind.
fn io_hint(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind::*;
    match e.kind() {
        NotFound => " (check the path: relative paths start from the current directory)",
        PermissionDenied => " (check the file's permissions, or choose another location)",
        AlreadyExists => " (remove it or choose another name)",
        StorageFull => " (the disk is full: free space and run the same command again)",
        _ => "",
    }
}
