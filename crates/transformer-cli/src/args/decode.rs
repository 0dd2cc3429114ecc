//! The arguments of the decoding verbs (`translate`, `score`, `evaluate`, `parse`, `attention`):
//! the model a verb loads and the search it runs, and how they become a [`Translator`] and its
//! [`DecodeOptions`].

use super::library_enum;
use crate::usage;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use transformer::decode::translator::{DecodeOptions, SessionOptions, Translator};
use transformer::decode::{BeamConfig, LengthNorm, Sampling, SearchOverrides, SearchPreset, Stop};
use transformer::model::DecoderKernels;
use transformer::{Precision, Task};

// The arguments of `transformer translate`.
#[derive(Args)]
pub struct TranslateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Input file (plain or .gz; default: stdin).
    #[arg(long)]
    pub input: Option<PathBuf>,
    #[command(flatten)]
    pub search: SearchArgs,
    #[command(flatten)]
    pub guide: GuideArgs,
    #[command(flatten)]
    pub align: AlignArgs,
    /// With --nbest N > 1: write N lines per sentence, `index ||| text ||| log P ||| score`
    /// (with --alignment: `index ||| text ||| alignment ||| log P ||| score`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub nbest: u32,
    /// Print sentences/s and tokens/s on stderr.
    #[arg(long)]
    pub speed: bool,
    /// Also print where the time went: matrix products (with their GFLOP/s), attention, layer
    /// norm, beam search, and the rest.
    #[arg(long)]
    pub profile: bool,
}

// The arguments of `transformer score`.
#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Source sentences (plain or .gz).
    #[arg(long)]
    pub src: PathBuf,
    /// Their translations to score, line-aligned with the sources (plain or .gz).
    #[arg(long = "ref")]
    pub refs: PathBuf,
    /// Print each score divided by its target tokens (EOS included) instead of the sum.
    #[arg(long)]
    pub per_token: bool,
    /// With --alignment: each pair's alignment after its score, `score ||| alignment` (forced
    /// alignment of given translations, as marian-scorer's --alignment).
    #[command(flatten)]
    pub align: AlignArgs,
}

// The arguments of `transformer evaluate`.
#[derive(Args)]
pub struct EvaluateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Source sentences (parsing: optional, the words of the gold trees by default).
    #[arg(long)]
    pub src: Option<PathBuf>,
    /// Reference translations, line-aligned; repeat for several references. Perplexity uses the
    /// first. Parsing: the gold trees (one file, bracketed, one tree per sentence).
    #[arg(long = "ref", required = true, num_args = 1..)]
    pub refs: Vec<PathBuf>,
    /// Also write the translations (parsing: the trees) here.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Translation: also report BLEU by source length in words (1–8, 9–12, 13–16, 17–24, 25+).
    #[arg(long)]
    pub by_length: bool,
    #[command(flatten)]
    pub search: SearchArgs,
    #[command(flatten)]
    pub guide: GuideArgs,
    #[command(flatten)]
    pub parsing: ParsingArgs,
}

// The arguments of `transformer parse`.
#[derive(Args)]
pub struct ParseArgs {
    /// The checkpoint of a parsing run. Repeat it for an ensemble (the models must share the
    /// vocabulary): their log-probabilities are averaged at every step of one beam search.
    #[arg(long, required = true)]
    pub checkpoint: Vec<PathBuf>,
    /// The tokenizer the checkpoint was trained with (alias --bpe, as for the other verbs; parsing
    /// needs a BPE vocabulary of ours, so an imported model's tokenizer is refused with a reason).
    #[arg(long = "tokenizer", visible_alias = "bpe")]
    pub tokenizer: PathBuf,
    /// Input file (plain or .gz; default: stdin), words separated by spaces (PTB tokens).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// The input is raw English text: split it into Penn Treebank tokens first.
    #[arg(long)]
    pub tokenize: bool,
    /// Arithmetic of the matrix products: f32, bf16 (AMX or AVX512-BF16) or int8 (weights
    /// quantised per row at load).
    #[arg(long, default_value = "f32", value_parser = library_enum(&Precision::ALL, Precision::name))]
    pub precision: Precision,
    #[command(flatten)]
    pub search: SearchArgs,
    #[command(flatten)]
    pub parsing: ParsingArgs,
    /// Print sentences/s and the number of outputs that needed repair on stderr.
    #[arg(long)]
    pub speed: bool,
}

