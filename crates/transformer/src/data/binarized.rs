//! Binarised training data: BPE token ids of every kept pair in two flat files, with offsets,
//! memory-mapped for training. A WMT-size corpus (millions of pairs) then trains without its text
//! or per-sentence vectors in memory; the operating system pages the ids in as batches need them.
//!
//! Layout of a directory written by [`prepare`]:
//! - `src.bin`, `tgt.bin`: little-endian u32 token ids, pairs concatenated;
//! - `src.idx`, `tgt.idx`: little-endian u64 offsets (in tokens), n + 1 of them;
//! - `meta.json`: format version, vocabulary hash, pair count, filter report.

use super::bpe::Bpe;
use super::corpus;
use super::parallel::{FilterConfig, FilterReport};
use crate::error::{Error, Result};
use crate::io::{io_err, write_atomically};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Format version written in meta.json.
pub const FORMAT_VERSION: u32 = 1;

struct Writer {
    bin: BufWriter<std::fs::File>,
    idx: BufWriter<std::fs::File>,
    offset: u64,
    paths: (PathBuf, PathBuf),
}

impl Writer {
    fn create(dir: &Path, side: &str) -> Result<Writer> {
        let (b, i) = (dir.join(format!("{side}.bin")), dir.join(format!("{side}.idx")));
        let bin = BufWriter::with_capacity(1 << 20, std::fs::File::create(&b).map_err(io_err(&b))?);
        let mut idx = BufWriter::with_capacity(1 << 20, std::fs::File::create(&i).map_err(io_err(&i))?);
        idx.write_all(&0u64.to_le_bytes()).map_err(io_err(&i))?;
        Ok(Writer { bin, idx, offset: 0, paths: (b, i) })
    }
    fn push(&mut self, ids: &[u32]) -> Result<()> {
        for id in ids {
            self.bin.write_all(&id.to_le_bytes()).map_err(io_err(&self.paths.0))?;
        }
        self.offset += ids.len() as u64;
        self.idx.write_all(&self.offset.to_le_bytes()).map_err(io_err(&self.paths.1))
    }
    fn finish(mut self) -> Result<()> {
        self.bin.flush().map_err(io_err(&self.paths.0))?;
        self.idx.flush().map_err(io_err(&self.paths.1))
    }
}

