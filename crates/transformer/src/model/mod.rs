//! §3 The encoder–decoder Transformer: wiring only. Kernels do the arithmetic; this module puts them
//! in order over one flat parameter buffer and one flat gradient buffer: the forward pass is the
//! encoder stack (`encoder.rs`), the decoder stack (`decoder.rs`) and the output projection; the
//! backward pass runs them in reverse. What the parser adds to the paper's inputs (the next-word
//! pointer, the next-closer input; named deviations) is `tree_inputs.rs`, one call at each site.

mod attention;
mod batch;
mod chars;
mod decoder;
mod encoder;
mod feed_forward;
mod guided;
pub mod incremental;
mod lins;
mod masks;
mod packing;
pub mod pointer;
mod prepared;
mod tree_inputs;
mod workspace;

pub use batch::{Batch, DropoutCtx};
pub use lins::OutputColumns;
pub(crate) use prepared::PreparedLoader;
pub use prepared::{DecoderKernels, Int8Codes, Prepared};
pub use workspace::Workspace;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::kernels::cpu::embedding::{sinusoid_table, Rows};
use crate::kernels::cpu::linear::product;
use crate::kernels::cpu::matmul::Op;
use crate::kernels::cpu::softmax_xent::{softmax_xent_forward_backward, XentSums};
use crate::params::{LeaveOut, ParamLayout};
use crate::precision::{Float, Precision};
use crate::vocab::{BOS, PAD};
use std::sync::Arc;

/// The model: configuration, layout and the flat parameter buffer; prepared for inference
/// ([`Transformer::prepare`]), also the linear maps in their compute layout.
#[derive(Clone, Debug)]
pub struct Transformer {
    /// Hyper-parameters.
    pub config: ModelConfig,
    /// Names, shapes and offsets of the parameters (in a prepared model, without the tensors the
    /// prepared maps hold: [`crate::params::LeaveOut`]).
    pub layout: ParamLayout,
    /// The parameters, laid out by `layout`.
    pub params: Vec<f32>,
    /// (max_positions, D) sinusoids (empty with learned positions).
    sinusoids: Vec<f32>,
    /// How its matrix products are computed, and on what.
    compute: Compute,
    /// With `source_pointer` or `next_closer`: what each vocabulary id is to the tree.
    pointer: Option<Arc<pointer::PointerTable>>,
}

/// Where a model's products read their weights.
#[derive(Clone, Debug)]
enum Compute {
    /// On W in the parameters, at this precision: a model that trains.
    Params(Float),
    /// On the prepared maps (the parameters no longer hold their weights): a model that decodes.
    Prepared(Arc<Prepared>),
}

/// Loss sums of one batch.
pub type LossSums = XentSums;

impl Transformer {
    /// A freshly initialised model.
    pub fn new(config: ModelConfig, seed: u64) -> Result<Self> {
        config.validate()?;
        let layout = ParamLayout::new(&config);
        let params = layout.init(seed);
        Self::from_params(config, params)
    }

    /// A model over given parameters (laid out by `ParamLayout::new(&config)`).
    pub fn from_params(config: ModelConfig, params: Vec<f32>) -> Result<Self> {
        config.validate()?;
        let layout = ParamLayout::new(&config);
        Self::with_layout(config, layout, params)
    }

    /// A model prepared for inference from its parts: the prepared maps, and `params` laid out
    /// without their weights (`ParamLayout::leaving_out`, the embedding left out too where the
    /// output projection keeps its rows exactly). What loading a checkpoint tensor by tensor
    /// builds (`checkpoint::load_prepared`) without ever holding every f32 weight.
    pub(crate) fn from_prepared(config: ModelConfig, params: Vec<f32>, prepared: Prepared) -> Result<Self> {
        config.validate()?;
        let leave_out = LeaveOut { linear_weights: true, embedding: prepared.embedding_rows().is_some() };
        let layout = ParamLayout::leaving_out(&config, leave_out);
        let mut model = Self::with_layout(config, layout, params)?;
        model.compute = Compute::Prepared(Arc::new(prepared));
        Ok(model)
    }

    fn with_layout(config: ModelConfig, layout: ParamLayout, params: Vec<f32>) -> Result<Self> {
        config.validate()?;
        if params.len() != layout.total() {
            return Err(Error::Mismatch(format!(
                "{} parameters given, the configuration needs {}",
                params.len(),
                layout.total()
            )));
        }
        let sinusoids = match config.positions {
            crate::config::Positions::Sinusoidal => {
                sinusoid_table(config.max_positions, config.d_model, config.import.sinusoid_layout)
            }
            crate::config::Positions::Learned => Vec::new(),
        };
        Ok(Transformer { config, layout, params, sinusoids, compute: Compute::Params(Float::F32), pointer: None })
    }

