//! The model as a beam-search [`Scorer`]: incremental decoding (§3.2.3's masked decoder, one
//! position a step) over an encoded batch, each step's log-softmax normalisers computed in
//! parallel; and [`search_batch`] / [`search_batch_ensemble`], the search of a batch of sources
//! with one model or several.

use super::beam::{beam_search_with, BeamConfig, Constraint, Hypothesis, Scorer, SentenceInputs, StepScores};
use crate::error::{Error, Result};
use crate::kernels::cpu::profile::{self, Slot};
use crate::kernels::cpu::search::log_sum_exp;
use crate::model::incremental::{DecoderState, Encoded};
use crate::model::{Transformer, Workspace};
use rayon::prelude::*;

/// The model as a [`Scorer`]: incremental decoding over an encoded batch.
pub(crate) struct ModelScorer<'m> {
    model: &'m Transformer,
    enc: Encoded,
    state: DecoderState,
    log_norms: Vec<f32>,
    /// Σ over steps of the rows decoded: the search's work.
    pub(crate) rows_decoded: usize,
}

impl<'m> ModelScorer<'m> {
    /// Encodes `srcs` and prepares to decode up to `max_steps` positions in the buffers of
    /// `state` (from [`ModelScorer::into_state`] of an earlier batch).
    pub fn reusing(
        model: &'m Transformer,
        srcs: &[&[u32]],
        max_steps: usize,
        ws: &mut Workspace,
        mut state: DecoderState,
    ) -> Result<Self> {
        let enc = model.encode(srcs, ws)?;
        model.restart_decoding(&enc, max_steps, &mut state)?;
        Ok(ModelScorer { model, enc, state, log_norms: Vec::new(), rows_decoded: 0 })
    }

    /// The decoder state, to reuse its buffers for the next batch.
    pub fn into_state(self) -> DecoderState {
        self.state
    }
}

impl Scorer for ModelScorer<'_> {
    fn vocab(&self) -> usize {
        self.model.config.vocab_size
    }

    fn step(&mut self, tokens: &[u32]) -> Result<StepScores<'_>> {
        let v = self.model.config.vocab_size;
        let logits = self.model.decode_step(&self.enc, &mut self.state, tokens)?;
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
    search_batch_ensemble(model, &[], srcs, &SentenceInputs::default(), cfg, (ws, state), &mut Vec::new(), constraint)
}

/// [`search_batch`] over an ensemble: `model` (in the buffers `mine`: workspace and decoder
/// state) and `others`, each in the buffers of `theirs` (one pair a model,
/// grown as needed and kept for the next batch), their log-probabilities averaged at every step
/// ([`EnsembleScorer`]). With no others it is [`search_batch`]. All must share the vocabulary. The
/// rows decoded are one model's (each model decodes as many). `inputs` gives each sentence's key
/// for sampling's random draws (none: their places in this batch) and what its output must hold
/// ([`SentenceInputs`]).
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
) -> Result<(Vec<Vec<Hypothesis>>, usize)> {
    cfg.validate()?;
    let cap = others.iter().map(|m| m.config.max_positions).fold(model.config.max_positions, usize::min) - 1;
    let steps = srcs.iter().map(|s| cfg.max_len(s.len()).min(cap) + 1).max().unwrap_or(0);
    let lens: Vec<usize> = srcs.iter().map(|s| s.len()).collect();
    let mut scorer = ModelScorer::reusing(model, srcs, steps, ws, std::mem::take(state))?;
    if others.is_empty() {
        let hyps = beam_search_with(&mut scorer, &lens, inputs, cfg, cap, constraint);
        let rows = scorer.rows_decoded;
        *state = scorer.into_state();
        return Ok((hyps?, rows));
    }
    let mut members = vec![scorer];
    theirs.resize_with(theirs.len().max(others.len()), Default::default);
    for (m, (ws, st)) in others.iter().zip(theirs.iter_mut()) {
        members.push(ModelScorer::reusing(m, srcs, steps, ws, std::mem::take(st))?);
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
    Ok((hyps?, rows))
}
