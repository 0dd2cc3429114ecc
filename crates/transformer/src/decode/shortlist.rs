//! Vocabulary shortlists (Marian's `--shortlist`, CTranslate2's vocabulary map): the table and
//! its file. [`Shortlist::learn`] counts, over the training pairs (token ids), how
//! often each target token appears in a pair with each source token, and keeps for each source
//! token the `per_source` targets of highest p(t | s) = c(s, t) / c(s) (co-occurrence, ties by
//! count then id), beside the `frequent` most frequent targets. [`Shortlist::for_sources`] is the
//! union a batch of sources may write: decoding with a list ([`crate::decode::translator::Translator::set_shortlist`],
//! `DecodeOptions::use_shortlist`) computes the output layer over that union only.
//!
//! The file is JSON: `{"format": "transformer-shortlist-1", "vocab_hash": H, "vocab_size": V,
//! "frequent": [ids], "sources": {"id": [ids], ...}}`, H the tokenizer's hash.

use crate::error::{Error, Result};
use crate::vocab::{EOS, UNK};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// The format name a shortlist file carries.
pub const FORMAT: &str = "transformer-shortlist-1";

/// The largest shortlist file read (a table of 64k sources × 1k targets in JSON fits).
const MAX_FILE_BYTES: u64 = 1 << 30;

/// Target tokens per source token, and the most frequent targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shortlist {
    /// [`FORMAT`].
    pub format: String,
    /// The hash of the tokenizer whose ids these are.
    pub vocab_hash: String,
    /// Its vocabulary size: every id is below it.
    pub vocab_size: usize,
    /// The most frequent target tokens, most frequent first.
    pub frequent: Vec<u32>,
    /// Per source token (its id as a string, as JSON keys are), its targets, best first.
    pub sources: BTreeMap<String, Vec<u32>>,
}

impl Shortlist {
    /// The table of `pairs` (source and target token ids, without BOS/EOS) for a vocabulary of
    /// `vocab_size` ids hashed `vocab_hash`.
    pub fn learn(
        pairs: &[(Vec<u32>, Vec<u32>)],
        vocab_size: usize,
        vocab_hash: &str,
        per_source: usize,
        frequent: usize,
    ) -> Result<Self> {
        if let Some(id) = pairs.iter().flat_map(|(s, t)| s.iter().chain(t)).find(|&&id| id as usize >= vocab_size) {
            return Err(Error::Input(format!("token id {id} outside the vocabulary of {vocab_size}")));
        }
        // c(s, t): the pairs holding both; c(t): t's occurrences. (c(s), p(t | s)'s denominator,
        // orders none of a source's targets, so it is not counted.)
        let (mut cst, mut ct) = (HashMap::new(), HashMap::new());
        for (src, tgt) in pairs {
            let (mut s, mut t) = (src.clone(), tgt.clone());
            for &x in tgt {
                *ct.entry(x).or_insert(0u64) += 1;
            }
            s.sort_unstable();
            s.dedup();
            t.sort_unstable();
            t.dedup();
            for &a in &s {
                for &b in &t {
                    *cst.entry((a, b)).or_insert(0u64) += 1;
                }
            }
        }
        let mut by_source: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
        for (&(a, b), &n) in &cst {
            by_source.entry(a).or_default().push((b, n));
        }
        let mut sources = BTreeMap::new();
        for (a, mut list) in by_source {
            // p(t | s) = c(s, t) / c(s) orders a source's targets as c(s, t) does.
            list.sort_unstable_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            list.truncate(per_source);
            sources.insert(a.to_string(), list.into_iter().map(|x| x.0).collect());
        }
        let mut freq: Vec<(u32, u64)> = ct.into_iter().collect();
        freq.sort_unstable_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
        freq.truncate(frequent);
        Ok(Shortlist {
            format: FORMAT.into(),
            vocab_hash: vocab_hash.into(),
            vocab_size,
            frequent: freq.into_iter().map(|x| x.0).collect(),
            sources,
        })
    }

