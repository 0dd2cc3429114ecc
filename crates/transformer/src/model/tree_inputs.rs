//! The parser's inputs beside the paper's (§6.3 at our scale; each a named deviation in
//! docs/deviations.md): what the decoder reads besides its shifted-right embedding and positions.
//!
//! - The **next-word pointer** (`model.source_pointer`, `next-word-pointer`): each decoder input
//!   gets W_p · enc_out[j], j the source word the tree has reached (`pointer.rs` says where that is).
//! - The **next-closer input** (`model.next_closer`, `next-closer-input`): each decoder input gets
//!   C[c] + H[k], c the token that closes the innermost open constituent and k how many are open.
//!
//! Both read the vocabulary's [`pointer::PointerTable`] (what each id is to the tree). The
//! source-side inputs, the character encoder and word dropout, are `chars.rs`. A model without
//! these options never enters this file's arithmetic: every function here is a no-op for it, and
//! each is called once, at its site in the paper's path (`Transformer::forward`, the decoder's
//! forward and backward, and the incremental decoder's step).

use super::batch::{Batch, DropoutCtx};
use super::encoder::packed_output;
use super::incremental::{DecoderState, Encoded};
use super::pointer::{self, PointerState, NO_CLOSER, NO_OPEN, PAST_END};
use super::workspace::Workspace;
use super::{masks, Transformer};
use crate::error::{Error, Result};
use crate::kernels::cpu::linear::product;
use crate::kernels::cpu::matmul::Op;

impl Transformer {
    /// The same model with the vocabulary's [`pointer::PointerTable`], which a model with
    /// `source_pointer`, `next_closer` or `char_dim` needs before it can run (a no-op without them). An
    /// error when the table does not cover the vocabulary.
    pub fn with_pointer_table(mut self, table: pointer::PointerTable) -> Result<Self> {
        if self.uses_tree_table() {
            if table.len() != self.config.vocab_size {
                return Err(Error::Mismatch(format!(
                    "the pointer table covers {} ids, the model's vocabulary has {}",
                    table.len(),
                    self.config.vocab_size
                )));
            }
            self.pointer = Some(std::sync::Arc::new(table));
        }
        Ok(self)
    }

    /// The pointer table (with `source_pointer` or `next_closer`), or the error that says it is
    /// missing.
    pub(super) fn tree_table(&self) -> Result<Option<&pointer::PointerTable>> {
        match (&self.pointer, self.uses_tree_table()) {
            (_, false) => Ok(None),
            (Some(t), true) => Ok(Some(t)),
            (None, true) => Err(Error::Config(
                "this model has the next-word pointer (model.source_pointer), the next-closer input \
                 (model.next_closer) or the character encoder (model.char_dim) but no pointer table: build it with \
                 Transformer::with_pointer_table(PointerTable::from_bpe(&bpe, format))"
                    .into(),
            )),
        }
    }

    /// Whether the model reads the vocabulary's [`pointer::PointerTable`]: with the next-word
    /// pointer, the next-closer input or the character encoder.
    pub(super) fn uses_tree_table(&self) -> bool {
        self.config.parsing.source_pointer || self.config.parsing.next_closer || self.config.parsing.char_dim > 0
    }

    /// The pointer table with `source_pointer` (see [`Transformer::tree_table`]).
    pub(super) fn pointer_table(&self) -> Result<Option<&pointer::PointerTable>> {
        Ok(self.tree_table()?.filter(|_| self.config.parsing.source_pointer))
    }

    /// The pointer table with `next_closer` (see [`Transformer::tree_table`]).
    pub(super) fn closer_table(&self) -> Result<Option<&pointer::PointerTable>> {
        Ok(self.tree_table()?.filter(|_| self.config.parsing.next_closer))
    }

