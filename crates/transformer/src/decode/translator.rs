//! The translator session, [`Translator`]: a model prepared for inference (its linear maps in
//! their compute layout, `model::Prepared`), its vocabulary and a pool of reusable decoder states, built once from a checkpoint and shared by every front
//! end (the CLI's `translate`, `evaluate` and `attention`, a server). It is `Send + Sync`: threads
//! may call it at once, each call taking its own state from the pool.
//!
//! Translating many sentences: length-sorted batches under a token budget, results in input
//! order, empty sources giving empty outputs, and sources longer than the model's positions split
//! into chunks that are translated one after the other (with a warning) rather than cut, or
//! refused, as the [`Task`] says.

use super::beam::{BeamConfig, Constraint, Hypothesis, Remapped};
use super::scorer::search_batch_ensemble;
use super::tree_constraint::TreeConstraint;
use crate::data::batching::BatchConfig;
use crate::data::bpe::Bpe;
use crate::data::tokenizer::{Side, Tokenizer};
use crate::data::trees::{delinearise, is_well_formed, retag_deleted_punctuation, with_words, Tree, TreeFormat};
use crate::error::{Error, Result};
use crate::eval::attention::{attention_weights, AttentionWeights};
use crate::eval::perplexity::{self, Totals};
use crate::events::Events;
use crate::model::incremental::DecoderState;
use crate::model::{DecoderKernels, Transformer, Workspace};
use crate::precision::Precision;
use crate::task::{LongInputs, Task};
use std::path::Path;
use std::sync::Mutex;

/// How to batch and search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeOptions {
    /// Search settings.
    pub search: BeamConfig,
    /// Source tokens per batch, padding included (each sentence is decoded as `beam` rows).
    pub max_tokens: usize,
    /// Sentences per batch.
    pub max_sentences: usize,
    /// Batches decoded at once, each on a thread of its own (0: as many as rayon's pool has
    /// threads; 1: one batch at a time, its products split over the pool). The workers share
    /// `max_tokens` and `max_sentences`: each batch gets a `workers`-th of them. The results are
    /// those of the same batches one at a time; other batches change scores by float rounding, so
    /// with the default the last digits can differ between machines with other thread counts
    /// (give a fixed number for outputs that must match to the bit).
    pub workers: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { search: BeamConfig::translation(), max_tokens: 2048, max_sentences: 128, workers: 0 }
    }
}

/// Counts for a speed report.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TranslateStats {
    /// Sentences translated (empty ones included).
    pub sentences: usize,
    /// Source tokens.
    pub src_tokens: usize,
    /// Output tokens of the best hypotheses (EOS not counted).
    pub out_tokens: usize,
    /// Sentences split into chunks because they exceed the model's positions.
    pub chunked: usize,
    /// Sentences whose best output was stopped by the model's positions before the search's
    /// length limit ([`BeamConfig::stopped_by_positions`]); each is also warned about.
    pub capped: usize,
    /// Batches decoded.
    pub batches: usize,
    /// Decoder rows (hypotheses) summed over steps: the search's work.
    pub rows_decoded: usize,
    /// Batches decoded at once, each on its own thread ([`DecodeOptions::workers`]); 1 when the
    /// batches ran one after the other.
    pub workers: usize,
}

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

/// How to parse.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParseOptions {
    /// Batching and search (§6.3: beam 21, α 0.3, input length + 300).
    pub decode: DecodeOptions,
    /// Restrict the search to sequences that can still become a valid tree (`--constrained`, a
    /// named deviation).
    pub constrained: bool,
    /// Give `(TOP)` with a warning for a sentence longer than the model's positions, instead of an
    /// error.
    pub skip_long: bool,
    /// With `constrained`, in [`Translator::parse_and_score`] only: every leaf's tag forced to the
    /// gold tree's (`--oracle-tags`). Not a parser: a measurement of the most better tagging can
    /// buy.
    pub oracle_tags: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            decode: DecodeOptions { search: BeamConfig::parsing(), ..Default::default() },
            constrained: false,
            skip_long: false,
            oracle_tags: false,
        }
    }
}

