//! A byte trie over pieces: every piece that is a prefix of a text, shortest first (the unigram
//! lattice's candidates), and the longest one (user-defined symbols, matched whole).

/// A byte trie with sorted children: finds every piece that is a prefix of a text, shortest first.
#[derive(Clone, Debug, Default)]
pub(super) struct Trie {
    /// Per node: its children as (byte, node), sorted by byte.
    children: Vec<Vec<(u8, u32)>>,
    /// Per node: the value of the key ending there.
    values: Vec<Option<u32>>,
}

impl Trie {
    /// An empty trie.
    pub(super) fn new() -> Self {
        Trie { children: vec![Vec::new()], values: vec![None] }
    }

    /// Adds `key` with `value` (replacing the value of an equal key).
    pub(super) fn insert(&mut self, key: &[u8], value: u32) {
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
    pub(super) fn prefixes(&self, text: &[u8], mut f: impl FnMut(usize, u32)) {
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
    pub(super) fn longest_prefix(&self, text: &[u8]) -> Option<usize> {
        let mut longest = None;
        self.prefixes(text, |len, _| longest = Some(len));
        longest
    }
}
