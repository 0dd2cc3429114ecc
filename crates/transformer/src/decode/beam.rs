//! §6.1 Beam search, batched over sentences, with the GNMT length penalty
//! lp(Y) = ((5 + |Y|) / 6)^α (Wu et al. 2016), as the paper uses (beam 4, α = 0.6, maximum output
//! length = input length + 50; for parsing beam 21, α = 0.3, input length + 300).
//!
//! The search, per sentence:
//! - Each sentence has `beam` slots. Every step extends its live hypotheses by every token (never
//!   PAD or BOS) and ranks the candidates by log-probability Σ log p. The best candidates fill the
//!   free slots: one that ends in EOS is finished and keeps its slot for good (it is scored
//!   log P / lp(|Y|), where |Y| counts the output tokens and the EOS), the others stay live. So the
//!   beam shrinks as hypotheses finish, and beam 1 is exactly greedy search.
//! - At the maximum length the only allowed token is EOS, so every live hypothesis finishes.
//! - Early termination: a sentence stops once it has `nbest` finished hypotheses and the `nbest`-th
//!   best of them scores at least the best any live hypothesis could still reach. With α ≥ 0 and
//!   log P only falling as a hypothesis grows, that bound is log P / lp(maximum |Y|). Stopping early
//!   therefore never changes the result.
//! - [`Stop::BestEnds`] (`--early-exit`, off by default) stops a sentence sooner: as soon as the
//!   best candidate of a step ends in EOS and `nbest` hypotheses have finished. It saves steps, and
//!   may return a different (lower-scoring) hypothesis than the exact search.
//! - [`Stop::Patience`] (`--patience P`) is CTranslate2's beam search instead: the beam stays full,
//!   the slot of a hypothesis that finishes going to the next-best unfinished candidate among the
//!   step's 2·beam best, and a sentence ends once round(beam·P) hypotheses have finished (Kasai et
//!   al. 2022's patience factor; with α 0, once the best candidate of some step has ended and
//!   `nbest` have finished). Only an EOS among the step's `beam` best candidates finishes.
//! - [`Stop::Transformers`] (`--stop transformers`) is `transformers`' `generate` (`num_beams`,
//!   `early_stopping=False`): the same full beam, the `beam` best finished hypotheses kept, and a
//!   sentence ending once it holds `beam` of them and the best live one's log P / |Y|^α (|Y| its
//!   tokens so far) is no better than the worst of them. At the length limit the EOS it forces
//!   adds nothing to log P, as `generate`'s forced EOS does.
//! - The result is the `nbest` best finished hypotheses by score.
//!
//! - `length_norm = marian` scores finished hypotheses log P / |Y|^α instead (Marian's
//!   `--normalize α`); at α 0 both are the plain log-probability, and the search itself ranks by
//!   log-probability either way, so it returns Marian's n-best lists (tests/marian_real.rs).
//!   It is also CTranslate2's `length_penalty` (whose |Y| counts the EOS too).
//!
//! Ties are broken deterministically: by lower row, then lower token id.

use super::controls::{Controls, Sampling, DISABLED};
use super::guide::{allocate, Guide, Progress};
use crate::error::{Error, Result};
use crate::kernels::cpu::profile::{self, Slot};
use crate::kernels::cpu::search::{log_prob, log_sum_exp, top_k, top_k_among};
use crate::task::Task;
use crate::vocab::{BOS, EOS};
use rayon::prelude::*;

/// The largest beam [`BeamConfig::validate`] accepts (every sentence decodes `beam` rows).
pub const MAX_BEAM: usize = 1024;
/// The largest `max_len_a` accepted.
pub const MAX_LEN_A: f64 = 1000.0;
/// The largest `max_len_b` accepted (outputs are capped by the model's positions in any case).
pub const MAX_LEN_B: usize = 1 << 20;

impl std::fmt::Display for BeamConfig {
    /// "beam 4, α 0.6, max length 1·src + 50" (and ", early exit" when it stops early).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stop = match self.stop {
            Stop::Exact => String::new(),
            Stop::BestEnds => ", early exit".into(),
            Stop::Patience(p) => format!(", CTranslate2's stop at patience {p}"),
            Stop::Transformers => ", transformers' stop".into(),
        };
        let norm = match self.length_norm {
            LengthNorm::Gnmt => "",
            LengthNorm::Marian => " (Marian's length normalisation)",
        };
        let unk = if self.suppress_unk { ", no UNK" } else { "" };
        write!(
            f,
            "beam {}, α {}{norm}, max length {}·src + {}{stop}{unk}",
            self.beam, self.alpha, self.max_len_a, self.max_len_b
        )?;
        let c = &self.controls;
        if c.min_len > 0 {
            write!(f, ", min length {}", c.min_len)?;
        }
        if c.repetition_penalty != 1.0 {
            write!(f, ", repetition penalty {}", c.repetition_penalty)?;
        }
        if c.no_repeat_ngram > 0 {
            write!(f, ", no repeated {}-gram", c.no_repeat_ngram)?;
        }
        if let Some(s) = &self.sampling {
            write!(
                f,
                ", sampling (top-k {}, top-p {}, temperature {}, seed {})",
                s.topk, s.topp, s.temperature, s.seed
            )?;
        }
        Ok(())
    }
}

