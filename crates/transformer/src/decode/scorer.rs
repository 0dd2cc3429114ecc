//! The model as a beam-search [`Scorer`]: incremental decoding (§3.2.3's masked decoder, one
//! position a step) over an encoded batch, each step's log-softmax normalisers computed in
//! parallel; and [`search_batch`] / [`search_batch_ensemble`], the search of a batch of sources
//! with one model or several.

use super::beam::{beam_search_with, BeamConfig, Constraint, Hypothesis, Scorer, SentenceInputs, StepScores};
use super::guide::Guide;
use super::shortlist::Shortlist;
use crate::error::{Error, Result};
use crate::kernels::cpu::profile::{self, Slot};
use crate::kernels::cpu::search::log_sum_exp;
use crate::model::incremental::{DecoderState, Encoded};
use crate::model::{OutputColumns, Transformer, Workspace};
use crate::vocab::SPECIAL_TOKENS;
use rayon::prelude::*;

/// The model as a [`Scorer`]: incremental decoding over an encoded batch. With output columns
/// (a vocabulary shortlist) its vocabulary is theirs: token j of the search is `columns.ids()[j]`.
pub(crate) struct ModelScorer<'m> {
    model: &'m Transformer,
    enc: Encoded,
    state: DecoderState,
    log_norms: Vec<f32>,
    columns: Option<OutputColumns>,
    /// The model's ids of the tokens fed, with columns.
    ids: Vec<u32>,
    /// Σ over steps of the rows decoded: the search's work.
    pub(crate) rows_decoded: usize,
}

impl<'m> ModelScorer<'m> {
    /// Encodes `srcs` and prepares to decode up to `max_steps` positions in the buffers of
    /// `state` (from [`ModelScorer::into_state`] of an earlier batch), over the whole vocabulary
    /// or over `columns` only.
    pub fn reusing(
        model: &'m Transformer,
        srcs: &[&[u32]],
        max_steps: usize,
        ws: &mut Workspace,
        mut state: DecoderState,
        columns: Option<OutputColumns>,
    ) -> Result<Self> {
        let enc = model.encode(srcs, ws)?;
        model.restart_decoding(&enc, max_steps, &mut state)?;
        Ok(ModelScorer { model, enc, state, log_norms: Vec::new(), columns, ids: Vec::new(), rows_decoded: 0 })
    }

    /// The decoder state, to reuse its buffers for the next batch.
    pub fn into_state(self) -> DecoderState {
        self.state
    }
}

impl Scorer for ModelScorer<'_> {
    fn vocab(&self) -> usize {
        self.columns.as_ref().map_or(self.model.config.vocab_size, |c| c.ids().len())
    }

    fn step(&mut self, tokens: &[u32]) -> Result<StepScores<'_>> {
        let v = self.vocab();
        let logits = match &self.columns {
            Some(c) => {
                self.ids.clear();
                for &t in tokens {
                    let id = c.ids().get(t as usize).ok_or_else(|| {
                        Error::Batch(format!("token {t} outside the shortlist's {} columns", c.ids().len()))
                    })?;
                    self.ids.push(*id);
                }
                self.model.decode_step_over(&self.enc, &mut self.state, &self.ids, Some(c))?
            }
            None => self.model.decode_step(&self.enc, &mut self.state, tokens)?,
        };
        self.rows_decoded += tokens.len();
        let _t = profile::scope(Slot::Search);
        self.log_norms.resize(logits.len() / v.max(1), 0.0);
        self.log_norms.par_iter_mut().zip(logits.par_chunks(v)).for_each(|(n, row)| *n = log_sum_exp(row));
        if !self.log_norms.iter().all(|n| n.is_finite()) {
            return Err(Error::Decode(
                "the model produced non-finite logits while decoding; the checkpoint is damaged or diverged".into(),
            ));
        }
        Ok(StepScores { scores: logits, log_norms: &self.log_norms })
    }

    fn reorder(&mut self, keep: &[usize]) -> Result<()> {
        self.state.reorder(keep)
    }
}

/// Several models as one [`Scorer`]: an ensemble (`--checkpoint A --checkpoint B …`). At every step
/// each member scores the same rows and the scores are the average of the members'
/// log-probabilities (log p = (1/K) Σₖ log pₖ, as Marian's ensembles with equal weights), given with
/// zero normalisers. Members must share the vocabulary ([`EnsembleScorer::new`] checks its size;
/// [`super::translator::Translator::load_ensemble`] checks its hash).
pub struct EnsembleScorer<S> {
    members: Vec<S>,
    scores: Vec<f32>,
    zeros: Vec<f32>,
}

