//! int8 linear maps for inference: Y (m, n) = X (m, k) · Wᵀ + bias, W stored (n, k) like
//! `nn.Linear`, with W quantised once (one scale per output row) and X quantised per row at run
//! time, products summed exactly in 32-bit integers and scaled back to f32. The `int8-decoding`
//! departure (docs/deviations.md).
//!
//! Quantisation ([`quantize_row`]) is symmetric: a row's scale is max|x| / 127 and each value is
//! x / scale rounded to the nearest integer (ties to even) in −127..=127; a row of zeros gets scale
//! 0 and all-zero codes; a row holding NaN or ±∞ gets scale NaN, so everything it touches comes
//! out NaN rather than a wrong finite number; a row whose largest magnitude is subnormal (below
//! `f32::MIN_POSITIVE`) counts as zero. −128 is never produced, which the AVX2 kernel needs.
//! Then Y[i][j] = (Σ_p qx[i][p] · qw[j][p]) as f32 · (sx[i] · sw[j]) + bias[j].
//!
//! Layout. W is re-laid once into panels of [`NR`] output columns; within a panel, k runs in groups
//! of four: group g holds, for each of the 32 columns, its four codes at k = 4g..4g + 4 (128 bytes,
//! the order `vpdpbusd` reads: one 32-bit lane per column, four byte products summed into it). k is
//! zero-padded to a multiple of four and n to a multiple of 32. X is packed per call into blocks of
//! [`MR`] rows laid the same way (group g, then row, then four bytes).
//!
//! Kernels ([`Int8Kernel`]), chosen at run time, all giving the same integer sums:
//! - AVX-512 VNNI: `vpdpbusd` multiplies unsigned bytes by signed ones, so X's codes are stored
//!   shifted by +128 (0x80 xor), and 128 · Σ_p qw[j][p] (kept per column) is taken off the sum.
//! - AVX2: `vpmaddubsw` on |qx| and qw with qx's sign moved onto it (at most 2 · 127 · 127 per
//!   16-bit pair, so it never saturates), then `vpmaddwd` by ones into 32 bits.
//! - Scalar: the same sums in plain loops over the packed layout.
//!
//! - AMX-INT8 (`tdpbusd`, Sapphire Rapids and later): X row-major in shifted bytes as for VNNI,
//!   the panels read in place as tiles (`QuantizedLinear::run_amx`); for products of
//!   [`AMX_MIN_ROWS`] rows or more (fewer run on VNNI, unless asked for by name).

use super::elementwise::{max_abs, row_is_finite};
use super::SendPtr;
use multiversion::multiversion;
use rayon::prelude::*;
use std::sync::OnceLock;

/// Output columns per weight panel.
pub const NR: usize = 32;
/// Rows per block of X.
pub const MR: usize = 12;
/// k per 32-bit lane.
const GROUP: usize = 4;
/// Bytes per group of a panel (NR columns × GROUP).
const GROUP_BYTES: usize = NR * GROUP;
/// Row blocks a thread multiplies against each of its panels before moving on (keeps that part of
/// X in L2 while the panels stream).
const BLOCKS_PER_PASS: usize = 16;

/// The instructions an int8 product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Int8Kernel {
    /// Intel AMX-INT8 tiles (`tdpbusd`: 16 × 64 bytes by 64 × 16, summed into 16 × 16 i32), on
    /// Sapphire Rapids and later. Chosen by [`QuantizedLinear::forward`] for products of at least
    /// [`AMX_MIN_ROWS`] rows; fewer rows run on the next kernel.
    Amx,
    /// AVX-512 VNNI `vpdpbusd` (AMD Zen 4 and later; Intel Cascade Lake and later).
    Vnni,
    /// AVX2 `vpmaddubsw` + `vpmaddwd`.
    Avx2,
    /// Plain Rust.
    Scalar,
}

impl Int8Kernel {
    /// The name printed in logs and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            Int8Kernel::Amx => "AMX-INT8",
            Int8Kernel::Vnni => "AVX-512 VNNI",
            Int8Kernel::Avx2 => "AVX2",
            Int8Kernel::Scalar => "scalar",
        }
    }
}

/// Every kernel this CPU can run, fastest first (the scalar one always).
pub fn kernels() -> Vec<Int8Kernel> {
    available_kernels().to_vec()
}

fn available_kernels() -> &'static [Int8Kernel] {
    static KERNELS: OnceLock<Vec<Int8Kernel>> = OnceLock::new();
    KERNELS.get_or_init(detect)
}

fn detect() -> Vec<Int8Kernel> {
    let mut k = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if amx_int8_available().is_ok() {
            k.push(Int8Kernel::Amx);
        }
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
        {
            k.push(Int8Kernel::Vnni);
        }
        if is_x86_feature_detected!("avx2") {
            k.push(Int8Kernel::Avx2);
        }
    }
    k.push(Int8Kernel::Scalar);
    k
}

/// The fastest kernel this CPU can run.
pub fn kernel() -> Int8Kernel {
    static BEST: OnceLock<Int8Kernel> = OnceLock::new();
    *BEST.get_or_init(|| available_kernels()[0])
}

