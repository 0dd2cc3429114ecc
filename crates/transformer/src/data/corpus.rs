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

/// A line reader over a file or stream: every line end (`\n`, `\r\n`, and a lone `\r` as old Mac
/// files have) removed, a UTF-8 byte-order mark at the start of the first line dropped, invalid
/// UTF-8 an error naming the source (a path, or a name like `<stdin>`) and the line.
pub struct Lines {
    reader: Box<dyn BufRead>,
    buf: Vec<u8>,
    name: PathBuf,
    n: usize,
    /// The last line ended with `\r`: a `\n` that follows belongs to that line end.
    after_cr: bool,
}

/// The UTF-8 byte-order mark some editors put at the start of a file.
pub const BOM: &str = "\u{feff}";

impl Lines {
    /// Lines of a plain or gzip (`.gz`) file.
    pub fn open(path: &Path) -> Result<Lines> {
        Ok(Self::from_reader(open(path)?, path))
    }

    /// Lines of any buffered reader; `name` appears in errors.
    pub fn from_reader(reader: Box<dyn BufRead>, name: impl Into<PathBuf>) -> Lines {
        Lines { reader, buf: Vec::new(), name: name.into(), n: 0, after_cr: false }
    }

    /// The 1-based number of the line last returned.
    pub fn line_number(&self) -> usize {
        self.n
    }

    /// The next line, or `None` at the end. A line end is never waited for past the line: after a
    /// `\r` the reader does not block on stdin to see whether a `\n` follows.
    pub fn next_line(&mut self) -> Result<Option<&str>> {
        self.buf.clear();
        let mut found = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(Error::Io { path: self.name.clone(), source }),
            };
            if available.is_empty() {
                break;
            }
            let start = usize::from(std::mem::take(&mut self.after_cr) && available[0] == b'\n');
            let rest = &available[start..];
            let (used, ended) = match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    self.buf.extend_from_slice(&rest[..i]);
                    self.after_cr = rest[i] == b'\r';
                    (start + i + 1, true)
                }
                None => {
                    self.buf.extend_from_slice(rest);
                    (available.len(), false)
                }
            };
            found |= ended || used > start;
            self.reader.consume(used);
            if ended {
                break;
            }
        }
        if !found {
            return Ok(None);
        }
        if self.n == 0 && self.buf.starts_with(BOM.as_bytes()) {
            self.buf.drain(..BOM.len());
        }
        self.n += 1;
        std::str::from_utf8(&self.buf).map(Some).map_err(|e| Error::Corpus {
            path: self.name.clone(),
            line: self.n,
            reason: format!("invalid UTF-8 at byte {} of the line; convert the file to UTF-8", e.valid_up_to()),
        })
    }
}

/// A line of input as a user means it: a byte-order mark and line-end characters at its ends
/// removed, and a line of nothing but whitespace read as the empty line (which gives empty output,
/// never invented text). Every front end that takes sentences (`translate`, `parse`, `evaluate`,
/// the server) reads them through this.
pub fn input_line(line: &str) -> &str {
    let line = line.strip_prefix(BOM).unwrap_or(line).trim_end_matches(['\r', '\n']);
    if line.trim().is_empty() {
        ""
    } else {
        line
    }
}

/// `text` with its line ends (`\r\n`, a lone `\r`) made `\n` and a leading byte-order mark dropped,
/// for readers that take a whole file at once (trees).
pub fn normalise_line_ends(text: &str) -> std::borrow::Cow<'_, str> {
    let text = text.strip_prefix(BOM).unwrap_or(text);
    if text.contains('\r') {
        std::borrow::Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        std::borrow::Cow::Borrowed(text)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(bytes: &'static [u8], chunk: usize) -> Vec<String> {
        // A reader that hands out `chunk` bytes at a time, so line ends fall across reads.
        let reader = BufReader::with_capacity(chunk, bytes);
        let mut lines = Lines::from_reader(Box::new(reader), "<test>");
        let mut out = Vec::new();
        while let Some(l) = lines.next_line().unwrap() {
            out.push(l.to_string());
        }
        assert_eq!(lines.line_number(), out.len());
        out
    }

    #[test]
    fn every_line_end_ends_a_line_and_a_bom_is_dropped() {
        let want = ["a", "b", "c", " \t", "", "d"];
        for chunk in [1, 2, 3, 64] {
            assert_eq!(lines_of(b"\xEF\xBB\xBFa\r\nb\rc\n \t\n\nd\r", chunk), want, "chunk {chunk}");
            assert_eq!(lines_of(b"a\nb\nc\n \t\n\nd", chunk), want, "chunk {chunk}");
            assert_eq!(lines_of(b"a\r\nb\r\nc\r\n \t\r\n\r\nd\r\n", chunk), want, "chunk {chunk}");
            assert_eq!(lines_of(b"a\rb\rc\r \t\r\rd", chunk), want, "chunk {chunk}");
        }
        assert!(lines_of(b"", 4).is_empty());
        assert_eq!(lines_of(b"\r\n", 4), [""]);
        assert_eq!(lines_of(b"\n\n", 1), ["", ""]);
        // Only the first line's mark is dropped: a later one is text.
        assert_eq!(lines_of("x\n\u{feff}y".as_bytes(), 4), ["x", "\u{feff}y"]);
    }

    #[test]
    fn invalid_utf8_names_the_real_line_after_any_line_end() {
        let mut lines = Lines::from_reader(Box::new(&b"ok\rstill ok\r\n\xff\n"[..]), "f.txt");
        assert_eq!(lines.next_line().unwrap(), Some("ok"));
        assert_eq!(lines.next_line().unwrap(), Some("still ok"));
        let e = lines.next_line().unwrap_err().to_string();
        assert!(e.contains("f.txt") && e.contains('3'), "{e}");
    }

    #[test]
    fn an_input_line_is_read_as_meant() {
        assert_eq!(input_line("\u{feff}A dog.\r\n"), "A dog.");
        assert_eq!(input_line("   "), "");
        assert_eq!(input_line("\t \u{3000}"), "");
        assert_eq!(input_line("\u{feff}"), "");
        assert_eq!(input_line("  two spaces kept inside  "), "  two spaces kept inside  ");
        assert_eq!(normalise_line_ends("\u{feff}a\r\nb\rc\n"), "a\nb\nc\n");
        assert!(matches!(normalise_line_ends("a\nb"), std::borrow::Cow::Borrowed(_)));
    }
}
