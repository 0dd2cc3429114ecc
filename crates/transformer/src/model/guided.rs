//! Guided alignment training (Marian's `--guided-alignment`, Garg et al. 2019): the loss that
//! trains one head of one decoder layer's encoder–decoder attention towards the batch's given
//! alignment ([`Batch::guide`]), beside the cross-entropy. Its gradient reaches the head's
//! queries and keys in the backward pass (`kernels::cpu::guided`).

use super::batch::Batch;
use super::workspace::Workspace;
use super::Transformer;
use crate::error::{Error, Result};
use crate::kernels::cpu::guided::guided_loss;
use crate::kernels::AttnDims;

impl Transformer {
    /// After [`Transformer::forward`] on `batch` (with [`Batch::guide`]): the guided-alignment
    /// loss −`weight` · Σ A ⊙ log(P + ε) of head `head` of decoder layer `layer` (both counted
    /// from 0), and ∂loss/∂P · `grad_scale` kept in `ws` for [`Transformer::backward`]. A batch
    /// without a guide, or a layer or head the model does not have, is an error.
    pub fn guided_alignment_loss(
        &self,
        batch: &Batch,
        ws: &mut Workspace,
        weight: f32,
        layer: usize,
        head: usize,
        grad_scale: f32,
    ) -> Result<f64> {
        self.check_forward_of(batch, ws, "the guided-alignment loss")?;
        let c = &self.config;
        if batch.guide.is_empty() {
            return Err(Error::Batch("the guided-alignment loss needs a batch with a guide (Batch::guide)".into()));
        }
        if layer >= c.n_layers || head >= c.n_heads {
            return Err(Error::Config(format!(
                "guided alignment on layer {} head {} (from 1), but the model has {} decoder layers of {} heads",
                layer + 1,
                head + 1,
                c.n_layers,
                c.n_heads
            )));
        }
        let d = AttnDims { b: batch.b, h: c.n_heads, t: batch.t, s: batch.s, k: c.d_k, v: c.d_v };
        let mut dprobs = vec![0f32; batch.guide.len()];
        let probs = &ws.dec[layer].cross_attn.probs[..d.b * d.h * d.t * d.s];
        let loss = guided_loss(probs, &batch.guide, &mut dprobs, head, weight, grad_scale, d);
        ws.guided = Some((layer, head, dprobs));
        Ok(loss)
    }
}
