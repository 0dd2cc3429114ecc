//! SentencePiece models read from `.spm` / `.model` files, giving the same pieces and ids as
//! Python's `sentencepiece` (0.2.x). The Marian tokenizer built on two of them is
//! `MarianTokenizer` (`data/marian_tokenizer.rs`).
//!
//! The rules follow sentencepiece's C++ sources (`normalizer.cc`, `unigram_model.cc`
//! `EncodeOptimized`, `bpe_model.cc`, `sentencepiece_processor.cc`): the normaliser's longest-match
//! rewriting through the precompiled character map, whitespace handling and the dummy prefix; the
//! unigram Viterbi search with its tie-breaking and its bonus for user-defined symbols; BPE merges
//! highest score first, leftmost on ties, with unused pieces split back; unknown pieces merged or
//! expanded into byte pieces; and decoding with its leading-space rule.
//!
//! The model file is a protobuf `ModelProto`; the few fields used are read by hand. By job:
//! `proto.rs` reads the file, `pieces.rs` builds the vocabulary's lookups, `normalizer.rs`
//! rewrites text before encoding (and after decoding), `unigram.rs` and `bpe.rs` segment it,
//! `trie.rs` and `utf8.rs` serve them; this module holds the model and its API.

mod bpe;
mod normalizer;
mod pieces;
mod proto;
mod trie;
mod unigram;
mod utf8;

pub(crate) use normalizer::SPACE_SYMBOL;
pub use proto::{ModelType, PieceType};

use crate::error::{Error, Result};
use crate::io::io_err;
use normalizer::Normalizer;
use pieces::{byte_piece, piece_byte, PieceTable};
use proto::{ModelProto, TrainerSpec};
use std::path::Path;
use utf8::decode_utf8_prefix;

/// A SentencePiece model (unigram or BPE) as read from a `.spm` / `.model` file.
#[derive(Clone)]
pub struct SentencePiece {
    /// The file's bytes, kept so the model can be written out again unchanged.
    bytes: Vec<u8>,
    /// The pieces and their lookups.
    table: PieceTable,
    model_type: ModelType,
    byte_fallback: bool,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    pad_id: Option<u32>,
    unk_surface: String,
    normalizer: Normalizer,
    denormalizer: Option<Normalizer>,
}

impl std::fmt::Debug for SentencePiece {
    // The model's tables are large; show what identifies it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentencePiece")
            .field("model_type", &self.model_type)
            .field("pieces", &self.table.pieces.len())
            .field("byte_fallback", &self.byte_fallback)
            .field("unk_id", &self.table.unk_id)
            .finish_non_exhaustive()
    }
}

impl SentencePiece {
    /// Reads a model from the bytes of a `.spm` / `.model` file (a serialised `ModelProto`).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let proto = ModelProto::parse(bytes)?;
        let trainer = TrainerSpec::parse(proto.trainer)?;
        let normalizer = Normalizer::parse(proto.normalizer, trainer.treat_whitespace_as_suffix)?;
        // A denormaliser only acts when it has rules; it never sees the suffix flag.
        let denormalizer = match proto.denormalizer {
            Some(d) => Some(Normalizer::parse(d, false)?).filter(|n| n.charsmap.is_some()),
            None => None,
        };
        let table = PieceTable::new(proto.pieces, trainer.byte_fallback)?;
        let id_of = |v: i32| u32::try_from(v).ok().filter(|&v| (v as usize) < table.pieces.len());
        Ok(SentencePiece {
            bytes: bytes.to_vec(),
            model_type: trainer.model_type,
            byte_fallback: trainer.byte_fallback,
            bos_id: id_of(trainer.bos),
            eos_id: id_of(trainer.eos),
            pad_id: id_of(trainer.pad),
            unk_surface: trainer.unk_surface,
            normalizer,
            denormalizer,
            table,
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
        self.table.pieces.len()
    }

    /// Whether the model has no pieces (never true for a loaded model).
    pub fn is_empty(&self) -> bool {
        self.table.pieces.is_empty()
    }

    /// The id of `piece`, or the unknown id when it is not in the vocabulary (as sentencepiece).
    pub fn piece_to_id(&self, piece: &str) -> u32 {
        self.table.piece_to_id(piece)
    }

    /// The piece of `id`, or `None` when out of range.
    pub fn id_to_piece(&self, id: u32) -> Option<&str> {
        self.table.pieces.get(id as usize).map(|p| p.piece.as_str())
    }

    /// The kind of piece `id`, or `None` when out of range.
    pub fn piece_type(&self, id: u32) -> Option<PieceType> {
        self.table.pieces.get(id as usize).map(|p| p.kind)
    }

    /// The score of piece `id`, or `None` when out of range.
    pub fn score(&self, id: u32) -> Option<f32> {
        self.table.pieces.get(id as usize).map(|p| p.score)
    }

    /// The unknown piece's id.
    pub fn unk_id(&self) -> u32 {
        self.table.unk_id
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
        self.table.kind(id)
    }

    /// The normalised text, as sentencepiece's normaliser makes it (spaces escaped as `▁`).
    pub fn normalize(&self, text: &str) -> String {
        let out = self.normalizer.normalize(text.as_bytes(), self.table.user_symbols.as_ref());
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
        let normalized = self.normalizer.normalize(text.as_bytes(), self.table.user_symbols.as_ref());
        let segments = match self.model_type {
            ModelType::Unigram => unigram::encode(&self.table, &normalized),
            ModelType::Bpe => bpe::encode(&self.table, &normalized),
        };
        // `PopulateSentencePieceText`.
        let mut out: Vec<(Vec<u8>, u32)> = Vec::with_capacity(segments.len());
        let mut prev_unk = false;
        for (start, end, id) in segments {
            let w = &normalized[start..end];
            let unk = self.kind(id) == PieceType::Unknown;
            if unk && self.byte_fallback {
                out.extend(w.iter().map(|&b| (byte_piece(b).into_bytes(), self.table.byte_ids[b as usize])));
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
                    if self.table.pieces[id as usize].piece == piece {
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
