//! The importer's reads of small files (settings, vocabularies, YAML, SentencePiece models): each
//! through a size bound, regular files only, every error naming the file.

use crate::data::sentencepiece::SentencePiece;
use crate::error::{Error, Result};
use std::io::Read;
use std::path::Path;

fn err(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Import(format!("{}: {msg}", path.display()))
}

/// Largest configuration, vocabulary or YAML file read (the largest Marian vocabularies, 250k
/// pieces, are about 6 MB).
const MAX_TEXT_BYTES: u64 = 32 << 20;
/// Largest SentencePiece model read (OPUS-MT's are under 1 MB).
const MAX_SPM_BYTES: u64 = 64 << 20;

/// The whole of `path`, at most `limit` bytes: a larger file is refused before it fills memory,
/// and so is anything but a regular file (a device that never ends, a pipe that never closes).
fn read_limited(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).map_err(crate::io::io_err(path))?;
    if !meta.is_file() {
        return Err(err(path, format!("not a regular file (a device or a pipe): not {what}")));
    }
    let file = std::fs::File::open(path).map_err(crate::io::io_err(path))?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(crate::io::io_err(path))?;
    if bytes.len() as u64 > limit {
        return Err(err(path, format!("larger than {limit} bytes: too large for {what}")));
    }
    Ok(bytes)
}

pub(super) fn read_text(path: &Path, what: &str) -> Result<String> {
    let bytes = read_limited(path, MAX_TEXT_BYTES, what)?;
    String::from_utf8(bytes).map_err(|_| err(path, format!("not UTF-8 text: not {what}")))
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = read_text(path, "a JSON file")?;
    serde_json::from_str(&text).map_err(|e| err(path, format!("not valid JSON: {e}")))
}

/// A JSON file that must hold an object (`config.json`, `tokenizer_config.json`).
pub(super) fn read_json_object(path: &Path) -> Result<serde_json::Value> {
    let json = read_json(path)?;
    if !json.is_object() {
        return Err(err(path, "not a JSON object of settings (`{\"key\": value, …}`)"));
    }
    Ok(json)
}

/// A SentencePiece model's bytes, read with a bound and checked to parse, so that a bad file is
/// named here rather than when the tokenizer is built.
pub(super) fn read_spm(path: &Path) -> Result<Vec<u8>> {
    let bytes = read_limited(path, MAX_SPM_BYTES, "a SentencePiece model")?;
    SentencePiece::from_bytes(&bytes).map_err(|e| err(path, format!("not a SentencePiece model: {e}")))?;
    Ok(bytes)
}
