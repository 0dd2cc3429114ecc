//! BPE segmentation (`bpe_model.cc`, `Model::Encode`): starts from characters (user-defined
//! symbols whole and frozen) and repeatedly merges the adjacent pair whose joined piece scores
//! highest, the leftmost on ties; merged pieces of type unused are split back into the pieces they
//! were merged from.

use super::pieces::PieceTable;
use super::proto::PieceType;
use super::utf8::one_char_len;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// A byte range of the normalised text: (start, length).
type Span = (usize, usize);
/// Merged unused piece → the two pieces it was made from.
type RevMerge = HashMap<Vec<u8>, (Span, Span)>;

/// A symbol of the text: a byte range, linked to its neighbours. A symbol merged into its left
/// neighbour keeps length 0.
struct Symbol {
    prev: Option<usize>,
    next: Option<usize>,
    /// A user-defined symbol: never merged.
    freeze: bool,
    start: usize,
    len: usize,
}

/// A candidate merge of two adjacent symbols, with the joined piece's score and byte length.
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

/// The segmentation of `normalized` as (start, end, id) byte ranges.
pub(super) fn encode(table: &PieceTable, normalized: &[u8]) -> Vec<(usize, usize, u32)> {
    let symbols = symbols(table, normalized);
    if symbols.is_empty() {
        return Vec::new();
    }
    let mut merges = Merges { table, normalized, symbols, agenda: BinaryHeap::new(), rev_merge: HashMap::new() };
    merges.run();
    let mut out = Vec::new();
    let mut index = Some(0usize);
    while let Some(i) = index {
        let s = &merges.symbols[i];
        resegment(table, normalized, s.start, s.len, &merges.rev_merge, &mut out);
        index = s.next;
    }
    out
}

/// The text as symbols before any merge: characters, and user-defined symbols whole.
fn symbols(table: &PieceTable, normalized: &[u8]) -> Vec<Symbol> {
    let mut symbols: Vec<Symbol> = Vec::new();
    let mut pos = 0usize;
    while pos < normalized.len() {
        let rest = &normalized[pos..];
        let user = table.user_symbols.as_ref().and_then(|t| t.longest_prefix(rest));
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
    symbols
}

/// The merging state: the symbols, the candidate pairs, and what each merged unused piece was
/// made from.
struct Merges<'a> {
    table: &'a PieceTable,
    normalized: &'a [u8],
    symbols: Vec<Symbol>,
    agenda: BinaryHeap<Pair>,
    rev_merge: RevMerge,
}

impl Merges<'_> {
    /// Merges the best pair until no adjacent pair joins into a piece.
    fn run(&mut self) {
        for i in 1..self.symbols.len() {
            self.add_pair(Some(i - 1), Some(i));
        }
        while let Some(top) = self.agenda.pop() {
            let (l, r) = (&self.symbols[top.left], &self.symbols[top.right]);
            // A pair is stale once either side changed: pieces only grow or empty, so the sum of
            // their lengths tells.
            if l.len == 0 || r.len == 0 || l.len + r.len != top.size {
                continue;
            }
            let right_next = r.next;
            let right_len = r.len;
            self.symbols[top.left].len += right_len;
            self.symbols[top.left].next = right_next;
            if let Some(n) = right_next {
                self.symbols[n].prev = Some(top.left);
            }
            self.symbols[top.right].len = 0;
            let prev = self.symbols[top.left].prev;
            self.add_pair(prev, Some(top.left));
            self.add_pair(Some(top.left), right_next);
        }
    }

    /// Puts the pair (`left`, `right`) on the agenda when both exist, neither is frozen and their
    /// joined text is a piece; an unused piece remembers its two parts.
    fn add_pair(&mut self, left: Option<usize>, right: Option<usize>) {
        let (Some(left), Some(right)) = (left, right) else { return };
        let (l, r) = (&self.symbols[left], &self.symbols[right]);
        if l.freeze || r.freeze {
            return;
        }
        let piece = &self.normalized[l.start..l.start + l.len + r.len];
        let Some(&id) = std::str::from_utf8(piece).ok().and_then(|p| self.table.piece_ids.get(p)) else {
            return;
        };
        let p = &self.table.pieces[id as usize];
        self.agenda.push(Pair { left, right, score: p.score, size: piece.len() });
        if p.kind == PieceType::Unused {
            self.rev_merge.insert(piece.to_vec(), ((l.start, l.len), (r.start, r.len)));
        }
    }
}

/// Splits a merged unused piece back into its parts, recursively.
fn resegment(
    table: &PieceTable,
    normalized: &[u8],
    start: usize,
    len: usize,
    rev_merge: &RevMerge,
    out: &mut Vec<(usize, usize, u32)>,
) {
    let w = &normalized[start..start + len];
    let id = std::str::from_utf8(w).map(|p| table.piece_to_id(p)).unwrap_or(table.unk_id);
    if table.kind(id) == PieceType::Unused {
        if let Some(&((ls, ll), (rs, rl))) = rev_merge.get(w) {
            resegment(table, normalized, ls, ll, rev_merge, out);
            resegment(table, normalized, rs, rl, rev_merge, out);
            return;
        }
    }
    out.push((start, start + len, id));
}
