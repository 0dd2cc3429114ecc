//! Fast CPU kernels: fused, multi-threaded with rayon, runtime-dispatched to AVX-512/AVX2 where present.
//! Results are deterministic for a given thread count: reductions use fixed partitions.

pub mod adam;
pub mod attention;
pub mod bf16;
pub mod cached_attention;
pub mod char_cnn;
pub mod elementwise;
pub mod embedding;
pub mod guided;
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

/// Asks for the cache lines of `rows` rows of `cols` floats at `out` (row stride `ld` floats), so
/// that a kernel's stores at the end of its sums find them in cache: a product's output can be
/// larger than the core's cache (the logits of 128 rows: 4 MB), and stores waiting on memory
/// stall the next block. Each row's first element, every 16th and its last (a row need not start
/// on a line). A plain prefetch (`prefetcht0`): the write-intent hint needs the `prfchw` feature.
/// A hint: it reads nothing and faults on nothing.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_rows(out: *const f32, ld: usize, rows: usize, cols: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    if cols == 0 {
        return;
    }
    for r in 0..rows {
        let row = out.wrapping_add(r * ld);
        for j in (0..cols).step_by(16).chain([cols - 1]) {
            // SAFETY: prefetching never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(j).cast()) };
        }
    }
}

/// Stores the transpose of 16 rows of 16 u32 (`rows[c]` lane r → out row r, column c), its first
/// `len` rows, `ld` u32 apart: 32- and 64-bit interleaves within 128-bit lanes, then two rounds of
/// 128-bit lane shuffles. For the bf16 packers (pairs of bf16 as u32, tile rows 16 apart) and the
/// small f32 products (rows of a scratch). Its naive twin is in the bf16 tests.
///
/// # Safety
/// avx512f is present; rows r < `len` ≤ 16 of 16 u32 each, `ld` apart from `out`, are writable.
#[inline(always)]
pub(crate) unsafe fn transpose16(out: *mut u32, ld: usize, rows: &[std::arch::x86_64::__m512i; 16], len: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract.
    unsafe {
        let mut t = [_mm512_setzero_si512(); 16];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
        }
        // u[4g + e]: in 128-bit lane L, element 4L + e of rows 4g..4g + 4.
        let mut u = [_mm512_setzero_si512(); 16];
        for g in 0..4 {
            let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
            u[4 * g] = _mm512_unpacklo_epi64(a, c);
            u[4 * g + 1] = _mm512_unpackhi_epi64(a, c);
            u[4 * g + 2] = _mm512_unpacklo_epi64(b, d);
            u[4 * g + 3] = _mm512_unpackhi_epi64(b, d);
        }
        // Output row 4L + e holds lane L of u[e], u[4 + e], u[8 + e], u[12 + e].
        let mut o = [_mm512_setzero_si512(); 16];
        for e in 0..4 {
            let v = _mm512_shuffle_i32x4::<0x44>(u[e], u[4 + e]);
            let w = _mm512_shuffle_i32x4::<0xEE>(u[e], u[4 + e]);
            let v2 = _mm512_shuffle_i32x4::<0x44>(u[8 + e], u[12 + e]);
            let w2 = _mm512_shuffle_i32x4::<0xEE>(u[8 + e], u[12 + e]);
            o[e] = _mm512_shuffle_i32x4::<0x88>(v, v2);
            o[4 + e] = _mm512_shuffle_i32x4::<0xDD>(v, v2);
            o[8 + e] = _mm512_shuffle_i32x4::<0x88>(w, w2);
            o[12 + e] = _mm512_shuffle_i32x4::<0xDD>(w, w2);
        }
        for (r, v) in o.iter().enumerate().take(len) {
            _mm512_storeu_si512(out.add(r * ld).cast(), *v);
        }
    }
}
