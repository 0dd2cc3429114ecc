//! The translator session, [`Translator`]: a model prepared for inference (its linear maps in
//! their compute layout, `model::Prepared`), its [`Tokenizer`] and a pool of reusable decoder
//! states, built once from a checkpoint ([`Translator::load`], `decode/load.rs`) and shared by every
//! front end (the CLI's `translate`, `evaluate` and `attention`, a server). It is `Send + Sync`:
//! threads may call it at once, each call taking its own state from the pool.
//!
//! Every search goes one road, `Translator::search`: the sentences cut into pieces and batched
//! (`decode/batches.rs`), the batches decoded by the worker pool (`decode/workers.rs`), the pieces'
//! hypotheses joined again per sentence. Parsing (`decode/parse.rs`) and teacher-forced scoring
//! (`decode/scoring.rs`) are `impl Translator` blocks of their own beside this file.

use super::batches::{join_chunks, pieces, plan_batches};
pub use super::batches::{DecodeOptions, TranslateStats};
use super::beam::{BeamConfig, Constraint, Hypothesis, Remapped, SentenceInputs};
use super::guide::Guide;
use super::scorer::search_batch_ensemble;
use super::shortlist::Shortlist;
use crate::data::bpe::Bpe;
use crate::data::encoding::TargetEncoding;
use crate::data::tokenizer::Tokenizer;
use crate::data::trees::TreeFormat;
use crate::error::{Error, Result};
use crate::eval::attention::{attention_weights, AttentionWeights};
use crate::events::Events;
use crate::model::incremental::DecoderState;
use crate::model::{DecoderKernels, Transformer, Workspace};
use crate::precision::Precision;
use crate::task::{LongInputs, Task};
use std::sync::Mutex;

/// How a [`Translator`] is built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SessionOptions {
    /// The arithmetic of the matrix products.
    pub precision: Precision,
    /// The products' kernels: weights laid out once (the default) or the `gemm` path.
    pub kernels: DecoderKernels,
    /// What the model does.
    pub task: Task,
    /// Parsing: how the model writes a tree. [`Translator::load`] takes it from the checkpoint.
    pub tree_format: TreeFormat,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            precision: Precision::F32,
            kernels: DecoderKernels::Packed,
            task: Task::Translation,
            tree_format: TreeFormat::default(),
        }
    }
}

/// Whether a line has nothing to translate: only white space and invisible marks (zero-width
/// space, non-joiner and joiner, word joiner, byte-order mark). Such a line is translated as an
/// empty line.
pub fn is_blank(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_whitespace() || matches!(c, '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}'))
}

/// One output sentence: the detokenised text of a hypothesis.
#[derive(Clone, Debug, PartialEq)]
pub struct Translation {
    /// The text.
    pub text: String,
    /// Its tokens and scores.
    pub hypothesis: Hypothesis,
}

/// Bytes a [`Translator`] holds, by what holds them ([`Translator::memory`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryReport {
    /// The model's f32 parameters other than the prepared maps' weights (biases, LayerNorms,
    /// positions; the embedding except at f32).
    pub parameters: usize,
    /// Every linear map prepared for the precision (f32 panels, bf16 tiles or int8 codes).
    pub prepared: usize,
    /// The encoder's buffers in the pool.
    pub workspaces: usize,
    /// The decoder states in the pool (key/value caches, logits, scratch).
    pub decoder_states: usize,
}

impl MemoryReport {
    /// Everything counted.
    pub fn total(&self) -> usize {
        self.parameters + self.prepared + self.workspaces + self.decoder_states
    }

    /// One `name: MB` line a part.
    pub fn lines(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("parameters (f32)", self.parameters),
            ("prepared weights", self.prepared),
            ("encoder buffers", self.workspaces),
            ("decoder states", self.decoder_states),
        ]
    }
}