// The arguments of `transformer attention`.
#[derive(Args)]
pub struct AttentionArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The source sentence.
    #[arg(long)]
    pub src: String,
    /// The target sentence fed to the decoder (default: the model's beam-4 translation).
    #[arg(long)]
    pub tgt: Option<String>,
    /// Only this layer (1-based; default: every layer).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub layer: Option<u32>,
    /// Only this head (1-based; default: every head).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub head: Option<u32>,
    /// Directory for the images.
    #[arg(long, default_value = "attention")]
    pub out: PathBuf,
}

/// The model a decoding command loads, and how.
#[derive(Args)]
pub struct ModelArgs {
    /// The checkpoint (from `train` or `average`). Repeat it for an ensemble: the models, which
    /// must share the vocabulary, decode together, their log-probabilities averaged at every step.
    #[arg(long, required = true)]
    pub checkpoint: Vec<PathBuf>,
    /// The tokenizer the checkpoint was trained with: our BPE model, or the tokenizer file of an
    /// imported model (`transformer import marian`; alias --bpe).
    #[arg(long = "tokenizer", visible_alias = "bpe")]
    pub tokenizer: PathBuf,
    /// What the model does (default: the task stored in the checkpoint).
    #[arg(long, value_parser = library_enum(&Task::ALL, Task::name))]
    pub task: Option<Task>,
    /// Arithmetic of the matrix products: f32; bf16 operands with f32 sums (AMX or AVX512-BF16;
    /// the bf16-matmul departure); or int8 weights (quantised per row at load) and activations
    /// (per row), exact integer sums (AVX-512 VNNI, AVX2 or scalar; the int8-decoding departure).
    #[arg(long, default_value = "f32", value_parser = library_enum(&Precision::ALL, Precision::name))]
    pub precision: Precision,
    /// Run the products on the weights as given (the gemm path) instead of the prepared panels and
    /// tiles (for A/B timing; int8 still reads its codes).
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
    /// `evaluate` only, with --constrained: force every leaf's tag to the gold tree's. Not a
    /// parser: it measures the most better tagging could buy.
    #[arg(long, requires = "constrained")]
    pub oracle_tags: bool,
}

/// What each output must hold (`translate` and `evaluate` of a translation model): files
/// line-aligned with the input, an empty line asking nothing.
#[derive(Args)]
pub struct GuideArgs {
    /// A target prefix a line: each output starts with its line's text, and the search goes on
    /// from it (fairseq's --prefix-size, Marian's --force-decode, CTranslate2's target_prefix).
    #[arg(long)]
    pub prefix: Option<PathBuf>,
    /// Phrases a line, separated by tabs: each output contains every phrase of its line
    /// (lexically constrained decoding by dynamic beam allocation, Post & Vilar 2018; fairseq's
    /// --constraints). A beam one larger than the phrases' tokens gives each count of tokens
    /// met its slot.
    #[arg(long)]
    pub constraints: Option<PathBuf>,
}

/// Word alignments after each translation (`translate`), read from encoder–decoder attention.
#[derive(Args)]
pub struct AlignArgs {
    /// Write each translation's alignment after it, `text ||| alignment`, as Marian's --alignment:
    /// `hard` (each target token's strongest source token, `s-t` pairs), `soft` (every weight,
    /// comma-separated per target token) or a threshold in (0, 1) (every pair above it).
    /// Positions are 0-based tokens, `</s>` left out.
    #[arg(long, value_parser = parse_alignment)]
    pub alignment: Option<transformer::decode::AlignmentKind>,
    /// The decoder layer whose encoder–decoder attention aligns, from 1 (default: the last).
    #[arg(long, requires = "alignment", value_parser = clap::value_parser!(u32).range(1..))]
    pub alignment_layer: Option<u32>,
    /// One head of that layer, from 1 (default: the mean of its heads).
    #[arg(long, requires = "alignment", value_parser = clap::value_parser!(u32).range(1..))]
    pub alignment_head: Option<u32>,
    /// Align space-separated words instead of subword tokens (a pair of words is aligned when their
    /// tokens are; soft: a target word's mean over its tokens of each source word's sum).
    #[arg(long, requires = "alignment")]
    pub alignment_words: bool,
}

fn parse_alignment(s: &str) -> std::result::Result<transformer::decode::AlignmentKind, String> {
    s.parse().map_err(|e: transformer::Error| e.to_string())
}

