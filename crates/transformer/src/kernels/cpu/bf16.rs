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
//! inside C are loaded and stored in place; edge blocks go through a small buffer.

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
/// `(pt · mt + it) · 512`, element (r, q) at `r · 32 + q`. Writes every element of `out` (mt · kt
/// tiles), the zero padding included, so `out` may hold anything before.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn pack_a(out: &mut [u16], a: &[f32], op_a: Op, m: usize, k: usize, mt: usize, kt: usize) {
    assert_eq!(out.len(), mt * kt * TILE_ELEMS);
    if op_a == Op::N {
        // Row-major A: a task converts a group of k tiles for every row, reading each row's
        // 32·group floats contiguously (one k tile per task would stride through all of A).
        let group = (kt / 4).clamp(1, 8);
        out.par_chunks_mut(group * mt * TILE_ELEMS).enumerate().for_each(|(gi, panels)| {
            for i in 0..16 * mt {
                for (gp, panel) in panels.chunks_exact_mut(mt * TILE_ELEMS).enumerate() {
                    let pt = gi * group + gp;
                    let kc = (k - 32 * pt).min(32);
                    // SAFETY: the loads read kc floats of row i < m inside `a` (32·pt + kc ≤ k);
                    // the store writes 64 bytes of tile row i inside `panel` (i < 16·mt).
                    unsafe {
                        let v = if i < m {
                            let src = a.as_ptr().add(i * k + 32 * pt);
                            let lo = load16(src, kc.min(16));
                            let hi = if kc > 16 { load16(src.add(16), kc - 16) } else { _mm512_setzero_ps() };
                            to_bf16_x32(lo, hi)
                        } else {
                            _mm512_setzero_si512()
                        };
                        let dst = panel.as_mut_ptr().add((i / 16) * TILE_ELEMS + (i % 16) * 32);
                        _mm512_storeu_si512(dst.cast(), v);
                    }
                }
            }
        });
        return;
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
                    for it in 0..mt {
                        let len = m.saturating_sub(16 * it).min(16);
                        if len == 0 {
                            panel[it * TILE_ELEMS..][..TILE_ELEMS].fill(0);
                            continue;
                        }
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
}

/// Packs op(B) (k, n) into pair-interleaved tiles, k-tile-major: tile (jt, pt) (columns 16·jt..,
/// k 32·pt..) sits at `(pt · nt + jt) · 512`; op(B)[32·pt + 2r + e][16·jt + j] at `r · 32 + 2j + e`.
/// Writes every element of `out` (nt · kt tiles), the zero padding included.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn pack_b(out: &mut [u16], b: &[f32], op_b: Op, k: usize, n: usize, nt: usize, kt: usize) {
    assert_eq!(out.len(), nt * kt * TILE_ELEMS);
    out.par_chunks_mut(nt * TILE_ELEMS).enumerate().for_each(|(pt, panel)| {
        let kc = (k - 32 * pt).min(32);
        // SAFETY: as in `pack_a`: loads stay inside `b`, stores inside `panel`.
        unsafe {
            match op_b {
                Op::N => {
                    // Rows p, p + 1 of B interleave into one tile row.
                    for jt in 0..nt {
                        let len = n.saturating_sub(16 * jt).min(16);
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
                            let dst = panel.as_mut_ptr().add(jt * TILE_ELEMS + q2 * 32);
                            _mm512_storeu_si512(dst.cast(), v);
                        }
                    }
                }
                Op::T => {
                    // B is stored (n, k): 32 consecutive k of column j are 16 pairs in a row of B.
                    let mut rows = [[0u32; 16]; 16];
                    for jt in 0..nt {
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
}

/// Packed operands, kept between products on each calling thread: a fresh buffer of tens of MB
/// costs more in page faults than the packing itself. Taken out while in use, so a nested product
/// on the same thread (a rayon worker) allocates its own. They never shrink: each calling thread
/// keeps its largest packed A and B (half the size of the f32 operands, plus padding; about 48 MB
/// each for the Multi30k output layer's gradient products).
mod pack_buffers {
    use std::cell::Cell;
    thread_local! {
        pub static A: Cell<Vec<u16>> = const { Cell::new(Vec::new()) };
        pub static B: Cell<Vec<u16>> = const { Cell::new(Vec::new()) };
    }
}

/// A buffer of `len` elements from `cell` (contents unspecified); give it back with `Cell::set`.
fn take_buffer(cell: &'static std::thread::LocalKey<std::cell::Cell<Vec<u16>>>, len: usize) -> Vec<u16> {
    let mut v = cell.take();
    if v.capacity() < len {
        v = vec![0u16; len];
    } else {
        v.resize(len, 0);
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

/// A raw pointer that may cross to a rayon worker; every task writes a disjoint part of C.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: tasks write disjoint (row strip, column group) blocks of C (see `matmul_bf16_on`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not the raw field).
    fn get(self) -> *mut f32 {
        self.0
    }
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
        pack_a(&mut pa, a, op_a, m, k, mt, kt);
        drop(p);
        let _p = super::profile::pack_scope(true);
        pack_b(&mut pb, b, op_b, k, n, nt, kt);
    }
    multiply(unit, c, &pa, &pb, m, n, (mt, nt, kt), accumulate);
    pack_buffers::A.set(pa);
    pack_buffers::B.set(pb);
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
    tiles: Vec<u16>,
}

impl Bf16Weights {
    /// Rounds and packs W; panics without a bf16 unit (check [`available`] first).
    pub fn new(w: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "Bf16Weights: W has {} elements, expected {n}x{k}", w.len());
        avx512_bf16_available().expect("bf16 weights on a CPU without AVX512-BF16");
        let nt = round_up(n.max(1), BLOCK) / 16;
        let kt = k.div_ceil(32).max(1);
        let mut tiles = vec![0u16; nt * kt * TILE_ELEMS];
        // SAFETY: avx512f/bw/bf16 checked above.
        unsafe { pack_b(&mut tiles, w, Op::T, k, n, nt, kt) };
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
        pack_a(&mut pa, a, Op::N, m, k, mt, w.kt)
    };
    multiply(unit, c, &pa, &w.tiles, m, n, (mt, w.nt, w.kt), accumulate);
    pack_buffers::A.set(pa);
}

/// C (m, n) = [C +] packed A · packed B: `tiles` = (mt, nt, kt), the packed operands' tile counts.
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
    let cp = SendPtr(c.as_mut_ptr());
    (0..m_blocks * n_groups).into_par_iter().for_each_init(
        || vec![0f32; N_BLOCKS_PER_TASK * BLOCK * BLOCK],
        |edges, task| {
            let (ib, g) = (task / n_groups, task % n_groups);
            let c_ptr = cp.get();
            let jbs = g * N_BLOCKS_PER_TASK..((g + 1) * N_BLOCKS_PER_TASK).min(n_blocks);
            let i0 = ib * BLOCK;
            // SAFETY: the unit was checked above (for AMX: the CPU has it and the tile state is
            // granted); the packed buffers hold mt × kt and nt × kt whole tiles, every block index
            // below is < m_blocks (rows 32·ib..+32 ≤ 16·mt) or < n_blocks, k tiles stay < kt; C is
            // read and written only at rows < m and columns < n (blocks wholly inside C in place,
            // the others through `edges`), and tasks own disjoint (row strip, column group) blocks.
            unsafe {
                if unit == Unit::Amx {
                    asm!("ldtilecfg [{}]", in(reg) CONFIG.0.as_ptr(), options(nostack, readonly));
                }
                // k in chunks of K_TILES_PER_PASS tiles: the 32-row strip of A for one chunk
                // (32 KiB at most) stays in L1 while the column group's blocks of B stream past.
                let mut p0 = 0;
                while p0 < kt {
                    let p1 = (p0 + K_TILES_PER_PASS).min(kt);
                    for (e, jb) in jbs.clone().enumerate() {
                        let j0 = jb * BLOCK;
                        let inside = i0 + BLOCK <= m && j0 + BLOCK <= n;
                        let (out, ld) = if inside {
                            (c_ptr.add(i0 * n + j0), n)
                        } else {
                            (edges.as_mut_ptr().add(e * BLOCK * BLOCK), BLOCK)
                        };
                        let load = p0 > 0 || (inside && accumulate);
                        let a0 = pa.as_ptr().add((2 * ib + p0 * mt) * TILE_ELEMS);
                        let b0 = pb.as_ptr().add((2 * jb + p0 * nt) * TILE_ELEMS);
                        let (a_step, b_step) = (mt * TILE_ELEMS, nt * TILE_ELEMS);
                        match unit {
                            Unit::Amx => amx_block(out, ld, load, a0, a_step, b0, b_step, p1 - p0),
                            Unit::Avx512Bf16 => {
                                // Only the strips holding rows < m, the last with only its rows
                                // (decoding a few rows would otherwise multiply 32).
                                let rows = (m - i0).min(BLOCK);
                                for s in 0..rows.div_ceil(8) {
                                    // Rows 8·s.. of the block: tile s / 2 of the strip, rows 8·(s % 2)..
                                    let a_s = a0.add((s / 2) * TILE_ELEMS + (s % 2) * 8 * 32);
                                    let (o, n_k) = (out.add(8 * s * ld), p1 - p0);
                                    match rows - 8 * s {
                                        1 => dp_strip::<1>(o, ld, load, a_s, a_step, b0, b_step, n_k),
                                        2 => dp_strip::<2>(o, ld, load, a_s, a_step, b0, b_step, n_k),
                                        3 | 4 => dp_strip::<4>(o, ld, load, a_s, a_step, b0, b_step, n_k),
                                        _ => dp_strip::<8>(o, ld, load, a_s, a_step, b0, b_step, n_k),
                                    }
                                }
                            }
                        }
                    }
                    p0 = p1;
                }
                if unit == Unit::Amx {
                    asm!("tilerelease", options(nostack, nomem));
                }
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

/// One 32 × 32 block of C at `out` (row stride `ld` floats) on AMX: loaded (`load`) or zeroed,
/// plus the products of `tiles` k tiles: A's two row tiles at `a0` and B's two column tiles at
/// `b0`, the next k tile `a_step` / `b_step` elements on.
///
/// # Safety
/// The tile configuration is loaded; `out` is a writable 32 × 32 block; the packed tiles exist.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn amx_block(
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
        for p in 0..tiles {
            let (a, b) = (a0.add(p * a_step), b0.add(p * b_step));
            asm!(
                "tileloadd tmm4, [{a0} + {s}*1]",
                "tileloadd tmm6, [{b0} + {s}*1]",
                "tileloadd tmm5, [{a1} + {s}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b1} + {s}*1]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a0 = in(reg) a,
                a1 = in(reg) a.add(TILE_ELEMS),
                b0 = in(reg) b,
                b1 = in(reg) b.add(TILE_ELEMS),
                s = in(reg) 64usize,
                options(nostack, readonly),
            );
        }
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
unsafe fn dp_strip<const R: usize>(
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
