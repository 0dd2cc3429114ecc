//! Incremental decoding for inference (§6.1). The source is encoded once, and the encoder–decoder
//! keys and values of every decoder layer are projected once per sentence ([`Encoded`]). The decoder
//! then runs one position at a time over a set of rows (hypotheses), caching each layer's
//! self-attention keys and values ([`DecoderState`]), so step t costs O(t) attention work instead
//! of re-running the whole prefix. Rows can be reordered, duplicated or dropped between steps
//! ([`DecoderState::reorder`]), which is what beam search needs.
//!
//! The cache is never copied when rows are reordered. Row r writes the key and value of step t
//! into slot r at position t. Between growths, position t of a slot is written only at step t, so
//! an entry stays valid; each row keeps a map from its positions to the slots holding them, and
//! reordering rows reorders those maps (one integer per position instead of a key and a value per
//! layer). When the cache grows, every live row's history is gathered into its own slot of the new
//! layout and the maps are rewritten to match.
//!
//! No dropout is applied: this is the evaluation-mode model, and step-by-step log-probabilities
//! equal those of the teacher-forced [`Transformer::forward`] to float rounding
//! (tests/incremental.rs).

use super::batch::Batch;
use super::lins::{Lin, OutputColumns};
use super::pointer::{CloserStacks, PointerState};
use super::workspace::Workspace;
use super::Transformer;
use crate::error::{Error, Result};
use crate::kernels::cpu::cached_attention::{attend, KeyValues};
use crate::kernels::cpu::elementwise::bias_activation_forward;
use crate::kernels::cpu::embedding::embedding_step;
use crate::kernels::cpu::layer_norm::residual_layer_norm_forward;
use crate::params::{AttnParams, NormParams};
use crate::vocab::{PAD, UNK};
use rayon::prelude::*;

/// Padded source tokens the encoder runs on at once in [`Transformer::encode`] (a batch holding
/// more is encoded in groups).
pub const ENCODE_TOKENS: usize = 256;

/// A batch of encoded source sentences: what every decoder step reads.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// Sentences.
    pub b: usize,
    /// Padded source length.
    pub s: usize,
    /// Source lengths.
    pub src_lens: Vec<usize>,
    /// Per decoder layer: (B·S, H·K + H·V) encoder–decoder keys | values.
    cross_kv: Vec<Vec<f32>>,
    /// With the next-word pointer: (B·S, D) the encoder output times W_pᵀ, and each source's
    /// word start positions.
    pub(super) ptr_proj: Vec<f32>,
    pub(super) word_starts: Vec<Vec<u32>>,
}

/// The decoder's cached state for a set of rows, each row a hypothesis of one sentence of an
/// [`Encoded`] batch. All rows have taken the same number of steps.
#[derive(Clone, Debug, Default)]
pub struct DecoderState {
    /// Row → sentence of the encoded batch.
    pub(super) sent: Vec<usize>,
    /// Positions decoded so far (tokens in each row's cache).
    pub(super) len: usize,
    /// Positions a slot has room for; grows (by half) up to `max_steps`.
    cap: usize,
    /// Positions this state may decode.
    max_steps: usize,
    /// Slots allocated: at least the rows.
    slots: usize,
    /// (rows, cap): the slot holding row r's key and value of position t is `origin[r·cap + t]`.
    origin: Vec<u32>,
    /// Per layer: (slots, cap, H·K) self-attention keys.
    keys: Vec<Vec<f32>>,
    /// Per layer: (slots, cap, H·V) self-attention values.
    values: Vec<Vec<f32>>,
    /// (rows, V) logits of the last step.
    logits: Vec<f32>,
    /// H·K and H·V: the widths of a cached key and value.
    hk: usize,
    hv: usize,
    /// Per row, with the next-word pointer: where its output is in the sentence.
    pub(super) ptr: Vec<PointerState>,
    /// Per row, with the next-closer input: its innermost open constituent in `closers`.
    pub(super) closer_top: Vec<u32>,
    pub(super) closers: CloserStacks,
    /// Buffers to re-lay the cache and the maps into.
    spare: Vec<f32>,
    spare_origin: Vec<u32>,
    // Scratch, (rows, ·).
    pub(super) x: Vec<f32>,
    x2: Vec<f32>,
    proj: Vec<f32>,
    ctx: Vec<f32>,
    y: Vec<f32>,
    ln_s: Vec<f32>,
    mean: Vec<f32>,
    rstd: Vec<f32>,
    hidden: Vec<f32>,
}

