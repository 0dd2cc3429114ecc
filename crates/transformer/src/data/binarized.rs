//! Binarised training data: BPE token ids of every kept pair in two flat files, with offsets,
//! memory-mapped for training. A WMT-size corpus (millions of pairs) then trains without its text
//! or per-sentence vectors in memory; the operating system pages the ids in as batches need them.
//!
//! Layout of a directory written by [`prepare`]:
//! - `src.bin`, `tgt.bin`: little-endian u32 token ids, pairs concatenated;
//! - `src.idx`, `tgt.idx`: little-endian u64 offsets (in tokens), n + 1 of them;
//! - `meta.json`: format version, vocabulary hash, pair count, filter report, and the SHA-256 of
//!   each of the four files, checked (with the offsets) by [`Binarized::open`].

use super::corpus;
use super::encoding::TargetEncoding;
use super::parallel::{FilterConfig, FilterReport};
use super::tokenizer::Tokenizer;
use crate::error::{Error, Result};
use crate::events::Events;
use crate::io::{io_err, write_atomically};
use sha2::{Digest, Sha256};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Format version written in meta.json. Version 2 added the checksums; a version-1 directory is
/// refused with the advice to prepare it again.
pub const FORMAT_VERSION: u32 = 2;

/// The four data files of a prepared directory.
const FILES: [&str; 4] = ["src.bin", "src.idx", "tgt.bin", "tgt.idx"];

struct Writer {
    bin: BufWriter<std::fs::File>,
    idx: BufWriter<std::fs::File>,
    sha: (Sha256, Sha256),
    offset: u64,
    paths: (PathBuf, PathBuf),
    buf: Vec<u8>,
}

impl Writer {
    fn create(dir: &Path, side: &str) -> Result<Writer> {
        let (b, i) = (dir.join(format!("{side}.bin")), dir.join(format!("{side}.idx")));
        let bin = BufWriter::with_capacity(1 << 20, std::fs::File::create(&b).map_err(io_err(&b))?);
        let mut idx = BufWriter::with_capacity(1 << 20, std::fs::File::create(&i).map_err(io_err(&i))?);
        idx.write_all(&0u64.to_le_bytes()).map_err(io_err(&i))?;
        let mut sha = (Sha256::new(), Sha256::new());
        sha.1.update(0u64.to_le_bytes());
        Ok(Writer { bin, idx, sha, offset: 0, paths: (b, i), buf: Vec::new() })
    }
    fn push(&mut self, ids: &[u32]) -> Result<()> {
        self.buf.clear();
        self.buf.extend(ids.iter().flat_map(|id| id.to_le_bytes()));
        self.bin.write_all(&self.buf).map_err(io_err(&self.paths.0))?;
        self.sha.0.update(&self.buf);
        self.offset += ids.len() as u64;
        self.sha.1.update(self.offset.to_le_bytes());
        self.idx.write_all(&self.offset.to_le_bytes()).map_err(io_err(&self.paths.1))
    }
    /// Flushes both files and returns their SHA-256 (bin, idx) in hex.
    fn finish(mut self) -> Result<(String, String)> {
        self.bin.flush().map_err(io_err(&self.paths.0))?;
        self.idx.flush().map_err(io_err(&self.paths.1))?;
        Ok((hex(self.sha.0.finalize()), hex(self.sha.1.finalize())))
    }
}

