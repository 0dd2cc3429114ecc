//! The next-word pointer (`model.source_pointer`, a named deviation: docs/deviations.md,
//! `next-word-pointer`). For parsing, the decoder input at each position gets one more term,
//! `W_p · enc_out[j]`, where j is the source position the tree is at: inside a leaf (after its
//! tag, until its word's last piece) the next piece of the leaf's word to copy, else the first
//! piece of the next word to attach (the count of leaves written so far); past the last word,
//! nothing (the term is 0). j depends only on the tokens fed so far and on the source, so it
//! is the same in teacher forcing and in search. One gather and one D×D product: the decoder no
//! longer has to find its place in the sentence through attention alone (docs/parsing.md,
//! "Reading the sentence").
//!
//! What a token is comes from the vocabulary ([`PointerTable`]): a POS tag opens a leaf (in the
//! `tags` tree format, where no words follow, it is the whole leaf), a bracket or special token
//! closes any open leaf, and a BPE piece is a piece of the leaf's word.
//! A source word starts at position 0 and at every piece that begins with a space.

use crate::data::bpe::Bpe;

/// What a vocabulary entry is to the pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenClass {
    /// A POS tag: a leaf begins; its word follows.
    Tag,
    /// A POS tag that is a whole leaf (the `tags` tree format): no word follows.
    Leaf,
    /// A special token (BOS, EOS, PAD), or a bracket of a vocabulary without bracket roles: no
    /// leaf is open after it.
    Structure,
    /// `(X`: opens a constituent; `closer` is the id of the `)X` that closes it (its own id where
    /// the vocabulary has no `)X`). No leaf is open after it.
    Open {
        /// The id that closes it.
        closer: u32,
    },
    /// `)X`: closes the innermost open constituent, whatever its label. No leaf is open after it.
    Close,
    /// A BPE piece; `starts_word` when it begins with a space (a source word starts there).
    Piece {
        /// Begins with a space.
        starts_word: bool,
    },
}

/// The class of every vocabulary id.
#[derive(Clone, Debug, PartialEq)]
pub struct PointerTable {
    classes: Vec<TokenClass>,
    /// Every id's bytes, a word-starting space left out (for the character encoder,
    /// `model.char_dim`); empty for ids with none (special tokens, tags, brackets).
    bytes: Vec<Vec<u8>>,
}

/// The byte that the GPT-2 byte-level alphabet (the `tokenizers` crate's `ByteLevel`, which our
/// BPE uses) writes as `ch`: printable bytes stand for themselves, the others are written as
/// U+0100 onwards in byte order.
fn byte_level_byte(ch: char) -> Option<u8> {
    let printed = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let c = ch as u32;
    if c < 256 && printed(c) {
        return Some(c as u8);
    }
    let n = c.checked_sub(256)? as usize;
    (0u32..256).filter(|&b| !printed(b)).nth(n).map(|b| b as u8)
}

/// The prefix that marks a POS tag entry of a parsing vocabulary (`TAG=NN`).
const TAG_PREFIX: &str = crate::data::encoding::TAG_PREFIX;

impl PointerTable {
    /// A table from explicit classes, one per id (tests, synthetic vocabularies).
    pub fn new(classes: Vec<TokenClass>) -> Self {
        PointerTable { classes, bytes: Vec::new() }
    }

    /// The same table with every id's bytes for the character encoder (tests, synthetic
    /// vocabularies); ids past `bytes` have none.
    pub fn with_bytes(mut self, bytes: Vec<Vec<u8>>) -> Self {
        self.bytes = bytes;
        self
    }

