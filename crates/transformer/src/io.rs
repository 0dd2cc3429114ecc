//! File-system helpers every layer uses: atomic writes and I/O errors that name their file.

use crate::error::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Turns an I/O error on `path` into [`Error::Io`] naming the file: `.map_err(io_err(path))`.
pub fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.to_path_buf(), source }
}

/// Writes `data` to `path` through a temporary file in the same directory, an fsync and a rename,
/// so a crash never leaves a half-written file under `path`.
pub fn write_atomically(path: &Path, data: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp: PathBuf = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
        f.write_all(data).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
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
