//! The command line: clap types only. Choices that name library values (presets, tasks,
//! precisions, tokenizers, smoothings, metrics) are parsed against the library's own lists, so
//! `--help` shows them and a typo is a usage error that names them.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use transformer::config::{PAPER_VOCAB, PRESET_NAMES};
use transformer::decode::BeamConfig;
use transformer::eval::bleu::Smooth;
use transformer::eval::tokenize::Tokenizer;
use transformer::eval::Metric;
use transformer::synthetic::SyntheticTask;
use transformer::{Precision, Task};

/// A value parser over a library enum: its variants by name (`name`), listed in `--help`.
fn library_enum<T: Copy + Send + Sync + 'static>(
    all: &'static [T],
    name: fn(T) -> &'static str,
) -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(all.iter().map(|&v| name(v)))
        .map(move |s| *all.iter().find(|&&v| name(v) == s).expect("clap checked the name"))
}

/// A value parser over a library list of names.
fn one_of(names: &'static [&'static str]) -> PossibleValuesParser {
    PossibleValuesParser::new(names.iter().copied())
}

#[derive(Parser)]
#[command(
    name = "transformer",
    version,
    about = "Attention Is All You Need: train, decode and evaluate Transformers on CPU"
)]
pub struct Cli {
    /// Worker threads (default: all cores).
    #[arg(long, global = true, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: Option<u32>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// The main job in one command: train an English→German model on the built-in Multi30k data
    /// (offline), average its last 5 checkpoints (§6.1), score test_2016_flickr with cased
    /// sacreBLEU and chrF (beam 4, α 0.6), translate examples, draw the learning curve and an
    /// attention heatmap, and print a report. With --task parsing: train a parser on the Penn
    /// Treebank sample (after `transformer data ptb-sample`), pick its best checkpoint by
    /// validation F1, parse the test files and print EVALB's summary and example trees. Run it
    /// again with the same --output to resume.
    Quickstart {
        /// What to train: translation (Multi30k) or parsing (configs/ptb-parse.toml on a treebank).
        #[arg(long, default_value = "translation", value_parser = library_enum(&Task::ALL, Task::name))]
        task: Task,
        /// Training budget in minutes (the recipe of configs/multi30k-en-de.toml, §5, or of
        /// configs/ptb-parse.toml; checkpoints every minutes/20).
        #[arg(long, default_value_t = 10.0)]
        minutes: f64,
        /// Where everything goes; an existing run there is resumed [default: quickstart, or
        /// quickstart-parsing with --task parsing].
        #[arg(long)]
        output: Option<PathBuf>,
        /// Source language: en or de are built in; fr and cs need `transformer data multi30k`
        /// [default: en].
        #[arg(long, value_parser = ["en", "de", "fr", "cs"])]
        src: Option<String>,
        /// Target language [default: de].
        #[arg(long, value_parser = ["en", "de", "fr", "cs"])]
        tgt: Option<String>,
        /// Where `transformer data multi30k` put the files, for languages that are not built in
        /// [default: data/multi30k].
        #[arg(long)]
        data: Option<PathBuf>,
        /// Parsing: the treebank, a directory searched for .mrg files (`transformer data
        /// ptb-sample` puts the sample in data/ptb-sample; or your own WSJ copy) [default:
        /// data/ptb-sample].
        #[arg(long)]
        treebank: Option<PathBuf>,
        /// Parsing: the files to train on, FIRST..LAST by name [default: wsj_0001..wsj_0159; for
        /// the full WSJ, sections 02-21: wsj_0200..wsj_2199].
        #[arg(long)]
        train_files: Option<String>,
        /// Parsing: the validation files, which pick the best checkpoint by F1 [default:
        /// wsj_0160..wsj_0174; full WSJ section 22: wsj_2200..wsj_2299].
        #[arg(long)]
        valid_files: Option<String>,
        /// Parsing: the test files, parsed and scored at the end [default: wsj_0175..wsj_0189; full
        /// WSJ section 23: wsj_2300..wsj_2399].
        #[arg(long)]
        test_files: Option<String>,
        /// Score only the first N test sentences (for a quick smoke test; the score is then not
        /// comparable).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        test_sentences: Option<u64>,
        /// Validation perplexity every N updates (and at every epoch's end).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
        valid_steps: u64,
    },
    /// Print the exact parameter count of a Table 3 preset (or all presets with --all).
    Params {
        /// A Table 3 row.
        #[arg(long, default_value = "base", value_parser = one_of(&PRESET_NAMES))]
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
        /// Also print the compute cost (Table 2's column, computed): forward multiply-adds per
        /// source and target token, a training step's (3× forward), and with --tokens-per-step and
        /// --steps the training cost in FLOPs (2 per multiply-add), beside the paper's figure for
        /// base and big. Formulas: docs/cost.md.
        #[arg(long)]
        cost: bool,
        /// Source sentence length assumed for the attention products (they grow with it).
        #[arg(long, default_value_t = 25, requires = "cost")]
        src_len: u64,
        /// Target sentence length assumed for the attention products.
        #[arg(long, default_value_t = 25, requires = "cost")]
        tgt_len: u64,
        /// Source tokens per update, and as many target tokens (§5.1: about 25000 each).
        #[arg(long, requires = "cost")]
        tokens_per_step: Option<u64>,
        /// Updates (§5.2: 100000 for base, 300000 for big).
        #[arg(long, requires = "tokens_per_step")]
        steps: Option<u64>,
    },
    /// Train a small model on a synthetic copy/reverse task and report held-out token accuracy.
    Synthetic {
        /// The task.
        #[arg(long, default_value = "reverse", value_parser = library_enum(&SyntheticTask::ALL, SyntheticTask::name))]
        task: SyntheticTask,
        /// Updates.
        #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..))]
        steps: u64,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Write the final checkpoint here (default: not saved).
        #[arg(long)]
        save: Option<PathBuf>,
    },
    /// Train a model with the paper's recipe from a TOML configuration; rerun to resume.
    Train {
        /// The run configuration (see configs/).
        #[arg(long)]
        config: PathBuf,
        /// Override a field: --set train.lr_scale=2 (repeatable).
        #[arg(long = "set")]
        overrides: Vec<String>,
        /// Stop cleanly, with a checkpoint, after this many minutes of training (default: the
        /// config's train.time_limit_minutes; no limit if it has none).
        #[arg(long)]
        time_limit: Option<f64>,
    },
    /// Translate sentences (stdin or --input) with a trained checkpoint; one line out per line in.
    Translate {
        #[command(flatten)]
        model: ModelArgs,
        /// Input file (plain or .gz; default: stdin).
        #[arg(long)]
        input: Option<PathBuf>,
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
    /// Translate a test set and score it: BLEU and chrF (sacreBLEU), tokenized BLEU, and
    /// perplexity. For a parsing model: parse it and score the trees with EVALB (COLLINS.prm).
    Evaluate {
        #[command(flatten)]
        model: ModelArgs,
        /// Source sentences (parsing: optional, the words of the gold trees by default).
        #[arg(long)]
        src: Option<PathBuf>,
        /// Reference translations, line-aligned; repeat for several references. Perplexity uses the
        /// first. Parsing: the gold trees (one file, bracketed, one tree per sentence).
        #[arg(long = "ref", required = true, num_args = 1..)]
        refs: Vec<PathBuf>,
        /// Also write the translations (parsing: the trees) here.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Translation: also report BLEU by source length in words (1–8, 9–12, 13–16, 17–24, 25+).
        #[arg(long)]
        by_length: bool,
        #[command(flatten)]
        search: SearchArgs,
        #[command(flatten)]
        parsing: ParsingArgs,
    },
    /// Parse sentences into constituency trees (§6.3): one sentence a line in, one bracketed tree a
    /// line out; beam 21, α 0.3, maximum length input + 300 unless overridden.
    Parse {
        /// The checkpoint of a parsing run.
        #[arg(long)]
        checkpoint: PathBuf,
        /// The vocabulary the checkpoint was trained with.
        #[arg(long)]
        bpe: PathBuf,
        /// Input file (plain or .gz; default: stdin), words separated by spaces (PTB tokens).
        #[arg(long)]
        input: Option<PathBuf>,
        /// The input is raw English text: split it into Penn Treebank tokens first.
        #[arg(long)]
        tokenize: bool,
        /// Arithmetic of the matrix products.
        #[arg(long, default_value = "f32", value_parser = library_enum(&Precision::ALL, Precision::name))]
        precision: Precision,
        #[command(flatten)]
        search: SearchArgs,
        #[command(flatten)]
        parsing: ParsingArgs,
        /// Print sentences/s and the number of outputs that needed repair on stderr.
        #[arg(long)]
        speed: bool,
    },
    /// Write the sentences and the preprocessed trees of a treebank (a bracketed file or a
    /// directory of .mrg files), one per line: the input of `parse` and the gold trees of
    /// `parse-eval`.
    Treebank {
        /// A bracketed file or a directory of .mrg files.
        #[arg(long)]
        input: PathBuf,
        /// Only the files FIRST..LAST by name (e.g. wsj_0175..wsj_0189).
        #[arg(long)]
        files: Option<String>,
        /// Write the sentences here (words separated by spaces).
        #[arg(long)]
        words: Option<PathBuf>,
        /// Write the trees here (bracketed, one per line).
        #[arg(long)]
        trees: Option<PathBuf>,
    },
    /// Attention heatmaps (PNG, like the paper's Figures 3–5) for one sentence: encoder
    /// self-attention (source × source), decoder self-attention (decoder input × decoder input) and
    /// encoder–decoder attention (rows: the token each decoder position predicts; columns: source).
    Attention {
        #[command(flatten)]
        model: ModelArgs,
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
        out: PathBuf,
    },
    /// Download corpora, verifying SHA-256 checksums.
    Data {
        #[command(subcommand)]
        which: DataCommand,
    },
    /// Binarise a parallel corpus (BPE ids, filtered) into memory-mappable files for training.
    Prepare {
        /// Source text (plain or .gz). Parsing: a treebank (a bracketed file or a directory of .mrg files).
        #[arg(long)]
        src: PathBuf,
        /// Target text, line-aligned with the source (not given for parsing).
        #[arg(long)]
        tgt: Option<PathBuf>,
        /// What the pairs are for: translation (two text files) or parsing (a treebank).
        #[arg(long, default_value = "translation", value_parser = library_enum(&Task::ALL, Task::name))]
        task: Task,
        /// Parsing: only the treebank files FIRST..LAST by name (e.g. wsj_0001..wsj_0159).
        #[arg(long)]
        files: Option<String>,
        /// The shared BPE model.
        #[arg(long)]
        bpe: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Longest side kept, in BPE tokens.
        #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
        max_tokens: u64,
        /// Largest length ratio kept (a finite number ≥ 1).
        #[arg(long, default_value_t = 3.0)]
        max_ratio: f64,
    },
    /// Average checkpoints element-wise (§6.1): the last K of a run directory, or explicit files.
    Average {
        /// Average the newest K checkpoints of DIR (§6.1: 5 for base models, 20 for big).
        #[arg(long, requires = "dir", value_parser = clap::value_parser!(u64).range(1..))]
        last: Option<u64>,
        /// The run directory (with --last).
        dir: Option<PathBuf>,
        /// Explicit checkpoint files instead of --last.
        #[arg(long = "inputs", num_args = 1.., conflicts_with = "last")]
        inputs: Vec<PathBuf>,
        /// Where to write the averaged checkpoint.
        #[arg(long)]
        output: PathBuf,
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
        refs: Vec<PathBuf>,
        /// Hypothesis file, line-aligned with the references.
        #[arg(long)]
        hyp: PathBuf,
        /// Tokenizer (13a is sacreBLEU's default, WMT).
        #[arg(long, default_value = "13a", value_parser = library_enum(&Tokenizer::ALL, Tokenizer::name))]
        tokenize: Tokenizer,
        /// Lowercase before scoring.
        #[arg(long)]
        lowercase: bool,
        /// BLEU smoothing.
        #[arg(long, default_value = "exp", value_parser = one_of(&Smooth::NAMES))]
        smooth: String,
        /// Value for floor (default 0.1) or add-k (default 1).
        #[arg(long)]
        smooth_value: Option<f64>,
        /// Metrics to print, comma-separated; tokenized-bleu is 13a tokens, no smoothing, as
        /// multi-bleu.perl (honours --lowercase, ignores --tokenize and --smooth).
        #[arg(long, default_value = "bleu", value_delimiter = ',', value_parser = library_enum(&Metric::ALL, Metric::name))]
        metrics: Vec<Metric>,
        /// Print only the number(s).
        #[arg(long)]
        score_only: bool,
    },
    /// Score parse trees: labeled bracketing exactly as EVALB with COLLINS.prm (its report, its
    /// error messages on stderr); unlike EVALB it never aborts on errors.
    ParseEval {
        /// Gold trees, one per line (EVALB's format).
        #[arg(long)]
        gold: PathBuf,
        /// Test (parser output) trees, line-aligned with the gold trees.
        #[arg(long)]
        test: PathBuf,
        /// Print only the summary (All and len<=40), not the per-sentence table.
        #[arg(long)]
        summary_only: bool,
    },
    /// Serve translations over HTTP: POST /translate (JSON), GET /health, GET /metrics
    /// (Prometheus), and a web page at / (docs/serve.md). Stops cleanly on SIGTERM or Ctrl-C.
    Serve(crate::serve::ServeArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
}

/// The model a decoding command loads, and how.
#[derive(Args)]
pub struct ModelArgs {
    /// The checkpoint (from `train` or `average`).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// The BPE model the checkpoint was trained with.
    #[arg(long)]
    pub bpe: PathBuf,
    /// What the model does (default: the task stored in the checkpoint).
    #[arg(long, value_parser = library_enum(&Task::ALL, Task::name))]
    pub task: Option<Task>,
    /// Arithmetic of the matrix products: f32, or bf16 operands with f32 sums (AMX or
    /// AVX512-BF16; the bf16-matmul departure).
    #[arg(long, default_value = "f32", value_parser = library_enum(&Precision::ALL, Precision::name))]
    pub precision: Precision,
    /// Run the decoder's products on the gemm crate instead of pre-packed panels (for A/B timing).
    #[arg(long)]
    pub no_pack: bool,
}

/// Parsing options of `parse` and `evaluate`.
#[derive(Args, Clone, Copy)]
pub struct ParsingArgs {
    /// Restrict the beam to sequences that can still become a valid tree over exactly the input
    /// words (a named deviation, docs/deviations.md).
    #[arg(long)]
    pub constrained: bool,
    /// Output `(TOP)` with a warning for a sentence longer than the model's positions, instead of
    /// stopping with an error (a sentence is never split).
    #[arg(long)]
    pub skip_long: bool,
}

/// Search and batching options shared by `translate`, `evaluate` and `parse`.
#[derive(Args)]
pub struct SearchArgs {
    /// Decoding preset: translation (beam 4, α 0.6, +50), parsing (beam 21, α 0.3, +300) or greedy
    /// (default: the model's task's).
    #[arg(long, value_parser = one_of(&BeamConfig::PRESETS))]
    pub preset: Option<String>,
    /// Beam size (overrides the preset; §6.1: 4 for translation, §6.3: 21 for parsing; 1 = greedy).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub beam: Option<u32>,
    /// Length-penalty exponent α, lp = ((5 + |Y|) / 6)^α (overrides the preset; §6.1: 0.6, §6.3: 0.3).
    #[arg(long)]
    pub alpha: Option<f64>,
    /// Maximum output length = a · source length + b: a (overrides the preset).
    #[arg(long)]
    pub max_len_a: Option<f64>,
    /// Maximum output length: b (overrides the preset; §6.1: 50, §6.3: 300).
    #[arg(long)]
    pub max_len_b: Option<usize>,
    /// Source tokens per batch, padding included.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,
    /// Sentences per batch.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_sentences: u32,
    /// Stop a sentence as soon as the best candidate of a step ends in EOS (CTranslate2's default),
    /// instead of when no live hypothesis can still win; faster, and may change the output.
    #[arg(long)]
    pub early_exit: bool,
}

#[derive(Subcommand)]
pub enum DataCommand {
    /// Multi30k task 1 raw text (train, val, test_2016_flickr; en, de, fr, cs).
    Multi30k {
        /// Where the verified files go.
        #[arg(long, default_value = "data/multi30k")]
        cache: PathBuf,
        /// Copy from this local mirror instead of downloading (default: $TRANSFORMER_MULTI30K_MIRROR if set).
        #[arg(long)]
        from: Option<PathBuf>,
        /// Download from this base URL.
        #[arg(long, default_value = transformer::data::download::MULTI30K_URL)]
        url: String,
    },
    /// The Penn Treebank sample (NLTK's corpora/treebank: wsj_0001-wsj_0199, combined .mrg trees;
    /// non-commercial use only, terms printed), each file verified by SHA-256, for
    /// configs/ptb-parse.toml and `quickstart --task parsing`. Without --from, --from-nltk-data or
    /// --url it looks in $TRANSFORMER_PTB_MIRROR, then in NLTK's data directories ($NLTK_DATA,
    /// ~/nltk_data, /usr/share/nltk_data, /usr/local/share/nltk_data, /usr/lib/nltk_data,
    /// /usr/local/lib/nltk_data), then downloads NLTK's treebank.zip.
    PtbSample {
        /// Where the verified files go.
        #[arg(long, default_value = transformer::data::ptb_sample::PTB_SAMPLE_DIR)]
        cache: PathBuf,
        /// Copy from a local mirror instead of downloading: a directory of .mrg files, or a
        /// treebank.zip.
        #[arg(long, conflicts_with_all = ["from_nltk_data", "url"])]
        from: Option<PathBuf>,
        /// Take it from this nltk_data directory (corpora/treebank/combined, or corpora/treebank.zip).
        #[arg(long, conflicts_with = "url")]
        from_nltk_data: Option<PathBuf>,
        /// Download treebank.zip from this URL [default: NLTK's,
        /// https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/treebank.zip].
        #[arg(long)]
        url: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum BpeCommand {
    /// Learn a joint vocabulary from source and target training text (plain or .gz files).
    Learn {
        /// Training text, one sentence a line (give both languages).
        #[arg(long = "input", required = true, num_args = 1..)]
        inputs: Vec<PathBuf>,
        /// Vocabulary size (e.g. 8000 for Multi30k; §5.1: about 37000 for WMT14 En-De, shared).
        #[arg(long)]
        vocab_size: usize,
        /// Pairs seen fewer times are not merged.
        #[arg(long, default_value_t = 2)]
        min_frequency: u64,
        /// Where to write the model (JSON).
        #[arg(long)]
        output: PathBuf,
    },
    /// Segment text into subword pieces (stdin, or --input), one line out per line in.
    Apply {
        /// The model from `bpe learn`.
        #[arg(long)]
        model: PathBuf,
        /// Input file (default: stdin).
        #[arg(long)]
        input: Option<PathBuf>,
    },
    /// Restore text from subword pieces (the inverse of `apply`).
    Decode {
        /// The model from `bpe learn`.
        #[arg(long)]
        model: PathBuf,
        /// Input file (default: stdin).
        #[arg(long)]
        input: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Iterate one epoch of batches of a prepared (binarised) corpus; reports time and peak RSS.
    DataIter {
        /// A directory from `transformer prepare`.
        #[arg(long)]
        data: PathBuf,
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
        /// Residual and embedding dropout of the benchmark model.
        #[arg(long, default_value_t = 0.1)]
        dropout: f32,
        /// Print one JSON line.
        #[arg(long)]
        json: bool,
    },
    /// Seconds per all-reduce (sum) of a flat f32 buffer over the workers of `mpirun -np N`
    /// (default: the base model's 63M gradients).
    #[cfg(feature = "mpi")]
    Allreduce {
        /// f32 values per all-reduce.
        #[arg(long, default_value_t = 63_000_000)]
        floats: usize,
        /// Timed repetitions (median reported).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
        reps: u32,
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