impl Transformer {
    /// Encodes source sentences (token ids without BOS/EOS) for incremental decoding. An empty
    /// source is allowed: its decoder sees no source keys.
    pub fn encode(&self, srcs: &[&[u32]], ws: &mut Workspace) -> Result<Encoded> {
        let c = &self.config;
        self.tree_table()?;
        let b = srcs.len();
        if b == 0 {
            return Ok(Encoded {
                b: 0,
                s: 0,
                src_lens: Vec::new(),
                cross_kv: vec![Vec::new(); c.n_layers],
                ptr_proj: Vec::new(),
                word_starts: Vec::new(),
            });
        }
        let s = srcs.iter().map(|x| x.len()).max().unwrap_or(0).max(1);
        let (d, hk, hv) = (c.d_model, c.n_heads * c.d_k, c.n_heads * c.d_v);
        let with_pointer = self.config.parsing.source_pointer;
        let mut cross_kv = vec![vec![0.0; b * s * (hk + hv)]; c.n_layers];
        let mut ptr_proj = if with_pointer { vec![0.0; b * s * d] } else { Vec::new() };
        let mut src_lens = Vec::with_capacity(b);
        // The encoder runs on groups of sentences of at most ENCODE_TOKENS padded tokens, so its
        // activations are sized to a group, not to the whole batch; only what the decoder reads
        // (each layer's keys|values, the pointer's projection) is kept for the batch.
        let mut start = 0;
        while start < b {
            let longest = srcs[start].len().max(1);
            let mut end = start + 1;
            let mut group_s = longest;
            while end < b {
                let next_s = group_s.max(srcs[end].len());
                if (end + 1 - start) * next_s > ENCODE_TOKENS {
                    break;
                }
                group_s = next_s;
                end += 1;
            }
            let group = &srcs[start..end];
            let (gb, gs) = (group.len(), group_s);
            // The target side is a placeholder: the encoder ignores it, but the batch must be valid.
            let mut batch = Batch {
                b: gb,
                s: gs,
                t: 1,
                src: vec![PAD; gb * gs],
                src_lens: group.iter().map(|x| x.len()).collect(),
                tgt_in: vec![crate::vocab::BOS; gb],
                tgt_out: vec![UNK; gb],
                tgt_lens: vec![1; gb],
                src_drop: Vec::new(),
                guide: Vec::new(),
            };
            for (i, x) in group.iter().enumerate() {
                batch.src[i * gs..i * gs + x.len()].copy_from_slice(x);
            }
            batch.validate(c)?;
            ws.prepare_encoder(c, &batch.src_lens, gs);
            self.encoder_forward(&batch, ws, None);
            let enc = self.encoder_output(ws);
            // Group row (i, t) goes to batch row (start + i, t): the same t, a wider stride.
            let scatter = |dst: &mut [f32], src: &[f32], w: usize| {
                for i in 0..gb {
                    dst[(start + i) * s * w..][..gs * w].copy_from_slice(&src[i * gs * w..][..gs * w]);
                }
            };
            let mut tmp = vec![0.0; gb * gs * (hk + hv).max(d)];
            for (l, (lo, kv)) in self.layout.offsets.decoder.iter().zip(cross_kv.iter_mut()).enumerate() {
                let ap = lo.cross_attn.params(&self.params);
                let out = &mut tmp[..gb * gs * (hk + hv)];
                let w_kv = self.decoder_lins(l).cross_attn.kv.expect("encoder–decoder attention has a K|V map");
                w_kv.forward(out, enc, Some(ap.b_kv), gb * gs);
                scatter(kv, out, hk + hv);
            }
            if let Some(w_p) = self.pointer_lin() {
                let out = &mut tmp[..gb * gs * d];
                w_p.forward(out, enc, None, gb * gs);
                scatter(&mut ptr_proj, out, d);
            }
            src_lens.extend(batch.src_lens);
            start = end;
        }
        let word_starts = self.tree_word_starts(srcs)?;
        Ok(Encoded { b, s, src_lens, cross_kv, ptr_proj, word_starts })
    }

