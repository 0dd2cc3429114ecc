//! bf16 matrix products: the operands are rounded to bf16 (round to nearest even), multiplied and
//! summed in f32, on one of two units ([`Unit`]): the Intel AMX tile unit (Sapphire Rapids and
//! later), or the AVX512-BF16 dot-product instruction `vdpbf16ps` (AMD Zen 4 and later; Intel Cooper
//! Lake, and Sapphire Rapids and later). Opt-in, for the `bf16-matmul` deviation (docs/deviations.md); the default
//! products stay f32.
//!
//! Layout. `op(A)` (m, k) is packed into 16 × 32 bf16 tiles, `op(B)` (k, n) into 16 × 32 tiles in
//! the "VNNI" pair order `tdpbf16ps` and `vdpbf16ps` read (row r holds k = 2r and 2r + 1 for 16
//! columns, one 512-bit register). Both are zero-padded to whole 32 × 32 blocks, so the micro-kernel
//! always computes a 32 × 32 block of C (AMX: four accumulator tiles; AVX512-BF16: four strips of
//! 8 rows × 32 columns in 16 registers); the padding adds zeros to the sums. Blocks that lie wholly
//! inside C are loaded and stored in place; edge blocks go through a small buffer. The packed
//! tiles are strip-major (a 32-row strip's k tiles one after another) and on 64-byte boundaries
//! ([`Tiles`]).
//!
//! On AMX three things set the rate (measured on a 2-core Xeon with AMX, 2026-11-27, in
//! `examples/amx_rate.rs` and a loop of bare tile instructions): a `tileloadd` whose rows straddle
//! cache lines took about 60 cycles against 24 for aligned rows; the tile registers are not
//! renamed, so a load into a register waits for the products that still read it (loading all four
//! operands and then multiplying ran at half the rate of loading each one right after its last
//! use); and with one tile load per product (the 2 × 2 blocking, the most eight tiles allow) the
//! loads, not the products, are the bound.

use std::arch::asm;
use std::sync::OnceLock;

use rayon::prelude::*;
use std::arch::x86_64::*;

use super::matmul::Op;
use super::{transpose16, SendPtr};
use micro::{amx_block, dp_strip};

mod micro;

/// Tile geometry: 16 rows of 64 bytes (32 bf16 or 16 f32).
const TILE_ROWS: usize = 16;
/// bf16 elements per packed tile.
const TILE_ELEMS: usize = 16 * 32;
/// C block edge (two tiles).
const BLOCK: usize = 32;
/// Output blocks of columns per task: a task multiplies one 32-row strip of A by this many
/// 32-column strips of B (see [`multiply`]).
const N_BLOCKS_PER_TASK: usize = 8;
/// k tiles (of 32) per pass over a task's column blocks, on AMX.
const K_TILES_PER_PASS: usize = 16;
/// The same with `vdpbf16ps`: a strip of 8 rows of A holds 16 KiB a pass (L1), a task's column
/// blocks 512 KiB (L2). Measured in the quick start's training step on Zen 4 (2026-11-29), with
/// the strip-outer order of [`multiply`]: 16 tiles 0.742 s, 32 tiles 0.704 s, 64 tiles 0.698 s
/// (medians of 5 interleaved runs).
const K_TILES_PER_PASS_DP: usize = 32;

/// The unit that multiplies bf16 operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Intel AMX tiles (`tdpbf16ps`): 16 × 32 by 32 × 16 per instruction.
    Amx,
    /// AVX512-BF16 (`vdpbf16ps`): 16 lanes of 2-term dot products per instruction.
    Avx512Bf16,
}

