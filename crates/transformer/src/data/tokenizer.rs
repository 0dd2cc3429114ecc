//! The vocabulary of a model, whatever made it: the shared BPE model this project learns
//! ([`Bpe`]), or the SentencePiece models and vocabularies of an imported Marian / OPUS-MT model
//! ([`ImportedTokenizer`]). Every decoding verb takes one file, `--tokenizer` (alias `--bpe`), and
//! [`Tokenizer::load`] tells the two apart by content. The tokenizer encodes and decodes: a BPE
//! model as the task's [`TargetEncoding`] says, an imported one as its Marian model reads and
//! writes.

use crate::data::bpe::Bpe;
use crate::data::encoding::TargetEncoding;
use crate::data::marian_tokenizer::{MarianTokenizer, MARIAN_FORMAT};
use crate::error::{Error, Result};
use crate::vocab::{EOS, SPECIALS, UNK};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Which side of a translation a piece belongs to (they differ with separate vocabularies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Source (encoder) ids.
    Source,
    /// Target (decoder) ids.
    Target,
}

/// A model's vocabulary.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)] // one per session; the BPE model is the common case
pub enum Tokenizer {
    /// This project's byte-level BPE, one vocabulary for both sides.
    Bpe(Bpe),
    /// An imported Marian model's SentencePiece models and vocabularies, in our id order.
    Marian(Box<ImportedTokenizer>),
}

impl Tokenizer {
    /// Reads a tokenizer file: a Marian tokenizer written by `transformer import marian`, or a
    /// BPE model from `bpe learn` / `train`. Errors name the file.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(crate::io::io_err(path))?;
        // A safetensors checkpoint (8 bytes of header length, then its JSON header) or another
        // binary file given as the vocabulary: the BPE reader names and explains it.
        let checkpoint = bytes.len() >= 10 && bytes[8..].starts_with(b"{\"");
        let text = match String::from_utf8(bytes) {
            Ok(text) if !checkpoint => text,
            _ => return Ok(Tokenizer::Bpe(Bpe::load(path)?)),
        };
        let is_marian = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|j| j.get("format").and_then(|f| f.as_str()).map(|f| f == MARIAN_FORMAT))
            .unwrap_or(false);
        if is_marian {
            let hash = format!("sha256:{:x}", Sha256::digest(text.as_bytes()));
            Ok(Tokenizer::Marian(Box::new(ImportedTokenizer::new(MarianTokenizer::load(path)?, hash)?)))
        } else {
            Ok(Tokenizer::Bpe(Bpe::from_json(&text, path)?))
        }
    }

    /// The vocabulary's hash, stored in checkpoints to tie them to their vocabulary.
    pub fn hash(&self) -> &str {
        match self {
            Tokenizer::Bpe(b) => b.hash(),
            Tokenizer::Marian(m) => &m.hash,
        }
    }

    /// Target (output) ids: the model's `vocab_size`.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Bpe(b) => b.vocab_size(),
            Tokenizer::Marian(m) => m.target.len(),
        }
    }

    /// Source ids: the model's `source_vocab_size`, or `None` when the vocabulary is shared.
    pub fn source_vocab_size(&self) -> Option<usize> {
        match self {
            Tokenizer::Bpe(_) => None,
            Tokenizer::Marian(m) => m.inner.separate_vocabs().then(|| m.source.len()),
        }
    }

    /// The BPE model, for what only a BPE vocabulary supports (parsing, training).
    pub fn bpe(&self) -> Option<&Bpe> {
        match self {
            Tokenizer::Bpe(b) => Some(b),
            Tokenizer::Marian(_) => None,
        }
    }

    /// Token ids of a source line (no BOS; an imported Marian model's `</s>` included), beside
    /// targets encoded as `encoding` ([`TargetEncoding::encode_source`]). An imported tokenizer
    /// encodes translation only (sessions and data for other tasks refuse it first) and ignores
    /// `encoding`; so do [`Tokenizer::encode_target`] and [`Tokenizer::decode_target`].
    pub fn encode_source(&self, encoding: TargetEncoding, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Bpe(b) => encoding.encode_source(b, text),
            Tokenizer::Marian(m) => Ok(m.encode_source(text)),
        }
    }

    /// Token ids of a target line (no BOS/EOS), encoded as `encoding` says.
    pub fn encode_target(&self, encoding: TargetEncoding, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Bpe(b) => encoding.encode(b, text),
            Tokenizer::Marian(m) => Ok(m.encode_target(text)),
        }
    }

    /// The text of output ids ([`TargetEncoding::decode`]).
    pub fn decode_target(&self, encoding: TargetEncoding, ids: &[u32]) -> Result<String> {
        match self {
            Tokenizer::Bpe(b) => encoding.decode(b, ids),
            Tokenizer::Marian(m) => Ok(m.decode_target(ids)),
        }
    }

    /// Our id of a piece on `side`, spelled as the vocabulary spells it (`▁Hello` for a
    /// SentencePiece model, `Ġthe` for our byte-level BPE, `</s>` for the end): what a caller
    /// that tokenizes for itself passes (CTranslate2's token strings). `None` when unknown.
    pub fn id_of_piece(&self, side: Side, piece: &str) -> Option<u32> {
        match self {
            Tokenizer::Bpe(b) => b.id_of(piece),
            Tokenizer::Marian(m) => m.id_of_piece(side, piece),
        }
    }

    /// The piece of our id on `side`, as the vocabulary spells it; `None` for an id outside it.
    pub fn piece_of_id(&self, side: Side, id: u32) -> Option<String> {
        match self {
            Tokenizer::Bpe(b) => b.piece_of(id),
            Tokenizer::Marian(m) => {
                let size = if side == Side::Source { m.source.len() } else { m.target.len() };
                ((id as usize) < size).then(|| m.piece(side, id))
            }
        }
    }

    /// The source ids of pieces as the model reads them: an unknown piece is UNK, and an
    /// imported Marian model gets the `</s>` its encoder reads at the end (as
    /// [`Tokenizer::encode_source`] adds it; no pieces at all are `</s>` alone, as CTranslate2
    /// reads them), unless the pieces end with it.
    pub fn source_ids_of_pieces<S: AsRef<str>>(&self, pieces: &[S]) -> Vec<u32> {
        let mut ids: Vec<u32> =
            pieces.iter().map(|p| self.id_of_piece(Side::Source, p.as_ref()).unwrap_or(UNK)).collect();
        if matches!(self, Tokenizer::Marian(_)) && ids.last() != Some(&EOS) {
            ids.push(EOS);
        }
        ids
    }

    /// How a token stands to the words of the text: (it begins a word, it is the space mark
    /// alone). The space mark is `Ġ` for our byte-level BPE, `▁` for SentencePiece; special tokens
    /// are neither.
    pub fn word_mark(&self, side: Side, id: u32) -> (bool, bool) {
        let piece = match self {
            Tokenizer::Bpe(b) if (id as usize) >= SPECIALS.len() => b.piece_of(id).unwrap_or_default(),
            Tokenizer::Bpe(_) => String::new(),
            Tokenizer::Marian(m) => m.piece(side, id),
        };
        let mark = if matches!(self, Tokenizer::Bpe(_)) { '\u{120}' } else { '\u{2581}' };
        (piece.starts_with(mark), !piece.is_empty() && piece.chars().all(|c| c == mark))
    }

    /// The text of one piece for labels: a piece that starts a word begins with a space.
    pub fn piece_text(&self, side: Side, id: u32) -> Result<String> {
        match self {
            Tokenizer::Bpe(b) => b.decode(&[id]),
            Tokenizer::Marian(m) => Ok(m.piece(side, id).replace('\u{2581}', " ")),
        }
    }
}