/// How a finished hypothesis' log-probability is normalised for its length: score = log P / lp(|Y|),
/// |Y| its output tokens and the EOS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LengthNorm {
    /// lp(Y) = ((5 + |Y|) / 6)^α, the GNMT penalty the paper uses (Wu et al. 2016).
    #[default]
    Gnmt,
    /// lp(Y) = |Y|^α: Marian's `--normalize α`, fairseq's `--lenpen` and CTranslate2's
    /// `length_penalty`.
    Marian,
}

impl LengthNorm {
    /// Every form.
    pub const ALL: [LengthNorm; 2] = [LengthNorm::Gnmt, LengthNorm::Marian];

    /// The name used on command lines (`gnmt`, `marian`).
    pub fn name(self) -> &'static str {
        match self {
            LengthNorm::Gnmt => "gnmt",
            LengthNorm::Marian => "marian",
        }
    }

    /// The norm of a name ([`LengthNorm::name`]).
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|n| n.name() == name)
            .ok_or_else(|| Error::Config(format!("unknown length normalisation {name:?} (gnmt or marian)")))
    }
}

/// When a sentence's search ends (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Stop {
    /// When no live hypothesis can still enter the `nbest` best finished ones: the exact search.
    #[default]
    Exact,
    /// As soon as the best candidate of a step ends in EOS and `nbest` have finished
    /// (`--early-exit`; the `early_exit` departure).
    BestEnds,
    /// CTranslate2's beam search at this patience factor (`--patience`; CTranslate2's
    /// `patience`): the beam kept full, a sentence ending once round(beam · patience) hypotheses
    /// have finished, or with α 0 once the best candidate of a step has ended and `nbest` have.
    Patience(f32),
    /// `transformers`' `generate` with `num_beams` (`--stop transformers`; its default
    /// `early_stopping=False`): the beam kept full as for [`Stop::Patience`], the `beam` best
    /// finished hypotheses kept, a sentence ending once it has `beam` and the best live log P,
    /// divided by its length so far to the power α, does not beat the worst of them.
    Transformers,
}

impl Stop {
    /// Whether the beam stays full (a finished hypothesis's slot refilled from the 2·beam best).
    pub fn full_beam(self) -> bool {
        matches!(self, Stop::Patience(_) | Stop::Transformers)
    }

    /// The names [`Stop::name`] gives, in order.
    pub const NAMES: [&'static str; 4] = ["exact", "early-exit", "patience", "transformers"];

    /// The stop a front end asks for by name (`--stop`, serve's `stop`) and patience factor
    /// (`--patience`, `patience`): a patience alone is [`Stop::Patience`], the name `patience`
    /// alone is patience 1; neither is `None` (the search's default). An unknown name, or a
    /// patience beside another stop, is an error that says what to send.
    pub fn parse(name: Option<&str>, patience: Option<f32>) -> std::result::Result<Option<Stop>, String> {
        Ok(Some(match (name, patience) {
            (None, None) => return Ok(None),
            (None | Some("patience"), Some(p)) => Stop::Patience(p),
            (Some("patience"), None) => Stop::Patience(1.0),
            (Some(s), Some(_)) if Self::NAMES.contains(&s) => {
                return Err(format!("a patience applies to the patience stop, not to the {s} stop"))
            }
            (Some("exact"), None) => Stop::Exact,
            (Some("early-exit"), None) => Stop::BestEnds,
            (Some("transformers"), None) => Stop::Transformers,
            (Some(s), _) => return Err(format!("no stop {s:?}: one of {}", Self::NAMES.join(", "))),
        }))
    }

    /// The name on command lines (`exact`, `early-exit`, `patience`, `transformers`).
    pub fn name(self) -> &'static str {
        match self {
            Stop::Exact => "exact",
            Stop::BestEnds => "early-exit",
            Stop::Patience(_) => "patience",
            Stop::Transformers => "transformers",
        }
    }

    /// How many finished hypotheses end a sentence under [`Stop::Patience`]: round(beam · p).
    fn patience_count(p: f32, beam: usize) -> usize {
        (beam as f32 * p).round() as usize
    }
}

/// A named set of search settings (`--preset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SearchPreset {
    /// [`BeamConfig::translation`]: beam 4, α 0.6, +50 (§6.1).
    Translation,
    /// [`BeamConfig::parsing`]: beam 21, α 0.3, +300 (§6.3).
    Parsing,
    /// [`BeamConfig::greedy`]: beam 1.
    Greedy,
}

impl SearchPreset {
    /// Every preset.
    pub const ALL: [SearchPreset; 3] = [SearchPreset::Translation, SearchPreset::Parsing, SearchPreset::Greedy];

    /// The name (`translation`, `parsing`, `greedy`).
    pub fn name(self) -> &'static str {
        match self {
            SearchPreset::Translation => "translation",
            SearchPreset::Parsing => "parsing",
            SearchPreset::Greedy => "greedy",
        }
    }

    /// Its settings.
    pub const fn config(self) -> BeamConfig {
        match self {
            SearchPreset::Translation => BeamConfig::translation(),
            SearchPreset::Parsing => BeamConfig::parsing(),
            SearchPreset::Greedy => BeamConfig::greedy(),
        }
    }
}