/// The fastest bf16 unit this CPU and kernel offer (AMX before AVX512-BF16); `Err` says why there
/// is none. Asks the kernel for the AMX tile state once.
pub fn unit() -> Result<Unit, String> {
    static UNIT: OnceLock<Result<Unit, String>> = OnceLock::new();
    UNIT.get_or_init(|| match amx_available() {
        Ok(()) => Ok(Unit::Amx),
        Err(no_amx) => {
            avx512_bf16_available().map(|()| Unit::Avx512Bf16).map_err(|no_dp| format!("{no_amx}, and {no_dp}"))
        }
    })
    .clone()
}

/// Whether this CPU can run bf16 products on some [`Unit`]; `Err` says why not.
pub fn available() -> Result<(), String> {
    unit().map(|_| ())
}

/// Every unit this CPU can run (for tests and benchmarks that compare them).
pub fn units() -> Vec<Unit> {
    let mut u = Vec::new();
    if amx_available().is_ok() {
        u.push(Unit::Amx);
    }
    if avx512_bf16_available().is_ok() {
        u.push(Unit::Avx512Bf16);
    }
    u
}

/// Whether this CPU has the AVX-512 subsets the packing and the `vdpbf16ps` kernel use.
pub fn avx512_bf16_available() -> Result<(), String> {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16")
        {
            return Ok(());
        }
    }
    Err("no AVX512-BF16 (AMD Zen 4 and later, Intel Cooper Lake and Sapphire Rapids and later have it)".into())
}