/// The fewest rows a product must have for [`QuantizedLinear::forward`] to run it on AMX: a tile
/// multiplies 16 rows whatever the count, so below one full tile most of its work is padding, and
/// decoding's small products (a beam of 4 at batch 1) stay on VNNI. The threshold is reasoned, not
/// tuned: AMX against VNNI at each row count has not been timed.
pub const AMX_MIN_ROWS: usize = 16;

/// The kernel [`QuantizedLinear::forward`] runs for `m` rows: the fastest, except that AMX gives
/// way to the next below [`AMX_MIN_ROWS`] rows.
pub fn kernel_for(m: usize) -> Int8Kernel {
    let ks = available_kernels();
    if ks[0] == Int8Kernel::Amx && m < AMX_MIN_ROWS {
        ks[1]
    } else {
        ks[0]
    }
}

/// Whether this CPU and kernel can run AMX-INT8 products (`tdpbusd`); `Err` says why not.
pub fn amx_int8_available() -> Result<(), String> {
    super::bf16::amx_available()?;
    #[cfg(target_arch = "x86_64")]
    {
        // Leaf 7 exists where AMX does (checked above).
        let l7 = std::arch::x86_64::__cpuid_count(7, 0);
        if l7.edx & (1 << 25) != 0 {
            return Ok(());
        }
    }
    Err("this CPU has AMX tiles but not AMX-INT8".into())
}

/// Groups of four k a panel holds: k / 4 rounded up to a whole AMX tile's 16 groups (64 k), so a
/// tile load never reads past its panel; the padding codes are zero.
fn panel_groups(k: usize) -> usize {
    k.div_ceil(GROUP).div_ceil(16) * 16
}

/// Bytes on 64-byte boundaries (AMX tile rows are then single cache lines; see `bf16::Tiles`).
#[derive(Clone, Default)]
struct Aligned(Vec<Line>);

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([i8; 64]);

impl Aligned {
    const fn new() -> Self {
        Aligned(Vec::new())
    }

    /// Sets the length to `len` bytes rounded up to 64; new bytes are zero, kept ones unchanged.
    fn resize(&mut self, len: usize) {
        self.0.resize(len.div_ceil(64), Line([0; 64]));
    }
}

impl std::ops::Deref for Aligned {
    type Target = [i8];
    fn deref(&self) -> &[i8] {
        // SAFETY: `Line` is 64 i8 with no padding.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.0.len() * 64) }
    }
}

impl std::ops::DerefMut for Aligned {
    fn deref_mut(&mut self) -> &mut [i8] {
        // SAFETY: as in `deref`.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.0.len() * 64) }
    }
}

impl std::fmt::Debug for Aligned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Aligned({} bytes)", self.len())
    }
}

/// Quantises `x` into `q` (same length) and returns the scale (see the module's rule).
pub fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
    assert_eq!(x.len(), q.len());
    // Two vectorised passes over a row in cache: the old single fold, which kept a NaN once seen,
    // compiled to a scalar loop (8% of int8 decoding).
    if !row_is_finite(x) {
        q.fill(0);
        return f32::NAN;
    }
    let amax = max_abs(x);
    if amax < f32::MIN_POSITIVE {
        q.fill(0);
        return 0.0;
    }
    quantize_with(x, q, 127.0 / amax);
    amax / 127.0
}

/// Codes of `x` at `inv` = 127 / max|x|: x · inv clamped to ±127, rounded to the nearest integer
/// (ties to even) by adding 1.5 · 2²³ (where a float's spacing is 1, so the sum rounds in the
/// default mode, ties to even, and its low mantissa byte is the integer in two's complement). The
/// same codes as `round_ties_even` then `as i8`, but the conversion vectorises.
#[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma", "x86_64+avx2+fma+sse4.1"))]
fn quantize_with(x: &[f32], q: &mut [i8], inv: f32) {
    for (q, &v) in q.iter_mut().zip(x) {
        *q = ((v * inv).clamp(-127.0, 127.0) + 12_582_912.0).to_bits() as i8;
    }
}

/// A weight matrix W (n, k) quantised per output row and packed into panels, with what the
/// kernels need beside it. Built once (at load); holds no f32 copy of W.
#[derive(Clone, Debug)]
pub struct QuantizedLinear {
    n: usize,
    k: usize,
    /// ceil(n / NR) panels of `panel_groups(k)` · GROUP_BYTES codes, on 64-byte boundaries.
    panels: Aligned,
    /// Per output row (n): the scale.
    scales: Vec<f32>,
    /// Per output column padded to the panels: 128 · Σ_p qw[j][p] (the VNNI shift's correction).
    shift: Vec<i32>,
}