/// Changes to a preset's search settings, as a command line or a request gives them: each `None`
/// keeps the preset's value ([`BeamConfig::with`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SearchOverrides {
    /// [`BeamConfig::beam`].
    pub beam: Option<usize>,
    /// [`BeamConfig::alpha`].
    pub alpha: Option<f64>,
    /// [`BeamConfig::max_len_a`].
    pub max_len_a: Option<f64>,
    /// [`BeamConfig::max_len_b`].
    pub max_len_b: Option<usize>,
    /// [`BeamConfig::nbest`].
    pub nbest: Option<usize>,
    /// [`BeamConfig::stop`].
    pub stop: Option<Stop>,
    /// [`BeamConfig::length_norm`].
    pub length_norm: Option<LengthNorm>,
    /// [`BeamConfig::suppress_unk`].
    pub suppress_unk: Option<bool>,
    /// [`Controls::min_len`].
    pub min_len: Option<usize>,
    /// [`Controls::repetition_penalty`].
    pub repetition_penalty: Option<f32>,
    /// [`Controls::no_repeat_ngram`].
    pub no_repeat_ngram: Option<usize>,
    /// [`BeamConfig::sampling`]: `Some` samples (its beam the number of samples).
    pub sampling: Option<Sampling>,
    /// [`BeamConfig::end_at_limit`].
    pub end_at_limit: Option<bool>,
}

/// Search settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BeamConfig {
    /// Beam size k (1 = greedy).
    pub beam: usize,
    /// Length-penalty exponent α (0 = no penalty).
    pub alpha: f64,
    /// Maximum output length a·|source| + b tokens (EOS not counted): a.
    pub max_len_a: f64,
    /// b.
    pub max_len_b: usize,
    /// Hypotheses returned per sentence (≤ beam; with [`Stop::Patience`], ≤ round(beam · patience)).
    pub nbest: usize,
    /// When a sentence's search ends ([`Stop`]; by default when no live hypothesis can still win).
    pub stop: Stop,
    /// The length penalty's form ([`LengthNorm`]; the paper's GNMT form by default).
    pub length_norm: LengthNorm,
    /// Never extend a hypothesis by UNK (Marian's default, unless `--allow-unk`); off by default.
    /// A constrained search (parsing) takes the tokens its constraint allows instead.
    pub suppress_unk: bool,
    /// Minimum length and repetition controls ([`Controls`]; none by default, the paper's search).
    pub controls: Controls,
    /// Random sampling instead of the beam's best ([`Sampling`]); `None`, the paper's search.
    pub sampling: Option<Sampling>,
    /// CTranslate2's length limit (`--end-at-limit`; its `max_decoding_length`): the limit
    /// counts decoding steps, the EOS's among them, and its last step ends every hypothesis as it
    /// stands, so one cut there has `limit` tokens and no EOS. Off (the default): up to `limit`
    /// tokens, then an EOS is forced.
    pub end_at_limit: bool,
}

impl BeamConfig {
    /// §6.1 translation: beam 4, α 0.6, maximum length input + 50.
    pub const fn translation() -> Self {
        BeamConfig {
            beam: 4,
            alpha: 0.6,
            max_len_a: 1.0,
            max_len_b: 50,
            nbest: 1,
            stop: Stop::Exact,
            length_norm: LengthNorm::Gnmt,
            suppress_unk: false,
            controls: Controls { min_len: 0, repetition_penalty: 1.0, no_repeat_ngram: 0 },
            sampling: None,
            end_at_limit: false,
        }
    }

    /// §6.3 constituency parsing: beam 21, α 0.3, maximum length input + 300.
    pub const fn parsing() -> Self {
        BeamConfig { beam: 21, alpha: 0.3, max_len_b: 300, ..Self::translation() }
    }

    /// The paper's search settings for `task` (§6.1 translation: beam 4, α 0.6, +50; §6.3
    /// parsing: beam 21, α 0.3, +300).
    pub const fn for_task(task: Task) -> Self {
        match task {
            Task::Translation => Self::translation(),
            Task::Parsing => Self::parsing(),
        }
    }

    /// These settings with `o`'s changes, checked.
    pub fn with(mut self, o: &SearchOverrides) -> Result<Self> {
        self.beam = o.beam.unwrap_or(self.beam);
        self.alpha = o.alpha.unwrap_or(self.alpha);
        self.max_len_a = o.max_len_a.unwrap_or(self.max_len_a);
        self.max_len_b = o.max_len_b.unwrap_or(self.max_len_b);
        self.nbest = o.nbest.unwrap_or(self.nbest);
        self.stop = o.stop.unwrap_or(self.stop);
        self.length_norm = o.length_norm.unwrap_or(self.length_norm);
        self.suppress_unk = o.suppress_unk.unwrap_or(self.suppress_unk);
        self.end_at_limit = o.end_at_limit.unwrap_or(self.end_at_limit);
        let c = &mut self.controls;
        c.min_len = o.min_len.unwrap_or(c.min_len);
        c.repetition_penalty = o.repetition_penalty.unwrap_or(c.repetition_penalty);
        c.no_repeat_ngram = o.no_repeat_ngram.unwrap_or(c.no_repeat_ngram);
        if o.sampling.is_some() {
            self.sampling = o.sampling;
        }
        self.validate()?;
        Ok(self)
    }