    /// A fresh decoder state with one row per sentence of `enc`, able to decode up to `max_steps`
    /// positions (at most `max_positions`). Its products read the model's prepared weights
    /// ([`Transformer::prepare`]), or in a model that is not prepared, the parameters.
    pub fn start_decoding(&self, enc: &Encoded, max_steps: usize) -> Result<DecoderState> {
        let mut st = DecoderState::default();
        self.restart_decoding(enc, max_steps, &mut st)?;
        Ok(st)
    }

    /// Makes `st` a fresh decoder state for `enc` like [`Transformer::start_decoding`], but keeps
    /// its buffers: decoding batch after batch then allocates (and page-faults) nothing new once
    /// the buffers have grown to the largest batch.
    pub fn restart_decoding(&self, enc: &Encoded, max_steps: usize, st: &mut DecoderState) -> Result<()> {
        let c = &self.config;
        if max_steps > c.max_positions {
            return Err(Error::Config(format!(
                "decoding {max_steps} positions needs max_positions ≥ {max_steps} (the model has {})",
                c.max_positions
            )));
        }
        st.sent.clear();
        st.sent.extend(0..enc.b);
        Self::tree_inputs_restart(st, enc.b);
        (st.len, st.max_steps, st.slots) = (0, max_steps, 0);
        st.cap = max_steps.min(16);
        at_least(&mut st.origin, enc.b * st.cap);
        st.keys.resize(c.n_layers, Vec::new());
        st.values.resize(c.n_layers, Vec::new());
        (st.hk, st.hv) = (c.n_heads * c.d_k, c.n_heads * c.d_v);
        st.logits.clear();
        st.add_slots(enc.b);
        Ok(())
    }

