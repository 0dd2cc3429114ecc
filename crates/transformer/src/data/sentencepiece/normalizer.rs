//! The normaliser (`normalizer.cc`): the longest-match rewriting of the text through the
//! precompiled character map, then the whitespace rules (extra spaces removed, spaces escaped as
//! `▁`, the dummy prefix); the same machinery, with its own map, denormalises decoded text.

use super::proto::{field_bytes, field_varint, spm_err, Fields};
use super::trie::Trie;
use super::utf8::decode_utf8_prefix;
use crate::error::Result;

/// The escaped space, U+2581 LOWER ONE EIGHTH BLOCK.
pub(crate) const SPACE_SYMBOL: &str = "\u{2581}";
/// The normaliser looks at no more than this many trie matches per position (`kMaxTrieResultsSize`).
const MAX_TRIE_RESULTS: usize = 32;

/// The precompiled character map: a Darts-clone double-array trie plus replacement strings.
#[derive(Clone, Debug)]
pub(super) struct CharsMap {
    /// The double-array units.
    units: Vec<u32>,
    /// The replacement strings, each ended by NUL; trie values are offsets into this.
    normalized: Vec<u8>,
}

impl CharsMap {
    /// Splits the blob: a little-endian u32 trie size in bytes, the trie, the replacement strings.
    fn parse(blob: &[u8]) -> Result<Self> {
        if blob.len() <= 4 {
            return Err(spm_err("the normaliser's precompiled_charsmap is broken (too short)"));
        }
        let trie_size = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
        if trie_size >= blob.len() || !trie_size.is_multiple_of(4) {
            return Err(spm_err("the normaliser's precompiled_charsmap is broken (bad trie size)"));
        }
        let units = blob[4..4 + trie_size]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<_>>();
        if units.is_empty() {
            return Err(spm_err("the normaliser's precompiled_charsmap has an empty trie"));
        }
        Ok(CharsMap { units, normalized: blob[4 + trie_size..].to_vec() })
    }

    /// Darts' `commonPrefixSearch`: the longest rule among the first [`MAX_TRIE_RESULTS`] rules
    /// matching a prefix of `key`, as (prefix length, replacement). A corrupt trie that points
    /// outside itself ends the search instead of failing.
    fn longest_match(&self, key: &[u8]) -> Option<(usize, &[u8])> {
        let unit = |pos: usize| self.units.get(pos).copied();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let has_leaf = |u: u32| (u >> 8) & 1 == 1;
        let label = |u: u32| u & ((1 << 31) | 0xFF);
        let value = |u: u32| (u & 0x7FFF_FFFF) as usize;

        let mut best: Option<(usize, usize)> = None;
        let mut found = 0usize;
        let mut pos = offset(unit(0)?);
        for (i, &b) in key.iter().enumerate() {
            pos ^= b as usize;
            let u = unit(pos)?;
            if label(u) != u32::from(b) {
                break;
            }
            pos ^= offset(u);
            if has_leaf(u) {
                if found < MAX_TRIE_RESULTS {
                    // Results come shortest first, so the last one kept is the longest.
                    best = Some((i + 1, value(unit(pos)?)));
                }
                found += 1;
            }
        }
        let (len, start) = best?;
        let rest = self.normalized.get(start..)?;
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        Some((len, &rest[..end]))
    }
}

/// The normaliser's settings (`NormalizerSpec`) and its character map.
#[derive(Clone, Debug)]
pub(super) struct Normalizer {
    /// The precompiled rules (`precompiled_charsmap`), when there are any.
    pub(super) charsmap: Option<CharsMap>,
    /// `add_dummy_prefix`: a space before the text.
    pub(super) add_dummy_prefix: bool,
    /// `remove_extra_whitespaces`: leading, trailing and repeated spaces go.
    pub(super) remove_extra_whitespaces: bool,
    /// `escape_whitespaces`: spaces written as `▁`.
    escape_whitespaces: bool,
    /// The trainer's `treat_whitespace_as_suffix`: the dummy space goes after the text.
    treat_whitespace_as_suffix: bool,
}

