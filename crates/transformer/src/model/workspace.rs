//! Activations saved by the forward pass for the backward, and scratch, sized per batch shape and
//! reused across steps (buffers only grow).

use crate::config::ModelConfig;

/// Batch shape the workspace is prepared for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dims {
    /// B.
    pub b: usize,
    /// S.
    pub s: usize,
    /// T.
    pub t: usize,
}

/// What flows through a sub-layer's backward: its input `x` (M, D), the gradient of its output
/// `dout` (M, D), and where the gradient of its input goes, `dx` (M, D, overwritten).
#[derive(Debug)]
pub(super) struct Flow<'a> {
    pub x: &'a [f32],
    pub dout: &'a [f32],
    pub dx: &'a mut [f32],
}

/// A sub-layer's parameters `p` and the gradients `g` its backward accumulates into.
#[derive(Debug)]
pub(super) struct Backward<P, G> {
    pub p: P,
    pub g: G,
}

/// Saved values of one residual + LayerNorm.
#[derive(Default, Debug)]
pub struct NormActs {
    /// (M, D) LN input x + Dropout(y).
    pub s: Vec<f32>,
    /// (M) row means.
    pub mean: Vec<f32>,
    /// (M) row 1/σ.
    pub rstd: Vec<f32>,
    /// (M, D) LN output: the sub-layer block's output.
    pub out: Vec<f32>,
}

/// Saved values of one attention sub-layer.
#[derive(Default, Debug)]
pub struct AttnActs {
    /// Self-attention: (M, 2·H·K + H·V) fused Q|K|V. Encoder–decoder: (B·T, H·K) Q.
    pub q: Vec<f32>,
    /// Encoder–decoder only: (packed source rows, H·K + H·V) K|V of the encoder output.
    pub kv: Vec<f32>,
    /// (B, H, T, S) attention weights before dropout.
    pub probs: Vec<f32>,
    /// (M, H·V) concatenated heads, before W^O.
    pub ctx: Vec<f32>,
    /// Residual + LayerNorm.
    pub norm: NormActs,
}

/// Saved values of one FFN sub-layer.
#[derive(Default, Debug)]
pub struct FfnActs {
    /// (M, F) activation output.
    pub h: Vec<f32>,
    /// (M, F) pre-activations x·W_1 + b_1, kept for the backward of a smooth activation (empty
    /// for ReLU, whose backward reads its output, and when nothing is kept for a backward).
    pub pre: Vec<f32>,
    /// Residual + LayerNorm.
    pub norm: NormActs,
}

/// One encoder layer's saved values.
#[derive(Default, Debug)]
pub struct EncoderActs {
    /// Self-attention.
    pub self_attn: AttnActs,
    /// FFN.
    pub ffn: FfnActs,
}

/// One decoder layer's saved values.
#[derive(Default, Debug)]
pub struct DecoderActs {
    /// Causal self-attention.
    pub self_attn: AttnActs,
    /// Encoder–decoder attention.
    pub cross_attn: AttnActs,
    /// FFN.
    pub ffn: FfnActs,
}

/// Backward scratch for intermediate gradients (sized for the larger of source and target).
#[derive(Default, Debug)]
pub struct GradScratch {
    /// (M, D) gradient of a sub-layer output.
    pub dy: Vec<f32>,
    /// (M, H·V) gradient of the concatenated heads.
    pub d_ctx: Vec<f32>,
    /// (M, 2·H·K + H·V) gradient of Q|K|V (or of Q alone).
    pub d_qkv: Vec<f32>,
    /// (packed source rows, H·K + H·V) gradient of the encoder–decoder K|V.
    pub d_kv: Vec<f32>,
    /// (M, F) gradient of the FFN hidden layer.
    pub d_h: Vec<f32>,
    /// (B, H, T, S) gradient of attention scores.
    pub dscores: Vec<f32>,
    /// Per-row-block partial sums of parameter gradients (LayerNorm, biases).
    pub partials: Vec<f32>,
}

