//! The character encoder's place in the model (`model.char_dim`; a named deviation,
//! `char-word-encoder`): after the source embedding, every source word's vector from
//! [`char_cnn`] (its bytes through a small CNN) is added, under its own dropout mask, to the
//! encoder input at each of the word's pieces. The words are the vocabulary's
//! ([`super::pointer::PointerTable::word_spans`]), so a word never seen in training gets a vector
//! from its spelling as any other word does.
//!
//! Word dropout (`train.word_dropout`; a named deviation, `word-dropout`) lives here too: in
//! training, the source embedding reads each word as UNK with the probability the batch gives
//! it ([`Batch::src_drop`]), so that the UNK row learns what a word the model cannot recognise
//! looks like in context, and the rest of the model (the character encoder first) learns to do
//! without the word's own rows.

use super::batch::{Batch, DropoutCtx};
use super::masks::EmbeddingMasks;
use super::workspace::{CharActs, Workspace, NO_WORD};
use super::Transformer;
use crate::kernels::cpu::char_cnn;

impl Transformer {
    /// Word dropout: with a dropout context and `batch.src_drop`, `ids` becomes the source with
    /// every word drawn for this pass set to UNK (drawn once a word, keyed by the pass and the
    /// word's first position, so the backward reads the same ids); otherwise `ids` is emptied.
    pub(super) fn drop_words(&self, batch: &Batch, dropout: Option<DropoutCtx>, ids: &mut Vec<u32>) {
        ids.clear();
        let Some(ctx) = dropout else { return };
        if batch.src_drop.is_empty() {
            return;
        }
        ids.extend_from_slice(&batch.src);
        let s = batch.s;
        for r in 0..batch.b {
            let src = &batch.src[r * s..][..batch.src_lens[r]];
            // Without a vocabulary's pointer table, every position is a word.
            let spans = match self.pointer.as_deref() {
                Some(table) => table.word_spans(src),
                None => (0..src.len()).map(|i| i..i + 1).collect(),
            };
            for span in spans {
                let first = r * s + span.start;
                let p = batch.src_drop[first];
                if p > 0.0 && uniform(ctx, first) < p as f64 {
                    ids[r * s..][span].fill(crate::vocab::UNK);
                }
            }
        }
    }

    /// Adds the words' character vectors to `ws.enc_in` (after the source embedding). A no-op
    /// without `char_dim`.
    pub(super) fn char_forward(&self, batch: &Batch, ws: &mut Workspace, dropout: Option<DropoutCtx>) {
        let Some([emb, w, bias]) = self.layout.offsets.chars(&self.params) else { return };
        let table = self.pointer.as_deref().expect("a model with char_dim has its pointer table (checked before)");
        let (d, s, dc) = (self.config.d_model, batch.s, self.config.parsing.char_dim);
        let a = &mut ws.chars;
        a.word.clear();
        a.word.resize(batch.b * s, NO_WORD);
        a.chars.clear();
        a.offsets.clear();
        a.offsets.push(0);
        for r in 0..batch.b {
            let src = &batch.src[r * s..][..batch.src_lens[r]];
            for span in table.word_spans(src) {
                let id = (a.offsets.len() - 1) as u32;
                char_cnn::word_chars(&mut a.chars, span.clone().flat_map(|i| table.bytes(src[i]).iter().copied()));
                a.offsets.push(a.chars.len());
                a.word[r * s..][span].fill(id);
            }
        }
        let words = a.offsets.len() - 1;
        a.out.resize(words * d, 0.0);
        a.arg.resize(words * d, 0);
        if words == 0 {
            return;
        }
        char_cnn::char_cnn_forward(&mut a.out, &mut a.arg, &a.chars, &a.offsets, emb, w, bias, dc, d);
        let mask = EmbeddingMasks::new(&self.config, dropout).chars;
        let mut f = vec![1.0f32; d];
        for (i, row) in ws.enc_in.chunks_exact_mut(d).enumerate() {
            let word = a.word[i];
            if word == NO_WORD {
                continue;
            }
            if let Some(m) = mask {
                m.fill(i * d, &mut f);
            }
            for ((x, &v), &k) in row.iter_mut().zip(&a.out[word as usize * d..][..d]).zip(&f) {
                *x += v * k;
            }
        }
    }

    /// The character encoder's gradients from `d_enc_in` (B·S, D), the encoder input's gradient,
    /// after [`Transformer::char_forward`] on the same batch and workspace. A no-op without
    /// `char_dim`.
    pub(super) fn char_backward(
        &self,
        d_enc_in: &[f32],
        chars: &mut CharActs,
        dropout: Option<DropoutCtx>,
        grads: &mut [f32],
    ) {
        let Some([emb, w, _]) = self.layout.offsets.chars(&self.params) else { return };
        let (d, dc) = (self.config.d_model, self.config.parsing.char_dim);
        let a = chars;
        let words = a.offsets.len().saturating_sub(1);
        if words == 0 {
            return;
        }
        a.dout.clear();
        a.dout.resize(words * d, 0.0);
        let mask = EmbeddingMasks::new(&self.config, dropout).chars;
        let mut f = vec![1.0f32; d];
        for (i, g) in d_enc_in.chunks_exact(d).enumerate() {
            let word = a.word[i];
            if word == NO_WORD {
                continue;
            }
            if let Some(m) = mask {
                m.fill(i * d, &mut f);
            }
            for ((o, &g), &k) in a.dout[word as usize * d..][..d].iter_mut().zip(g).zip(&f) {
                *o += g * k;
            }
        }
        let [de, dw, db] = self.layout.offsets.chars_mut(grads).expect("char_dim has its parameters");
        char_cnn::char_cnn_backward(de, dw, db, &a.dout, &a.arg, &a.chars, &a.offsets, emb, w, dc, d);
    }
}

/// A uniform draw in [0, 1) for position `i` of a pass (word dropout's site).
fn uniform(ctx: DropoutCtx, i: usize) -> f64 {
    use crate::rng::mix64;
    let h = mix64(ctx.seed ^ mix64(ctx.counter ^ mix64(super::masks::site::WORDS ^ mix64(i as u64))));
    (h >> 11) as f64 / (1u64 << 53) as f64
}
