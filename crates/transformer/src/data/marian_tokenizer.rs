//! `transformers.MarianTokenizer` in Rust: two SentencePiece models ([`SentencePiece`]) and the
//! vocabulary files of a Marian / OPUS-MT model, giving the same ids as the Python tokenizer; and
//! the one-file format ([`MARIAN_FORMAT`]) the import writes them into.
//!
//! A Hugging Face tokenizer directory is read by the importer's reader
//! (`import/marian/hf_tokenizer.rs`), which defines [`MarianTokenizer::from_hf_dir`] beside the
//! importer's own use of it, so that both read the same files the same way.

use super::sentencepiece::{SentencePiece, SPACE_SYMBOL};
use crate::error::{Error, Result};
use crate::io::{io_err, write_atomically};
use std::collections::HashMap;
use std::path::Path;

/// The format tag of the one-file tokenizer written by [`MarianTokenizer::save`].
pub const MARIAN_FORMAT: &str = "transformer-marian-tokenizer/1";

/// What `transformers.MarianTokenizer` does: source text through the source SentencePiece model,
/// target text through the target one, pieces mapped through `vocab.json` (or, with separate
/// vocabularies, `vocab.json` for the source and `target_vocab.json` for the target), unknown
/// pieces to the unknown id, `</s>` appended.
#[derive(Clone, Debug)]
pub struct MarianTokenizer {
    source: SentencePiece,
    target: SentencePiece,
    vocab: HashMap<String, u32>,
    target_vocab: Option<HashMap<String, u32>>,
    /// Id → piece of the vocabulary decoding uses (the target one with separate vocabularies).
    decoder: HashMap<u32, String>,
    eos_token: String,
    unk_token: String,
    pad_token: String,
    eos_id: u32,
    unk_id: u32,
    pad_id: u32,
    /// `clean_up_tokenization_spaces` of `tokenizer_config.json`: decoding removes spaces before
    /// punctuation.
    clean_up_tokenization_spaces: bool,
}

impl MarianTokenizer {
    /// Builds the tokenizer from its parts; `target_vocab` is `Some` for separate vocabularies.
    pub fn new(
        source: SentencePiece,
        target: SentencePiece,
        vocab: HashMap<String, u32>,
        target_vocab: Option<HashMap<String, u32>>,
        specials: MarianSpecials,
    ) -> Result<Self> {
        let MarianSpecials { eos_token, unk_token, pad_token, clean_up_tokenization_spaces } = specials;
        // The special ids are looked up in the vocabulary the source side uses.
        let find = |token: &str| {
            vocab.get(token).copied().ok_or_else(|| {
                Error::Mismatch(format!("Marian tokenizer: the special token {token:?} is not in the vocabulary"))
            })
        };
        let (eos_id, unk_id, pad_id) = (find(&eos_token)?, find(&unk_token)?, find(&pad_token)?);
        let decoder = target_vocab.as_ref().unwrap_or(&vocab).iter().map(|(k, &v)| (v, k.clone())).collect();
        Ok(MarianTokenizer {
            source,
            target,
            vocab,
            target_vocab,
            decoder,
            eos_token,
            unk_token,
            pad_token,
            eos_id,
            unk_id,
            pad_id,
            clean_up_tokenization_spaces,
        })
    }

    /// The source-side SentencePiece model.
    pub fn source_model(&self) -> &SentencePiece {
        &self.source
    }

    /// The target-side SentencePiece model.
    pub fn target_model(&self) -> &SentencePiece {
        &self.target
    }

    /// Whether source and target have their own vocabularies.
    pub fn separate_vocabs(&self) -> bool {
        self.target_vocab.is_some()
    }

    /// The size of the (source) vocabulary, as `tokenizer.vocab_size`.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The size of the target vocabulary (the shared one without separate vocabularies).
    pub fn target_vocab_size(&self) -> usize {
        self.target_vocab.as_ref().unwrap_or(&self.vocab).len()
    }

    /// The end-of-sentence id.
    pub fn eos_id(&self) -> u32 {
        self.eos_id
    }

    /// The unknown id.
    pub fn unk_id(&self) -> u32 {
        self.unk_id
    }

    /// The padding id.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The id of `token` in the source vocabulary.
    pub fn source_token_to_id(&self, token: &str) -> Option<u32> {
        self.vocab.get(token).copied()
    }

    /// The id of `token` in the target vocabulary.
    pub fn target_token_to_id(&self, token: &str) -> Option<u32> {
        self.target_vocab.as_ref().unwrap_or(&self.vocab).get(token).copied()
    }

    /// The (eos, unk, pad) tokens.
    pub fn special_tokens(&self) -> (&str, &str, &str) {
        (&self.eos_token, &self.unk_token, &self.pad_token)
    }

    /// The piece of source id `id`.
    pub fn source_id_to_piece(&self, id: u32) -> Option<&str> {
        self.vocab.iter().find(|(_, &v)| v == id).map(|(k, _)| k.as_str())
    }

