//! Fast CPU kernels: fused, multi-threaded with rayon, runtime-dispatched to AVX-512/AVX2 where present.
//! Results are deterministic for a given thread count: reductions use fixed partitions.

pub mod adam;
pub mod attention;
pub mod bf16;
pub mod cached_attention;
pub mod char_cnn;
pub mod elementwise;
pub mod embedding;
pub mod int8;
pub mod layer_norm;
pub mod linear;
pub mod matmul;
pub mod packed;
pub mod peak;
pub mod profile;
pub mod search;
pub mod softmax_xent;

/// Rows per task in row-parallel kernels, and per partial sum in column reductions. Fixed, so that
/// reductions sum in the same order whatever the thread count.
pub const ROW_BLOCK: usize = 32;

/// A pointer to a kernel's f32 output that may cross to rayon workers, for kernels whose tasks
/// each write a disjoint part of it (the kernel that makes one says which part is whose).
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);
// SAFETY: a `SendPtr` is only made by kernels whose tasks write disjoint elements of the buffer it
// points to, which outlives the tasks (they run inside the call that borrows it).
unsafe impl Send for SendPtr {}
// SAFETY: as for `Send`: shared between tasks that never touch the same element.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not the raw field).
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}