impl Normalizer {
    /// Reads a `NormalizerSpec` message.
    pub(super) fn parse(data: &[u8], treat_whitespace_as_suffix: bool) -> Result<Self> {
        let mut n = Normalizer {
            charsmap: None,
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
            treat_whitespace_as_suffix,
        };
        let mut fields = Fields::new(data);
        while let Some((number, value)) = fields.next_field()? {
            match number {
                2 => {
                    let blob = field_bytes(&value, "normalizer_spec.precompiled_charsmap")?;
                    n.charsmap = if blob.is_empty() { None } else { Some(CharsMap::parse(blob)?) };
                }
                3 => n.add_dummy_prefix = field_varint(&value, "normalizer_spec.add_dummy_prefix")? != 0,
                4 => {
                    n.remove_extra_whitespaces = field_varint(&value, "normalizer_spec.remove_extra_whitespaces")? != 0
                }
                5 => n.escape_whitespaces = field_varint(&value, "normalizer_spec.escape_whitespaces")? != 0,
                _ => {}
            }
        }
        Ok(n)
    }

    /// `NormalizePrefix`: what the text at the start of `input` becomes, and how many bytes it
    /// consumes. A user-defined symbol is kept as it is; otherwise the longest rule of the
    /// character map applies; otherwise one character is copied (an invalid byte becomes U+FFFD).
    fn normalize_prefix<'a>(&'a self, input: &'a [u8], user: Option<&Trie>) -> (&'a [u8], usize) {
        if let Some(len) = user.and_then(|t| t.longest_prefix(input)) {
            return (&input[..len], len);
        }
        if let Some((len, replacement)) = self.charsmap.as_ref().and_then(|m| m.longest_match(input)) {
            return (replacement, len);
        }
        match decode_utf8_prefix(input) {
            (true, len) => (&input[..len], len),
            (false, _) => ("\u{FFFD}".as_bytes(), 1),
        }
    }

    /// `Normalizer::Normalize`: rewrites `input` and applies the whitespace rules.
    pub(super) fn normalize(&self, input: &[u8], user: Option<&Trie>) -> Vec<u8> {
        let mut input = input;
        let mut out = Vec::with_capacity(input.len() * 3);
        if input.is_empty() {
            return out;
        }
        // Leading whitespace goes: only prefixes that normalise to exactly one space count.
        if self.remove_extra_whitespaces {
            while !input.is_empty() {
                let (s, len) = self.normalize_prefix(input, user);
                if s != b" " {
                    break;
                }
                input = &input[len..];
            }
        }
        if input.is_empty() {
            return out;
        }
        let space: &[u8] = if self.escape_whitespaces { SPACE_SYMBOL.as_bytes() } else { b" " };
        if !self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.extend_from_slice(space);
        }
        let mut prev_space = self.remove_extra_whitespaces;
        while !input.is_empty() {
            let (mut s, len) = self.normalize_prefix(input, user);
            // After a space, the spaces a rule's output starts with are dropped (runs collapse).
            while prev_space && s.first() == Some(&b' ') {
                s = &s[1..];
            }
            if !s.is_empty() {
                for &b in s {
                    if self.escape_whitespaces && b == b' ' {
                        out.extend_from_slice(SPACE_SYMBOL.as_bytes());
                    } else {
                        out.push(b);
                    }
                }
                prev_space = s.last() == Some(&b' ');
            }
            input = &input[len..];
            if !self.remove_extra_whitespaces {
                prev_space = false;
            }
        }
        if self.remove_extra_whitespaces {
            while out.ends_with(space) {
                out.truncate(out.len() - space.len());
            }
        }
        if self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.extend_from_slice(space);
        }
        out
    }
}
