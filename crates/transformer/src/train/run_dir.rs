//! §5 A run's directory: checkpoints `ckpt-STEP.safetensors` written atomically with the last k
//! kept (the paper averages the last 5), `metrics.jsonl` with one record a line, the learning curve
//! drawn from it, and the clean-up after a crash that lets a run resume.

use super::checkpoint::{self, Checkpoint};
use crate::error::Result;
use crate::io::io_err;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The output directory of a training run.
pub struct RunDir {
    dir: PathBuf,
    keep_last: usize,
}

impl RunDir {
    /// Opens `dir` (created if missing) for a run that keeps its last `keep_last` checkpoints, and
    /// cleans up after a crash: checkpoint temp files that were never renamed are removed, and a
    /// metrics line that was half written is cut, so new records start on a line of their own.
    pub fn open(dir: &Path, keep_last: usize) -> Result<RunDir> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let run_dir = RunDir { dir: dir.to_path_buf(), keep_last };
        run_dir.recover_after_crash()?;
        Ok(run_dir)
    }

    fn recover_after_crash(&self) -> Result<()> {
        let dir = &self.dir;
        for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
            let p = e.map_err(io_err(dir))?.path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with(".ckpt-") && name.contains(".safetensors.tmp.") {
                std::fs::remove_file(&p).map_err(io_err(&p))?;
            }
        }
        let metrics = self.metrics();
        if let Ok(bytes) = std::fs::read(&metrics) {
            if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                let f = std::fs::OpenOptions::new().write(true).open(&metrics).map_err(io_err(&metrics))?;
                f.set_len(keep as u64).map_err(io_err(&metrics))?;
            }
        }
        Ok(())
    }

    fn metrics(&self) -> PathBuf {
        self.dir.join("metrics.jsonl")
    }

    /// The newest checkpoint as (step, path), if any.
    pub fn latest_checkpoint(&self) -> Result<Option<(u64, PathBuf)>> {
        Ok(list_checkpoints(&self.dir)?.pop())
    }

    /// Writes `ckpt` as `ckpt-STEP.safetensors`, then deletes all but the newest `keep_last`.
    /// Returns its path.
    pub fn save(&self, ckpt: &Checkpoint) -> Result<PathBuf> {
        let path = self.dir.join(format!("ckpt-{:08}.safetensors", ckpt.step));
        checkpoint::save(&path, ckpt)?;
        let all = list_checkpoints(&self.dir)?;
        for (_, old) in all.iter().take(all.len().saturating_sub(self.keep_last.max(1))) {
            std::fs::remove_file(old).map_err(io_err(old))?;
        }
        Ok(path)
    }

    /// Appends one record to `metrics.jsonl`.
    pub fn append_metrics(&self, record: &serde_json::Value) -> Result<()> {
        let path = self.metrics();
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(io_err(&path))?;
        writeln!(f, "{record}").map_err(io_err(&path))
    }

    /// Draws `learning_curve.svg` from `metrics.jsonl`.
    pub fn write_learning_curve(&self) -> Result<()> {
        super::curve::write_svg(&self.metrics(), &self.dir.join("learning_curve.svg"))
    }
}

/// Checkpoints in `dir` as (step, path), oldest first.
pub fn list_checkpoints(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let p = e.map_err(io_err(dir))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(step) =
            name.strip_prefix("ckpt-").and_then(|r| r.strip_suffix(".safetensors")).and_then(|n| n.parse().ok())
        {
            out.push((step, p));
        }
    }
    out.sort();
    Ok(out)
}
