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

/// Writes new files into `dir` together or not at all, replacing nothing: every name of `guard`
/// (the names a writer may use, `files`' among them) must be absent from `dir`, a link counting as
/// present even when it dangles; `dir` is created if needed; every file is written and synced
/// under a temporary name `.NAME.new.PID.N` opened with `O_EXCL` (so never through a link), and
/// then each is linked into place by a call that fails on an existing name and follows no link.
/// A failure removes the temporaries, the files already placed and the directories it created,
/// so a refused or failed write leaves `dir` as it was. Returns the paths written.
pub fn publish_new(dir: &Path, files: &[(&str, &[u8])], guard: &[&str]) -> Result<Vec<PathBuf>> {
    let mut taken = guard.iter().chain(files.iter().map(|(n, _)| n)).map(|n| dir.join(n));
    if let Some(p) = taken.find(|p| std::fs::symlink_metadata(p).is_ok()) {
        let what =
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) { " (a link)" } else { "" };
        return Err(Error::Input(format!(
            "{} exists{what}; write into another directory (nothing is ever replaced)",
            p.display()
        )));
    }
    let created: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
        .map(Path::to_path_buf)
        .collect();
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tag = format!("{}.{}", std::process::id(), SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let (mut temps, mut placed) = (Vec::new(), Vec::new());
    let result = (|| {
        for (name, bytes) in files {
            let (tmp, path) = (dir.join(format!(".{name}.new.{tag}")), dir.join(name));
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io_err(&path))?;
            temps.push(tmp);
            f.write_all(bytes).and_then(|()| f.sync_all()).map_err(io_err(&path))?;
        }
        for ((name, _), tmp) in files.iter().zip(&temps) {
            let path = dir.join(name);
            std::fs::hard_link(tmp, &path).map_err(io_err(&path))?;
            placed.push(path);
        }
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    for t in &temps {
        let _ = std::fs::remove_file(t);
    }
    if result.is_err() {
        for p in &placed {
            let _ = std::fs::remove_file(p);
        }
        for d in &created {
            let _ = std::fs::remove_dir(d);
        }
    }
    result.map(|()| placed)
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

#[cfg(test)]
mod publish_tests {
    use super::*;

    #[test]
    fn publish_new_writes_all_or_nothing_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("new/deeper");
        let files: [(&str, &[u8]); 2] = [("a.txt", b"A"), ("b.txt", b"B")];
        let written = publish_new(&dir, &files, &["c.txt"]).unwrap();
        assert_eq!(written, [dir.join("a.txt"), dir.join("b.txt")]);
        assert_eq!(std::fs::read(dir.join("b.txt")).unwrap(), b"B");
        // Nothing is replaced: a file there, or a guarded name, or a dangling link.
        let e = publish_new(&dir, &files, &[]).unwrap_err().to_string();
        assert!(e.contains("a.txt exists") && !e.contains("(a link)"), "{e}");
        let other = tmp.path().join("other");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), other.join("c.txt")).ok();
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), other.join("c.txt")).unwrap();
        let e = publish_new(&other, &files, &["c.txt"]).unwrap_err().to_string();
        assert!(e.contains("c.txt exists (a link)"), "{e}");
        assert!(!tmp.path().join("nowhere").exists());
        // A write that fails halfway (a name in a directory that is not there) leaves nothing,
        // not even the directories it made.
        let fresh = tmp.path().join("fresh/deeper");
        let bad: [(&str, &[u8]); 2] = [("a.txt", b"A"), ("missing/b.txt", b"B")];
        assert!(publish_new(&fresh, &bad, &[]).is_err());
        assert!(!tmp.path().join("fresh").exists());
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }
}
