//! Opt-in wall-clock accounting per kernel family, for `bench train-step` and `translate
//! --profile`: a scope guard at each kernel's entry adds its elapsed time to a slot of the
//! [`Profile`] installed on the calling thread ([`Profile::install`]). Nothing is counted on a
//! thread with no profile installed (one thread-local read per kernel call), so two models in one
//! process each count only what their own calls run.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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

#[derive(Debug, Default)]
struct Counters {
    nanos: [AtomicU64; 11],
    matmul_flops: AtomicU64,
}

/// Time per kernel family and matrix-product FLOPs, counted for the calls made inside
/// [`Profile::install`]. Cloning shares the counters.
#[derive(Clone, Debug, Default)]
pub struct Profile(Arc<Counters>);

thread_local! {
    static CURRENT: RefCell<Option<Profile>> = const { RefCell::new(None) };
}

impl Profile {
    /// An empty profile.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `f` with this profile counting the kernels it calls on this thread (the previous
    /// one, if any, is restored after, also on panic).
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Profile>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let prev = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = prev);
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.borrow_mut().replace(self.clone())));
        f()
    }

    /// Seconds per slot since the last call (resetting them), and matmul FLOPs.
    pub fn take(&self) -> (Vec<(&'static str, f64)>, u64) {
        let times = SLOTS
            .iter()
            .enumerate()
            .map(|(i, (_, name))| (*name, self.0.nanos[i].swap(0, Ordering::Relaxed) as f64 * 1e-9))
            .collect();
        (times, self.0.matmul_flops.swap(0, Ordering::Relaxed))
    }
}

fn current() -> Option<Profile> {
    CURRENT.with(|c| c.borrow().clone())
}

/// A running measurement; adds its time to the slot when dropped.
pub struct Scope(Option<(Profile, usize, Instant)>);

/// Starts timing `slot` (a no-op unless a profile is installed on this thread).
#[inline]
pub fn scope(slot: Slot) -> Scope {
    Scope(current().map(|p| (p, SLOTS.iter().position(|s| s.0 == slot).unwrap(), Instant::now())))
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some((p, i, t)) = self.0.take() {
            p.0.nanos[i].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
    }
}

/// Counts the FLOPs of one matrix product (when a profile is installed on this thread).
#[inline]
pub fn add_matmul_flops(flops: u64) {
    if let Some(p) = current() {
        p.0.matmul_flops.fetch_add(flops, Ordering::Relaxed);
    }
}
