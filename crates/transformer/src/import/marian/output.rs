//! An import written out: the checkpoint and the one-file tokenizer, tied by the vocabulary's
//! hash, written together or not at all, never into the directory the model was read from.

use super::foreign::{err, Imported, Vocab};
use crate::data::marian_tokenizer::{MarianSpecials, MarianTokenizer};
use crate::data::sentencepiece::SentencePiece;
use crate::data::tokenizer::Tokenizer;
use crate::error::Result;
use std::path::{Path, PathBuf};

/// Writes an import as `out/model.safetensors` and `out/tokenizer.json` (the checkpoint tied to
/// the tokenizer by its hash), creating `out` if needed; returns the two paths.
///
/// Refuses an `out` that is the directory the model was read from, or whose output files are
/// files of that directory (through links): an import never overwrites what it read. Everything
/// is checked before the first file is written; both files are written under temporary names and
/// renamed into place once both are written, and a failure removes the temporary files and the
/// directories this import made, so a failed import leaves no partial output.
pub fn write(imported: &Imported, out: &Path) -> Result<(PathBuf, PathBuf)> {
    let tokenizer = tokenizer(imported)?;
    write_model(&imported.dir, out, &imported.checkpoint, &|path| tokenizer.save(path))
}

/// Writes `checkpoint` as `out/model.safetensors` beside the tokenizer file `save_tokenizer`
/// writes as `out/tokenizer.json` (the checkpoint tied to it by its hash), for any import read
/// from `input_dir`: refuses an `out` that is `input_dir` or whose output files are its files
/// (through links), writes both under temporary names and renames them into place once both are
/// written; a failure removes the temporary files and the directories it made.
pub(crate) fn write_model(
    input_dir: &Path,
    out: &Path,
    checkpoint: &crate::checkpoint::Checkpoint,
    save_tokenizer: &dyn Fn(&Path) -> Result<()>,
) -> Result<(PathBuf, PathBuf)> {
    let (ckpt_path, tok_path) = (out.join("model.safetensors"), out.join("tokenizer.json"));
    refuse_input_dir(input_dir, out, &[&ckpt_path, &tok_path])?;
    crate::checkpoint::check_finite(input_dir, checkpoint)?;
    // The directories this import creates, deepest first, to remove again if it fails.
    let created: Vec<PathBuf> =
        out.ancestors().take_while(|d| !d.as_os_str().is_empty() && !d.exists()).map(Path::to_path_buf).collect();
    std::fs::create_dir_all(out).map_err(crate::io::io_err(out))?;
    // Both files are written under temporary names and renamed into place only when both are
    // written, so a failure leaves neither, and never a new tokenizer beside an old model.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tag = format!("{}.{}", std::process::id(), SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let (ckpt_tmp, tok_tmp) =
        (out.join(format!(".model.safetensors.import.{tag}")), out.join(format!(".tokenizer.json.import.{tag}")));
    let result = (|| {
        save_tokenizer(&tok_tmp)?;
        let tokens = Tokenizer::load(&tok_tmp)?;
        if tokens.vocab_size() != checkpoint.config.vocab_size
            || tokens.source_vocab_size() != checkpoint.config.import.source_vocab_size
        {
            return Err(err(out, "the tokenizer's vocabulary does not match the model's (an import bug)"));
        }
        let mut ckpt = checkpoint.clone();
        ckpt.vocab_hash = tokens.hash().to_string();
        crate::checkpoint::save(&ckpt_tmp, &ckpt)?;
        std::fs::rename(&ckpt_tmp, &ckpt_path).map_err(crate::io::io_err(&ckpt_path))?;
        std::fs::rename(&tok_tmp, &tok_path).map_err(crate::io::io_err(&tok_path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&ckpt_tmp);
        let _ = std::fs::remove_file(&tok_tmp);
        for d in &created {
            // Only while empty (remove_dir refuses a directory with anything in it).
            let _ = std::fs::remove_dir(d);
        }
    }
    result.map(|()| (ckpt_path, tok_path))
}

/// The tokenizer of an import (it never cleans up tokenization spaces).
pub(crate) fn tokenizer(imported: &Imported) -> Result<MarianTokenizer> {
    let t = &imported.tokenizer;
    let specials = MarianSpecials {
        eos_token: t.eos.clone(),
        unk_token: t.unk.clone(),
        pad_token: t.pad.clone(),
        clean_up_tokenization_spaces: false,
    };
    let spm = |bytes: &[u8], which: &str| {
        SentencePiece::from_bytes(bytes)
            .map_err(|e| err(&imported.dir, format!("the {which} SentencePiece model: {e}")))
    };
    MarianTokenizer::new(
        spm(&t.source_spm, "source")?,
        spm(&t.target_spm, "target")?,
        t.source_vocab.ids_by_piece(),
        t.target_vocab.as_ref().map(Vocab::ids_by_piece),
        specials,
    )
}

/// Refuses an output directory `out` that is the input directory `input`, or output `files` that
/// already exist as files of `input` (through a link).
fn refuse_input_dir(input: &Path, out: &Path, files: &[&Path]) -> Result<()> {
    let Ok(input) = input.canonicalize() else { return Ok(()) };
    let same_dir = out.canonicalize().is_ok_and(|o| o == input);
    let linked = files.iter().find(|f| f.canonicalize().is_ok_and(|f| f.parent() == Some(input.as_path())));
    if same_dir || linked.is_some() {
        return Err(err(
            out,
            format!(
                "this is where the model is read from ({}): the import would overwrite its files; give --output \
                 another directory",
                input.display()
            ),
        ));
    }
    Ok(())
}