impl AlignArgs {
    /// The library's options, or `None` without --alignment.
    pub fn options(&self) -> Option<transformer::decode::AlignmentOptions> {
        self.alignment.map(|kind| transformer::decode::AlignmentOptions {
            kind,
            layer: self.alignment_layer.map(|l| l as usize),
            head: self.alignment_head.map(|h| h as usize),
            words: self.alignment_words,
        })
    }
}

/// Search and batching options shared by `translate`, `evaluate` and `parse`.
#[derive(Args)]
pub struct SearchArgs {
    /// Decoding preset: translation (beam 4, α 0.6, +50), parsing (beam 21, α 0.3, +300) or greedy
    /// (default: the model's task's).
    #[arg(long, value_parser = library_enum(&SearchPreset::ALL, SearchPreset::name))]
    pub preset: Option<SearchPreset>,
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
    /// Batches decoded at once, each on one thread (0: one per thread of `--threads`; 1: one
    /// batch at a time, its products split over the threads). They share `--max-tokens` and
    /// `--max-sentences` (smaller batches change scores only by float rounding).
    #[arg(long, default_value_t = 0)]
    pub workers: u32,
    /// Stop a sentence as soon as the best candidate of a step ends in EOS (CTranslate2's rule at
    /// length_penalty 0), instead of when no live hypothesis can still win; faster, and may change
    /// the output.
    #[arg(long, conflicts_with = "patience")]
    pub early_exit: bool,
    /// CTranslate2's beam search at this patience factor (its `patience`; Kasai et al. 2022): the
    /// beam stays full, a finished hypothesis's slot refilled from the next-best candidates, and a
    /// sentence ends once round(beam · P) hypotheses have finished. With --length-norm marian
    /// --alpha 1 --max-len-a 0 --max-len-b 256 --min-len 1, CTranslate2's `translate_batch`.
    #[arg(long)]
    pub patience: Option<f32>,
    /// When a sentence's search ends: exact (the default: when no live hypothesis can still win),
    /// early-exit (--early-exit), patience (CTranslate2's, --patience, 1 unless given), or
    /// transformers (`generate`'s with num_beams and early_stopping=False: the beam kept full, the
    /// beam best finished kept, until the best live one divided by its length so far to the α
    /// cannot beat them; with --length-norm marian --alpha 1, `generate(length_penalty=1)`).
    #[arg(long, value_parser = Stop::NAMES, conflicts_with = "early_exit")]
    pub stop: Option<String>,
    /// The length penalty's form: gnmt, ((5 + |Y|) / 6)^α (the paper's), or marian, |Y|^α
    /// (Marian's `--normalize α` and CTranslate2's `length_penalty`, |Y| counting the EOS; with
    /// --suppress-unk --beam 4 --nbest 4 --max-len-a 3 --max-len-b 0, Marian's own n-best lists).
    #[arg(long, value_parser = library_enum(&LengthNorm::ALL, LengthNorm::name))]
    pub length_norm: Option<LengthNorm>,
    /// Never write UNK (Marian's decoder does this unless given --allow-unk).
    #[arg(long)]
    pub suppress_unk: bool,
    /// The length limit as CTranslate2 (its `max_decoding_length`) and Marian count it: in
    /// decoding steps, the EOS's among them, the last step ending each hypothesis as it stands (no
    /// EOS forced, none scored). Without it, up to the limit's tokens, then a forced EOS.
    #[arg(long)]
    pub end_at_limit: bool,
    /// No EOS before this many output tokens (CTranslate2's min_decoding_length; fairseq's
    /// --min-len). Default 0: none.
    #[arg(long, default_value_t = 0)]
    pub min_len: usize,
    /// Divide the logit of every token already written by this when positive, multiply when
    /// negative (CTranslate2's repetition_penalty; > 1 penalises). Default 1: none.
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    /// Never write the same n-gram of this size twice (fairseq's and CTranslate2's
    /// no_repeat_ngram_size). Default 0: none.
    #[arg(long, default_value_t = 0)]
    pub no_repeat_ngram_size: usize,
    /// Sample each output token instead of searching (for back-translation; fairseq's
    /// --sampling): --nbest N draws N samples a sentence, the same for the same --seed on any
    /// thread count.
    #[arg(long)]
    pub sampling: bool,
    /// With --sampling: draw among the K most likely tokens (0: all).
    #[arg(long, default_value_t = 0, requires = "sampling")]
    pub sampling_topk: usize,
    /// With --sampling: then among the fewest most likely whose probability reaches P (1: all).
    #[arg(long, default_value_t = 1.0, requires = "sampling")]
    pub sampling_topp: f32,
    /// With --sampling: divide the logits by T (towards 0, greedy search).
    #[arg(long, default_value_t = 1.0, requires = "sampling")]
    pub temperature: f32,
    /// With --sampling: the draws' seed.
    #[arg(long, default_value_t = 0, requires = "sampling")]
    pub seed: u64,
    /// Compute the output layer only over the target tokens this file lists for each batch's
    /// source tokens, and its most frequent ones (a table from `transformer shortlist`; Marian's
    /// --shortlist, CTranslate2's use_vmap): faster, and may change the output.
    #[arg(long)]
    pub shortlist: Option<PathBuf>,
}

