//! §5 A run's directory: checkpoints `ckpt-STEP.safetensors` written atomically with the last k
//! kept (the paper averages the last 5), `metrics.jsonl` with one record a line, the learning curve
//! drawn from it, the lock that keeps one run per directory, and the clean-up after a crash that
//! lets a run resume.

use crate::checkpoint::{self, Checkpoint};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::io::{io_err, pid_alive, temp_writer_pid, write_atomically};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The output directory of a training run, locked for as long as this value lives. The other
/// workers of a data-parallel run [follow](RunDir::follow) it: they read it and write nothing.
pub struct RunDir {
    dir: PathBuf,
    keep_last: usize,
    /// `None` for a follower.
    lock: Option<DirLock>,
}

/// `<dir>/.lock`: an OS advisory lock (`flock`) on the file, which the kernel releases whatever way
/// the process ends, SIGKILL included, and inside it the holder's pid and host for the error
/// message. A `.lock` file whose lock nobody holds is stale (its writer died) and is taken over.
/// A run directory holds one for its run; a quick start holds one on its output directory for the
/// whole of its work (data, training, averaging, evaluation, report).
pub struct DirLock {
    path: PathBuf,
    file: std::fs::File,
}

impl DirLock {
    /// Locks `dir` (which must exist), or fails with [`Error::RunDirLocked`] naming the live holder.
    pub fn acquire(dir: &Path, events: &mut dyn Events) -> Result<DirLock> {
        let path = dir.join(".lock");
        loop {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(io_err(&path))?;
            let mut held_by = String::new();
            if let Err(e) = file.try_lock() {
                if let std::fs::TryLockError::Error(source) = e {
                    return Err(Error::Io { path, source });
                }
                let _ = file.read_to_string(&mut held_by);
                let mut it = held_by.split_whitespace();
                let (pid, host) = (it.next().unwrap_or("?").to_string(), it.next().unwrap_or("?").to_string());
                return Err(Error::RunDirLocked { dir: dir.to_path_buf(), pid, host });
            }
            // The holder that was here may have removed the file between our open and our lock:
            // then the lock is on a dead inode, and we start again with the file now at `path`.
            if !still_at(&file, &path) {
                continue;
            }
            file.read_to_string(&mut held_by).map_err(io_err(&path))?;
            if !held_by.trim().is_empty() {
                events.log(&format!(
                    "{}: taking over a stale lock (pid {} is gone without releasing it)",
                    path.display(),
                    held_by.split_whitespace().next().unwrap_or("?")
                ));
            }
            file.set_len(0).map_err(io_err(&path))?;
            file.rewind().map_err(io_err(&path))?;
            file.write_all(format!("{} {}\n", std::process::id(), hostname()).as_bytes()).map_err(io_err(&path))?;
            return Ok(DirLock { path, file });
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while still locked, so no one can lock this inode and believe it is the live one.
        let _ = std::fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// Whether `path` still names the open `file` (not a file created after it was removed).
#[cfg(unix)]
fn still_at(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(f), Ok(p)) => (f.dev(), f.ino()) == (p.dev(), p.ino()),
        _ => false,
    }
}

#[cfg(not(unix))]
fn still_at(_: &std::fs::File, path: &Path) -> bool {
    path.exists()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl RunDir {
    /// Opens `dir` (created if missing) for a run that keeps its last `keep_last` checkpoints: locks
    /// it (an error naming the holder if another live run has it; a stale lock is taken over with a
    /// line to `log`), and cleans up after a crash: checkpoint temp files whose writer is gone are
    /// removed, and a metrics line that was half written is cut, so new records start on a line of
    /// their own.
    pub fn open(dir: &Path, keep_last: usize, events: &mut dyn Events) -> Result<RunDir> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let lock = DirLock::acquire(dir, events)?;
        let run_dir = RunDir { dir: dir.to_path_buf(), keep_last, lock: Some(lock) };
        run_dir.recover_after_crash()?;
        Ok(run_dir)
    }

    /// `dir` as a worker other than rank 0 of a data-parallel run sees it: it reads the
    /// checkpoints there (rank 0's, on a shared filesystem) and writes nothing: saving returns the
    /// path rank 0 writes, and metrics and the curve are rank 0's to write.
    pub fn follow(dir: &Path, keep_last: usize) -> RunDir {
        RunDir { dir: dir.to_path_buf(), keep_last, lock: None }
    }

    /// Whether this process writes the directory (rank 0, or a single process), not a follower.
    pub fn writes(&self) -> bool {
        self.lock.is_some()
    }

    /// The path of the checkpoint of `step`.
    pub fn checkpoint_path(&self, step: u64) -> PathBuf {
        self.dir.join(format!("ckpt-{step:08}.safetensors"))
    }

    fn recover_after_crash(&self) -> Result<()> {
        remove_dead_temp_files(&self.dir)?;
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
        let path = self.checkpoint_path(ckpt.step);
        if !self.writes() {
            return Ok(path);
        }
        checkpoint::save(&path, ckpt)?;
        let all = list_checkpoints(&self.dir)?;
        for (_, old) in all.iter().take(all.len().saturating_sub(self.keep_last.max(1))) {
            std::fs::remove_file(old).map_err(io_err(old))?;
        }
        Ok(path)
    }

    /// Appends one record to `metrics.jsonl`: the whole line in one `write` to a file opened with
    /// `O_APPEND`, so a line is never interleaved or split by another write.
    pub fn append_metrics(&self, record: &serde_json::Value) -> Result<()> {
        if !self.writes() {
            return Ok(());
        }
        let path = self.metrics();
        let line = format!("{record}\n");
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(io_err(&path))?;
        f.write_all(line.as_bytes()).map_err(io_err(&path))
    }

    /// Removes the records of `metrics.jsonl` with a "step" after `step`: called when a run resumes
    /// from a checkpoint of an older run that did not record how many records preceded it (see
    /// [`RunDir::keep_metrics_records`]). Returns how many records were removed.
    pub fn drop_metrics_after(&self, step: u64, events: &mut dyn Events) -> Result<usize> {
        self.rewrite_metrics(&mut |_, r| r["step"].as_u64().is_none_or(|s| s <= step), events)
    }

    /// Keeps the first `n` records of `metrics.jsonl` and removes the rest: called when a run
    /// resumes from a checkpoint saved after `n` records, so the records the killed process wrote
    /// after it are written again by the resumed run, never twice. Returns how many were removed.
    pub fn keep_metrics_records(&self, n: u64, events: &mut dyn Events) -> Result<usize> {
        self.rewrite_metrics(&mut |i, _| (i as u64) < n, events)
    }

    /// How many records `metrics.jsonl` holds (damaged lines not counted); 0 for a follower.
    pub fn metrics_records(&self) -> Result<u64> {
        let Some(bytes) = self.read_metrics()? else { return Ok(0) };
        Ok(bytes.split_inclusive(|&b| b == b'\n').filter(|l| metrics_record(l).is_some()).count() as u64)
    }

    /// The bytes of `metrics.jsonl`; `None` for a follower (it writes none) or when there is none.
    fn read_metrics(&self) -> Result<Option<Vec<u8>>> {
        if !self.writes() {
            return Ok(None);
        }
        let path = self.metrics();
        match std::fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io { path, source: e }),
        }
    }

    /// Rewrites `metrics.jsonl` (atomically) with the records `keep(index, record)` accepts, the
    /// index counting records only. A damaged line (not UTF-8, not a JSON record) never stops a
    /// resume: it is set aside in `metrics.jsonl.damaged` with a warning naming its line.
    fn rewrite_metrics(
        &self,
        keep: &mut dyn FnMut(usize, &serde_json::Value) -> bool,
        events: &mut dyn Events,
    ) -> Result<usize> {
        let Some(bytes) = self.read_metrics()? else { return Ok(0) };
        let path = self.metrics();
        let (mut kept, mut damaged) = (Vec::with_capacity(bytes.len()), Vec::new());
        let (mut removed, mut index) = (0, 0);
        for (i, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
            match metrics_record(line) {
                None if line.iter().all(u8::is_ascii_whitespace) => kept.extend_from_slice(line),
                None => {
                    events.warn(&format!(
                        "{}:{}: not a metrics record (damaged); set aside in metrics.jsonl.damaged",
                        path.display(),
                        i + 1
                    ));
                    damaged.extend_from_slice(line);
                    if !line.ends_with(b"\n") {
                        damaged.push(b'\n');
                    }
                }
                Some(r) => {
                    if keep(index, &r) {
                        kept.extend_from_slice(line);
                    } else {
                        removed += 1;
                    }
                    index += 1;
                }
            }
        }
        if !damaged.is_empty() {
            let aside = self.dir.join("metrics.jsonl.damaged");
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&aside).map_err(io_err(&aside))?;
            f.write_all(&damaged).map_err(io_err(&aside))?;
        }
        if removed > 0 || !damaged.is_empty() {
            write_atomically(&path, &kept)?;
        }
        Ok(removed)
    }

    /// Draws `learning_curve.svg` from `metrics.jsonl`.
    pub fn write_learning_curve(&self) -> Result<()> {
        if !self.writes() {
            return Ok(());
        }
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

/// The newest `k` checkpoints in `dir` as (step, path), oldest first: what §6.1 averages.
pub fn last_checkpoints(dir: &Path, k: usize) -> Result<Vec<(u64, PathBuf)>> {
    let all = list_checkpoints(dir)?;
    Ok(all[all.len().saturating_sub(k)..].to_vec())
}

/// One line of `metrics.jsonl` as a record: UTF-8 holding a JSON object, else `None`.
fn metrics_record(line: &[u8]) -> Option<serde_json::Value> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(serde_json::Value::is_object)
}

/// Removes the temporary files (`.NAME.tmp.PID.N`, from `io::write_atomically`) that a writer of
/// `dir` left when it died: checkpoints, best.safetensors, metrics.jsonl, the vocabulary, a quick
/// start's report and model. Only a dead writer's (or this process's): another live process may
/// be writing one there (e.g. `transformer average`).
pub fn remove_dead_temp_files(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let p = e.map_err(io_err(dir))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.starts_with('.') && name.contains(".tmp.")) {
            continue;
        }
        let Some(pid) = temp_writer_pid(name) else { continue };
        if pid == std::process::id() || pid_alive(pid) != Some(true) {
            std::fs::remove_file(&p).map_err(io_err(&p))?;
        }
    }
    Ok(())
}
