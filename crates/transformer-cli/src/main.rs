//! The `transformer` command-line tool.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::time::Instant;
use transformer::config::{ModelConfig, PAPER_VOCAB, PRESET_NAMES};
use transformer::params::param_count;
use transformer::rng::Rng;
use transformer::synthetic::{self, Task};
use transformer::train::{checkpoint, Schedule, Trainer};
use transformer::{Batch, Transformer};

#[derive(Parser)]
#[command(
    name = "transformer",
    version,
    about = "Attention Is All You Need: train, decode and evaluate Transformers on CPU"
)]
struct Cli {
    /// Worker threads (default: all cores).
    #[arg(long, global = true)]
    threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the exact parameter count of a Table 3 preset (or all presets with --all).
    Params {
        /// Preset name: base, a1..a4, b1, b2, c1..c7, d1..d4, e, big.
        #[arg(long, default_value = "base")]
        preset: String,
        /// Shared vocabulary size.
        #[arg(long, default_value_t = PAPER_VOCAB)]
        vocab: usize,
        /// Every preset, one per line.
        #[arg(long)]
        all: bool,
        /// Machine-readable JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Train a small model on a synthetic copy/reverse task and report held-out token accuracy.
    Synthetic {
        /// copy or reverse.
        #[arg(long, default_value = "reverse")]
        task: String,
        /// Updates.
        #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..))]
        steps: u64,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write the final checkpoint here.
        #[arg(long)]
        save: Option<std::path::PathBuf>,
    },
    /// Train a model with the paper's recipe from a TOML configuration; rerun to resume.
    Train {
        /// The run configuration (see configs/).
        #[arg(long)]
        config: std::path::PathBuf,
        /// Override a field: --set train.lr_scale=2 (repeatable).
        #[arg(long = "set")]
        overrides: Vec<String>,
        /// Stop cleanly, with a checkpoint, after this many minutes.
        #[arg(long)]
        time_limit: Option<f64>,
    },
    /// Translate sentences (stdin or --input) with a trained checkpoint; one line out per line in.
    Translate {
        /// The checkpoint (from `train` or `average`).
        #[arg(long)]
        checkpoint: std::path::PathBuf,
        /// The BPE model the checkpoint was trained with.
        #[arg(long)]
        bpe: std::path::PathBuf,
        /// Input file (plain or .gz; default: stdin).
        #[arg(long)]
        input: Option<std::path::PathBuf>,
        #[command(flatten)]
        search: SearchArgs,
        /// With --nbest N > 1: write N lines per sentence, `index ||| text ||| log P ||| score`.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        nbest: u32,
        /// Print sentences/s and tokens/s on stderr.
        #[arg(long)]
        speed: bool,
        /// Also print where the time went: matrix products (with their GFLOP/s), attention, layer
        /// norm, beam search, and the rest.
        #[arg(long)]
        profile: bool,
    },
    /// Translate a test set and score it: BLEU and chrF (sacreBLEU), tokenized BLEU, and perplexity.
    Evaluate {
        /// The checkpoint.
        #[arg(long)]
        checkpoint: std::path::PathBuf,
        /// The BPE model the checkpoint was trained with.
        #[arg(long)]
        bpe: std::path::PathBuf,
        /// Source sentences.
        #[arg(long)]
        src: std::path::PathBuf,
        /// Reference translations, line-aligned; repeat for several references. Perplexity uses the first.
        #[arg(long = "ref", required = true, num_args = 1..)]
        refs: Vec<std::path::PathBuf>,
        /// Also write the translations here.
        #[arg(long)]
        output: Option<std::path::PathBuf>,
        #[command(flatten)]
        search: SearchArgs,
    },
    /// Attention heatmaps (PNG, like the paper's Figures 3–5) for one sentence: encoder
    /// self-attention (source × source), decoder self-attention (decoder input × decoder input) and
    /// encoder–decoder attention (rows: the token each decoder position predicts; columns: source).
    Attention {
        /// The checkpoint.
        #[arg(long)]
        checkpoint: std::path::PathBuf,
        /// The BPE model the checkpoint was trained with.
        #[arg(long)]
        bpe: std::path::PathBuf,
        /// The source sentence.
        #[arg(long)]
        src: String,
        /// The target sentence fed to the decoder (default: the model's beam-4 translation).
        #[arg(long)]
        tgt: Option<String>,
        /// Only this layer (1-based; default: every layer).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        layer: Option<u32>,
        /// Only this head (1-based; default: every head).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        head: Option<u32>,
        /// Directory for the images.
        #[arg(long, default_value = "attention")]
        out: std::path::PathBuf,
    },
    /// Download corpora, verifying SHA-256 checksums.
    Data {
        #[command(subcommand)]
        which: DataCommand,
    },
    /// Binarise a parallel corpus (BPE ids, filtered) into memory-mappable files for training.
    Prepare {
        /// Source text (plain or .gz).
        #[arg(long)]
        src: std::path::PathBuf,
        /// Target text, line-aligned with the source.
        #[arg(long)]
        tgt: std::path::PathBuf,
        /// The shared BPE model.
        #[arg(long)]
        bpe: std::path::PathBuf,
        /// Output directory.
        #[arg(long)]
        out: std::path::PathBuf,
        /// Longest side kept, in BPE tokens.
        #[arg(long, default_value_t = 250)]
        max_tokens: usize,
        /// Largest length ratio kept.
        #[arg(long, default_value_t = 3.0)]
        max_ratio: f64,
    },
    /// Average checkpoints element-wise (§6.1): the last K of a run directory, or explicit files.
    Average {
        /// Average the newest K checkpoints of DIR.
        #[arg(long, requires = "dir")]
        last: Option<usize>,
        /// The run directory (with --last).
        dir: Option<std::path::PathBuf>,
        /// Explicit checkpoint files instead of --last.
        #[arg(long = "inputs", num_args = 1.., conflicts_with = "last")]
        inputs: Vec<std::path::PathBuf>,
        /// Where to write the averaged checkpoint.
        #[arg(long)]
        output: std::path::PathBuf,
    },
    /// Byte-pair encoding: learn one shared vocabulary, apply it, restore text.
    Bpe {
        #[command(subcommand)]
        which: BpeCommand,
    },
    /// Score translations: corpus BLEU and/or chrF exactly as sacreBLEU 2.x computes them.
    Bleu {
        /// Reference file (one sentence a line); repeat for multiple references.
        #[arg(long = "ref", required = true, num_args = 1..)]
        refs: Vec<std::path::PathBuf>,
        /// Hypothesis file, line-aligned with the references.
        #[arg(long)]
        hyp: std::path::PathBuf,
        /// Tokenizer: 13a (sacreBLEU's default, WMT), intl, char or none.
        #[arg(long, default_value = "13a")]
        tokenize: String,
        /// Lowercase before scoring.
        #[arg(long)]
        lowercase: bool,
        /// BLEU smoothing: exp (default), floor, add-k or none.
        #[arg(long, default_value = "exp")]
        smooth: String,
        /// Value for floor (default 0.1) or add-k (default 1).
        #[arg(long)]
        smooth_value: Option<f64>,
        /// Metrics to print, comma-separated: bleu, chrf, tokenized-bleu (13a tokens, no smoothing, as
        /// multi-bleu.perl; honours --lowercase, ignores --tokenize and --smooth).
        #[arg(long, default_value = "bleu", value_delimiter = ',')]
        metrics: Vec<String>,
        /// Print only the number(s).
        #[arg(long)]
        score_only: bool,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

/// Search and batching options shared by `translate` and `evaluate`.
#[derive(clap::Args)]
struct SearchArgs {
    /// Decoding preset: translation (beam 4, α 0.6, +50), parsing (beam 21, α 0.3, +300) or greedy.
    #[arg(long, default_value = "translation")]
    preset: String,
    /// Beam size (overrides the preset; 1 = greedy).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    beam: Option<u32>,
    /// Length-penalty exponent α, lp = ((5 + |Y|) / 6)^α (overrides the preset).
    #[arg(long)]
    alpha: Option<f64>,
    /// Maximum output length = a · source length + b: a (overrides the preset).
    #[arg(long)]
    max_len_a: Option<f64>,
    /// Maximum output length: b (overrides the preset).
    #[arg(long)]
    max_len_b: Option<usize>,
    /// Source tokens per batch, padding included.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: u32,
    /// Sentences per batch.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    max_sentences: u32,
    /// Stop a sentence as soon as the best candidate of a step ends in EOS (CTranslate2's default),
    /// instead of when no live hypothesis can still win; faster, and may change the output.
    #[arg(long)]
    early_exit: bool,
}

impl SearchArgs {
    fn options(&self, nbest: usize) -> Result<transformer::decode::translator::TranslateOptions> {
        let mut search = transformer::decode::BeamConfig::preset(&self.preset)?;
        if let Some(b) = self.beam {
            search.beam = b as usize;
        }
        if let Some(a) = self.alpha {
            search.alpha = a;
        }
        if let Some(a) = self.max_len_a {
            search.max_len_a = a;
        }
        if let Some(b) = self.max_len_b {
            search.max_len_b = b;
        }
        search.nbest = nbest;
        search.early_exit = self.early_exit;
        search.validate()?;
        Ok(transformer::decode::translator::TranslateOptions {
            search,
            max_tokens: self.max_tokens as usize,
            max_sentences: self.max_sentences as usize,
        })
    }

    fn describe(&self, o: &transformer::decode::translator::TranslateOptions) -> String {
        let s = &o.search;
        let stop = if s.early_exit { ", early exit" } else { "" };
        format!("beam {}, α {}, max length {}·src + {}{stop}", s.beam, s.alpha, s.max_len_a, s.max_len_b)
    }
}

#[derive(Subcommand)]
enum DataCommand {
    /// Multi30k task 1 raw text (train, val, test_2016_flickr; en, de, fr, cs).
    Multi30k {
        /// Where the verified files go.
        #[arg(long, default_value = "data/multi30k")]
        cache: std::path::PathBuf,
        /// Copy from this local mirror instead of downloading (default: $TRANSFORMER_MULTI30K_MIRROR if set).
        #[arg(long)]
        from: Option<std::path::PathBuf>,
        /// Download from this base URL.
        #[arg(long, default_value = transformer::data::download::MULTI30K_URL)]
        url: String,
    },
}

#[derive(Subcommand)]
enum BpeCommand {
    /// Learn a joint vocabulary from source and target training text (plain or .gz files).
    Learn {
        /// Training text, one sentence a line (give both languages).
        #[arg(long = "input", required = true, num_args = 1..)]
        inputs: Vec<std::path::PathBuf>,
        /// Vocabulary size (e.g. 8000 for Multi30k, 37000 for WMT14 En-De).
        #[arg(long)]
        vocab_size: usize,
        /// Pairs seen fewer times are not merged.
        #[arg(long, default_value_t = 2)]
        min_frequency: u64,
        /// Where to write the model (JSON).
        #[arg(long)]
        output: std::path::PathBuf,
    },
    /// Segment text into subword pieces (stdin, or --input), one line out per line in.
    Apply {
        /// The model from `bpe learn`.
        #[arg(long)]
        model: std::path::PathBuf,
        /// Input file (default: stdin).
        #[arg(long)]
        input: Option<std::path::PathBuf>,
    },
    /// Restore text from subword pieces (the inverse of `apply`).
    Decode {
        /// The model from `bpe learn`.
        #[arg(long)]
        model: std::path::PathBuf,
        /// Input file (default: stdin).
        #[arg(long)]
        input: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Iterate one epoch of batches of a prepared (binarised) corpus; reports time and peak RSS.
    DataIter {
        /// A directory from `transformer prepare`.
        #[arg(long)]
        data: std::path::PathBuf,
        /// Source and target tokens per batch.
        #[arg(long, default_value_t = 4096)]
        max_tokens: usize,
    },
    /// Time full training steps (forward + backward + Adam) of the benchmark model.
    TrainStep {
        /// Timed steps.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
        steps: u32,
        /// Untimed warm-up steps.
        #[arg(long, default_value_t = 3)]
        warmup: usize,
        /// bf16 matrix products on AMX or AVX512-BF16 (`train.bf16_matmul`, the `bf16-matmul` departure).
        #[arg(long)]
        bf16: bool,
        /// Print one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// GFLOP/s of f32 matrix products at the shapes of a training step (and square ones).
    Matmul {
        /// Repetitions per shape (median reported).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
        reps: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(n) = cli.threads {
        if let Err(e) = rayon::ThreadPoolBuilder::new().num_threads(n).build_global() {
            eprintln!("error: cannot start {n} threads: {e}");
            return ExitCode::FAILURE;
        }
    }
    // The command runs on a worker of the thread pool, so its kernels' parallel loops start as
    // cheap in-pool forks rather than as jobs injected from outside the pool (which cost a wake-up
    // and a wait on every call: measured 10-20% of decoding time).
    let (tx, rx) = std::sync::mpsc::channel();
    let command = cli.command;
    rayon::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(command))));
    });
    let result = match rx.recv() {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => Err(anyhow::anyhow!("the command's thread ended without a result")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, joined by ": ", leaving out a cause whose text the message already
/// holds (the library's errors name their cause in their own message).
fn error_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}

fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Params { preset, vocab, all, json } => params(&preset, vocab, all, json),
        Command::Synthetic { task, steps, seed, save } => synthetic_task(&task, steps, seed, save),
        Command::Bpe { which } => bpe(which),
        Command::Average { last, dir, inputs, output } => {
            let paths = match (last, dir) {
                (Some(k), Some(dir)) => {
                    let all = transformer::train::run::list_checkpoints(&dir)?;
                    if all.len() < k {
                        bail!("{} holds {} checkpoints, fewer than --last {k}", dir.display(), all.len());
                    }
                    all[all.len() - k..].iter().map(|(_, p)| p.clone()).collect()
                }
                _ if !inputs.is_empty() => inputs,
                _ => bail!("give --last K DIR or --inputs FILE..."),
            };
            let avg = transformer::train::checkpoint::average(&paths)?;
            transformer::train::checkpoint::save(&output, &avg)?;
            println!("averaged {} checkpoints (newest step {}) -> {}", paths.len(), avg.step, output.display());
            Ok(())
        }
        Command::Prepare { src, tgt, bpe, out, max_tokens, max_ratio } => {
            let model = transformer::data::bpe::Bpe::load(&bpe)?;
            let filter = transformer::data::parallel::FilterConfig { max_tokens, max_ratio };
            let start = Instant::now();
            let report =
                transformer::data::binarized::prepare(&src, &tgt, &model, &filter, &out, &mut |m| eprintln!("{m}"))?;
            println!(
                "{report} -> {} in {:.1} s, peak RSS {:.0} MB",
                out.display(),
                start.elapsed().as_secs_f64(),
                peak_rss_bytes().unwrap_or(0) as f64 / 1e6
            );
            Ok(())
        }
        Command::Data { which: DataCommand::Multi30k { cache, from, url } } => {
            use transformer::data::download::{fetch_verified, Source, MIRROR_ENV, MULTI30K_FILES};
            let from = from.or_else(|| std::env::var_os(MIRROR_ENV).map(Into::into));
            let source = match from {
                Some(dir) => Source::Dir(dir),
                None => Source::Url(url),
            };
            let paths = fetch_verified(&source, &MULTI30K_FILES, &cache, &mut |m| eprintln!("{m}"))?;
            println!("{} files verified in {}", paths.len(), cache.display());
            Ok(())
        }
        Command::Translate { checkpoint, bpe, input, search, nbest, speed, profile } => {
            translate(&checkpoint, &bpe, input.as_deref(), &search, nbest as usize, speed, profile)
        }
        #[cfg(not(feature = "heatmap"))]
        Command::Attention { .. } => {
            bail!(
                "this binary was built without heatmaps (the `heatmap` feature is off); rebuild with default features"
            )
        }
        #[cfg(feature = "heatmap")]
        Command::Attention { checkpoint, bpe, src, tgt, layer, head, out } => attention(
            &checkpoint,
            &bpe,
            &src,
            tgt.as_deref(),
            layer.map(|l| l as usize),
            head.map(|h| h as usize),
            &out,
        ),
        Command::Evaluate { checkpoint, bpe, src, refs, output, search } => {
            evaluate(&checkpoint, &bpe, &src, &refs, output.as_deref(), &search)
        }
        Command::Train { config, overrides, time_limit } => train(&config, overrides, time_limit),
        Command::Bleu { refs, hyp, tokenize, lowercase, smooth, smooth_value, metrics, score_only } => {
            bleu(&refs, &hyp, &tokenize, lowercase, &smooth, smooth_value, &metrics, score_only)
        }
        Command::Bench { which: BenchCommand::TrainStep { steps, warmup, bf16, json } } => {
            bench_train_step(steps as usize, warmup, bf16, json)
        }
        Command::Bench { which: BenchCommand::DataIter { data, max_tokens } } => {
            use transformer::data::batching::{epoch_order, make_batches, BatchConfig};
            let start = Instant::now();
            let corpus = transformer::data::binarized::Binarized::open(&data)?;
            let lengths: Vec<(usize, usize)> = (0..corpus.len()).map(|i| corpus.lengths(i)).collect();
            let batches =
                make_batches(&lengths, &BatchConfig { max_src_tokens: max_tokens, max_tgt_tokens: max_tokens });
            let (mut tokens, mut checksum) = (0usize, 0u64);
            for b in epoch_order(batches.len(), 1, 0) {
                let pairs: Vec<(Vec<u32>, Vec<u32>)> = batches[b].iter().map(|&i| corpus.pair(i)).collect();
                let batch = Batch::from_pairs(&pairs);
                tokens += batch.target_tokens();
                checksum = checksum.wrapping_add(batch.tgt_out.iter().map(|&x| x as u64).sum::<u64>());
            }
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let kb = |key: &str| {
                status
                    .lines()
                    .find(|l| l.starts_with(key))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            println!(
                "{} pairs, {} batches, {tokens} target tokens (checksum {checksum}) in {:.1} s; peak RSS {:.0} MB, now {:.0} MB anonymous + {:.0} MB file-backed (the memory-mapped corpus, page cache the kernel can reclaim)",
                corpus.len(),
                batches.len(),
                start.elapsed().as_secs_f64(),
                peak_rss_bytes().unwrap_or(0) as f64 / 1e6,
                kb("RssAnon:") / 1e3,
                kb("RssFile:") / 1e3
            );
            Ok(())
        }
        Command::Bench { which: BenchCommand::Matmul { reps } } => bench_matmul(reps as usize),
    }
}

fn params(preset: &str, vocab: usize, all: bool, json: bool) -> Result<()> {
    let names: Vec<&str> = if all { PRESET_NAMES.to_vec() } else { vec![preset] };
    let mut rows = Vec::new();
    for name in names {
        let mut c = ModelConfig::preset(name)?;
        c.vocab_size = vocab;
        c.validate()?;
        let count = param_count(&c);
        let paper = if vocab == PAPER_VOCAB { ModelConfig::paper_params_millions(name) } else { None };
        rows.push((name, c, count, paper));
    }
    for (name, c, count, paper) in rows {
        if json {
            let v = serde_json::json!({ "preset": name, "vocab": vocab, "params": count, "paper_params_millions": paper, "config": c });
            println!("{v}");
        } else {
            let paper = paper
                .map(|p| format!(" (paper: {p}M, {:+.1}%)", (count as f64 / 1e6 / p - 1.0) * 100.0))
                .unwrap_or_default();
            println!("{name:<5} {count:>11} parameters = {:.1}M{paper}", count as f64 / 1e6);
        }
    }
    Ok(())
}

fn synthetic_task(task: &str, steps: u64, seed: u64, save: Option<std::path::PathBuf>) -> Result<()> {
    let task = match task {
        "copy" => Task::Copy,
        "reverse" => Task::Reverse,
        other => bail!("unknown task '{other}': use copy or reverse"),
    };
    let symbols = 20;
    let cfg = synthetic::model_config(symbols);
    let model = Transformer::new(cfg.clone(), seed)?;
    let mut trainer = Trainer::new(model, Schedule { d_model: cfg.d_model, warmup: 400, lr_scale: 0.5 }, seed);
    let mut rng = Rng::new(seed ^ 0xdead_beef);
    let start = Instant::now();
    for step in 1..=steps {
        let batch = Batch::from_pairs(&synthetic::pairs(task, &mut rng, 64, symbols, 4, 12));
        let s = trainer.train_step(&[batch])?;
        if step % 100 == 0 || step == steps {
            eprintln!("step {step:>5}  loss {:.4}  lr {:.2e}  {:.1}s", s.loss, s.lr, start.elapsed().as_secs_f64());
        }
    }
    let mut held_out = Rng::new(seed ^ 0x1234_5678);
    let batch = Batch::from_pairs(&synthetic::pairs(task, &mut held_out, 500, symbols, 4, 12));
    let (ok, total) = synthetic::token_accuracy(trainer.logits(&batch)?, &batch, cfg.vocab_size);
    println!("held-out token accuracy: {:.2}% ({ok}/{total})", 100.0 * ok as f64 / total as f64);
    if let Some(path) = save {
        let ckpt = trainer.to_checkpoint("", Default::default());
        checkpoint::save(&path, &ckpt).with_context(|| format!("saving {}", path.display()))?;
        eprintln!("saved {}", path.display());
    }
    Ok(())
}

/// The benchmark model of issue "engine": d 512, h 8, d_ff 2048, 2+2 layers, vocabulary 8000.
fn bench_config() -> ModelConfig {
    ModelConfig {
        n_layers: 2,
        d_model: 512,
        d_ff: 2048,
        n_heads: 8,
        d_k: 64,
        d_v: 64,
        dropout: std::env::var("BENCH_DROPOUT").ok().and_then(|v| v.parse().ok()).unwrap_or(0.1),
        attention_dropout: 0.0,
        label_smoothing: 0.1,
        positions: transformer::Positions::Sinusoidal,
        max_positions: 1024,
        vocab_size: 8000,
        layer_norm_eps: 1e-6,
    }
}

/// Peak resident set size of this process, from /proc (Linux), in bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn bench_train_step(steps: usize, warmup: usize, bf16: bool, json: bool) -> Result<()> {
    if bf16 {
        transformer::kernels::cpu::matmul::set_bf16(true).map_err(|why| anyhow::anyhow!("--bf16: {why}"))?;
    }
    let cfg = bench_config();
    let (b, s, t) = (64, 32, 32);
    let model = Transformer::new(cfg.clone(), 1)?;
    let mut trainer = Trainer::new(model, Schedule::paper(cfg.d_model), 1);
    let mut rng = Rng::new(7);
    let special = transformer::SPECIAL_TOKENS as u64;
    let mut tok = || (special + rng.below(cfg.vocab_size as u64 - special)) as u32;
    // Every sentence is exactly 32 source and 32 target positions (decoder input BOS + 31 tokens).
    let pairs: Vec<(Vec<u32>, Vec<u32>)> =
        (0..b).map(|_| ((0..s).map(|_| tok()).collect(), (0..t - 1).map(|_| tok()).collect())).collect();
    let batch = Batch::from_pairs(&pairs);
    assert_eq!((batch.s, batch.t), (s, t));
    use transformer::kernels::cpu::profile;
    let mut times = Vec::new();
    let mut slots: Vec<Vec<(&str, f64)>> = Vec::new();
    let mut matmul_flops = 0;
    profile::enable(true);
    for i in 0..warmup + steps {
        profile::take();
        let start = Instant::now();
        let stats = trainer.train_step(std::slice::from_ref(&batch))?;
        let dt = start.elapsed().as_secs_f64();
        let (slot_times, flops) = profile::take();
        if i >= warmup {
            times.push(dt);
            slots.push(slot_times);
            matmul_flops = flops;
        }
        if !json {
            eprintln!(
                "step {:>3}: {:.3} s  loss {:.4}{}",
                i + 1,
                dt,
                stats.loss,
                if i < warmup { " (warm-up)" } else { "" }
            );
        }
    }
    profile::enable(false);
    let median_of = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let median = median_of(times.clone());
    // Per kernel family: the median over steps; "other" is the step minus all accounted time.
    let names: Vec<&str> = slots[0].iter().map(|s| s.0).collect();
    let mut breakdown: Vec<(String, f64)> = names
        .iter()
        .enumerate()
        .map(|(k, n)| (n.to_string(), median_of(slots.iter().map(|s| s[k].1).collect())))
        .collect();
    let other = median_of(times.iter().zip(&slots).map(|(t, s)| t - s.iter().map(|x| x.1).sum::<f64>()).collect());
    breakdown.push(("other (wiring, rayon waits)".into(), other));
    let matmul_median = breakdown[0].1;
    let threads = rayon::current_num_threads();
    let rss = peak_rss_bytes();
    if json {
        let v = serde_json::json!({ "impl": "transformer", "bf16": bf16, "threads": threads, "step_times_s": times, "median_s": median, "peak_rss_bytes": rss,
            "params": trainer.model().params.len(), "matmul_gflop": matmul_flops as f64 / 1e9,
            "breakdown_s": breakdown.iter().map(|(n, t)| (n.clone(), *t)).collect::<std::collections::BTreeMap<_, _>>() });
        println!("{v}");
    } else {
        println!(
            "median step {median:.3} s over {steps} steps, {threads} threads, {}, peak RSS {:.2} GB",
            if bf16 { "bf16 products" } else { "f32" },
            rss.unwrap_or(0) as f64 / 1e9
        );
        println!(
            "matmuls: {:.1} GFLOP at {:.0} GFLOP/s",
            matmul_flops as f64 / 1e9,
            matmul_flops as f64 / matmul_median / 1e9
        );
        for (name, t) in &breakdown {
            println!("  {name:<28} {:>7.1} ms  {:>5.1}%", t * 1e3, 100.0 * t / median);
        }
    }
    Ok(())
}

fn bench_matmul(reps: usize) -> Result<()> {
    use transformer::kernels::cpu::matmul::{matmul, Op};
    // (m, n, k, op_a, op_b, what)
    let shapes = [
        (512, 512, 512, Op::N, Op::N, "square 512"),
        (1024, 1024, 1024, Op::N, Op::N, "square 1024"),
        (2048, 2048, 2048, Op::N, Op::N, "square 2048"),
        (2048, 1536, 512, Op::N, Op::T, "QKV fwd  X·Wᵀ"),
        (2048, 2048, 512, Op::N, Op::T, "FFN1 fwd X·W1ᵀ"),
        (2048, 512, 2048, Op::N, Op::T, "FFN2 fwd H·W2ᵀ"),
        (2048, 8000, 512, Op::N, Op::T, "logits   H·Eᵀ"),
        (2048, 512, 8000, Op::N, Op::N, "dlogits·E"),
        (8000, 512, 2048, Op::T, Op::N, "dE = dlogitsᵀ·H"),
        (2048, 512, 2048, Op::T, Op::N, "dW1 = dHᵀ·X"),
        (512, 2048, 2048, Op::T, Op::N, "dW2 = dYᵀ·H"),
    ];
    let mut rng = Rng::new(3);
    for (m, n, k, oa, ob, what) in shapes {
        let a: Vec<f32> = (0..m * k).map(|_| rng.uniform() as f32 - 0.5).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.uniform() as f32 - 0.5).collect();
        let mut c = vec![0f32; m * n];
        let mut times = Vec::new();
        for _ in 0..reps + 1 {
            let t0 = Instant::now();
            matmul(&mut c, &a, oa, &b, ob, m, n, k, true);
            times.push(t0.elapsed().as_secs_f64());
        }
        times.remove(0);
        times.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let med = times[times.len() / 2];
        println!(
            "{what:<18} {m:>5}x{n:>5}x{k:>5} {oa:?}{ob:?}  {:>7.2} ms  {:>6.1} GFLOP/s",
            med * 1e3,
            2.0 * (m * n * k) as f64 / med / 1e9
        );
    }
    Ok(())
}

