//! The command line: clap types only. Choices that name library values (presets, tasks,
//! precisions, tokenizers, smoothings, metrics) are parsed against the library's own lists, so
//! `--help` shows them and a typo is a usage error that names them.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use transformer::config::{Preset, PAPER_VOCAB};
use transformer::data::trees::TreeFormat;
use transformer::eval::bleu::Smooth;
use transformer::eval::tokenize::Tokenizer;
use transformer::eval::Metric;
use transformer::synthetic::SyntheticTask;
use transformer::Task;

mod decode;
pub use decode::{
    AlignArgs, AttentionArgs, EvaluateArgs, GuideArgs, ModelArgs, ParseArgs, ParsingArgs, ScoreArgs, TranslateArgs,
};

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
    Quickstart(QuickstartArgs),
    /// Table 3 at this machine's scale: train the quick start's model and each chosen row's
    /// variation of it (applied in proportion) on Multi30k En→De with the same budget, data order
    /// and seed, score each on the dev set, and write a table beside the paper's; rerun to resume.
    Ablate(AblateArgs),
    /// Print the exact parameter count of a Table 3 preset (or all presets with --all).
    Params(ParamsArgs),
    /// Train a small model on a synthetic copy/reverse task and report held-out token accuracy.
    Synthetic(SyntheticArgs),
    /// Train a model with the paper's recipe from a TOML configuration; rerun to resume.
    Train(TrainArgs),
    /// Translate sentences (stdin or --input) with a trained checkpoint; one line out per line in.
    Translate(TranslateArgs),
    /// Translate a test set and score it: BLEU and chrF (sacreBLEU), tokenized BLEU, and
    /// perplexity. For a parsing model: parse it and score the trees with EVALB (COLLINS.prm).
    Evaluate(EvaluateArgs),
    /// Score given translations: each pair's log-probability under the model, Σ log p(token)
    /// (natural log, EOS included, teacher-forced), one number a line, as Marian's `score` prints
    /// them; for reranking, filtering, or checking a model against another toolkit. With a parsing
    /// model, --ref holds bracketed trees (one per sentence), scored as the model writes them.
    Score(ScoreArgs),
    /// Parse sentences into constituency trees (§6.3): one sentence a line in, one bracketed tree a
    /// line out; beam 21, α 0.3, maximum length input + 300 unless overridden.
    Parse(ParseArgs),
    /// Write the sentences and the preprocessed trees of a treebank (a bracketed file or a
    /// directory of .mrg files), one per line: the input of `parse` and the gold trees of
    /// `parse-eval`.
    Treebank(TreebankArgs),
    /// Attention heatmaps (PNG, like the paper's Figures 3–5) for one sentence: encoder
    /// self-attention (source × source), decoder self-attention (decoder input × decoder input) and
    /// encoder–decoder attention (rows: the token each decoder position predicts; columns: source).
    Attention(AttentionArgs),
    /// Download corpora, verifying SHA-256 checksums.
    Data(DataArgs),
    /// Binarise a parallel corpus (BPE ids, filtered) into memory-mappable files for training.
    Prepare(PrepareArgs),
    /// Average checkpoints element-wise (§6.1): the last K of a run directory, or explicit files.
    Average(AverageArgs),
    /// Write an int8 checkpoint: every linear map's weights quantised per row (as `--precision
    /// int8` does at load), so it loads without quantising; it decodes only, at int8.
    Quantize(QuantizeArgs),
    /// Import a model trained elsewhere: `import marian DIR --output OUT` reads a Hugging Face
    /// MarianMTModel directory (OPUS-MT) or a native Marian model (model.npz, decoder.yml,
    /// vocabularies) and writes OUT/model.safetensors and OUT/tokenizer.json, which every verb
    /// takes as --checkpoint and --tokenizer (or --bpe).
    Import(ImportArgs),
    /// Write a model out in another toolkit's format: `export marian MODEL --output DIR` (MODEL:
    /// the directory `import` wrote, or a checkpoint with --tokenizer T) writes a native Marian
    /// model (model.npz, decoder.yml, the .spm or .yml vocabularies) of an imported model,
    /// fine-tuned here or not.
    Export(ExportArgs),
    /// Byte-pair encoding: learn one shared vocabulary, apply it, restore text.
    Bpe(BpeArgs),
    /// Score translations: corpus BLEU and/or chrF exactly as sacreBLEU 2.x computes them.
    Bleu(BleuArgs),
    /// Score parse trees: labeled bracketing exactly as EVALB with COLLINS.prm (its report, its
    /// error messages on stderr); unlike EVALB it never aborts on errors.
    ParseEval(ParseEvalArgs),
    /// Score word alignments: the alignment error rate (Och & Ney 2003) of `s-t` links (as
    /// `translate --alignment` or `score --alignment` write them) against reference links, `s-t`
    /// sure and `s?t` possible.
    Aer(AerArgs),
    /// Learn a vocabulary shortlist from training text (Marian's --shortlist, CTranslate2's
    /// vocabulary map): for each source token its most co-occurring target tokens, and the most
    /// frequent targets (decode/shortlist.rs; decoding with it is not built yet).
    Shortlist(ShortlistArgs),
    /// Serve translations over HTTP: POST /translate (JSON), GET /health, GET /metrics
    /// (Prometheus), and a web page at / (docs/serve.md). Stops cleanly on SIGTERM or Ctrl-C.
    Serve(crate::serve::ServeArgs),
    /// Benchmarks.
    Bench(BenchArgs),
}