/// Everything one forward/backward pass writes besides parameter gradients.
#[derive(Default, Debug)]
pub struct Workspace {
    /// The shape prepared for.
    pub dims: Dims,
    /// (B·S, D) encoder input: dropout(embedding·√D + positions). Packed in place before the
    /// first encoder layer (its first `src_rows[B]` rows then hold the valid positions).
    pub enc_in: Vec<f32>,
    /// (B + 1) where each sentence's rows start in the encoder layers' packed activations, which
    /// hold only valid source positions (`model::packing`), and their total.
    pub src_rows: Vec<usize>,
    /// (B·S, D) the encoder output, padded again for the decoder (zero at padding positions).
    pub enc_out: Vec<f32>,
    /// (B·T, D) decoder input.
    pub dec_in: Vec<f32>,
    /// (B·T) next-word pointer positions and (B·T, D) the encoder rows they gather (with
    /// `source_pointer`).
    pub ptr: Vec<u32>,
    /// See `ptr`.
    pub ptr_in: Vec<f32>,
    /// (B·T) next-closer ids and depth rows (with `next_closer`).
    pub closer: Vec<u32>,
    /// See `closer`.
    pub depth: Vec<u32>,
    /// Encoder layers' saved values.
    pub enc: Vec<EncoderActs>,
    /// Decoder layers' saved values.
    pub dec: Vec<DecoderActs>,
    /// (B·T, V) logits; after the loss, their gradient.
    pub logits: Vec<f32>,
    /// (B·T) per-token smoothed loss.
    pub row_loss: Vec<f32>,
    /// (B·T) per-token negative log-likelihood.
    pub row_nll: Vec<f32>,
    /// (M, D) sub-layer output scratch.
    pub y: Vec<f32>,
    /// (M, D) activation-gradient ping-pong buffers.
    pub g_a: Vec<f32>,
    /// (M, D).
    pub g_b: Vec<f32>,
    /// (M, D) gradient of the encoder output (its packed rows), summed over decoder layers.
    pub d_enc: Vec<f32>,
    /// Intermediate gradients.
    pub grad: GradScratch,
    /// (B·S) the ids the source embedding read in this pass: the source with the words dropped
    /// by word dropout set to UNK; empty when it read the source as it is.
    pub embed_ids: Vec<u32>,
    /// The character encoder's saved values (with `char_dim`).
    pub(crate) chars: CharActs,
    /// The batch shape and the model configuration of the forward pass these buffers hold, which
    /// the loss and the backward pass read; `None` before one, and once buffers are prepared for
    /// another pass.
    pub(crate) forward_of: Option<(Dims, ModelConfig)>,
    /// After [`Transformer::guided_alignment_loss`](super::Transformer::guided_alignment_loss):
    /// the supervised layer and head and ∂loss/∂P of that head, (B, T, S), which the backward
    /// pass adds; `None` before one, and once buffers are prepared for another pass.
    pub(crate) guided: Option<(usize, usize, Vec<f32>)>,
}

fn fit(v: &mut Vec<f32>, n: usize) {
    // Exactly n: a buffer sized for the largest batch, not the next power of two above it.
    if v.capacity() < n {
        v.reserve_exact(n - v.len());
    }
    v.resize(n, 0.0);
}

fn fit_attn(a: &mut AttnActs, q: usize, kv: usize, probs: usize, ctx: usize, m: usize, d: usize) {
    fit(&mut a.q, q);
    fit(&mut a.kv, kv);
    fit(&mut a.probs, probs);
    fit(&mut a.ctx, ctx);
    fit_norm(&mut a.norm, m, d);
}

fn fit_norm(n: &mut NormActs, m: usize, d: usize) {
    fit(&mut n.s, m * d);
    fit(&mut n.mean, m);
    fit(&mut n.rstd, m);
    fit(&mut n.out, m * d);
}

impl Workspace {
    /// An empty workspace; buffers are sized by the first pass.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sizes the buffers [`Transformer::encode`](super::Transformer::encode) needs and no more:
    /// the encoder input, two layers' activations (layers alternate between them, since nothing
    /// is kept for a backward pass) and the sub-layer scratch.
    pub fn prepare_encoder(&mut self, c: &ModelConfig, src_lens: &[usize], s: usize) {
        let b = src_lens.len();
        self.dims = Dims { b, s, t: 1 };
        self.forward_of = None;
        let (d, h, f) = (c.d_model, c.n_heads, c.d_ff);
        let (hk, hv) = (h * c.d_k, h * c.d_v);
        let ms = b * s;
        let ns = self.pack_source(c, src_lens, s);
        fit(&mut self.enc_in, ms * d);
        self.enc.truncate(c.n_layers.min(2));
        self.enc.resize_with(c.n_layers.min(2), Default::default);
        for e in &mut self.enc {
            fit_attn(&mut e.self_attn, ns * (2 * hk + hv), 0, b * h * s * s, ns * hv, ns, d);
            fit(&mut e.ffn.h, ns * f);
            e.ffn.pre.clear();
            fit_norm(&mut e.ffn.norm, ns, d);
        }
        fit(&mut self.y, ns * d);
    }

    /// The packed source rows' offsets and the padded encoder output's buffer; returns the rows
    /// the encoder layers' activations need.
    fn pack_source(&mut self, c: &ModelConfig, src_lens: &[usize], s: usize) -> usize {
        super::packing::offsets(src_lens, &mut self.src_rows);
        fit(&mut self.enc_out, src_lens.len() * s * c.d_model);
        self.src_rows[src_lens.len()]
    }