impl From<Bpe> for Tokenizer {
    fn from(b: Bpe) -> Self {
        Tokenizer::Bpe(b)
    }
}

/// An imported Marian model's tokenizer, with the id maps between Marian's ids and ours.
#[derive(Clone)]
pub struct ImportedTokenizer {
    inner: MarianTokenizer,
    /// Marian's source ids ↔ ours.
    source: IdMap,
    /// Marian's target ids ↔ ours.
    target: IdMap,
    hash: String,
}

impl ImportedTokenizer {
    /// Wraps `inner` (read from a file whose hash is `hash`) with the id maps its special
    /// tokens define on each side ([`IdMap`]).
    pub fn new(inner: MarianTokenizer, hash: String) -> Result<Self> {
        let (eos, unk, pad) = inner.special_tokens();
        let map = |target: bool| -> Result<IdMap> {
            let (size, e, u, p) = match target {
                false => (
                    inner.vocab_size(),
                    inner.source_token_to_id(eos),
                    inner.source_token_to_id(unk),
                    inner.source_token_to_id(pad),
                ),
                true => (
                    inner.target_vocab_size(),
                    inner.target_token_to_id(eos),
                    inner.target_token_to_id(unk),
                    inner.target_token_to_id(pad),
                ),
            };
            let missing = |t: &str| Error::Import(format!("the Marian vocabulary has no {t:?}"));
            IdMap::new(size, p, e.ok_or_else(|| missing(eos))?, u.ok_or_else(|| missing(unk))?)
        };
        let (source, target) = (map(false)?, map(true)?);
        Ok(ImportedTokenizer { inner, source, target, hash })
    }

    /// The wrapped tokenizer (Marian's ids).
    pub fn inner(&self) -> &MarianTokenizer {
        &self.inner
    }

    /// Our ids of a source sentence, `</s>` included (Marian's encoder reads it).
    pub fn encode_source(&self, text: &str) -> Vec<u32> {
        self.inner.encode_source(text).into_iter().map(|id| self.source.ours(id)).collect()
    }

    /// Our ids of a target sentence, without the final `</s>` (our batches add EOS themselves).
    pub fn encode_target(&self, text: &str) -> Vec<u32> {
        let mut ids: Vec<u32> = self.inner.encode_target(text).into_iter().map(|id| self.target.ours(id)).collect();
        if ids.last() == Some(&EOS) {
            ids.pop();
        }
        ids
    }