    /// Greedy search: beam 1.
    pub const fn greedy() -> Self {
        BeamConfig { beam: 1, ..Self::translation() }
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if self.beam == 0 || self.beam > MAX_BEAM {
            return bad(format!("the beam size must lie in [1, {MAX_BEAM}] (got {})", self.beam));
        }
        match self.stop {
            Stop::Patience(p) => {
                if !(p > 0.0 && p.is_finite()) || Stop::patience_count(p, self.beam) == 0 {
                    return bad(format!(
                        "the patience factor must be finite and at least 1 / (2 · beam) (got {p} at beam {})",
                        self.beam
                    ));
                }
                let most = Stop::patience_count(p, self.beam);
                if self.nbest == 0 || self.nbest > most {
                    return bad(format!(
                        "nbest must be between 1 and round(beam · patience) = {most} (got {})",
                        self.nbest
                    ));
                }
            }
            _ if self.nbest == 0 || self.nbest > self.beam => {
                return bad(format!("nbest must be between 1 and the beam size {} (got {})", self.beam, self.nbest));
            }
            _ => {}
        }
        if !(self.alpha >= 0.0 && self.alpha.is_finite()) {
            return bad(format!("the length-penalty α must be finite and ≥ 0 (got {})", self.alpha));
        }
        if !(self.max_len_a >= 0.0 && self.max_len_a <= MAX_LEN_A) {
            return bad(format!("max_len_a must lie in [0, {MAX_LEN_A}] (got {})", self.max_len_a));
        }
        if self.max_len_b > MAX_LEN_B {
            return bad(format!("max_len_b must lie in [0, {MAX_LEN_B}] (got {})", self.max_len_b));
        }
        if let Some(sampling) = &self.sampling {
            sampling.validate()?;
            if self.stop != Stop::Exact {
                return bad("sampling draws every sample to its end: a stop other than the exact one (early exit, patience, transformers) does not apply".into());
            }
            if self.nbest != self.beam {
                return bad(format!(
                    "sampling draws `beam` samples and returns them all: nbest ({}) must equal the beam size ({})",
                    self.nbest, self.beam
                ));
            }
        }
        self.controls.validate()
    }

    /// The maximum output length (EOS not counted) for a source of `src_len` tokens. Saturates
    /// rather than wrapping (the model's positions cap it anyway).
    pub fn max_len(&self, src_len: usize) -> usize {
        ((self.max_len_a * src_len as f64).floor() as usize).saturating_add(self.max_len_b)
    }

    /// Whether an output of `out_len` tokens for a source of `src_len` was stopped by the model's
    /// positions rather than by this search's length limit: it reached `max_positions − 1` tokens
    /// (the most a decoder of `max_positions` can write before EOS) while the limit, `max_len`,
    /// lay beyond. Translation reports such outputs (a warning on the CLI, `capped` in the server)
    /// instead of cutting them silently.
    pub fn stopped_by_positions(&self, src_len: usize, out_len: usize, max_positions: usize) -> bool {
        // Under `end_at_limit` the last position writes a token too.
        let cap = if self.end_at_limit { max_positions } else { max_positions.saturating_sub(1) };
        out_len >= cap && self.max_len(src_len) > cap
    }

    /// lp(Y) for an output of `tokens` tokens before its EOS, |Y| = tokens + 1: ((5 + |Y|) / 6)^α,
    /// or |Y|^α with [`LengthNorm::Marian`].
    pub fn length_penalty(&self, tokens: usize) -> f64 {
        let len = tokens as f64 + 1.0;
        match self.length_norm {
            LengthNorm::Gnmt => ((5.0 + len) / 6.0).powf(self.alpha),
            LengthNorm::Marian => len.powf(self.alpha),
        }
    }

    /// The slots a sentence with `finished` finished hypotheses fills from a step's candidates:
    /// the beam less those, or the whole beam under [`Stop::Patience`].
    fn slots(&self, finished: usize) -> usize {
        if self.stop.full_beam() {
            self.beam
        } else {
            self.beam - finished
        }
    }

    /// How many candidates a row offers a step: its sentence's slots, or 2 · beam under
    /// [`Stop::Patience`] (the spares a finished hypothesis's slot is refilled from).
    fn row_candidates(&self, finished: usize) -> usize {
        if self.stop.full_beam() {
            2 * self.beam
        } else {
            self.beam - finished
        }
    }
}

/// A finished hypothesis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hypothesis {
    /// Output tokens, without BOS and EOS.
    pub tokens: Vec<u32>,
    /// log P(tokens, EOS | source), natural log.
    pub log_prob: f64,
    /// log_prob / lp(|tokens| + 1): what the search ranks by.
    pub score: f64,
    /// Where the output of each chunk after the first begins, in tokens, when the source was longer
    /// than the model's positions and was translated in chunks; empty for a sentence decoded whole.
    pub chunk_starts: Vec<usize>,
}

/// What the search queries: next-token scores for a set of rows (hypotheses), each row belonging to
/// one sentence. The search starts with one row per sentence, in order.
pub trait Scorer {
    /// Vocabulary size V.
    fn vocab(&self) -> usize;
    /// Feeds one token per row (BOS first) and returns the next token's scores.
    fn step(&mut self, tokens: &[u32]) -> Result<StepScores<'_>>;
    /// Keeps rows `keep`: new row i continues old row `keep[i]`. An index that is not a row is
    /// an error.
    fn reorder(&mut self, keep: &[usize]) -> Result<()>;
}

/// One step's output: log p(token | row) = `scores[row·V + token] − log_norms[row]`, computed in
/// f32. A model returns its logits and their log Σ exp, so the search never writes out a
/// normalised copy; a scorer that has log-probabilities already returns zero normalisers.
#[derive(Clone, Copy, Debug)]
pub struct StepScores<'a> {
    /// (rows, V) unnormalised log-probabilities.
    pub scores: &'a [f32],
    /// (rows) log-normalisers.
    pub log_norms: &'a [f32],
}

