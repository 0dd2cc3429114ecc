//! `translate`, `evaluate` and `attention`: thin layers over [`Translator`].

use super::input::{for_each_input_line, read_input_lines, read_references, Stderr};
use crate::args::{AlignArgs, GuideArgs, ModelArgs, TranslateArgs};
use crate::progress::CountBar;
use crate::usage;
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Instant;
use transformer::decode::translator::{DecodeOptions, TranslateStats, Translator};
#[cfg(feature = "heatmap")]
use transformer::decode::BeamConfig;
use transformer::decode::Guide;
use transformer::kernels::cpu::{peak, profile::Profile};
use transformer::precision::Precision;

fn speed_line(stats: &TranslateStats, secs: f64, what: &str) -> String {
    format!(
        "translated {} sentences in {secs:.2} s: {:.1} sentences/s, {:.0} source tokens/s, {:.0} output tokens/s, {} decoder rows ({what})",
        stats.sentences,
        stats.sentences as f64 / secs,
        stats.src_tokens as f64 / secs,
        stats.out_tokens as f64 / secs,
        stats.rows_decoded
    )
}

/// The guides `--prefix` and `--constraints` give for `n` input lines (none without either), each
/// file line-aligned with the input (`input`: its name in messages).
fn read_guides(translator: &Translator, guide: &GuideArgs, n: usize, input: &str) -> Result<Vec<Guide>> {
    let read = |p: &Option<PathBuf>| -> Result<Option<Vec<String>>> {
        let Some(p) = p else { return Ok(None) };
        let lines = read_input_lines(p)?;
        if lines.len() != n {
            anyhow::bail!("{} has {} lines but {input} has {n}: they must be line-aligned", p.display(), lines.len());
        }
        Ok(Some(lines))
    };
    let (prefixes, constraints) = (read(&guide.prefix)?, read(&guide.constraints)?);
    if prefixes.is_none() && constraints.is_none() {
        return Ok(Vec::new());
    }
    (0..n)
        .map(|i| {
            let prefix = prefixes.as_ref().map(|p| p[i].as_str());
            let phrases: Vec<String> = constraints.as_ref().map_or(Vec::new(), |c| {
                c[i].split('\t').map(str::trim).filter(|p| !p.is_empty()).map(String::from).collect()
            });
            let at = |file: &Option<PathBuf>| {
                let name = file.as_deref().map_or(String::new(), |f| f.display().to_string());
                move |e| anyhow::anyhow!("{name}:{}: {e}", i + 1)
            };
            let g = translator.encode_guide(prefix, &[]).map_err(at(&guide.prefix))?;
            let phrases = translator.encode_guide(None, &phrases).map_err(at(&guide.constraints))?.phrases;
            Ok(Guide { phrases, ..g })
        })
        .collect()
}