// The arguments of `transformer ablate`.
#[derive(Debug, Args)]
pub struct AblateArgs {
    /// Table 3 rows: groups A–E (every row of the group) and/or rows a1–a4, b1, b2, c1–c7, d1–d4,
    /// e; base is always trained.
    #[arg(long, default_value = "A,B,D,E")]
    pub rows: String,
    /// Training minutes per row (wall clock) [default: 5].
    #[arg(long, conflicts_with = "updates")]
    pub minutes: Option<f64>,
    /// Updates per row instead of minutes (the paper's way: every Table 3 row trained 100K steps).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub updates: Option<u64>,
    /// Seeds per row: with more than one, mean and spread, and differences within the spread
    /// marked as not significant.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// Where everything goes (runs, table.md, table.csv, bleu.svg); an ablation there is resumed.
    #[arg(long, default_value = "ablation")]
    pub output: PathBuf,
    /// Score only the first N dev (val) sentences [default: all 1,014].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub dev_sentences: Option<u64>,
    /// Checkpoints averaged for scoring (the last ones; §6.1: 5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub average: u64,
    /// Override a field of the base recipe (configs/multi30k-en-de.toml), before the rows are
    /// scaled from it: --set model.d_model=512 (repeatable).
    #[arg(long = "set", value_name = "SECTION.FIELD=VALUE")]
    pub overrides: Vec<String>,
}