impl QuantizedLinear {
    /// Quantises W, stored (n, k) row-major.
    pub fn new(w: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "QuantizedLinear: W has {} elements, expected {n}x{k}", w.len());
        let mut codes = vec![0i8; n * k];
        let mut scales = vec![0f32; n];
        if k > 0 {
            codes.par_chunks_mut(k).zip(scales.par_iter_mut()).zip(w.par_chunks(k)).for_each(|((q, s), row)| {
                *s = quantize_row(row, q);
            });
        }
        Self::from_codes(&codes, scales, n, k).expect("quantize_row gives valid codes")
    }

    /// W from its codes (n, k) row-major, in −127..=127, and its per-row scales (finite and ≥ 0,
    /// or NaN): what [`QuantizedLinear::codes`] gives back, e.g. from an int8 checkpoint. An
    /// error names what is out of range.
    pub fn from_codes(codes: &[i8], scales: Vec<f32>, n: usize, k: usize) -> Result<Self, String> {
        if codes.len() != n * k || scales.len() != n {
            return Err(format!("{} codes and {} scales for a {n}x{k} matrix", codes.len(), scales.len()));
        }
        if let Some(i) = codes.iter().position(|&c| c == i8::MIN) {
            return Err(format!(
                "code -128 at row {}, column {} (codes lie in -127..=127)",
                i / k.max(1),
                i % k.max(1)
            ));
        }
        if let Some(r) = scales.iter().position(|&s| !(s.is_nan() || (s.is_finite() && s >= 0.0))) {
            return Err(format!("scale {} of row {r} is negative or infinite", scales[r]));
        }
        let np = n.div_ceil(NR);
        let mut panels = Aligned::new();
        panels.resize(np * panel_groups(k) * GROUP_BYTES);
        let mut shift = vec![0i32; np * NR];
        panels[..np * panel_groups(k) * GROUP_BYTES]
            .par_chunks_mut((panel_groups(k) * GROUP_BYTES).max(1))
            .zip(shift.par_chunks_mut(NR))
            .enumerate()
            .for_each(|(p, (panel, shift))| {
                for (j, shift) in shift.iter_mut().enumerate().take(NR.min(n - p * NR)) {
                    let q = &codes[(p * NR + j) * k..][..k];
                    *shift = 128 * q.iter().map(|&v| v as i32).sum::<i32>();
                    for (kk, &v) in q.iter().enumerate() {
                        panel[(kk / GROUP) * GROUP_BYTES + j * GROUP + kk % GROUP] = v;
                    }
                }
            });
        Ok(QuantizedLinear { n, k, panels, scales, shift })
    }

    /// The codes (n, k) row-major and the per-row scales, unpacked.
    pub fn codes(&self) -> (Vec<i8>, Vec<f32>) {
        let all: Vec<u32> = (0..self.n as u32).collect();
        self.codes_of_rows(&all)
    }

    /// The codes and scales of the output rows `rows` (each below n), in that order, unpacked:
    /// (rows.len(), k) row-major.
    pub fn codes_of_rows(&self, rows: &[u32]) -> (Vec<i8>, Vec<f32>) {
        let k = self.k;
        let mut codes = vec![0i8; rows.len() * k];
        for (row, &r) in codes.chunks_mut(k.max(1)).zip(rows) {
            let (p, j) = (r as usize / NR, r as usize % NR);
            let panel = &self.panels[p * panel_groups(k) * GROUP_BYTES..];
            for (kk, c) in row.iter_mut().enumerate() {
                *c = panel[(kk / GROUP) * GROUP_BYTES + j * GROUP + kk % GROUP];
            }
        }
        (codes, rows.iter().map(|&r| self.scales[r as usize]).collect())
    }

    /// The map of the output rows `rows` only (each below n), in that order: the same codes and
    /// scales, so each output column is computed as this map computes it.
    pub fn select_rows(&self, rows: &[u32]) -> Self {
        let (codes, scales) = self.codes_of_rows(rows);
        Self::from_codes(&codes, scales, rows.len(), self.k).expect("codes of a valid map")
    }

    /// Output width n.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input width k.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes held (codes, scales and corrections).
    pub fn bytes(&self) -> usize {
        self.panels.len() + 4 * (self.scales.len() + self.shift.len())
    }

    /// Y (m, n) = X (m, k) · Wᵀ [+ bias] on the fastest kernel this CPU has for m rows
    /// ([`kernel_for`]).
    pub fn forward(&self, y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize) {
        self.forward_on(kernel_for(m), y, x, bias, m)
    }

    /// [`QuantizedLinear::forward`] on a given kernel, which must be one of [`kernels`] (panics
    /// otherwise).
    pub fn forward_on(&self, kern: Int8Kernel, y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize) {
        self.run(kern, y, x, bias, m, false)
    }

    /// Y (m, n) += X (m, k) · Wᵀ on the fastest kernel.
    pub fn forward_accumulate(&self, y: &mut [f32], x: &[f32], m: usize) {
        self.run(kernel_for(m), y, x, None, m, true)
    }

    fn run(&self, kern: Int8Kernel, y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize, accumulate: bool) {
        let (n, k) = (self.n, self.k);
        assert!(available_kernels().contains(&kern), "int8 kernel {} is not available on this CPU", kern.name());
        assert_eq!(y.len(), m * n, "QuantizedLinear: Y has {} elements, expected {m}x{n}", y.len());
        assert_eq!(x.len(), m * k, "QuantizedLinear: X has {} elements, expected {m}x{k}", x.len());
        assert!(bias.is_none_or(|b| b.len() == n));
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            // Empty sums: Y = bias (or 0), or unchanged when accumulating.
            if !accumulate {
                for row in y.chunks_exact_mut(n) {
                    match bias {
                        Some(b) => row.copy_from_slice(b),
                        None => row.fill(0.0),
                    }
                }
            }
            return;
        }
        let _t = super::profile::scope(super::profile::Slot::Matmul);
        super::profile::add_matmul_flops(2 * (m * n * k) as u64);
        #[cfg(target_arch = "x86_64")]
        if kern == Int8Kernel::Amx {
            self.run_amx(y, x, bias, m, accumulate);
            return;
        }
        let groups = k.div_ceil(GROUP);
        let blocks = m.div_ceil(MR);
        let block_bytes = groups * MR * GROUP;
        let mut packed = X_PACKED.take();
        packed.resize(blocks * block_bytes, 0);
        let mut sx = X_SCALES.take();
        sx.resize(blocks * MR, 0.0);
        // VNNI reads X's codes as unsigned bytes: shift them by +128.
        let flip = if kern == Int8Kernel::Vnni { 0x80u8 as i8 } else { 0 };
        let flip4 = u32::from_ne_bytes([flip as u8; 4]);
        // A row's codes go through `q` (zero-padded to whole groups, one buffer per task) and are
        // moved four at a time.
        let new_q = || vec![0i8; groups * GROUP];
        let pack_block = |q: &mut Vec<i8>, (b, (blk, sx)): (usize, (&mut [i8], &mut [f32]))| {
            for i in 0..MR.min(m - b * MR) {
                sx[i] = quantize_row(&x[(b * MR + i) * k..][..k], &mut q[..k]);
                for (g, quad) in q.chunks_exact(GROUP).enumerate() {
                    let v = u32::from_ne_bytes([quad[0] as u8, quad[1] as u8, quad[2] as u8, quad[3] as u8]) ^ flip4;
                    blk[(g * MR + i) * GROUP..][..GROUP].copy_from_slice(&v.to_ne_bytes().map(|b| b as i8));
                }
            }
        };
        if m * k >= 1 << 14 {
            packed.par_chunks_mut(block_bytes).zip(sx.par_chunks_mut(MR)).enumerate().for_each_init(new_q, pack_block);
        } else {
            let mut q = new_q();
            packed.chunks_mut(block_bytes).zip(sx.chunks_mut(MR)).enumerate().for_each(|t| pack_block(&mut q, t));
        }
        // Rows of the last block past m keep whatever the buffer held: rows are independent and
        // only rows < m are stored.
        let np = n.div_ceil(NR);
        let threads = rayon::current_num_threads().clamp(1, np);
        let per = np.div_ceil(threads);
        let out = SendPtr(y.as_mut_ptr());
        let (packed_ref, sx_ref) = (&packed[..], &sx[..]);
        let run = |t: usize| {
            let out = &out;
            let mut acc = [[0i32; NR]; MR];
            let panels = t * per..((t + 1) * per).min(np);
            let mut b0 = 0;
            while b0 < blocks {
                let b1 = (b0 + BLOCKS_PER_PASS).min(blocks);
                for p in panels.clone() {
                    let panel = &self.panels[p * panel_groups(k) * GROUP_BYTES..][..groups * GROUP_BYTES];
                    let c0 = p * NR;
                    let cols = NR.min(n - c0);
                    for b in b0..b1 {
                        let blk = &packed_ref[b * block_bytes..][..block_bytes];
                        let rows = MR.min(m - b * MR);
                        #[cfg(target_arch = "x86_64")]
                        if kern == Int8Kernel::Vnni {
                            let out = Out {
                                // SAFETY: row b·MR, column c0 lies inside Y (rows < m, c0 < n).
                                y: unsafe { out.0.add(b * MR * n + c0) },
                                ld: n,
                                rows,
                                cols,
                                sx: &sx_ref[b * MR..][..MR],
                                sw: &self.scales[c0..c0 + cols],
                                shift: &self.shift[c0..c0 + NR],
                                bias: bias.map(|b| &b[c0..c0 + cols]),
                                accumulate,
                            };
                            // SAFETY: VNNI is available (asserted above); `blk` and `panel` hold
                            // `groups` whole groups; `out` covers rows × cols of Y, written by
                            // this thread alone (threads own disjoint columns).
                            // A short block runs a kernel of its row count (see packed.rs).
                            unsafe {
                                match rows {
                                    1 => vnni_block::<1>(blk, panel, groups, &out),
                                    2 => vnni_block::<2>(blk, panel, groups, &out),
                                    3 | 4 => vnni_block::<4>(blk, panel, groups, &out),
                                    5..=8 => vnni_block::<8>(blk, panel, groups, &out),
                                    _ => vnni_block::<MR>(blk, panel, groups, &out),
                                }
                            };
                            continue;
                        }
                        // SAFETY: `kern` is available (asserted above); `blk` and `panel` hold
                        // `groups` whole groups.
                        unsafe { sums(kern, blk, panel, groups, &mut acc) };
                        for (i, row) in acc.iter().enumerate().take(rows) {
                            // SAFETY: row b·MR + i < m and columns c0..c0 + cols ≤ n lie inside Y
                            // (asserted above); threads write disjoint column ranges.
                            let dst = unsafe { std::slice::from_raw_parts_mut(out.0.add((b * MR + i) * n + c0), cols) };
                            let (sx, sw) = (sx_ref[b * MR + i], &self.scales[c0..c0 + cols]);
                            dequantize(dst, &row[..cols], sx, sw, bias.map(|b| &b[c0..c0 + cols]), accumulate);
                        }
                    }
                }
                b0 = b1;
            }
        };
        if threads == 1 || m * n * k < 1 << 16 {
            (0..threads).for_each(run);
        } else {
            (0..threads).into_par_iter().for_each(run);
        }
        X_PACKED.set(packed);
        X_SCALES.set(sx);
    }
}