    /// The same model computing its matrix products at `precision` (f32 by default) on the
    /// weights in its parameters, as training does; an error where this CPU cannot, for int8
    /// (which only prepared weights have: [`Transformer::prepare`]) and for a prepared model.
    pub fn with_precision(mut self, precision: Precision) -> Result<Self> {
        precision.available()?;
        if let Compute::Prepared(p) = &self.compute {
            return Err(Error::Unsupported(format!(
                "this model is prepared for inference at {}: its parameters no longer hold the linear maps' weights, \
                 so it cannot compute on them at {precision}; load the checkpoint again",
                p.precision()
            )));
        }
        let float = precision.float().ok_or_else(|| {
            Error::Unsupported(
                "int8 products run only on weights prepared for inference (Transformer::prepare(Precision::Int8)); \
                 gradients and training need f32 or bf16"
                    .into(),
            )
        })?;
        self.compute = Compute::Params(float);
        Ok(self)
    }

    /// The same model prepared for inference at `precision` ([`Prepared`]): every linear map's
    /// weights laid out once for the products that read them (f32 panels, bf16 tiles, int8 codes),
    /// and removed from the parameters, which keep only what is not a linear map (and, at f32,
    /// not the embedding either: its rows are read from the prepared output projection). An
    /// error where this CPU cannot compute at `precision`. A model that is already prepared stays
    /// as it is at the same precision (a model from an int8 checkpoint is prepared at int8) and
    /// is refused at another.
    pub fn prepare(self, precision: Precision) -> Result<Self> {
        self.prepare_with(precision, DecoderKernels::Packed)
    }

    /// [`Transformer::prepare`] on the given kernels ([`DecoderKernels::Gemm`]: products on W as
    /// given, for A/B timing).
    pub fn prepare_with(self, precision: Precision, kernels: DecoderKernels) -> Result<Self> {
        precision.available()?;
        if let Compute::Prepared(p) = &self.compute {
            if p.precision() == precision {
                return Ok(self);
            }
            return Err(Error::Unsupported(if p.precision() == Precision::Int8 {
                format!(
                    "this model comes from an int8 checkpoint (`transformer quantize`), which holds no f32 weights for \
                     its linear maps: it decodes at int8 only, not {precision}; use the f32 checkpoint it was made from"
                )
            } else {
                format!("this model is prepared at {}, not {precision}; load the checkpoint again", p.precision())
            }));
        }
        let prepared = Prepared::build(&self.config, &self.layout, &self.params, precision, kernels);
        self.with_prepared(prepared)
    }

    /// The same model prepared at int8 with the linear maps' codes taken from `codes` (an int8
    /// checkpoint's) instead of quantised from the parameters, whose values for those maps are
    /// unused: such a model decodes at int8 only.
    pub fn with_int8_codes(self, codes: &Int8Codes) -> Result<Self> {
        if !matches!(self.compute, Compute::Params(_)) {
            return Err(Error::Unsupported("this model is already prepared for inference".into()));
        }
        let prepared = Prepared::from_codes(&self.config, &self.layout, codes)?;
        self.with_prepared(prepared)
    }

    /// Takes `prepared` (built from this model) and leaves its weights out of the parameters.
    fn with_prepared(mut self, prepared: Prepared) -> Result<Self> {
        let leave_out = LeaveOut { linear_weights: true, embedding: prepared.embedding_rows().is_some() };
        let layout = ParamLayout::leaving_out(&self.config, leave_out);
        self.params = layout.gather(&self.layout, &self.params)?;
        self.layout = layout;
        self.compute = Compute::Prepared(Arc::new(prepared));
        Ok(self)
    }

    /// The prepared linear maps, in a model prepared for inference.
    pub fn prepared(&self) -> Option<&Prepared> {
        match &self.compute {
            Compute::Prepared(p) => Some(p),
            Compute::Params(_) => None,
        }
    }

    /// The precision of products on the parameters (training's); f32 in a prepared model, which
    /// computes none.
    pub(crate) fn float(&self) -> Float {
        match self.compute {
            Compute::Params(f) => f,
            Compute::Prepared(_) => Float::F32,
        }
    }

