//! SentencePiece models read from `.spm` / `.model` files, giving the same pieces and ids as
//! Python's `sentencepiece` (0.2.x). The Marian tokenizer built on two of them is
//! [`super::marian_tokenizer`].
//!
//! The rules follow sentencepiece's C++ sources (`normalizer.cc`, `unigram_model.cc`
//! `EncodeOptimized`, `bpe_model.cc`, `sentencepiece_processor.cc`): the normaliser's longest-match
//! rewriting through the precompiled character map, whitespace handling and the dummy prefix; the
//! unigram Viterbi search with its tie-breaking and its bonus for user-defined symbols; BPE merges
//! highest score first, leftmost on ties, with unused pieces split back; unknown pieces merged or
//! expanded into byte pieces; and decoding with its leading-space rule.
//!
//! The model file is a protobuf `ModelProto`; the few fields used are read here by hand.

use crate::error::{Error, Result};
use crate::io::io_err;
use std::collections::HashMap;
use std::path::Path;

/// The escaped space, U+2581 LOWER ONE EIGHTH BLOCK.
pub(crate) const SPACE_SYMBOL: &str = "\u{2581}";
/// What decoding writes for the unknown piece unless the model names another `unk_surface`.
const DEFAULT_UNK_SURFACE: &str = " \u{2047} ";
/// The unknown piece's score is the lowest normal piece's score minus this (`kUnkPenalty`).
const UNK_PENALTY: f32 = 10.0;
/// The normaliser looks at no more than this many trie matches per position (`kMaxTrieResultsSize`).
const MAX_TRIE_RESULTS: usize = 32;

fn spm_err(reason: impl std::fmt::Display) -> Error {
    Error::Input(format!("not a usable SentencePiece model: {reason}"))
}

// ---------------------------------------------------------------------------------------------
// Protobuf wire format: just enough to read ModelProto.

/// One field of a protobuf message: its number and its value.
enum Field<'a> {
    Varint(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
    Fixed64,
}

/// Iterates over the fields of one protobuf message.
struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(data: &'a [u8]) -> Self {
        Fields { data, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.data.get(self.pos).ok_or_else(|| spm_err("the protobuf data ends inside a number"))?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(spm_err("a protobuf number is longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or_else(|| spm_err("the protobuf data ends inside a field"))?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn next_field(&mut self) -> Result<Option<(u64, Field<'a>)>> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed64
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| spm_err("a protobuf field is too long"))?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Field::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            wire => return Err(spm_err(format!("unsupported protobuf wire type {wire}"))),
        };
        Ok(Some((key >> 3, value)))
    }
}

fn field_str<'a>(value: &Field<'a>, what: &str) -> Result<&'a str> {
    match value {
        Field::Bytes(b) => std::str::from_utf8(b).map_err(|_| spm_err(format!("{what} is not UTF-8"))),
        _ => Err(spm_err(format!("{what} has the wrong protobuf type"))),
    }
}

fn field_bytes<'a>(value: &Field<'a>, what: &str) -> Result<&'a [u8]> {
    match value {
        Field::Bytes(b) => Ok(b),
        _ => Err(spm_err(format!("{what} has the wrong protobuf type"))),
    }
}

fn field_varint(value: &Field, what: &str) -> Result<u64> {
    match value {
        Field::Varint(v) => Ok(*v),
        _ => Err(spm_err(format!("{what} has the wrong protobuf type"))),
    }
}

/// An `int32` field: negative values travel as 64-bit two's complement.
fn field_i32(value: &Field, what: &str) -> Result<i32> {
    Ok(field_varint(value, what)? as i64 as i32)
}

// ---------------------------------------------------------------------------------------------
// Model data.

/// The kind of a vocabulary entry (`ModelProto.SentencePiece.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceType {
    /// An ordinary piece.
    Normal,
    /// The unknown piece (`<unk>`).
    Unknown,
    /// A control symbol (`<s>`, `</s>`): never produced from text, invisible when decoded.
    Control,
    /// A user-defined symbol: always kept whole, never normalised.
    UserDefined,
    /// A piece in the vocabulary that encoding must not produce.
    Unused,
    /// A byte piece `<0xXX>` (byte fallback).
    Byte,
}

#[derive(Clone, Debug)]
struct Piece {
    piece: String,
    score: f32,
    kind: PieceType,
}

/// The model kind (`TrainerSpec.model_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelType {
    /// Unigram language model (Viterbi segmentation).
    Unigram,
    /// Byte-pair encoding.
    Bpe,
}