/// The buffers one call decodes in, kept in the session's pool for the next: the encoder's
/// workspace and decoder state of the model, and of each other model of an ensemble.
#[derive(Default)]
pub(super) struct Buffers {
    pub(super) mine: (Workspace, DecoderState),
    pub(super) theirs: Vec<(Workspace, DecoderState)>,
}

impl Buffers {
    fn all(&self) -> impl Iterator<Item = &(Workspace, DecoderState)> {
        std::iter::once(&self.mine).chain(&self.theirs)
    }
}

/// A translator session: the model prepared for inference, its tokenizer and a pool of decoder
/// states (see the module docs).
pub struct Translator {
    pub(super) model: Transformer,
    pub(super) tokenizer: Tokenizer,
    pub(super) task: Task,
    pub(super) tree_format: TreeFormat,
    /// The other models of an ensemble ([`Translator::load_ensemble`]), prepared too; empty for
    /// one model.
    pub(super) others: Vec<Transformer>,
    /// The checkpoint files of an ensemble's models, in order, to name the one that fails; empty
    /// for one model.
    pub(super) member_files: Vec<std::path::PathBuf>,
    /// Buffers of finished calls, taken by the next ones (a call with none free makes its own).
    pool: Mutex<Vec<Buffers>>,
    /// The vocabulary shortlist a call may decode over ([`DecodeOptions::use_shortlist`]).
    shortlist: Option<Shortlist>,
}

impl Translator {
    /// A session over a model and the tokenizer it was trained with (a [`Bpe`] model, or the
    /// tokenizer of an imported model).
    pub fn new(model: Transformer, tokenizer: impl Into<Tokenizer>, options: SessionOptions) -> Result<Self> {
        let tokenizer = tokenizer.into();
        if model.config.vocab_size != tokenizer.vocab_size() {
            return Err(Error::Mismatch(format!(
                "the model has a vocabulary of {} but the tokenizer has {}",
                model.config.vocab_size,
                tokenizer.vocab_size()
            )));
        }
        if model.config.import.source_vocab_size != tokenizer.source_vocab_size() {
            return Err(Error::Mismatch(format!(
                "the model's source vocabulary is {:?} but the tokenizer's is {:?} (None: shared with the target)",
                model.config.import.source_vocab_size,
                tokenizer.source_vocab_size()
            )));
        }
        let mut model = model.prepare_with(options.precision, options.kernels)?;
        match tokenizer.bpe() {
            Some(bpe) => {
                model =
                    model.with_pointer_table(crate::model::pointer::PointerTable::from_bpe(bpe, options.tree_format))?
            }
            None if options.task != Task::Translation => {
                return Err(Error::Unsupported(format!(
                "an imported model's tokenizer translates only; {} needs a model trained here with its BPE vocabulary",
                options.task.name()
            )))
            }
            None => {}
        }
        let (task, tree_format) = (options.task, options.tree_format);
        Ok(Translator {
            model,
            tokenizer,
            task,
            tree_format,
            others: Vec::new(),
            member_files: Vec::new(),
            pool: Mutex::new(Vec::new()),
            shortlist: None,
        })
    }

    /// Gives the session a vocabulary shortlist (Marian's `--shortlist`, CTranslate2's vocabulary
    /// map), used by the calls that ask for it ([`DecodeOptions::use_shortlist`]). One made for
    /// another tokenizer is refused.
    pub fn set_shortlist(&mut self, list: Shortlist) -> Result<()> {
        let tok = &self.tokenizer;
        if list.vocab_hash != tok.hash() || list.vocab_size != tok.vocab_size() {
            return Err(Error::Mismatch(format!(
                "the shortlist was made for vocabulary {} ({} ids), but the model's is {} ({}): make it again with this model's tokenizer",
                list.vocab_hash,
                list.vocab_size,
                tok.hash(),
                tok.vocab_size()
            )));
        }
        if self.task != Task::Translation {
            return Err(Error::Unsupported(format!(
                "a vocabulary shortlist applies to translation, not {}",
                self.task.name()
            )));
        }
        self.shortlist = Some(list);
        Ok(())
    }