impl QuantizedLinear {
    /// [`QuantizedLinear::run`] on AMX tiles. X's rows are quantised into a row-major buffer of
    /// shifted codes (code + 128 as u8, for `tdpbusd`'s unsigned × signed bytes; the correction is
    /// the same `shift` VNNI uses), each row zero-padded to `panel_groups(k)` · 4 bytes and the
    /// rows to a multiple of 32; zero bytes add nothing whatever W's padding holds. The panels are
    /// read in place as B tiles: tile row r of k chunk c is group 16·c + r, its first 64 bytes
    /// columns 0..16 of the panel, the next 64 columns 16..32 (row stride 128 bytes). A task
    /// multiplies one 32-row block by one panel (a 32 × 32 block of Y, 2 × 2 accumulator tiles; one
    /// row tile where the block holds at most 16 rows), then scales it with [`dequantize`].
    #[cfg(target_arch = "x86_64")]
    fn run_amx(&self, y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize, accumulate: bool) {
        let (n, k) = (self.n, self.k);
        let gs = panel_groups(k);
        let kp = gs * GROUP;
        let row_blocks = m.div_ceil(32);
        let mut xa = X_AMX.take();
        xa.resize(row_blocks * 32 * kp);
        let mut sx = X_SCALES.take();
        sx.resize(row_blocks * 32, 0.0);
        let quantize = |q: &mut Vec<i8>, (i, (row, s)): (usize, (&mut [i8], &mut f32))| {
            if i < m {
                *s = quantize_row(&x[i * k..][..k], &mut q[..k]);
                for (d, &c) in row.iter_mut().zip(&q[..k]) {
                    *d = c ^ (0x80u8 as i8);
                }
                row[k..].fill(0);
            } else {
                row.fill(0);
                *s = 0.0;
            }
        };
        if m * k >= 1 << 14 {
            xa[..row_blocks * 32 * kp]
                .par_chunks_mut(kp)
                .zip(sx.par_iter_mut())
                .enumerate()
                .for_each_init(|| vec![0i8; k], quantize);
        } else {
            let mut q = vec![0i8; k];
            xa[..row_blocks * 32 * kp].chunks_mut(kp).zip(sx.iter_mut()).enumerate().for_each(|t| quantize(&mut q, t));
        }
        let np = n.div_ceil(NR);
        let out = SendPtr(y.as_mut_ptr());
        let (xa_ref, sx_ref) = (&xa[..], &sx[..]);
        let task = |t: usize| {
            let out = &out;
            let (p, b) = (t / row_blocks, t % row_blocks);
            let (r0, c0) = (32 * b, p * NR);
            let (rows, cols) = ((m - r0).min(32), (n - c0).min(NR));
            let mut acc = [[0i32; NR]; 32];
            // SAFETY: AMX-INT8 is available and the tile state granted (the kernel list holds
            // Amx only then); the X block holds 32 rows of kp bytes and the panel gs groups of
            // 128 bytes, both on 64-byte boundaries; `acc` is 32 rows of 32 i32.
            unsafe {
                let xb = xa_ref.as_ptr().add(r0 * kp);
                let panel = self.panels.as_ptr().add(p * gs * GROUP_BYTES);
                std::arch::asm!("ldtilecfg [{}]", in(reg) super::bf16::tile_config().as_ptr(), options(nostack, readonly));
                if rows > 16 {
                    amx_int8_block::<2>(xb, kp, panel, gs / 16, &mut acc);
                } else {
                    amx_int8_block::<1>(xb, kp, panel, gs / 16, &mut acc);
                }
                std::arch::asm!("tilerelease", options(nostack, nomem));
            }
            let shift = &self.shift[c0..c0 + cols];
            for (i, row) in acc.iter_mut().enumerate().take(rows) {
                for (a, &s) in row.iter_mut().zip(shift) {
                    *a -= s;
                }
                // SAFETY: row r0 + i < m and columns c0..c0 + cols ≤ n lie inside Y; tasks write
                // disjoint (row block, panel) blocks.
                let dst = unsafe { std::slice::from_raw_parts_mut(out.0.add((r0 + i) * n + c0), cols) };
                let sw = &self.scales[c0..c0 + cols];
                dequantize(dst, &row[..cols], sx_ref[r0 + i], sw, bias.map(|b| &b[c0..c0 + cols]), accumulate);
            }
        };
        let tasks = np * row_blocks;
        if tasks == 1 || m * n * k < 1 << 16 {
            (0..tasks).for_each(task);
        } else {
            (0..tasks).into_par_iter().for_each(task);
        }
        X_AMX.set(xa);
        X_SCALES.set(sx);
    }
}