    /// One decoder step: feeds `tokens` (one per row: each row's previous output, BOS first) at the
    /// next position and returns the (rows, V) logits of the following token.
    pub fn decode_step<'s>(&self, enc: &Encoded, st: &'s mut DecoderState, tokens: &[u32]) -> Result<&'s [f32]> {
        self.decode_step_over(enc, st, tokens, None)
    }

    /// [`Transformer::decode_step`] with the output layer over `columns`' ids only, where given:
    /// the (rows, columns) logits of those ids, in their order (a vocabulary shortlist).
    pub fn decode_step_over<'s>(
        &self,
        enc: &Encoded,
        st: &'s mut DecoderState,
        tokens: &[u32],
        columns: Option<&OutputColumns>,
    ) -> Result<&'s [f32]> {
        let c = &self.config;
        let rows = st.sent.len();
        if tokens.len() != rows {
            return Err(Error::Batch(format!("{} tokens given for {rows} decoder rows", tokens.len())));
        }
        if st.len >= st.max_steps {
            return Err(Error::Batch(format!("the decoder state holds {} positions and is full", st.max_steps)));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
            return Err(Error::Batch(format!("token id {t} outside the vocabulary of {}", c.vocab_size)));
        }
        self.check_step_inputs(enc, st)?;
        if st.len == st.cap {
            st.grow();
        }
        st.add_slots(rows);
        for r in 0..rows {
            st.origin[r * st.cap + st.len] = r as u32;
        }
        let (d, f) = (c.d_model, c.d_ff);
        let v = columns.map_or(c.vocab_size, |o| o.ids().len());
        let (hk, hv) = (c.n_heads * c.d_k, c.n_heads * c.d_v);
        for (buf, width) in [
            (&mut st.x, d),
            (&mut st.x2, d),
            (&mut st.proj, 2 * hk + hv),
            (&mut st.ctx, hv),
            (&mut st.y, d),
            (&mut st.ln_s, d),
            (&mut st.mean, 1),
            (&mut st.rstd, 1),
            (&mut st.hidden, f),
            (&mut st.logits, v),
        ] {
            buf.resize(rows * width, 0.0);
        }
        // §3.4, §3.5: the input token's embedding × √d_model + the position's encoding.
        self.embed_step(enc, st, tokens, rows)?;
        // §3.1: the decoder stack at this one position.
        for l in 0..c.n_layers {
            self.decoder_layer_step(l, enc, st, rows);
        }
        st.len += 1;
        // §3.4: the pre-softmax projection is the shared embedding, logits = x Eᵀ.
        match columns {
            Some(o) => o.forward(&mut st.logits, &st.x, rows),
            None => self.output_lin().forward(&mut st.logits, &st.x, self.output_bias(), rows),
        }
        Ok(&st.logits)
    }

    /// That `enc` is an encoding by this model and `st` a state started for it: every buffer a
    /// step reads has this model's sizes, and every row decodes a sentence of `enc`.
    fn check_step_inputs(&self, enc: &Encoded, st: &DecoderState) -> Result<()> {
        let c = &self.config;
        let (b, s, d) = (enc.b, enc.s, c.d_model);
        let (hk, hv) = (c.n_heads * c.d_k, c.n_heads * c.d_v);
        let pointer = self.config.parsing.source_pointer;
        let encoded_here = enc.src_lens.len() == b
            && enc.cross_kv.len() == c.n_layers
            && enc.cross_kv.iter().all(|kv| kv.len() == b * s * (hk + hv))
            && enc.src_lens.iter().all(|&n| n <= s)
            && enc.ptr_proj.len() == if pointer { b * s * d } else { 0 }
            && enc.word_starts.len() == if pointer { b } else { 0 };
        if !encoded_here {
            return Err(Error::Batch(format!(
                "the encoded batch ({b} sentences of {s} positions, {} layers of keys and values) was not encoded by \
                 this model ({} layers, d_model {d}): encode the sources with the model that decodes them",
                enc.cross_kv.len(),
                c.n_layers
            )));
        }
        if st.keys.len() != c.n_layers
            || st.values.len() != c.n_layers
            || (st.hk, st.hv) != (hk, hv)
            || st.max_steps > c.max_positions
        {
            return Err(Error::Batch(format!(
                "the decoder state was started for another model ({} layers of width {}|{} and {} positions, this one \
                 has {} of {hk}|{hv} and {}): start it with this model's start_decoding",
                st.keys.len(),
                st.hk,
                st.hv,
                st.max_steps,
                c.n_layers,
                c.max_positions
            )));
        }
        if let Some(&i) = st.sent.iter().find(|&&i| i >= b) {
            return Err(Error::Batch(format!(
                "the decoder state has a row of sentence {} but the encoded batch has {b} sentences: start it \
                 with start_decoding on this batch",
                i + 1
            )));
        }
        Ok(())
    }

    /// The decoder's input at this step: embedding · √D + position `len` (§3.4), plus the parser's
    /// pointer and next-closer inputs where the model has them.
    fn embed_step(&self, enc: &Encoded, st: &mut DecoderState, tokens: &[u32], rows: usize) -> Result<()> {
        let d = self.config.d_model;
        let scale = self.embedding_scale();
        let pos = &self.positions()[st.len * d..(st.len + 1) * d];
        embedding_step(&mut st.x, tokens, self.embedding_rows(), pos, d, scale);
        // The parser's decoder inputs at this step (next-word pointer, next-closer).
        self.tree_inputs_step(enc, st, tokens, rows)?;
        Ok(())
    }

    /// Decoder layer `l` at this step, on `st.x` in place: causal self-attention over the cache
    /// (extended by this position's key and value), encoder–decoder attention, FFN.
    fn decoder_layer_step(&self, l: usize, enc: &Encoded, st: &mut DecoderState, rows: usize) {
        let c = &self.config;
        let (hk, hv) = (c.n_heads * c.d_k, c.n_heads * c.d_v);
        let lp = self.layout.offsets.decoder[l].params(&self.params);
        let t = st.len + 1; // keys visible to this step, the new one included
        let pl = self.decoder_lins(l);
        // §3.2.3: causal self-attention over the cache, extended by this position's key and value.
        let nq = 2 * hk + hv;
        pl.self_attn.q.forward(&mut st.proj, &st.x, Some(lp.self_attn.attn.b_qkv), rows);
        // Row r's new key and value go to slot r.
        let (cap, len) = (st.cap, st.len);
        let proj = &st.proj;
        st.keys[l].par_chunks_mut(cap * hk).zip(st.values[l].par_chunks_mut(cap * hv)).take(rows).enumerate().for_each(
            |(r, (ks, vs))| {
                let pr = &proj[r * nq..(r + 1) * nq];
                ks[len * hk..][..hk].copy_from_slice(&pr[hk..2 * hk]);
                vs[len * hv..][..hv].copy_from_slice(&pr[2 * hk..]);
            },
        );
        {
            let (keys, values, proj, origin) = (&st.keys[l], &st.values[l], &st.proj, &st.origin);
            // Eq. 1 per head over the positions so far.
            attend(&mut st.ctx, c.n_heads, c.d_k, c.d_v, |r| {
                let q = &proj[r * nq..][..hk];
                let kv = KeyValues {
                    k: keys,
                    ldk: hk,
                    v: values,
                    ldv: hv,
                    n: t,
                    origin: Some((&origin[r * cap..][..t], cap * hk, cap * hv)),
                };
                (q, kv)
            });
        }
        self.project_norm(pl.self_attn.o, &lp.self_attn.attn, &lp.self_attn.norm, st, rows);
        // §3.2.3: encoder–decoder attention over the cached source keys and values.
        pl.cross_attn.q.forward(&mut st.proj[..rows * hk], &st.x, Some(lp.cross_attn.attn.b_q), rows);
        {
            let (kv, proj, sent) = (&enc.cross_kv[l], &st.proj, &st.sent);
            let ld = hk + hv;
            attend(&mut st.ctx, c.n_heads, c.d_k, c.d_v, |r| {
                let i = sent[r];
                let base = i * enc.s * ld;
                let q = &proj[r * hk..][..hk];
                let n = enc.src_lens[i];
                (q, KeyValues { k: &kv[base..], ldk: ld, v: &kv[base + hk..], ldv: ld, n, origin: None })
            });
        }
        self.project_norm(pl.cross_attn.o, &lp.cross_attn.attn, &lp.cross_attn.norm, st, rows);
        // §3.3 Eq. 2: FFN(x) = max(0, x W_1 + b_1) W_2 + b_2; §3.1: residual + LayerNorm.
        pl.ffn.w_1.forward(&mut st.hidden, &st.x, None, rows);
        bias_activation_forward(&mut st.hidden, lp.ffn.ffn.b_1, c.import.activation);
        pl.ffn.w_2.forward(&mut st.y, &st.hidden, None, rows);
        self.residual_norm(&lp.ffn.norm, lp.ffn.ffn.b_2, st);
    }

    /// §3.2.2: W^O over the heads in `st.ctx`, then §3.1: x ← LN(x + y + b^O).
    fn project_norm(&self, w_o: Lin, ap: &AttnParams, np: &NormParams, st: &mut DecoderState, rows: usize) {
        w_o.forward(&mut st.y, &st.ctx, None, rows);
        self.residual_norm(np, ap.b_o, st);
    }

    /// x ← LN(x + y + bias).
    fn residual_norm(&self, np: &NormParams, bias: &[f32], st: &mut DecoderState) {
        residual_layer_norm_forward(
            &mut st.x2,
            &mut st.ln_s,
            &mut st.mean,
            &mut st.rstd,
            &st.x,
            &st.y,
            Some(bias),
            np.gamma,
            np.beta,
            self.config.layer_norm_eps,
            None,
        );
        std::mem::swap(&mut st.x, &mut st.x2);
    }
}