    /// The table of a parsing vocabulary for trees written in `format`: its whole entries `TAG=…`
    /// are tags (leaves in the `tags` format), `(X` opens (closed by the entry `)X`, or by itself
    /// where there is none), `)X` closes, any other whole entry and the special tokens other than
    /// UNK are structure, the rest pieces.
    pub fn from_bpe(bpe: &Bpe, format: crate::data::trees::TreeFormat) -> Self {
        let tag = if format.words_in_target() { TokenClass::Tag } else { TokenClass::Leaf };
        let n = bpe.vocab_size();
        let mut classes: Vec<TokenClass> = (0..n)
            .map(|id| {
                let starts_word = bpe.piece_of(id as u32).is_some_and(|p| p.starts_with('Ġ') || p.starts_with(' '));
                TokenClass::Piece { starts_word }
            })
            .collect();
        for (id, class) in classes.iter_mut().enumerate().take(crate::vocab::SPECIAL_TOKENS) {
            if id as u32 != crate::vocab::UNK {
                *class = TokenClass::Structure;
            }
        }
        let whole = bpe.whole_tokens();
        let ids: std::collections::HashMap<&str, u32> = whole.iter().map(|(id, t)| (t.as_str(), *id)).collect();
        for (id, token) in &whole {
            if let Some(c) = classes.get_mut(*id as usize) {
                *c = if token.starts_with(TAG_PREFIX) {
                    tag
                } else if let Some(label) = token.strip_prefix('(').filter(|l| !l.is_empty()) {
                    TokenClass::Open { closer: ids.get(format!("){label}").as_str()).copied().unwrap_or(*id) }
                } else if token.len() > 1 && token.starts_with(')') {
                    TokenClass::Close
                } else {
                    TokenClass::Structure
                };
            }
        }
        let bytes = (0..n)
            .map(|id| match classes[id] {
                TokenClass::Piece { .. } if id as u32 != crate::vocab::UNK => {
                    let piece = bpe.piece_of(id as u32).unwrap_or_default();
                    let mut b: Vec<u8> = piece.chars().filter_map(byte_level_byte).collect();
                    if b.first() == Some(&b' ') {
                        b.remove(0);
                    }
                    b
                }
                _ => Vec::new(),
            })
            .collect();
        PointerTable { classes, bytes }
    }

    /// The bytes of `id` (a word-starting space left out), for the character encoder.
    pub fn bytes(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], |b| b.as_slice())
    }

    /// The words of a source for the character encoder, as ranges of positions: a word starts
    /// at a piece in position 0 or at a piece that begins with a space, and goes on over the
    /// pieces that do not; positions that are not pieces belong to no word.
    pub fn word_spans(&self, src: &[u32]) -> Vec<std::ops::Range<usize>> {
        let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
        let mut open = false;
        for (i, &id) in src.iter().enumerate() {
            match self.class(id) {
                TokenClass::Piece { starts_word } => {
                    if open && !starts_word {
                        if let Some(last) = spans.last_mut() {
                            last.end = i + 1;
                        }
                    } else {
                        spans.push(i..i + 1);
                        open = true;
                    }
                }
                _ => open = false,
            }
        }
        spans
    }

    /// Vocabulary size covered.
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// The class of `id` (a piece for an id past the table).
    pub fn class(&self, id: u32) -> TokenClass {
        self.classes.get(id as usize).copied().unwrap_or(TokenClass::Piece { starts_word: false })
    }

    /// The start position of every word of a source (position 0 and each piece with a space).
    pub fn word_starts(&self, src: &[u32]) -> Vec<u32> {
        let mut starts = Vec::new();
        for (i, &id) in src.iter().enumerate() {
            if i == 0 || matches!(self.class(id), TokenClass::Piece { starts_word: true }) {
                starts.push(i as u32);
            }
        }
        starts
    }
}

/// Where one output is in its sentence: leaves opened so far, and the pieces its open leaf's word
/// still has (0: no leaf open).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointerState {
    tags: u32,
    remaining: u32,
}

impl PointerState {
    /// Feeds one token (BOS first) and returns the source position the next prediction reads:
    /// the open leaf's next piece to copy, else the next word's first piece; `src_len` (no
    /// position: the pointer adds nothing) once every word of a source of `src_len` positions
    /// whose words start at `starts` has its leaf, so that "the sentence is done" is as plain to
    /// the decoder as "this word is next". Starts that are not increasing positions below
    /// `src_len` give positions that mean nothing, never a panic.
    pub fn advance(&mut self, class: TokenClass, starts: &[u32], src_len: usize) -> usize {
        let pieces = |w: usize| -> u32 {
            match starts.get(w) {
                Some(&s) => starts.get(w + 1).map_or(src_len as u32, |&e| e).saturating_sub(s),
                None => 0,
            }
        };
        match class {
            TokenClass::Tag => {
                self.tags += 1;
                self.remaining = pieces(self.tags as usize - 1).max(1);
            }
            TokenClass::Leaf => {
                self.tags += 1;
                self.remaining = 0;
            }
            TokenClass::Structure | TokenClass::Open { .. } | TokenClass::Close => self.remaining = 0,
            TokenClass::Piece { .. } => self.remaining = self.remaining.saturating_sub(1),
        }
        if self.remaining > 0 {
            let word = self.tags as usize - 1;
            match starts.get(word) {
                Some(&s) => ((s.saturating_add(pieces(word))).saturating_sub(self.remaining) as usize)
                    .min(src_len.saturating_sub(1)),
                None => src_len,
            }
        } else {
            starts.get(self.tags as usize).map_or(src_len, |&s| s as usize)
        }
    }
}

/// A position of [`batch_positions`] that reads nothing.
pub const PAST_END: u32 = u32::MAX;