// The arguments of `transformer quickstart`.
#[derive(Args)]
pub struct QuickstartArgs {
    /// What to train: translation (Multi30k) or parsing (configs/ptb-parse.toml on a treebank).
    #[arg(long, default_value = "translation", value_parser = library_enum(&Task::ALL, Task::name))]
    pub task: Task,
    /// Training budget in minutes (the recipe of configs/multi30k-en-de.toml, §5, or of
    /// configs/ptb-parse.toml; checkpoints every minutes/20).
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Where everything goes; an existing run there is resumed [default: quickstart, or
    /// quickstart-parsing with --task parsing].
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Source language: en or de are built in; fr and cs need `transformer data multi30k`
    /// [default: en].
    #[arg(long, value_parser = ["en", "de", "fr", "cs"])]
    pub src: Option<String>,
    /// Target language [default: de].
    #[arg(long, value_parser = ["en", "de", "fr", "cs"])]
    pub tgt: Option<String>,
    /// Where `transformer data multi30k` put the files, for languages that are not built in
    /// [default: data/multi30k].
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Parsing: the treebank, a directory searched for .mrg files (`transformer data
    /// ptb-sample` puts the sample in data/ptb-sample; or your own WSJ copy) [default:
    /// data/ptb-sample].
    #[arg(long)]
    pub treebank: Option<PathBuf>,
    /// Parsing: the files to train on, FIRST..LAST by name [default: wsj_0001..wsj_0159; for
    /// the full WSJ, sections 02-21: wsj_0200..wsj_2199].
    #[arg(long)]
    pub train_files: Option<String>,
    /// Parsing: the validation files, which pick the best checkpoint by F1 [default:
    /// wsj_0160..wsj_0174; full WSJ section 22: wsj_2200..wsj_2299].
    #[arg(long)]
    pub valid_files: Option<String>,
    /// Parsing: the test files, parsed and scored at the end [default: wsj_0175..wsj_0189; full
    /// WSJ section 23: wsj_2300..wsj_2399].
    #[arg(long)]
    pub test_files: Option<String>,
    /// Score only the first N test sentences (for a quick smoke test; the score is then not
    /// comparable).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub test_sentences: Option<u64>,
    /// Validation perplexity every N updates (and at every epoch's end).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    pub valid_steps: u64,
}

// The arguments of `transformer params`.
#[derive(Args)]
pub struct ParamsArgs {
    /// A Table 3 row.
    #[arg(long, default_value = "base", value_parser = library_enum(&Preset::ALL, Preset::name))]
    pub preset: Preset,
    /// Shared vocabulary size.
    #[arg(long, default_value_t = PAPER_VOCAB)]
    pub vocab: usize,
    /// Every preset, one per line.
    #[arg(long)]
    pub all: bool,
    /// Machine-readable JSON output.
    #[arg(long)]
    pub json: bool,
    /// Also print the compute cost (Table 2's column, computed): forward multiply-adds per
    /// source and target token, a training step's (3× forward), and with --tokens-per-step and
    /// --steps the training cost in FLOPs (2 per multiply-add), beside the paper's figure for
    /// base and big. Formulas: docs/cost.md.
    #[arg(long)]
    pub cost: bool,
    /// Source sentence length assumed for the attention products (they grow with it).
    #[arg(long, default_value_t = 25, requires = "cost")]
    pub src_len: u64,
    /// Target sentence length assumed for the attention products.
    #[arg(long, default_value_t = 25, requires = "cost")]
    pub tgt_len: u64,
    /// Source tokens per update, and as many target tokens (§5.1: about 25000 each).
    #[arg(long, requires = "cost")]
    pub tokens_per_step: Option<u64>,
    /// Updates (§5.2: 100000 for base, 300000 for big).
    #[arg(long, requires = "tokens_per_step")]
    pub steps: Option<u64>,
}

// The arguments of `transformer synthetic`.
#[derive(Args)]
pub struct SyntheticArgs {
    /// The task.
    #[arg(long, default_value = "reverse", value_parser = library_enum(&SyntheticTask::ALL, SyntheticTask::name))]
    pub task: SyntheticTask,
    /// Updates.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the final checkpoint here (default: not saved).
    #[arg(long)]
    pub save: Option<PathBuf>,
}

// The arguments of `transformer train`.
#[derive(Args)]
pub struct TrainArgs {
    /// The run configuration (see configs/).
    #[arg(long)]
    pub config: PathBuf,
    /// Override a field: --set train.lr_scale=2 (repeatable).
    #[arg(long = "set")]
    pub overrides: Vec<String>,
    /// Stop cleanly, with a checkpoint, after this many minutes of training (default: the
    /// config's train.time_limit_minutes; no limit if it has none).
    #[arg(long)]
    pub time_limit: Option<f64>,
    /// Fine-tune: start from this checkpoint's weights when the run has no checkpoint of its own
    /// (train.init; the same model and vocabulary; a fresh schedule and Adam moments unless
    /// train.init_optimizer=true).
    #[arg(long)]
    pub init: Option<PathBuf>,
}

// The arguments of `transformer treebank`.
#[derive(Args)]
pub struct TreebankArgs {
    /// A bracketed file or a directory of .mrg files.
    #[arg(long)]
    pub input: PathBuf,
    /// Only the files FIRST..LAST by name (e.g. wsj_0175..wsj_0189).
    #[arg(long)]
    pub files: Option<String>,
    /// Write the sentences here (words separated by spaces).
    #[arg(long)]
    pub words: Option<PathBuf>,
    /// Write the trees here (bracketed, one per line).
    #[arg(long)]
    pub trees: Option<PathBuf>,
}

// The arguments of `transformer data`.
#[derive(Args)]
pub struct DataArgs {
    #[command(subcommand)]
    pub which: DataCommand,
}

// The arguments of `transformer prepare`.
#[derive(Args)]
pub struct PrepareArgs {
    /// Source text (plain or .gz). Parsing: a treebank (a bracketed file or a directory of .mrg files).
    #[arg(long)]
    pub src: PathBuf,
    /// Target text, line-aligned with the source (not given for parsing).
    #[arg(long)]
    pub tgt: Option<PathBuf>,
    /// What the pairs are for: translation (two text files) or parsing (a treebank).
    #[arg(long, default_value = "translation", value_parser = library_enum(&Task::ALL, Task::name))]
    pub task: Task,
    /// Parsing: only the treebank files FIRST..LAST by name (e.g. wsj_0001..wsj_0159).
    #[arg(long)]
    pub files: Option<String>,
    /// Parsing: how the trees are written, `tags+words` or `tags` (as the run's data.tree_format).
    #[arg(long, default_value = "tags+words", value_parser = library_enum(&TreeFormat::ALL, TreeFormat::name))]
    pub tree_format: TreeFormat,
    /// The tokenizer: the shared BPE model, or an imported model's tokenizer.json (`transformer
    /// import marian`; translation only) to fine-tune it on the prepared data (alias --bpe).
    #[arg(long = "tokenizer", visible_alias = "bpe")]
    pub tokenizer: PathBuf,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Longest side kept, in BPE tokens.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    pub max_tokens: u64,
    /// Largest length ratio kept (a finite number ≥ 1).
    #[arg(long, default_value_t = 3.0)]
    pub max_ratio: f64,
}

// The arguments of `transformer average`.
#[derive(Args)]
pub struct AverageArgs {
    /// Average the newest K checkpoints of DIR (§6.1: 5 for base models, 20 for big).
    #[arg(long, requires = "dir", value_parser = clap::value_parser!(u64).range(1..))]
    pub last: Option<u64>,
    /// The run directory (with --last).
    pub dir: Option<PathBuf>,
    /// Explicit checkpoint files instead of --last.
    #[arg(long = "inputs", num_args = 1.., conflicts_with = "last")]
    pub inputs: Vec<PathBuf>,
    /// Where to write the averaged checkpoint.
    #[arg(long)]
    pub output: PathBuf,
}

// The arguments of `transformer quantize`.
#[derive(Args)]
pub struct QuantizeArgs {
    /// The f32 checkpoint (from `train` or `average`).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Where to write the int8 checkpoint.
    #[arg(long)]
    pub output: PathBuf,
}

// The arguments of `transformer import`.
#[derive(Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    pub which: ImportCommand,
}

#[derive(Subcommand)]
pub enum ImportCommand {
    /// A Marian / OPUS-MT model: a Hugging Face directory (config.json, model.safetensors or
    /// pytorch_model.bin, source.spm, target.spm, vocab.json, tokenizer_config.json) or a native
    /// one (model.npz with decoder.yml, .yml or .spm vocabularies, source.spm and target.spm).
    Marian {
        /// The model's directory.
        dir: PathBuf,
        /// Where to write model.safetensors and tokenizer.json (created if needed).
        #[arg(long)]
        output: PathBuf,
    },
    /// A CTranslate2 Transformer directory (model.bin, config.json, the vocabularies), as its
    /// converters write it from OPUS-MT, Marian, `transformers` or `export ct2`, with float32,
    /// float16, bfloat16, int8 or int16 weights (read as f32). Its tokens need their tokenizer: the
    /// transformer_tokenizer.json `export ct2` writes, or SentencePiece models in the directory
    /// (source.spm and target.spm, or one .spm) or given with --spm.
    Ct2 {
        /// The model's directory.
        dir: PathBuf,
        /// The SentencePiece models the tokens were cut with: one for both sides, or source then
        /// target.
        #[arg(long, num_args = 1..=2)]
        spm: Vec<PathBuf>,
        /// Where to write model.safetensors and tokenizer.json (created if needed).
        #[arg(long)]
        output: PathBuf,
    },
}

// The arguments of `transformer export`.
#[derive(Args)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub which: ExportCommand,
}

