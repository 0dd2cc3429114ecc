//! Models trained by other toolkits, imported into this engine (and written back out): CTranslate2's
//! model directories ([`ct2`]), Marian / OPUS-MT ([`marian`]), from a Hugging Face `MarianMTModel` directory (`model.safetensors` or
//! `pytorch_model.bin`) or from a native Marian model (`model.npz`, `decoder.yml`, vocabularies).
//!
//! An import writes an ordinary checkpoint (the paper's model with the options of
//! [`crate::config::ModelConfig`] that the imported architecture needs: its FFN activation, a
//! final logits bias, the sinusoid layout, separate vocabularies) and one tokenizer file
//! ([`crate::data::tokenizer::Tokenizer`]) that every verb accepts in place of a BPE model.

pub mod ct2;
mod files;
pub mod hf_export;
pub mod marian;
pub mod npz;
pub mod pickle;
mod yaml;

use crate::checkpoint::Checkpoint;
use crate::config::ModelConfig;
pub use crate::data::tokenizer::IdMap;

/// The most bytes one entry of a zip archive of `archive_bytes` may expand to: model archives
/// store their arrays (numpy's `savez`, `torch.save`) or deflate them little, so an entry over four
/// times its whole archive (plus 1 MiB) is a zip bomb, refused before it is read.
pub(crate) fn max_entry_bytes(archive_bytes: u64) -> u64 {
    archive_bytes.saturating_mul(4).saturating_add(1 << 20)
}

/// A checkpoint whose learned position table is its sinusoids rounded (to within bfloat16's half
/// step, 8e-3, which no trained table and no other layout is), as `import ct2` keeps a float16
/// table: the same checkpoint with computed sinusoids instead, for the exports whose formats
/// compute their own. Any other checkpoint is returned as it is.
pub(crate) fn rounded_sinusoids_as_computed(ckpt: &Checkpoint) -> std::borrow::Cow<'_, Checkpoint> {
    use crate::config::Positions;
    use crate::params::ParamLayout;
    use std::borrow::Cow;
    let c = &ckpt.config;
    if c.positions != Positions::Learned {
        return Cow::Borrowed(ckpt);
    }
    let layout = ParamLayout::new(c);
    let Some(table) = layout.get("embed.positions").and_then(|e| ckpt.params.get(e.range())) else {
        return Cow::Borrowed(ckpt);
    };
    let exact = crate::kernels::cpu::embedding::sinusoid_table(c.max_positions, c.d_model, c.import.sinusoid_layout);
    if exact.len() != table.len() || exact.iter().zip(table).any(|(a, b)| (a - b).abs() > 8e-3) {
        return Cow::Borrowed(ckpt);
    }
    let config = ModelConfig { positions: Positions::Sinusoidal, ..c.clone() };
    let to = ParamLayout::new(&config);
    let mut params = vec![0f32; to.total()];
    for e in to.entries() {
        let from = layout.get(&e.name).expect("the layouts differ by the position table alone");
        params[e.range()].copy_from_slice(&ckpt.params[from.range()]);
    }
    Cow::Owned(Checkpoint { config, params, adam: None, ..ckpt.clone() })
}
