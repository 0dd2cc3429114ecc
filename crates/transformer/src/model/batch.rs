//! What one forward/backward pass reads: a padded batch of sentence pairs ([`Batch`]) and the
//! seed of its dropout masks ([`DropoutCtx`]).

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::vocab::PAD;

/// A padded batch of sentence pairs (B sentences, source length S, target length T), right-padded
/// with [`PAD`]. The decoder reads `tgt_in` (BOS y1 … yn) and is trained to predict `tgt_out`
/// (y1 … yn EOS).
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// B.
    pub b: usize,
    /// S (source positions, padded).
    pub s: usize,
    /// T (target positions, padded).
    pub t: usize,
    /// (B, S) source ids.
    pub src: Vec<u32>,
    /// (B) source lengths (non-padding tokens, a prefix of each row).
    pub src_lens: Vec<usize>,
    /// (B, T) decoder input ids.
    pub tgt_in: Vec<u32>,
    /// (B, T) decoder target ids; PAD where there is nothing to predict.
    pub tgt_out: Vec<u32>,
    /// (B) target lengths.
    pub tgt_lens: Vec<usize>,
    /// (B, S) word dropout (`train.word_dropout`), read in training only: at every source
    /// position, the probability that its word is read as UNK by the source embedding in this
    /// pass (the same at every piece of a word); empty for none.
    pub src_drop: Vec<f32>,
    /// (B, T, S) guided alignment (`data.guided_alignment`), read in training only: for each
    /// target position, the distribution over source positions one attention head is trained
    /// towards; a row of zeros where the target token has no alignment. Empty for none.
    pub guide: Vec<f32>,
}

impl Batch {
    /// A batch from token sequences: `src[i]` as is, `tgt[i]` as BOS·tgt → tgt·EOS. Sequences are
    /// right-padded to the longest in the batch.
    pub fn from_pairs(pairs: &[(Vec<u32>, Vec<u32>)]) -> Self {
        let b = pairs.len();
        let s = pairs.iter().map(|p| p.0.len()).max().unwrap_or(0);
        let t = pairs.iter().map(|p| p.1.len() + 1).max().unwrap_or(0);
        let mut batch = Batch {
            b,
            s,
            t,
            src: vec![PAD; b * s],
            src_lens: Vec::with_capacity(b),
            tgt_in: vec![PAD; b * t],
            tgt_out: vec![PAD; b * t],
            tgt_lens: Vec::with_capacity(b),
            src_drop: Vec::new(),
            guide: Vec::new(),
        };
        for (i, (src, tgt)) in pairs.iter().enumerate() {
            batch.src[i * s..i * s + src.len()].copy_from_slice(src);
            batch.src_lens.push(src.len());
            batch.tgt_in[i * t] = crate::vocab::BOS;
            batch.tgt_in[i * t + 1..i * t + 1 + tgt.len()].copy_from_slice(tgt);
            batch.tgt_out[i * t..i * t + tgt.len()].copy_from_slice(tgt);
            batch.tgt_out[i * t + tgt.len()] = crate::vocab::EOS;
            batch.tgt_lens.push(tgt.len() + 1);
        }
        batch
    }

    /// Non-padding target tokens: the loss's normaliser.
    pub fn target_tokens(&self) -> usize {
        self.tgt_out.iter().filter(|&&t| t != PAD).count()
    }

    /// Checks shapes, lengths and ids against a model configuration: B, S and T at least 1, every
    /// row exactly its length of non-padding ids followed by padding, ids inside the vocabulary.
    pub fn validate(&self, c: &ModelConfig) -> Result<()> {
        let bad = |m: String| Err(Error::Batch(m));
        if self.b == 0 || self.s == 0 || self.t == 0 {
            return bad(format!(
                "empty batch (B={} S={} T={}): every batch needs a sentence with a source and a target token",
                self.b, self.s, self.t
            ));
        }
        let expect = |len: usize, width: usize| self.b.checked_mul(width) == Some(len);
        if !expect(self.src.len(), self.s) || !expect(self.tgt_in.len(), self.t) || !expect(self.tgt_out.len(), self.t)
        {
            return bad(format!("token buffers do not match B={} S={} T={}", self.b, self.s, self.t));
        }
        if self.src_lens.len() != self.b || self.tgt_lens.len() != self.b {
            return bad("one length per sentence expected".into());
        }
        if !self.src_drop.is_empty() && self.src_drop.len() != self.src.len() {
            return bad(format!(
                "{} word-dropout probabilities for {} source positions",
                self.src_drop.len(),
                self.src.len()
            ));
        }
        if !self.guide.is_empty() && Some(self.guide.len()) != self.b.checked_mul(self.t * self.s) {
            return bad(format!(
                "{} guided-alignment weights for B={} T={} S={}",
                self.guide.len(),
                self.b,
                self.t,
                self.s
            ));
        }
        if self.s > c.max_positions || self.t > c.max_positions {
            return bad(format!(
                "sequence of {} positions exceeds max_positions = {}; raise max_positions or split the sentence",
                self.s.max(self.t),
                c.max_positions
            ));
        }
        if let Some(&id) = self.src.iter().find(|&&id| id as usize >= c.source_vocab()) {
            let which = if c.import.source_vocab_size.is_some() { "source vocabulary" } else { "vocabulary" };
            return bad(format!("token id {id} outside the {which} of {} (in the source)", c.source_vocab()));
        }
        let ids = self.tgt_in.iter().chain(&self.tgt_out);
        if let Some(&id) = ids.clone().find(|&&id| id as usize >= c.vocab_size) {
            return bad(format!("token id {id} outside the vocabulary of {}", c.vocab_size));
        }
        for (name, tokens, lens, width) in [
            ("source", &self.src, &self.src_lens, self.s),
            ("decoder input", &self.tgt_in, &self.tgt_lens, self.t),
            ("target", &self.tgt_out, &self.tgt_lens, self.t),
        ] {
            for (i, (row, &len)) in tokens.chunks_exact(width).zip(lens.iter()).enumerate() {
                if len > width {
                    return bad(format!("{name} {i}: length {len} exceeds the padded width {width}"));
                }
                if let Some(j) = row[..len].iter().position(|&t| t == PAD) {
                    return bad(format!("{name} {i}: padding id at position {j}, inside its length {len}"));
                }
                if let Some(j) = row[len..].iter().position(|&t| t != PAD) {
                    return bad(format!("{name} {i}: token at position {} after its length {len}", len + j));
                }
            }
        }
        Ok(())
    }
}

/// Seeds dropout for one forward/backward pass. `counter` must differ between passes (the update
/// step times the accumulation count plus the micro-batch, say); the same (seed, counter) gives the
/// same masks whatever the thread count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropoutCtx {
    /// The run's seed.
    pub seed: u64,
    /// The pass's counter.
    pub counter: u64,
}