    /// The piece of target id `id` (as decoding sees it).
    pub fn id_to_piece(&self, id: u32) -> Option<&str> {
        self.decoder.get(&id).map(String::as_str)
    }

    /// The pieces of the source (`target = false`) or target vocabulary in id order; `None` when
    /// its ids are not 0..n without gaps.
    pub fn pieces_by_id(&self, target: bool) -> Option<Vec<&str>> {
        let vocab = if target { self.target_vocab.as_ref().unwrap_or(&self.vocab) } else { &self.vocab };
        let mut pieces: Vec<Option<&str>> = vec![None; vocab.len()];
        for (piece, &id) in vocab {
            *pieces.get_mut(id as usize)? = Some(piece.as_str());
        }
        pieces.into_iter().collect()
    }

    fn specials(&self) -> [&str; 3] {
        [&self.eos_token, &self.unk_token, &self.pad_token]
    }

    /// Ids of a source sentence, `</s>` last, as `tokenizer(text)["input_ids"]`.
    pub fn encode_source(&self, text: &str) -> Vec<u32> {
        self.encode(text, &self.source, &self.vocab)
    }

    /// Ids of a target sentence, `</s>` last, as `tokenizer(text_target=text)["input_ids"]`.
    pub fn encode_target(&self, text: &str) -> Vec<u32> {
        self.encode(text, &self.target, self.target_vocab.as_ref().unwrap_or(&self.vocab))
    }

    /// `PreTrainedTokenizer.tokenize` then the vocabulary lookup: the special tokens written in the
    /// text are split out first (leftmost, longest) and map straight to their ids; each stretch
    /// between them goes through `_tokenize` (a leading `>>xx<<` language code split off as a token
    /// of its own, the rest through SentencePiece).
    fn encode(&self, text: &str, spm: &SentencePiece, vocab: &HashMap<String, u32>) -> Vec<u32> {
        let lookup = |piece: &str| vocab.get(piece).copied().unwrap_or(self.unk_id);
        let mut ids = Vec::new();
        for (segment, special) in split_on_tokens(text, &self.specials()) {
            if special {
                ids.push(lookup(segment));
                continue;
            }
            let mut rest = segment;
            if rest.starts_with(">>") {
                if let Some(end) = rest.find("<<") {
                    ids.push(lookup(&rest[..end + 2]));
                    rest = &rest[end + 2..];
                }
            }
            ids.extend(spm.encode(rest).iter().map(|p| lookup(p)));
        }
        ids.push(self.eos_id);
        ids
    }

    /// Text of target ids, as `tokenizer.decode(ids, skip_special_tokens=True)`: the special ids
    /// (`</s>`, `<unk>`, `<pad>`) are dropped, the rest mapped to pieces and joined by a
    /// SentencePiece model (like `MarianTokenizer`, the *source* model when the vocabulary is
    /// shared, the target model with separate vocabularies), `▁` turned into spaces and the
    /// result stripped of surrounding whitespace. Ids outside the vocabulary take the model's piece
    /// of that id, or `<unk>`.
    pub fn decode_target(&self, ids: &[u32]) -> String {
        let spm = if self.separate_vocabs() { &self.target } else { &self.source };
        let skip = [self.eos_id, self.unk_id, self.pad_id];
        let pieces: Vec<&str> = ids
            .iter()
            .filter(|id| !skip.contains(id))
            .map(|&id| match self.decoder.get(&id) {
                Some(p) => p.as_str(),
                None => spm.id_to_piece(id).unwrap_or(&self.unk_token),
            })
            .collect();
        // `convert_tokens_to_string`: a special token's text among the pieces is kept as it is.
        let specials = self.specials();
        let mut out = String::new();
        let mut run: Vec<&str> = Vec::new();
        for p in pieces {
            if specials.contains(&p) {
                out.push_str(&spm.decode_pieces(&run));
                out.push_str(p);
                out.push(' ');
                run.clear();
            } else {
                run.push(p);
            }
        }
        out.push_str(&spm.decode_pieces(&run));
        let out = out.replace(SPACE_SYMBOL, " ");
        let out = out.trim_matches(python_isspace).to_string();
        if self.clean_up_tokenization_spaces {
            clean_up_tokenization(&out)
        } else {
            out
        }
    }

    /// Writes the whole tokenizer into one self-contained JSON file (format [`MARIAN_FORMAT`]):
    /// both SentencePiece models base64-encoded, the vocabularies and the special tokens.
    pub fn save(&self, path: &Path) -> Result<()> {
        let file = MarianFile {
            format: MARIAN_FORMAT.to_string(),
            source_spm: base64_encode(self.source.to_bytes()),
            target_spm: base64_encode(self.target.to_bytes()),
            vocab: sorted(&self.vocab),
            target_vocab: self.target_vocab.as_ref().map(sorted),
            eos_token: self.eos_token.clone(),
            unk_token: self.unk_token.clone(),
            pad_token: self.pad_token.clone(),
            clean_up_tokenization_spaces: self.clean_up_tokenization_spaces,
        };
        let json = serde_json::to_vec(&file).map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
        write_atomically(path, &json)
    }