    /// The text of our output ids, as `MarianTokenizer.decode(ids, skip_special_tokens=True)`.
    pub fn decode_target(&self, ids: &[u32]) -> String {
        let foreign: Vec<u32> = ids.iter().filter_map(|&id| self.target.foreign(id)).collect();
        self.inner.decode_target(&foreign)
    }

    /// The piece of our id on `side` ("" for the rows the import adds).
    pub fn piece(&self, side: Side, id: u32) -> String {
        let map = if side == Side::Source { &self.source } else { &self.target };
        match map.foreign(id) {
            Some(f) => match side {
                Side::Source => self.inner.source_id_to_piece(f),
                Side::Target => self.inner.id_to_piece(f),
            }
            .unwrap_or_default()
            .to_string(),
            None => SPECIALS.get(id as usize).map_or(String::new(), |s| s.to_string()),
        }
    }

    /// Our id of a piece on `side` (Marian's special tokens included); `None` when unknown.
    pub fn id_of_piece(&self, side: Side, piece: &str) -> Option<u32> {
        match side {
            Side::Source => self.inner.source_token_to_id(piece).map(|f| self.source.ours(f)),
            Side::Target => self.inner.target_token_to_id(piece).map(|f| self.target.ours(f)),
        }
    }

    /// The id maps (source, target).
    pub fn maps(&self) -> (&IdMap, &IdMap) {
        (&self.source, &self.target)
    }
}

/// How a foreign vocabulary's ids map onto this engine's, whose special tokens have fixed ids
/// (`<pad>` 0, `<s>` 1, `</s>` 2, `<unk>` 3, [`crate::vocab`]).
///
/// Our id 0 (padding) is a new row that the foreign model never reads or predicts. Our id 1 (the
/// decoder's first input) is the foreign model's decoder start token, its padding token for
/// Marian (absent in native Marian vocabularies, whose decoder starts from a zero vector: then a
/// new zero row). Our 2 and 3 are its `</s>` and `<unk>`; the foreign ids that remain follow in
/// their order from 4 on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMap {
    /// Foreign id → ours.
    to_ours: Vec<u32>,
    /// Our id → the foreign id, `None` for the rows the import adds.
    from_ours: Vec<Option<u32>>,
}

impl IdMap {
    /// The map for a foreign vocabulary of `size` ids with the given special ids.
    pub fn new(size: usize, start: Option<u32>, eos: u32, unk: u32) -> Result<Self> {
        let specials = [start, Some(eos), Some(unk)];
        let bad = |m: String| Err(Error::Import(m));
        for s in specials.iter().flatten() {
            if *s as usize >= size {
                return bad(format!("special id {s} outside the vocabulary of {size}"));
            }
        }
        if eos == unk || start == Some(eos) || start == Some(unk) {
            return bad(format!("the special ids must differ: start {start:?}, </s> {eos}, <unk> {unk}"));
        }
        let mut from_ours = vec![None, start, Some(eos), Some(unk)];
        from_ours.extend((0..size as u32).filter(|id| !specials.contains(&Some(*id))).map(Some));
        let mut to_ours = vec![0u32; size];
        for (ours, f) in from_ours.iter().enumerate() {
            if let Some(f) = f {
                to_ours[*f as usize] = ours as u32;
            }
        }
        Ok(IdMap { to_ours, from_ours })
    }

    /// Our vocabulary's size.
    pub fn len(&self) -> usize {
        self.from_ours.len()
    }

    /// Whether the map is empty (never: the specials are always there).
    pub fn is_empty(&self) -> bool {
        self.from_ours.is_empty()
    }

    /// Our id of a foreign id.
    pub fn ours(&self, foreign: u32) -> u32 {
        // An id outside the foreign vocabulary cannot come from it: unknown.
        self.to_ours.get(foreign as usize).copied().unwrap_or(UNK)
    }

    /// The foreign id of ours, `None` for a row the import added.
    pub fn foreign(&self, ours: u32) -> Option<u32> {
        self.from_ours.get(ours as usize).copied().flatten()
    }

    /// Every foreign id in our order (`None` for added rows).
    pub fn order(&self) -> &[Option<u32>] {
        &self.from_ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_land_on_our_ids_and_the_rest_keep_their_order() {
        // Marian: </s> 0, <unk> 1, pieces 2..5, <pad> 6.
        let m = IdMap::new(7, Some(6), 0, 1).unwrap();
        assert_eq!(m.len(), 8);
        assert_eq!(m.order(), &[None, Some(6), Some(0), Some(1), Some(2), Some(3), Some(4), Some(5)]);
        assert_eq!((m.ours(6), m.ours(0), m.ours(1), m.ours(2), m.ours(5)), (1, 2, 3, 4, 7));
        for f in 0..7 {
            assert_eq!(m.foreign(m.ours(f)), Some(f));
        }
        // Native Marian: no padding token, the decoder starts from a new zero row.
        let n = IdMap::new(6, None, 0, 1).unwrap();
        assert_eq!(n.order()[..3], [None, None, Some(0)]);
        assert!(IdMap::new(6, None, 0, 0).is_err());
        assert!(IdMap::new(6, Some(9), 0, 1).is_err());
    }
}
