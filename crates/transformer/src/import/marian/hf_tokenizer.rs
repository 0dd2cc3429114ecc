//! A Hugging Face Marian tokenizer directory, read one way for the importer (`hf.rs`) and for
//! [`MarianTokenizer::from_hf_dir`]: `tokenizer_config.json` (special tokens, `separate_vocabs`,
//! `clean_up_tokenization_spaces`), `vocab.json` and `target_vocab.json` (pieces numbered 0..n),
//! `source.spm` and `target.spm`; every file through the importer's size bound, regular files
//! only, every error naming the file.

use super::foreign::{err, Vocab};
use crate::data::marian_tokenizer::{MarianSpecials, MarianTokenizer};
use crate::data::sentencepiece::SentencePiece;
use crate::error::{Error, Result};
use crate::import::files::{read_json_object, read_spm, read_text};
use std::path::Path;

/// The settings of `tokenizer_config.json`, or their defaults where it is absent.
pub(super) struct Settings {
    /// `eos_token`, `unk_token`, `pad_token` (`</s>`, `<unk>`, `<pad>`) and
    /// `clean_up_tokenization_spaces` (false).
    pub(super) specials: MarianSpecials,
    /// `separate_vocabs` (false): the target side has `target_vocab.json` of its own.
    pub(super) separate_vocabs: bool,
}

/// `dir/tokenizer_config.json`, or the defaults when there is no such file.
pub(super) fn read_settings(dir: &Path) -> Result<Settings> {
    let config = match dir.join("tokenizer_config.json") {
        p if p.is_file() => read_json_object(&p)?,
        _ => serde_json::Value::Null,
    };
    // A special token is a string, or an AddedToken object with its text under "content".
    let special = |key: &str, default: &str| -> String {
        match config.get(key) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.get("content").and_then(|c| c.as_str()).unwrap_or(default).to_string(),
            None => default.to_string(),
        }
    };
    let flag = |key: &str| config.get(key).and_then(|v| v.as_bool()).unwrap_or(false);
    let specials = MarianSpecials {
        eos_token: special("eos_token", "</s>"),
        unk_token: special("unk_token", "<unk>"),
        pad_token: special("pad_token", "<pad>"),
        clean_up_tokenization_spaces: flag("clean_up_tokenization_spaces"),
    };
    Ok(Settings { specials, separate_vocabs: flag("separate_vocabs") })
}

/// `dir/vocab.json`, and `dir/target_vocab.json` when `separate`.
pub(super) fn read_vocabs(dir: &Path, separate: bool) -> Result<(Vocab, Option<Vocab>)> {
    let source = read_vocab(&dir.join("vocab.json"))?;
    let target = if separate { Some(read_vocab(&dir.join("target_vocab.json"))?) } else { None };
    Ok((source, target))
}

/// The bytes of `dir/source.spm` and `dir/target.spm`, each checked to be a SentencePiece model.
pub(super) fn read_models(dir: &Path) -> Result<(Vec<u8>, Vec<u8>)> {
    Ok((read_spm(&dir.join("source.spm"))?, read_spm(&dir.join("target.spm"))?))
}

/// A Hugging Face vocabulary (`vocab.json`: piece → id) as pieces by id; ids must be 0..n.
fn read_vocab(path: &Path) -> Result<Vocab> {
    parse_hf_vocab(&read_text(path, "a vocabulary")?, path)
}

/// [`Vocab`] from the text of a Hugging Face `vocab.json` (piece → id, ids 0..n); `path` names the
/// file in errors.
pub fn parse_hf_vocab(text: &str, path: &Path) -> Result<Vocab> {
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| err(path, format!("not valid JSON: {e}")))?;
    let map = json.as_object().ok_or_else(|| err(path, "not a JSON object of piece → id"))?;
    let mut pieces = vec![None; map.len()];
    for (piece, id) in map {
        let id = id.as_u64().ok_or_else(|| err(path, format!("the id of {piece:?} is not an integer")))? as usize;
        match pieces.get_mut(id) {
            Some(slot @ None) => *slot = Some(piece.clone()),
            Some(Some(other)) => return Err(err(path, format!("id {id} is given to both {other:?} and {piece:?}"))),
            None => return Err(err(path, format!("id {id} of {piece:?} is outside 0..{}", map.len()))),
        }
    }
    Ok(Vocab { pieces: pieces.into_iter().map(|p| p.expect("every id is filled")).collect() })
}

impl MarianTokenizer {
    /// Reads a Hugging Face Marian tokenizer directory: `source.spm`, `target.spm`, `vocab.json`,
    /// `target_vocab.json` (when `tokenizer_config.json` says `separate_vocabs`) and
    /// `tokenizer_config.json` (optional: eos/unk/pad tokens default to `</s>`, `<unk>`, `<pad>`),
    /// as the importer reads them.
    pub fn from_hf_dir(dir: &Path) -> Result<Self> {
        let settings = read_settings(dir)?;
        let (source_spm, target_spm) = read_models(dir)?;
        let (vocab, target_vocab) = read_vocabs(dir, settings.separate_vocabs)?;
        Self::new(
            SentencePiece::from_bytes(&source_spm)?,
            SentencePiece::from_bytes(&target_spm)?,
            vocab.ids_by_piece(),
            target_vocab.as_ref().map(Vocab::ids_by_piece),
            settings.specials,
        )
        .map_err(|e| Error::Input(format!("{}: {e}", dir.display())))
    }
}
