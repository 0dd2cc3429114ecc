//! bf16 matrix products on Intel AMX (Sapphire Rapids and later): the operands are rounded to bf16
//! (round to nearest even), multiplied by the AMX tile unit and summed in f32. Opt-in, for the
//! `bf16-matmul` deviation (docs/deviations.md); the default products stay f32.
//!
//! Layout. `op(A)` (m, k) is packed into 16 × 32 bf16 tiles, `op(B)` (k, n) into 16 × 32 tiles in
//! the "VNNI" pair order `tdpbf16ps` reads (row r holds k = 2r and 2r + 1 for 16 columns). Both are
//! zero-padded to whole 32 × 32 blocks, so the micro-kernel always computes a 32 × 32 block of C in
//! four accumulator tiles; the padding adds zeros to the sums. Blocks that lie wholly inside C are
//! loaded and stored in place; edge blocks go through a small buffer.

use std::arch::asm;
use std::sync::OnceLock;

use rayon::prelude::*;
use std::arch::x86_64::*;

use super::matmul::Op;

/// Tile geometry: 16 rows of 64 bytes (32 bf16 or 16 f32).
const TILE_ROWS: usize = 16;
/// bf16 elements per packed tile.
const TILE_ELEMS: usize = 16 * 32;
/// C block edge (two tiles).
const BLOCK: usize = 32;
/// Output blocks of columns per task: a task multiplies one 32-row strip of A by this many
/// 32-column strips of B, so the strip of A stays in L1/L2 while B streams.
const N_BLOCKS_PER_TASK: usize = 8;
/// k tiles (of 32) per pass over a task's column blocks.
const K_TILES_PER_PASS: usize = 16;

/// Whether this CPU and kernel can run AMX bf16 products; asks the kernel for the tile state once.
/// `Err` says why not.
pub fn available() -> Result<(), String> {
    static STATE: OnceLock<Result<(), String>> = OnceLock::new();
    STATE.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    #[cfg(target_arch = "x86_64")]
    {
        let max_leaf = std::arch::x86_64::__cpuid(0).eax;
        if max_leaf < 7 {
            return Err("this CPU has no AMX (cpuid leaf 7 missing)".into());
        }
        // Leaf 7 is present (checked above).
        let l7 = std::arch::x86_64::__cpuid_count(7, 0);
        let amx_bf16 = l7.edx & (1 << 22) != 0;
        let amx_tile = l7.edx & (1 << 24) != 0;
        if !(amx_bf16 && amx_tile) {
            return Err("this CPU has no AMX-BF16 tile unit (Intel Sapphire Rapids or later is needed)".into());
        }
        if !(is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512bf16")) {
            return Err("this CPU has AMX but not AVX512-BF16, which packing the operands uses".into());
        }
        request_tile_state()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Err("AMX needs an x86-64 CPU".into())
    }
}

/// Linux keeps the 8 KiB AMX tile state off until a process asks for it:
/// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`.
#[cfg(target_arch = "x86_64")]
fn request_tile_state() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("AMX products are only enabled on Linux (arch_prctl)".into());
    }
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: a plain Linux syscall with integer arguments; it reads and writes no user memory.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") SYS_ARCH_PRCTL => ret,
            in("rdi") ARCH_REQ_XCOMP_PERM,
            in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if ret == 0 {
        Ok(())
    } else {
        Err(format!("the kernel refused the AMX tile state (arch_prctl returned {ret}); Linux 5.16 or later is needed"))
    }
}

/// f32 → bf16, round to nearest even; NaN stays a (quiet) NaN.
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16;
    if x.is_nan() {
        0x7FC0
    } else {
        rounded
    }
}

/// bf16 → f32 (exact).
#[inline(always)]
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// 16 f32 from `p` (only the first `len` ≤ 16; the rest read as zero).
#[inline(always)]
unsafe fn load16(p: *const f32, len: usize) -> __m512 {
    // SAFETY: the caller guarantees `len` readable floats at `p`; masked lanes are not read.
    unsafe { _mm512_maskz_loadu_ps(((1u32 << len) - 1) as u16, p) }
}

/// Rounds `lo` and `hi` to bf16 (nearest even) and returns them as 32 u16: lo's 16, then hi's 16.
#[inline(always)]
unsafe fn to_bf16_x32(lo: __m512, hi: __m512) -> __m512i {
    // SAFETY: the caller's target features include avx512bf16; both types are 64 bytes.
    unsafe { std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo)) }
}