/// The sums of one block of X (R · 16 rows at `x`, row stride `ld` bytes, shifted codes) by one
/// panel (`chunks` chunks of 64 k at `panel`) into `acc` (rows ≥ 16 · R untouched): R × 2
/// accumulator tiles. For R = 2 the loads are scheduled as in the bf16 kernel (each operand
/// loaded right after its last use: the tile registers are not renamed).
///
/// # Safety
/// The tile configuration of [`super::bf16::tile_config`] is loaded, AMX-INT8 is available, and
/// the operands hold what is said above; `chunks` ≥ 1.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn amx_int8_block<const R: usize>(
    x: *const i8,
    ld: usize,
    panel: *const i8,
    chunks: usize,
    acc: &mut [[i32; NR]; 32],
) {
    use std::arch::asm;
    let b_at = |c: usize| panel.wrapping_add(c * 16 * GROUP_BYTES);
    // SAFETY: the caller's contract; every load reads inside the operands named there.
    unsafe {
        asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
        if R == 2 {
            asm!(
                "tileloadd tmm4, [{a0} + {la}*1]",
                "tileloadd tmm6, [{b0} + {lb}*1]",
                "tileloadd tmm5, [{a1} + {la}*1]",
                "tileloadd tmm7, [{b1} + {lb}*1]",
                a0 = in(reg) x,
                a1 = in(reg) x.add(16 * ld),
                b0 = in(reg) b_at(0),
                b1 = in(reg) b_at(0).add(64),
                la = in(reg) ld,
                lb = in(reg) GROUP_BYTES,
                options(nostack, readonly),
            );
            for c in 1..chunks {
                let (a, b) = (x.add(64 * c), b_at(c));
                asm!(
                    "tdpbusd tmm0, tmm4, tmm6",
                    "tdpbusd tmm1, tmm4, tmm7",
                    "tileloadd tmm4, [{a0} + {la}*1]",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tileloadd tmm6, [{b0} + {lb}*1]",
                    "tdpbusd tmm3, tmm5, tmm7",
                    "tileloadd tmm5, [{a1} + {la}*1]",
                    "tileloadd tmm7, [{b1} + {lb}*1]",
                    a0 = in(reg) a,
                    a1 = in(reg) a.add(16 * ld),
                    b0 = in(reg) b,
                    b1 = in(reg) b.add(64),
                    la = in(reg) ld,
                    lb = in(reg) GROUP_BYTES,
                    options(nostack, readonly),
                );
            }
            asm!(
                "tdpbusd tmm0, tmm4, tmm6",
                "tdpbusd tmm1, tmm4, tmm7",
                "tdpbusd tmm2, tmm5, tmm6",
                "tdpbusd tmm3, tmm5, tmm7",
                options(nostack, nomem),
            );
        } else {
            // One row tile: A alternates between tmm4 and tmm5, B between (tmm6, tmm7) and
            // (tmm2, tmm3), so a chunk's loads never wait for the previous chunk's products.
            for c in 0..chunks {
                let (a, b) = (x.add(64 * c), b_at(c));
                if c % 2 == 0 {
                    asm!(
                        "tileloadd tmm4, [{a0} + {la}*1]",
                        "tileloadd tmm6, [{b0} + {lb}*1]",
                        "tileloadd tmm7, [{b1} + {lb}*1]",
                        "tdpbusd tmm0, tmm4, tmm6",
                        "tdpbusd tmm1, tmm4, tmm7",
                        a0 = in(reg) a,
                        b0 = in(reg) b,
                        b1 = in(reg) b.add(64),
                        la = in(reg) ld,
                        lb = in(reg) GROUP_BYTES,
                        options(nostack, readonly),
                    );
                } else {
                    asm!(
                        "tileloadd tmm5, [{a0} + {la}*1]",
                        "tileloadd tmm2, [{b0} + {lb}*1]",
                        "tileloadd tmm3, [{b1} + {lb}*1]",
                        "tdpbusd tmm0, tmm5, tmm2",
                        "tdpbusd tmm1, tmm5, tmm3",
                        a0 = in(reg) a,
                        b0 = in(reg) b,
                        b1 = in(reg) b.add(64),
                        la = in(reg) ld,
                        lb = in(reg) GROUP_BYTES,
                        options(nostack, readonly),
                    );
                }
            }
        }
        let out = acc.as_mut_ptr().cast::<u8>();
        let ldc = NR * 4;
        asm!(
            "tilestored [{p0} + {s}*1], tmm0",
            "tilestored [{p1} + {s}*1], tmm1",
            p0 = in(reg) out,
            p1 = in(reg) out.add(64),
            s = in(reg) ldc,
            options(nostack),
        );
        if R == 2 {
            asm!(
                "tilestored [{p2} + {s}*1], tmm2",
                "tilestored [{p3} + {s}*1], tmm3",
                p2 = in(reg) out.add(16 * ldc),
                p3 = in(reg) out.add(16 * ldc + 64),
                s = in(reg) ldc,
                options(nostack),
            );
        }
    }
}