/// The pointer positions of a padded batch: (B, T), position t of row b reading the source
/// position for `tgt_in[b, ..=t]`; [`PAST_END`] past the last word, on padding and for empty
/// sources.
pub fn batch_positions(table: &PointerTable, batch: &super::batch::Batch) -> Vec<u32> {
    let mut out = vec![PAST_END; batch.b * batch.t];
    for b in 0..batch.b {
        let src_len = batch.src_lens[b];
        if src_len == 0 {
            continue;
        }
        let src = &batch.src[b * batch.s..b * batch.s + src_len];
        let starts = table.word_starts(src);
        let mut st = PointerState::default();
        for t in 0..batch.tgt_lens[b] {
            let class = table.class(batch.tgt_in[b * batch.t + t]);
            let j = st.advance(class, &starts, src_len);
            out[b * batch.t + t] = if j < src_len { j as u32 } else { PAST_END };
        }
    }
    out
}

/// The next-closer input (`model.next_closer`, a named deviation: docs/deviations.md,
/// `next-closer-input`): at each position the decoder input gets `C[c] + H[depth]`, where c is the
/// token that closes the innermost constituent still open after the tokens fed so far (`)NP`
/// inside an NP; EOS when none is open), depth how many are open (at most MAX_OPEN_DEPTH − 1),
/// and C (V, D) and H (MAX_OPEN_DEPTH, D) learned tables that start at zero (untied from the
/// embedding, so the closer is not copied to the output by default). Like the pointer it depends
/// only on the prefix, so it is the same in teacher forcing and in search; it tells the decoder
/// which bracket it owes and how deep it is, which a decoder otherwise tracks through
/// self-attention alone and gets wrong on long trees (docs/parsing.md, "Closing what was opened").
///
/// The open constituents of every row of a search share one arena of (closer, parent, depth)
/// nodes: a row is the index of its innermost node, so copying a row (reordering a beam) copies
/// one integer.
#[derive(Clone, Debug, Default)]
pub struct CloserStacks {
    nodes: Vec<(u32, u32, u32)>,
}

/// An empty stack in [`CloserStacks`].
pub const NO_OPEN: u32 = u32::MAX;

use crate::params::MAX_OPEN_DEPTH;

/// A next-closer id meaning "no next-closer input at this position" (training with
/// `next_closer_dropout`).
pub const NO_CLOSER: u32 = u32::MAX;

impl CloserStacks {
    /// Forgets every node (a new search).
    pub fn clear(&mut self) {
        self.nodes.clear();
    }

    /// Feeds a token of class `class` to the stack whose innermost node is `top`; returns the new
    /// top. A close with nothing open is ignored.
    pub fn advance(&mut self, top: u32, class: TokenClass) -> u32 {
        match class {
            TokenClass::Open { closer } => {
                let depth = if top == NO_OPEN { 1 } else { self.nodes[top as usize].2 + 1 };
                self.nodes.push((closer, top, depth));
                (self.nodes.len() - 1) as u32
            }
            TokenClass::Close if top != NO_OPEN => self.nodes[top as usize].1,
            _ => top,
        }
    }

    /// The closer a stack owes (its innermost node's, or EOS when it is empty) and its table row
    /// of depth (the open constituents, capped at MAX_OPEN_DEPTH − 1).
    pub fn closer(&self, top: u32) -> (u32, u32) {
        if top == NO_OPEN {
            (crate::vocab::EOS, 0)
        } else {
            let (c, _, depth) = self.nodes[top as usize];
            (c, depth.min(MAX_OPEN_DEPTH as u32 - 1))
        }
    }
}