struct Live {
    sent: usize,
    tokens: Vec<u32>,
    log_prob: f64,
    /// Sampling: which of the sentence's samples this is (its draws' key).
    lineage: usize,
    /// Its progress through its sentence's phrases ([`Guide`]; empty when there are none).
    progress: Progress,
}

/// What a search knows of each of its sentences beyond the source: `keys[i]` names sentence i
/// for sampling's draws ([`Sampling`]; empty: i itself), so that a sentence samples the same
/// output in any batch; `guides[i]` is what its output must hold ([`Guide`]; empty: nothing).
#[derive(Clone, Copy, Debug, Default)]
pub struct SentenceInputs<'a> {
    /// Sampling's key of each sentence.
    pub keys: &'a [u64],
    /// Each sentence's prefix and phrases.
    pub guides: &'a [&'a Guide],
}

/// A ranked candidate: extend row `row` by `token`.
#[derive(Clone, Copy)]
struct Cand {
    log_prob: f64,
    row: usize,
    token: u32,
    /// Its place among its row's candidates (sampling: a first step's j-th draw starts sample j).
    draw: usize,
}

/// Best first; ties by lower row, then lower token.
fn better(a: &Cand, b: &Cand) -> std::cmp::Ordering {
    b.log_prob.total_cmp(&a.log_prob).then(a.row.cmp(&b.row)).then(a.token.cmp(&b.token))
}

/// A restriction of the search to outputs of a given form: at each step a hypothesis may only be
/// extended by the tokens the constraint allows (at the maximum length, EOS only, as always).
pub trait Constraint: Sync {
    /// Appends to `out` the tokens allowed after `prefix` (output tokens so far, without BOS) in
    /// sentence `sent` of the search, EOS among them when the output may end there. `budget` is the
    /// number of tokens the output may still take before the length limit forces EOS. At least one
    /// token must be allowed. A sentence the constraint does not cover allows none.
    fn allowed(&self, sent: usize, prefix: &[u32], budget: usize, out: &mut Vec<u32>);

    /// How many sentences the constraint covers, when it covers a fixed number: the search refuses
    /// a batch of another size. `None` (the default): any sentence index.
    fn sentences(&self) -> Option<usize> {
        None
    }
}

/// A constraint seen through a map from a search's sentences to the constraint's: sentence `i`
/// of the search is sentence `map[i]` of `inner`.
pub struct Remapped<'a> {
    /// The constraint.
    pub inner: &'a dyn Constraint,
    /// Search sentence → constraint sentence.
    pub map: Vec<usize>,
}

impl Constraint for Remapped<'_> {
    fn allowed(&self, sent: usize, prefix: &[u32], budget: usize, out: &mut Vec<u32>) {
        if let Some(&inner_sent) = self.map.get(sent) {
            self.inner.allowed(inner_sent, prefix, budget, out)
        }
    }

    fn sentences(&self) -> Option<usize> {
        Some(self.map.len())
    }
}

/// Beam search over `src_lens.len()` sentences. Returns, per sentence, its `nbest` best finished
/// hypotheses, best first. `max_len` caps the output length (EOS not counted) whatever the config
/// says, e.g. at the model's positions.
pub fn beam_search(
    scorer: &mut impl Scorer,
    src_lens: &[usize],
    cfg: &BeamConfig,
    max_len: usize,
) -> Result<Vec<Vec<Hypothesis>>> {
    beam_search_constrained(scorer, src_lens, cfg, max_len, None)
}

/// [`beam_search`] restricted by `constraint`, if given. A constraint that covers another number
/// of sentences than `src_lens` ([`Constraint::sentences`]), a token it allows outside the
/// vocabulary, and a scorer that returns other than one row of scores per row fed are errors.
pub fn beam_search_constrained(
    scorer: &mut impl Scorer,
    src_lens: &[usize],
    cfg: &BeamConfig,
    max_len: usize,
    constraint: Option<&dyn Constraint>,
) -> Result<Vec<Vec<Hypothesis>>> {
    beam_search_with(scorer, src_lens, &SentenceInputs::default(), cfg, max_len, constraint)
}