    /// Reads a shortlist file made for this model's tokenizer ([`Shortlist::load`]) and gives it to
    /// the session ([`Translator::set_shortlist`]).
    pub fn load_shortlist(&mut self, path: &std::path::Path) -> Result<()> {
        let list = Shortlist::load(path, self.tokenizer.hash(), self.tokenizer.vocab_size())?;
        self.set_shortlist(list)
    }

    /// The session's shortlist, if it has one.
    pub fn shortlist(&self) -> Option<&Shortlist> {
        self.shortlist.as_ref()
    }

    /// How many models decode together (1 without an ensemble).
    pub fn ensemble_size(&self) -> usize {
        1 + self.others.len()
    }

    /// Where this session's memory is: the model's parameters, the prepared weights and the
    /// pooled buffers of finished calls.
    pub fn memory(&self) -> MemoryReport {
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        // Every model of an ensemble: its parameters and prepared maps.
        let (mut parameters, mut prepared) = (0, 0);
        for m in std::iter::once(&self.model).chain(&self.others) {
            parameters += 4 * m.params.capacity();
            prepared += m.prepared().map_or(0, |p| p.bytes());
        }
        MemoryReport {
            parameters,
            prepared,
            workspaces: pool.iter().flat_map(Buffers::all).map(|(ws, _)| ws.bytes()).sum(),
            decoder_states: pool.iter().flat_map(Buffers::all).map(|(_, st)| st.bytes()).sum(),
        }
    }