/// The next-closer ids and depth rows of a padded batch: (B, T) each, position t of row b after
/// `tgt_in[b, ..=t]`; (EOS, 0) on padding.
pub fn batch_closers(table: &PointerTable, batch: &super::batch::Batch) -> (Vec<u32>, Vec<u32>) {
    let mut ids = vec![crate::vocab::EOS; batch.b * batch.t];
    let mut depths = vec![0; batch.b * batch.t];
    let mut stacks = CloserStacks::default();
    for b in 0..batch.b {
        stacks.clear();
        let mut top = NO_OPEN;
        for t in 0..batch.tgt_lens[b] {
            top = stacks.advance(top, table.class(batch.tgt_in[b * batch.t + t]));
            (ids[b * batch.t + t], depths[b * batch.t + t]) = stacks.closer(top);
        }
    }
    (ids, depths)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: TokenClass = TokenClass::Structure;
    const T: TokenClass = TokenClass::Tag;
    const P: TokenClass = TokenClass::Piece { starts_word: false };
    const W: TokenClass = TokenClass::Piece { starts_word: true };

    #[test]
    fn pointer_follows_the_leaves() {
        // Source "Pierre Vin·ken ." as pieces: word starts 0, 1, 3; 4 positions.
        let starts = [0u32, 1, 3];
        let mut st = PointerState::default();
        // BOS (S (NP NNP Pierre NNP Vin ken )NP . . )S EOS
        let feed = [S, S, S, T, W, T, W, P, S, T, W, S];
        // After `Vin` the pointer is at `ken`, the piece to copy next; after `.`, past the end.
        let want = [0, 0, 0, 0, 1, 1, 2, 3, 3, 3, 4, 4];
        let got: Vec<usize> = feed.iter().map(|&c| st.advance(c, &starts, 4)).collect();
        assert_eq!(got, want);
        // Past the last word, a tag and its pieces read nothing either.
        let mut st = PointerState { tags: 3, remaining: 0 };
        assert_eq!(st.advance(S, &starts, 4), 4);
        assert_eq!(st.advance(T, &starts, 4), 4);
        assert_eq!(st.advance(W, &starts, 4), 4);
        // A model that writes more pieces than the word has moves on to the next word.
        let mut st = PointerState::default();
        assert_eq!(st.advance(T, &starts, 4), 0);
        assert_eq!(st.advance(W, &starts, 4), 1);
        assert_eq!(st.advance(P, &starts, 4), 1);
    }

    #[test]
    fn pointer_in_the_tags_format_moves_a_word_a_leaf() {
        // Source "Pierre Vin·ken ." as pieces: word starts 0, 1, 3; 4 positions.
        let starts = [0u32, 1, 3];
        let mut st = PointerState::default();
        const L: TokenClass = TokenClass::Leaf;
        // BOS (S (NP NNP NNP )NP . )S EOS: each leaf is its tag alone, so the pointer is at the
        // next word's first piece after every tag, and past the end after the last.
        let feed = [S, S, S, L, L, S, L, S, S];
        let want = [0, 0, 0, 1, 3, 3, 4, 4, 4];
        let got: Vec<usize> = feed.iter().map(|&c| st.advance(c, &starts, 4)).collect();
        assert_eq!(got, want);
        // A table built for the tags format classes tags as leaves, for tags+words as tags.
        let pairs = [("Pierre Vinken".to_string(), "(NP NNP Pierre NNP Vinken )NP".to_string())];
        let bpe = crate::task::Task::Parsing.learn_vocabulary(&pairs, 300).unwrap();
        let tag = bpe.id_of("TAG=NNP").unwrap();
        use crate::data::trees::TreeFormat;
        assert_eq!(PointerTable::from_bpe(&bpe, TreeFormat::Tags).class(tag), L);
        assert_eq!(PointerTable::from_bpe(&bpe, TreeFormat::TagsWords).class(tag), T);
    }

    #[test]
    fn closers_follow_the_open_constituents() {
        // ids: 4 (S, 5 )S, 6 (NP, 7 )NP, 8 (X with no closer of its own.
        let (os, onp, ox) =
            (TokenClass::Open { closer: 5 }, TokenClass::Open { closer: 7 }, TokenClass::Open { closer: 8 });
        let c = TokenClass::Close;
        let mut stacks = CloserStacks::default();
        let mut top = NO_OPEN;
        // BOS (S (NP NN x )NP (X )S )S )S: the stray closes at the end are ignored.
        let feed = [S, os, onp, T, P, c, ox, c, c, c];
        let want = [
            (crate::vocab::EOS, 0),
            (5, 1),
            (7, 2),
            (7, 2),
            (7, 2),
            (5, 1),
            (8, 2),
            (5, 1),
            (crate::vocab::EOS, 0),
            (crate::vocab::EOS, 0),
        ];
        let got: Vec<(u32, u32)> = feed
            .iter()
            .map(|&k| {
                top = stacks.advance(top, k);
                stacks.closer(top)
            })
            .collect();
        assert_eq!(got, want);
        // The pointer treats brackets as structure.
        let mut st = PointerState::default();
        assert_eq!(st.advance(T, &[0, 1], 2), 0);
        assert_eq!(st.advance(onp, &[0, 1], 2), 1);
        // Depth is capped at the table's last row.
        let mut top = NO_OPEN;
        for _ in 0..40 {
            top = stacks.advance(top, onp);
        }
        assert_eq!(stacks.closer(top), (7, MAX_OPEN_DEPTH as u32 - 1));
    }

    #[test]
    fn word_starts_from_classes() {
        let table = PointerTable::new(vec![S, S, S, S, T, P, W]);
        assert_eq!(table.word_starts(&[5, 5, 6, 5, 6]), vec![0, 2, 4]);
        assert_eq!(table.word_starts(&[6]), vec![0]);
        assert!(table.word_starts(&[]).is_empty());
    }
}