/// Whether this CPU and kernel can run AMX bf16 products; asks the kernel for the tile state once.
/// `Err` says why not.
pub fn amx_available() -> Result<(), String> {
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
        if !(is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16"))
        {
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

/// Writes the transpose of a 16 × 16 block of u32 (`rows[c][r]` → tile row r, u32 column c): the
/// naive twin of [`transpose16`] (the tile's rows 16 u32 apart).
#[cfg(test)]
fn transpose_into(tile: &mut [u16], rows: &[[u32; 16]; 16]) {
    for r in 0..16 {
        for c in 0..16 {
            let v = rows[c][r];
            tile[r * 32 + 2 * c] = v as u16;
            tile[r * 32 + 2 * c + 1] = (v >> 16) as u16;
        }
    }
}

/// A raw pointer to packed tiles that may cross to a rayon worker; tasks write disjoint tiles.
#[derive(Clone, Copy)]
struct TilePtr(*mut u16);
// SAFETY: each task of the packers writes its own tiles.
unsafe impl Send for TilePtr {}
unsafe impl Sync for TilePtr {}

impl TilePtr {
    fn get(self) -> *mut u16 {
        self.0
    }
}

/// Packs op(A) (m, k) into row tiles, strip-major: the 32-row strip `ib` (rows 32·ib..) holds its
/// k tiles one after another, each as two 16-row tiles: tile (it, pt) (rows 16·it.., k 32·pt..)
/// sits at `((it / 2) · kt + pt) · 2 + it % 2` tiles, element (r, q) at `r · 32 + q`. One k pass
/// over a strip then reads contiguous memory (a k-tile-major layout put every k tile of a strip
/// a multiple of 4 KiB apart, in the same L1 sets). Writes every element of `out`
/// (mt · kt tiles), the zero padding included, so `out` may hold anything before.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn pack_a(out: &mut [u16], a: &[f32], op_a: Op, m: usize, k: usize, mt: usize, kt: usize) {
    assert_eq!(out.len(), mt * kt * TILE_ELEMS);
    assert_eq!(mt % 2, 0);
    match op_a {
        Op::N => out.par_chunks_mut(2 * kt * TILE_ELEMS).enumerate().for_each(|(ib, strip)| {
            // Row-major A: each row's k floats are read once, contiguously.
            for r in 0..BLOCK {
                let i = BLOCK * ib + r;
                for pt in 0..kt {
                    // SAFETY: the loads read kc floats of row i < m inside `a`; the store writes
                    // 64 bytes of tile row r % 16 inside `strip`.
                    unsafe {
                        let v = if i < m {
                            let kc = (k - 32 * pt).min(32);
                            let src = a.as_ptr().add(i * k + 32 * pt);
                            let lo = load16(src, kc.min(16));
                            let hi = if kc > 16 { load16(src.add(16), kc - 16) } else { _mm512_setzero_ps() };
                            to_bf16_x32(lo, hi)
                        } else {
                            _mm512_setzero_si512()
                        };
                        let dst = strip.as_mut_ptr().add((2 * pt + r / 16) * TILE_ELEMS + (r % 16) * 32);
                        _mm512_storeu_si512(dst.cast(), v);
                    }
                }
            }
        }),
        Op::T => {
            // A is stored (k, m). A task takes one k tile: 32 consecutive rows of storage, read
            // along their length (a task per row strip would sweep every row of A 128 bytes at a
            // time). Rows p, p + 1 give tile column pair p / 2 for 16 tile rows at once; a
            // 16 × 16 transpose puts the pairs in place.
            let op = TilePtr(out.as_mut_ptr());
            (0..kt).into_par_iter().for_each(|pt| {
                let kc = (k - 32 * pt).min(32);
                for it in 0..mt {
                    // SAFETY: every load reads `len` floats inside `a` (rows p < k, columns < m);
                    // the tile written lies inside `out` (it < mt, pt < kt) and belongs to this
                    // task alone (its k tile).
                    unsafe {
                        let tile = op.get().add(((it / 2) * kt + pt) * 2 * TILE_ELEMS + (it % 2) * TILE_ELEMS);
                        let len = m.saturating_sub(16 * it).min(16);
                        if len == 0 {
                            std::ptr::write_bytes(tile, 0, TILE_ELEMS);
                            continue;
                        }
                        let mut rows = [_mm512_setzero_si512(); 16];
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
                            *row = bf16_pairs(x0, x1);
                        }
                        transpose16(tile.cast(), 16, &rows, 16);
                    }
                }
            });
        }
    }
}

/// Packs op(B) (k, n) into pair-interleaved tiles, strip-major like [`pack_a`]: tile (jt, pt)
/// (columns 16·jt.., k 32·pt..) sits at `((jt / 2) · kt + pt) · 2 + jt % 2` tiles;
/// op(B)[32·pt + 2r + e][16·jt + j] at `r · 32 + 2j + e`. Writes every element of `out`
/// (nt · kt tiles), the zero padding included.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn pack_b(out: &mut [u16], b: &[f32], op_b: Op, k: usize, n: usize, nt: usize, kt: usize) {
    assert_eq!(out.len(), nt * kt * TILE_ELEMS);
    assert_eq!(nt % 2, 0);
    match op_b {
        Op::N => {
            // B is stored (k, n). A task takes one k tile (32 rows of storage, read along their
            // length); rows p, p + 1 interleave into one tile row.
            let op = TilePtr(out.as_mut_ptr());
            (0..kt).into_par_iter().for_each(|pt| {
                let kc = (k - 32 * pt).min(32);
                for jt in 0..nt {
                    let len = n.saturating_sub(16 * jt).min(16);
                    // SAFETY: loads read `len` floats of rows < k inside `b`; the tile written lies
                    // inside `out` (jt < nt, pt < kt) and belongs to this task alone.
                    unsafe {
                        let tile = op.get().add(((jt / 2) * kt + pt) * 2 * TILE_ELEMS + (jt % 2) * TILE_ELEMS);
                        for q2 in 0..16 {
                            let p = 32 * pt + 2 * q2;
                            let v = if len > 0 && 2 * q2 < kc {
                                let x0 = load16(b.as_ptr().add(p * n + 16 * jt), len);
                                let x1 = if 2 * q2 + 1 < kc {
                                    load16(b.as_ptr().add((p + 1) * n + 16 * jt), len)
                                } else {
                                    _mm512_setzero_ps()
                                };
                                bf16_pairs(x0, x1)
                            } else {
                                _mm512_setzero_si512()
                            };
                            _mm512_storeu_si512(tile.add(q2 * 32).cast(), v);
                        }
                    }
                }
            });
        }
        Op::T => out.par_chunks_mut(2 * kt * TILE_ELEMS).enumerate().for_each(|(jb, strip)| {
            // B is stored (n, k): 32 consecutive k of column j are 16 pairs in a row of B, read
            // along the row; a 16 × 16 transpose puts them in place.
            for pt in 0..kt {
                let kc = (k - 32 * pt).min(32);
                for h in 0..2 {
                    let jt = 2 * jb + h;
                    // SAFETY: loads read kc floats of rows col < n inside `b`; the tile lies inside
                    // `strip`.
                    unsafe {
                        let tile = strip.as_mut_ptr().add((2 * pt + h) * TILE_ELEMS);
                        let mut rows = [_mm512_setzero_si512(); 16];
                        for (j, row) in rows.iter_mut().enumerate() {
                            let col = 16 * jt + j;
                            if col < n {
                                let src = b.as_ptr().add(col * k + 32 * pt);
                                let lo = load16(src, kc.min(16));
                                let hi = if kc > 16 { load16(src.add(16), kc - 16) } else { _mm512_setzero_ps() };
                                *row = to_bf16_x32(lo, hi);
                            }
                        }
                        transpose16(tile.cast(), 16, &rows, 16);
                    }
                }
            }
        }),
    }
}