pub fn translate(args: &TranslateArgs) -> Result<()> {
    let TranslateArgs { model, input, search, guide, align, nbest, speed, profile } = args;
    let (input, nbest, speed, profile) = (input.as_deref(), *nbest as usize, *speed, *profile);
    use std::io::Write;
    let (translator, opts) = model.load_with(search, nbest)?;
    let alignment = align.options();
    if alignment.is_some() && translator.task() != transformer::Task::Translation {
        usage!("--alignment aligns translations; this model parses");
    }
    let mut lines = Vec::new();
    for_each_input_line(input, |l| {
        lines.push(l.to_string());
        Ok(())
    })?;
    let name = input.map_or("<stdin>".to_string(), |p| p.display().to_string());
    let guides = read_guides(&translator, guide, lines.len(), &name)?;
    let prof = Profile::new();
    let start = Instant::now();
    let mut bar = CountBar::new("sentences", lines.len() as u64);
    let mut run = || translator.translate_guided(&lines, &guides, &opts, &mut bar);
    let result = if profile { prof.install(run) } else { run() };
    bar.finish();
    let (out, stats) = result?;
    let secs = start.elapsed().as_secs_f64();
    if profile {
        let (slots, flops) = prof.take();
        let accounted: f64 = slots.iter().map(|s| s.1).sum();
        // With batches on several threads at once, each thread's kernels count: the times are
        // thread-seconds, out of the wall time times the threads.
        let budget = secs * stats.workers as f64;
        if stats.workers > 1 {
            eprintln!("{} batches at once, one per thread: thread-seconds, of {budget:.3}", stats.workers);
        }
        // The products' unit's ceiling, measured now with every thread busy (as they were):
        // per thread where each thread ran its own batch, for all of them otherwise. Not measured
        // for int8 (VNNI has no peak loop; AMX runs only some of the products).
        let peak = match translator.model().precision() {
            Precision::F32 => peak::product_peak(false),
            Precision::Bf16 => peak::product_peak(true),
            Precision::Int8 => None,
        }
        .map(|(unit, p)| (unit, if stats.workers > 1 { p / rayon::current_num_threads() as f64 } else { p }));
        for (name, t) in slots.iter().filter(|s| s.1 > 0.0) {
            let rate = if *name == "matmul" {
                let each = if stats.workers > 1 { " per thread" } else { "" };
                let g = flops as f64 / 1e9 / t;
                let share = peak
                    .map_or(String::new(), |(unit, p)| format!(", {:.0}% of the {unit} peak of {p:.0}", 100.0 * g / p));
                format!(", {g:.0} GFLOP/s{each}{share}")
            } else {
                String::new()
            };
            eprintln!("{name:>32}: {t:7.3} s ({:4.1}%{rate})", 100.0 * t / budget);
        }
        eprintln!("{:>32}: {:7.3} s ({:4.1}%)", "other", budget - accounted, 100.0 * (budget - accounted) / budget);
        memory_profile(&translator);
    }
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    for (i, list) in out.iter().enumerate() {
        // The alignment after the text, as Marian writes it: `text ||| alignment`.
        let src = match alignment {
            Some(_) => translator.encode_source(&lines[i])?,
            None => Vec::new(),
        };
        let aligned = |t: &transformer::decode::translator::Translation| -> Result<String> {
            let Some(a) = &alignment else { return Ok(String::new()) };
            let al = translator
                .align_hypothesis(&src, &t.hypothesis, a)
                .map_err(|e| anyhow::anyhow!("{name}:{}: {e}", i + 1))?;
            Ok(format!(" ||| {}", al.format(a.kind)))
        };
        if nbest == 1 {
            writeln!(w, "{}{}", list[0].text, aligned(&list[0])?)?;
        } else {
            for t in list {
                let (text, lp, score) = (&t.text, t.hypothesis.log_prob, t.hypothesis.score);
                writeln!(w, "{i} ||| {text}{} ||| {lp:.4} ||| {score:.4}", aligned(t)?)?;
            }
        }
    }
    w.flush()?;
    if speed {
        eprintln!("{}", speed_line(&stats, secs, &opts.search.to_string()));
    }
    Ok(())
}

/// Prints where the session's bytes are, and the process's peak RSS.
pub fn memory_profile(translator: &Translator) {
    let mb = |b: usize| b as f64 / (1 << 20) as f64;
    let mem = translator.memory();
    eprintln!("memory at {} (MB):", translator.model().precision());
    for (name, bytes) in mem.lines() {
        eprintln!("{name:>32}: {:7.1}", mb(bytes));
    }
    eprintln!("{:>32}: {:7.1}", "counted", mb(mem.total()));
    if let Some(peak) = peak_rss() {
        eprintln!("{:>32}: {:7.1} (the rest: code, allocator, threads)", "process peak RSS", mb(peak));
    }
}