/// [`beam_search_constrained`] with what it knows of each sentence ([`SentenceInputs`]: keys for
/// sampling, prefixes and phrases). Inputs for other than `src_lens.len()` sentences, a guide
/// that does not fit the vocabulary or the length limit ([`Guide`]), and a guide or a sampling
/// or repetition control beside a constraint are errors.
pub fn beam_search_with(
    scorer: &mut impl Scorer,
    src_lens: &[usize],
    inputs: &SentenceInputs,
    cfg: &BeamConfig,
    max_len: usize,
    constraint: Option<&dyn Constraint>,
) -> Result<Vec<Vec<Hypothesis>>> {
    cfg.validate()?;
    let v = scorer.vocab();
    let n = src_lens.len();
    check_search(v, n, constraint)?;
    // Under `end_at_limit` the limit counts steps, the last one's token included: the decoder's
    // positions allow one more than the tokens they allow before an EOS.
    let cap = if cfg.end_at_limit { max_len.saturating_add(1) } else { max_len };
    let limit: Vec<usize> = src_lens.iter().map(|&l| cfg.max_len(l).min(cap)).collect();
    let (keys, guides) = check_inputs(inputs, &limit, v, cfg, constraint)?;
    let mut finished: Vec<Vec<Hypothesis>> = vec![Vec::new(); n];
    // Whether a step's best candidate has ended in EOS ([`Stop::Patience`] at α 0).
    let mut best_ended = vec![false; n];
    // Hypotheses that reached the length limit without meeting their phrases.
    let mut unmet: Vec<Vec<Hypothesis>> = vec![Vec::new(); n];
    let mut live: Vec<Live> = (0..n)
        .map(|i| Live {
            sent: i,
            tokens: Vec::new(),
            log_prob: 0.0,
            lineage: 0,
            progress: guides.get(i).map_or_else(Progress::default, |g| Progress::new(g)),
        })
        .collect();
    while !live.is_empty() {
        let tokens: Vec<u32> = live.iter().map(|h| h.tokens.last().copied().unwrap_or(BOS)).collect();
        let out = scorer.step(&tokens)?;
        let per_row = row_candidates(&out, &live, &finished, &limit, cfg, constraint, (&keys, guides), v)?;
        let mut next: Vec<Live> = Vec::with_capacity(live.len());
        let mut keep: Vec<usize> = Vec::with_capacity(live.len());
        // Rows of one sentence are contiguous and sentences stay in order.
        let mut r0 = 0;
        while r0 < live.len() {
            let sent = live[r0].sent;
            let r1 = r0 + live[r0..].iter().take_while(|h| h.sent == sent).count();
            let mut cands: Vec<Cand> = (r0..r1)
                .flat_map(|r| {
                    let base = live[r].log_prob;
                    // `generate` forces the EOS at its length limit on the log-probabilities: it
                    // costs nothing there.
                    let forced = cfg.stop == Stop::Transformers && live[r].tokens.len() >= limit[sent];
                    per_row[r].iter().enumerate().map(move |(draw, &(x, token))| Cand {
                        log_prob: base + if forced { 0.0 } else { x },
                        row: r,
                        token,
                        draw,
                    })
                })
                .collect();
            cands.sort_by(better);
            let best_finishes = cands.first().is_some_and(|c| c.token == EOS);
            best_ended[sent] |= best_finishes;
            let slots = cfg.slots(finished[sent].len());
            let first_live = next.len();
            let guide = guides.get(sent).copied().filter(|g| !g.phrases.is_empty());
            let chosen: Vec<Cand> = match guide {
                // Dynamic beam allocation over the banks of phrase tokens met (decode/guide.rs).
                Some(g) => {
                    let bank = |c: &Cand| match c.token {
                        EOS => g.phrase_tokens(),
                        t => live[c.row].progress.advance(g, t).bank(g),
                    };
                    let banks: Vec<usize> = cands.iter().map(bank).collect();
                    allocate(&banks, g.phrase_tokens() + 1, slots).into_iter().map(|i| cands[i]).collect()
                }
                // The last step under `end_at_limit` ends the beam's best as they stand.
                None if cfg.end_at_limit && live[r0].tokens.len() + 1 >= limit[sent] => {
                    cands.into_iter().take(if cfg.stop.full_beam() { cfg.beam } else { slots }).collect()
                }
                None if cfg.stop.full_beam() => refill(cands, cfg.beam),
                None => cands.into_iter().take(slots).collect(),
            };
            let prefix_len = guides.get(sent).map_or(0, |g| g.prefix.len());
            for c in chosen {
                let h = &live[c.row];
                // Cut by the limit under `end_at_limit`: it finishes with its last token kept and
                // no EOS.
                let cut = c.token != EOS && cfg.end_at_limit && h.tokens.len() + 1 >= limit[sent];
                if c.token == EOS || cut {
                    let mut tokens = h.tokens.clone();
                    // A cut one's last token may be the one that meets its phrases.
                    let met = match guide {
                        Some(g) if cut => h.progress.advance(g, c.token).all_met(),
                        _ => h.progress.all_met(),
                    };
                    if cut {
                        tokens.push(c.token);
                    }
                    // The length penalty counts an EOS, or the cut token in its place.
                    let score = c.log_prob / cfg.length_penalty(h.tokens.len());
                    let done = Hypothesis { tokens, log_prob: c.log_prob, score, chunk_starts: Vec::new() };
                    // One the length limit ended before it met its phrases is kept aside, returned
                    // only if too few others finish.
                    match guide {
                        Some(_) if !met => unmet[sent].push(done),
                        _ => finished[sent].push(done),
                    }
                } else {
                    let mut tokens = h.tokens.clone();
                    tokens.push(c.token);
                    // A sample begins at the first token drawn (after the prefix).
                    let lineage = if h.tokens.len() == prefix_len { c.draw } else { h.lineage };
                    let progress = match guide {
                        Some(g) => h.progress.advance(g, c.token),
                        None => Progress::default(),
                    };
                    next.push(Live { sent, tokens, log_prob: c.log_prob, lineage, progress });
                    keep.push(c.row);
                }
            }
            let done = finished[sent].len();
            let exit = match cfg.stop {
                Stop::Exact => early_stop(&mut finished[sent], &next[first_live..], cfg, limit[sent]),
                Stop::BestEnds => {
                    (best_finishes && done >= cfg.nbest)
                        || early_stop(&mut finished[sent], &next[first_live..], cfg, limit[sent])
                }
                Stop::Patience(_) if cfg.alpha == 0.0 => best_ended[sent] && done >= cfg.nbest,
                Stop::Patience(p) => done >= Stop::patience_count(p, cfg.beam),
                Stop::Transformers => transformers_stop(&mut finished[sent], &next[first_live..], cfg),
            };
            if exit || next.len() == first_live {
                next.truncate(first_live);
                keep.truncate(first_live);
            }
            r0 = r1;
        }
        scorer.reorder(&keep)?;
        live = next;
    }
    for (f, mut u) in finished.iter_mut().zip(unmet) {
        // Stable: equal scores keep the order they finished in.
        f.sort_by(|a, b| b.score.total_cmp(&a.score));
        u.sort_by(|a, b| b.score.total_cmp(&a.score));
        f.extend(u);
        f.truncate(cfg.nbest);
    }
    Ok(finished)
}