#[derive(Subcommand)]
pub enum ExportCommand {
    /// A native Marian model, for `marian-decoder -c DIR/decoder.yml`: the model must have
    /// Marian's options and an imported tokenizer (anything else is refused by name). Its
    /// vocabularies are the .spm files where the ids are theirs, else .yml lists beside source.spm
    /// and target.spm (an OPUS-MT release's layout: Marian then reads text cut into pieces).
    Marian {
        /// The model: a directory `transformer import marian` wrote (its model.safetensors and
        /// tokenizer.json), or a checkpoint file (imported, or fine-tuned from an imported one)
        /// with --tokenizer.
        #[arg(required_unless_present = "checkpoint", conflicts_with = "checkpoint")]
        model: Option<PathBuf>,
        /// The checkpoint, instead of MODEL.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Its tokenizer.json (`transformer import marian`; alias --bpe); for a MODEL directory,
        /// its tokenizer.json unless given.
        #[arg(long, visible_alias = "bpe")]
        tokenizer: Option<PathBuf>,
        /// The directory to write (created; it must not hold a model already).
        #[arg(long)]
        output: PathBuf,
        /// Write the model for what the receiving tool fixes itself, changing its function
        /// slightly: Marian's sinusoid frequencies and the port's differ (divisor d/2 − 1 against
        /// d/2), and so do their LayerNorm ε (1e-6, 1e-5). `transformers`' own Marian converter does
        /// this to every OPUS-MT model. Without it, such a model is refused by name.
        #[arg(long)]
        tool_defaults: bool,
    },
    /// A Hugging Face MarianMTModel directory, for `MarianMTModel.from_pretrained(DIR)`:
    /// config.json, model.safetensors (the port's names, final_logits_bias; the paper's
    /// interleaved sinusoids turned into the port's halves by renaming the model dimension, so the
    /// model computes the same function), generation_config.json, tokenizer.json (ours, which
    /// `PreTrainedTokenizerFast` loads) and tokenizer_config.json; or a model imported from a
    /// Hugging Face directory, fine-tuned or not, with its own vocab.json and SentencePiece models.
    /// What MarianConfig cannot state is refused by name.
    Hf {
        /// The model: a model directory, or a checkpoint file with --tokenizer.
        #[arg(required_unless_present = "checkpoint", conflicts_with = "checkpoint")]
        model: Option<PathBuf>,
        /// The checkpoint, instead of MODEL.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Its tokenizer (bpe.json, or the tokenizer.json of an import; alias --bpe).
        #[arg(long, visible_alias = "bpe")]
        tokenizer: Option<PathBuf>,
        /// The directory to write (created; it must not hold a model already).
        #[arg(long)]
        output: PathBuf,
        /// Write the model for what the receiving tool fixes itself, changing its function
        /// slightly: Marian's sinusoid frequencies and the port's differ (divisor d/2 − 1 against
        /// d/2), and so do their LayerNorm ε (1e-6, 1e-5). `transformers`' own Marian converter does
        /// this to every OPUS-MT model. Without it, such a model is refused by name.
        #[arg(long)]
        tool_defaults: bool,
    },
    /// A CTranslate2 model directory, for `ctranslate2.Translator(DIR)`: model.bin (a post-norm
    /// TransformerSpec with CTranslate2's variable names and aliases), config.json, the
    /// vocabularies as JSON token lists (our pieces by id), and transformer_tokenizer.json (ours,
    /// which CTranslate2 ignores and `import ct2` reads back). Any model of ours or imported;
    /// parsing models and heads narrower than d_model / heads are refused by name.
    Ct2 {
        /// The model: a directory with model.safetensors and tokenizer.json, or a checkpoint file
        /// with --tokenizer.
        #[arg(required_unless_present = "checkpoint", conflicts_with = "checkpoint")]
        model: Option<PathBuf>,
        /// The checkpoint, instead of MODEL.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Its tokenizer (bpe.json, or the tokenizer.json of an import; alias --bpe).
        #[arg(long, visible_alias = "bpe")]
        tokenizer: Option<PathBuf>,
        /// The weights' type: float32, or int8 (CTranslate2's own per-row quantization of the
        /// linear and embedding weights, from the f32 weights).
        #[arg(long, default_value = "float32", value_parser = ["float32", "int8"])]
        quantization: String,
        /// The directory to write (created; it must not hold a model already).
        #[arg(long)]
        output: PathBuf,
    },
}

