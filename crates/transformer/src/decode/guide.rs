//! What a caller may ask of one sentence's output ([`Guide`]): a target prefix it must start with
//! (fairseq's `--prefix-size`, Marian's `--force-decode`, CTranslate2's `target_prefix`), and
//! phrases it must contain, each somewhere (lexically constrained decoding), searched with the
//! dynamic beam allocation of Post & Vilar (2018), as fairseq's `--constraints unordered` and
//! Sockeye do.
//!
//! Dynamic beam allocation, per sentence and step:
//! - Every live hypothesis proposes its best tokens as usual, and also each token that would
//!   advance a phrase: the next token of the phrase it is in the middle of, or else the first
//!   token of every phrase it has not met. EOS is proposed only once every phrase is met (at the
//!   length limit it is the only token, as always).
//! - Each candidate falls in the bank of the phrase tokens it will have met (a phrase left half
//!   way is undone: its tokens count no more). The `k` free slots are split evenly over the
//!   banks, the remainder to the fullest banks; slots a bank has no candidates for go to the
//!   fullest banks that have more. Each bank fills its slots with its best candidates.
//!
//! So a hypothesis that has met more of its phrases is never crowded out by better-scoring ones
//! that have met fewer. A beam of at least one slot more than the phrases' tokens gives every bank
//! a slot; a beam of 1 always takes the candidate that advances the phrases furthest.

use crate::error::{Error, Result};
use crate::vocab::{BOS, EOS, PAD};

/// The most phrases one sentence may ask for.
pub const MAX_PHRASES: usize = 64;

/// What one sentence's output must hold (see the module docs). The default asks nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Guide {
    /// Output tokens the output starts with (forced; the search continues from them).
    pub prefix: Vec<u32>,
    /// Token sequences the output contains, each somewhere after the start, in any order.
    pub phrases: Vec<Vec<u32>>,
}

impl Guide {
    /// Whether it asks nothing.
    pub fn is_empty(&self) -> bool {
        self.prefix.is_empty() && self.phrases.is_empty()
    }

    /// The tokens of all the phrases.
    pub(super) fn phrase_tokens(&self) -> usize {
        self.phrases.iter().map(Vec::len).sum()
    }

    /// Checks it for sentence `sent` (0-based) of a search over a vocabulary of `v` whose output
    /// may take at most `limit` tokens before its EOS: every token in the vocabulary and none of
    /// PAD, BOS or EOS, no empty phrase, and room for the prefix and every phrase.
    pub(super) fn validate(&self, sent: usize, v: usize, limit: usize) -> Result<()> {
        let n = sent + 1;
        let bad = |m: String| Err(Error::Input(format!("sentence {n}: {m}")));
        if self.phrases.len() > MAX_PHRASES {
            return bad(format!("{} phrases asked for; at most {MAX_PHRASES}", self.phrases.len()));
        }
        if self.phrases.iter().any(Vec::is_empty) {
            return bad("a phrase the output must contain is empty".into());
        }
        let tokens = self.prefix.iter().chain(self.phrases.iter().flatten());
        if let Some(&t) = tokens.clone().find(|&&t| t as usize >= v) {
            return bad(format!("token id {t} of the prefix or a phrase lies outside the vocabulary of {v}"));
        }
        if let Some(&t) = tokens.clone().find(|&&t| [PAD, BOS, EOS].contains(&t)) {
            return bad(format!("the prefix or a phrase holds the special token id {t} (PAD, BOS or EOS)"));
        }
        let need = self.prefix.len() + self.phrase_tokens();
        if need > limit {
            return bad(format!(
                "the prefix and phrases take {need} tokens but the output may have at most {limit} \
                 (raise --max-len-b or --max-len-a)"
            ));
        }
        Ok(())
    }
}

/// How far a hypothesis has come through its sentence's phrases: which it has met, and the one
/// it is in the middle of (phrase, tokens of it written).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Progress {
    met: Vec<bool>,
    current: Option<(usize, usize)>,
}

impl Progress {
    /// The start, for a sentence's guide.
    pub(super) fn new(g: &Guide) -> Self {
        Progress { met: vec![false; g.phrases.len()], current: None }
    }

    /// Whether every phrase is met.
    pub(super) fn all_met(&self) -> bool {
        self.met.iter().all(|&m| m)
    }

    /// The phrase tokens met: the bank of dynamic beam allocation.
    pub(super) fn bank(&self, g: &Guide) -> usize {
        let met: usize = g.phrases.iter().zip(&self.met).filter(|p| *p.1).map(|p| p.0.len()).sum();
        met + self.current.map_or(0, |(_, i)| i)
    }

    /// The progress after writing `token`: the phrase it is in continues or is undone, and a
    /// token that begins a phrase not met begins it (the first such, in the guide's order).
    pub(super) fn advance(&self, g: &Guide, token: u32) -> Self {
        let mut next = self.clone();
        if let Some((j, i)) = self.current {
            next.current = None;
            if g.phrases[j][i] == token {
                if i + 1 == g.phrases[j].len() {
                    next.met[j] = true;
                } else {
                    next.current = Some((j, i + 1));
                }
                return next;
            }
        }
        if let Some(j) = (0..g.phrases.len()).find(|&j| !next.met[j] && g.phrases[j][0] == token) {
            if g.phrases[j].len() == 1 {
                next.met[j] = true;
            } else {
                next.current = Some((j, 1));
            }
        }
        next
    }

