//! §5.1 Byte-pair encoding (Sennrich et al., 2016) over one vocabulary shared by source and target,
//! on the `tokenizers` crate: byte-level pre-tokenization, so every string (any Unicode, any
//! whitespace) encodes without unknown tokens and decodes back to itself.
//!
//! The special tokens have fixed ids: `<pad>` 0, `<s>` 1, `</s>` 2, `<unk>` 3 ([`crate::vocab`]).

use crate::error::{Error, Result};
use crate::io::{io_err, write_atomically};
pub use crate::vocab::SPECIALS;
use crate::vocab::SPECIAL_TOKENS;
use sha2::{Digest, Sha256};
use std::path::Path;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, DecoderWrapper, ModelWrapper, PreTokenizerWrapper, Tokenizer};

/// A learned BPE model.
#[derive(Clone)]
pub struct Bpe {
    tokenizer: Tokenizer,
    hash: String,
}

fn bpe_err(e: impl std::fmt::Display) -> Error {
    Error::Bpe(e.to_string())
}

impl Bpe {
    /// Learns a vocabulary of `vocab_size` entries (specials and the 256 byte symbols included)
    /// from `lines` (source and target text together, for the shared vocabulary). Pairs seen fewer
    /// than `min_frequency` times are not merged.
    pub fn learn<I, S>(lines: I, vocab_size: usize, min_frequency: u64) -> Result<Bpe>
    where
        I: Iterator<Item = S> + Send,
        S: AsRef<str> + Send,
    {
        let min_vocab = SPECIALS.len() + 256;
        if vocab_size < min_vocab {
            return Err(Error::Bpe(format!(
                "vocabulary size {vocab_size} is below the {min_vocab} specials and byte symbols"
            )));
        }
        let trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab_size)
            .min_frequency(min_frequency)
            .show_progress(false)
            .special_tokens(SPECIALS.iter().map(|s| AddedToken::from(*s, true)).collect())
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build();
        let mut tokenizer = Tokenizer::new(ModelWrapper::BPE(BPE::default()));
        // No prefix space, byte-level trimming off, GPT-2 split regex: lossless in both directions.
        tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, true))));
        tokenizer.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::new(false, false, true))));
        let mut trainer = TrainerWrapper::BpeTrainer(trainer);
        tokenizer.train(&mut trainer, lines.map(|l| l.as_ref().to_string())).map_err(bpe_err)?;
        Self::from_tokenizer(tokenizer)
    }

    fn from_tokenizer(mut tokenizer: Tokenizer) -> Result<Bpe> {
        // Text that spells a special token ("<s>") is ordinary text, never a control token.
        tokenizer.set_encode_special_tokens(true);
        for (id, s) in SPECIALS.iter().enumerate() {
            if tokenizer.token_to_id(s) != Some(id as u32) {
                return Err(Error::Bpe(format!(
                    "special token {s} must have id {id}, found {:?}: re-learn the vocabulary with `transformer bpe learn`",
                    tokenizer.token_to_id(s)
                )));
            }
        }
        let json = tokenizer.to_string(false).map_err(bpe_err)?;
        let hash = format!("sha256:{:x}", Sha256::digest(json.as_bytes()));
        Ok(Bpe { tokenizer, hash })
    }

    /// Writes the model (the `tokenizers` JSON format) atomically, creating its directory if needed.
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = self.tokenizer.to_string(true).map_err(bpe_err)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        write_atomically(path, json.as_bytes())
    }

    /// Reads a model written by [`Bpe::save`].
    pub fn load(path: &Path) -> Result<Bpe> {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        // A safetensors file: 8 bytes of header length, then the JSON header.
        if bytes.len() >= 10 && bytes[8..].starts_with(b"{\"") {
            return Err(Error::Bpe(format!(
                "{}: not a BPE model but a checkpoint (safetensors): give --bpe the vocabulary file the model \
                 was trained with (the run's data.bpe, e.g. vocab.json or bpe.json)",
                path.display()
            )));
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            Error::Bpe(format!(
                "{}: not a BPE model (a binary file, not JSON text); create one with `transformer bpe learn`",
                path.display()
            ))
        })?;
        Self::from_json(&text, path)
    }

    /// [`Bpe::load`] on the text of a model file (`path` names it in errors). Never panics,
    /// whatever the text (fuzzed: `fuzz/fuzz_targets/bpe_json.rs`).
    pub fn from_json(text: &str, path: &Path) -> Result<Bpe> {
        // Syntax first: `tokenizers` 0.22 panics (instead of failing) on malformed JSON inside a
        // decoder (found by fuzzing), so it only ever sees well-formed JSON.
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| {
            Error::Bpe(format!(
                "{}: not a BPE model (not valid JSON: {e}); create one with `transformer bpe learn`",
                path.display()
            ))
        })?;
        #[derive(serde::Deserialize)]
        struct Format {
            format: Option<String>,
        }
        if serde_json::from_str::<Format>(text).ok().and_then(|f| f.format).as_deref()
            == Some(super::marian_tokenizer::MARIAN_FORMAT)
        {
            return Err(Error::Bpe(format!(
                "{}: an imported model's tokenizer (`transformer import marian`), not a BPE model: translating, \
                 evaluating, serving, `prepare` and fine-tuning take it; parsing and `bpe` need the BPE vocabulary of \
                 a run of ours",
                path.display()
            )));
        }
        let tokenizer: Tokenizer = text.parse().map_err(|e| {
            Error::Bpe(format!("{}: not a BPE model ({e}); create one with `transformer bpe learn`", path.display()))
        })?;
        Self::from_tokenizer(tokenizer)
    }

    /// Entries in the vocabulary (the model's `vocab_size`).
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// What to warn about when learning gave fewer than the `asked` entries: `None` if it gave them all.
    pub fn shortfall(&self, asked: usize) -> Option<String> {
        let learned = self.vocab_size();
        (learned < asked).then(|| {
            format!(
                "learned {learned} entries, fewer than the {asked} asked: the text has too few distinct pairs \
                 frequent enough to merge"
            )
        })
    }

    /// `sha256:…` of the model's canonical JSON: stored in checkpoints to catch a mismatched vocabulary.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The piece (or special token) of an id, as the vocabulary spells it.
    pub fn piece_of(&self, id: u32) -> Option<String> {
        self.tokenizer.id_to_token(id)
    }

    /// The id of a vocabulary entry (a piece or a special token).
    pub fn id_of(&self, piece: &str) -> Option<u32> {
        self.tokenizer.token_to_id(piece)
    }

    /// This vocabulary with `tokens` added as whole entries (special tokens of the tokenizer, so
    /// they are never matched inside ordinary text: source text is encoded as before). Parsing
    /// adds its tree tokens this way. Tokens already present keep their ids.
    pub fn with_whole_tokens(&self, tokens: &[&str]) -> Result<Bpe> {
        let mut tokenizer = self.tokenizer.clone();
        let added: Vec<AddedToken> = tokens.iter().map(|t| AddedToken::from(t.to_string(), true)).collect();
        tokenizer.add_special_tokens(&added);
        Self::from_tokenizer(tokenizer)
    }

    /// The whole entries added by [`Bpe::with_whole_tokens`], as (id, token), by id.
    pub fn whole_tokens(&self) -> Vec<(u32, String)> {
        let mut v: Vec<(u32, String)> = self
            .tokenizer
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(id, _)| *id as usize >= SPECIAL_TOKENS)
            .map(|(id, t)| (id, t.content))
            .collect();
        v.sort();
        v
    }

    /// Token ids of `line` (no BOS/EOS).
    pub fn encode(&self, line: &str) -> Result<Vec<u32>> {
        Ok(self.tokenizer.encode(line, false).map_err(bpe_err)?.get_ids().to_vec())
    }

    /// Subword pieces of `line`, as `bpe apply` prints them.
    pub fn pieces(&self, line: &str) -> Result<Vec<String>> {
        Ok(self.tokenizer.encode(line, false).map_err(bpe_err)?.get_tokens().to_vec())
    }

    /// The text of token ids (PAD, BOS, EOS and UNK are dropped; whole tokens a parsing
    /// vocabulary added are kept, since some of them, such as `.`, are also ordinary pieces).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let kept: Vec<u32> = ids.iter().copied().filter(|&id| id as usize >= SPECIAL_TOKENS).collect();
        self.tokenizer.decode(&kept, false).map_err(bpe_err)
    }

    /// The text of subword pieces; an unknown piece is an error naming it.
    pub fn decode_pieces<S: AsRef<str>>(&self, pieces: &[S]) -> Result<String> {
        let ids = pieces
            .iter()
            .map(|p| {
                self.tokenizer
                    .token_to_id(p.as_ref())
                    .ok_or_else(|| Error::Bpe(format!("unknown piece {:?}", p.as_ref())))
            })
            .collect::<Result<Vec<u32>>>()?;
        self.decode(&ids)
    }
}