    /// How the model's matrix products are computed.
    pub fn precision(&self) -> Precision {
        match &self.compute {
            Compute::Params(f) => (*f).into(),
            Compute::Prepared(p) => p.precision(),
        }
    }

    fn positions(&self) -> &[f32] {
        self.layout.offsets.learned_positions(&self.params).unwrap_or(&self.sinusoids)
    }

    /// The shared embedding E (V, D) in the parameters (§3.4), also the pre-softmax projection;
    /// empty in a model prepared at f32, whose output projection holds it
    /// ([`Transformer::embedding_rows`]).
    fn embedding(&self) -> &[f32] {
        self.layout.offsets.embedding(&self.params)
    }

    /// The rows of E as a lookup reads them: from the parameters, or from the prepared output
    /// projection where the parameters leave E out.
    fn embedding_rows(&self) -> Rows<'_> {
        match self.prepared().and_then(|p| p.embedding_rows()).filter(|_| self.layout.offsets.leave_out.embedding) {
            Some(rows) => rows,
            None => Rows::Dense(self.embedding()),
        }
    }

    /// The source embedding's rows: the shared E's, or the source vocabulary's own with
    /// `source_vocab_size`.
    fn source_rows(&self) -> Rows<'_> {
        match self.layout.offsets.source_embed {
            Some(_) => Rows::Dense(self.layout.offsets.source_embedding(&self.params)),
            None => self.embedding_rows(),
        }
    }

    /// The output logits' bias (V), with `output_bias`.
    fn output_bias(&self) -> Option<&[f32]> {
        self.layout.offsets.output_bias(&self.params)
    }

    /// §3.4: the embedding weights are multiplied by √d_model (unless `scale_embedding` is off).
    fn embedding_scale(&self) -> f32 {
        if self.config.import.scale_embedding {
            (self.config.d_model as f32).sqrt()
        } else {
            1.0
        }
    }

    /// Forward pass: fills `ws.logits` (B·T, V) and the activations the backward needs. Dropout is
    /// applied when `dropout` is given (training), skipped otherwise.
    pub fn forward(&self, batch: &Batch, ws: &mut Workspace, dropout: Option<DropoutCtx>) -> Result<()> {
        batch.validate(&self.config)?;
        self.tree_table()?;
        ws.prepare(&self.config, &batch.src_lens, batch.s, batch.t);
        // The parser's inputs, where the model has them (named deviations; none in the paper's).
        self.tree_inputs_prepare(batch, ws, dropout)?;
        let n = self.config.n_layers;
        // §3.1: the encoder stack over the source, then the decoder stack attending to its output.
        self.encoder_forward(batch, ws, dropout);
        self.decoder_forward(batch, ws, dropout);
        let dec_out: &[f32] = if n == 0 { &ws.dec_in } else { &ws.dec[n - 1].ffn.norm.out };
        // §3.4: the pre-softmax projection is the shared embedding, logits = h Eᵀ.
        self.output_lin().forward(&mut ws.logits, dec_out, self.output_bias(), batch.b * batch.t);
        ws.forward_of = Some((ws.dims, self.config.clone()));
        Ok(())
    }

    /// That `ws` holds this model's forward pass over `batch` (its shape, at this configuration),
    /// which the loss and the backward pass read: an [`Error::Batch`] naming `what` otherwise.
    fn check_forward_of(&self, batch: &Batch, ws: &Workspace, what: &str) -> Result<()> {
        batch.validate(&self.config)?;
        let dims = workspace::Dims { b: batch.b, s: batch.s, t: batch.t };
        let logits = batch.b * batch.t * self.config.vocab_size;
        match &ws.forward_of {
            Some((d, c)) if *d == dims && *c == self.config && ws.logits.len() == logits => Ok(()),
            Some((d, _)) => Err(Error::Batch(format!(
                "{what} reads the forward pass of the same batch by the same model, but the workspace holds one of \
                 B={} S={} T={} (this batch: B={} S={} T={}) or by another model: run Transformer::forward on this \
                 batch first",
                d.b, d.s, d.t, batch.b, batch.s, batch.t
            ))),
            None => Err(Error::Batch(format!(
                "{what} reads a forward pass, and the workspace holds none: run Transformer::forward on this batch first"
            ))),
        }
    }

    /// After [`Transformer::forward`] on the same batch and workspace: the label-smoothed loss over
    /// non-padding targets, replacing `ws.logits` by `grad_scale · ∂loss/∂logits` (pass 1/tokens
    /// for the per-token mean). A workspace that holds no forward pass of this batch is an error.
    pub fn loss(&self, batch: &Batch, ws: &mut Workspace, label_smoothing: f32, grad_scale: f32) -> Result<LossSums> {
        self.check_forward_of(batch, ws, "the loss")?;
        if !(0.0..1.0).contains(&label_smoothing) {
            return Err(Error::Config(format!("label smoothing {label_smoothing} must lie in [0, 1)")));
        }
        Ok(softmax_xent_forward_backward(
            &mut ws.logits,
            &mut ws.row_loss,
            &mut ws.row_nll,
            &batch.tgt_out,
            PAD,
            label_smoothing,
            grad_scale,
            self.config.vocab_size,
            &self.masked_outputs(),
        ))
    }

    /// The embedding rows training leaves as they are, for an imported model (one with masked
    /// outputs): the rows the import added, and BOS, which stands for Marian's zero start vector
    /// (the Hugging Face port's padding row, which it never trains either). So a model fine-tuned
    /// here is still one Marian computes the same way. Empty for a model of ours.
    pub fn frozen_rows(&self) -> Vec<u32> {
        let mut rows = self.masked_outputs();
        if !rows.is_empty() && !rows.contains(&BOS) {
            rows.push(BOS);
            rows.sort_unstable();
        }
        rows
    }

    /// The output ids an imported model does not have (their logit bias is
    /// [`MASKED_LOGIT`](crate::vocab::MASKED_LOGIT)): outside label smoothing's support. None
    /// for a model of ours, which has no output bias, or a bias training keeps finite.
    pub fn masked_outputs(&self) -> Vec<u32> {
        let Some(bias) = self.output_bias() else { return Vec::new() };
        bias.iter().enumerate().filter(|(_, &b)| b <= crate::vocab::MASKED_LOGIT / 2.0).map(|(i, _)| i as u32).collect()
    }

    /// Backward pass after [`Transformer::forward`] and [`Transformer::loss`] on the same batch,
    /// workspace and dropout context. Accumulates (`+=`) parameter gradients into `grads`. A model
    /// prepared for inference, a gradient buffer that is not one value per parameter and a
    /// workspace that holds no forward pass of this batch are errors.
    pub fn backward(
        &self,
        batch: &Batch,
        ws: &mut Workspace,
        dropout: Option<DropoutCtx>,
        grads: &mut [f32],
    ) -> Result<()> {
        if let Some(p) = self.prepared() {
            return Err(Error::Unsupported(format!(
                "a model prepared for inference (at {}) has no backward pass: its parameters no longer hold the \
                 linear maps' weights; train the model as loaded",
                p.precision()
            )));
        }
        if grads.len() != self.params.len() {
            return Err(Error::Mismatch(format!(
                "{} gradients given for the model's {} parameters: there must be one a parameter",
                grads.len(),
                self.params.len()
            )));
        }
        self.check_forward_of(batch, ws, "the backward pass")?;
        let (d, v, n) = (self.config.d_model, self.config.vocab_size, self.config.n_layers);
        let mt = ws.dims.b * ws.dims.t;
        let emb = self.embedding();

        // Pre-softmax projection: d(dec_out) = dlogits E; dE += dlogitsᵀ dec_out.
        let dec_out: &[f32] = if n == 0 { &ws.dec_in } else { &ws.dec[n - 1].ffn.norm.out };
        product(self.float(), &mut ws.g_a[..mt * d], &ws.logits, Op::N, emb, Op::N, mt, d, v, false);
        let (emb_g, _) = self.layout.offsets.embedding_mut(grads);
        product(self.float(), emb_g, &ws.logits, Op::T, dec_out, Op::N, v, d, mt, true);
        if let Some(bias_g) = self.layout.offsets.output_bias_mut(grads) {
            crate::kernels::cpu::elementwise::column_sum_add(bias_g, &ws.logits[..mt * v], v);
        }
        self.decoder_backward(batch, ws, dropout, grads);
        self.encoder_backward(batch, ws, dropout, grads);
        let frozen = self.frozen_rows();
        if !frozen.is_empty() {
            let (emb_g, _) = self.layout.offsets.embedding_mut(grads);
            for id in frozen {
                emb_g[id as usize * d..][..d].fill(0.0);
            }
        }
        Ok(())
    }
}