impl<S: Scorer> EnsembleScorer<S> {
    /// The ensemble of `members` (at least one, all of one vocabulary size).
    pub fn new(members: Vec<S>) -> Result<Self> {
        let Some(first) = members.first() else {
            return Err(Error::Config("an ensemble needs at least one model".into()));
        };
        if let Some(m) = members.iter().find(|m| m.vocab() != first.vocab()) {
            return Err(Error::Mismatch(format!(
                "ensemble members have vocabularies of {} and {} entries",
                first.vocab(),
                m.vocab()
            )));
        }
        Ok(EnsembleScorer { members, scores: Vec::new(), zeros: Vec::new() })
    }

    /// The members, to reuse their buffers.
    pub fn into_members(self) -> Vec<S> {
        self.members
    }
}

impl<S: Scorer> Scorer for EnsembleScorer<S> {
    fn vocab(&self) -> usize {
        self.members[0].vocab()
    }

    fn step(&mut self, tokens: &[u32]) -> Result<StepScores<'_>> {
        let v = self.vocab();
        let k = self.members.len() as f32;
        self.scores.clear();
        self.scores.resize(tokens.len() * v, 0.0);
        for (index, m) in self.members.iter_mut().enumerate() {
            let s = m.step(tokens).map_err(|e| Error::EnsembleMember { index, source: Box::new(e) })?;
            if s.scores.len() != tokens.len() * v || s.log_norms.len() != tokens.len() {
                let why = format!(
                    "it returned {} scores and {} normalisers for {} rows of a vocabulary of {v}",
                    s.scores.len(),
                    s.log_norms.len(),
                    tokens.len()
                );
                return Err(Error::EnsembleMember { index, source: Box::new(Error::Decode(why)) });
            }
            let _t = profile::scope(Slot::Search);
            self.scores.par_chunks_mut(v).zip(s.scores.par_chunks(v)).zip(s.log_norms.par_iter()).for_each(
                |((acc, row), &norm)| {
                    for (a, &x) in acc.iter_mut().zip(row) {
                        *a += (x - norm) / k;
                    }
                },
            );
        }
        self.zeros.clear();
        self.zeros.resize(tokens.len(), 0.0);
        Ok(StepScores { scores: &self.scores, log_norms: &self.zeros })
    }

    fn reorder(&mut self, keep: &[usize]) -> Result<()> {
        for (index, m) in self.members.iter_mut().enumerate() {
            m.reorder(keep).map_err(|e| Error::EnsembleMember { index, source: Box::new(e) })?;
        }
        Ok(())
    }
}

/// Translates a batch of sources (token ids without BOS/EOS) with beam search, on the model's
/// prepared weights ([`Transformer::prepare`]) and in the buffers of `state` (it is left holding
/// them for the next batch); also returns the rows decoded summed over steps. The output length
/// is capped by the model's positions as well as by the config. `constraint`, if given,
/// restricts the search.
pub fn search_batch(
    model: &Transformer,
    srcs: &[&[u32]],
    cfg: &BeamConfig,
    ws: &mut Workspace,
    state: &mut DecoderState,
    constraint: Option<&dyn Constraint>,
) -> Result<(Vec<Vec<Hypothesis>>, usize)> {
    search_batch_ensemble(
        model,
        &[],
        srcs,
        &SentenceInputs::default(),
        cfg,
        (ws, state),
        &mut Vec::new(),
        constraint,
        None,
    )
}

