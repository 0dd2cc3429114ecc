//! Opt-in wall-clock accounting per kernel family, for `bench train-step`: a scope guard at each
//! kernel's entry adds its elapsed time to a slot. Off by default (one relaxed load per call).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Kernel families.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Large matrix products (`matmul`).
    Matmul,
    /// Attention forward.
    Attention,
    /// Attention backward.
    AttentionBackward,
    /// Residual + LayerNorm forward and backward.
    LayerNorm,
    /// Softmax + cross-entropy.
    Loss,
    /// Embedding gather and scatter.
    Embedding,
    /// ReLU forward and backward.
    Relu,
    /// Bias gradients (column sums).
    BiasGrad,
    /// Zeroing gradients and checking them for NaN/∞.
    Elementwise,
    /// Adam.
    Adam,
    /// Beam search: log-normalisers and top-k of the next-token scores.
    Search,
}

const SLOTS: [(Slot, &str); 11] = [
    (Slot::Matmul, "matmul"),
    (Slot::Attention, "attention fwd"),
    (Slot::AttentionBackward, "attention bwd"),
    (Slot::LayerNorm, "layer norm"),
    (Slot::Loss, "softmax+xent"),
    (Slot::Embedding, "embedding"),
    (Slot::Relu, "relu"),
    (Slot::BiasGrad, "bias gradients"),
    (Slot::Elementwise, "zero grads + finite check"),
    (Slot::Adam, "adam"),
    (Slot::Search, "beam search (normalise + top-k)"),
];

static ENABLED: AtomicBool = AtomicBool::new(false);
static NANOS: [AtomicU64; 11] = [const { AtomicU64::new(0) }; 11];
static MATMUL_FLOPS: AtomicU64 = AtomicU64::new(0);

/// Turns accounting on or off.
pub fn enable(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// A running measurement; adds its time to the slot when dropped.
pub struct Scope(Option<(usize, Instant)>);

/// Starts timing `slot` (a no-op unless enabled).
#[inline]
pub fn scope(slot: Slot) -> Scope {
    if ENABLED.load(Ordering::Relaxed) {
        Scope(Some((SLOTS.iter().position(|s| s.0 == slot).unwrap(), Instant::now())))
    } else {
        Scope(None)
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some((i, t)) = self.0 {
            NANOS[i].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// Counts the FLOPs of one matrix product (when enabled).
#[inline]
pub fn add_matmul_flops(flops: u64) {
    if ENABLED.load(Ordering::Relaxed) {
        MATMUL_FLOPS.fetch_add(flops, Ordering::Relaxed);
    }
}

/// Seconds per slot since the last call (resetting them), and matmul FLOPs.
pub fn take() -> (Vec<(&'static str, f64)>, u64) {
    let times = SLOTS
        .iter()
        .enumerate()
        .map(|(i, (_, name))| (*name, NANOS[i].swap(0, Ordering::Relaxed) as f64 * 1e-9))
        .collect();
    (times, MATMUL_FLOPS.swap(0, Ordering::Relaxed))
}