fn hex(digest: impl AsRef<[u8]>) -> String {
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Streams `src`/`tgt` (line-aligned, plain or .gz) through the tokenizer and `filter` into `out`, a few
/// thousand lines at a time. Misalignment is an error naming both files.
pub fn prepare(
    src: &Path,
    tgt: &Path,
    tokenizer: &Tokenizer,
    filter: &FilterConfig,
    out: &Path,
    events: &mut dyn Events,
) -> Result<FilterReport> {
    let (mut rs, mut rt) = (corpus::Lines::open(src)?, corpus::Lines::open(tgt)?);
    let mut n = 0;
    let mut next_chunk = |chunk: &mut Vec<(String, String)>| -> Result<()> {
        while chunk.len() < CHUNK {
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
        Ok(())
    };
    write_prepared(TargetEncoding::Bpe, &mut next_chunk, tokenizer, filter, out, events)
}

/// [`prepare`] for pairs already read (for parsing, from a treebank), their targets encoded as
/// `target` says.
pub fn prepare_pairs(
    pairs: Vec<(String, String)>,
    target: TargetEncoding,
    tokenizer: &Tokenizer,
    filter: &FilterConfig,
    out: &Path,
    events: &mut dyn Events,
) -> Result<FilterReport> {
    let mut pairs = pairs.into_iter();
    let mut next_chunk = |chunk: &mut Vec<(String, String)>| -> Result<()> {
        chunk.extend(pairs.by_ref().take(CHUNK));
        Ok(())
    };
    write_prepared(target, &mut next_chunk, tokenizer, filter, out, events)
}

/// Fills a chunk with the next pairs (fewer than [`CHUNK`] at the end).
type NextChunk<'a> = &'a mut dyn FnMut(&mut Vec<(String, String)>) -> Result<()>;

/// Pairs encoded and written at a time.
const CHUNK: usize = 10_000;

/// Encodes, filters and writes the pairs `next_chunk` gives (up to [`CHUNK`] a call; fewer means
/// the end) into `out`.
fn write_prepared(
    target: TargetEncoding,
    next_chunk: NextChunk<'_>,
    tokenizer: &Tokenizer,
    filter: &FilterConfig,
    out: &Path,
    events: &mut dyn Events,
) -> Result<FilterReport> {
    filter.validate(("max_tokens", "max_ratio"))?;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let (mut ws, mut wt) = (Writer::create(out, "src")?, Writer::create(out, "tgt")?);
    let mut report = FilterReport::default();
    let mut chunk: Vec<(String, String)> = Vec::with_capacity(CHUNK);
    loop {
        chunk.clear();
        next_chunk(&mut chunk)?;
        if chunk.is_empty() {
            break;
        }
        let (pairs, r) = super::parallel::encode_and_filter_for(target, &chunk, tokenizer, filter)?;
        report.read += r.read;
        report.kept += r.kept;
        report.empty += r.empty;
        report.too_long += r.too_long;
        report.bad_ratio += r.bad_ratio;
        for (s, t) in &pairs {
            ws.push(s)?;
            wt.push(t)?;
        }
        if report.read % 500_000 < CHUNK {
            events.log(&format!("{} pairs read, {} kept", report.read, report.kept));
        }
        if chunk.len() < CHUNK {
            break;
        }
    }
    let (src_bin, src_idx) = ws.finish()?;
    let (tgt_bin, tgt_idx) = wt.finish()?;
    let mut meta = serde_json::json!({
        "format": "transformer-binarized", "format_version": FORMAT_VERSION, "vocab_hash": tokenizer.hash(),
        "pairs": report.kept, "read": report.read, "empty": report.empty, "too_long": report.too_long, "bad_ratio": report.bad_ratio,
        "sha256": {"src.bin": src_bin, "src.idx": src_idx, "tgt.bin": tgt_bin, "tgt.idx": tgt_idx},
    });
    if let TargetEncoding::Tree(format) = target {
        meta["tree_format"] = format.name().into();
    }
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
    /// For trees, the format their targets were written in (`tags+words` for directories that
    /// predate the field); `None` for translation.
    pub tree_format: Option<crate::data::trees::TreeFormat>,
}

fn map(path: &Path) -> Result<memmap2::Mmap> {
    let f = std::fs::File::open(path).map_err(io_err(path))?;
    // SAFETY: the file is opened read-only and the project never writes a prepared directory while
    // a run reads it; a concurrent external modification is the one case memory maps cannot guard.
    unsafe { memmap2::Mmap::map(&f) }.map_err(io_err(path))
}

impl Binarized {
    /// Opens a directory written by [`prepare`], checking its files against meta.json and each
    /// other: the offsets (as many as the pairs plus one, from 0, never decreasing, ending at the
    /// token file's length) and the SHA-256 of every file. Any mismatch is an error naming the file.
    pub fn open(dir: &Path) -> Result<Binarized> {
        let meta_path = dir.join("meta.json");
        let bad = |file: &str, reason: String| Error::PreparedData { path: dir.join(file), reason };
        let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(&meta_path).map_err(io_err(&meta_path))?)
            .map_err(|e| bad("meta.json", format!("not JSON ({e})")))?;
        if meta["format"] != "transformer-binarized" {
            return Err(bad("meta.json", "not the meta.json of a prepared directory".into()));
        }
        if meta["format_version"] != FORMAT_VERSION {
            return Err(bad(
                "meta.json",
                format!(
                    "format version {}, this program reads version {FORMAT_VERSION} (with checksums)",
                    meta["format_version"]
                ),
            ));
        }
        let len = meta["pairs"].as_u64().ok_or_else(|| bad("meta.json", "no pair count".into()))? as usize;
        let maps: Vec<memmap2::Mmap> = FILES.iter().map(|f| map(&dir.join(f))).collect::<Result<_>>()?;
        for (idx, bin) in [(1, 0), (3, 2)] {
            Self::check_offsets(&maps[idx], (FILES[bin], maps[bin].len()), len).map_err(|r| bad(FILES[idx], r))?;
        }
        for (file, data) in FILES.iter().zip(&maps) {
            let want =
                meta["sha256"][file].as_str().ok_or_else(|| bad("meta.json", format!("no SHA-256 for {file}")))?;
            let found = hex(Sha256::digest(&data[..]));
            if found != want {
                return Err(bad(file, format!("SHA-256 is {found}, meta.json says {want}: the file is corrupt")));
            }
        }
        let Ok([src, src_idx, tgt, tgt_idx]) = <[memmap2::Mmap; 4]>::try_from(maps) else { unreachable!("four files") };
        let vocab_hash = meta["vocab_hash"].as_str().unwrap_or("").to_string();
        let tree_format = match meta.get("tree_format") {
            None => None,
            Some(v) => Some(v.as_str().and_then(crate::data::trees::TreeFormat::from_name).ok_or_else(|| {
                bad("meta.json", format!("unknown tree_format {v}: this program writes \"tags+words\" or \"tags\""))
            })?),
        };
        Ok(Binarized { src, tgt, src_idx, tgt_idx, len, vocab_hash, tree_format })
    }

    /// Checks an offsets file against the pair count and its token file's (name, length in bytes).
    fn check_offsets(idx: &[u8], (bin, bin_bytes): (&str, usize), len: usize) -> std::result::Result<(), String> {
        let expected = len.checked_add(1).and_then(|n| n.checked_mul(8));
        if expected != Some(idx.len()) {
            return Err(format!(
                "{} bytes, expected {} for the {len} pairs of meta.json (truncated?)",
                idx.len(),
                expected.map_or_else(|| "more than can exist".to_string(), |e| e.to_string())
            ));
        }
        let tokens = (bin_bytes / 4) as u64;
        if bin_bytes % 4 != 0 || Self::offset(idx, len) != tokens {
            return Err(format!(
                "the last offset is {} but {bin} holds {bin_bytes} bytes ({tokens} tokens) (truncated?)",
                Self::offset(idx, len)
            ));
        }
        let mut prev = Self::offset(idx, 0);
        if prev != 0 {
            return Err(format!("the first offset is {prev}, not 0"));
        }
        for i in 1..=len {
            let o = Self::offset(idx, i);
            if o < prev || o > tokens {
                return Err(format!("offset {i} is {o}, outside {prev}..={tokens}"));
            }
            prev = o;
        }
        Ok(())
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