/// A byte trie with sorted children: finds every piece that is a prefix of a text, shortest first.
#[derive(Clone, Debug, Default)]
struct Trie {
    /// Per node: its children as (byte, node), sorted by byte.
    children: Vec<Vec<(u8, u32)>>,
    /// Per node: the value of the key ending there.
    values: Vec<Option<u32>>,
}

impl Trie {
    fn new() -> Self {
        Trie { children: vec![Vec::new()], values: vec![None] }
    }

    fn insert(&mut self, key: &[u8], value: u32) {
        let mut node = 0usize;
        for &b in key {
            node = match self.children[node].binary_search_by_key(&b, |c| c.0) {
                Ok(i) => self.children[node][i].1 as usize,
                Err(i) => {
                    let next = self.children.len();
                    self.children.push(Vec::new());
                    self.values.push(None);
                    self.children[node].insert(i, (b, next as u32));
                    next
                }
            };
        }
        self.values[node] = Some(value);
    }

    /// Calls `f(length, value)` for every key that is a prefix of `text`, shortest first.
    fn prefixes(&self, text: &[u8], mut f: impl FnMut(usize, u32)) {
        let mut node = 0usize;
        for (i, &b) in text.iter().enumerate() {
            match self.children[node].binary_search_by_key(&b, |c| c.0) {
                Ok(k) => node = self.children[node][k].1 as usize,
                Err(_) => return,
            }
            if let Some(v) = self.values[node] {
                f(i + 1, v);
            }
        }
    }

    /// The length of the longest key that is a prefix of `text`, if any.
    fn longest_prefix(&self, text: &[u8]) -> Option<usize> {
        let mut longest = None;
        self.prefixes(text, |len, _| longest = Some(len));
        longest
    }
}