    /// Bytes held by the buffers (their capacity).
    pub fn bytes(&self) -> usize {
        fn v<T>(x: &Vec<T>) -> usize {
            x.capacity() * std::mem::size_of::<T>()
        }
        fn attn(a: &AttnActs) -> usize {
            v(&a.q) + v(&a.kv) + v(&a.probs) + v(&a.ctx) + norm(&a.norm)
        }
        fn norm(n: &NormActs) -> usize {
            v(&n.s) + v(&n.out) + v(&n.mean) + v(&n.rstd)
        }
        let ffn = |f: &FfnActs| v(&f.h) + v(&f.pre) + norm(&f.norm);
        let enc: usize = self.enc.iter().map(|e| attn(&e.self_attn) + ffn(&e.ffn)).sum();
        let dec: usize = self.dec.iter().map(|e| attn(&e.self_attn) + attn(&e.cross_attn) + ffn(&e.ffn)).sum();
        let g = &self.grad;
        enc + dec
            + [
                &self.enc_in,
                &self.enc_out,
                &self.dec_in,
                &self.ptr_in,
                &self.logits,
                &self.row_loss,
                &self.row_nll,
                &self.y,
            ]
            .iter()
            .map(|x| v(x))
            .sum::<usize>()
            + [&self.g_a, &self.g_b, &self.d_enc, &g.dy, &g.d_ctx, &g.d_qkv, &g.d_kv, &g.d_h, &g.dscores, &g.partials]
                .iter()
                .map(|x| v(x))
                .sum::<usize>()
            + v(&self.ptr)
            + v(&self.src_rows)
            + v(&self.closer)
            + v(&self.depth)
    }

    /// Sizes every buffer for a batch of `src_lens.len()` sentences of S source and T target
    /// positions, with those source lengths.
    pub fn prepare(&mut self, c: &ModelConfig, src_lens: &[usize], s: usize, t: usize) {
        let b = src_lens.len();
        self.dims = Dims { b, s, t };
        self.forward_of = None;
        self.guided = None;
        let (d, h, f) = (c.d_model, c.n_heads, c.d_ff);
        let (hk, hv) = (h * c.d_k, h * c.d_v);
        let (ms, mt) = (b * s, b * t);
        let mx = ms.max(mt);
        let ns = self.pack_source(c, src_lens, s);
        fit(&mut self.enc_in, ms * d);
        fit(&mut self.dec_in, mt * d);
        if c.parsing.source_pointer {
            fit(&mut self.ptr_in, mt * d);
        }
        self.enc.resize_with(c.n_layers, Default::default);
        self.dec.resize_with(c.n_layers, Default::default);
        let smooth = c.import.activation != crate::config::Activation::Relu;
        for e in &mut self.enc {
            fit_attn(&mut e.self_attn, ns * (2 * hk + hv), 0, b * h * s * s, ns * hv, ns, d);
            fit(&mut e.ffn.h, ns * f);
            fit(&mut e.ffn.pre, if smooth { ns * f } else { 0 });
            fit_norm(&mut e.ffn.norm, ns, d);
        }
        for e in &mut self.dec {
            fit_attn(&mut e.self_attn, mt * (2 * hk + hv), 0, b * h * t * t, mt * hv, mt, d);
            fit_attn(&mut e.cross_attn, mt * hk, ns * (hk + hv), b * h * t * s, mt * hv, mt, d);
            fit(&mut e.ffn.h, mt * f);
            fit(&mut e.ffn.pre, if smooth { mt * f } else { 0 });
            fit_norm(&mut e.ffn.norm, mt, d);
        }
        fit(&mut self.logits, mt * c.vocab_size);
        fit(&mut self.row_loss, mt);
        fit(&mut self.row_nll, mt);
        for v in [&mut self.y, &mut self.g_a, &mut self.g_b, &mut self.d_enc, &mut self.grad.dy] {
            fit(v, mx * d);
        }
        fit(&mut self.grad.d_ctx, mx * hv);
        fit(&mut self.grad.d_qkv, mx * (2 * hk + hv));
        fit(&mut self.grad.d_kv, ns * (hk + hv));
        fit(&mut self.grad.d_h, mx * f);
        fit(&mut self.grad.dscores, b * h * t.max(s) * t.max(s));
        let blocks = mx.div_ceil(crate::kernels::cpu::ROW_BLOCK);
        fit(&mut self.grad.partials, blocks * crate::kernels::cpu::layer_norm::PARTIAL_ROWS * d.max(f));
    }
}

/// `CharActs::word` of a position in no word.
pub(super) const NO_WORD: u32 = u32::MAX;

/// The character encoder's saved values for one batch.
#[derive(Default, Debug)]
pub struct CharActs {
    /// (B·S) the word of each source position ([`NO_WORD`] for none).
    pub(super) word: Vec<u32>,
    /// Every word's character ids, one word after another.
    pub(super) chars: Vec<u32>,
    /// Where each word's characters start, and the end (words + 1).
    pub(super) offsets: Vec<usize>,
    /// (words, D) the words' vectors.
    pub(super) out: Vec<f32>,
    /// (words, D) the window that gave each maximum.
    pub(super) arg: Vec<u32>,
    /// (words, D) the vectors' gradient.
    pub(super) dout: Vec<f32>,
}
