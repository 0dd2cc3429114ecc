//! Model files made from others: `quantize` (an f32 checkpoint to int8 codes), `import marian`
//! (a Marian / OPUS-MT model to a checkpoint and tokenizer of ours), `export marian` (back), and
//! `export ct2` / `import ct2` (CTranslate2 model directories, both ways).

use anyhow::Result;
use std::path::{Path, PathBuf};

/// `transformer quantize`: writes the int8 checkpoint and says how much smaller it is.
pub fn quantize(checkpoint: &Path, output: &Path) -> Result<()> {
    let (before, after) = transformer::checkpoint::quantize(checkpoint, output)?;
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "wrote {} ({:.1} MB; the f32 checkpoint is {:.1} MB): decode it with --precision int8",
        output.display(),
        mb(after),
        mb(before)
    );
    Ok(())
}

/// `transformer import marian`: imports, writes, and says what it read and how to translate with it.
pub fn import_marian(dir: &Path, output: &Path) -> Result<()> {
    let imported = transformer::import::marian::import(dir)?;
    let written = transformer::import::marian::write(&imported, output)?;
    report_import(dir, &imported.source, &imported.checkpoint.config, written);
    Ok(())
}

/// What an import read and wrote, and how to translate with it.
fn report_import(dir: &Path, what: &str, c: &transformer::ModelConfig, (ckpt, tok): (PathBuf, PathBuf)) {
    eprintln!(
        "imported {} ({what}): {} layers, d_model {}, {} heads, FFN {} ({}), vocabulary {}{}, {:.1}M parameters",
        dir.display(),
        c.n_layers,
        c.d_model,
        c.n_heads,
        c.d_ff,
        c.import.activation.name(),
        c.vocab_size,
        c.import.source_vocab_size.map_or(String::new(), |v| format!(" (source {v})")),
        transformer::params::param_count(c) as f64 / 1e6
    );
    eprintln!("wrote {} and {}", ckpt.display(), tok.display());
    eprintln!("translate with: transformer translate --checkpoint {} --tokenizer {}", ckpt.display(), tok.display());
}

/// What `export marian` reads: (checkpoint, tokenizer) from a MODEL directory `import marian`
/// wrote (the tokenizer its own unless given), a MODEL checkpoint file with `--tokenizer`, or
/// `--checkpoint` with `--tokenizer`.
pub fn export_inputs(
    model: Option<PathBuf>,
    checkpoint: Option<PathBuf>,
    tokenizer: Option<PathBuf>,
) -> Result<(PathBuf, PathBuf)> {
    let (checkpoint, beside) = match (model, checkpoint) {
        // A model directory as every verb reads it (an import's, a quick start's, a run's).
        (Some(dir), _) if dir.is_dir() => {
            let (ckpt, tok) = transformer::decode::model_files(&dir)?;
            (ckpt, Some(tok))
        }
        (Some(file), _) | (None, Some(file)) => {
            if !file.exists() {
                anyhow::bail!("{}: no such file or directory", file.display());
            }
            (file, None)
        }
        (None, None) => anyhow::bail!("export: give the model (a directory or a checkpoint) or --checkpoint"),
    };
    let tokenizer = match (tokenizer, beside) {
        (Some(t), _) => t,
        (None, Some(t)) if t.is_file() => t,
        (None, Some(t)) => anyhow::bail!(
            "{} is not there: give the model's tokenizer with --tokenizer (the tokenizer.json `transformer import` \
             wrote, or the bpe.json of a run)",
            t.display()
        ),
        (None, None) => anyhow::bail!(
            "{}: give its tokenizer with --tokenizer (the tokenizer.json `transformer import` wrote, or the bpe.json of a run)",
            checkpoint.display()
        ),
    };
    Ok((checkpoint, tokenizer))
}

