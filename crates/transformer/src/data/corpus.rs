//! Reading line-aligned text corpora, plain or gzip-compressed (by the `.gz` suffix), with errors
//! that name the file and line.

use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

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

/// Calls `f(line_number, line)` for every line of `path` (1-based numbers, line endings `\n` or
/// `\r\n` removed). Invalid UTF-8 is an error naming the file, line and byte. The callback's error
/// type is the caller's, so it can stop the loop with its own errors.
pub fn for_each_line<E: From<Error>>(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut reader = open(path)?;
    let mut buf = Vec::new();
    let mut n = 0;
    loop {
        buf.clear();
        let read =
            reader.read_until(b'\n', &mut buf).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        if read == 0 {
            return Ok(());
        }
        n += 1;
        if buf.ends_with(b"\n") {
            buf.pop();
            if buf.ends_with(b"\r") {
                buf.pop();
            }
        }
        let line = std::str::from_utf8(&buf).map_err(|e| Error::Corpus {
            path: path.to_path_buf(),
            line: n,
            reason: format!("invalid UTF-8 at byte {} of the line; convert the file to UTF-8", e.valid_up_to()),
        })?;
        f(n, line)?;
    }
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