impl ModelArgs {
    /// The translator session these arguments name, for --task or else the task stored in the
    /// (first) checkpoint's header.
    pub(crate) fn load(&self) -> Result<Translator> {
        let task = match self.task {
            Some(t) => t,
            None => transformer::checkpoint::read_header(&self.checkpoint[0])?.task()?,
        };
        let options = SessionOptions {
            precision: self.precision,
            kernels: if self.no_pack { DecoderKernels::Gemm } else { DecoderKernels::Packed },
            task,
            ..Default::default()
        };
        Ok(Translator::load_ensemble(&self.checkpoint, &self.tokenizer, options)?)
    }

    /// The session and the options of its search (`search`, `nbest`), built for the session's
    /// task. The flags are checked first, before any file is read, so that a bad one is a usage
    /// error (exit 2) even when a file is missing; with no --task that check takes translation's
    /// preset, the model's task being known only from its checkpoint.
    pub(crate) fn load_with(&self, search: &SearchArgs, nbest: usize) -> Result<(Translator, DecodeOptions)> {
        search.options(nbest, self.task.unwrap_or_default())?;
        let mut translator = self.load()?;
        let opts = search.options(nbest, translator.task())?;
        if let Some(path) = &search.shortlist {
            translator.load_shortlist(path)?;
        }
        Ok((translator, opts))
    }
}

impl SearchArgs {
    /// The search and batching options, from the preset (default: `task`'s) and the overrides.
    pub(crate) fn options(&self, nbest: usize, task: Task) -> Result<DecodeOptions> {
        let preset = match &self.preset {
            Some(p) => p.config(),
            None => BeamConfig::for_task(task),
        };
        let stop = match Stop::parse(self.stop.as_deref().or(self.early_exit.then_some("early-exit")), self.patience) {
            Ok(stop) => stop,
            Err(e) => usage!("{e}"),
        };
        let overrides = SearchOverrides {
            beam: self.beam.map(|b| b as usize),
            alpha: self.alpha,
            max_len_a: self.max_len_a,
            max_len_b: self.max_len_b,
            nbest: Some(nbest),
            stop: Some(stop.unwrap_or(Stop::Exact)),
            length_norm: self.length_norm,
            suppress_unk: Some(self.suppress_unk),
            end_at_limit: self.end_at_limit.then_some(true),
            min_len: Some(self.min_len),
            repetition_penalty: Some(self.repetition_penalty),
            no_repeat_ngram: Some(self.no_repeat_ngram_size),
            sampling: self.sampling.then_some(Sampling {
                topk: self.sampling_topk,
                topp: self.sampling_topp,
                temperature: self.temperature,
                seed: self.seed,
            }),
        };
        // Sampling: --nbest N is N samples, each a row of its own.
        let overrides = match overrides.sampling {
            Some(_) => SearchOverrides { beam: Some(nbest), ..overrides },
            None => overrides,
        };
        let search = match preset.with(&overrides) {
            Ok(s) => s,
            // Out-of-range flags: a usage error (exit 2), named after the flag.
            Err(e) => usage!(
                "{}",
                e.to_string().replace("the beam size must", "--beam must").replace("max_len_", "--max-len-")
            ),
        };
        Ok(DecodeOptions {
            search,
            max_tokens: self.max_tokens as usize,
            max_sentences: self.max_sentences as usize,
            workers: self.workers as usize,
            use_shortlist: self.shortlist.is_some(),
        })
    }
}