/// The process's peak resident set (Linux: VmHWM of /proc/self/status).
fn peak_rss() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `evaluate` of a translation model: translates the sources and scores them against the
/// references (BLEU, chrF, tokenized BLEU, BLEU by source length with `by_length`, perplexity).
pub fn evaluate(
    translator: &Translator,
    src_path: Option<&Path>,
    ref_paths: &[PathBuf],
    output: Option<&Path>,
    by_length: bool,
    guide: &GuideArgs,
    opts: &DecodeOptions,
) -> Result<()> {
    use transformer::eval::{bleu, chrf};
    let Some(src_path) = src_path else { usage!("give the source sentences with --src") };
    let srcs = read_input_lines(src_path)?;
    let refs = read_references(ref_paths, src_path, srcs.len(), "sources")?;
    if srcs.is_empty() {
        // No score is made up from nothing (BLEU of zero sentences would print as 0).
        anyhow::bail!("{} has no sentences: there is nothing to evaluate", src_path.display());
    }
    let guides = read_guides(translator, guide, srcs.len(), &src_path.display().to_string())?;
    let start = Instant::now();
    let mut bar = CountBar::new("sentences", srcs.len() as u64);
    let result = translator.translate_guided(&srcs, &guides, opts, &mut bar);
    bar.finish();
    let (out, stats) = result?;
    let secs = start.elapsed().as_secs_f64();
    let hyps: Vec<String> = out.into_iter().map(|mut l| l.swap_remove(0).text).collect();
    if let Some(p) = output {
        let mut text = hyps.join("\n");
        text.push('\n');
        transformer::io::write_atomically(p, text.as_bytes())?;
    }
    println!("{}", bleu::corpus_bleu(&hyps, &refs, &bleu::BleuConfig::default())?.line());
    println!("{}", chrf::corpus_chrf(&hyps, &refs, &chrf::ChrfConfig::default())?.line());
    println!("{}", bleu::tokenized_bleu(&hyps, &refs, true)?.line());
    if by_length {
        let cfg = bleu::BleuConfig::default();
        for b in bleu::bleu_by_source_length(&srcs, &hyps, &refs, &bleu::LENGTH_BUCKETS, &cfg)? {
            println!("{}", b.line());
        }
    }
    let totals = translator.perplexity(&srcs, &refs[0], &mut Stderr)?;
    match totals.nll_per_token() {
        Some(nll) => println!(
            "perplexity = {:.2} (per target token, EOS included, teacher-forced on {}: {} tokens, mean NLL {nll:.4}{})",
            nll.exp(),
            ref_paths[0].display(),
            totals.tokens,
            first_of(translator)
        ),
        None => println!("perplexity: no target token could be scored ({} is empty)", src_path.display()),
    }
    eprintln!("{}", speed_line(&stats, secs, &opts.search.to_string()));
    Ok(())
}

/// `transformer score`: each (source, translation) pair's log-probability under the model, one a
/// line on stdout, in input order (or per target token with `per_token`).
pub fn score(model: &ModelArgs, src: &Path, refs: &Path, per_token: bool, align: &AlignArgs) -> Result<()> {
    if model.checkpoint.len() > 1 {
        usage!("score takes one checkpoint (an ensemble's log-probabilities are averaged per step, not per pair)");
    }
    let srcs = read_input_lines(src)?;
    let translator = model.load()?;
    let tgts = match translator.task() {
        transformer::task::Task::Translation => {
            read_references(&[refs.to_path_buf()], src, srcs.len(), "sources")?.remove(0)
        }
        // A parser's targets are trees, one a line or several lines each, preprocessed as training
        // reads them and linearised as the model writes them.
        transformer::task::Task::Parsing => {
            let trees = transformer::data::trees::read_trees(refs)?;
            if trees.len() != srcs.len() {
                anyhow::bail!(
                    "{} has {} trees but {} has {} sentences",
                    refs.display(),
                    trees.len(),
                    src.display(),
                    srcs.len()
                );
            }
            trees
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    t.preprocess().map(|t| t.linearise().join(" ")).ok_or_else(|| {
                        anyhow::anyhow!("{}: tree {} has no words left after preprocessing", refs.display(), i + 1)
                    })
                })
                .collect::<Result<Vec<_>>>()?
        }
    };
    let scores = translator.log_probs_sided(&srcs, &tgts).map_err(|(side, e)| {
        let file = if side == Some(transformer::data::tokenizer::Side::Source) { src } else { refs };
        anyhow::anyhow!("{}: {e}", file.display())
    })?;
    let alignment = align.options();
    if alignment.is_some() && translator.task() != transformer::Task::Translation {
        usage!("--alignment aligns translations; this model parses");
    }
    let mut out = String::new();
    for (i, s) in scores.iter().enumerate() {
        let value = if per_token { s.log_prob / s.tokens as f64 } else { s.log_prob };
        out.push_str(&format!("{value:.6}"));
        if let Some(a) = &alignment {
            let (sid, tid) = (translator.encode_source(&srcs[i])?, translator.encode_target(&tgts[i])?);
            let al =
                translator.align(&sid, &tid, a).map_err(|e| anyhow::anyhow!("{}:{}: {e}", src.display(), i + 1))?;
            out.push_str(&format!(" ||| {}", al.format(a.kind)));
        }
        out.push('\n');
    }
    use std::io::Write;
    std::io::stdout().lock().write_all(out.as_bytes())?;
    Ok(())
}