    /// Reads a file written by [`MarianTokenizer::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let bad = |reason: String| {
            Error::Input(format!(
                "{}: not a Marian tokenizer file ({MARIAN_FORMAT}): {reason}. Write it again with MarianTokenizer::save",
                path.display()
            ))
        };
        let data = std::fs::read(path).map_err(io_err(path))?;
        let file: MarianFile = serde_json::from_slice(&data).map_err(|e| bad(e.to_string()))?;
        if file.format != MARIAN_FORMAT {
            return Err(bad(format!("its format is {:?}", file.format)));
        }
        let spm = |b64: &str, side: &str| -> Result<SentencePiece> {
            let bytes = base64_decode(b64).ok_or_else(|| bad(format!("the {side} model is not valid base64")))?;
            SentencePiece::from_bytes(&bytes).map_err(|e| bad(format!("the {side} model: {e}")))
        };
        let specials = MarianSpecials {
            eos_token: file.eos_token,
            unk_token: file.unk_token,
            pad_token: file.pad_token,
            clean_up_tokenization_spaces: file.clean_up_tokenization_spaces,
        };
        let to_map = |v: Vec<(String, u32)>| v.into_iter().collect::<HashMap<_, _>>();
        Self::new(
            spm(&file.source_spm, "source")?,
            spm(&file.target_spm, "target")?,
            to_map(file.vocab),
            file.target_vocab.map(to_map),
            specials,
        )
        .map_err(|e| bad(e.to_string()))
    }
}

/// The special tokens of a Marian tokenizer, and whether decoding cleans up spaces.
#[derive(Clone, Debug)]
pub struct MarianSpecials {
    /// End of sentence, appended to every encoding (`</s>`).
    pub eos_token: String,
    /// Unknown (`<unk>`).
    pub unk_token: String,
    /// Padding (`<pad>`).
    pub pad_token: String,
    /// `clean_up_tokenization_spaces` of `tokenizer_config.json` (default false).
    pub clean_up_tokenization_spaces: bool,
}

impl Default for MarianSpecials {
    fn default() -> Self {
        MarianSpecials {
            eos_token: "</s>".into(),
            unk_token: "<unk>".into(),
            pad_token: "<pad>".into(),
            clean_up_tokenization_spaces: false,
        }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct MarianFile {
    format: String,
    source_spm: String,
    target_spm: String,
    /// (piece, id) pairs in id order.
    vocab: Vec<(String, u32)>,
    target_vocab: Option<Vec<(String, u32)>>,
    eos_token: String,
    unk_token: String,
    pad_token: String,
    clean_up_tokenization_spaces: bool,
}

fn sorted(map: &HashMap<String, u32>) -> Vec<(String, u32)> {
    let mut v: Vec<_> = map.iter().map(|(k, &i)| (k.clone(), i)).collect();
    v.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    v
}

/// Splits `text` at every occurrence of one of `tokens` (the leftmost, and the longest there), as
/// the added-tokens trie of `PreTrainedTokenizer.tokenize` does. Yields (segment, is_token);
/// empty segments are left out.
fn split_on_tokens<'a>(text: &'a str, tokens: &[&str]) -> Vec<(&'a str, bool)> {
    let mut out = Vec::new();
    let mut start = 0usize;
    let mut i = 0usize;
    while i < text.len() {
        let rest = &text[i..];
        let hit = tokens.iter().filter(|t| !t.is_empty() && rest.starts_with(**t)).map(|t| t.len()).max();
        match hit {
            Some(len) => {
                if start < i {
                    out.push((&text[start..i], false));
                }
                out.push((&text[i..i + len], true));
                i += len;
                start = i;
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    if start < text.len() {
        out.push((&text[start..], false));
    }
    out
}

/// Python's `str.isspace` for one character (what `str.strip()` removes): Unicode White_Space
/// plus the information separators U+001C..U+001F.
fn python_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `PreTrainedTokenizerBase.clean_up_tokenization`: spaces before punctuation and English
/// contractions removed.
fn clean_up_tokenization(text: &str) -> String {
    [
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ]
    .iter()
    .fold(text.to_string(), |t, (from, to)| t.replace(from, to))
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(BASE64[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding required); `None` when malformed.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| BASE64.iter().position(|&b| b == c).map(|v| v as u32);
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = i + 1 == bytes.len() / 4;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip() {
        for data in [&b""[..], b"a", b"ab", b"abc", b"abcd", &[0, 255, 128, 7, 9]] {
            let enc = base64_encode(data);
            assert_eq!(base64_decode(&enc).as_deref(), Some(data), "{enc}");
        }
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert!(base64_decode("a=bc").is_none());
    }

    #[test]
    fn splits_on_special_tokens() {
        let t = ["</s>", "<unk>", "<pad>"];
        assert_eq!(
            split_on_tokens("a<unk>b</s></s>", &t),
            vec![("a", false), ("<unk>", true), ("b", false), ("</s>", true), ("</s>", true)]
        );
        assert_eq!(split_on_tokens("", &t), vec![]);
    }
}