impl DecoderState {
    /// Rows.
    pub fn rows(&self) -> usize {
        self.sent.len()
    }

    /// Positions decoded so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position has been decoded yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held by the state's buffers (their capacity).
    pub fn bytes(&self) -> usize {
        fn v<T>(x: &Vec<T>) -> usize {
            x.capacity() * std::mem::size_of::<T>()
        }
        let caches: usize = self.keys.iter().chain(&self.values).map(v).sum();
        let scratch: usize = [&self.logits, &self.spare, &self.x, &self.x2, &self.proj, &self.ctx, &self.y]
            .into_iter()
            .chain([&self.ln_s, &self.mean, &self.rstd, &self.hidden])
            .map(v)
            .sum();
        caches + scratch + v(&self.sent) + v(&self.origin) + v(&self.spare_origin) + v(&self.ptr) + v(&self.closer_top)
    }

    /// The sentence each row decodes.
    pub fn sentences(&self) -> &[usize] {
        &self.sent
    }

    /// Makes sure there are at least `rows` slots (a new slot's positions are written before they
    /// are read). Buffers may be longer than the slots need.
    fn add_slots(&mut self, rows: usize) {
        if rows <= self.slots {
            return;
        }
        self.slots = rows;
        for (caches, w) in [(&mut self.keys, self.hk), (&mut self.values, self.hv)] {
            for cache in caches.iter_mut() {
                at_least(cache, rows * self.cap * w);
            }
        }
    }

