//! The next-word pointer (`model.source_pointer`, a named deviation: docs/deviations.md,
//! `next-word-pointer`). For parsing, the decoder input at each position gets one more term,
//! `W_p · enc_out[j]`, where j is the source position the tree is at: inside a leaf (after its
//! tag, until its word's last piece) the next piece of the leaf's word to copy, else the first
//! piece of the next word to attach (the count of leaves written so far); past the last word,
//! the source's last position. j depends only on the tokens fed so far and on the source, so it
//! is the same in teacher forcing and in search. One gather and one D×D product: the decoder no
//! longer has to find its place in the sentence through attention alone (docs/parsing.md,
//! "Reading the sentence").
//!
//! What a token is comes from the vocabulary ([`PointerTable`]): a POS tag opens a leaf, a
//! bracket or special token closes any open leaf, and a BPE piece is a piece of the leaf's word.
//! A source word starts at position 0 and at every piece that begins with a space.

use crate::data::bpe::Bpe;

/// What a vocabulary entry is to the pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenClass {
    /// A POS tag: a leaf begins; its word follows.
    Tag,
    /// A bracket or a special token (BOS, EOS, PAD): no leaf is open after it.
    Structure,
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
}

/// The prefix that marks a POS tag entry of a parsing vocabulary (`TAG=NN`).
const TAG_PREFIX: &str = crate::data::parallel::TAG_PREFIX;

impl PointerTable {
    /// A table from explicit classes, one per id (tests, synthetic vocabularies).
    pub fn new(classes: Vec<TokenClass>) -> Self {
        PointerTable { classes }
    }

    /// The table of a parsing vocabulary: its whole entries `TAG=…` are tags, its other whole
    /// entries (brackets) and the special tokens other than UNK are structure, the rest pieces.
    pub fn from_bpe(bpe: &Bpe) -> Self {
        let n = bpe.vocab_size();
        let mut classes: Vec<TokenClass> = (0..n)
            .map(|id| {
                let starts_word = bpe.piece_of(id as u32).is_some_and(|p| p.starts_with('Ġ') || p.starts_with(' '));
                TokenClass::Piece { starts_word }
            })
            .collect();
        for (id, class) in classes.iter_mut().enumerate().take(crate::SPECIAL_TOKENS) {
            if id as u32 != crate::UNK {
                *class = TokenClass::Structure;
            }
        }
        for (id, token) in bpe.whole_tokens() {
            if let Some(c) = classes.get_mut(id as usize) {
                *c = if token.starts_with(TAG_PREFIX) { TokenClass::Tag } else { TokenClass::Structure };
            }
        }
        PointerTable { classes }
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
    /// the open leaf's next piece to copy, else the next word's first piece, clamped to the last
    /// position of a source of `src_len` positions whose words start at `starts`. `src_len` must
    /// be at least 1.
    pub fn advance(&mut self, class: TokenClass, starts: &[u32], src_len: usize) -> usize {
        let pieces = |w: usize| -> u32 {
            match starts.get(w) {
                Some(&s) => starts.get(w + 1).map_or(src_len as u32, |&e| e) - s,
                None => 0,
            }
        };
        match class {
            TokenClass::Tag => {
                self.tags += 1;
                self.remaining = pieces(self.tags as usize - 1).max(1);
            }
            TokenClass::Structure => self.remaining = 0,
            TokenClass::Piece { .. } => self.remaining = self.remaining.saturating_sub(1),
        }
        if self.remaining > 0 {
            let word = self.tags as usize - 1;
            match starts.get(word) {
                Some(&s) => ((s + pieces(word)).saturating_sub(self.remaining) as usize).min(src_len - 1),
                None => src_len - 1,
            }
        } else {
            starts.get(self.tags as usize).map_or(src_len - 1, |&s| s as usize)
        }
    }
}

/// The pointer positions of a padded batch: (B, T), position t of row b reading the source
/// position for `tgt_in[b, ..=t]`; 0 on padding and for empty sources.
pub fn batch_positions(table: &PointerTable, batch: &super::Batch) -> Vec<u32> {
    let mut out = vec![0u32; batch.b * batch.t];
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
            out[b * batch.t + t] = st.advance(class, &starts, src_len) as u32;
        }
    }
    out
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
        // After `Vin` the pointer is at `ken`, the piece to copy next.
        let want = [0, 0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 3];
        let got: Vec<usize> = feed.iter().map(|&c| st.advance(c, &starts, 4)).collect();
        assert_eq!(got, want);
        // Past the last word: clamped to the last position.
        let mut st = PointerState { tags: 3, remaining: 0 };
        assert_eq!(st.advance(S, &starts, 4), 3);
        assert_eq!(st.advance(T, &starts, 4), 3);
        // A model that writes more pieces than the word has moves on to the next word.
        let mut st = PointerState::default();
        assert_eq!(st.advance(T, &starts, 4), 0);
        assert_eq!(st.advance(W, &starts, 4), 1);
        assert_eq!(st.advance(P, &starts, 4), 1);
    }

    #[test]
    fn word_starts_from_classes() {
        let table = PointerTable::new(vec![S, S, S, S, T, P, W]);
        assert_eq!(table.word_starts(&[5, 5, 6, 5, 6]), vec![0, 2, 4]);
        assert_eq!(table.word_starts(&[6]), vec![0]);
        assert!(table.word_starts(&[]).is_empty());
    }
}