/// What [`Translator::parse_and_score`] gives: the parses, the decoding's statistics, and EVALB's
/// report against the gold trees.
#[derive(Clone, Debug)]
pub struct ScoredParses {
    /// One parse per sentence, in order.
    pub parses: Vec<Parse>,
    /// What the decoding did.
    pub stats: TranslateStats,
    /// EVALB (COLLINS.prm) of the parses against the gold trees.
    pub report: crate::eval::evalb::Report,
}

impl ScoredParses {
    /// How many outputs needed repair.
    pub fn malformed(&self) -> usize {
        self.parses.iter().filter(|p| p.malformed).count()
    }
}

/// One parsed sentence.
#[derive(Clone, Debug, PartialEq)]
pub struct Parse {
    /// The tree, over exactly the sentence's words (`(TOP)` for a skipped sentence).
    pub tree: Tree,
    /// Whether the model's output was not a well-formed linearised tree over the words (brackets
    /// that do not match, a leaf without its word, a word other than the input's, too many or too
    /// few leaves) and needed repair.
    pub malformed: bool,
    /// Whether the sentence was empty or too long and not parsed.
    pub skipped: bool,
    /// The model's output.
    pub hypothesis: Hypothesis,
}

impl Parse {
    fn skipped() -> Parse {
        Parse {
            tree: Tree::node("TOP", Vec::new()),
            malformed: false,
            skipped: true,
            hypothesis: Hypothesis::default(),
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
struct Buffers {
    mine: (Workspace, DecoderState),
    theirs: Vec<(Workspace, DecoderState)>,
}

impl Buffers {
    fn all(&self) -> impl Iterator<Item = &(Workspace, DecoderState)> {
        std::iter::once(&self.mine).chain(&self.theirs)
    }
}

/// A translator session: the model prepared for inference, its vocabulary and a pool of decoder
/// states (see the module docs).
pub struct Translator {
    model: Transformer,
    vocab: Tokenizer,
    task: Task,
    tree_format: TreeFormat,
    /// The other models of an ensemble ([`Translator::load_ensemble`]), prepared too; empty for
    /// one model.
    others: Vec<Transformer>,
    /// The checkpoint files of an ensemble's models, in order, to name the one that fails; empty
    /// for one model.
    member_files: Vec<std::path::PathBuf>,
    /// Buffers of finished calls, taken by the next ones (a call with none free makes its own).
    pool: Mutex<Vec<Buffers>>,
}

impl Translator {
    /// A session over a model and the vocabulary it was trained with (a [`Bpe`] model, or the
    /// tokenizer of an imported model).
    pub fn new(model: Transformer, vocab: impl Into<Tokenizer>, options: SessionOptions) -> Result<Self> {
        let vocab = vocab.into();
        if model.config.vocab_size != vocab.vocab_size() {
            return Err(Error::Mismatch(format!(
                "the model has a vocabulary of {} but the tokenizer has {}",
                model.config.vocab_size,
                vocab.vocab_size()
            )));
        }
        if model.config.source_vocab_size != vocab.source_vocab_size() {
            return Err(Error::Mismatch(format!(
                "the model's source vocabulary is {:?} but the tokenizer's is {:?} (None: shared with the target)",
                model.config.source_vocab_size,
                vocab.source_vocab_size()
            )));
        }
        let mut model = model.prepare_with(options.precision, options.kernels)?;
        match vocab.bpe() {
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
            vocab,
            task,
            tree_format,
            others: Vec::new(),
            member_files: Vec::new(),
            pool: Mutex::new(Vec::new()),
        })
    }

    /// Loads a checkpoint and the tokenizer it was trained with (a BPE model of ours, or the
    /// tokenizer file `transformer import` wrote), checking that they belong together (by the
    /// vocabulary's hash).
    pub fn load(checkpoint: &Path, tokenizer: &Path, mut options: SessionOptions) -> Result<Self> {
        let vocab = Tokenizer::load(tokenizer)?;
        let int8 = crate::checkpoint::is_int8(checkpoint)?;
        if int8 && options.precision != Precision::Int8 {
            return Err(Error::Mismatch(format!(
                "{} is an int8 checkpoint (from `transformer quantize`): decode it with --precision int8, or decode the f32 \
                 checkpoint it was made from at {}",
                checkpoint.display(),
                options.precision
            )));
        }
        // The model is prepared as it is read: its f32 weights are never all in memory at once.
        let (ckpt, model) = if int8 {
            let (mut ckpt, codes) = crate::checkpoint::load_int8(checkpoint)?;
            let params = std::mem::take(&mut ckpt.params);
            let model = Transformer::from_params(ckpt.config.clone(), params)?.with_int8_codes(&codes)?;
            (ckpt, model)
        } else {
            crate::checkpoint::load_prepared(checkpoint, options.precision, options.kernels)?
        };
        if ckpt.vocab_hash != vocab.hash() {
            return Err(Error::Mismatch(format!(
                "{} was trained with vocabulary {} but {} is {}: pass the BPE model the checkpoint was trained with",
                checkpoint.display(),
                ckpt.vocab_hash,
                tokenizer.display(),
                vocab.hash()
            )));
        }
        let stored = crate::checkpoint::task_of(checkpoint, &ckpt)?;
        if stored != options.task {
            return Err(Error::Mismatch(format!(
                "{} is a {} model, not a {} one{}",
                checkpoint.display(),
                stored.name(),
                options.task.name(),
                if stored == Task::Parsing { ": use `transformer parse`" } else { "" }
            )));
        }
        options.tree_format = crate::checkpoint::tree_format_of(checkpoint, &ckpt)?;
        Self::new(model, vocab, options)
    }

    /// An ensemble session (`--checkpoint A --checkpoint B …`): the checkpoints, all trained with the
    /// tokenizer `tokenizer` (checked first, naming the two files that differ) and for the same task
    /// and tree format, decoded together: at every step of one beam search the models'
    /// log-probabilities are averaged. One checkpoint is [`Translator::load`].
    pub fn load_ensemble(
        checkpoints: &[std::path::PathBuf],
        tokenizer: &Path,
        options: SessionOptions,
    ) -> Result<Self> {
        let Some(first) = checkpoints.first() else {
            return Err(Error::Config("no checkpoint to load".into()));
        };
        let hash = crate::checkpoint::read_vocab_hash(first)?;
        for c in &checkpoints[1..] {
            let h = crate::checkpoint::read_vocab_hash(c)?;
            if h != hash {
                return Err(Error::Mismatch(format!(
                    "{} and {} were trained with different vocabularies ({hash} and {h}): the models of an \
                     ensemble must share one",
                    first.display(),
                    c.display()
                )));
            }
        }
        let mut main = Translator::load(first, tokenizer, options)?;
        for c in &checkpoints[1..] {
            let other = Translator::load(c, tokenizer, options)?;
            if other.model.config.max_positions != main.model.config.max_positions {
                return Err(Error::Mismatch(format!(
                    "{} has max_positions = {} but {} has {}: the models of an ensemble read and write the same lengths",
                    first.display(),
                    main.model.config.max_positions,
                    c.display(),
                    other.model.config.max_positions
                )));
            }
            if other.tree_format != main.tree_format {
                return Err(Error::Mismatch(format!(
                    "{} writes trees as {:?} but {} as {:?}: the models of an ensemble must write the same",
                    first.display(),
                    main.tree_format.name(),
                    c.display(),
                    other.tree_format.name()
                )));
            }
            main.others.push(other.model);
        }
        if checkpoints.len() > 1 {
            main.member_files = checkpoints.to_vec();
        }
        Ok(main)
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

    /// The vocabulary.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.vocab
    }

    /// The BPE vocabulary, or an error for an imported model's tokenizer (for what only BPE
    /// models do: parsing).
    pub fn bpe(&self) -> Result<&Bpe> {
        self.vocab
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
    fn encode_source_as_is(&self, text: &str) -> Result<Vec<u32>> {
        match &self.vocab {
            Tokenizer::Bpe(b) => self.task.encode_source(b, text),
            Tokenizer::Marian(m) => Ok(m.encode_source(text)),
        }
    }

    /// Token ids of a target line (no BOS/EOS).
    pub fn encode_target(&self, text: &str) -> Result<Vec<u32>> {
        match &self.vocab {
            Tokenizer::Bpe(b) => self.task.encode_target(self.tree_format, b, text),
            Tokenizer::Marian(m) => Ok(m.encode_target(text)),
        }
    }

    /// The text of a hypothesis: its ids as text, or, for a sentence translated in chunks, each
    /// chunk's text joined to the next with a space.
    pub fn text(&self, h: &Hypothesis) -> Result<String> {
        if h.chunk_starts.is_empty() {
            return self.decode_target(&h.tokens);
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
        match &self.vocab {
            Tokenizer::Bpe(b) => self.task.decode_target(self.tree_format, b, ids),
            Tokenizer::Marian(m) => Ok(m.decode_target(ids)),
        }
    }

    /// The task.
    pub fn task(&self) -> Task {
        self.task
    }

    /// Parsing: how the model writes a tree.
    pub fn tree_format(&self) -> TreeFormat {
        self.tree_format
    }

    /// Translates `srcs` (token ids without BOS/EOS) in buffers of the pool. Returns each sentence's n-best list, best first, in input order.
    /// `events` hears a warning per chunked sentence (naming its 1-based index; a task that refuses
    /// long inputs gets an error instead) and, after every batch, how many of the non-empty pieces
    /// (sentences, or chunks of long ones) are decoded.
    fn search(
        &self,
        srcs: &[Vec<u32>],
        opts: &DecodeOptions,
        constraint: Option<&dyn Constraint>,
        events: &mut dyn Events,
    ) -> Result<(Vec<Vec<Hypothesis>>, TranslateStats)> {
        let (model, task) = (&self.model, self.task);
        opts.search.validate()?;
        if constraint.is_some() && task.long_inputs() != LongInputs::Refuse {
            return Err(Error::Config(format!("constrained decoding is for parsing, not {}", task.name())));
        }
        let max_src = model.config.max_positions;
        let mut stats = TranslateStats { sentences: srcs.len(), ..Default::default() };
        let pieces = self.pieces(srcs, &mut stats, events)?;
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
            search_batch_ensemble(model, &others, &batch, &opts.search, mine, &mut buffers.theirs, c).map_err(|e| {
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
            })
        };
        let mut piece_hyps: Vec<Vec<Hypothesis>> = vec![Vec::new(); pieces.len()];
        let mut done = 0;
        let mut finish = |range: &std::ops::Range<usize>, hyps: Vec<Vec<Hypothesis>>, rows: usize| {
            stats.rows_decoded += rows;
            for (&p, h) in order[range.clone()].iter().zip(hyps) {
                piece_hyps[p] = h;
            }
            stats.batches += 1;
            done += range.len();
            events.progress(done, order.len());
        };
        if workers <= 1 {
            self.with_buffers(|buffers| -> Result<()> {
                for range in &batches {
                    let (hyps, rows) = run(range, buffers)?;
                    finish(range, hyps, rows);
                }
                Ok(())
            })?;
        } else {
            // Batches at once, one per worker thread, each decoded on that thread alone: a step's
            // products are too small to split well over threads (every one would wait for the
            // slowest), while whole batches need no synchronisation at all. Each worker takes the
            // next batch when it is done (longest first), in buffers of its own from the pool.
            let next = std::sync::atomic::AtomicUsize::new(0);
            let stop = std::sync::atomic::AtomicBool::new(false);
            let profile = crate::kernels::cpu::profile::Profile::current();
            std::thread::scope(|s| -> Result<()> {
                let (tx, rx) = std::sync::mpsc::channel();
                for _ in 0..workers {
                    let (tx, next, stop, batches, run, profile) = (tx.clone(), &next, &stop, &batches, &run, &profile);
                    s.spawn(move || {
                        let work = || {
                            self.with_buffers(|buffers| {
                                use std::sync::atomic::Ordering::Relaxed;
                                while !stop.load(Relaxed) {
                                    let i = next.fetch_add(1, Relaxed);
                                    let Some(range) = batches.get(i) else { break };
                                    // A panic is caught here and carried to the calling thread
                                    // (which raises it again), stopping the other workers.
                                    let r =
                                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(range, buffers)));
                                    if !matches!(r, Ok(Ok(_))) {
                                        stop.store(true, Relaxed);
                                    }
                                    if tx.send((i, r)).is_err() {
                                        break;
                                    }
                                }
                            })
                        };
                        let one = match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
                            Ok(pool) => pool,
                            Err(e) => {
                                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                                let e = Error::Decode(format!("starting a decoding thread: {e}"));
                                let _ = tx.send((usize::MAX, Ok(Err(e))));
                                return;
                            }
                        };
                        one.install(|| match profile {
                            Some(p) => p.install(work),
                            None => work(),
                        })
                    });
                }
                drop(tx);
                // The error of the earliest batch that failed, as one batch at a time would give.
                let mut first_error: Option<(usize, Error)> = None;
                let mut panic = None;
                for (i, r) in rx {
                    match r {
                        Ok(Ok((hyps, rows))) => finish(&batches[i], hyps, rows),
                        Ok(Err(e)) => {
                            if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                                first_error = Some((i, e));
                            }
                        }
                        Err(payload) => {
                            panic.get_or_insert(payload);
                        }
                    }
                }
                if let Some(payload) = panic {
                    std::panic::resume_unwind(payload);
                }
                first_error.map_or(Ok(()), |(_, e)| Err(e))
            })?;
        }
        let out = join_chunks(srcs.len(), &pieces, piece_hyps, opts, max_src, &mut stats, events);
        Ok((out, stats))
    }

    /// The non-empty pieces of `srcs` to decode, as (sentence, ids): a sentence longer than the
    /// model's positions is cut into even chunks (with a warning), or refused by a task that never
    /// splits its input.
    fn pieces<'a>(
        &self,
        srcs: &'a [Vec<u32>],
        stats: &mut TranslateStats,
        events: &mut dyn Events,
    ) -> Result<Vec<(usize, &'a [u32])>> {
        let (max_src, task) = (self.model.config.max_positions, self.task);
        // Pieces: (sentence, chunk) → ids. Most sentences are one piece.
        let mut pieces: Vec<(usize, &[u32])> = Vec::with_capacity(srcs.len());
        for (i, s) in srcs.iter().enumerate() {
            stats.src_tokens += s.len();
            if s.len() > max_src && task.long_inputs() == LongInputs::Refuse {
                return Err(Error::Decode(format!(
                    "sentence {}: {} tokens exceed the model's max_positions = {max_src}; a {} model cannot split its input",
                    i + 1,
                    s.len(),
                    task.name()
                )));
            }
            if s.len() > max_src {
                let n = s.len().div_ceil(max_src);
                let size = s.len().div_ceil(n);
                events.warn(&format!(
                    "sentence {}: {} tokens exceed the model's max_positions = {max_src}; translated in {n} chunks of ≤ {size} tokens, joined",
                    i + 1,
                    s.len()
                ));
                stats.chunked += 1;
                pieces.extend(s.chunks(size).map(|c| (i, c)));
            } else if !s.is_empty() {
                pieces.push((i, s));
            }
        }
        Ok(pieces)
    }

    /// Runs `f` with buffers from the pool, returning them after.
    fn with_buffers<R>(&self, f: impl FnOnce(&mut Buffers) -> R) -> R {
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
        self.search(srcs, options, None, events)
    }

    /// Translates lines of text: each line's n-best list of detokenised outputs, in input order,
    /// and the counts for a speed report; `events` as for [`Translator::translate_ids`].
    pub fn translate(
        &self,
        lines: &[String],
        options: &DecodeOptions,
        events: &mut dyn Events,
    ) -> Result<(Vec<Vec<Translation>>, TranslateStats)> {
        let srcs = lines.iter().map(|l| self.encode_source(l)).collect::<Result<Vec<_>>>()?;
        let (hyps, stats) = self.translate_ids(&srcs, options, events)?;
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

    /// Teacher-forced scores of `refs` given `srcs` (lines of text, aligned), without label
    /// smoothing: the perplexity of Table 3. Pairs that do not fit the model's positions are left
    /// out, and `events` hears a warning naming each (1-based line).
    pub fn perplexity(&self, srcs: &[String], refs: &[String], events: &mut dyn Events) -> Result<Totals> {
        let mut pairs = self.encode_pairs(srcs, refs)?;
        let (keep, too_long) = perplexity::scorable(&self.model, &pairs);
        for i in too_long {
            events.warn(&format!(
                "line {}: longer than max_positions = {}; left out of the perplexity",
                i + 1,
                self.model.config.max_positions
            ));
        }
        let pairs: Vec<(Vec<u32>, Vec<u32>)> = keep.into_iter().map(|i| std::mem::take(&mut pairs[i])).collect();
        let budget = BatchConfig { max_src_tokens: 4096, max_tgt_tokens: 4096 };
        self.with_buffers(|b| perplexity::score(&self.model, &pairs, &budget, 0.0, &mut b.mine.0))
    }

    /// Line-aligned sources and references as token ids, for scoring (no BOS/EOS added).
    fn encode_pairs(&self, srcs: &[String], refs: &[String]) -> Result<Vec<(Vec<u32>, Vec<u32>)>> {
        if srcs.len() != refs.len() {
            return Err(Error::Input(format!("{} sources but {} references", srcs.len(), refs.len())));
        }
        srcs.iter().zip(refs).map(|(s, r)| Ok((self.encode_source_as_is(s)?, self.encode_target(r)?))).collect()
    }

    /// Each pair's log-probability under the model (the first of an ensemble), Σ log p(target
    /// token) in natural log with EOS included, teacher-forced: what Marian's `score` prints, one
    /// number per pair in input order. A pair the model cannot score (a source longer than its
    /// positions, a target that with EOS is, or an empty source) is an error naming its line.
    pub fn log_probs(&self, srcs: &[String], refs: &[String]) -> Result<Vec<perplexity::PairScore>> {
        self.log_probs_sided(srcs, refs).map_err(|(_, e)| e)
    }

    /// [`log_probs`](Self::log_probs), its error paired with the side at fault (`None` when the
    /// two do not align), so a caller names the right file.
    pub fn log_probs_sided(
        &self,
        srcs: &[String],
        refs: &[String],
    ) -> std::result::Result<Vec<perplexity::PairScore>, (Option<Side>, Error)> {
        if srcs.len() != refs.len() {
            return Err((None, Error::Input(format!("{} sources but {} references", srcs.len(), refs.len()))));
        }
        let mut pairs = Vec::with_capacity(srcs.len());
        for (i, (s, r)) in srcs.iter().zip(refs).enumerate() {
            let at = |side, e: Error| (Some(side), Error::Input(format!("line {}: {e}", i + 1)));
            let s = self.encode_source_as_is(s).map_err(|e| at(Side::Source, e))?;
            let r = self.encode_target(r).map_err(|e| at(Side::Target, e))?;
            pairs.push((s, r));
        }
        let (keep, _) = perplexity::scorable(&self.model, &pairs);
        if keep.len() < pairs.len() {
            let max = self.model.config.max_positions;
            // `keep` is the sorted indices kept: the first one missing is where it first differs.
            let i = (0..pairs.len()).find(|&i| keep.get(i) != Some(&i)).expect("one is left out");
            let (s, t) = &pairs[i];
            let (side, why) = if s.is_empty() {
                (Side::Source, "its source is empty or blank (nothing to condition on)".to_string())
            } else if s.len() > max {
                (Side::Source, format!("its source has {} tokens, more than max_positions = {max} allows", s.len()))
            } else {
                (
                    Side::Target,
                    format!("its target has {} tokens with EOS, more than max_positions = {max} allows", t.len() + 1),
                )
            };
            return Err((Some(side), Error::Input(format!("line {}: cannot be scored: {why}", i + 1))));
        }
        let budget = BatchConfig { max_src_tokens: 4096, max_tgt_tokens: 4096 };
        self.with_buffers(|b| perplexity::log_probs(&self.model, &pairs, &budget, &mut b.mine.0)).map_err(|e| (None, e))
    }

    /// Parses sentences (words separated by spaces, already tokenised as the treebank's) into trees
    /// over exactly their words, in input order, with the counts for a speed report. A sentence
    /// longer than the model's positions is an error naming its line, or with
    /// `options.skip_long` gives the tree `(TOP)` and a warning; so does an empty line. `events`
    /// hears the warnings, and the sentences parsed after every batch.
    pub fn parse(
        &self,
        sentences: &[String],
        options: &ParseOptions,
        events: &mut dyn Events,
    ) -> Result<(Vec<Parse>, TranslateStats)> {
        if options.oracle_tags {
            return Err(Error::Config("oracle tags come from gold trees: they apply to scoring against them".into()));
        }
        self.parse_inner(sentences, options, None, events)
    }

    /// [`Translator::parse`], with the gold trees' tags forced on every leaf when
    /// `gold` is given (`options.oracle_tags`).
    fn parse_inner(
        &self,
        sentences: &[String],
        options: &ParseOptions,
        gold: Option<&[Tree]>,
        events: &mut dyn Events,
    ) -> Result<(Vec<Parse>, TranslateStats)> {
        if options.oracle_tags && !options.constrained {
            return Err(Error::Config("oracle tags are forced by constrained decoding: add --constrained".into()));
        }
        if self.task != Task::Parsing {
            return Err(Error::Mismatch(format!("parsing needs a parsing model, not a {} one", self.task.name())));
        }
        let max = self.model.config.max_positions;
        let mut out: Vec<Parse> = Vec::with_capacity(sentences.len());
        let (mut idx, mut srcs, mut pieces, mut gold_tags) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, line) in sentences.iter().enumerate() {
            let w: Vec<&str> = line.split_whitespace().collect();
            out.push(Parse::skipped());
            if w.is_empty() || is_blank(line) {
                events.warn(&format!("line {}: empty; its tree is (TOP)", i + 1));
                continue;
            }
            let ids = self.encode_source(&w.join(" "))?;
            if ids.len() > max {
                let what = format!(
                    "line {}: {} words make {} tokens, more than the model's max_positions = {max}",
                    i + 1,
                    w.len(),
                    ids.len()
                );
                if !options.skip_long {
                    return Err(Error::Decode(format!(
                        "{what}; a sentence is never split for parsing (give --skip-long to output (TOP) for it)"
                    )));
                }
                events.warn(&format!("{what}; skipped, its tree is (TOP)"));
                continue;
            }
            idx.push(i);
            srcs.push(ids);
            if options.constrained {
                pieces.push(w.iter().map(|w| self.bpe()?.encode(&format!(" {w}"))).collect::<Result<Vec<_>>>()?);
            }
            if let Some(gold) = gold.filter(|_| options.oracle_tags) {
                let bpe = self.bpe()?;
                let leaves = gold[i].leaves();
                if leaves.len() != w.len() {
                    return Err(Error::Input(format!(
                        "line {}: {} words but its gold tree has {} leaves: oracle tags need the gold trees' own words",
                        i + 1,
                        w.len(),
                        leaves.len()
                    )));
                }
                gold_tags.push(leaves.iter().map(|l| bpe.id_of(&crate::data::encoding::tag_entry(&l.label))).collect());
            }
        }
        let constraint = match options.constrained {
            true => Some(TreeConstraint::new(self.bpe()?, pieces, self.tree_format)?.with_gold_tags(gold_tags)),
            false => None,
        };
        let c = constraint.as_ref().map(|c| c as &dyn Constraint);
        let (hyps, stats) = self.search(&srcs, &options.decode, c, events)?;
        for (&i, nbest) in idx.iter().zip(hyps) {
            let h = nbest.into_iter().next().unwrap_or_default();
            let text = self.decode_target(&h.tokens)?;
            let mut tokens: Vec<String> = text.split_whitespace().map(str::to_string).collect();
            let w: Vec<&str> = sentences[i].split_whitespace().collect();
            if !self.tree_format.words_in_target() {
                tokens = with_words(&tokens, &w);
            }
            let malformed = !is_well_formed(&tokens, &w);
            let mut tree = delinearise(&tokens, &w);
            retag_deleted_punctuation(&mut tree);
            out[i] = Parse { tree, malformed, skipped: false, hypothesis: h };
        }
        Ok((out, stats))
    }

    /// Parses `sentences` like [`Translator::parse`] and scores the trees against
    /// `gold` (one tree per sentence, in order) with EVALB's COLLINS.prm: what validation, the
    /// `evaluate` command and the parsing quick start all report.
    pub fn parse_and_score(
        &self,
        sentences: &[String],
        gold: &[Tree],
        options: &ParseOptions,
        events: &mut dyn Events,
    ) -> Result<ScoredParses> {
        if sentences.len() != gold.len() {
            return Err(Error::Input(format!(
                "{} sentences but {} gold trees: they must be aligned, one tree per sentence",
                sentences.len(),
                gold.len()
            )));
        }
        let (parses, stats) = self.parse_inner(sentences, options, Some(gold), events)?;
        let test: Vec<Tree> = parses.iter().map(|p| p.tree.clone()).collect();
        let report = crate::eval::evalb::score_trees(gold, &test)?;
        Ok(ScoredParses { parses, stats, report })
    }

    /// Every attention weight of one sentence pair (token ids without BOS/EOS), from a
    /// teacher-forced forward pass: for the heatmaps of Figures 3–5.
    pub fn attention(&self, src: &[u32], tgt: &[u32]) -> Result<AttentionWeights> {
        let c = &self.model.config;
        if src.is_empty() {
            return Err(Error::Input("the source sentence is empty: give a sentence to look at".into()));
        }
        if src.len() > c.max_positions || tgt.len() + 1 > c.max_positions {
            return Err(Error::Input(format!(
                "the sentence is longer than the model's max_positions = {}",
                c.max_positions
            )));
        }
        self.with_buffers(|b| attention_weights(&self.model, src, tgt, &mut b.mine.0))
    }
}