/// Streams `src`/`tgt` (line-aligned, plain or .gz) through BPE and `filter` into `out`, a few
/// thousand lines at a time. Misalignment is an error naming both files.
pub fn prepare(
    src: &Path,
    tgt: &Path,
    bpe: &Bpe,
    filter: &FilterConfig,
    out: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<FilterReport> {
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let (mut rs, mut rt) = (corpus::Lines::open(src)?, corpus::Lines::open(tgt)?);
    let (mut ws, mut wt) = (Writer::create(out, "src")?, Writer::create(out, "tgt")?);
    let mut report = FilterReport::default();
    let mut chunk: Vec<(String, String)> = Vec::with_capacity(10_000);
    let mut n = 0;
    loop {
        chunk.clear();
        while chunk.len() < 10_000 {
            n += 1;
            match (rs.next_line()?.map(str::to_string), rt.next_line()?) {
                (Some(s), Some(t)) => chunk.push((s, t.to_string())),
                (None, None) => break,
                (s, _) => {
                    let (ended, goes_on) = if s.is_none() { (src, tgt) } else { (tgt, src) };
                    return Err(Error::Corpus {
                        path: goes_on.to_path_buf(),
                        line: n,
                        reason: format!(
                            "{} ends after {} lines but this file goes on: the corpora are not line-aligned",
                            ended.display(),
                            n - 1
                        ),
                    });
                }
            }
        }
        if chunk.is_empty() {
            break;
        }
        let (pairs, r) = super::parallel::encode_and_filter(&chunk, bpe, filter)?;
        report.read += r.read;
        report.kept += r.kept;
        report.empty += r.empty;
        report.too_long += r.too_long;
        report.bad_ratio += r.bad_ratio;
        for (s, t) in &pairs {
            ws.push(s)?;
            wt.push(t)?;
        }
        if report.read % 500_000 < 10_000 {
            log(&format!("{} pairs read, {} kept", report.read, report.kept));
        }
        if chunk.len() < 10_000 {
            break;
        }
    }
    ws.finish()?;
    wt.finish()?;
    let meta = serde_json::json!({
        "format": "transformer-binarized", "format_version": FORMAT_VERSION, "vocab_hash": bpe.hash(),
        "pairs": report.kept, "read": report.read, "empty": report.empty, "too_long": report.too_long, "bad_ratio": report.bad_ratio,
    });
    write_atomically(&out.join("meta.json"), meta.to_string().as_bytes())?;
    Ok(report)
}

/// A memory-mapped binarised corpus.
pub struct Binarized {
    src: memmap2::Mmap,
    tgt: memmap2::Mmap,
    src_idx: memmap2::Mmap,
    tgt_idx: memmap2::Mmap,
    len: usize,
    /// The vocabulary hash it was prepared with.
    pub vocab_hash: String,
}

fn map(path: &Path) -> Result<memmap2::Mmap> {
    let f = std::fs::File::open(path).map_err(io_err(path))?;
    // SAFETY: the file is opened read-only and the project never writes a prepared directory while
    // a run reads it; a concurrent external modification is the one case memory maps cannot guard.
    unsafe { memmap2::Mmap::map(&f) }.map_err(io_err(path))
}

impl Binarized {
    /// Opens a directory written by [`prepare`], checking its files against each other.
    pub fn open(dir: &Path) -> Result<Binarized> {
        let bad = |reason: String| Error::Corpus { path: dir.to_path_buf(), line: 0, reason };
        let meta_path = dir.join("meta.json");
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&meta_path).map_err(io_err(&meta_path))?)
                .map_err(|e| bad(format!("meta.json is not JSON ({e}); run `transformer prepare` again")))?;
        if meta["format"] != "transformer-binarized" || meta["format_version"] != FORMAT_VERSION {
            return Err(bad("not a prepared directory of this version; run `transformer prepare` again".into()));
        }
        let len = meta["pairs"].as_u64().ok_or_else(|| bad("meta.json lacks the pair count".into()))? as usize;
        let b = Binarized {
            src: map(&dir.join("src.bin"))?,
            tgt: map(&dir.join("tgt.bin"))?,
            src_idx: map(&dir.join("src.idx"))?,
            tgt_idx: map(&dir.join("tgt.idx"))?,
            len,
            vocab_hash: meta["vocab_hash"].as_str().unwrap_or("").to_string(),
        };
        for (idx, bin, name) in [(&b.src_idx, &b.src, "src"), (&b.tgt_idx, &b.tgt, "tgt")] {
            if idx.len() != (len + 1) * 8 || Self::offset(idx, len) * 4 != bin.len() as u64 {
                return Err(bad(format!(
                    "{name}.idx/{name}.bin do not match meta.json (truncated?); run `transformer prepare` again"
                )));
            }
        }
        Ok(b)
    }

    fn offset(idx: &[u8], i: usize) -> u64 {
        u64::from_le_bytes(idx[i * 8..i * 8 + 8].try_into().unwrap())
    }

    fn ids(bin: &[u8], idx: &[u8], i: usize) -> Vec<u32> {
        let (a, b) = (Self::offset(idx, i) as usize, Self::offset(idx, i + 1) as usize);
        bin[a * 4..b * 4].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    }

    /// Pairs in the corpus.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no pair.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Token counts (source, target) of pair `i`.
    pub fn lengths(&self, i: usize) -> (usize, usize) {
        let l = |idx: &[u8]| (Self::offset(idx, i + 1) - Self::offset(idx, i)) as usize;
        (l(&self.src_idx), l(&self.tgt_idx))
    }

    /// Pair `i` as token ids.
    pub fn pair(&self, i: usize) -> (Vec<u32>, Vec<u32>) {
        (Self::ids(&self.src, &self.src_idx, i), Self::ids(&self.tgt, &self.tgt_idx, i))
    }
}

/// Training pairs by index, in memory or memory-mapped.
pub trait Pairs {
    /// Number of pairs.
    fn count(&self) -> usize;
    /// Token counts (source, target) of pair `i`.
    fn lengths_of(&self, i: usize) -> (usize, usize);
    /// Pair `i` as token ids.
    fn get(&self, i: usize) -> (Vec<u32>, Vec<u32>);
}

impl Pairs for super::parallel::TokenPairs {
    fn count(&self) -> usize {
        self.len()
    }
    fn lengths_of(&self, i: usize) -> (usize, usize) {
        (self[i].0.len(), self[i].1.len())
    }
    fn get(&self, i: usize) -> (Vec<u32>, Vec<u32>) {
        self[i].clone()
    }
}

impl Pairs for Binarized {
    fn count(&self) -> usize {
        self.len()
    }
    fn lengths_of(&self, i: usize) -> (usize, usize) {
        self.lengths(i)
    }
    fn get(&self, i: usize) -> (Vec<u32>, Vec<u32>) {
        self.pair(i)
    }
}