/// The byte length of the UTF-8 character starting with `lead`, as sentencepiece's `OneCharLen`
/// reads it from the lead byte alone (continuation and invalid bytes count as 1).
fn one_char_len(lead: u8) -> usize {
    const LEN: [u8; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LEN[(lead >> 4) as usize] as usize
}

/// Sentencepiece's `IsValidDecodeUTF8`: whether `s` starts with a valid UTF-8 character, and how
/// many bytes it takes (1 for an invalid byte). Surrogates, overlong forms and values above
/// U+10FFFF are invalid.
fn decode_utf8_prefix(s: &[u8]) -> (bool, usize) {
    let valid_cp = |c: u32| c < 0xD800 || (0xE000..=0x10FFFF).contains(&c);
    let trail = |b: u8| b & 0xC0 == 0x80;
    let b0 = s[0];
    if b0 < 0x80 {
        return (true, 1);
    }
    if s.len() >= 2 && b0 & 0xE0 == 0xC0 {
        let c = (u32::from(b0 & 0x1F) << 6) | u32::from(s[1] & 0x3F);
        if trail(s[1]) && c >= 0x80 && valid_cp(c) {
            return (true, 2);
        }
    } else if s.len() >= 3 && b0 & 0xF0 == 0xE0 {
        let c = (u32::from(b0 & 0x0F) << 12) | (u32::from(s[1] & 0x3F) << 6) | u32::from(s[2] & 0x3F);
        if trail(s[1]) && trail(s[2]) && c >= 0x800 && valid_cp(c) {
            return (true, 3);
        }
    } else if s.len() >= 4 && b0 & 0xF8 == 0xF0 {
        let c = (u32::from(b0 & 0x07) << 18)
            | (u32::from(s[1] & 0x3F) << 12)
            | (u32::from(s[2] & 0x3F) << 6)
            | u32::from(s[3] & 0x3F);
        if trail(s[1]) && trail(s[2]) && trail(s[3]) && c >= 0x10000 && valid_cp(c) {
            return (true, 4);
        }
    }
    (false, 1)
}

// ---------------------------------------------------------------------------------------------
// The precompiled character map: a Darts-clone double-array trie plus replacement strings.

#[derive(Clone, Debug)]
struct CharsMap {
    /// The double-array units.
    units: Vec<u32>,
    /// The replacement strings, each ended by NUL; trie values are offsets into this.
    normalized: Vec<u8>,
}

impl CharsMap {
    /// Splits the blob: a little-endian u32 trie size in bytes, the trie, the replacement strings.
    fn parse(blob: &[u8]) -> Result<Self> {
        if blob.len() <= 4 {
            return Err(spm_err("the normaliser's precompiled_charsmap is broken (too short)"));
        }
        let trie_size = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
        if trie_size >= blob.len() || !trie_size.is_multiple_of(4) {
            return Err(spm_err("the normaliser's precompiled_charsmap is broken (bad trie size)"));
        }
        let units = blob[4..4 + trie_size]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<_>>();
        if units.is_empty() {
            return Err(spm_err("the normaliser's precompiled_charsmap has an empty trie"));
        }
        Ok(CharsMap { units, normalized: blob[4 + trie_size..].to_vec() })
    }

    /// Darts' `commonPrefixSearch`: the longest rule among the first [`MAX_TRIE_RESULTS`] rules
    /// matching a prefix of `key`, as (prefix length, replacement). A corrupt trie that points
    /// outside itself ends the search instead of failing.
    fn longest_match(&self, key: &[u8]) -> Option<(usize, &[u8])> {
        let unit = |pos: usize| self.units.get(pos).copied();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let has_leaf = |u: u32| (u >> 8) & 1 == 1;
        let label = |u: u32| u & ((1 << 31) | 0xFF);
        let value = |u: u32| (u & 0x7FFF_FFFF) as usize;

        let mut best: Option<(usize, usize)> = None;
        let mut found = 0usize;
        let mut pos = offset(unit(0)?);
        for (i, &b) in key.iter().enumerate() {
            pos ^= b as usize;
            let u = unit(pos)?;
            if label(u) != u32::from(b) {
                break;
            }
            pos ^= offset(u);
            if has_leaf(u) {
                if found < MAX_TRIE_RESULTS {
                    // Results come shortest first, so the last one kept is the longest.
                    best = Some((i + 1, value(unit(pos)?)));
                }
                found += 1;
            }
        }
        let (len, start) = best?;
        let rest = self.normalized.get(start..)?;
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        Some((len, &rest[..end]))
    }
}

/// The normaliser's settings (`NormalizerSpec`) and its character map.
#[derive(Clone, Debug)]
struct Normalizer {
    charsmap: Option<CharsMap>,
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
    treat_whitespace_as_suffix: bool,
}

impl Normalizer {
    /// Reads a `NormalizerSpec` message.
    fn parse(data: &[u8], treat_whitespace_as_suffix: bool) -> Result<Self> {
        let mut n = Normalizer {
            charsmap: None,
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
            treat_whitespace_as_suffix,
        };
        let mut fields = Fields::new(data);
        while let Some((number, value)) = fields.next_field()? {
            match number {
                2 => {
                    let blob = field_bytes(&value, "normalizer_spec.precompiled_charsmap")?;
                    n.charsmap = if blob.is_empty() { None } else { Some(CharsMap::parse(blob)?) };
                }
                3 => n.add_dummy_prefix = field_varint(&value, "normalizer_spec.add_dummy_prefix")? != 0,
                4 => {
                    n.remove_extra_whitespaces = field_varint(&value, "normalizer_spec.remove_extra_whitespaces")? != 0
                }
                5 => n.escape_whitespaces = field_varint(&value, "normalizer_spec.escape_whitespaces")? != 0,
                _ => {}
            }
        }
        Ok(n)
    }

    /// `NormalizePrefix`: what the text at the start of `input` becomes, and how many bytes it
    /// consumes. A user-defined symbol is kept as it is; otherwise the longest rule of the
    /// character map applies; otherwise one character is copied (an invalid byte becomes U+FFFD).
    fn normalize_prefix<'a>(&'a self, input: &'a [u8], user: Option<&Trie>) -> (&'a [u8], usize) {
        if let Some(len) = user.and_then(|t| t.longest_prefix(input)) {
            return (&input[..len], len);
        }
        if let Some((len, replacement)) = self.charsmap.as_ref().and_then(|m| m.longest_match(input)) {
            return (replacement, len);
        }
        match decode_utf8_prefix(input) {
            (true, len) => (&input[..len], len),
            (false, _) => ("\u{FFFD}".as_bytes(), 1),
        }
    }

    /// `Normalizer::Normalize`: rewrites `input` and applies the whitespace rules.
    fn normalize(&self, input: &[u8], user: Option<&Trie>) -> Vec<u8> {
        let mut input = input;
        let mut out = Vec::with_capacity(input.len() * 3);
        if input.is_empty() {
            return out;
        }
        // Leading whitespace goes: only prefixes that normalise to exactly one space count.
        if self.remove_extra_whitespaces {
            while !input.is_empty() {
                let (s, len) = self.normalize_prefix(input, user);
                if s != b" " {
                    break;
                }
                input = &input[len..];
            }
        }
        if input.is_empty() {
            return out;
        }
        let space: &[u8] = if self.escape_whitespaces { SPACE_SYMBOL.as_bytes() } else { b" " };
        if !self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.extend_from_slice(space);
        }
        let mut prev_space = self.remove_extra_whitespaces;
        while !input.is_empty() {
            let (mut s, len) = self.normalize_prefix(input, user);
            // After a space, the spaces a rule's output starts with are dropped (runs collapse).
            while prev_space && s.first() == Some(&b' ') {
                s = &s[1..];
            }
            if !s.is_empty() {
                for &b in s {
                    if self.escape_whitespaces && b == b' ' {
                        out.extend_from_slice(SPACE_SYMBOL.as_bytes());
                    } else {
                        out.push(b);
                    }
                }
                prev_space = s.last() == Some(&b' ');
            }
            input = &input[len..];
            if !self.remove_extra_whitespaces {
                prev_space = false;
            }
        }
        if self.remove_extra_whitespaces {
            while out.ends_with(space) {
                out.truncate(out.len() - space.len());
            }
        }
        if self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.extend_from_slice(space);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// The model.

/// A SentencePiece model (unigram or BPE) as read from a `.spm` / `.model` file.
#[derive(Clone)]
pub struct SentencePiece {
    /// The file's bytes, kept so the model can be written out again unchanged.
    bytes: Vec<u8>,
    pieces: Vec<Piece>,
    /// Normal, user-defined and unused pieces → id.
    piece_ids: HashMap<String, u32>,
    /// Unknown, control and byte pieces → id (looked up before `piece_ids`, as the C++ does).
    reserved_ids: HashMap<String, u32>,
    model_type: ModelType,
    byte_fallback: bool,
    unk_id: u32,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    pad_id: Option<u32>,
    unk_surface: String,
    normalizer: Normalizer,
    denormalizer: Option<Normalizer>,
    /// The user-defined symbols, matched longest first; `None` when there are none.
    user_symbols: Option<Trie>,
    /// Normal, user-defined and unused pieces (the unigram lattice's candidates).
    trie: Trie,
    /// Lowest score of a normal piece (the unknown piece scores 10 less).
    min_score: f32,
    /// Highest score of a normal piece, but at least `f32::MIN_POSITIVE` (the C++ starts from
    /// `FLT_MIN`): user-defined symbols score `length × max_score − 0.1`.
    max_score: f32,
    /// Byte value → id of its `<0xXX>` piece (byte fallback only).
    byte_ids: Vec<u32>,
}

impl std::fmt::Debug for SentencePiece {
    // The model's tables are large; show what identifies it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentencePiece")
            .field("model_type", &self.model_type)
            .field("pieces", &self.pieces.len())
            .field("byte_fallback", &self.byte_fallback)
            .field("unk_id", &self.unk_id)
            .finish_non_exhaustive()
    }
}

