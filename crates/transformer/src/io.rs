//! File-system helpers every layer uses: atomic writes and I/O errors that name their file.

use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Turns an I/O error on `path` into [`Error::Io`] naming the file: `.map_err(io_err(path))`.
pub fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// Whether process `pid` is alive on this host: `None` where the system has no `/proc` to ask.
pub fn pid_alive(pid: u32) -> Option<bool> {
    Path::new("/proc/self").exists().then(|| Path::new("/proc").join(pid.to_string()).exists())
}

/// The pid of the writer of a temporary file left by [`write_atomically`] (`.NAME.tmp.PID.N`), or
/// `None` if `file_name` is not such a file.
pub fn temp_writer_pid(file_name: &str) -> Option<u32> {
    let (_, tail) = file_name.strip_prefix('.')?.rsplit_once(".tmp.")?;
    let (pid, n) = tail.split_once('.')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Writes `data` to `path` through a temporary file `.NAME.tmp.PID.N` in the same directory (PID is
/// the writer's, so a crash recovery can tell a live writer's file from a dead one's), an fsync and a
/// rename, so a crash never leaves a half-written file under `path`.
pub fn write_atomically(path: &Path, data: &[u8]) -> Result<()> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp: PathBuf = dir.join(format!(".{name}.tmp.{}.{seq}", std::process::id()));
    let result = (|| {
        // Errors name the user's file, never the temporary one beside it.
        let mut f = std::fs::File::create(&tmp).map_err(io_err(path))?;
        f.write_all(data).map_err(io_err(path))?;
        f.sync_all().map_err(io_err(path))?;
        std::fs::rename(&tmp, path).map_err(io_err(path))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