/// The batches of `order` (pieces, longest first), as ranges of it: each as many pieces as fit in
/// `max_tokens` padded source tokens, at most `max_sentences`. Several `workers` share that
/// budget (each batch gets a `workers`-th of it, so the rows decoded at once, and the memory they
/// hold, stay about those of one batch; the smaller batches were also the faster, 2 workers on 2
/// cores), and a batch holds at most a quarter of a worker's share of the pieces, so that the
/// workers end close together.
fn plan_batches(
    order: &[usize],
    len: impl Fn(usize) -> usize,
    opts: &DecodeOptions,
    workers: usize,
) -> Vec<std::ops::Range<usize>> {
    let (mut max_tokens, mut max_sentences) = (opts.max_tokens, opts.max_sentences.max(1));
    if workers > 1 {
        max_tokens /= workers;
        max_sentences = (max_sentences / workers).min(order.len().div_ceil(4 * workers)).max(1);
    }
    let mut batches = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let longest = len(order[start]);
        let fit = (max_tokens / longest.max(1)).clamp(1, max_sentences);
        let end = (start + fit).min(order.len());
        batches.push(start..end);
        start = end;
    }
    batches
}

/// Each sentence's n-best list from its pieces' (`pieces` in sentence order): chunks joined rank by
/// rank, an empty source as `nbest` empty outputs; a warning for each output the model's positions
/// cut short.
fn join_chunks(
    sentences: usize,
    pieces: &[(usize, &[u32])],
    piece_hyps: Vec<Vec<Hypothesis>>,
    opts: &DecodeOptions,
    max_src: usize,
    stats: &mut TranslateStats,
    events: &mut dyn Events,
) -> Vec<Vec<Hypothesis>> {
    // Join chunks rank by rank (a chunk with fewer hypotheses repeats its last).
    let empty = Hypothesis::default();
    let mut out: Vec<Vec<Hypothesis>> = vec![Vec::new(); sentences];
    let mut p = 0;
    for (i, o) in out.iter_mut().enumerate() {
        let first = p;
        while p < pieces.len() && pieces[p].0 == i {
            p += 1;
        }
        let chunks = &piece_hyps[first..p];
        if chunks.is_empty() {
            // An empty source has one output, the empty one; the n-best list still has its
            // n entries, so that every sentence has as many as asked for.
            o.extend(std::iter::repeat_n(empty.clone(), opts.search.nbest.max(1)));
            continue;
        }
        let ranks = chunks.iter().map(|c| c.len()).max().unwrap_or(0);
        for k in 0..ranks {
            let mut joined = empty.clone();
            for (j, c) in chunks.iter().enumerate() {
                let h = &c[k.min(c.len() - 1)];
                if j > 0 {
                    joined.chunk_starts.push(joined.tokens.len());
                }
                joined.tokens.extend_from_slice(&h.tokens);
                joined.log_prob += h.log_prob;
                joined.score += h.score;
            }
            o.push(joined);
        }
        stats.out_tokens += o[0].tokens.len();
        if chunks.iter().zip(pieces[first..p].iter()).any(|(c, (_, src))| {
            c.first().is_some_and(|h| opts.search.stopped_by_positions(src.len(), h.tokens.len(), max_src))
        }) {
            events.warn(&format!(
                "sentence {}: the output reached the model's limit of {} tokens (max_positions = {max_src}) before \
                 ending, and stops there: the length limit of this search (source × {} + {}) lies beyond what the \
                 model can write",
                i + 1,
                max_src - 1,
                opts.search.max_len_a,
                opts.search.max_len_b
            ));
            stats.capped += 1;
        }
    }
    out
}