/// Packed operands, kept between products on each calling thread: a fresh buffer of tens of MB
/// costs more in page faults than the packing itself. Taken out while in use, so a nested product
/// on the same thread (a rayon worker) allocates its own. They never shrink: each calling thread
/// keeps its largest packed A and B (half the size of the f32 operands, plus padding; about 48 MB
/// each for the Multi30k output layer's gradient products).
mod pack_buffers {
    use std::cell::Cell;
    thread_local! {
        pub static A: Cell<super::Tiles> = const { Cell::new(super::Tiles::new()) };
        pub static B: Cell<super::Tiles> = const { Cell::new(super::Tiles::new()) };
        pub static EDGES: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    }
}

/// A buffer of `len` elements from `cell` (contents unspecified); give it back with `Cell::set`.
fn take_buffer(cell: &'static std::thread::LocalKey<std::cell::Cell<Tiles>>, len: usize) -> Tiles {
    let mut v = cell.take();
    v.resize(len);
    v
}

/// One cache line of bf16 values: one row of a tile.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Line([u16; 32]);

/// Packed bf16 tiles on 64-byte boundaries. Every tile row is then one cache line: rows split
/// across two lines made each `tileloadd` about 2.5 times as slow (24 against 60 cycles a tile in
/// `examples/amx_rate.rs`'s measurements, Xeon with AMX, 2026-11-27) and halved the products' rate.
#[derive(Clone, Default)]
pub(crate) struct Tiles(Vec<Line>);

impl Tiles {
    const fn new() -> Self {
        Tiles(Vec::new())
    }

    /// `len` elements (a multiple of 32), zeros where new.
    fn zeros(len: usize) -> Self {
        let mut t = Tiles::new();
        t.resize(len);
        t
    }

    /// Sets the length to `len` elements (a multiple of 32); kept contents are unspecified.
    fn resize(&mut self, len: usize) {
        assert_eq!(len % 32, 0, "packed tiles are whole cache lines");
        self.0.resize(len / 32, Line([0; 32]));
    }

    fn as_slice(&self) -> &[u16] {
        // SAFETY: `Line` is 32 u16 with no padding (repr(C), 64 bytes, align 64).
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.0.len() * 32) }
    }

    fn as_mut_slice(&mut self) -> &mut [u16] {
        // SAFETY: as in `as_slice`.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.0.len() * 32) }
    }

    fn len(&self) -> usize {
        self.0.len() * 32
    }
}

impl std::fmt::Debug for Tiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tiles({} bf16)", self.len())
    }
}