    /// Teacher-forced batches: where each target position's tree is in its sentence (`ws.ptr`)
    /// and which closer it owes at what depth (`ws.closer`, `ws.depth`), with the next-closer
    /// dropout of training applied.
    pub(super) fn tree_inputs_prepare(
        &self,
        batch: &Batch,
        ws: &mut Workspace,
        dropout: Option<DropoutCtx>,
    ) -> Result<()> {
        if let Some(table) = self.pointer_table()? {
            ws.ptr = pointer::batch_positions(table, batch);
        }
        if let Some(table) = self.closer_table()? {
            (ws.closer, ws.depth) = pointer::batch_closers(table, batch);
            if !self.config.parsing.next_closer_depth {
                ws.depth.fill(0);
            }
            if let (Some(ctx), p) = (dropout, self.config.parsing.next_closer_dropout) {
                if p > 0.0 {
                    // Whole positions lose the term (C[c] + H[k]); kept ones are not rescaled.
                    let m = crate::rng::DropoutMask::new(p, ctx.seed, ctx.counter, masks::site::CLOSER);
                    for (i, id) in ws.closer.iter_mut().enumerate() {
                        if m.factor(i) == 0.0 {
                            *id = pointer::NO_CLOSER;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// `ws.dec_in` += the pointer's and the next-closer's terms (after the embedding's dropout).
    pub(super) fn tree_inputs_forward(&self, ws: &mut Workspace) {
        let c = &self.config;
        let d = c.d_model;
        let (p, o) = (&self.params, &self.layout.offsets);
        let enc_out = packed_output(c.n_layers, &ws.enc_in, &ws.enc, ws.src_rows[ws.dims.b] * d);
        if let Some(w_p) = self.pointer_lin() {
            // The next-word pointer: dec_in += enc_out[ptr] W_pᵀ (after the embedding's dropout).
            let (b, t) = (ws.dims.b, ws.dims.t);
            let mt = b * t;
            for (i, row) in ws.ptr_in[..mt * d].chunks_exact_mut(d).enumerate() {
                if ws.ptr[i] == PAST_END {
                    row.fill(0.0);
                } else {
                    let src_row = ws.src_rows[i / t] + ws.ptr[i] as usize;
                    row.copy_from_slice(&enc_out[src_row * d..][..d]);
                }
            }
            w_p.forward_accumulate(&mut ws.dec_in[..mt * d], &ws.ptr_in[..mt * d], mt);
        }
        if let Some(tables) = o.closer(p) {
            // The next-closer input: dec_in += C[closer] + H[depth] (after the embedding's dropout).
            let mt = ws.dims.b * ws.dims.t;
            let (closers, depths) = tables.split_at(c.vocab_size * d);
            for ((row, &id), &depth) in ws.dec_in[..mt * d].chunks_exact_mut(d).zip(&ws.closer).zip(&ws.depth) {
                if id == NO_CLOSER {
                    continue;
                }
                let (cr, hr) = (&closers[id as usize * d..][..d], &depths[depth as usize * d..][..d]);
                for ((x, &a), &h) in row.iter_mut().zip(cr).zip(hr) {
                    *x += a + h;
                }
            }
        }
    }

    /// Backward of [`Transformer::tree_inputs_forward`], from d(dec_in) in `ws.g_a`: W_p's, C's and
    /// H's gradients, and the pointer's share of d(enc_out) added to `ws.d_enc` (packed rows).
    pub(super) fn tree_inputs_backward(&self, ws: &mut Workspace, grads: &mut [f32]) {
        let c = &self.config;
        let d = c.d_model;
        let (p, o) = (&self.params, &self.layout.offsets);
        let dims = ws.dims;
        let mt = dims.b * dims.t;
        if let Some(w_p) = o.pointer(p) {
            // Pointer: d(ptr_in) = d(dec_in) W_p, scattered into d(enc_out); dW_p += d(dec_in)ᵀ ptr_in.
            let g = &ws.g_a[..mt * d];
            product(self.float(), &mut ws.g_b[..mt * d], g, Op::N, w_p, Op::N, mt, d, d, false);
            let w_g = o.pointer_mut(grads).expect("the layout has the pointer");
            product(self.float(), w_g, g, Op::T, &ws.ptr_in[..mt * d], Op::N, d, d, mt, true);
            for (i, row) in ws.g_b[..mt * d].chunks_exact(d).enumerate() {
                if ws.ptr[i] == PAST_END {
                    continue;
                }
                let src_row = ws.src_rows[i / dims.t] + ws.ptr[i] as usize;
                for (e, &x) in ws.d_enc[src_row * d..][..d].iter_mut().zip(row) {
                    *e += x;
                }
            }
        }
        if let Some(tables) = o.closer_mut(grads) {
            // Next closer: dC[closer] += d(dec_in), dH[depth] += d(dec_in).
            let (closers, depths) = tables.split_at_mut(c.vocab_size * d);
            for ((row, &id), &depth) in ws.g_a[..mt * d].chunks_exact(d).zip(&ws.closer).zip(&ws.depth) {
                if id == NO_CLOSER {
                    continue;
                }
                for (e, &x) in closers[id as usize * d..][..d].iter_mut().zip(row) {
                    *e += x;
                }
                for (e, &x) in depths[depth as usize * d..][..d].iter_mut().zip(row) {
                    *e += x;
                }
            }
        }
    }

    /// The incremental decoder's step: `st.x` += the pointer's and the next-closer's terms for
    /// each row, each row's pointer and closer stack advanced by the token it was given.
    pub(super) fn tree_inputs_step(
        &self,
        enc: &Encoded,
        st: &mut DecoderState,
        tokens: &[u32],
        rows: usize,
    ) -> Result<()> {
        let (d, v) = (self.config.d_model, self.config.vocab_size);
        let (p, o) = (&self.params, &self.layout.offsets);
        if let Some(table) = self.pointer_table()? {
            // The next-word pointer: x += (enc_out W_pᵀ)[j] for the row's source position j.
            for (r, x) in st.x.chunks_exact_mut(d).take(rows).enumerate() {
                let i = st.sent[r];
                let n = enc.src_lens[i];
                if n == 0 {
                    continue;
                }
                let j = st.ptr[r].advance(table.class(tokens[r]), &enc.word_starts[i], n);
                if j == n {
                    continue; // past the last word: nothing
                }
                for (a, &p) in x.iter_mut().zip(&enc.ptr_proj[(i * enc.s + j) * d..][..d]) {
                    *a += p;
                }
            }
        }
        if let (Some(table), Some(tables)) = (self.closer_table()?, o.closer(p)) {
            // The next-closer input: x += C[c] + H[depth] for the closer c the row owes.
            let (closers, depths) = tables.split_at(v * d);
            for (r, x) in st.x.chunks_exact_mut(d).take(rows).enumerate() {
                st.closer_top[r] = st.closers.advance(st.closer_top[r], table.class(tokens[r]));
                let (id, depth) = st.closers.closer(st.closer_top[r]);
                let depth = if self.config.parsing.next_closer_depth { depth } else { 0 };
                let (cr, hr) = (&closers[id as usize * d..][..d], &depths[depth as usize * d..][..d]);
                for ((a, &c), &h) in x.iter_mut().zip(cr).zip(hr) {
                    *a += c + h;
                }
            }
        }
        Ok(())
    }

    /// Each source's word start positions, for the pointer of incremental decoding (empty
    /// without it).
    pub(super) fn tree_word_starts(&self, srcs: &[&[u32]]) -> Result<Vec<Vec<u32>>> {
        Ok(match self.pointer_table()? {
            Some(table) => srcs.iter().map(|x| table.word_starts(x)).collect(),
            None => Vec::new(),
        })
    }

    /// A fresh decoder state's pointers and closer stacks, one row per sentence.
    pub(super) fn tree_inputs_restart(st: &mut DecoderState, sentences: usize) {
        st.ptr.clear();
        st.ptr.resize(sentences, PointerState::default());
        st.closers.clear();
        st.closer_top.clear();
        st.closer_top.resize(sentences, NO_OPEN);
    }
}