    /// The model.
    pub fn model(&self) -> &Transformer {
        &self.model
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The BPE vocabulary, or an error for an imported model's tokenizer (for what only BPE
    /// models do: parsing).
    pub fn bpe(&self) -> Result<&Bpe> {
        self.tokenizer
            .bpe()
            .ok_or_else(|| Error::Unsupported("this model's tokenizer is an imported one, not a BPE vocabulary".into()))
    }

    /// Token ids of a source line (no BOS; an imported Marian model's `</s>` included). A blank
    /// line ([`is_blank`]: nothing but white space and invisible marks) has no ids, whatever the
    /// tokenizer, so that it is translated as an empty line rather than into invented text.
    pub fn encode_source(&self, text: &str) -> Result<Vec<u32>> {
        if is_blank(text) {
            return Ok(Vec::new());
        }
        self.encode_source_as_is(text)
    }

    /// The tokenizer's ids of a source line, blank or not (a blank line's perplexity is scored as
    /// the tokenizer reads it).
    pub(super) fn encode_source_as_is(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode_source(self.encoding(), text)
    }

    /// Token ids of a target line (no BOS/EOS).
    pub fn encode_target(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode_target(self.encoding(), text)
    }

    /// How the task writes targets (and reads sources beside them) with a BPE vocabulary.
    fn encoding(&self) -> TargetEncoding {
        self.task.target_encoding(self.tree_format)
    }

    /// The text of a hypothesis: its ids as text, or, for a sentence translated in chunks, each
    /// chunk's text joined to the next with a space. A chunk start past the hypothesis' tokens is
    /// an error.
    pub fn text(&self, h: &Hypothesis) -> Result<String> {
        if h.chunk_starts.is_empty() {
            return self.decode_target(&h.tokens);
        }
        if let Some(&start) = h.chunk_starts.iter().find(|&&s| s > h.tokens.len()) {
            return Err(Error::Input(format!(
                "a chunk of the hypothesis starts at token {start}, past its {} tokens",
                h.tokens.len()
            )));
        }
        let bounds: Vec<usize> =
            std::iter::once(0).chain(h.chunk_starts.iter().copied()).chain([h.tokens.len()]).collect();
        let mut parts = Vec::with_capacity(bounds.len() - 1);
        for w in bounds.windows(2) {
            let part = self.decode_target(&h.tokens[w[0].min(w[1])..w[1]])?;
            let part = part.trim();
            if !part.is_empty() {
                parts.push(part.to_string());
            }
        }
        Ok(parts.join(" "))
    }

    /// The text of output ids.
    pub fn decode_target(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer.decode_target(self.encoding(), ids)
    }

    /// The task.
    pub fn task(&self) -> Task {
        self.task
    }

    /// Parsing: how the model writes a tree.
    pub fn tree_format(&self) -> TreeFormat {
        self.tree_format
    }

    /// Translates `srcs` (token ids without BOS/EOS) in buffers of the pool: the one road into
    /// decoding. Returns each sentence's n-best list, best first, in input order. `guides` says
    /// what each sentence's output must hold (empty: nothing asked; otherwise one a sentence).
    /// `events` hears a warning per chunked sentence (naming its 1-based index; a task that
    /// refuses long inputs gets an error instead) and, after every batch, how many of the
    /// non-empty pieces (sentences, or chunks of long ones) are decoded.
    pub(super) fn search(
        &self,
        srcs: &[Vec<u32>],
        guides: &[Guide],
        opts: &DecodeOptions,
        constraint: Option<&dyn Constraint>,
        events: &mut dyn Events,
    ) -> Result<(Vec<Vec<Hypothesis>>, TranslateStats)> {
        let (model, task) = (&self.model, self.task);
        opts.search.validate()?;
        let shortlist = match (opts.use_shortlist, &self.shortlist) {
            (false, _) => None,
            (true, Some(list)) => Some(list),
            (true, None) => {
                return Err(Error::Config(
                    "decoding over a vocabulary shortlist was asked for, but the session has none: give one (--shortlist FILE, made by `transformer shortlist`)".into(),
                ))
            }
        };
        if constraint.is_some() && task.long_inputs() != LongInputs::Refuse {
            return Err(Error::Config(format!("constrained decoding is for parsing, not {}", task.name())));
        }
        let max_src = model.config.max_positions;
        self.check_guides(srcs, guides, &opts.search)?;
        let mut stats = TranslateStats { sentences: srcs.len(), ..Default::default() };
        let pieces = pieces(srcs, max_src, task, &mut stats, events)?;
        // Longest first, so the first batch shows the peak memory; stable for equal lengths.
        let mut order: Vec<usize> = (0..pieces.len()).collect();
        order.sort_by_key(|&p| std::cmp::Reverse(pieces[p].1.len()));
        // Never more workers than pieces: each would start a thread and take buffers for nothing.
        let workers = match opts.workers {
            0 => rayon::current_num_threads(),
            w => w,
        }
        .min(order.len().max(1));
        let batches = plan_batches(&order, |p| pieces[p].1.len(), opts, workers);
        let workers = workers.min(batches.len()).max(1);
        stats.workers = workers;
        // One batch: its search, with the products split over the threads.
        let run = |range: &std::ops::Range<usize>, buffers: &mut Buffers| {
            let batch: Vec<&[u32]> = order[range.clone()].iter().map(|&p| pieces[p].1).collect();
            let remapped = constraint
                .map(|inner| Remapped { inner, map: order[range.clone()].iter().map(|&p| pieces[p].0).collect() });
            let c = remapped.as_ref().map(|r| r as &dyn Constraint);
            let others: Vec<&Transformer> = self.others.iter().collect();
            let mine = (&mut buffers.mine.0, &mut buffers.mine.1);
            // Sampling's draws are keyed by the piece, not its place in a batch: the same for any
            // batching and thread count.
            let keys: Vec<u64> = order[range.clone()].iter().map(|&p| p as u64).collect();
            let guides: Vec<&Guide> = match guides {
                [] => Vec::new(),
                all => order[range.clone()].iter().map(|&p| &all[pieces[p].0]).collect(),
            };
            let inputs = SentenceInputs { keys: &keys, guides: &guides };
            search_batch_ensemble(
                model,
                &others,
                &batch,
                &inputs,
                &opts.search,
                mine,
                &mut buffers.theirs,
                c,
                shortlist,
            )
            .map_err(|e| self.name_member(e))
        };
        let mut piece_hyps: Vec<Vec<Hypothesis>> = vec![Vec::new(); pieces.len()];
        let mut done = 0;
        let finish = |range: &std::ops::Range<usize>, (hyps, rows): (Vec<Vec<Hypothesis>>, usize)| {
            stats.rows_decoded += rows;
            for (&p, h) in order[range.clone()].iter().zip(hyps) {
                piece_hyps[p] = h;
            }
            stats.batches += 1;
            done += range.len();
            events.progress(done, order.len());
            if events.interrupted() {
                return Err(Error::Interrupted { done, total: order.len() });
            }
            Ok(())
        };
        let with_buffers = |f: &mut dyn FnMut(&mut Buffers)| self.with_buffers(f);
        super::workers::run(&batches, workers, with_buffers, run, finish)?;
        let out = join_chunks(srcs.len(), &pieces, piece_hyps, opts, max_src, &mut stats, events);
        Ok((out, stats))
    }

    /// An ensemble member's error as a decoding error that names its checkpoint file.
    fn name_member(&self, e: Error) -> Error {
        match e {
            Error::EnsembleMember { index, source } if index < self.member_files.len() => {
                let why = match *source {
                    Error::Decode(m) => m,
                    other => other.to_string(),
                };
                Error::Decode(format!("{}: {why}", self.member_files[index].display()))
            }
            e => e,
        }
    }

    /// Runs `f` with buffers from the pool, returning them after.
    pub(super) fn with_buffers<R>(&self, f: impl FnOnce(&mut Buffers) -> R) -> R {
        let taken = self.pool.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut buffers = taken.unwrap_or_default();
        let out = f(&mut buffers);
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).push(buffers);
        out
    }