#[cfg(not(feature = "heatmap"))]
pub fn attention(_: &ModelArgs, _: &str, _: Option<&str>, _: Option<usize>, _: Option<usize>, _: &Path) -> Result<()> {
    anyhow::bail!(
        "this binary was built without heatmaps (the `heatmap` feature is off); rebuild with default features"
    )
}

#[cfg(feature = "heatmap")]
pub fn attention(
    model: &ModelArgs,
    src: &str,
    tgt: Option<&str>,
    layer: Option<usize>,
    head: Option<usize>,
    out: &Path,
) -> Result<()> {
    use crate::usage;
    use transformer::eval::{attention as attn, heatmap};
    if model.checkpoint.len() > 1 {
        usage!("attention shows one model's attention: give one --checkpoint, not {}", model.checkpoint.len());
    }
    let translator = model.load()?;
    let c = &translator.model().config;
    if let Some(l) = layer.filter(|&l| l > c.n_layers) {
        usage!("--layer {l}: the model has {} layers", c.n_layers);
    }
    if let Some(h) = head.filter(|&h| h > c.n_heads) {
        usage!("--head {h}: the model has {} heads", c.n_heads);
    }
    let src_ids = translator.encode_source(src)?;
    if src_ids.is_empty() {
        usage!("--src is empty: give a sentence to look at");
    }
    let tgt_ids = match tgt {
        Some(t) => translator.encode_target(t)?,
        None => {
            let opts = DecodeOptions { search: BeamConfig::for_task(translator.task()), ..Default::default() };
            let (h, _) = translator.translate_ids(std::slice::from_ref(&src_ids), &opts, &mut Stderr)?;
            let ids = h[0][0].tokens.clone();
            eprintln!("translation: {}", translator.decode_target(&ids)?);
            ids
        }
    };
    let w = translator.attention(&src_ids, &tgt_ids)?;
    let labels = attn::AxisLabels::new(translator.tokenizer(), &src_ids, &tgt_ids)?;
    std::fs::create_dir_all(out).map_err(transformer::io::io_err(out))?;
    let layers: Vec<usize> = layer.map_or((1..=c.n_layers).collect(), |l| vec![l]);
    let heads: Vec<usize> = head.map_or((1..=c.n_heads).collect(), |h| vec![h]);
    let mut written = 0;
    for kind in attn::Kind::ALL {
        let (rows, cols) = labels.of(kind);
        for &l in &layers {
            for &h in &heads {
                let (weights, _, _) = w.get(kind, l - 1, h - 1)?;
                let title = format!("{}, layer {l} of {}, head {h} of {}", kind.title(), c.n_layers, c.n_heads);
                let img = heatmap::render(weights, rows, cols, &title)?;
                let path = out.join(format!("{}-layer{l}-head{h}.png", kind.slug()));
                img.save_png(&path)?;
                written += 1;
            }
        }
    }
    println!("{written} heatmaps written to {}", out.display());
    Ok(())
}

/// What a perplexity line adds for an ensemble: perplexity is the first model's alone.
pub(crate) fn first_of(translator: &Translator) -> String {
    match translator.ensemble_size() {
        1 => String::new(),
        n => format!("; the first of the ensemble's {n} models alone"),
    }
}