fn read_lines(path: &std::path::Path) -> Result<Vec<String>> {
    Ok(transformer::data::corpus::read_lines(path)?)
}

#[allow(clippy::too_many_arguments)]
fn bleu(
    ref_paths: &[std::path::PathBuf],
    hyp_path: &std::path::Path,
    tokenize: &str,
    lowercase: bool,
    smooth: &str,
    smooth_value: Option<f64>,
    metrics: &[String],
    score_only: bool,
) -> Result<()> {
    use transformer::eval::{bleu, chrf, tokenize::Tokenizer};
    let tokenizer = Tokenizer::from_name(tokenize)
        .with_context(|| format!("unknown tokenizer '{tokenize}': use 13a, intl, char or none"))?;
    let smooth = bleu::Smooth::from_name(smooth, smooth_value)
        .with_context(|| format!("unknown smoothing '{smooth}': use exp, floor, add-k or none"))?;
    let hyps = read_lines(hyp_path)?;
    let refs = read_references(ref_paths, hyp_path, hyps.len(), "hypotheses")?;
    for m in metrics {
        let (line, score) = match m.as_str() {
            "bleu" => {
                let cfg = bleu::BleuConfig { tokenizer, lowercase, smooth, effective_order: false };
                let s = bleu::corpus_bleu(&hyps, &refs, &cfg);
                (s.line(), s.score)
            }
            "chrf" => {
                let cfg = chrf::ChrfConfig { lowercase, ..chrf::ChrfConfig::default() };
                let s = chrf::corpus_chrf(&hyps, &refs, &cfg);
                (s.line(), s.score)
            }
            "tokenized-bleu" => {
                let s = bleu::tokenized_bleu(&hyps, &refs, lowercase);
                (s.line(), s.score)
            }
            other => bail!("unknown metric '{other}': use bleu, chrf or tokenized-bleu"),
        };
        if score_only {
            println!("{score:.2}");
        } else {
            println!("{line}");
        }
    }
    Ok(())
}