/// The search's inputs agree: the vocabulary has an EOS, and a constraint covers the `n` sentences.
fn check_search(v: usize, n: usize, constraint: Option<&dyn Constraint>) -> Result<()> {
    if v <= EOS as usize {
        return Err(Error::Mismatch(format!("a vocabulary of {v} has no EOS")));
    }
    if let Some(covered) = constraint.and_then(|c| c.sentences()) {
        if covered != n {
            return Err(Error::Input(format!(
                "the constraint covers {covered} sentences but the search has {n}: they must be the same sentences"
            )));
        }
    }
    Ok(())
}

/// The sentences' sampling keys (their indices where none are given) and guides, checked: one
/// each for every sentence (or none), each guide fitting the vocabulary `v` and its sentence's
/// `limit`, and neither guides nor the sampling and repetition controls beside a constraint.
fn check_inputs<'a>(
    inputs: &SentenceInputs<'a>,
    limit: &[usize],
    v: usize,
    cfg: &BeamConfig,
    constraint: Option<&dyn Constraint>,
) -> Result<(Vec<u64>, &'a [&'a Guide])> {
    let n = limit.len();
    let SentenceInputs { keys, guides } = *inputs;
    if !keys.is_empty() && keys.len() != n {
        return Err(Error::Input(format!("{} sampling keys for {n} sentences", keys.len())));
    }
    if !guides.is_empty() && guides.len() != n {
        return Err(Error::Input(format!("{} prefixes and phrase lists for {n} sentences", guides.len())));
    }
    if constraint.is_some() && (cfg.controls.active() || cfg.sampling.is_some()) {
        return Err(Error::Config(
            "the minimum length, repetition and sampling controls apply to unconstrained search, not to a constrained one"
                .into(),
        ));
    }
    if constraint.is_some() && guides.iter().any(|g| !g.is_empty()) {
        return Err(Error::Config("a prefix or phrases apply to translation, not to a constrained search".into()));
    }
    if constraint.is_some() && cfg.end_at_limit {
        return Err(Error::Config(
            "a constrained search (parsing) ends its trees by its constraint, not by a cut at the limit (leave \
             --end-at-limit, or end_at_limit, out)"
                .into(),
        ));
    }
    if cfg.stop.full_beam() && guides.iter().any(|g| !g.phrases.is_empty()) {
        return Err(Error::Config(format!(
            "phrases the output must contain share the beam by dynamic allocation, not by the {} stop (leave it out)",
            cfg.stop.name()
        )));
    }
    if cfg.sampling.is_some() && guides.iter().any(|g| !g.phrases.is_empty()) {
        return Err(Error::Config(
            "phrases the output must contain apply to beam search, not to sampling (a prefix does)".into(),
        ));
    }
    for (i, (g, &l)) in guides.iter().zip(limit).enumerate() {
        g.validate(i, v, l)?;
    }
    let keys = if keys.is_empty() { (0..n as u64).collect() } else { keys.to_vec() };
    Ok((keys, guides))
}