/// y[j] = sum[j] · (sx · sw[j]) + bias[j]: the one formula every kernel and the naive twin use
/// (or y[j] += sum[j] · (sx · sw[j])).
#[inline(always)]
fn dequantize(y: &mut [f32], sums: &[i32], sx: f32, sw: &[f32], bias: Option<&[f32]>, accumulate: bool) {
    match bias {
        _ if accumulate => {
            for ((y, &s), &w) in y.iter_mut().zip(sums).zip(sw) {
                *y += s as f32 * (sx * w);
            }
        }
        Some(b) => {
            for (((y, &s), &w), &b) in y.iter_mut().zip(sums).zip(sw).zip(b) {
                *y = s as f32 * (sx * w) + b;
            }
        }
        None => {
            for ((y, &s), &w) in y.iter_mut().zip(sums).zip(sw) {
                *y = s as f32 * (sx * w);
            }
        }
    }
}

thread_local! {
    static X_PACKED: std::cell::Cell<Vec<i8>> = const { std::cell::Cell::new(Vec::new()) };
    static X_AMX: std::cell::Cell<Aligned> = const { std::cell::Cell::new(Aligned::new()) };
    static X_SCALES: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// acc[i][j] = Σ_g Σ_e blk[g][i][e] · panel[g][j][e] over `groups` groups (AVX2 and scalar; VNNI
/// blocks run `vnni_block`).
///
/// # Safety
/// `kern` is available on this CPU; `blk` holds groups · MR · 4 bytes and `panel` groups · 128.
unsafe fn sums(kern: Int8Kernel, blk: &[i8], panel: &[i8], groups: usize, acc: &mut [[i32; NR]; MR]) {
    assert!(blk.len() >= groups * MR * GROUP && panel.len() >= groups * GROUP_BYTES);
    match kern {
        // VNNI scales and stores in registers (`vnni_block`).
        Int8Kernel::Vnni => unreachable!("VNNI blocks run vnni_block"),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Int8Kernel::Avx2 => unsafe { avx2_sums(blk, panel, groups, acc) },
        _ => scalar_sums(blk, panel, groups, acc, false),
    }
}

/// The plain-Rust sums; `unsigned` reads X's bytes as u8 (the VNNI layout), for tests.
fn scalar_sums(blk: &[i8], panel: &[i8], groups: usize, acc: &mut [[i32; NR]; MR], unsigned: bool) {
    for row in acc.iter_mut() {
        row.fill(0);
    }
    for g in 0..groups {
        let wg = &panel[g * GROUP_BYTES..][..GROUP_BYTES];
        for (i, row) in acc.iter_mut().enumerate() {
            let xg = &blk[(g * MR + i) * GROUP..][..GROUP];
            for (j, a) in row.iter_mut().enumerate() {
                for e in 0..GROUP {
                    let xv = if unsigned { xg[e] as u8 as i32 } else { xg[e] as i32 };
                    *a += xv * wg[j * GROUP + e] as i32;
                }
            }
        }
    }
}

/// Where a block's products go, and how they are scaled: Y's rows × cols at `y` (row stride
/// `ld`), X's row scales, W's column scales, the VNNI corrections, the bias.
struct Out<'a> {
    y: *mut f32,
    ld: usize,
    rows: usize,
    cols: usize,
    sx: &'a [f32],
    sw: &'a [f32],
    shift: &'a [i32],
    bias: Option<&'a [f32]>,
    accumulate: bool,
}

