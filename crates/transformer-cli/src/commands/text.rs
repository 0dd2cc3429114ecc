//! Text tools: `data` (downloads), `bpe` (learn, apply, decode) and `bleu` (sacreBLEU-exact scores).

use super::input::read_lines;
use super::input::{for_each_input_line, read_references};
use crate::args::{BleuArgs, BpeCommand, DataCommand};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use transformer::eval::Metric;

pub fn data(which: DataCommand) -> Result<()> {
    match which {
        DataCommand::Multi30k { cache, from, url } => {
            use transformer::data::download::{fetch_verified, Source, MIRROR_ENV, MULTI30K_FILES};
            let from = from.or_else(|| std::env::var_os(MIRROR_ENV).map(Into::into));
            let source = match from {
                Some(dir) => Source::Dir(dir),
                None => Source::Url(url),
            };
            let mut bar = crate::progress::CountBar::new("files", MULTI30K_FILES.len() as u64);
            let mut done = 0;
            let paths = fetch_verified(
                &source,
                &MULTI30K_FILES,
                &cache,
                &mut transformer::events::Lines::new(|m: &str| {
                    done += 1;
                    bar.println(m);
                    bar.update(done, MULTI30K_FILES.len());
                }),
            );
            bar.finish();
            let paths = paths?;
            println!("{} files verified in {}", paths.len(), cache.display());
            Ok(())
        }
        DataCommand::PtbSample { cache, from, from_nltk_data, url } => ptb_sample(&cache, from, from_nltk_data, url),
        DataCommand::NewsText { cache, from_nltk_data } => news_text(&cache, from_nltk_data),
    }
}

/// `data news-text`: the ABC and Brown corpora from an nltk_data directory (given, or the first of
/// NLTK's that holds both archives), else from NLTK's URLs.
fn news_text(cache: &Path, nltk: Option<PathBuf>) -> Result<()> {
    use transformer::data::news_text::*;
    use transformer::data::ptb_sample::nltk_data_dirs;
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let source = match nltk {
        Some(d) => NewsSource::NltkData(d),
        None => {
            let home = env("HOME").map(PathBuf::from);
            let has_both =
                |d: &PathBuf| NEWS_CORPORA.iter().all(|c| d.join("corpora").join(format!("{}.zip", c.name)).is_file());
            match nltk_data_dirs(env("NLTK_DATA").as_deref(), home.as_deref()).into_iter().find(has_both) {
                Some(d) => {
                    eprintln!("found NLTK's abc.zip and brown.zip in {}", d.display());
                    NewsSource::NltkData(d)
                }
                None => NewsSource::Nltk,
            }
        }
    };
    let mut bar = crate::progress::DownloadBar::new();
    let got = fetch_news_text(&source, cache, &mut bar);
    bar.finish();
    for (path, n) in got?.files {
        println!("{n} sentences in {}", path.display());
    }
    Ok(())
}

/// `data ptb-sample`: picks the source (see its `--help`), prints the terms, fetches and verifies.
fn ptb_sample(cache: &Path, from: Option<PathBuf>, nltk: Option<PathBuf>, url: Option<String>) -> Result<()> {
    use transformer::data::ptb_sample::*;
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let source = if let Some(p) = from {
        TreebankSource::local(&p)
    } else if let Some(d) = nltk {
        TreebankSource::from_nltk_data(&d)?
    } else if let Some(u) = url {
        TreebankSource::Url(u)
    } else if let Some(m) = env(PTB_MIRROR_ENV) {
        TreebankSource::local(Path::new(&m))
    } else {
        let home = env("HOME").map(PathBuf::from);
        let dirs = nltk_data_dirs(env("NLTK_DATA").as_deref(), home.as_deref());
        match find_nltk_treebank(&dirs) {
            Some((dir, s)) => {
                eprintln!("found NLTK's treebank in {}", dir.display());
                s
            }
            None => TreebankSource::Url(PTB_SAMPLE_URL.into()),
        }
    };
    eprintln!("{PTB_SAMPLE_TERMS}\n");
    let mut bar = crate::progress::DownloadBar::new();
    let got = fetch_ptb_sample(&source, cache, &mut bar);
    bar.finish();
    let got = got?;
    let unverified = match got.unverified.len() {
        0 => String::new(),
        n => format!(
            " and {n} more with no recorded checksum ({}..{}, unverified)",
            got.unverified[0],
            got.unverified[n - 1]
        ),
    };
    println!(
        "{} files verified (SHA-256){unverified} in {}; terms: {}",
        got.verified,
        got.dir.display(),
        got.dir.join("README").display()
    );
    Ok(())
}

