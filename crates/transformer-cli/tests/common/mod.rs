//! What the CLI tests share: the binary, and the small run configurations they train (the tiny
//! model of `configs/tiny-test.toml` on files of the built-in Multi30k or the project's treebank).
// Each test binary uses some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `transformer` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_transformer")
}

/// Runs `transformer ARGS…`: (success, stdout, stderr).
pub fn transformer(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin()).args(args).output().expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A file of the built-in Multi30k, as a string for a config.
pub fn multi30k(name: &str) -> String {
    transformer::test_support::multi30k(name).display().to_string()
}

/// A translation run of the tiny model: `[model]` from `configs/tiny-test.toml` plus `model`
/// lines, `[data]` training on `train` (source, target) and validating on test_2016_flickr with the
/// vocabulary file `bpe` of `vocab_size` entries plus `data` lines, `[train]` writing to `DIR/out`
/// with `train` lines. Written to `DIR/run.toml`, whose path it returns.
pub struct Run<'a> {
    pub model: &'a str,
    pub train: (&'a str, &'a str),
    pub bpe: &'a Path,
    pub vocab_size: usize,
    pub data: &'a str,
    pub train_section: &'a str,
}

impl Run<'_> {
    /// Writes the config into `dir` (made if missing) and returns its path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let text = format!(
            "{}{}\n[data]\ntrain_src = \"{}\"\ntrain_tgt = \"{}\"\nvalid_src = \"{}\"\nvalid_tgt = \"{}\"\nbpe = \"{}\"\n\
             vocab_size = {}\n{}\n[train]\noutput_dir = \"{}\"\n{}",
            transformer::test_support::tiny_model_toml(),
            self.model,
            self.train.0,
            self.train.1,
            multi30k("test_2016_flickr.en.gz"),
            multi30k("test_2016_flickr.de.gz"),
            self.bpe.display(),
            self.vocab_size,
            self.data,
            dir.join("out").display(),
            self.train_section
        );
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join("run.toml");
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// The tests' 20-update translation model (d_model 32, trained on Multi30k's validation set,
/// 600-entry BPE in `DIR/bpe.json`), trained in `dir` with `max_positions` 128: (checkpoint, bpe).
pub fn train_tiny_translator(dir: &Path) -> (PathBuf, PathBuf) {
    train_tiny_translator_for(dir, 20)
}

/// [`train_tiny_translator`] for `steps` steps (at most 99,999,999).
#[allow(dead_code)]
pub fn train_tiny_translator_for(dir: &Path, steps: usize) -> (PathBuf, PathBuf) {
    let bpe = dir.join("bpe.json");
    let cfg = Run {
        model: "",
        train: (&multi30k("val.en.gz"), &multi30k("val.de.gz")),
        bpe: &bpe,
        vocab_size: 600,
        data: "max_tokens = 120",
        train_section: &format!("max_steps = {steps}\nwarmup = 10\nmax_src_tokens = 1024\nmax_tgt_tokens = 1024\n"),
    }
    .write(dir);
    let (ok, out, err) = transformer(&["train", "--config", cfg.to_str().unwrap(), "--set", "model.max_positions=128"]);
    assert!(ok, "training the test model failed: {err}");
    assert!(out.contains(&format!("reached {steps} steps")), "{out}");
    (dir.join(format!("out/ckpt-{steps:08}.safetensors")), bpe)
}

#[path = "../../../transformer/tests/common/test_dir.rs"]
mod test_dir;
#[allow(unused_imports)]
pub use test_dir::TestDir;

/// The directory for what every test of this binary shares (a model trained once for all of
/// them), `PREFIX-XXXXXX` in the system temp dir, made on first use: removed when the process
/// exits, kept (its path printed to stderr) when any test of the process failed (panicked). One
/// per test binary: later calls return the first call's directory whatever their prefix.
pub fn shared_dir(prefix: &str) -> &'static Path {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static FAILED: AtomicBool = AtomicBool::new(false);
    extern "C" {
        fn atexit(f: extern "C" fn()) -> std::os::raw::c_int;
    }
    // Statics are never dropped: the C library's exit handlers remove the directory, after every
    // test has run (libtest ends with `exit`, or returns from `main`).
    extern "C" fn remove_at_exit() {
        if let Some(dir) = DIR.get() {
            if FAILED.load(Ordering::SeqCst) {
                eprintln!("kept {}", dir.display());
            } else {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
    DIR.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            FAILED.store(true, Ordering::SeqCst);
            previous(info)
        }));
        // SAFETY: registers a function taking no arguments, as `atexit` expects.
        assert_eq!(unsafe { atexit(remove_at_exit) }, 0, "atexit refused the cleanup");
        tempfile::Builder::new().prefix(&format!("{prefix}-")).tempdir().expect("creates a temporary directory").keep()
    })
}