/// [`search_batch`] over an ensemble: `model` (in the buffers `mine`: workspace and decoder
/// state) and `others`, each in the buffers of `theirs` (one pair a model,
/// grown as needed and kept for the next batch), their log-probabilities averaged at every step
/// ([`EnsembleScorer`]). With no others it is [`search_batch`]. All must share the vocabulary. The
/// rows decoded are one model's (each model decodes as many). `inputs` gives each sentence's key
/// for sampling's random draws (none: their places in this batch) and what its output must hold
/// ([`SentenceInputs`]).
/// `shortlist`, if given, is the vocabulary the batch may write ([`Shortlist::for_sources`]):
/// the output layer is computed over it alone, its softmax normalised over it, as Marian's
/// `--shortlist` and CTranslate2's `use_vmap` do.
#[allow(clippy::too_many_arguments)]
pub fn search_batch_ensemble(
    model: &Transformer,
    others: &[&Transformer],
    srcs: &[&[u32]],
    inputs: &SentenceInputs,
    cfg: &BeamConfig,
    (ws, state): (&mut Workspace, &mut DecoderState),
    theirs: &mut Vec<(Workspace, DecoderState)>,
    constraint: Option<&dyn Constraint>,
    shortlist: Option<&Shortlist>,
) -> Result<(Vec<Vec<Hypothesis>>, usize)> {
    cfg.validate()?;
    let cap = others.iter().map(|m| m.config.max_positions).fold(model.config.max_positions, usize::min) - 1;
    let steps = srcs.iter().map(|s| cfg.max_len(s.len()).min(cap) + 1).max().unwrap_or(0);
    let lens: Vec<usize> = srcs.iter().map(|s| s.len()).collect();
    let vocabulary = match shortlist {
        Some(list) => Some(Vocabulary::new(list, srcs, inputs.guides, constraint)?),
        None => None,
    };
    let columns = |m: &Transformer| vocabulary.as_ref().map(|v| m.output_columns(&v.ids)).transpose();
    // In column space with a shortlist: each guide's ids as columns.
    let guides: Vec<Guide> = match &vocabulary {
        Some(v) => inputs.guides.iter().map(|g| v.guide(g)).collect(),
        None => Vec::new(),
    };
    let guide_refs: Vec<&Guide> = guides.iter().collect();
    let inputs = match &vocabulary {
        Some(_) => &SentenceInputs { keys: inputs.keys, guides: &guide_refs },
        None => inputs,
    };
    let back = |hyps: Result<Vec<Vec<Hypothesis>>>| match &vocabulary {
        Some(v) => hyps.map(|h| v.to_ids(h)),
        None => hyps,
    };
    let mut scorer = ModelScorer::reusing(model, srcs, steps, ws, std::mem::take(state), columns(model)?)?;
    if others.is_empty() {
        let hyps = beam_search_with(&mut scorer, &lens, inputs, cfg, cap, constraint);
        let rows = scorer.rows_decoded;
        *state = scorer.into_state();
        return Ok((back(hyps)?, rows));
    }
    let mut members = vec![scorer];
    theirs.resize_with(theirs.len().max(others.len()), Default::default);
    for (m, (ws, st)) in others.iter().zip(theirs.iter_mut()) {
        members.push(ModelScorer::reusing(m, srcs, steps, ws, std::mem::take(st), columns(m)?)?);
    }
    let mut ensemble = EnsembleScorer::new(members)?;
    let hyps = beam_search_with(&mut ensemble, &lens, inputs, cfg, cap, constraint);
    let mut members = ensemble.into_members().into_iter();
    let first = members.next().expect("the first model");
    let rows = first.rows_decoded;
    *state = first.into_state();
    for (member, (_, st)) in members.zip(theirs.iter_mut()) {
        *st = member.into_state();
    }
    Ok((back(hyps)?, rows))
}

/// A batch's shortlisted vocabulary: the sorted ids it may write, the special tokens first, so
/// that column j < [`SPECIAL_TOKENS`] is id j (PAD, BOS, EOS, UNK keep their meaning in the
/// search) and the columns keep the ids' order (the search's ties, broken by the lower token,
/// fall as over the whole vocabulary).
struct Vocabulary {
    ids: Vec<u32>,
}

impl Vocabulary {
    /// The shortlist's targets for `srcs`, the special tokens, and every token of the guides'
    /// prefixes and phrases (what the output must hold, it may write). A constrained search
    /// (parsing) is refused: its constraint speaks of the whole vocabulary.
    fn new(list: &Shortlist, srcs: &[&[u32]], guides: &[&Guide], constraint: Option<&dyn Constraint>) -> Result<Self> {
        if constraint.is_some() {
            return Err(Error::Config(
                "a vocabulary shortlist applies to translation, not to a constrained search".into(),
            ));
        }
        let mut ids = list.for_sources(srcs);
        ids.extend(0..SPECIAL_TOKENS as u32);
        for g in guides {
            ids.extend(&g.prefix);
            ids.extend(g.phrases.iter().flatten());
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(Vocabulary { ids })
    }

    /// The column of an id that is in the list (a guide's tokens are).
    fn column(&self, id: u32) -> u32 {
        self.ids.binary_search(&id).expect("a guide's tokens are in the vocabulary") as u32
    }

    /// A guide in column space.
    fn guide(&self, g: &Guide) -> Guide {
        let cols = |t: &[u32]| t.iter().map(|&t| self.column(t)).collect::<Vec<_>>();
        Guide { prefix: cols(&g.prefix), phrases: g.phrases.iter().map(|p| cols(p)).collect() }
    }

    /// Hypotheses in column space with the model's ids.
    fn to_ids(&self, mut hyps: Vec<Vec<Hypothesis>>) -> Vec<Vec<Hypothesis>> {
        for h in hyps.iter_mut().flatten() {
            h.tokens.iter_mut().for_each(|t| *t = self.ids[*t as usize]);
        }
        hyps
    }
}
