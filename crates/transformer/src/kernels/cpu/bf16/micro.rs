//! The micro-kernels of [`super::multiply`]: a 32 × 32 block of C on AMX tiles, a strip of up to
//! 8 rows × 32 columns with `vdpbf16ps`, and the loads, stores and prefetches of C around them.

use std::arch::asm;
use std::arch::x86_64::*;

use super::TILE_ELEMS;

/// One 32 × 32 block of C at `out` (row stride `ld` floats) on AMX: loaded (`load`) or zeroed,
/// plus the products of `tiles` k tiles: A's two row tiles at `a0` and B's two column tiles at
/// `b0`, the next k tile `a_step` / `b_step` elements on.
///
/// # Safety
/// The tile configuration is loaded; `out` is a writable 32 × 32 block; `tiles` ≥ 1 packed k tiles exist.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) unsafe fn amx_block(
    out: *mut f32,
    ld: usize,
    load: bool,
    a0: *const u16,
    a_step: usize,
    b0: *const u16,
    b_step: usize,
    tiles: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        if load {
            load_c(out, ld * 4);
        } else {
            asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
        }
        // Software-pipelined: the tile registers are not renamed, so a load into a register
        // waits for the products still reading it. Each k tile's operands are loaded right after
        // their last use in the previous k tile (A0 after the two products that read it, B0 after
        // its second, A1 and B1 at the end), which lets the loads overlap the products; loading all
        // four first and then multiplying ran at about half the rate (`examples/amx_rate.rs`).
        asm!(
            "tileloadd tmm4, [{a0} + {s}*1]",
            "tileloadd tmm6, [{b0} + {s}*1]",
            "tileloadd tmm5, [{a1} + {s}*1]",
            "tileloadd tmm7, [{b1} + {s}*1]",
            a0 = in(reg) a0,
            a1 = in(reg) a0.add(TILE_ELEMS),
            b0 = in(reg) b0,
            b1 = in(reg) b0.add(TILE_ELEMS),
            s = in(reg) 64usize,
            options(nostack, readonly),
        );
        for p in 1..tiles {
            let (a, b) = (a0.add(p * a_step), b0.add(p * b_step));
            asm!(
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm4, [{a0} + {s}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tileloadd tmm6, [{b0} + {s}*1]",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "tileloadd tmm5, [{a1} + {s}*1]",
                "tileloadd tmm7, [{b1} + {s}*1]",
                a0 = in(reg) a,
                a1 = in(reg) a.add(TILE_ELEMS),
                b0 = in(reg) b,
                b1 = in(reg) b.add(TILE_ELEMS),
                s = in(reg) 64usize,
                options(nostack, readonly),
            );
        }
        asm!(
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            options(nostack, nomem),
        );
        store_c(out, ld * 4);
    }
}

/// R ≤ 8 rows × 32 columns of C at `out` (row stride `ld` floats) with `vdpbf16ps`: loaded (`load`) or
/// zeroed, plus the products of `tiles` k tiles. `a` points at the first of the 8 rows inside a
/// packed A tile (32 bf16 per row), `b0` at the first of two packed B tiles (16 columns each); the
/// next k tile is `a_step` / `b_step` elements on. 16 accumulators, two B rows and a broadcast
/// pair of A per step.
///
/// # Safety
/// avx512f/bw/bf16 are present; `out` is a writable 8 × 32 block; the packed tiles exist.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn dp_strip<const R: usize>(
    out: *mut f32,
    ld: usize,
    load: bool,
    a: *const u16,
    a_step: usize,
    b0: *const u16,
    b_step: usize,
    tiles: usize,
) {
    // SAFETY: the caller's contract; every read lies inside the packed tiles named above, every
    // load and store of C inside the 8 × 32 block.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        if load {
            for (r, row) in acc.iter_mut().enumerate() {
                row[0] = _mm512_loadu_ps(out.add(r * ld));
                row[1] = _mm512_loadu_ps(out.add(r * ld + 16));
            }
        }
        for p in 0..tiles {
            let (ap, bp) = (a.add(p * a_step), b0.add(p * b_step));
            for q in 0..16 {
                let vb0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(q * 32).cast()));
                let vb1: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(TILE_ELEMS + q * 32).cast()));
                for (r, row) in acc.iter_mut().enumerate() {
                    let pair = ap.add(r * 32 + 2 * q).cast::<i32>().read_unaligned();
                    let va: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                    row[0] = _mm512_dpbf16_ps(row[0], va, vb0);
                    row[1] = _mm512_dpbf16_ps(row[1], va, vb1);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            _mm512_storeu_ps(out.add(r * ld), row[0]);
            _mm512_storeu_ps(out.add(r * ld + 16), row[1]);
        }
    }
}

/// Loads the 32 × 32 f32 block at `out` (row stride `ld` bytes) into tmm0..tmm3.
#[inline(always)]
unsafe fn load_c(out: *mut f32, ld: usize) {
    // SAFETY: the caller passes a block of 32 rows × 32 floats with row stride `ld` bytes.
    unsafe {
        asm!(
            "tileloadd tmm0, [{p0} + {s}*1]",
            "tileloadd tmm1, [{p1} + {s}*1]",
            "tileloadd tmm2, [{p2} + {s}*1]",
            "tileloadd tmm3, [{p3} + {s}*1]",
            p0 = in(reg) out,
            p1 = in(reg) out.add(16),
            p2 = in(reg) (out as *mut u8).add(16 * ld),
            p3 = in(reg) (out as *mut u8).add(16 * ld + 64),
            s = in(reg) ld,
            options(nostack, readonly),
        );
    }
}

/// Stores tmm0..tmm3 to the 32 × 32 f32 block at `out` (row stride `ld` bytes).
#[inline(always)]
unsafe fn store_c(out: *mut f32, ld: usize) {
    // SAFETY: the caller passes a writable block of 32 rows × 32 floats with row stride `ld` bytes.
    unsafe {
        asm!(
            "tilestored [{p0} + {s}*1], tmm0",
            "tilestored [{p1} + {s}*1], tmm1",
            "tilestored [{p2} + {s}*1], tmm2",
            "tilestored [{p3} + {s}*1], tmm3",
            p0 = in(reg) out,
            p1 = in(reg) out.add(16),
            p2 = in(reg) (out as *mut u8).add(16 * ld),
            p3 = in(reg) (out as *mut u8).add(16 * ld + 64),
            s = in(reg) ld,
            options(nostack),
        );
    }
}
