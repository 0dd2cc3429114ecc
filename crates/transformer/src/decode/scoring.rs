//! Teacher-forced scoring with a [`Translator`]: the perplexity of Table 3 over aligned lines, and
//! each pair's log-probability (what Marian's `score` prints).

use super::translator::Translator;
use crate::data::batching::BatchConfig;
use crate::data::tokenizer::Side;
use crate::error::{Error, Result};
use crate::eval::perplexity::{self, Totals};
use crate::events::Events;

impl Translator {
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
        self.check_scorable(&pairs)?;
        let budget = BatchConfig { max_src_tokens: 4096, max_tgt_tokens: 4096 };
        self.with_buffers(|b| perplexity::log_probs(&self.model, &pairs, &budget, &mut b.mine.0)).map_err(|e| (None, e))
    }

    /// Each pair's log p of each target token, `</s>` last (token ids without BOS/EOS, as
    /// [`Translator::encode_source`] and [`Translator::encode_target`] give them, or
    /// [`Tokenizer::source_ids_of_pieces`](crate::data::tokenizer::Tokenizer::source_ids_of_pieces)):
    /// natural log, teacher-forced, in input order. A pair the model cannot score is an error
    /// naming it (1-based) and its side.
    pub fn token_log_probs(&self, pairs: &[(Vec<u32>, Vec<u32>)]) -> Result<Vec<Vec<f32>>> {
        self.check_scorable(pairs).map_err(|(_, e)| e)?;
        let budget = BatchConfig { max_src_tokens: 4096, max_tgt_tokens: 4096 };
        self.with_buffers(|b| perplexity::token_log_probs(&self.model, pairs, &budget, &mut b.mine.0))
    }

    /// Every pair fits the model: a source of 1 to `max_positions` tokens, a target that with EOS
    /// fits too; else an error naming the first pair (1-based line) that does not, and its side.
    fn check_scorable(&self, pairs: &[(Vec<u32>, Vec<u32>)]) -> std::result::Result<(), (Option<Side>, Error)> {
        let (keep, _) = perplexity::scorable(&self.model, pairs);
        if keep.len() == pairs.len() {
            return Ok(());
        }
        let max = self.model.config.max_positions;
        // `keep` is the sorted indices kept: the first one missing is where it first differs.
        let i = (0..pairs.len()).find(|&i| keep.get(i) != Some(&i)).unwrap_or(keep.len());
        let Some((s, t)) = pairs.get(i) else { return Ok(()) };
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
        Err((Some(side), Error::Input(format!("line {}: cannot be scored: {why}", i + 1))))
    }
}
