//! The vocabulary of a model (`ModelInterface::InitializePieces`): its pieces by id, the lookups
//! from piece to id, the tries encoding searches, the score bounds, and the byte pieces of byte
//! fallback; with the checks that make a model file usable.

use super::proto::{spm_err, Piece, PieceType};
use super::trie::Trie;
use crate::error::Result;
use std::collections::HashMap;

/// A model's pieces and everything looked up in them.
#[derive(Clone)]
pub(super) struct PieceTable {
    /// Pieces by id.
    pub(super) pieces: Vec<Piece>,
    /// Normal, user-defined and unused pieces → id.
    pub(super) piece_ids: HashMap<String, u32>,
    /// Unknown, control and byte pieces → id (looked up before `piece_ids`, as the C++ does).
    reserved_ids: HashMap<String, u32>,
    /// The unknown piece.
    pub(super) unk_id: u32,
    /// The user-defined symbols, matched longest first; `None` when there are none.
    pub(super) user_symbols: Option<Trie>,
    /// Normal, user-defined and unused pieces (the unigram lattice's candidates).
    pub(super) trie: Trie,
    /// Lowest score of a normal piece (the unknown piece scores 10 less).
    pub(super) min_score: f32,
    /// Highest score of a normal piece, but at least `f32::MIN_POSITIVE` (the C++ starts from
    /// `FLT_MIN`): user-defined symbols score `length × max_score − 0.1`.
    pub(super) max_score: f32,
    /// Byte value → id of its `<0xXX>` piece (byte fallback only).
    pub(super) byte_ids: Vec<u32>,
}

impl PieceTable {
    /// The table of `pieces`, refused when a piece is empty or defined twice, when the unknown
    /// piece is missing or defined twice, or when byte pieces and `byte_fallback` disagree.
    pub(super) fn new(pieces: Vec<Piece>, byte_fallback: bool) -> Result<Self> {
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
        let user_symbols = has_user.then_some(user);
        Ok(PieceTable { pieces, piece_ids, reserved_ids, unk_id, user_symbols, trie, min_score, max_score, byte_ids })
    }

    /// The id of `piece`, or the unknown id when it is not in the vocabulary (as sentencepiece).
    pub(super) fn piece_to_id(&self, piece: &str) -> u32 {
        self.reserved_ids.get(piece).or_else(|| self.piece_ids.get(piece)).copied().unwrap_or(self.unk_id)
    }

    /// The kind of piece `id` (in range).
    pub(super) fn kind(&self, id: u32) -> PieceType {
        self.pieces[id as usize].kind
    }
}

/// The piece naming byte `b` (`<0x41>`).
pub(super) fn byte_piece(b: u8) -> String {
    format!("<0x{b:02X}>")
}

/// The byte a `<0xXX>` piece names (upper-case hex digits only, as sentencepiece writes them).
pub(super) fn piece_byte(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c)) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}
