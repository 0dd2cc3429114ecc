//! Recipes: whole jobs built from the library's objects, each a function from options to a
//! report. [`quickstart`] trains, averages and scores a Multi30k model in one call; [`parsing`]
//! does the same for constituency parsing on a treebank; [`ablate`] trains and scores Table 3's
//! rows at the scale of this machine. What they share lives here: the Multi30k files as a typed
//! struct, averaging a run's last checkpoints, translating and scoring a dev or test set, and
//! holding an output directory for the whole job.

pub mod ablate;
pub mod parsing;
pub mod quickstart;

use crate::checkpoint::{self, Checkpoint};
use crate::data::download::{fetch_verified, multi30k_pair, Source};
use crate::decode::translator::{DecodeOptions, Translator};
use crate::error::{Error, Result};
use crate::eval::bleu::{corpus_bleu, BleuConfig, BleuScore};
use crate::eval::chrf::{corpus_chrf, ChrfConfig, ChrfScore};
use crate::events::Events;
use crate::train::config::DataSection;
use crate::train::run_dir::{last_checkpoints, remove_dead_temp_files, DirLock};
use std::path::{Path, PathBuf};

/// The shipped Multi30k configuration: the quick start and `ablate` train exactly this recipe, on
/// their own budgets.
pub const MULTI30K_CONFIG: &str = include_str!("../../../../configs/multi30k-en-de.toml");

/// Where [`MULTI30K_CONFIG`] comes from, for its error messages.
pub const MULTI30K_ORIGIN: &str = "configs/multi30k-en-de.toml (built in)";

/// The longest training budget a recipe takes: a week (`--minutes` above it is refused before
/// anything is written, and no report suggests more).
pub const MAX_MINUTES: f64 = 7.0 * 24.0 * 60.0;

/// A source file and its aligned target file.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    /// Source sentences, one a line.
    pub src: PathBuf,
    /// Target sentences, aligned.
    pub tgt: PathBuf,
}

/// One Multi30k language pair's files, verified by their checksums.
#[derive(Clone, Debug, PartialEq)]
pub struct Multi30kFiles {
    /// 29,000 training pairs.
    pub train: Pair,
    /// 1,014 validation pairs (the recipes' dev set).
    pub valid: Pair,
    /// test_2016_flickr, 1,000 pairs.
    pub test: Pair,
}

impl Multi30kFiles {
    /// Copies `src`–`tgt` from `source` into `cache` (or keeps the copy there when its checksums
    /// hold), telling `events` what it did.
    pub fn fetch(source: &Source, src: &str, tgt: &str, cache: &Path, events: &mut dyn Events) -> Result<Self> {
        let wanted = multi30k_pair(src, tgt)?;
        let mut paths = fetch_verified(source, &wanted, cache, events)?.into_iter();
        let mut pair = || Pair { src: paths.next().expect("a source file"), tgt: paths.next().expect("a target file") };
        Ok(Multi30kFiles { train: pair(), valid: pair(), test: pair() })
    }

    /// Sets a run's data to these files: training on `train`, validating on `valid`.
    pub fn train_on(&self, data: &mut DataSection) {
        (data.train_src, data.train_tgt) = (self.train.src.clone(), self.train.tgt.clone());
        (data.valid_src, data.valid_tgt) = (self.valid.src.clone(), self.valid.tgt.clone());
    }
}

/// The average of the newest `k` checkpoints of `dir` (§6.1), saved as `output`; returns it and
/// how many were averaged ([`checkpoint::average`]'s error when the run has none).
pub fn average_last(dir: &Path, k: usize, output: &Path) -> Result<(Checkpoint, usize)> {
    let last: Vec<PathBuf> = last_checkpoints(dir, k)?.into_iter().map(|(_, p)| p).collect();
    let avg = checkpoint::average(&last)?; // none: its error says so
    checkpoint::save(output, &avg)?;
    Ok((avg, last.len()))
}

/// A translated set and its scores against one reference.
#[derive(Clone, Debug)]
pub struct Scored {
    /// The best translation of each source line.
    pub hyps: Vec<String>,
    /// Cased sacreBLEU (13a).
    pub bleu: BleuScore,
    /// chrF.
    pub chrf: ChrfScore,
}

/// Translates `src` (beam 4, α 0.6) and scores the output against `refs`, with the progress and
/// warnings told to `events`.
pub fn translate_and_score(
    translator: &Translator,
    src: &[String],
    refs: Vec<String>,
    events: &mut dyn Events,
) -> Result<Scored> {
    let (out, _) = translator.translate(src, &DecodeOptions::default(), events)?;
    let hyps: Vec<String> = out.into_iter().map(|mut n| std::mem::take(&mut n[0].text)).collect();
    let refs = [refs];
    let bleu = corpus_bleu(&hyps, &refs, &BleuConfig::default())?;
    let chrf = corpus_chrf(&hyps, &refs, &ChrfConfig::default())?;
    Ok(Scored { hyps, bleu, chrf })
}

/// Locks a recipe's output directory for all of its work, so that a second `job` (a quick start,
/// an ablation) on the same `--output` stops at once with a message naming the flag; then removes
/// the temporary files a job killed while writing left there.
pub fn lock_output(out: &Path, job: &str, events: &mut dyn Events) -> Result<DirLock> {
    let lock = DirLock::acquire(out, events).map_err(|e| match e {
        Error::RunDirLocked { dir, pid, host } => Error::Config(format!(
            "{}: another {job} (pid {pid} on {host}) is using this directory; wait for it to end, \
             stop it, or give another --output",
            dir.display()
        )),
        e => e,
    })?;
    remove_dead_temp_files(out)?;
    Ok(lock)
}

/// `x` with at most two decimals and no trailing zeros: 30, 0.75, 1.33. Numbers that two decimals
/// would show as 0, and very large ones, are written with an exponent (`3e-7`, `1e308`), so that
/// no message advises `--minutes 0` or prints 309 digits.
pub fn short_number(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(0.005..1e6).contains(&x.abs()) {
        return format!("{x:e}");
    }
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