// The arguments of `transformer bpe`.
#[derive(Args)]
pub struct BpeArgs {
    #[command(subcommand)]
    pub which: BpeCommand,
}

// The arguments of `transformer bleu`.
#[derive(Args)]
pub struct BleuArgs {
    /// Reference file (one sentence a line); repeat for multiple references.
    #[arg(long = "ref", required = true, num_args = 1..)]
    pub refs: Vec<PathBuf>,
    /// Hypothesis file, line-aligned with the references.
    #[arg(long)]
    pub hyp: PathBuf,
    /// Tokenizer (13a is sacreBLEU's default, WMT).
    #[arg(long, default_value = "13a", value_parser = library_enum(&Tokenizer::ALL, Tokenizer::name))]
    pub tokenize: Tokenizer,
    /// Lowercase before scoring.
    #[arg(long)]
    pub lowercase: bool,
    /// BLEU smoothing.
    #[arg(long, default_value = "exp", value_parser = one_of(&Smooth::NAMES))]
    pub smooth: String,
    /// Value for floor (default 0.1) or add-k (default 1).
    #[arg(long)]
    pub smooth_value: Option<f64>,
    /// Metrics to print, comma-separated; tokenized-bleu is 13a tokens, no smoothing, as
    /// multi-bleu.perl (honours --lowercase, ignores --tokenize and --smooth).
    #[arg(long, default_value = "bleu", value_delimiter = ',', value_parser = library_enum(&Metric::ALL, Metric::name))]
    pub metrics: Vec<Metric>,
    /// Print only the number(s).
    #[arg(long)]
    pub score_only: bool,
}