/// A buffer of `len` f32 for the edge blocks of C (contents unspecified); give it back to
/// `pack_buffers::EDGES`.
fn take_f32_buffer(len: usize) -> Vec<f32> {
    let mut v = pack_buffers::EDGES.take();
    if v.capacity() < len {
        v = vec![0f32; len];
    } else {
        v.resize(len, 0.0);
    }
    v
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

/// The tile configuration every AMX kernel here loads (palette 1, eight tiles of 16 × 64 bytes).
pub(crate) fn tile_config() -> &'static [u8; 64] {
    &CONFIG.0
}

/// C (m, n) = [C +] op(A) · op(B) with both operands rounded to bf16 and f32 sums, on [`unit`].
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
    let unit = unit().expect("bf16 products on a CPU without a bf16 unit (check `available` first)");
    matmul_bf16_on(unit, c, a, op_a, b, op_b, m, n, k, accumulate)
}

/// [`matmul_bf16`] on a given unit, which must be one of [`units`] (panics otherwise).
#[allow(clippy::too_many_arguments)]
pub fn matmul_bf16_on(
    unit: Unit,
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
    match unit {
        Unit::Amx => amx_available().expect("AMX products requested"),
        Unit::Avx512Bf16 => avx512_bf16_available().expect("AVX512-BF16 products requested"),
    }
    // The size limit leaves room for the padded tiles.
    if !super::matmul::check_and_trivial("matmul_bf16", (isize::MAX as usize) / 8, c, a, b, m, n, k, accumulate) {
        return;
    }
    let mt = round_up(m, BLOCK) / TILE_ROWS;
    let nt = round_up(n, BLOCK) / 16;
    let kt = k.div_ceil(32);
    let mut pa = take_buffer(&pack_buffers::A, mt * kt * TILE_ELEMS);
    let mut pb = take_buffer(&pack_buffers::B, nt * kt * TILE_ELEMS);
    // SAFETY: both units need avx512f/bw/bf16, checked above.
    unsafe {
        let p = super::profile::pack_scope(false);
        pack_a(pa.as_mut_slice(), a, op_a, m, k, mt, kt);
        drop(p);
        let _p = super::profile::pack_scope(true);
        pack_b(pb.as_mut_slice(), b, op_b, k, n, nt, kt);
    }
    multiply(unit, c, pa.as_slice(), pb.as_slice(), m, n, (mt, nt, kt), accumulate);
    pack_buffers::A.set(pa);
    pack_buffers::B.set(pb);
}

/// For benchmarks (`examples/amx_rate.rs`): the seconds `clock` counts for packing op(A), packing
/// op(B) and multiplying, each the best of `reps` runs of one [`matmul_bf16`] call's parts.
#[doc(hidden)]
#[allow(clippy::too_many_arguments)]
pub fn time_parts(
    clock: fn() -> f64,
    reps: usize,
    c: &mut [f32],
    a: &[f32],
    op_a: Op,
    b: &[f32],
    op_b: Op,
    (m, n, k): (usize, usize, usize),
) -> [f64; 3] {
    let unit = unit().expect("a bf16 unit");
    let mt = round_up(m, BLOCK) / TILE_ROWS;
    let nt = round_up(n, BLOCK) / 16;
    let kt = k.div_ceil(32);
    let mut pa = Tiles::zeros(mt * kt * TILE_ELEMS);
    let mut pb = Tiles::zeros(nt * kt * TILE_ELEMS);
    let mut best = [f64::INFINITY; 3];
    for _ in 0..reps {
        let t0 = clock();
        // SAFETY: a bf16 unit implies avx512f/bw/bf16.
        unsafe { pack_a(pa.as_mut_slice(), a, op_a, m, k, mt, kt) };
        let t1 = clock();
        // SAFETY: as above.
        unsafe { pack_b(pb.as_mut_slice(), b, op_b, k, n, nt, kt) };
        let t2 = clock();
        multiply(unit, c, pa.as_slice(), pb.as_slice(), m, n, (mt, nt, kt), false);
        let t3 = clock();
        for (x, t) in best.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2]) {
            *x = x.min(t);
        }
    }
    best
}