/// Rounds `x0` and `x1` to bf16 and interleaves them: 16 u32 lanes of (x0[i], x1[i]).
#[inline(always)]
unsafe fn bf16_pairs(x0: __m512, x1: __m512) -> __m512i {
    const IDX: [u16; 32] = {
        let mut idx = [0u16; 32];
        let mut i = 0;
        while i < 16 {
            idx[2 * i] = i as u16;
            idx[2 * i + 1] = 16 + i as u16;
            i += 1;
        }
        idx
    };
    // SAFETY: the caller's target features include avx512bw and avx512bf16.
    unsafe { _mm512_permutexvar_epi16(_mm512_loadu_si512(IDX.as_ptr().cast()), to_bf16_x32(x0, x1)) }
}

/// Writes the transpose of a 16 × 16 block of u32 (`rows[c][r]` → tile row r, u32 column c).
#[inline(always)]
fn transpose_into(tile: &mut [u16], rows: &[[u32; 16]; 16]) {
    for r in 0..16 {
        for c in 0..16 {
            let v = rows[c][r];
            tile[r * 32 + 2 * c] = v as u16;
            tile[r * 32 + 2 * c + 1] = (v >> 16) as u16;
        }
    }
}

/// Packs op(A) (m, k) into row tiles, k-tile-major: tile (it, pt) (rows 16·it.., k 32·pt..) sits at
/// `(pt · mt + it) · 512`, element (r, q) at `r · 32 + q`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn pack_a(a: &[f32], op_a: Op, m: usize, k: usize, mt: usize, kt: usize) -> Vec<u16> {
    let mut out = vec![0u16; mt * kt * TILE_ELEMS];
    if op_a == Op::N {
        // Row-major A: a task converts a group of k tiles for every row, reading each row's
        // 32·group floats contiguously (one k tile per task would stride through all of A).
        let group = (kt / 4).clamp(1, 8);
        out.par_chunks_mut(group * mt * TILE_ELEMS).enumerate().for_each(|(gi, panels)| {
            for i in 0..m {
                for (gp, panel) in panels.chunks_exact_mut(mt * TILE_ELEMS).enumerate() {
                    let pt = gi * group + gp;
                    let kc = (k - 32 * pt).min(32);
                    // SAFETY: the loads read kc floats of row i inside `a` (32·pt + kc ≤ k); the
                    // store writes 64 bytes of tile row i inside `panel`.
                    unsafe {
                        let src = a.as_ptr().add(i * k + 32 * pt);
                        let lo = load16(src, kc.min(16));
                        let hi = if kc > 16 { load16(src.add(16), kc - 16) } else { _mm512_setzero_ps() };
                        let dst = panel.as_mut_ptr().add((i / 16) * TILE_ELEMS + (i % 16) * 32);
                        _mm512_storeu_si512(dst.cast(), to_bf16_x32(lo, hi));
                    }
                }
            }
        });
        return out;
    }
    out.par_chunks_mut(mt * TILE_ELEMS).enumerate().for_each(|(pt, panel)| {
        let kc = (k - 32 * pt).min(32);
        // SAFETY: every load reads `len` floats that lie inside `a` (rows < m, k indices < k, by the
        // bounds computed here), and every store writes 64 bytes inside `panel`.
        unsafe {
            match op_a {
                Op::N => unreachable!("handled above"),
                Op::T => {
                    // A is stored (k, m): rows p, p + 1 of it give tile column pair p / 2 for 16
                    // tile rows at once; a 16 × 16 transpose puts the pairs in place.
                    let mut rows = [[0u32; 16]; 16];
                    for it in 0..m.div_ceil(16) {
                        let len = (m - 16 * it).min(16);
                        for (q2, row) in rows.iter_mut().enumerate() {
                            let p = 32 * pt + 2 * q2;
                            let x0 = if 2 * q2 < kc {
                                load16(a.as_ptr().add(p * m + 16 * it), len)
                            } else {
                                _mm512_setzero_ps()
                            };
                            let x1 = if 2 * q2 + 1 < kc {
                                load16(a.as_ptr().add((p + 1) * m + 16 * it), len)
                            } else {
                                _mm512_setzero_ps()
                            };
                            _mm512_storeu_si512(row.as_mut_ptr().cast(), bf16_pairs(x0, x1));
                        }
                        transpose_into(&mut panel[it * TILE_ELEMS..][..TILE_ELEMS], &rows);
                    }
                }
            }
        }
    });
    out
}