/// `transformer export marian`: writes the native Marian model and says how Marian decodes it.
pub fn export_marian(checkpoint: &Path, tokenizer: &Path, output: &Path, tool_defaults: bool) -> Result<()> {
    let (ckpt, tok) = model_and_tokenizer(checkpoint, tokenizer)?;
    let written = transformer::import::marian::export_with(&ckpt, &tok, output, tool_defaults)?;
    for p in &written {
        eprintln!("wrote {}", p.display());
    }
    let decoder = output.join("decoder.yml");
    if written.iter().any(|p| p.extension().is_some_and(|e| e == "yml") && p != &decoder) {
        eprintln!(
            "decode with: spm_encode --model {} < text | marian-decoder -c {} | spm_decode --model {}",
            output.join("source.spm").display(),
            decoder.display(),
            output.join("target.spm").display()
        );
    } else {
        eprintln!("decode with: marian-decoder -c {}", decoder.display());
    }
    Ok(())
}

/// Loads a checkpoint and its tokenizer, checking they belong together.
fn model_and_tokenizer(
    checkpoint: &Path,
    tokenizer: &Path,
) -> Result<(transformer::checkpoint::Checkpoint, transformer::data::tokenizer::Tokenizer)> {
    let ckpt = transformer::checkpoint::load(checkpoint)?;
    let tok = transformer::data::tokenizer::Tokenizer::load(tokenizer)?;
    if ckpt.vocab_hash != tok.hash() {
        anyhow::bail!(
            "{} was written for vocabulary {}, but {} is {}: give the tokenizer the model was imported or trained with",
            checkpoint.display(),
            ckpt.vocab_hash,
            tokenizer.display(),
            tok.hash()
        );
    }
    Ok((ckpt, tok))
}

/// `transformer export ct2`: writes the CTranslate2 directory and says how CTranslate2 loads it.
pub fn export_ct2(checkpoint: &Path, tokenizer: &Path, quantization: &str, output: &Path) -> Result<()> {
    use transformer::import::ct2::Ct2Weights;
    let (ckpt, tok) = model_and_tokenizer(checkpoint, tokenizer)?;
    let weights = match quantization {
        "int8" => Ct2Weights::Int8,
        _ => Ct2Weights::Float32,
    };
    let bytes = std::fs::read(tokenizer).map_err(|e| anyhow::anyhow!("{}: {e}", tokenizer.display()))?;
    let written = transformer::import::ct2::export(&ckpt, &tok, &bytes, output, weights)?;
    for p in &written {
        eprintln!("wrote {}", p.display());
    }
    eprintln!(
        "decode with: python -c \"import ctranslate2; t = ctranslate2.Translator('{}', compute_type='{}'); \
         print(t.translate_batch([['PIECE', ...]]))\" (the pieces of our tokenizer)",
        output.display(),
        weights.name()
    );
    Ok(())
}

/// `transformer import ct2`: imports a CTranslate2 directory and says how to translate with it.
pub fn import_ct2(dir: &Path, spm: &[PathBuf], output: &Path) -> Result<()> {
    let imported = transformer::import::ct2::import(dir, spm)?;
    let written = imported.write(output)?;
    report_import(dir, &format!("CTranslate2, {} weights", imported.weights), &imported.checkpoint.config, written);
    Ok(())
}

/// `transformer export hf`: writes the MarianMTModel directory and says how `transformers` loads it.
pub fn export_hf(checkpoint: &Path, tokenizer: &Path, output: &Path, tool_defaults: bool) -> Result<()> {
    let (ckpt, tok) = model_and_tokenizer(checkpoint, tokenizer)?;
    let bytes = std::fs::read(tokenizer).map_err(|e| anyhow::anyhow!("{}: {e}", tokenizer.display()))?;
    for p in transformer::import::hf_export::export_with(&ckpt, &tok, &bytes, output, tool_defaults)? {
        eprintln!("wrote {}", p.display());
    }
    eprintln!(
        "load with: python -c \"from transformers import AutoTokenizer, MarianMTModel; \
         m = MarianMTModel.from_pretrained('{0}'); t = AutoTokenizer.from_pretrained('{0}'); \
         print(t.batch_decode(m.generate(**t(['A dog runs.'], return_tensors='pt', return_token_type_ids=False)), \
         skip_special_tokens=True))\"",
        output.display()
    );
    Ok(())
}
