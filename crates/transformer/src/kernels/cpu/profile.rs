//! Opt-in wall-clock accounting per kernel family, for `bench train-step` and `translate
//! --profile`: a scope guard at each kernel's entry adds its elapsed time to a slot of the
//! [`Profile`] installed on the calling thread ([`Profile::install`]). Nothing is counted on a
//! thread with no profile installed (one thread-local read per kernel call), so two models in one
//! process each count only what their own calls run.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    products: Mutex<BTreeMap<Shape, ShapeTimes>>,
}

/// A matrix product's shape, as the per-shape profile keys it: C (m, n) = op_a(A) · op_b(B) with
/// inner dimension k; `t_a` / `t_b` say whether the stored operand is transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shape {
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// A is used transposed.
    pub t_a: bool,
    /// B is used transposed.
    pub t_b: bool,
}

impl Shape {
    /// FLOPs of one product of this shape (2·m·n·k).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// "NT 2048×8000×512"-style label: the operands' ops, then m × n × k.
    pub fn label(&self) -> String {
        let op = |t: bool| if t { 'T' } else { 'N' };
        format!("{}{} {}x{}x{}", op(self.t_a), op(self.t_b), self.m, self.n, self.k)
    }
}

/// Time spent in the products of one [`Shape`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShapeTimes {
    /// Products made.
    pub calls: u64,
    /// Seconds in them, packing included.
    pub seconds: f64,
    /// Seconds of that spent rounding and packing op(A) (bf16 products; 0 where the kernel packs
    /// inside its own loop).
    pub pack_a_seconds: f64,
    /// The same for op(B).
    pub pack_b_seconds: f64,
}

thread_local! {
    /// Packing time of op(A) and op(B) in the product running on this thread, read when its
    /// [`ProductScope`] ends.
    static PACK_NANOS: Cell<[u64; 2]> = const { Cell::new([0; 2]) };
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

    /// The profile installed on this thread, if any: what a thread started for the same work
    /// installs in turn.
    pub fn current() -> Option<Profile> {
        CURRENT.with(|c| c.borrow().clone())
    }

    /// Time per product shape since the last call (resetting it), largest first.
    pub fn take_products(&self) -> Vec<(Shape, ShapeTimes)> {
        let mut v: Vec<_> = std::mem::take(&mut *self.0.products.lock().unwrap()).into_iter().collect();
        v.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
        v
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

/// A running measurement; adds its time to the slot when dropped.
pub struct Scope(Option<(Profile, usize, Instant)>);

/// Starts timing `slot` (a no-op unless a profile is installed on this thread).
#[inline]
pub fn scope(slot: Slot) -> Scope {
    Scope(Profile::current().map(|p| (p, SLOTS.iter().position(|s| s.0 == slot).unwrap(), Instant::now())))
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
    if let Some(p) = Profile::current() {
        p.0.matmul_flops.fetch_add(flops, Ordering::Relaxed);
    }
}

/// A running matrix product: counts its FLOPs, and adds its time to the matmul slot and to its
/// shape's entry (with the packing time [`pack_scope`] measured inside it) when dropped. A no-op
/// unless a profile is installed on this thread.
pub struct ProductScope(Option<(Profile, Shape, Instant)>);

/// Starts timing one product of C (m, n) = op(A) · op(B) with inner dimension k.
#[inline]
pub fn product_scope(m: usize, n: usize, k: usize, t_a: bool, t_b: bool) -> ProductScope {
    ProductScope(Profile::current().map(|p| {
        let shape = Shape { m, n, k, t_a, t_b };
        p.0.matmul_flops.fetch_add(shape.flops() as u64, Ordering::Relaxed);
        PACK_NANOS.with(|c| c.set([0; 2]));
        (p, shape, Instant::now())
    }))
}

impl Drop for ProductScope {
    fn drop(&mut self) {
        if let Some((p, shape, t)) = self.0.take() {
            let nanos = t.elapsed().as_nanos() as u64;
            let matmul = SLOTS.iter().position(|s| s.0 == Slot::Matmul).unwrap();
            p.0.nanos[matmul].fetch_add(nanos, Ordering::Relaxed);
            let pack = PACK_NANOS.with(|c| c.replace([0; 2]));
            let mut products = p.0.products.lock().unwrap();
            let e = products.entry(shape).or_default();
            e.calls += 1;
            e.seconds += nanos as f64 * 1e-9;
            e.pack_a_seconds += pack[0] as f64 * 1e-9;
            e.pack_b_seconds += pack[1] as f64 * 1e-9;
        }
    }
}

/// A running operand packing inside a product; adds its time to that product's packing time of
/// op(A) (`b` false) or op(B).
pub struct PackScope(Option<(usize, Instant)>);

/// Starts timing the packing of op(A), or of op(B) with `b` (a no-op unless a profile is
/// installed).
#[inline]
pub fn pack_scope(b: bool) -> PackScope {
    PackScope(Profile::current().map(|_| (b as usize, Instant::now())))
}

impl Drop for PackScope {
    fn drop(&mut self) {
        if let Some((i, t)) = self.0.take() {
            let nanos = t.elapsed().as_nanos() as u64;
            PACK_NANOS.with(|c| {
                let mut v = c.get();
                v[i] += nanos;
                c.set(v)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::linear::product;
    use crate::kernels::cpu::matmul::Op;
    use crate::precision::{Float, Precision};

    #[test]
    fn products_are_counted_by_shape_with_their_packing() {
        let (m, n, k) = (40, 24, 33);
        let a = vec![0.5f32; k * m];
        let b = vec![0.25f32; k * n];
        let mut c = vec![0f32; m * n];
        let profile = Profile::new();
        let mut precisions = vec![Float::F32];
        if Precision::Bf16.available().is_ok() {
            precisions.push(Float::Bf16);
        }
        for &prec in &precisions {
            profile.install(|| {
                product(prec, &mut c, &a, Op::T, &b, Op::N, m, n, k, false);
                product(prec, &mut c, &a, Op::T, &b, Op::N, m, n, k, false);
                product(prec, &mut c[..n * n], &a[..k * n], Op::N, &b, Op::N, n, n, k, false);
            });
            assert!(c[..n * n].iter().all(|&x| x == 0.125 * k as f32), "{prec:?}: wrong product");
            let shapes = profile.take_products();
            assert_eq!(shapes.len(), 2, "{prec:?}: {shapes:?}");
            let twice = shapes.iter().find(|s| s.0 == Shape { m, n, k, t_a: true, t_b: false }).expect("TN shape");
            assert_eq!(twice.1.calls, 2);
            let once = shapes.iter().find(|s| s.0 == Shape { m: n, n, k, t_a: false, t_b: false }).expect("NN shape");
            assert_eq!(once.1.calls, 1);
            for (s, t) in &shapes {
                let pack = t.pack_a_seconds + t.pack_b_seconds;
                assert!(t.seconds > 0.0 && pack <= t.seconds, "{prec:?} {}: {t:?}", s.label());
                // f32 products pack inside the gemm crate, which reports nothing; bf16 ones pack here.
                assert_eq!(pack > 0.0, prec == Float::Bf16, "{prec:?} {}: {t:?}", s.label());
            }
            let (_, flops) = profile.take();
            assert_eq!(flops, (2 * (2 * m * n * k) + 2 * n * n * k) as u64);
            assert!(profile.take_products().is_empty(), "taking resets the table");
        }
        assert_eq!(Shape { m, n, k, t_a: true, t_b: false }.label(), "TN 40x24x33");
    }
}