/// A byte range of the normalised text: (start, length).
type Span = (usize, usize);
/// BPE: merged unused piece → the two pieces it was made from.
type RevMerge = HashMap<Vec<u8>, (Span, Span)>;

/// The piece naming byte `b` (`<0x41>`).
fn byte_piece(b: u8) -> String {
    format!("<0x{b:02X}>")
}

/// The byte a `<0xXX>` piece names (upper-case hex digits only, as sentencepiece writes them).
fn piece_byte(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c)) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

impl SentencePiece {
    /// Reads a model from the bytes of a `.spm` / `.model` file (a serialised `ModelProto`).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut pieces = Vec::new();
        let mut trainer: &[u8] = &[];
        let mut normalizer: &[u8] = &[];
        let mut denormalizer: Option<&[u8]> = None;
        let mut fields = Fields::new(bytes);
        while let Some((number, value)) = fields.next_field()? {
            match number {
                1 => pieces.push(parse_piece(field_bytes(&value, "a piece")?)?),
                2 => trainer = field_bytes(&value, "trainer_spec")?,
                3 => normalizer = field_bytes(&value, "normalizer_spec")?,
                5 => denormalizer = Some(field_bytes(&value, "denormalizer_spec")?),
                _ => {}
            }
        }
        if pieces.is_empty() {
            return Err(spm_err("it holds no pieces (is this a SentencePiece .model/.spm file?)"));
        }

        // TrainerSpec: only the fields that change encoding or decoding.
        let mut model_type = 1u64;
        let (mut byte_fallback, mut suffix) = (false, false);
        let (mut bos, mut eos, mut pad) = (1i32, 2i32, -1i32);
        let mut unk_surface = DEFAULT_UNK_SURFACE.to_string();
        let mut fields = Fields::new(trainer);
        while let Some((number, value)) = fields.next_field()? {
            match number {
                3 => model_type = field_varint(&value, "trainer_spec.model_type")?,
                24 => suffix = field_varint(&value, "trainer_spec.treat_whitespace_as_suffix")? != 0,
                35 => byte_fallback = field_varint(&value, "trainer_spec.byte_fallback")? != 0,
                41 => bos = field_i32(&value, "trainer_spec.bos_id")?,
                42 => eos = field_i32(&value, "trainer_spec.eos_id")?,
                43 => pad = field_i32(&value, "trainer_spec.pad_id")?,
                44 => unk_surface = field_str(&value, "trainer_spec.unk_surface")?.to_string(),
                _ => {}
            }
        }
        let model_type = match model_type {
            1 => ModelType::Unigram,
            2 => ModelType::Bpe,
            3 => return Err(spm_err("it is a WORD model; only unigram and BPE models are supported")),
            4 => return Err(spm_err("it is a CHAR model; only unigram and BPE models are supported")),
            t => return Err(spm_err(format!("unknown model_type {t}"))),
        };
        let normalizer = Normalizer::parse(normalizer, suffix)?;
        // A denormaliser only acts when it has rules; it never sees the suffix flag.
        let denormalizer = match denormalizer {
            Some(d) => Some(Normalizer::parse(d, false)?).filter(|n| n.charsmap.is_some()),
            None => None,
        };