pub fn bpe(cmd: BpeCommand) -> Result<()> {
    use std::io::Write;
    use transformer::data::bpe::Bpe;
    match cmd {
        BpeCommand::Learn { inputs, vocab_size, min_frequency, output } => {
            let mut lines = Vec::new();
            for p in &inputs {
                lines.extend(read_lines(p)?);
            }
            let start = Instant::now();
            let spinner =
                crate::progress::Spinner::new(&format!("learning {vocab_size} BPE entries from {} lines", lines.len()));
            let bpe = Bpe::learn(lines.iter(), vocab_size, min_frequency);
            spinner.finish();
            let bpe = bpe?;
            bpe.save(&output).with_context(|| format!("writing {}", output.display()))?;
            if let Some(w) = bpe.shortfall(vocab_size) {
                eprintln!("warning: {w}");
            }
            eprintln!(
                "learned {} entries from {} lines in {:.1}s -> {} ({})",
                bpe.vocab_size(),
                lines.len(),
                start.elapsed().as_secs_f64(),
                output.display(),
                bpe.hash()
            );
        }
        BpeCommand::Apply { model, input } => {
            let bpe = Bpe::load(&model)?;
            let out = std::io::stdout();
            let mut out = std::io::BufWriter::new(out.lock());
            for_each_input_line(input.as_deref(), |line| Ok(writeln!(out, "{}", bpe.pieces(line)?.join(" "))?))?;
            out.flush()?;
        }
        BpeCommand::Decode { model, input } => {
            let bpe = Bpe::load(&model)?;
            let out = std::io::stdout();
            let mut out = std::io::BufWriter::new(out.lock());
            for_each_input_line(input.as_deref(), |line| {
                let pieces: Vec<&str> = line.split(' ').filter(|p| !p.is_empty()).collect();
                Ok(writeln!(out, "{}", bpe.decode_pieces(&pieces)?)?)
            })?;
            out.flush()?;
        }
    }
    Ok(())
}

pub fn bleu(args: &BleuArgs) -> Result<()> {
    let BleuArgs {
        refs: ref_paths,
        hyp: hyp_path,
        tokenize: tokenizer,
        lowercase,
        smooth,
        smooth_value,
        metrics,
        score_only,
    } = args;
    let (tokenizer, lowercase, smooth_value, score_only) = (*tokenizer, *lowercase, *smooth_value, *score_only);
    use transformer::eval::{bleu, chrf};
    if let Some(v) = smooth_value.filter(|v| !(v.is_finite() && *v >= 0.0)) {
        crate::usage!("--smooth-value {v}: it must be a finite number ≥ 0");
    }
    let smooth = bleu::Smooth::from_name(smooth, smooth_value)
        .with_context(|| format!("unknown smoothing '{smooth}': use exp, floor, add-k or none"))?;
    let hyps = read_lines(hyp_path)?;
    let refs = read_references(ref_paths, hyp_path, hyps.len(), "hypotheses")?;
    for m in metrics {
        let (line, score) = match m {
            Metric::Bleu => {
                let cfg = bleu::BleuConfig { tokenizer, lowercase, smooth, effective_order: false };
                let s = bleu::corpus_bleu(&hyps, &refs, &cfg)?;
                (s.line(), s.score)
            }
            Metric::Chrf => {
                let cfg = chrf::ChrfConfig { lowercase, ..chrf::ChrfConfig::default() };
                let s = chrf::corpus_chrf(&hyps, &refs, &cfg)?;
                (s.line(), s.score)
            }
            Metric::TokenizedBleu => {
                let s = bleu::tokenized_bleu(&hyps, &refs, lowercase)?;
                (s.line(), s.score)
            }
        };
        if score_only {
            println!("{score:.2}");
        } else {
            println!("{line}");
        }
    }
    Ok(())
}