    /// The sorted target ids a batch of `sources` may write: every listed target of their
    /// tokens, the frequent ones, `</s>` and `<unk>`.
    pub fn for_sources<S: AsRef<[u32]>>(&self, sources: &[S]) -> Vec<u32> {
        let mut out: Vec<u32> = vec![EOS, UNK];
        out.extend(&self.frequent);
        for s in sources {
            for id in s.as_ref() {
                if let Some(list) = self.sources.get(&id.to_string()) {
                    out.extend(list);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Writes the table to `path` (atomically: a reader never sees half a file).
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_vec(self).map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
        crate::io::write_atomically(path, &json)
    }

    /// Reads a table from `path` and checks it against the tokenizer it is used with (its hash
    /// and size): a file of another format, vocabulary or id range is an error naming the file.
    pub fn load(path: &Path, vocab_hash: &str, vocab_size: usize) -> Result<Self> {
        let bad = |m: String| Error::Input(format!("{}: {m}", path.display()));
        let meta = std::fs::metadata(path).map_err(crate::io::io_err(path))?;
        if !meta.is_file() {
            return Err(bad("not a regular file".into()));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(bad(format!("{} bytes, more than a shortlist's {MAX_FILE_BYTES}", meta.len())));
        }
        let bytes = std::fs::read(path).map_err(crate::io::io_err(path))?;
        let s: Shortlist = serde_json::from_slice(&bytes)
            .map_err(|e| bad(format!("not a shortlist ({e}): make one with `transformer shortlist`")))?;
        if s.format != FORMAT {
            return Err(bad(format!("format {:?}, expected {FORMAT:?}", s.format)));
        }
        if s.vocab_hash != vocab_hash || s.vocab_size != vocab_size {
            return Err(bad(format!(
                "made for vocabulary {} ({} ids), but the model's is {vocab_hash} ({vocab_size}): make it again with this model's tokenizer",
                s.vocab_hash, s.vocab_size
            )));
        }
        for (k, list) in &s.sources {
            let key_ok = k.parse::<u32>().is_ok_and(|id| (id as usize) < vocab_size);
            if !key_ok {
                return Err(bad(format!("source key {k:?} is not an id below {vocab_size}")));
            }
            if let Some(id) = list.iter().find(|&&id| id as usize >= vocab_size) {
                return Err(bad(format!("target id {id} of source {k} is outside the vocabulary of {vocab_size}")));
            }
        }
        if let Some(id) = s.frequent.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(bad(format!("frequent id {id} is outside the vocabulary of {vocab_size}")));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Shortlist {
        let pairs = vec![
            (vec![10], vec![20, 20]),
            (vec![10, 11], vec![20, 21]),
            (vec![11], vec![22]),
            (vec![12], vec![22, 22]),
        ];
        Shortlist::learn(&pairs, 30, "sha256:x", 2, 1).unwrap()
    }

    #[test]
    fn hand_counted_table() {
        let s = table();
        // 10: c(10,20) = 2, c(10,21) = 1. 11: 20, 21 and 22 tie at 1; the lower ids win.
        assert_eq!(s.sources["10"], [20, 21]);
        assert_eq!(s.sources["11"], [20, 21]);
        assert_eq!(s.sources["12"], [22]);
        // Targets 20 and 22 occur 3 times each; the lower id wins.
        assert_eq!(s.frequent, [20]);
        assert_eq!(s.for_sources(&[vec![12], vec![]]), [EOS, UNK, 20, 22]);
        assert_eq!(s.for_sources(&[vec![11, 12]]), [EOS, UNK, 20, 21, 22]);
        assert_eq!(s.for_sources::<Vec<u32>>(&[]), [EOS, UNK, 20]);
        assert!(Shortlist::learn(&[(vec![31], vec![1])], 30, "h", 1, 1).is_err());
    }

    #[test]
    fn files_round_trip_and_refuse_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        let s = table();
        s.save(&p).unwrap();
        assert_eq!(Shortlist::load(&p, "sha256:x", 30).unwrap(), s);
        let e = Shortlist::load(&p, "sha256:y", 30).unwrap_err().to_string();
        assert!(e.contains("s.json") && e.contains("make it again"), "{e}");
        for (text, want) in [
            ("{}", "not a shortlist"),
            (r#"{"format":"x","vocab_hash":"sha256:x","vocab_size":30,"frequent":[],"sources":{}}"#, "format \"x\""),
            (
                r#"{"format":"transformer-shortlist-1","vocab_hash":"sha256:x","vocab_size":30,"frequent":[],"sources":{"a":[1]}}"#,
                "source key \"a\"",
            ),
            (
                r#"{"format":"transformer-shortlist-1","vocab_hash":"sha256:x","vocab_size":30,"frequent":[],"sources":{"3":[30]}}"#,
                "target id 30 of source 3",
            ),
            (
                r#"{"format":"transformer-shortlist-1","vocab_hash":"sha256:x","vocab_size":30,"frequent":[99],"sources":{}}"#,
                "frequent id 99",
            ),
        ] {
            std::fs::write(&p, text).unwrap();
            let e = Shortlist::load(&p, "sha256:x", 30).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
        assert!(Shortlist::load(dir.path(), "sha256:x", 30).unwrap_err().to_string().contains("not a regular file"));
    }
}