/// The table in CTranslate2's vocabulary-map format (its `vocabulary_map.cc`): per source token a
/// line `piece<TAB>target pieces separated by spaces`, and the frequent targets under the empty
/// key, which CTranslate2 always allows (beside its UNK, BOS and EOS, as ours are).
fn ct2_vocabulary_map(translator: &Translator, table: &transformer::decode::shortlist::Shortlist) -> Result<String> {
    use transformer::data::tokenizer::Side;
    let tok = translator.tokenizer();
    let piece = |side: Side, id: u32| -> Result<String> {
        let p = tok.piece_of_id(side, id).unwrap_or_default();
        if p.is_empty() || p.chars().any(char::is_whitespace) {
            anyhow::bail!("token {id} ({p:?}) cannot be written in CTranslate2's vocabulary map, whose fields are split at white space");
        }
        Ok(p)
    };
    let targets = |ids: &[u32]| ids.iter().map(|&id| piece(Side::Target, id)).collect::<Result<Vec<_>>>();
    let mut out = format!("\t{}\n", targets(&table.frequent)?.join(" "));
    for (key, ids) in &table.sources {
        let id: u32 = key.parse().expect("a loaded or learned table's keys are ids");
        out.push_str(&format!("{}\t{}\n", piece(Side::Source, id)?, targets(ids)?.join(" ")));
    }
    Ok(out)
}

/// `transformer shortlist`: the co-occurrence table of the training pairs, with the model's
/// tokenizer, and how much of each pair's target it covers.
pub fn shortlist(args: &crate::args::ShortlistArgs) -> Result<()> {
    use transformer::decode::shortlist::Shortlist;
    let crate::args::ShortlistArgs { model, src, tgt, per_source, frequent, output, ct2_vmap } = args;
    for (flag, out) in [("--output", Some(output)), ("--ct2-vmap", ct2_vmap.as_ref())] {
        if out.is_some_and(|o| o == src || o == tgt) {
            usage!("{flag} {} is an input: give another path", out.map_or(String::new(), |o| o.display().to_string()));
        }
    }
    if ct2_vmap.as_ref() == Some(output) {
        usage!("--ct2-vmap and --output are both {}: give two paths", output.display());
    }
    let translator = model.load()?;
    let srcs = read_input_lines(src)?;
    let tgts = read_references(std::slice::from_ref(tgt), src, srcs.len(), "sources")?.remove(0);
    let mut pairs = Vec::with_capacity(srcs.len());
    for (i, (s, t)) in srcs.iter().zip(&tgts).enumerate() {
        let at = |f: &Path, e: transformer::Error| anyhow::anyhow!("{}:{}: {e}", f.display(), i + 1);
        let s = translator.encode_source(s).map_err(|e| at(src, e))?;
        pairs.push((s, translator.encode_target(t).map_err(|e| at(tgt, e))?));
    }
    let tok = translator.tokenizer();
    let table = Shortlist::learn(&pairs, tok.vocab_size(), tok.hash(), *per_source as usize, *frequent as usize)?;
    table.save(output)?;
    if let Some(path) = ct2_vmap {
        transformer::io::write_atomically(path, ct2_vocabulary_map(&translator, &table)?.as_bytes())?;
    }
    // Coverage: the share of each pair's target tokens inside its own source's shortlist.
    let (mut inside, mut all, mut size) = (0usize, 0usize, 0usize);
    for (s, t) in &pairs {
        let list = table.for_sources(std::slice::from_ref(s));
        size += list.len();
        all += t.len();
        inside += t.iter().filter(|id| list.binary_search(id).is_ok()).count();
    }
    println!(
        "{}: {} source tokens, {} targets each at most, {} frequent; a sentence's list {:.0} ids on average of {}, covering {:.2}% of its target tokens",
        output.display(),
        table.sources.len(),
        per_source,
        table.frequent.len(),
        size as f64 / pairs.len().max(1) as f64,
        tok.vocab_size(),
        100.0 * inside as f64 / all.max(1) as f64
    );
    Ok(())
}