// The arguments of `transformer parse-eval`.
#[derive(Args)]
pub struct ParseEvalArgs {
    /// Gold trees, one per line (EVALB's format).
    #[arg(long)]
    pub gold: PathBuf,
    /// Test (parser output) trees, line-aligned with the gold trees.
    #[arg(long)]
    pub test: PathBuf,
    /// Print only the summary (All and len<=40), not the per-sentence table.
    #[arg(long)]
    pub summary_only: bool,
}

// The arguments of `transformer aer`.
#[derive(Args)]
pub struct AerArgs {
    /// Reference alignments, a line a sentence pair (`s-t` sure, `s?t` possible links).
    #[arg(long = "ref")]
    pub reference: PathBuf,
    /// Hypothesis alignments, line-aligned (a `text ||| links` line is read after its last ` ||| `).
    #[arg(long)]
    pub hyp: PathBuf,
}

// The arguments of `transformer shortlist`.
#[derive(Args)]
pub struct ShortlistArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Training sources (plain or .gz).
    #[arg(long)]
    pub src: PathBuf,
    /// Their translations, line-aligned.
    #[arg(long)]
    pub tgt: PathBuf,
    /// Targets kept per source token.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub per_source: u32,
    /// The most frequent targets, always in.
    #[arg(long, default_value_t = 100)]
    pub frequent: u32,
    /// Where the table goes (JSON).
    #[arg(long)]
    pub output: PathBuf,
    /// Also write the table as CTranslate2's vocabulary map (`vmap.txt`: a line a source piece,
    /// a tab, its target pieces; the frequent ones under the empty key), for its use_vmap.
    #[arg(long)]
    pub ct2_vmap: Option<PathBuf>,
}

// The arguments of `transformer bench`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: BenchCommand,
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
    /// Unlabeled news-domain English for silver trees (§6.3's semi-supervised setting): NLTK's ABC
    /// (2006 rural and science news) and Brown corpora, each archive verified by SHA-256, sentence-split
    /// and tokenized as the Penn Treebank is, one sentence a line in DIR/abc.txt and DIR/brown.txt.
    /// Without --from-nltk-data it looks in NLTK's data directories ($NLTK_DATA, ~/nltk_data,
    /// /usr/share/nltk_data, ...), then downloads NLTK's abc.zip and brown.zip.
    NewsText {
        /// Where the sentence files go.
        #[arg(long, default_value = transformer::data::news_text::NEWS_TEXT_DIR)]
        cache: PathBuf,
        /// Take the archives from this nltk_data directory (corpora/abc.zip, corpora/brown.zip).
        #[arg(long)]
        from_nltk_data: Option<PathBuf>,
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
        /// Time the quick start's model instead (configs/multi30k-en-de.toml: 3+3 layers, d_model
        /// 256, FFN 1024, 4 heads) on 256 sentences of 16 + 16 positions (its 4,096-token batch).
        #[arg(long)]
        quickstart: bool,
        /// Also break the matrix products down by shape: calls, time, packing time and GFLOP/s.
        #[arg(long)]
        profile: bool,
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