/// Reads reference files, each line-aligned with `base` (`n` lines of `what`).
fn read_references(
    paths: &[std::path::PathBuf],
    base: &std::path::Path,
    n: usize,
    what: &str,
) -> Result<Vec<Vec<String>>> {
    let mut refs = Vec::with_capacity(paths.len());
    for p in paths {
        let r = read_lines(p)?;
        if r.len() != n {
            bail!(
                "{} has {} lines but {} has {n}: references and {what} must be line-aligned",
                p.display(),
                r.len(),
                base.display()
            );
        }
        refs.push(r);
    }
    Ok(refs)
}

fn bpe(cmd: BpeCommand) -> Result<()> {
    use std::io::Write;
    use transformer::data::bpe::Bpe;
    match cmd {
        BpeCommand::Learn { inputs, vocab_size, min_frequency, output } => {
            let mut lines = Vec::new();
            for p in &inputs {
                lines.extend(read_lines(p)?);
            }
            let start = Instant::now();
            let bpe = Bpe::learn(lines.iter(), vocab_size, min_frequency)?;
            bpe.save(&output).with_context(|| format!("writing {}", output.display()))?;
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

/// Runs `f` on every line of `input` (a plain or .gz file) or of stdin; errors name the file (or
/// `<stdin>`) and the line.
fn for_each_input_line(input: Option<&std::path::Path>, mut f: impl FnMut(&str) -> Result<()>) -> Result<()> {
    match input {
        Some(p) => transformer::data::corpus::for_each_line(p, |n, line| {
            f(line).with_context(|| format!("{}:{n}", p.display()))
        }),
        None => {
            let mut lines = transformer::data::corpus::Lines::from_reader(Box::new(std::io::stdin().lock()), "<stdin>");
            while let Some(line) = lines.next_line()? {
                f(line).with_context(|| format!("<stdin>:{}", lines.line_number()))?;
            }
            Ok(())
        }
    }
}

fn train(config: &std::path::Path, mut overrides: Vec<String>, time_limit: Option<f64>) -> Result<()> {
    let text = std::fs::read_to_string(config).with_context(|| format!("cannot read {}", config.display()))?;
    if let Some(m) = time_limit {
        overrides.push(format!("train.time_limit_minutes={m}"));
    }
    let cfg = transformer::train::run::RunConfig::from_toml(&text, &config.display().to_string(), &overrides)?;
    let start = Instant::now();
    let summary =
        transformer::train::run::run(&cfg, &mut |msg| eprintln!("[{:>7.1}s] {msg}", start.elapsed().as_secs_f64()))?;
    println!(
        "step {} epoch {}: {} ({:.0} s of training); valid perplexity {:.2}; {}",
        summary.state.step,
        summary.state.epoch + 1,
        summary.stopped,
        summary.state.elapsed_s,
        summary.valid.1.exp(),
        summary.checkpoint.display()
    );
    Ok(())
}

/// A checkpoint and the BPE model it was trained with (checked by the vocabulary's hash).
fn load_model(
    ckpt_path: &std::path::Path,
    bpe_path: &std::path::Path,
) -> Result<(Transformer, transformer::data::bpe::Bpe)> {
    let bpe = transformer::data::bpe::Bpe::load(bpe_path)?;
    let ckpt = transformer::train::checkpoint::load(ckpt_path)?;
    if ckpt.vocab_hash != bpe.hash() {
        bail!(
            "{} was trained with vocabulary {} but {} is {}: pass the BPE model the checkpoint was trained with",
            ckpt_path.display(),
            ckpt.vocab_hash,
            bpe_path.display(),
            bpe.hash()
        );
    }
    Ok((Transformer::from_params(ckpt.config.clone(), ckpt.params)?, bpe))
}

/// Encodes and translates `lines`; returns n-best lists (detokenised text with its hypothesis),
/// the statistics and the seconds spent decoding.
#[allow(clippy::type_complexity)]
fn translate_lines(
    model: &Transformer,
    bpe: &transformer::data::bpe::Bpe,
    lines: &[String],
    opts: &transformer::decode::translator::TranslateOptions,
) -> Result<(Vec<Vec<(String, transformer::decode::Hypothesis)>>, transformer::decode::translator::TranslateStats, f64)>
{
    let srcs = lines.iter().map(|l| bpe.encode(l)).collect::<transformer::Result<Vec<_>>>()?;
    let mut ws = transformer::Workspace::new();
    let start = Instant::now();
    let (hyps, stats) = transformer::decode::translator::translate_all(model, &srcs, opts, &mut ws, &mut |m| {
        eprintln!("warning: {m}")
    })?;
    let secs = start.elapsed().as_secs_f64();
    let mut out = Vec::with_capacity(hyps.len());
    for nbest in hyps {
        out.push(nbest.into_iter().map(|h| Ok((bpe.decode(&h.tokens)?, h))).collect::<Result<Vec<_>>>()?);
    }
    Ok((out, stats, secs))
}

fn speed_line(stats: &transformer::decode::translator::TranslateStats, secs: f64, what: &str) -> String {
    format!(
        "translated {} sentences in {secs:.2} s: {:.1} sentences/s, {:.0} source tokens/s, {:.0} output tokens/s, {} decoder rows ({what})",
        stats.sentences,
        stats.sentences as f64 / secs,
        stats.src_tokens as f64 / secs,
        stats.out_tokens as f64 / secs,
        stats.rows_decoded
    )
}

fn translate(
    ckpt_path: &std::path::Path,
    bpe_path: &std::path::Path,
    input: Option<&std::path::Path>,
    search: &SearchArgs,
    nbest: usize,
    speed: bool,
    profile: bool,
) -> Result<()> {
    use std::io::Write;
    use transformer::kernels::cpu::profile as prof;
    let opts = search.options(nbest)?;
    let (model, bpe) = load_model(ckpt_path, bpe_path)?;
    let mut lines = Vec::new();
    for_each_input_line(input, |l| {
        lines.push(l.to_string());
        Ok(())
    })?;
    if profile {
        prof::enable(true);
        prof::take();
    }
    let (out, stats, secs) = translate_lines(&model, &bpe, &lines, &opts)?;
    if profile {
        prof::enable(false);
        let (slots, flops) = prof::take();
        let accounted: f64 = slots.iter().map(|s| s.1).sum();
        for (name, t) in slots.iter().filter(|s| s.1 > 0.0) {
            let rate =
                if *name == "matmul" { format!(", {:.0} GFLOP/s", flops as f64 / 1e9 / t) } else { String::new() };
            eprintln!("{name:>32}: {t:7.3} s ({:4.1}%{rate})", 100.0 * t / secs);
        }
        eprintln!("{:>32}: {:7.3} s ({:4.1}%)", "other", secs - accounted, 100.0 * (secs - accounted) / secs);
    }
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    for (i, list) in out.iter().enumerate() {
        if nbest == 1 {
            writeln!(w, "{}", list[0].0)?;
        } else {
            for (text, h) in list {
                writeln!(w, "{i} ||| {text} ||| {:.4} ||| {:.4}", h.log_prob, h.score)?;
            }
        }
    }
    w.flush()?;
    if speed {
        eprintln!("{}", speed_line(&stats, secs, &search.describe(&opts)));
    }
    Ok(())
}

fn evaluate(
    ckpt_path: &std::path::Path,
    bpe_path: &std::path::Path,
    src_path: &std::path::Path,
    ref_paths: &[std::path::PathBuf],
    output: Option<&std::path::Path>,
    search: &SearchArgs,
) -> Result<()> {
    use transformer::eval::{bleu, chrf};
    let opts = search.options(1)?;
    let (model, bpe) = load_model(ckpt_path, bpe_path)?;
    let srcs = read_lines(src_path)?;
    let refs = read_references(ref_paths, src_path, srcs.len(), "sources")?;
    let (out, stats, secs) = translate_lines(&model, &bpe, &srcs, &opts)?;
    let hyps: Vec<String> = out.into_iter().map(|mut l| l.swap_remove(0).0).collect();
    if let Some(p) = output {
        let mut text = hyps.join("\n");
        text.push('\n');
        transformer::io::write_atomically(p, text.as_bytes())?;
    }
    println!("{}", bleu::corpus_bleu(&hyps, &refs, &bleu::BleuConfig::default()).line());
    println!("{}", chrf::corpus_chrf(&hyps, &refs, &chrf::ChrfConfig::default()).line());
    println!("{}", bleu::tokenized_bleu(&hyps, &refs, true).line());
    let (nll, tokens) = perplexity(&model, &bpe, &srcs, &refs[0])?;
    println!(
        "perplexity = {:.2} (per target token, EOS included, teacher-forced on {}: {tokens} tokens, mean NLL {:.4})",
        (nll / tokens as f64).exp(),
        ref_paths[0].display(),
        nll / tokens as f64
    );
    eprintln!("{}", speed_line(&stats, secs, &search.describe(&opts)));
    Ok(())
}

#[cfg(feature = "heatmap")]
/// Token labels for a heatmap: each piece decoded on its own; pieces that continue a word (no
/// leading space, not first) are marked with a leading '-'.
fn piece_labels(bpe: &transformer::data::bpe::Bpe, ids: &[u32]) -> Result<Vec<String>> {
    let mut out = Vec::with_capacity(ids.len());
    for (i, &id) in ids.iter().enumerate() {
        let text = bpe.decode(&[id])?;
        out.push(match text.strip_prefix(' ') {
            Some(word) => word.to_string(),
            None if i > 0 => format!("-{text}"),
            None => text,
        });
    }
    Ok(out)
}

#[cfg(feature = "heatmap")]
fn attention(
    ckpt_path: &std::path::Path,
    bpe_path: &std::path::Path,
    src: &str,
    tgt: Option<&str>,
    layer: Option<usize>,
    head: Option<usize>,
    out: &std::path::Path,
) -> Result<()> {
    use transformer::eval::{attention as attn, heatmap};
    use transformer::vocab::{BOS, EOS, SPECIALS};
    let (model, bpe) = load_model(ckpt_path, bpe_path)?;
    let c = &model.config;
    if let Some(l) = layer.filter(|&l| l > c.n_layers) {
        bail!("--layer {l}: the model has {} layers", c.n_layers);
    }
    if let Some(h) = head.filter(|&h| h > c.n_heads) {
        bail!("--head {h}: the model has {} heads", c.n_heads);
    }
    let src_ids = bpe.encode(src)?;
    if src_ids.is_empty() {
        bail!("--src is empty: give a sentence to look at");
    }
    let mut ws = transformer::Workspace::new();
    let tgt_ids = match tgt {
        Some(t) => bpe.encode(t)?,
        None => {
            let cfg = transformer::decode::BeamConfig::translation();
            let h = transformer::decode::translate_batch(&model, &[src_ids.as_slice()], &cfg, &mut ws)?;
            let ids = h[0][0].tokens.clone();
            eprintln!("translation: {}", bpe.decode(&ids)?);
            ids
        }
    };
    if src_ids.len() > c.max_positions || tgt_ids.len() + 1 > c.max_positions {
        bail!("the sentence is longer than the model's max_positions = {}", c.max_positions);
    }
    let w = attn::attention_weights(&model, &src_ids, &tgt_ids, &mut ws)?;
    let src_l = piece_labels(&bpe, &src_ids)?;
    let mut dec_in = vec![SPECIALS[BOS as usize].to_string()];
    dec_in.extend(piece_labels(&bpe, &tgt_ids)?);
    let mut dec_out: Vec<String> = dec_in[1..].to_vec();
    dec_out.push(SPECIALS[EOS as usize].into());
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let layers: Vec<usize> = layer.map_or((1..=c.n_layers).collect(), |l| vec![l]);
    let heads: Vec<usize> = head.map_or((1..=c.n_heads).collect(), |h| vec![h]);
    let mut written = 0;
    for kind in attn::Kind::ALL {
        let (rows, cols) = match kind {
            attn::Kind::EncoderSelf => (&src_l, &src_l),
            attn::Kind::DecoderSelf => (&dec_in, &dec_in),
            attn::Kind::EncoderDecoder => (&dec_out, &src_l),
        };
        for &l in &layers {
            for &h in &heads {
                let (weights, _, _) = w.get(kind, l - 1, h - 1);
                let title = format!("{}, layer {l} of {}, head {h} of {}", kind.title(), c.n_layers, c.n_heads);
                let img = heatmap::render(weights, rows, cols, &title);
                let path = out.join(format!("{}-layer{l}-head{h}.png", kind.slug()));
                img.save_png(&path)?;
                written += 1;
            }
        }
    }
    println!("{written} heatmaps written to {}", out.display());
    Ok(())
}

/// Summed negative log-likelihood (no label smoothing) of the references given the sources, and
/// the number of target tokens (EOS included). Pairs longer than the model's positions are skipped
/// with a warning.
fn perplexity(
    model: &Transformer,
    bpe: &transformer::data::bpe::Bpe,
    srcs: &[String],
    refs: &[String],
) -> Result<(f64, usize)> {
    let max = model.config.max_positions;
    let mut pairs = Vec::with_capacity(srcs.len());
    for (i, (s, r)) in srcs.iter().zip(refs).enumerate() {
        let (s, r) = (bpe.encode(s)?, bpe.encode(r)?);
        if s.len() > max || r.len() + 1 > max {
            eprintln!("warning: line {}: longer than max_positions = {max}; left out of the perplexity", i + 1);
            continue;
        }
        if s.is_empty() {
            continue;
        }
        pairs.push((s, r));
    }
    pairs.sort_by_key(|p| p.0.len().max(p.1.len()));
    let mut ws = transformer::Workspace::new();
    let (mut nll, mut tokens) = (0.0, 0);
    for chunk in pairs.chunks(64) {
        let batch = Batch::from_pairs(chunk);
        model.forward(&batch, &mut ws, None)?;
        let sums = model.loss(&batch, &mut ws, 0.0, 0.0);
        nll += sums.nll;
        tokens += sums.tokens;
    }
    Ok((nll, tokens))
}