        // The checks of `ModelInterface::InitializePieces`.
        let mut piece_ids = HashMap::new();
        let mut reserved_ids = HashMap::new();
        let mut user = Trie::new();
        let mut has_user = false;
        let mut unk_id = None;
        let mut byte_ids = vec![u32::MAX; 256];
        let (mut min_score, mut max_score) = (f32::MAX, f32::MIN_POSITIVE);
        for (i, p) in pieces.iter().enumerate() {
            let id = i as u32;
            if p.piece.is_empty() {
                return Err(spm_err(format!("piece {i} is empty")));
            }
            let normal = matches!(p.kind, PieceType::Normal | PieceType::UserDefined | PieceType::Unused);
            let map = if normal { &mut piece_ids } else { &mut reserved_ids };
            if map.insert(p.piece.clone(), id).is_some() {
                return Err(spm_err(format!("piece {:?} is defined twice", p.piece)));
            }
            match p.kind {
                PieceType::UserDefined => {
                    user.insert(p.piece.as_bytes(), id);
                    has_user = true;
                }
                PieceType::Unknown if unk_id.is_some() => {
                    return Err(spm_err("it defines the unknown piece twice"));
                }
                PieceType::Unknown => unk_id = Some(id),
                PieceType::Byte => {
                    if !byte_fallback {
                        return Err(spm_err(format!("byte piece {} found although byte_fallback is off", p.piece)));
                    }
                    let b = piece_byte(&p.piece).ok_or_else(|| spm_err(format!("invalid byte piece {}", p.piece)))?;
                    byte_ids[b as usize] = id;
                }
                PieceType::Normal => {
                    min_score = min_score.min(p.score);
                    max_score = max_score.max(p.score);
                }
                _ => {}
            }
        }
        let unk_id = unk_id.ok_or_else(|| spm_err("it has no unknown piece"))?;
        if byte_fallback && byte_ids.contains(&u32::MAX) {
            return Err(spm_err("byte_fallback is on but not all 256 byte pieces are present"));
        }
        let mut trie = Trie::new();
        for (piece, &id) in &piece_ids {
            trie.insert(piece.as_bytes(), id);
        }
        let id_of = |v: i32| u32::try_from(v).ok().filter(|&v| (v as usize) < pieces.len());
        Ok(SentencePiece {
            bytes: bytes.to_vec(),
            model_type,
            byte_fallback,
            unk_id,
            bos_id: id_of(bos),
            eos_id: id_of(eos),
            pad_id: id_of(pad),
            unk_surface,
            normalizer,
            denormalizer,
            user_symbols: has_user.then_some(user),
            trie,
            min_score,
            max_score,
            byte_ids,
            piece_ids,
            reserved_ids,
            pieces,
        })
    }

    /// Reads a model file; errors name the file.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        Self::from_bytes(&bytes).map_err(|e| Error::Input(format!("{}: {e}", path.display())))
    }

    /// The bytes of the model file this model was read from.
    pub fn to_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The model kind.
    pub fn model_type(&self) -> ModelType {
        self.model_type
    }

    /// The number of pieces (ids run from 0 to this, exclusive).
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// Whether the model has no pieces (never true for a loaded model).
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The id of `piece`, or the unknown id when it is not in the vocabulary (as sentencepiece).
    pub fn piece_to_id(&self, piece: &str) -> u32 {
        self.reserved_ids.get(piece).or_else(|| self.piece_ids.get(piece)).copied().unwrap_or(self.unk_id)
    }

    /// The piece of `id`, or `None` when out of range.
    pub fn id_to_piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize).map(|p| p.piece.as_str())
    }

    /// The kind of piece `id`, or `None` when out of range.
    pub fn piece_type(&self, id: u32) -> Option<PieceType> {
        self.pieces.get(id as usize).map(|p| p.kind)
    }

    /// The score of piece `id`, or `None` when out of range.
    pub fn score(&self, id: u32) -> Option<f32> {
        self.pieces.get(id as usize).map(|p| p.score)
    }

    /// The unknown piece's id.
    pub fn unk_id(&self) -> u32 {
        self.unk_id
    }

    /// The begin-of-sentence id, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    /// The end-of-sentence id, if the model has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    /// The padding id, if the model has one.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad_id
    }

    fn kind(&self, id: u32) -> PieceType {
        self.pieces[id as usize].kind
    }

    /// The normalised text, as sentencepiece's normaliser makes it (spaces escaped as `▁`).
    pub fn normalize(&self, text: &str) -> String {
        let out = self.normalizer.normalize(text.as_bytes(), self.user_symbols.as_ref());
        String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// Pieces of `text`, as Python's `sp.encode(text, out_type=str)`.
    pub fn encode(&self, text: &str) -> Vec<String> {
        self.encode_with_ids(text).into_iter().map(|(p, _)| p).collect()
    }

    /// Ids of `text`, as Python's `sp.encode(text)`.
    pub fn encode_ids(&self, text: &str) -> Vec<u32> {
        self.encode_with_ids(text).into_iter().map(|(_, i)| i).collect()
    }

    /// Pieces of `text` with their ids. Consecutive unknown pieces come out merged into one (its
    /// text is the unknown characters); with byte fallback an unknown piece becomes the byte
    /// pieces of its UTF-8 bytes instead.
    pub fn encode_with_ids(&self, text: &str) -> Vec<(String, u32)> {
        let normalized = self.normalizer.normalize(text.as_bytes(), self.user_symbols.as_ref());
        let segments = match self.model_type {
            ModelType::Unigram => self.encode_unigram(&normalized),
            ModelType::Bpe => self.encode_bpe(&normalized),
        };
        // `PopulateSentencePieceText`.
        let mut out: Vec<(Vec<u8>, u32)> = Vec::with_capacity(segments.len());
        let mut prev_unk = false;
        for (start, end, id) in segments {
            let w = &normalized[start..end];
            let unk = self.kind(id) == PieceType::Unknown;
            if unk && self.byte_fallback {
                out.extend(w.iter().map(|&b| (byte_piece(b).into_bytes(), self.byte_ids[b as usize])));
            } else if unk && prev_unk {
                if let Some(last) = out.last_mut() {
                    last.0.extend_from_slice(w);
                }
            } else {
                out.push((w.to_vec(), id));
            }
            prev_unk = unk;
        }
        out.into_iter()
            .map(|(p, id)| {
                (String::from_utf8(p).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()), id)
            })
            .collect()
    }

    /// `unigram::Model::EncodeOptimized`: the best-scoring segmentation, found left to right. For
    /// every end position it keeps the best path ending there; a candidate replaces it only when
    /// strictly better, so among equal scores the first found (earliest start, then shortest
    /// piece) wins. Returns (start, end, id) byte ranges of `normalized`.
    fn encode_unigram(&self, normalized: &[u8]) -> Vec<(usize, usize, u32)> {
        #[derive(Clone, Copy)]
        struct Best {
            id: u32,
            score: f32,
            start: Option<usize>,
        }
        let size = normalized.len();
        if size == 0 {
            return Vec::new();
        }
        let unk_score = self.min_score - UNK_PENALTY;
        let mut best = vec![Best { id: self.unk_id, score: 0.0, start: None }; size + 1];
        let mut start = 0usize;
        while start < size {
            let till_here = best[start].score;
            let mblen = one_char_len(normalized[start]).min(size - start);
            let mut has_single = false;
            self.trie.prefixes(&normalized[start..], |len, id| {
                let piece = &self.pieces[id as usize];
                if piece.kind == PieceType::Unused {
                    return;
                }
                // The C++ computes this sum in double (the user-defined bonus is a double
                // expression) and stores it as float; do the same so ties break identically.
                let score: f64 = if piece.kind == PieceType::UserDefined {
                    f64::from(len as f32 * self.max_score) - 0.1
                } else {
                    f64::from(piece.score)
                };
                let candidate = score + f64::from(till_here);
                let target = &mut best[start + len];
                if target.start.is_none() || candidate > f64::from(target.score) {
                    *target = Best { id, score: candidate as f32, start: Some(start) };
                }
                if len == mblen {
                    has_single = true;
                }
            });
            if !has_single {
                // No piece covers this character alone: it may be an unknown piece.
                let candidate = unk_score + till_here;
                let target = &mut best[start + mblen];
                if target.start.is_none() || candidate > target.score {
                    *target = Best { id: self.unk_id, score: candidate, start: Some(start) };
                }
            }
            start += mblen;
        }
        let mut out = Vec::new();
        let mut end = size;
        while end > 0 {
            let node = best[end];
            // Every end reached by `start += mblen` has a path; other ends are never visited.
            let start = node.start.unwrap_or(0);
            out.push((start, end, node.id));
            end = start;
        }
        out.reverse();
        out
    }

    /// `bpe::Model::Encode`: starts from characters (user-defined symbols whole and frozen) and
    /// repeatedly merges the adjacent pair whose joined piece scores highest, the leftmost on
    /// ties. Merged pieces of type unused are split back into the pieces they were merged from.
    fn encode_bpe(&self, normalized: &[u8]) -> Vec<(usize, usize, u32)> {
        use std::cmp::Ordering;
        use std::collections::BinaryHeap;

        struct Symbol {
            prev: Option<usize>,
            next: Option<usize>,
            freeze: bool,
            start: usize,
            len: usize,
        }
        struct Pair {
            left: usize,
            right: usize,
            score: f32,
            size: usize,
        }
        impl PartialEq for Pair {
            fn eq(&self, other: &Self) -> bool {
                self.cmp(other) == Ordering::Equal
            }
        }
        impl Eq for Pair {}
        impl PartialOrd for Pair {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for Pair {
            // The heap's top is the highest score, then the smallest left index.
            fn cmp(&self, other: &Self) -> Ordering {
                self.score.partial_cmp(&other.score).unwrap_or(Ordering::Equal).then_with(|| other.left.cmp(&self.left))
            }
        }

        let mut symbols: Vec<Symbol> = Vec::new();
        let mut pos = 0usize;
        while pos < normalized.len() {
            let rest = &normalized[pos..];
            let user = self.user_symbols.as_ref().and_then(|t| t.longest_prefix(rest));
            let len = user.unwrap_or_else(|| one_char_len(rest[0]).min(rest.len()));
            let index = symbols.len();
            symbols.push(Symbol {
                prev: index.checked_sub(1),
                next: (pos + len < normalized.len()).then_some(index + 1),
                freeze: user.is_some(),
                start: pos,
                len,
            });
            pos += len;
        }
        if symbols.is_empty() {
            return Vec::new();
        }

        // Merged unused piece → the two pieces it was made from (byte ranges).
        let mut rev_merge: RevMerge = HashMap::new();
        let mut agenda = BinaryHeap::new();
        let add_pair = |symbols: &Vec<Symbol>,
                        agenda: &mut BinaryHeap<Pair>,
                        rev_merge: &mut RevMerge,
                        left: Option<usize>,
                        right: Option<usize>| {
            let (Some(left), Some(right)) = (left, right) else { return };
            let (l, r) = (&symbols[left], &symbols[right]);
            if l.freeze || r.freeze {
                return;
            }
            let piece = &normalized[l.start..l.start + l.len + r.len];
            let Some(&id) = std::str::from_utf8(piece).ok().and_then(|p| self.piece_ids.get(p)) else {
                return;
            };
            let p = &self.pieces[id as usize];
            agenda.push(Pair { left, right, score: p.score, size: piece.len() });
            if p.kind == PieceType::Unused {
                rev_merge.insert(piece.to_vec(), ((l.start, l.len), (r.start, r.len)));
            }
        };
        for i in 1..symbols.len() {
            add_pair(&symbols, &mut agenda, &mut rev_merge, Some(i - 1), Some(i));
        }
        while let Some(top) = agenda.pop() {
            let (l, r) = (&symbols[top.left], &symbols[top.right]);
            // A pair is stale once either side changed: pieces only grow or empty, so the sum of
            // their lengths tells.
            if l.len == 0 || r.len == 0 || l.len + r.len != top.size {
                continue;
            }
            let right_next = r.next;
            let right_len = r.len;
            symbols[top.left].len += right_len;
            symbols[top.left].next = right_next;
            if let Some(n) = right_next {
                symbols[n].prev = Some(top.left);
            }
            symbols[top.right].len = 0;
            let prev = symbols[top.left].prev;
            add_pair(&symbols, &mut agenda, &mut rev_merge, prev, Some(top.left));
            add_pair(&symbols, &mut agenda, &mut rev_merge, Some(top.left), right_next);
        }

        let mut out = Vec::new();
        let mut index = Some(0usize);
        while let Some(i) = index {
            let s = &symbols[i];
            self.resegment(normalized, s.start, s.len, &rev_merge, &mut out);
            index = s.next;
        }
        out
    }

    /// Splits a merged unused piece back into its parts, recursively.
    fn resegment(
        &self,
        normalized: &[u8],
        start: usize,
        len: usize,
        rev_merge: &RevMerge,
        out: &mut Vec<(usize, usize, u32)>,
    ) {
        let w = &normalized[start..start + len];
        let id = std::str::from_utf8(w).map(|p| self.piece_to_id(p)).unwrap_or(self.unk_id);
        if self.kind(id) == PieceType::Unused {
            if let Some(&((ls, ll), (rs, rl))) = rev_merge.get(w) {
                self.resegment(normalized, ls, ll, rev_merge, out);
                self.resegment(normalized, rs, rl, rev_merge, out);
                return;
            }
        }
        out.push((start, start + len, id));
    }

    /// Text of `ids`, as Python's `sp.decode(ids)`. Ids out of range are an error.
    pub fn decode_ids(&self, ids: &[u32]) -> Result<String> {
        let pieces = ids
            .iter()
            .map(|&id| {
                self.id_to_piece(id).ok_or_else(|| {
                    Error::Input(format!("SentencePiece id {id} is out of range (the model has {} pieces)", self.len()))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.decode_pieces(&pieces))
    }

    /// Text of `pieces`, as Python's `sp.decode_pieces(pieces)`: `▁` becomes a space; control
    /// pieces vanish; the unknown piece becomes the unknown surface (` ⁇ `) while other text that
    /// is not a piece is copied as it is; runs of byte pieces are joined into UTF-8 (invalid bytes
    /// become U+FFFD). The leading space of the first piece goes: with `remove_extra_whitespaces`
    /// every leading `▁` of pieces before any text, otherwise only the first piece's.
    pub fn decode_pieces<S: AsRef<str>>(&self, pieces: &[S]) -> String {
        let remove_extra = self.normalizer.remove_extra_whitespaces;
        let strip_bos = self.normalizer.add_dummy_prefix || remove_extra;
        let mut text: Vec<u8> = Vec::new();
        let mut bytes: Vec<u8> = Vec::new();
        let mut is_bos_ws = true;
        let mut bos_ws_seen = false;
        for piece in pieces {
            let piece = piece.as_ref();
            let id = self.piece_to_id(piece);
            if self.kind(id) == PieceType::Byte {
                bytes.push(piece_byte(piece).unwrap_or(0));
                continue;
            }
            flush_bytes(&mut bytes, &mut text);
            if bos_ws_seen || !text.is_empty() {
                is_bos_ws = false;
            }
            bos_ws_seen = false;
            match self.kind(id) {
                PieceType::Control => {}
                PieceType::Unknown => {
                    if self.pieces[id as usize].piece == piece {
                        text.extend_from_slice(self.unk_surface.as_bytes());
                    } else {
                        text.extend_from_slice(piece.as_bytes());
                    }
                }
                _ => {
                    let mut p = piece;
                    if is_bos_ws && strip_bos {
                        if let Some(rest) = p.strip_prefix(SPACE_SYMBOL) {
                            p = rest;
                            // With remove_extra_whitespaces every leading space piece goes.
                            bos_ws_seen = !remove_extra;
                        }
                    }
                    text.extend_from_slice(p.replace(SPACE_SYMBOL, " ").as_bytes());
                }
            }
        }
        flush_bytes(&mut bytes, &mut text);
        if let Some(d) = &self.denormalizer {
            text = d.normalize(&text, None);
        }
        String::from_utf8(text).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }
}

/// Appends a run of byte pieces' bytes as text, each invalid byte as U+FFFD.
fn flush_bytes(bytes: &mut Vec<u8>, text: &mut Vec<u8>) {
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let (valid, len) = decode_utf8_prefix(rest);
        if valid {
            text.extend_from_slice(&rest[..len]);
        } else {
            text.extend_from_slice("\u{FFFD}".as_bytes());
        }
        rest = &rest[len..];
    }
    bytes.clear();
}

/// Reads one `ModelProto.SentencePiece`.
fn parse_piece(data: &[u8]) -> Result<Piece> {
    let mut piece = Piece { piece: String::new(), score: 0.0, kind: PieceType::Normal };
    let mut fields = Fields::new(data);
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => piece.piece = field_str(&value, "a piece's text")?.to_string(),
            2 => match value {
                Field::Fixed32(bits) => piece.score = f32::from_bits(bits),
                _ => return Err(spm_err("a piece's score is not a float")),
            },
            3 => {
                piece.kind = match field_varint(&value, "a piece's type")? {
                    1 => PieceType::Normal,
                    2 => PieceType::Unknown,
                    3 => PieceType::Control,
                    4 => PieceType::UserDefined,
                    5 => PieceType::Unused,
                    6 => PieceType::Byte,
                    t => return Err(spm_err(format!("piece type {t} is unknown"))),
                }
            }
            _ => {}
        }
    }
    Ok(piece)
}
