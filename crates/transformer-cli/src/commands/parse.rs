//! `parse`, `treebank` and `evaluate` of a parsing model: thin layers over [`Translator::parse`]
//! and the EVALB scorer.

use super::input::{for_each_input_line, read_input_lines, Stderr};
use crate::args::{ParseArgs, ParsingArgs};
use anyhow::Result;
use std::path::Path;
use std::time::Instant;
use transformer::data::trees::{self, Tree};
use transformer::decode::translator::{DecodeOptions, SessionOptions, Translator};
use transformer::decode::ParseOptions;
use transformer::Task;

fn parse_options(decode: DecodeOptions, p: ParsingArgs) -> ParseOptions {
    ParseOptions { decode, constrained: p.constrained, skip_long: p.skip_long, oracle_tags: p.oracle_tags }
}

pub fn parse(args: &ParseArgs) -> Result<()> {
    use std::io::Write;
    let ParseArgs { checkpoint, tokenizer, input, tokenize, precision, search, parsing, speed } = args;
    let (input, tokenize, precision, parsing, speed) = (input.as_deref(), *tokenize, *precision, *parsing, *speed);
    if search.shortlist.is_some() {
        crate::usage!(
            "--shortlist cuts a translation model's output layer; a parser writes trees over its whole vocabulary"
        );
    }
    let opts = parse_options(search.options(1, Task::Parsing)?, parsing);
    let translator = Translator::load_ensemble(
        checkpoint,
        tokenizer,
        SessionOptions { precision, task: Task::Parsing, ..Default::default() },
    )?;
    let mut lines = Vec::new();
    for_each_input_line(input, |l| {
        lines.push(if tokenize { trees::ptb_tokenize(l).join(" ") } else { l.to_string() });
        Ok(())
    })?;
    let start = Instant::now();
    let (parses, stats) = translator.parse(&lines, &opts, &mut Stderr)?;
    let secs = start.elapsed().as_secs_f64();
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    for p in &parses {
        writeln!(w, "{}", p.tree.to_bracketed())?;
    }
    w.flush()?;
    if speed {
        eprintln!(
            "parsed {} sentences in {secs:.2} s: {:.2} sentences/s, {} outputs repaired, {} skipped ({}{})",
            stats.sentences,
            stats.sentences as f64 / secs,
            parses.iter().filter(|p| p.malformed).count(),
            parses.iter().filter(|p| p.skipped).count(),
            opts.decode.search,
            if opts.constrained { ", constrained" } else { "" }
        );
    }
    Ok(())
}

pub fn treebank(input: &Path, files: Option<&str>, words: Option<&Path>, trees_out: Option<&Path>) -> Result<()> {
    let range = files.map(trees::FileRange::parse).transpose()?;
    let all = trees::read_treebank(input, range.as_ref())?;
    let write = |path: &Path, f: &dyn Fn(&Tree) -> String| -> Result<()> {
        let mut text: String = all.iter().map(|t| f(t) + "\n").collect();
        if all.is_empty() {
            text.clear();
        }
        transformer::io::write_atomically(path, text.as_bytes())?;
        Ok(())
    };
    if let Some(p) = words {
        write(p, &|t| t.words().join(" "))?;
    }
    if let Some(p) = trees_out {
        write(p, &|t| t.to_bracketed())?;
    }
    println!(
        "{} trees, {} words{}",
        all.len(),
        all.iter().map(|t| t.words().len()).sum::<usize>(),
        if words.is_none() && trees_out.is_none() { " (give --words and --trees to write them)" } else { "" }
    );
    Ok(())
}

/// `evaluate` of a parsing model: parses the sentences (by default the words of the gold trees),
/// scores the trees with EVALB against the gold ones, and reports the repairs and the perplexity
/// of the gold trees.
pub fn evaluate(
    translator: &Translator,
    src: Option<&Path>,
    gold_path: &Path,
    output: Option<&Path>,
    opts: &DecodeOptions,
    parsing: ParsingArgs,
) -> Result<()> {
    let gold_trees = trees::read_trees(gold_path)?;
    let gold: Vec<Tree> = gold_trees.iter().map(|t| t.preprocess().unwrap_or_else(|| t.clone())).collect();
    let sentences: Vec<String> = match src {
        Some(p) => {
            let s = read_input_lines(p)?;
            if s.len() != gold.len() {
                anyhow::bail!(
                    "{} has {} lines but {} has {} trees: sentences and gold trees must be aligned",
                    p.display(),
                    s.len(),
                    gold_path.display(),
                    gold.len()
                );
            }
            s
        }
        None => gold.iter().map(|t| t.words().join(" ")).collect(),
    };
    if sentences.is_empty() {
        anyhow::bail!("{} has no trees: there is nothing to evaluate", gold_path.display());
    }
    let popts = parse_options(*opts, parsing);
    let start = Instant::now();
    let scored = translator.parse_and_score(&sentences, &gold, &popts, &mut Stderr)?;
    let (parses, stats, report) = (&scored.parses, scored.stats, &scored.report);
    let secs = start.elapsed().as_secs_f64();
    if let Some(p) = output {
        let text: String = parses.iter().map(|p| format!("{}\n", p.tree.to_bracketed())).collect();
        transformer::io::write_atomically(p, text.as_bytes())?;
    }
    if let Some(note) = report.evalb_limit_note() {
        eprintln!("{note}");
    }
    let stdout = std::io::stdout();
    report.write_evalb(&mut stdout.lock(), true)?;
    let malformed = scored.malformed();
    println!(
        "Outputs repaired          = {malformed} of {} ({:.2}%)",
        parses.len(),
        100.0 * malformed as f64 / parses.len() as f64
    );
    let targets: Vec<String> = gold.iter().map(|t| t.linearise().join(" ")).collect();
    let totals = translator.perplexity(&sentences, &targets, &mut Stderr)?;
    if let Some(nll) = totals.nll_per_token() {
        println!(
            "perplexity = {:.2} (per tree token, EOS included, teacher-forced on {}: {} tokens{})",
            nll.exp(),
            gold_path.display(),
            totals.tokens,
            super::decode::first_of(translator)
        );
    }
    eprintln!(
        "parsed {} sentences in {secs:.2} s: {:.2} sentences/s (beam {}, α {}{})",
        stats.sentences,
        stats.sentences as f64 / secs,
        opts.search.beam,
        opts.search.alpha,
        match (parsing.constrained, parsing.oracle_tags) {
            (true, true) => ", constrained, gold tags forced",
            (true, false) => ", constrained",
            _ => "",
        }
    );
    Ok(())
}