    /// Translates token ids (without BOS/EOS): each sentence's n-best list, best first, in input
    /// order, and the counts for a speed report. `events` hears a warning per chunked sentence and
    /// the pieces decoded (sentences, or chunks of long ones) after every batch.
    pub fn translate_ids(
        &self,
        srcs: &[Vec<u32>],
        options: &DecodeOptions,
        events: &mut dyn Events,
    ) -> Result<(Vec<Vec<Hypothesis>>, TranslateStats)> {
        self.search(srcs, &[], options, None, events)
    }

    /// [`Translator::translate_ids`] with what each output must hold: `guides[i]` for sentence i
    /// (a prefix it starts with, phrases it contains; [`Guide`]), one a sentence or none. A
    /// sentence with a guide must fit the model's positions (it is not translated in chunks) and
    /// must not be blank.
    pub fn translate_ids_guided(
        &self,
        srcs: &[Vec<u32>],
        guides: &[Guide],
        options: &DecodeOptions,
        events: &mut dyn Events,
    ) -> Result<(Vec<Vec<Hypothesis>>, TranslateStats)> {
        self.search(srcs, guides, options, None, events)
    }

    /// Checks that `guides` fit their sentences `srcs` under `search`, as [`Translator::translate_ids_guided`]
    /// would before decoding: one a sentence (or none at all); a sentence with a guide neither
    /// blank nor longer than the model's positions (its chunks would share one prefix and one set
    /// of phrases); each guide's tokens in the vocabulary, none of them special, and room for the
    /// prefix and every phrase within the output's length limit ([`Guide`]).
    pub fn check_guides(&self, srcs: &[Vec<u32>], guides: &[Guide], search: &BeamConfig) -> Result<()> {
        if !guides.is_empty() && guides.len() != srcs.len() {
            return Err(Error::Input(format!(
                "{} prefixes and phrase lists for {} sentences: give one a sentence",
                guides.len(),
                srcs.len()
            )));
        }
        let max_src = self.model.config.max_positions;
        // The output's cap, as the search sets it: every model's positions less the EOS.
        let cap = self.others.iter().map(|m| m.config.max_positions).fold(max_src, usize::min) - 1;
        for (i, (s, g)) in srcs.iter().zip(guides).enumerate().filter(|(_, (_, g))| !g.is_empty()) {
            if s.is_empty() {
                return Err(Error::Input(format!("sentence {}: a blank line cannot take a prefix or phrases", i + 1)));
            }
            if s.len() > max_src {
                return Err(Error::Input(format!(
                    "sentence {}: {} tokens exceed the model's max_positions = {max_src}, so it would be translated \
                     in chunks, which a prefix or phrases cannot apply to",
                    i + 1,
                    s.len()
                )));
            }
            g.validate(i, self.model.config.vocab_size, search.max_len(s.len()).min(cap))?;
        }
        Ok(())
    }