/// A weight matrix W (n, k), stored (n, k) like `nn.Linear`, rounded to bf16 and packed once as
/// op(B) = Wᵀ for products X · Wᵀ ([`linear_bf16`]): inference weights, packed at load instead of
/// at every product.
#[derive(Clone, Debug)]
pub struct Bf16Weights {
    n: usize,
    k: usize,
    nt: usize,
    kt: usize,
    tiles: Tiles,
}

impl Bf16Weights {
    /// Rounds and packs W; panics without a bf16 unit (check [`available`] first).
    pub fn new(w: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "Bf16Weights: W has {} elements, expected {n}x{k}", w.len());
        avx512_bf16_available().expect("bf16 weights on a CPU without AVX512-BF16");
        let nt = round_up(n.max(1), BLOCK) / 16;
        let kt = k.div_ceil(32).max(1);
        let mut tiles = Tiles::zeros(nt * kt * TILE_ELEMS);
        // SAFETY: avx512f/bw/bf16 checked above.
        unsafe { pack_b(tiles.as_mut_slice(), w, Op::T, k, n, nt, kt) };
        Bf16Weights { n, k, nt, kt, tiles }
    }

    /// Output width n.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        2 * self.tiles.len()
    }
}

/// C (m, n) = [C +] A (m, k) · Wᵀ with W packed by [`Bf16Weights::new`]; A is rounded and packed
/// here. The same sums as [`matmul_bf16`] on (A, Op::N, W, Op::T).
pub fn linear_bf16(c: &mut [f32], a: &[f32], w: &Bf16Weights, m: usize, accumulate: bool) {
    let unit = unit().expect("bf16 products on a CPU without a bf16 unit (check `available` first)");
    let (n, k) = (w.n, w.k);
    assert_eq!(a.len(), m * k, "linear_bf16: A has {} elements, expected {m}x{k}", a.len());
    assert_eq!(c.len(), m * n, "linear_bf16: C has {} elements, expected {m}x{n}", c.len());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    let _t = super::profile::product_scope(m, n, k, false, true);
    let mt = round_up(m, BLOCK) / TILE_ROWS;
    let mut pa = take_buffer(&pack_buffers::A, mt * w.kt * TILE_ELEMS);
    // SAFETY: a bf16 unit implies avx512f/bw/bf16.
    unsafe {
        let _p = super::profile::pack_scope(false);
        pack_a(pa.as_mut_slice(), a, Op::N, m, k, mt, w.kt)
    };
    multiply(unit, c, pa.as_slice(), w.tiles.as_slice(), m, n, (mt, w.nt, w.kt), accumulate);
    pack_buffers::A.set(pa);
}