/// Packs op(B) (k, n) into pair-interleaved tiles, k-tile-major: tile (jt, pt) (columns 16·jt..,
/// k 32·pt..) sits at `(pt · nt + jt) · 512`; op(B)[32·pt + 2r + e][16·jt + j] at `r · 32 + 2j + e`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn pack_b(b: &[f32], op_b: Op, k: usize, n: usize, nt: usize, kt: usize) -> Vec<u16> {
    let mut out = vec![0u16; nt * kt * TILE_ELEMS];
    out.par_chunks_mut(nt * TILE_ELEMS).enumerate().for_each(|(pt, panel)| {
        let kc = (k - 32 * pt).min(32);
        // SAFETY: as in `pack_a`: loads stay inside `b`, stores inside `panel`.
        unsafe {
            match op_b {
                Op::N => {
                    // Rows p, p + 1 of B interleave into one tile row.
                    for jt in 0..n.div_ceil(16) {
                        let len = (n - 16 * jt).min(16);
                        for q2 in 0..kc.div_ceil(2) {
                            let p = 32 * pt + 2 * q2;
                            let x0 = load16(b.as_ptr().add(p * n + 16 * jt), len);
                            let x1 = if 2 * q2 + 1 < kc {
                                load16(b.as_ptr().add((p + 1) * n + 16 * jt), len)
                            } else {
                                _mm512_setzero_ps()
                            };
                            let dst = panel.as_mut_ptr().add(jt * TILE_ELEMS + q2 * 32);
                            _mm512_storeu_si512(dst.cast(), bf16_pairs(x0, x1));
                        }
                    }
                }
                Op::T => {
                    // B is stored (n, k): 32 consecutive k of column j are 16 pairs in a row of B.
                    let mut rows = [[0u32; 16]; 16];
                    for jt in 0..n.div_ceil(16) {
                        for (j, row) in rows.iter_mut().enumerate() {
                            let col = 16 * jt + j;
                            let v = if col < n {
                                let src = b.as_ptr().add(col * k + 32 * pt);
                                let lo = load16(src, kc.min(16));
                                let hi = if kc > 16 { load16(src.add(16), kc - 16) } else { _mm512_setzero_ps() };
                                to_bf16_x32(lo, hi)
                            } else {
                                _mm512_setzero_si512()
                            };
                            _mm512_storeu_si512(row.as_mut_ptr().cast(), v);
                        }
                        transpose_into(&mut panel[jt * TILE_ELEMS..][..TILE_ELEMS], &rows);
                    }
                }
            }
        }
    });
    out
}

/// The tile configuration: palette 1, eight tiles of 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 8 {
        c[16 + 2 * t] = 64;
        c[48 + t] = 16;
        t += 1;
    }
    TileConfig(c)
};

