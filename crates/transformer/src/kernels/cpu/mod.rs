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
