//! Constrained decoding for parsing (`--constrained`, a named deviation: docs/deviations.md): the
//! beam may only grow sequences that can still become a well-formed linearised tree over exactly
//! the input words (see [`crate::data::trees`]). A leaf (POS tag) token only while words remain; an
//! opening token only while words remain (every constituent needs one) and below a depth cap; the
//! closing token of the innermost open constituent only once it has a child; end of sentence only
//! when every word has its leaf and every bracket is closed.

use super::beam::Constraint;
use crate::data::bpe::Bpe;
use crate::error::{Error, Result};
use crate::EOS;
use std::collections::HashMap;

/// Deepest nesting allowed (the sample's deepest tree is far shallower); it keeps a model that
/// keeps opening brackets from running to the length limit.
pub const MAX_DEPTH: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Not a tree token.
    Other,
    /// `(X`: opens label `X` (an index); the id of `)X`.
    Open { close: u32 },
    /// `)X`.
    Close,
    /// A POS tag.
    Leaf,
}

/// The tree constraint over a vocabulary's tree tokens, for a batch of sentences of known word
/// counts.
pub struct TreeConstraint {
    kinds: Vec<Kind>,
    leaves: Vec<u32>,
    opens: Vec<u32>,
    words: Vec<usize>,
}

impl TreeConstraint {
    /// The constraint for sentences of `words[i]` words, over the whole tokens of `bpe` (the tree
    /// tokens a parsing vocabulary adds). A vocabulary without tree tokens is an error.
    pub fn new(bpe: &Bpe, words: Vec<usize>) -> Result<Self> {
        let whole = bpe.whole_tokens();
        let ids: HashMap<&str, u32> = whole.iter().map(|(id, t)| (t.as_str(), *id)).collect();
        let mut kinds = vec![Kind::Other; bpe.vocab_size()];
        let (mut leaves, mut opens) = (Vec::new(), Vec::new());
        for (id, t) in &whole {
            let kind = if let Some(label) = t.strip_prefix('(').filter(|l| !l.is_empty()) {
                match ids.get(format!("){label}").as_str()) {
                    Some(&close) => Kind::Open { close },
                    None => continue, // a bracket that could never close
                }
            } else if t.starts_with(')') && t.len() > 1 {
                Kind::Close
            } else {
                Kind::Leaf
            };
            if let Some(k) = kinds.get_mut(*id as usize) {
                *k = kind;
                match kind {
                    Kind::Open { .. } => opens.push(*id),
                    Kind::Leaf => leaves.push(*id),
                    _ => {}
                }
            }
        }
        if leaves.is_empty() {
            return Err(Error::Config(
                "constrained decoding needs a parsing vocabulary (with tree tokens); this one has none".into(),
            ));
        }
        Ok(TreeConstraint { kinds, leaves, opens, words })
    }
}

impl Constraint for TreeConstraint {
    fn allowed(&self, sent: usize, prefix: &[u32], out: &mut Vec<u32>) {
        // (closing id, has a child) of each open constituent, innermost last.
        let mut stack: Vec<(u32, bool)> = Vec::new();
        let mut used = 0;
        for &t in prefix {
            match self.kinds.get(t as usize).copied().unwrap_or(Kind::Other) {
                Kind::Open { close } => stack.push((close, false)),
                Kind::Close => {
                    stack.pop();
                    if let Some(top) = stack.last_mut() {
                        top.1 = true;
                    }
                }
                Kind::Leaf => {
                    used += 1;
                    if let Some(top) = stack.last_mut() {
                        top.1 = true;
                    }
                }
                Kind::Other => {}
            }
        }
        let left = self.words[sent].saturating_sub(used);
        if left > 0 {
            out.extend_from_slice(&self.leaves);
            if stack.len() < MAX_DEPTH {
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