/// A raw pointer that may cross to a rayon worker; every task writes a disjoint part of C.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: tasks write disjoint row strips of C (see `matmul_bf16`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not the raw field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// C (m, n) = [C +] op(A) · op(B) with both operands rounded to bf16 and f32 sums, on AMX.
/// Same contract as [`super::matmul::matmul`]; the caller checks the sizes and [`available`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_bf16(
    c: &mut [f32],
    a: &[f32],
    op_a: Op,
    b: &[f32],
    op_b: Op,
    m: usize,
    n: usize,
    k: usize,
    accumulate: bool,
) {
    debug_assert!(available().is_ok());
    assert_eq!(c.len(), m * n);
    assert_eq!(a.len(), m * k);
    assert_eq!(b.len(), k * n);
    let mt = round_up(m, BLOCK) / TILE_ROWS;
    let nt = round_up(n, BLOCK) / 16;
    let kt = k.div_ceil(32);
    // SAFETY: `available` (the caller's precondition) checked avx512f/bw/bf16.
    let pa = unsafe { pack_a(a, op_a, m, k, mt, kt) };
    let pb = unsafe { pack_b(b, op_b, k, n, nt, kt) };
    let m_blocks = mt / 2;
    let n_blocks = nt / 2;
    let n_groups = n_blocks.div_ceil(N_BLOCKS_PER_TASK);
    let cp = SendPtr(c.as_mut_ptr());
    (0..m_blocks * n_groups).into_par_iter().for_each_init(
        || vec![0f32; N_BLOCKS_PER_TASK * BLOCK * BLOCK],
        |edges, task| {
            let (ib, g) = (task / n_groups, task % n_groups);
            let c_ptr = cp.get();
            let jbs = g * N_BLOCKS_PER_TASK..((g + 1) * N_BLOCKS_PER_TASK).min(n_blocks);
            let i0 = ib * BLOCK;
            // SAFETY: the CPU has AMX and the tile state is granted (`available`, checked by the
            // caller); the packed buffers hold mt × kt and nt × kt whole tiles, every block index
            // below is < m_blocks (rows 32·ib..+32 ≤ 16·mt) or < n_blocks, k tiles stay < kt; C is
            // read and written only at rows < m and columns < n (blocks wholly inside C in place,
            // the others through `edges`), and tasks own disjoint (row strip, column group) blocks.
            unsafe {
                asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
                // k in chunks of K_TILES_PER_PASS tiles: the 32-row strip of A for one chunk
                // (32 KiB at most) stays in L1 while the column group's blocks of B stream past.
                let mut p0 = 0;
                while p0 < kt {
                    let p1 = (p0 + K_TILES_PER_PASS).min(kt);
                    for (e, jb) in jbs.clone().enumerate() {
                        let j0 = jb * BLOCK;
                        let inside = i0 + BLOCK <= m && j0 + BLOCK <= n;
                        let (out, ld) = if inside {
                            (c_ptr.add(i0 * n + j0), n * 4)
                        } else {
                            (edges.as_mut_ptr().add(e * BLOCK * BLOCK), BLOCK * 4)
                        };
                        if p0 > 0 || (inside && accumulate) {
                            load_c(out, ld);
                        } else {
                            asm!(
                                "tilezero tmm0",
                                "tilezero tmm1",
                                "tilezero tmm2",
                                "tilezero tmm3",
                                options(nostack, nomem)
                            );
                        }
                        let a0 = pa.as_ptr().add((2 * ib) * TILE_ELEMS);
                        let a1 = a0.add(TILE_ELEMS);
                        let b0 = pb.as_ptr().add((2 * jb) * TILE_ELEMS);
                        let b1 = b0.add(TILE_ELEMS);
                        for p in p0..p1 {
                            let (a_off, b_off) = (p * mt * TILE_ELEMS, p * nt * TILE_ELEMS);
                            asm!(
                                "tileloadd tmm4, [{a0} + {s}*1]",
                                "tileloadd tmm6, [{b0} + {s}*1]",
                                "tileloadd tmm5, [{a1} + {s}*1]",
                                "tdpbf16ps tmm0, tmm4, tmm6",
                                "tileloadd tmm7, [{b1} + {s}*1]",
                                "tdpbf16ps tmm2, tmm5, tmm6",
                                "tdpbf16ps tmm1, tmm4, tmm7",
                                "tdpbf16ps tmm3, tmm5, tmm7",
                                a0 = in(reg) a0.add(a_off),
                                a1 = in(reg) a1.add(a_off),
                                b0 = in(reg) b0.add(b_off),
                                b1 = in(reg) b1.add(b_off),
                                s = in(reg) 64usize,
                                options(nostack, readonly),
                            );
                        }
                        store_c(out, ld);
                    }
                    p0 = p1;
                }
                asm!("tilerelease", options(nostack, nomem));
                for (e, jb) in jbs.enumerate() {
                    let j0 = jb * BLOCK;
                    if i0 + BLOCK <= m && j0 + BLOCK <= n {
                        continue;
                    }
                    let rows = (m - i0).min(BLOCK);
                    let cols = (n - j0).min(BLOCK);
                    for r in 0..rows {
                        let dst = std::slice::from_raw_parts_mut(c_ptr.add((i0 + r) * n + j0), cols);
                        let src = &edges[e * BLOCK * BLOCK + r * BLOCK..][..cols];
                        if accumulate {
                            dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
                        } else {
                            dst.copy_from_slice(src);
                        }
                    }
                }
            }
        },
    );
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