/// One block of MR rows × one panel on VNNI, scaled and stored in registers: the sums of
/// `scalar_sums` on the shifted bytes, then [`dequantize`]'s formula (multiply, then add: no fused multiply-add, so
/// the rounding is the scalar one).
///
/// # Safety
/// VNNI is available; `blk` and `panel` hold `groups` ≥ 1 groups; `out` is valid for writes of
/// `out.rows` rows × `out.cols` columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_block<const R: usize>(blk: &[i8], panel: &[i8], groups: usize, out: &Out) {
    use std::arch::x86_64::*;
    assert!(groups >= 1 && blk.len() >= groups * MR * GROUP && panel.len() >= groups * GROUP_BYTES);
    assert!((1..=NR).contains(&out.cols) && out.rows <= R);
    // SAFETY: loads stay inside `blk`, `panel` and the column slices (masked to `cols`); stores
    // write rows < rows, columns < cols of the caller's block.
    unsafe {
        let (xp, wp) = (blk.as_ptr(), panel.as_ptr());
        super::prefetch_rows(out.y, out.ld, out.rows, out.cols);
        // The sums start from group 0's products rather than from zeros: with zeros, the array
        // was zeroed on the stack with `memset` at every call (3% of int8 decoding), for the
        // epilogue's loop over a run-time number of rows.
        let (w0, w1) = (_mm512_loadu_si512(wp.cast()), _mm512_loadu_si512(wp.add(64).cast()));
        let zero = _mm512_setzero_si512();
        let mut c: [[__m512i; 2]; R] = std::array::from_fn(|i| {
            let a = _mm512_set1_epi32(xp.add(i * GROUP).cast::<i32>().read_unaligned());
            [_mm512_dpbusd_epi32(zero, a, w0), _mm512_dpbusd_epi32(zero, a, w1)]
        });
        for g in 1..groups {
            let w0 = _mm512_loadu_si512(wp.add(g * GROUP_BYTES).cast());
            let w1 = _mm512_loadu_si512(wp.add(g * GROUP_BYTES + 64).cast());
            for (i, ci) in c.iter_mut().enumerate() {
                let a = _mm512_set1_epi32(xp.add((g * MR + i) * GROUP).cast::<i32>().read_unaligned());
                ci[0] = _mm512_dpbusd_epi32(ci[0], a, w0);
                ci[1] = _mm512_dpbusd_epi32(ci[1], a, w1);
            }
        }
        let masks = [(((1u64 << out.cols.min(16)) - 1) as u16), (((1u64 << out.cols.saturating_sub(16)) - 1) as u16)];
        for h in 0..2 {
            let mask = masks[h];
            if mask == 0 {
                continue;
            }
            let sw = _mm512_maskz_loadu_ps(mask, out.sw.as_ptr().add(16 * h));
            let shift = _mm512_loadu_si512(out.shift.as_ptr().add(16 * h).cast());
            let bias = out.bias.map(|b| _mm512_maskz_loadu_ps(mask, b.as_ptr().add(16 * h)));
            for (i, ci) in c.iter().enumerate().take(out.rows) {
                let sums = _mm512_cvtepi32_ps(_mm512_sub_epi32(ci[h], shift));
                let v = _mm512_mul_ps(sums, _mm512_mul_ps(_mm512_set1_ps(out.sx[i]), sw));
                let dst = out.y.add(i * out.ld + 16 * h);
                let v = if out.accumulate {
                    _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst), v)
                } else if let Some(b) = bias {
                    _mm512_add_ps(v, b)
                } else {
                    v
                };
                _mm512_mask_storeu_ps(dst, mask, v);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_sums(blk: &[i8], panel: &[i8], groups: usize, acc: &mut [[i32; NR]; MR]) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's sizes: every load reads inside `blk` (4 bytes of row i of group g) or
    // `panel` (128 bytes of group g); the stores write `acc`.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let (xp, wp) = (blk.as_ptr(), panel.as_ptr());
        for pair in 0..MR / 2 {
            let mut c = [[_mm256_setzero_si256(); 4]; 2];
            for g in 0..groups {
                let w: [__m256i; 4] =
                    std::array::from_fn(|v| _mm256_loadu_si256(wp.add(g * GROUP_BYTES + 32 * v).cast()));
                for (r, cr) in c.iter_mut().enumerate() {
                    let i = 2 * pair + r;
                    let a = _mm256_set1_epi32(xp.add((g * MR + i) * GROUP).cast::<i32>().read_unaligned());
                    let a_abs = _mm256_sign_epi8(a, a);
                    for (cv, &wv) in cr.iter_mut().zip(&w) {
                        let p16 = _mm256_maddubs_epi16(a_abs, _mm256_sign_epi8(wv, a));
                        *cv = _mm256_add_epi32(*cv, _mm256_madd_epi16(p16, ones));
                    }
                }
            }
            for (r, cr) in c.iter().enumerate() {
                for (v, cv) in cr.iter().enumerate() {
                    _mm256_storeu_si256(acc[2 * pair + r].as_mut_ptr().add(8 * v).cast(), *cv);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_rounds_saturates_and_handles_special_rows() {
        let mut q = [0i8; 5];
        // amax 127 → scale 1: codes are the values rounded half to even.
        let s = quantize_row(&[127.0, -0.5, 1.5, 2.5, -126.5], &mut q);
        assert_eq!(s, 1.0);
        assert_eq!(q, [127, 0, 2, 2, -126]);
        // The largest magnitude maps to ±127 exactly, never −128.
        let s = quantize_row(&[-3.0, 1.0, 0.0, 3.0, -2.999], &mut q);
        assert_eq!(s, 3.0 / 127.0);
        assert_eq!(q, [-127, 42, 0, 127, -127]);
        // Zero row: scale 0, codes 0.
        assert_eq!(quantize_row(&[0.0; 5], &mut q), 0.0);
        assert_eq!(q, [0; 5]);
        // Constant row: every code at the extreme.
        let s = quantize_row(&[-0.25; 5], &mut q);
        assert_eq!(s, 0.25 / 127.0);
        assert_eq!(q, [-127; 5]);
        // NaN or ∞ anywhere: scale NaN, codes 0 (the outputs turn NaN).
        assert!(quantize_row(&[1.0, f32::NAN, 2.0, 0.0, 0.0], &mut q).is_nan());
        assert!(quantize_row(&[1.0, 2.0, f32::INFINITY, 0.0, 0.0], &mut q).is_nan());
        assert_eq!(q, [0; 5]);
    }

    #[test]
    fn vnni_layout_sums_equal_signed_sums_after_the_shift() {
        // The scalar kernel on shifted bytes, minus the correction, equals the signed sums.
        let groups = 3;
        let blk: Vec<i8> = (0..groups * MR * GROUP).map(|i| ((i * 37 % 255) as i32 - 127) as i8).collect();
        let panel: Vec<i8> = (0..groups * GROUP_BYTES).map(|i| ((i * 91 % 255) as i32 - 127) as i8).collect();
        let mut signed = [[0; NR]; MR];
        scalar_sums(&blk, &panel, groups, &mut signed, false);
        let shifted: Vec<i8> = blk.iter().map(|&v| v ^ 0x80u8 as i8).collect();
        let mut unsigned = [[0; NR]; MR];
        scalar_sums(&shifted, &panel, groups, &mut unsigned, true);
        for (su, ss) in unsigned.iter().zip(&signed) {
            for j in 0..NR {
                let col: i32 = (0..groups)
                    .flat_map(|g| (0..GROUP).map(move |e| (g, e)))
                    .map(|(g, e)| panel[g * GROUP_BYTES + j * GROUP + e] as i32)
                    .sum();
                assert_eq!(su[j] - 128 * col, ss[j]);
            }
        }
    }
}