/// C (m, n) = [C +] packed A · packed B: `tiles` = (mt, nt, kt), the packed operands' tile counts.
///
/// Blocking, in the manner of GotoBLAS: k runs in passes of [`K_TILES_PER_PASS`] tiles on AMX
/// ([`K_TILES_PER_PASS_DP`] with `vdpbf16ps`), the outermost loop; within a pass, a task multiplies
/// one 32-row strip of A by a group of [`N_BLOCKS_PER_TASK`] 32-column blocks of B, and tasks are
/// numbered group-major, so that each thread runs through many row strips against the same group
/// of B (kept in L2). On AMX a task goes block by block, its strip (32 KiB a pass) read from L1 for
/// each; with `vdpbf16ps` it goes 8 rows at a time, each across the whole group, those rows
/// staying in L1 (the quick start's training step on Zen 4, 2026-11-29, k passes of 16 both ways:
/// median 0.790 s block by block against 0.761 s, 7 interleaved runs each). Blocks wholly inside C are summed in place; the others (the last row strip
/// or column block when m or n is not a multiple of 32) in a buffer, added to C at the end.
#[allow(clippy::too_many_arguments)]
fn multiply(
    unit: Unit,
    c: &mut [f32],
    pa: &[u16],
    pb: &[u16],
    m: usize,
    n: usize,
    tiles: (usize, usize, usize),
    accumulate: bool,
) {
    let (mt, nt, kt) = tiles;
    let m_blocks = mt / 2;
    let n_blocks = nt / 2;
    let n_groups = n_blocks.div_ceil(N_BLOCKS_PER_TASK);
    // Edge block (ib, jb): the last row strip has slots 0..n_blocks, the last column block
    // n_blocks + ib.
    let (row_edge, col_edge) = (!m.is_multiple_of(BLOCK), !n.is_multiple_of(BLOCK));
    let edge_slot = move |ib: usize, jb: usize| -> Option<usize> {
        if row_edge && ib == m_blocks - 1 {
            Some(jb)
        } else if col_edge && jb == n_blocks - 1 {
            Some(n_blocks + ib)
        } else {
            None
        }
    };
    let mut edges =
        if row_edge || col_edge { take_f32_buffer((n_blocks + m_blocks) * BLOCK * BLOCK) } else { Vec::new() };
    let cp = SendPtr(c.as_mut_ptr());
    let ep = SendPtr(edges.as_mut_ptr());
    let mut p0 = 0;
    while p0 < kt {
        let k_pass = if unit == Unit::Amx { K_TILES_PER_PASS } else { K_TILES_PER_PASS_DP };
        let p1 = (p0 + k_pass).min(kt);
        (0..m_blocks * n_groups).into_par_iter().for_each(|task| {
            let (g, ib) = (task / m_blocks, task % m_blocks);
            let (c_ptr, e_ptr) = (cp.get(), ep.get());
            let i0 = ib * BLOCK;
            // SAFETY: the unit was checked by the caller (for AMX: the CPU has it and the tile
            // state is granted); the packed buffers hold mt × kt and nt × kt whole tiles, every
            // block index below is < m_blocks or < n_blocks, k tiles stay < kt; C is read and
            // written only at rows < m and columns < n (blocks wholly inside C in place, the others
            // in their own slot of `edges`), and the tasks of a pass own disjoint blocks.
            unsafe {
                if unit == Unit::Amx {
                    asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
                }
                let blocks = g * N_BLOCKS_PER_TASK..((g + 1) * N_BLOCKS_PER_TASK).min(n_blocks);
                // Block jb of this task: where its C lies (row stride), whether it is loaded, and
                // its packed B.
                let block = |jb: usize| {
                    let slot = edge_slot(ib, jb);
                    let (out, ld) = match slot {
                        None => (c_ptr.add(i0 * n + jb * BLOCK), n),
                        Some(e) => (e_ptr.add(e * BLOCK * BLOCK), BLOCK),
                    };
                    let load = p0 > 0 || (slot.is_none() && accumulate);
                    (out, ld, load, pb.as_ptr().add((jb * kt + p0) * 2 * TILE_ELEMS))
                };
                let a0 = pa.as_ptr().add((ib * kt + p0) * 2 * TILE_ELEMS);
                let (a_step, b_step, n_k) = (2 * TILE_ELEMS, 2 * TILE_ELEMS, p1 - p0);
                match unit {
                    Unit::Amx => {
                        for jb in blocks {
                            let (out, ld, load, b0) = block(jb);
                            amx_block(out, ld, load, a0, a_step, b0, b_step, n_k);
                        }
                    }
                    Unit::Avx512Bf16 => {
                        // Strip by strip of 8 rows, each across the task's column blocks: the
                        // strip's A (8 KiB a pass) stays in L1 while the blocks of B stream from
                        // L2. Only the strips holding rows < m, the last with only its rows
                        // (decoding a few rows would otherwise multiply 32).
                        let rows = (m - i0).min(BLOCK);
                        for s in 0..rows.div_ceil(8) {
                            // Rows 8·s.. of the block: tile s / 2 of the strip, rows 8·(s % 2)..
                            let a_s = a0.add((s / 2) * TILE_ELEMS + (s % 2) * 8 * 32);
                            let r = (rows - 8 * s).min(8);
                            for jb in blocks.clone() {
                                let (out, ld, load, b0) = block(jb);
                                let o = out.add(8 * s * ld);
                                // A training product's C (MBs) is mostly out of cache: a strip
                                // that only stores its rows asks for their lines now, to have
                                // them when it stores; one that loads them first asks for the next
                                // block's.
                                if !load {
                                    super::prefetch_rows(o, ld, r, BLOCK);
                                } else if jb + 1 < blocks.end {
                                    let (next, next_ld, _, _) = block(jb + 1);
                                    super::prefetch_rows(next.add(8 * s * next_ld), next_ld, r, BLOCK);
                                }
                                match r {
                                    1 => dp_strip::<1>(o, ld, load, a_s, a_step, b0, b_step, n_k),
                                    2 => dp_strip::<2>(o, ld, load, a_s, a_step, b0, b_step, n_k),
                                    3 | 4 => dp_strip::<4>(o, ld, load, a_s, a_step, b0, b_step, n_k),
                                    _ => dp_strip::<8>(o, ld, load, a_s, a_step, b0, b_step, n_k),
                                }
                            }
                        }
                    }
                }
                if unit == Unit::Amx {
                    asm!("tilerelease", options(nostack, nomem));
                }
            }
        });
        p0 = p1;
    }
    if row_edge || col_edge {
        // The blocks `edge_slot` gives a slot: the last row strip, then the last column block's
        // other strips.
        let last_strip = (0..n_blocks).filter(|_| row_edge).map(|jb| (m_blocks - 1, jb));
        let last_column =
            (0..m_blocks).filter(|&ib| col_edge && !(row_edge && ib == m_blocks - 1)).map(|ib| (ib, n_blocks - 1));
        for (ib, jb) in last_strip.chain(last_column) {
            let e = edge_slot(ib, jb).expect("an edge block");
            let (i0, j0) = (ib * BLOCK, jb * BLOCK);
            let rows = (m - i0).min(BLOCK);
            let cols = (n - j0).min(BLOCK);
            for r in 0..rows {
                let dst = &mut c[(i0 + r) * n + j0..][..cols];
                let src = &edges[e * BLOCK * BLOCK + r * BLOCK..][..cols];
                if accumulate {
                    dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
                } else {
                    dst.copy_from_slice(src);
                }
            }
        }
        pack_buffers::EDGES.set(edges);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_transpose_matches_its_naive_twin() {
        if avx512_bf16_available().is_err() {
            eprintln!("skipped: no AVX-512 on this CPU");
            return;
        }
        let mut rows = [[0u32; 16]; 16];
        for (c, row) in rows.iter_mut().enumerate() {
            for (r, x) in row.iter_mut().enumerate() {
                *x = ((c as u32) << 24) | ((r as u32) << 16) | ((c * 16 + r) as u32 * 7919 % 65536);
            }
        }
        let mut naive = vec![0u16; TILE_ELEMS];
        transpose_into(&mut naive, &rows);
        let mut fast = vec![0u16; TILE_ELEMS];
        // SAFETY: avx512f checked above; `fast` holds a tile; `rows` is 16 × 64 bytes.
        unsafe {
            let v: [__m512i; 16] = std::array::from_fn(|c| _mm512_loadu_si512(rows[c].as_ptr().cast()));
            transpose16(fast.as_mut_ptr().cast(), 16, &v, 16);
        }
        assert_eq!(fast, naive);
    }
}
