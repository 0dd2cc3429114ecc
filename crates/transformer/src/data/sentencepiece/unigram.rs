//! Unigram segmentation (`unigram_model.cc`, `EncodeOptimized`): the best-scoring split of the
//! normalised text into pieces, by Viterbi over every piece that starts at each character, with the
//! C++'s tie-breaking and its bonus for user-defined symbols.

use super::pieces::PieceTable;
use super::proto::PieceType;
use super::utf8::one_char_len;

/// The unknown piece's score is the lowest normal piece's score minus this (`kUnkPenalty`).
const UNK_PENALTY: f32 = 10.0;

/// `unigram::Model::EncodeOptimized`: the best-scoring segmentation, found left to right. For
/// every end position it keeps the best path ending there; a candidate replaces it only when
/// strictly better, so among equal scores the first found (earliest start, then shortest
/// piece) wins. Returns (start, end, id) byte ranges of `normalized`.
pub(super) fn encode(table: &PieceTable, normalized: &[u8]) -> Vec<(usize, usize, u32)> {
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
    let unk_score = table.min_score - UNK_PENALTY;
    let mut best = vec![Best { id: table.unk_id, score: 0.0, start: None }; size + 1];
    let mut start = 0usize;
    while start < size {
        let till_here = best[start].score;
        let mblen = one_char_len(normalized[start]).min(size - start);
        let mut has_single = false;
        table.trie.prefixes(&normalized[start..], |len, id| {
            let piece = &table.pieces[id as usize];
            if piece.kind == PieceType::Unused {
                return;
            }
            // The C++ computes this sum in double (the user-defined bonus is a double
            // expression) and stores it as float; do the same so ties break identically.
            let score: f64 = if piece.kind == PieceType::UserDefined {
                f64::from(len as f32 * table.max_score) - 0.1
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
                *target = Best { id: table.unk_id, score: candidate, start: Some(start) };
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