/// Each live row's best continuations (log-probability, token): at most its sentence's free
/// slots, only the tokens `constraint` allows, only EOS at the length limit; a prefix's next
/// token while the prefix lasts, and with phrases, the tokens that advance them ([`Guide`]).
#[allow(clippy::too_many_arguments)]
fn row_candidates(
    out: &StepScores,
    live: &[Live],
    finished: &[Vec<Hypothesis>],
    limit: &[usize],
    cfg: &BeamConfig,
    constraint: Option<&dyn Constraint>,
    (keys, guides): (&[u64], &[&Guide]),
    v: usize,
) -> Result<Vec<Vec<(f64, u32)>>> {
    let rows = live.len();
    if out.scores.len() != rows * v || out.log_norms.len() != rows {
        return Err(Error::Decode(format!(
            "the scorer returned {} scores and {} normalisers for {rows} rows of a vocabulary of {v}: \
             expected {} and {rows}",
            out.scores.len(),
            out.log_norms.len(),
            rows * v
        )));
    }
    let _t = profile::scope(Slot::Search);
    out.scores
        .par_chunks(v)
        .zip(out.log_norms.par_iter())
        .zip(live.par_iter())
        .map(|((row, &norm), h)| {
            let (k, at_limit) = (cfg.row_candidates(finished[h.sent].len()), h.tokens.len() >= limit[h.sent]);
            let guide = guides.get(h.sent).copied();
            // The prefix is forced (the guide's check leaves room for it before the limit).
            if let Some(&t) = guide.and_then(|g| g.prefix.get(h.tokens.len())) {
                return Ok(vec![(log_prob(row[t as usize], norm), t)]);
            }
            let phrases = guide.filter(|g| !g.phrases.is_empty() && !at_limit).map(|g| (g, &h.progress));
            match constraint {
                Some(c) if !at_limit => {
                    let mut allowed = Vec::new();
                    c.allowed(h.sent, &h.tokens, limit[h.sent] - h.tokens.len(), &mut allowed);
                    if let Some(&t) = allowed.iter().find(|&&t| t as usize >= v) {
                        return Err(Error::Decode(format!(
                            "the constraint allows token id {t} in sentence {}, outside the vocabulary of {v}",
                            h.sent + 1
                        )));
                    }
                    Ok(top_k_among(row, norm, k, &allowed))
                }
                _ if (cfg.sampling.is_some() && !at_limit) || cfg.controls.applies(&h.tokens) => {
                    CONTROLLED.with_borrow_mut(|controlled| {
                        cfg.controls.apply(row, &h.tokens, at_limit, controlled);
                        // Normalised again over what may be emitted (a model row's own
                        // normaliser, or none for a scorer of log-probabilities, changes nothing
                        // then).
                        let norm = if cfg.controls.applies(&h.tokens) { log_sum_exp(controlled) } else { norm };
                        match &cfg.sampling {
                            Some(sampling) if !at_limit => {
                                // The first step draws every sample of the sentence from its one row
                                // (after the prefix, if any).
                                let first = h.tokens.len() == guide.map_or(0, |g| g.prefix.len());
                                let (n, lineage) = (if first { k } else { 1 }, |j| if first { j } else { h.lineage });
                                let (key, step) = (keys[h.sent], h.tokens.len());
                                Ok(sampling.draw(controlled, norm, cfg.suppress_unk, key, step, n, lineage))
                            }
                            _ => {
                                let mut best = best_of(controlled, norm, k, at_limit, cfg, phrases);
                                best.retain(|&(_, t)| controlled[t as usize] > DISABLED);
                                Ok(best)
                            }
                        }
                    })
                }
                _ => Ok(best_of(row, norm, k, at_limit, cfg, phrases)),
            }
        })
        .collect()
}

/// A row's `k` best tokens; with phrases to meet (and the progress made), also every token that
/// advances them, and EOS only once all are met.
fn best_of(
    row: &[f32],
    norm: f32,
    k: usize,
    at_limit: bool,
    cfg: &BeamConfig,
    phrases: Option<(&Guide, &Progress)>,
) -> Vec<(f64, u32)> {
    let Some((g, progress)) = phrases else { return top_k(row, norm, k, at_limit, cfg.suppress_unk) };
    let open = !progress.all_met();
    let mut best = top_k(row, norm, k + usize::from(open), at_limit, cfg.suppress_unk);
    if open {
        best.retain(|&(_, t)| t != EOS);
        best.truncate(k);
    }
    progress.wanted(g, |t| {
        // (Not a token of probability 0, nor one the controls disable.)
        if row[t as usize] > DISABLED && !best.iter().any(|&(_, b)| b == t) {
            best.push((log_prob(row[t as usize], norm), t));
        }
    });
    best
}

thread_local! {
    /// A row of logits with the [`Controls`] applied: one buffer a search thread, reused.
    static CONTROLLED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// CTranslate2's choice from a sentence's ranked candidates ([`Stop::Patience`]): an EOS among the
/// `beam` best finishes, and the first `beam` others among the 2·beam best continue (the slot of a
/// finished one going to the next-best unfinished candidate). An EOS below the `beam` best is
/// dropped.
fn refill(cands: Vec<Cand>, beam: usize) -> Vec<Cand> {
    let mut live = 0;
    cands
        .into_iter()
        .take(2 * beam)
        .enumerate()
        .filter(|(i, c)| {
            if c.token == EOS {
                *i < beam
            } else {
                live += 1;
                live <= beam
            }
        })
        .map(|(_, c)| c)
        .collect()
}

/// [`Stop::Transformers`]: keeps a sentence's `beam` best finished hypotheses, and whether it
/// stops: it holds `beam` and the best live log P / |Y|^α (|Y| the live length, the EOS not yet
/// written) is no better than the worst of them (`transformers`' `_check_early_stop_heuristic`).
fn transformers_stop(finished: &mut Vec<Hypothesis>, live: &[Live], cfg: &BeamConfig) -> bool {
    finished.sort_by(|a, b| b.score.total_cmp(&a.score));
    finished.truncate(cfg.beam);
    let (Some(worst), Some(first)) = (finished.last(), live.first()) else { return live.is_empty() };
    let best = live.iter().map(|h| h.log_prob).fold(f64::NEG_INFINITY, f64::max);
    finished.len() == cfg.beam && best / (first.tokens.len() as f64).powf(cfg.alpha) <= worst.score
}

/// Whether no live hypothesis of a sentence can enter its `nbest` best finished ones.
fn early_stop(finished: &mut [Hypothesis], live: &[Live], cfg: &BeamConfig, limit: usize) -> bool {
    if live.is_empty() {
        return true;
    }
    if finished.len() < cfg.nbest {
        return false;
    }
    finished.sort_by(|a, b| b.score.total_cmp(&a.score));
    let threshold = finished[cfg.nbest - 1].score;
    let best_lp = cfg.length_penalty(limit);
    live.iter().all(|h| threshold >= h.log_prob / best_lp)
}