    /// The guide of a prefix and phrases given as target text (the prefix tokenized as the start
    /// of a target line, each phrase as a word within one; none: an empty guide).
    pub fn encode_guide(&self, prefix: Option<&str>, phrases: &[String]) -> Result<Guide> {
        let prefix = match prefix {
            Some(p) if !is_blank(p) => self.encode_target(p)?,
            _ => Vec::new(),
        };
        // A phrase stands inside the output, after a space: our byte-level BPE spells a word after
        // a space with the space (`Ġword`), so a phrase is encoded after one (SentencePiece
        // marks the start of every word alike, `▁word`, wherever it stands).
        let inside = |p: &String| match self.tokenizer.bpe() {
            Some(_) => self.encode_target(&format!(" {}", p.trim_start())),
            None => self.encode_target(p),
        };
        let phrases = phrases.iter().map(inside).collect::<Result<Vec<_>>>()?;
        Ok(Guide { prefix, phrases })
    }

    /// Translates lines of text: each line's n-best list of detokenised outputs, in input order,
    /// and the counts for a speed report; `events` as for [`Translator::translate_ids`].
    pub fn translate(
        &self,
        lines: &[String],
        options: &DecodeOptions,
        events: &mut dyn Events,
    ) -> Result<(Vec<Vec<Translation>>, TranslateStats)> {
        self.translate_guided(lines, &[], options, events)
    }

    /// [`Translator::translate`] with a guide a line ([`Translator::translate_ids_guided`];
    /// [`Translator::encode_guide`] makes one from text).
    pub fn translate_guided(
        &self,
        lines: &[String],
        guides: &[Guide],
        options: &DecodeOptions,
        events: &mut dyn Events,
    ) -> Result<(Vec<Vec<Translation>>, TranslateStats)> {
        let srcs = lines.iter().map(|l| self.encode_source(l)).collect::<Result<Vec<_>>>()?;
        let (hyps, stats) = self.translate_ids_guided(&srcs, guides, options, events)?;
        let out = hyps
            .into_iter()
            .map(|nbest| {
                nbest
                    .into_iter()
                    .map(|h| Ok(Translation { text: self.text(&h)?, hypothesis: h }))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((out, stats))
    }

    /// Every attention weight of one sentence pair (token ids without BOS/EOS), from a
    /// teacher-forced forward pass: for the heatmaps of Figures 3–5.
    pub fn attention(&self, src: &[u32], tgt: &[u32]) -> Result<AttentionWeights> {
        let c = &self.model.config;
        if src.is_empty() {
            return Err(Error::Input("the source sentence is empty: give a sentence to look at".into()));
        }
        if src.len() > c.max_positions || tgt.len() > c.max_positions {
            return Err(Error::Input(format!(
                "the sentence is longer than the model's max_positions = {}",
                c.max_positions
            )));
        }
        // An output `end_at_limit` cut at the last position: every token's step was taken, the
        // EOS step never was (its weights are zeros).
        if tgt.len() == c.max_positions {
            let fed = &tgt[..tgt.len() - 1];
            return self
                .with_buffers(|b| attention_weights(&self.model, src, fed, &mut b.mine.0))
                .map(AttentionWeights::with_untaken_last_step);
        }
        self.with_buffers(|b| attention_weights(&self.model, src, tgt, &mut b.mine.0))
    }
}