    /// Keeps the rows `keep` in that order: new row i continues old row `keep[i]` (a row may be
    /// kept several times, or dropped). Only the position → slot maps move; the logits of the last
    /// step are discarded. An index that is not a row is an error, and leaves the state as it was.
    pub fn reorder(&mut self, keep: &[usize]) -> Result<()> {
        let rows = self.sent.len();
        if let Some(&r) = keep.iter().find(|&&r| r >= rows) {
            return Err(Error::Batch(format!("reorder: row {r} kept, but the decoder state has {rows} rows")));
        }
        let (cap, len) = (self.cap, self.len);
        at_least(&mut self.spare_origin, keep.len() * cap);
        for (i, &r) in keep.iter().enumerate() {
            self.spare_origin[i * cap..][..len].copy_from_slice(&self.origin[r * cap..][..len]);
        }
        std::mem::swap(&mut self.origin, &mut self.spare_origin);
        self.logits.clear();
        self.sent = keep.iter().map(|&r| self.sent[r]).collect();
        if !self.ptr.is_empty() {
            self.ptr = keep.iter().map(|&r| self.ptr[r]).collect();
        }
        if !self.closer_top.is_empty() {
            self.closer_top = keep.iter().map(|&r| self.closer_top[r]).collect();
        }
        Ok(())
    }

    /// Grows the positions a slot has room for by half (up to `max_steps`), and compacts: each row's
    /// history is gathered into slot r of the new layout, so slots no row refers to any more (rows
    /// dropped since the start) take no room. A late, long-running sentence then holds
    /// rows × cap floats, not the batch's first row count × cap.
    fn grow(&mut self) {
        let (old_cap, len) = (self.cap, self.len);
        let cap = (old_cap + (old_cap / 2).max(8)).clamp(1, self.max_steps);
        let rows = self.sent.len();
        let origin = &self.origin;
        for (caches, w) in [(&mut self.keys, self.hk), (&mut self.values, self.hv)] {
            for cache in caches.iter_mut() {
                // Positions ≥ len are stale but never read before being written.
                at_least(&mut self.spare, rows * cap * w);
                self.spare.par_chunks_mut(cap * w).take(rows).enumerate().for_each(|(r, dst)| {
                    for (t, d) in dst.chunks_exact_mut(w).take(len).enumerate() {
                        let slot = origin[r * old_cap + t] as usize;
                        d.copy_from_slice(&cache[(slot * old_cap + t) * w..][..w]);
                    }
                });
                std::mem::swap(cache, &mut self.spare);
            }
        }
        at_least(&mut self.origin, rows * cap);
        for r in 0..rows {
            self.origin[r * cap..][..len].fill(r as u32);
        }
        self.slots = rows;
        self.cap = cap;
    }
}

/// Lengthens `v` to at least `n` elements (never shortens it: the buffers only grow).
fn at_least<T: Clone + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.reserve_exact(n - v.len());
        v.resize(n, T::default());
    }
}
