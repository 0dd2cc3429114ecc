//! §5.4 Dropout sites. Every mask is keyed by (seed, pass counter, site), and each layer's masks are
//! built by one function that the forward and the backward pass both call, so the two passes
//! cannot drift apart.

use super::batch::DropoutCtx;
use crate::config::ModelConfig;
use crate::rng::DropoutMask;

/// Dropout site numbers (mixed into the mask key).
pub(crate) mod site {
    pub const ENC_EMBED: u64 = 1;
    pub const DEC_EMBED: u64 = 2;
    /// Sub-layer `k` of encoder layer `l`; `+ ATTN` for its attention weights.
    pub fn enc(l: usize, k: u64) -> u64 {
        100 + 10 * l as u64 + k
    }
    /// Sub-layer `k` of decoder layer `l`.
    pub fn dec(l: usize, k: u64) -> u64 {
        100_000 + 10 * l as u64 + k
    }
    pub const ATTN: u64 = 5;
    /// Positions that get no next-closer input (`next_closer_dropout`).
    pub const CLOSER: u64 = 3;
    /// The character encoder's word vectors (`char_dim`).
    pub const CHARS: u64 = 4;
    /// Word dropout (`Batch::src_drop`).
    pub const WORDS: u64 = 6;
}

/// The mask of dropout probability `p` at `site`: none without a context (inference) or with p = 0.
fn mask(ctx: Option<DropoutCtx>, p: f32, site: u64) -> Option<DropoutMask> {
    match ctx {
        Some(c) if p > 0.0 => Some(DropoutMask::new(p, c.seed, c.counter, site)),
        _ => None,
    }
}

/// Dropout on the sums of embeddings and positional encodings of both stacks.
#[derive(Clone, Copy, Debug)]
pub(super) struct EmbeddingMasks {
    /// Encoder input.
    pub source: Option<DropoutMask>,
    /// Decoder input.
    pub target: Option<DropoutMask>,
    /// The character encoder's word vectors, where they are added to the encoder input.
    pub chars: Option<DropoutMask>,
}

impl EmbeddingMasks {
    pub(super) fn new(c: &ModelConfig, ctx: Option<DropoutCtx>) -> Self {
        EmbeddingMasks {
            source: mask(ctx, c.dropout, site::ENC_EMBED),
            target: mask(ctx, c.dropout, site::DEC_EMBED),
            chars: mask(ctx, c.dropout, site::CHARS),
        }
    }
}

/// The dropout masks of one attention sub-layer: on its output (before the residual) and on its
/// attention weights.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SubLayerMasks {
    /// The sub-layer's output.
    pub out: Option<DropoutMask>,
    /// The attention weights.
    pub weights: Option<DropoutMask>,
}

/// The dropout masks of encoder layer `l`: on each sub-layer's output and on the attention weights.
#[derive(Clone, Copy, Debug)]
pub(super) struct EncoderLayerMasks {
    /// Self-attention output and weights.
    pub self_attn: SubLayerMasks,
    /// FFN output.
    pub ffn: Option<DropoutMask>,
}

impl EncoderLayerMasks {
    pub(super) fn new(c: &ModelConfig, ctx: Option<DropoutCtx>, l: usize) -> Self {
        EncoderLayerMasks {
            self_attn: SubLayerMasks {
                out: mask(ctx, c.dropout, site::enc(l, 0)),
                weights: mask(ctx, c.attention_dropout, site::enc(l, site::ATTN)),
            },
            ffn: mask(ctx, c.dropout, site::enc(l, 1)),
        }
    }
}

/// The dropout masks of decoder layer `l`.
#[derive(Clone, Copy, Debug)]
pub(super) struct DecoderLayerMasks {
    /// Masked self-attention output and weights.
    pub self_attn: SubLayerMasks,
    /// Encoder–decoder attention output and weights.
    pub cross_attn: SubLayerMasks,
    /// FFN output.
    pub ffn: Option<DropoutMask>,
}

impl DecoderLayerMasks {
    pub(super) fn new(c: &ModelConfig, ctx: Option<DropoutCtx>, l: usize) -> Self {
        DecoderLayerMasks {
            self_attn: SubLayerMasks {
                out: mask(ctx, c.dropout, site::dec(l, 0)),
                weights: mask(ctx, c.attention_dropout, site::dec(l, site::ATTN)),
            },
            cross_attn: SubLayerMasks {
                out: mask(ctx, c.dropout, site::dec(l, 1)),
                weights: mask(ctx, c.attention_dropout, site::dec(l, site::ATTN + 1)),
            },
            ffn: mask(ctx, c.dropout, site::dec(l, 2)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A mask's identity: its key, probability and scale (DropoutMask has no `PartialEq`).
    fn id(m: Option<DropoutMask>) -> String {
        format!("{m:?}")
    }

    fn all(c: &ModelConfig, ctx: Option<DropoutCtx>) -> Vec<String> {
        let e = EmbeddingMasks::new(c, ctx);
        let mut v = vec![id(e.source), id(e.target)];
        for l in 0..c.n_layers {
            let m = EncoderLayerMasks::new(c, ctx, l);
            v.extend([m.self_attn.out, m.self_attn.weights, m.ffn].map(id));
            let m = DecoderLayerMasks::new(c, ctx, l);
            v.extend([m.self_attn.out, m.self_attn.weights, m.cross_attn.out, m.cross_attn.weights, m.ffn].map(id));
        }
        v
    }

    #[test]
    fn builders_are_deterministic_and_distinct_per_site() {
        let c = ModelConfig { n_layers: 12, dropout: 0.1, attention_dropout: 0.2, ..ModelConfig::base() };
        let ctx = Some(DropoutCtx { seed: 7, counter: 3 });
        // What the forward builds is what the backward rebuilds.
        let (fwd, bwd) = (all(&c, ctx), all(&c, ctx));
        assert_eq!(fwd, bwd);
        let unique: HashSet<_> = fwd.iter().collect();
        assert_eq!(unique.len(), fwd.len(), "two dropout sites share a mask");
        assert!(fwd.iter().all(|m| m.starts_with("Some")));
        // Another pass draws other masks everywhere.
        let other = all(&c, Some(DropoutCtx { seed: 7, counter: 4 }));
        assert!(fwd.iter().zip(&other).all(|(a, b)| a != b));
    }

    #[test]
    fn no_masks_without_a_context_or_a_probability() {
        let c = ModelConfig { n_layers: 2, dropout: 0.1, attention_dropout: 0.1, ..ModelConfig::base() };
        assert!(all(&c, None).iter().all(|m| m == "None"));
        let c = ModelConfig { dropout: 0.0, attention_dropout: 0.0, ..c };
        assert!(all(&c, Some(DropoutCtx { seed: 1, counter: 1 })).iter().all(|m| m == "None"));
    }
}