    /// Calls `f` with each token that advances a phrase: the next of the phrase in progress, or
    /// the first of every phrase not met.
    pub(super) fn wanted(&self, g: &Guide, mut f: impl FnMut(u32)) {
        match self.current {
            Some((j, i)) => f(g.phrases[j][i]),
            None => {
                for (p, _) in g.phrases.iter().zip(&self.met).filter(|p| !*p.1) {
                    f(p[0]);
                }
            }
        }
    }
}

/// Dynamic beam allocation (see the module docs): of candidates ranked best first, each in
/// `banks[i]` (< `n_banks`), the ones that fill `k` slots, as their indices, ascending.
pub(super) fn allocate(banks: &[usize], n_banks: usize, k: usize) -> Vec<usize> {
    let mut count = vec![0usize; n_banks];
    for &b in banks {
        count[b] += 1;
    }
    // Even shares, the remainder to the fullest banks, each cut to its candidates.
    let mut size: Vec<usize> = (0..n_banks).map(|b| k / n_banks + usize::from(n_banks - b <= k % n_banks)).collect();
    for (s, &c) in size.iter_mut().zip(&count) {
        *s = (*s).min(c);
    }
    // The slots left over go to the fullest banks that have candidates to spare.
    let mut left = k.min(banks.len()) - size.iter().sum::<usize>();
    for b in (0..n_banks).rev() {
        let give = (count[b] - size[b]).min(left);
        size[b] += give;
        left -= give;
    }
    let mut taken = vec![0usize; n_banks];
    (0..banks.len())
        .filter(|&i| {
            let b = banks[i];
            let take = taken[b] < size[b];
            taken[b] += usize::from(take);
            take
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_splits_slots_over_banks_and_passes_on_the_unused() {
        // Banks of 6 ranked candidates; 3 banks, 4 slots: shares 1, 1, 2.
        let banks = [0, 0, 1, 0, 2, 1];
        assert_eq!(allocate(&banks, 3, 4), vec![0, 2, 4, 5]);
        // Bank 2's second slot has no candidate: it goes to bank 1, which has none to spare,
        // then to bank 0.
        assert_eq!(allocate(&[0, 0, 0, 2, 1], 3, 4), vec![0, 1, 3, 4]);
        // More banks than slots: the fullest banks first.
        assert_eq!(allocate(&[0, 0, 1, 3], 4, 1), vec![3]);
        assert_eq!(allocate(&[0, 0, 1, 1], 4, 1), vec![2]);
        // Fewer candidates than slots: all of them.
        assert_eq!(allocate(&[1, 0], 2, 4), vec![0, 1]);
        // One bank: the best k.
        assert_eq!(allocate(&[0; 5], 1, 3), vec![0, 1, 2]);
    }

    #[test]
    fn progress_meets_continues_and_undoes_phrases() {
        let g = Guide { prefix: vec![], phrases: vec![vec![5, 6, 7], vec![9]] };
        let p = Progress::new(&g);
        let mut wanted = Vec::new();
        p.wanted(&g, |t| wanted.push(t));
        assert_eq!(wanted, vec![5, 9]);
        let p = p.advance(&g, 5).advance(&g, 6);
        assert_eq!(p.bank(&g), 2);
        wanted.clear();
        p.wanted(&g, |t| wanted.push(t));
        assert_eq!(wanted, vec![7]);
        // Left half way: undone, and the token that broke it begins nothing.
        assert_eq!(p.advance(&g, 8).bank(&g), 0);
        // Broken by the start of the same phrase: begun again.
        assert_eq!(p.advance(&g, 5).bank(&g), 1);
        let done = p.advance(&g, 7);
        assert_eq!((done.bank(&g), done.all_met()), (3, false));
        let all = done.advance(&g, 9);
        assert_eq!((all.bank(&g), all.all_met()), (4, true));
        wanted.clear();
        all.wanted(&g, |t| wanted.push(t));
        assert!(wanted.is_empty());
        // A met phrase written again changes nothing.
        assert_eq!(all.advance(&g, 9), all);
    }

    #[test]
    fn a_guide_is_checked_against_the_vocabulary_and_the_length_limit() {
        let g = |prefix: Vec<u32>, phrases: Vec<Vec<u32>>| Guide { prefix, phrases };
        assert!(g(vec![5], vec![vec![6, 7]]).validate(0, 10, 3).is_ok());
        let e = g(vec![5], vec![vec![6, 7]]).validate(2, 10, 2).unwrap_err().to_string();
        assert!(e.contains("sentence 3") && e.contains("take 3 tokens") && e.contains("at most 2"), "{e}");
        let e = g(vec![], vec![vec![]]).validate(0, 10, 9).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = g(vec![10], vec![]).validate(0, 10, 9).unwrap_err().to_string();
        assert!(e.contains("token id 10") && e.contains("vocabulary of 10"), "{e}");
        let e = g(vec![], vec![vec![5, EOS]]).validate(0, 10, 9).unwrap_err().to_string();
        assert!(e.contains("special token"), "{e}");
    }
}
