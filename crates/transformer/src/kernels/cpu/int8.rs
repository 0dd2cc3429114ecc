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
//! AMX-int8 (`tdpbusd`) is not written: no machine this was built on had AMX, and code that never
//! ran is not shipped.

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

/// Quantises `x` into `q` (same length) and returns the scale (see the module's rule).
pub fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
    assert_eq!(x.len(), q.len());
    // A max that keeps NaN once seen.
    let amax = x.iter().fold(0f32, |m, &v| {
        let a = v.abs();
        if a > m || a.is_nan() {
            a
        } else {
            m
        }
    });
    if amax < f32::MIN_POSITIVE || !amax.is_finite() {
        q.fill(0);
        return if amax < f32::MIN_POSITIVE { 0.0 } else { f32::NAN };
    }
    let inv = 127.0 / amax;
    quantize_with(x, q, inv);
    amax / 127.0
}

#[multiversion(targets("x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma", "x86_64+avx2+fma+sse4.1"))]
fn quantize_with(x: &[f32], q: &mut [i8], inv: f32) {
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
}

/// A weight matrix W (n, k) quantised per output row and packed into panels, with what the
/// kernels need beside it. Built once (at load); holds no f32 copy of W.
#[derive(Clone, Debug)]
pub struct QuantizedLinear {
    n: usize,
    k: usize,
    /// ceil(n / NR) panels of groups · GROUP_BYTES codes.
    panels: Vec<i8>,
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
        let groups = k.div_ceil(GROUP);
        let np = n.div_ceil(NR);
        let mut panels = vec![0i8; np * groups * GROUP_BYTES];
        let mut shift = vec![0i32; np * NR];
        panels.par_chunks_mut((groups * GROUP_BYTES).max(1)).zip(shift.par_chunks_mut(NR)).enumerate().for_each(
            |(p, (panel, shift))| {
                for (j, shift) in shift.iter_mut().enumerate().take(NR.min(n - p * NR)) {
                    let q = &codes[(p * NR + j) * k..][..k];
                    *shift = 128 * q.iter().map(|&v| v as i32).sum::<i32>();
                    for (kk, &v) in q.iter().enumerate() {
                        panel[(kk / GROUP) * GROUP_BYTES + j * GROUP + kk % GROUP] = v;
                    }
                }
            },
        );
        Ok(QuantizedLinear { n, k, panels, scales, shift })
    }

    /// The codes (n, k) row-major and the per-row scales, unpacked.
    pub fn codes(&self) -> (Vec<i8>, Vec<f32>) {
        let (n, k) = (self.n, self.k);
        let groups = k.div_ceil(GROUP);
        let mut codes = vec![0i8; n * k];
        for (r, row) in codes.chunks_mut(k.max(1)).enumerate().take(n) {
            let (p, j) = (r / NR, r % NR);
            let panel = &self.panels[p * groups * GROUP_BYTES..];
            for (kk, c) in row.iter_mut().enumerate() {
                *c = panel[(kk / GROUP) * GROUP_BYTES + j * GROUP + kk % GROUP];
            }
        }
        (codes, self.scales.clone())
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

    /// Y (m, n) = X (m, k) · Wᵀ [+ bias] on the fastest kernel this CPU has.
    pub fn forward(&self, y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize) {
        self.forward_on(kernel(), y, x, bias, m)
    }

    /// [`QuantizedLinear::forward`] on a given kernel, which must be one of [`kernels`] (panics
    /// otherwise).
    pub fn forward_on(&self, kern: Int8Kernel, y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize) {
        self.run(kern, y, x, bias, m, false)
    }

    /// Y (m, n) += X (m, k) · Wᵀ on the fastest kernel.
    pub fn forward_accumulate(&self, y: &mut [f32], x: &[f32], m: usize) {
        self.run(kernel(), y, x, None, m, true)
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
                    let panel = &self.panels[p * groups * GROUP_BYTES..][..groups * GROUP_BYTES];
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
    static X_SCALES: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

struct SendPtr(*mut f32);
// SAFETY: used only to write disjoint regions from different threads (see `forward_on`).
unsafe impl Sync for SendPtr {}
unsafe impl Send for SendPtr {}

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
/// VNNI is available; `blk` and `panel` hold `groups` groups; `out` is valid for writes of
/// `out.rows` rows × `out.cols` columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_block<const R: usize>(blk: &[i8], panel: &[i8], groups: usize, out: &Out) {
    use std::arch::x86_64::*;
    // SAFETY: loads stay inside `blk`, `panel` and the column slices (masked to `cols`); stores
    // write rows < rows, columns < cols of the caller's block.
    unsafe {
        let mut c = [[_mm512_setzero_si512(); 2]; R];
        let (xp, wp) = (blk.as_ptr(), panel.as_ptr());
        for g in 0..groups {
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
