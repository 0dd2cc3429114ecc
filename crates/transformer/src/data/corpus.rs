//! Reading line-aligned text corpora, plain or gzip-compressed (by the `.gz` suffix), with errors
//! that name the file and line.

use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Opens a plain or gzip (`.gz`) text file for buffered reading.
pub fn open(path: &Path) -> Result<Box<dyn BufRead>> {
    let f = std::fs::File::open(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(f))
    } else {
        Box::new(f)
    };
    Ok(Box::new(BufReader::with_capacity(1 << 16, reader)))
}

/// A line reader over a file or stream: line endings (`\n`, `\r\n`) removed, invalid UTF-8 an
/// error naming the source (a path, or a name like `<stdin>`) and the line.
pub struct Lines {
    reader: Box<dyn BufRead>,
    buf: Vec<u8>,
    name: PathBuf,
    n: usize,
}

impl Lines {
    /// Lines of a plain or gzip (`.gz`) file.
    pub fn open(path: &Path) -> Result<Lines> {
        Ok(Self::from_reader(open(path)?, path))
    }

    /// Lines of any buffered reader; `name` appears in errors.
    pub fn from_reader(reader: Box<dyn BufRead>, name: impl Into<PathBuf>) -> Lines {
        Lines { reader, buf: Vec::new(), name: name.into(), n: 0 }
    }

    /// The 1-based number of the line last returned.
    pub fn line_number(&self) -> usize {
        self.n
    }

    /// The next line, or `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<&str>> {
        self.buf.clear();
        let read = self
            .reader
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| Error::Io { path: self.name.clone(), source })?;
        if read == 0 {
            return Ok(None);
        }
        self.n += 1;
        if self.buf.ends_with(b"\n") {
            self.buf.pop();
            if self.buf.ends_with(b"\r") {
                self.buf.pop();
            }
        }
        std::str::from_utf8(&self.buf).map(Some).map_err(|e| Error::Corpus {
            path: self.name.clone(),
            line: self.n,
            reason: format!("invalid UTF-8 at byte {} of the line; convert the file to UTF-8", e.valid_up_to()),
        })
    }
}

/// Calls `f(line_number, line)` for every line of `path` (see [`Lines`]). The callback's error type
/// is the caller's, so it can stop the loop with its own errors.
pub fn for_each_line<E: From<Error>>(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut lines = Lines::open(path)?;
    let mut n = 0;
    while let Some(line) = lines.next_line()? {
        n += 1;
        f(n, line)?;
    }
    Ok(())
}

/// All lines of `path` (see [`for_each_line`]).
pub fn read_lines(path: &Path) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for_each_line::<Error>(path, |_, l| {
        lines.push(l.to_string());
        Ok(())
    })?;
    Ok(lines)
}
