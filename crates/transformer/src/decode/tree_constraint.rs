//! Constrained decoding for parsing (`--constrained`, a named deviation: docs/deviations.md): the
//! beam may only grow sequences that can still become a well-formed linearised tree over exactly
//! the input words (see [`crate::data::trees`]). A tag only while words remain, and after a tag
//! exactly the BPE pieces of the next input word (the words are copied, not chosen; in the `tags`
//! format, where no words are written, a tag is the whole leaf); an opening
//! token only while words remain (every constituent needs one), below a depth cap, at most
//! [`MAX_OPEN_RUN`] in a row between leaves, and while the length limit leaves room to finish the
//! tree after it; the closing token of the innermost open
//! constituent only once it has a child; end of sentence only when every word has its leaf and
//! every bracket is closed. So, given room for the words' leaves, the output always ends as a
//! well-formed tree before the length limit.

use super::beam::Constraint;
use crate::data::bpe::Bpe;
use crate::data::encoding::TAG_PREFIX;
use crate::data::trees::TreeFormat;
use crate::error::{Error, Result};
use crate::vocab::EOS;
use std::collections::HashMap;

/// Deepest nesting allowed (the sample's deepest tree is far shallower); it keeps a model that
/// keeps opening brackets from running to the length limit.
pub const MAX_DEPTH: usize = 64;

/// Most opening brackets between two leaves (the sample's 3,396 training trees have at most 6,
/// 5 or more in 26 places). Without a cap, a wide beam with a length penalty that rewards length
/// (α > 0) fills sentences with unary chains: on the test files, beam 21 gave bracketing
/// precision 9.7 against recall 40.
pub const MAX_OPEN_RUN: usize = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A BPE piece (part of a word).
    Piece,
    /// `(X`, with the id of `)X`.
    Open { close: u32 },
    /// `)X`.
    Close,
    /// A POS tag.
    Tag,
}

/// The tree constraint over a parsing vocabulary, for a batch of sentences given as the BPE pieces
/// of each word (as a target spells it: the word after a space).
pub struct TreeConstraint {
    kinds: Vec<Kind>,
    tags: Vec<u32>,
    opens: Vec<u32>,
    words: Vec<Vec<Vec<u32>>>,
    /// Whether each tag is followed by its word's pieces (`tags+words`).
    words_in_target: bool,
    /// Per sentence, the one tag each word may take (`--oracle-tags`; `None`: any tag, for a
    /// tag the vocabulary lacks); empty: no oracle.
    gold_tags: Vec<Vec<Option<u32>>>,
}

impl TreeConstraint {
    /// The constraint for sentences `words[i]` (each word's pieces), over the whole tokens of
    /// `bpe`, for trees written in `format` (in `tags`, only the number of words counts). A
    /// vocabulary without tree tokens, or a word with no pieces, is an error.
    pub fn new(bpe: &Bpe, words: Vec<Vec<Vec<u32>>>, format: TreeFormat) -> Result<Self> {
        let whole = bpe.whole_tokens();
        let ids: HashMap<&str, u32> = whole.iter().map(|(id, t)| (t.as_str(), *id)).collect();
        let mut kinds = vec![Kind::Piece; bpe.vocab_size()];
        let (mut tags, mut opens) = (Vec::new(), Vec::new());
        for (id, t) in &whole {
            let kind = if let Some(label) = t.strip_prefix('(').filter(|l| !l.is_empty()) {
                match ids.get(format!("){label}").as_str()) {
                    Some(&close) => Kind::Open { close },
                    None => continue, // a bracket that could never close
                }
            } else if t.starts_with(')') && t.len() > 1 {
                Kind::Close
            } else if t.starts_with(TAG_PREFIX) {
                Kind::Tag
            } else {
                continue;
            };
            if let Some(k) = kinds.get_mut(*id as usize) {
                *k = kind;
                match kind {
                    Kind::Open { .. } => opens.push(*id),
                    Kind::Tag => tags.push(*id),
                    _ => {}
                }
            }
        }
        if tags.is_empty() {
            return Err(Error::Mismatch(
                "constrained decoding needs a parsing vocabulary (with tree tokens); this one has none".into(),
            ));
        }
        if words.iter().flatten().any(|w| w.is_empty()) {
            return Err(Error::Input("constrained decoding: a word with no BPE pieces".into()));
        }
        Ok(TreeConstraint {
            kinds,
            tags,
            opens,
            words,
            words_in_target: format.words_in_target(),
            gold_tags: Vec::new(),
        })
    }

    /// The same constraint with every word's tag forced: `gold[i][w]` for word w of sentence i
    /// (any tag where it is `None`); an empty `gold` forces nothing. For measuring what perfect
    /// tagging would give (`evaluate --oracle-tags`), never for parsing.
    pub fn with_gold_tags(mut self, gold: Vec<Vec<Option<u32>>>) -> Self {
        self.gold_tags = gold;
        self
    }
}

impl Constraint for TreeConstraint {
    fn sentences(&self) -> Option<usize> {
        Some(self.words.len())
    }

    fn allowed(&self, sent: usize, prefix: &[u32], budget: usize, out: &mut Vec<u32>) {
        // A sentence the constraint does not hold allows nothing (the search refuses such a batch).
        let Some(words) = self.words.get(sent) else { return };
        // (closing id, has a child) of each open constituent, innermost last.
        let mut stack: Vec<(u32, bool)> = Vec::new();
        let mut used = 0;
        // Pieces of word `used` written so far, after its tag.
        let mut in_word: Option<usize> = None;
        // Opening brackets since the last leaf.
        let mut run = 0;
        for &t in prefix {
            if let Some(j) = in_word {
                if j + 1 == words[used].len() {
                    in_word = None;
                    used += 1;
                    if let Some(top) = stack.last_mut() {
                        top.1 = true;
                    }
                } else {
                    in_word = Some(j + 1);
                }
                continue;
            }
            match self.kinds.get(t as usize).copied().unwrap_or(Kind::Piece) {
                Kind::Open { close } => {
                    stack.push((close, false));
                    run += 1;
                }
                Kind::Close => {
                    stack.pop();
                    if let Some(top) = stack.last_mut() {
                        top.1 = true;
                    }
                }
                Kind::Tag if used < words.len() => {
                    run = 0;
                    if self.words_in_target {
                        in_word = Some(0);
                    } else {
                        used += 1;
                        if let Some(top) = stack.last_mut() {
                            top.1 = true;
                        }
                    }
                }
                Kind::Tag | Kind::Piece => {}
            }
        }
        if let Some(j) = in_word {
            out.push(words[used][j]);
            return;
        }
        let left = words.len() - used.min(words.len());
        if left > 0 {
            match self.gold_tags.get(sent).and_then(|g| g.get(used)) {
                Some(&Some(tag)) => out.push(tag),
                _ => out.extend_from_slice(&self.tags),
            }
            // The shortest finish after an opening bracket: a tag and the pieces (if written) of
            // each word left, and a closing token for it and for every bracket open now.
            let leaf = |w: &Vec<u32>| 1 + if self.words_in_target { w.len() } else { 0 };
            let finish: usize = words[used..].iter().map(leaf).sum::<usize>() + stack.len() + 1;
            if stack.len() < MAX_DEPTH && run < MAX_OPEN_RUN && finish < budget {
                out.extend_from_slice(&self.opens);
            }
        }
        match stack.last() {
            Some(&(close, true)) => out.push(close),
            Some(_) => {}
            None if left == 0 => out.push(EOS),
            None => {}
        }
    }
}
