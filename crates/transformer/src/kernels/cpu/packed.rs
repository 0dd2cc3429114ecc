//! Linear maps with pre-packed weights, for inference: Y (m, n) = X (m, k) · Wᵀ + bias, W stored
//! (n, k) like `nn.Linear`. The weights are re-laid once into panels of [`NR`] output columns
//! (k × NR contiguous), so a product streams each panel from cache with no per-call packing of the
//! large operand; X is read as given, [`MR`] rows at a time (an earlier version packed each block
//! of X first: no faster in decoding, and 10% slower on the 256-column products). The
//! micro-kernel keeps an MR × NR block of Y in registers (AVX-512: 24 of the 32 vector registers).
//! Threads split the panels.
//!
//! Used only where AVX-512 is present; products of more than [`PACKED_MAX_ROWS`] rows run in
//! chunks of 156 (that many rounded down to whole blocks of MR), so a chunk of X stays in cache while the panels pass over it (at 512 rows
//! this doubles the rate of Transformer-base's FFN products over the `gemm` crate,
//! examples/decode_products.rs). Otherwise [`PackedLinear::forward`] calls the `gemm` crate on the
//! original layout, so results never depend on which path ran beyond float rounding. Building with `pack = false` forces the `gemm` path (for A/B timing).
//!
//! At the other precisions the weights are prepared once as well: bf16 products read W rounded and
//! laid out in the bf16 unit's tiles ([`super::bf16::Bf16Weights`]), int8 products read W quantised
//! per row ([`super::int8::QuantizedLinear`]). A [`PackedLinear`] owns the only copy of W it
//! needs: the model's parameters need not keep W beside it (`model::Prepared`).

use super::bf16::{linear_bf16, Bf16Weights};
use super::embedding::Rows;
use super::int8::QuantizedLinear;
use super::linear::linear_forward;
use super::SendPtr;
use crate::precision::{Float, Precision};
use rayon::prelude::*;

/// Output columns per weight panel.
pub const NR: usize = 32;
/// Rows per block of X.
pub const MR: usize = 12;
/// Products with more rows than this run in chunks of at most this many.
pub const PACKED_MAX_ROWS: usize = 160;
/// The weight panels that each block of X meets in turn, in bytes: a share of L2 on every CPU
/// with AVX-512 (1–2 MB a core). Without groups each panel met every block in turn, and the
/// panel and a block of X did not both fit in L1; with them the logits' product (8000 × 256,
/// 128 rows) ran 10% faster (examples/decode_products.rs, Zen 4).
const PANEL_GROUP_BYTES: usize = 256 * 1024;

/// A weight matrix W (n, k) prepared for inference products, owning what its products read.
#[derive(Clone, Debug)]
pub struct PackedLinear {
    n: usize,
    k: usize,
    kind: Kind,
}

#[derive(Clone, Debug)]
enum Kind {
    /// f32: ceil(n / NR) panels of k × NR, zero-padded past column n.
    Panels(Vec<f32>),
    /// W (n, k) as given, every product on it through [`linear_forward`] at this precision (the
    /// `gemm` path: a CPU without AVX-512, or preparing without packing for A/B timing).
    Unpacked(Float, Vec<f32>),
    /// bf16 tiles.
    Bf16(Bf16Weights),
    /// int8 codes and scales.
    Int8(QuantizedLinear),
}

fn use_packed() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512dq")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl PackedLinear {
    /// Prepares W, stored (n, k) row-major, for products at `precision`: f32 panels (with `pack`
    /// on a CPU with AVX-512), bf16 tiles (with `pack`), int8 codes (always). Otherwise it keeps W
    /// as given and the products run [`linear_forward`] at `precision` on it.
    pub fn new(w: &[f32], n: usize, k: usize, precision: Precision, pack: bool) -> Self {
        assert_eq!(w.len(), n * k, "PackedLinear: W has {} elements, expected {n}x{k}", w.len());
        let kind = match precision {
            Precision::Int8 => Kind::Int8(QuantizedLinear::new(w, n, k)),
            Precision::Bf16 if pack => Kind::Bf16(Bf16Weights::new(w, n, k)),
            Precision::F32 if pack && use_packed() && n > 0 && k > 0 => {
                let np = n.div_ceil(NR);
                let mut panels = vec![0.0; np * k * NR];
                panels.par_chunks_mut(k * NR).enumerate().for_each(|(p, panel)| {
                    for j in 0..NR.min(n - p * NR) {
                        let row = &w[(p * NR + j) * k..][..k];
                        for (kk, &x) in row.iter().enumerate() {
                            panel[kk * NR + j] = x;
                        }
                    }
                });
                Kind::Panels(panels)
            }
            Precision::Bf16 => Kind::Unpacked(Float::Bf16, w.to_vec()),
            Precision::F32 => Kind::Unpacked(Float::F32, w.to_vec()),
        };
        PackedLinear { n, k, kind }
    }

    /// int8 weights quantised elsewhere (codes read from an int8 checkpoint).
    pub fn int8(q: QuantizedLinear) -> Self {
        PackedLinear { n: q.n(), k: q.k(), kind: Kind::Int8(q) }
    }

    /// The int8 codes, for an int8 layout.
    pub fn quantized(&self) -> Option<&QuantizedLinear> {
        match &self.kind {
            Kind::Int8(q) => Some(q),
            _ => None,
        }
    }

    /// W's rows exactly as given, where this layout keeps them in f32 (panels or W itself): what
    /// an embedding lookup may read instead of a second copy of W. `None` for bf16 tiles and int8
    /// codes, which hold rounded values.
    pub fn rows(&self) -> Option<Rows<'_>> {
        match &self.kind {
            Kind::Panels(p) => Some(Rows::Panels { data: p, k: self.k, nr: NR, n: self.n }),
            Kind::Unpacked(_, w) => Some(Rows::Dense(w)),
            Kind::Bf16(_) | Kind::Int8(_) => None,
        }
    }

    /// The map of W's rows `rows` only (each below n), in that order: Y's columns are those of
    /// this map's product at those rows, computed by the same kernel (a vocabulary shortlist's
    /// output layer). bf16 tiles hold rounded values, so for them W's f32 rows are read from
    /// `f32_rows` (the rows they were rounded from) and rounded again the same way; the other
    /// layouts read their own.
    ///
    /// # Panics
    /// If a row is not below n, or for bf16 tiles without `f32_rows`.
    pub fn select_rows(&self, rows: &[u32], f32_rows: Option<Rows<'_>>) -> Self {
        let (n, k) = (rows.len(), self.k);
        assert!(rows.iter().all(|&r| (r as usize) < self.n), "select_rows: a row past {}", self.n);
        let gather = |from: Rows<'_>| {
            let mut w = vec![0.0; n * k];
            for (out, &r) in w.chunks_mut(k.max(1)).zip(rows) {
                from.copy_row(r as usize, out);
            }
            w
        };
        let kind = match &self.kind {
            Kind::Int8(q) => Kind::Int8(q.select_rows(rows)),
            Kind::Unpacked(prec, w) => Kind::Unpacked(*prec, gather(Rows::Dense(w))),
            Kind::Panels(_) => {
                let w = gather(self.rows().expect("panels keep their rows"));
                return PackedLinear::new(&w, n, k, Precision::F32, true);
            }
            Kind::Bf16(_) => {
                let from = f32_rows.expect("select_rows: bf16 tiles need the f32 rows they were rounded from");
                Kind::Bf16(Bf16Weights::new(&gather(from), n, k))
            }
        };
        PackedLinear { n, k, kind }
    }

    /// Bytes this holds.
    pub fn bytes(&self) -> usize {
        match &self.kind {
            Kind::Panels(p) => 4 * p.len(),
            Kind::Unpacked(_, w) => 4 * w.len(),
            Kind::Bf16(w) => w.bytes(),
            Kind::Int8(q) => q.bytes(),
        }
    }

    /// Output width n.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input width k.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Y (m, n) = X (m, k) · Wᵀ [+ bias].
    pub fn forward(&self, y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize) {
        let (n, k) = (self.n, self.k);
        assert_eq!(y.len(), m * n, "PackedLinear: Y has {} elements, expected {m}x{n}", y.len());
        assert_eq!(x.len(), m * k, "PackedLinear: X has {} elements, expected {m}x{k}", x.len());
        assert!(bias.is_none_or(|b| b.len() == n));
        let panels = match &self.kind {
            Kind::Panels(panels) => panels,
            Kind::Unpacked(prec, w) => return linear_forward(*prec, y, x, w, bias, m, n, k),
            Kind::Int8(q) => return q.forward(y, x, bias, m),
            Kind::Bf16(_) if n == 0 => return,
            Kind::Bf16(wb) => {
                if let Some(bias) = bias {
                    y.chunks_exact_mut(n).for_each(|row| row.copy_from_slice(bias));
                }
                return linear_bf16(y, x, wb, m, bias.is_some());
            }
        };
        if m == 0 {
            return;
        }
        // Many rows: in chunks of at most PACKED_MAX_ROWS, so that a chunk of X stays in the
        // core's cache while every panel of W passes over it (all of X at once would be read
        // from memory once per panel; examples/decode_products.rs).
        if m > PACKED_MAX_ROWS {
            let chunk = PACKED_MAX_ROWS / MR * MR;
            for (yc, xc) in y.chunks_mut(chunk * n).zip(x.chunks(chunk * k)) {
                self.forward(yc, xc, bias, xc.len() / k);
            }
            return;
        }
        let _t = super::profile::scope(super::profile::Slot::Matmul);
        super::profile::add_matmul_flops(2 * (m * n * k) as u64);
        self.panels_times(panels, y, x, bias, m);
    }

    /// Y (m, n) += X (m, k) · Wᵀ.
    pub fn forward_accumulate(&self, y: &mut [f32], x: &[f32], m: usize) {
        let (n, k) = (self.n, self.k);
        match &self.kind {
            Kind::Int8(q) => q.forward_accumulate(y, x, m),
            Kind::Unpacked(prec, w) => {
                use super::matmul::Op;
                super::linear::product(*prec, y, x, Op::N, w, Op::T, m, n, k, true)
            }
            Kind::Bf16(wb) => linear_bf16(y, x, wb, m, true),
            Kind::Panels(_) => {
                // The panels' kernel writes Y; the maps that accumulate (the pointer's) are
                // prepared as W itself at f32, so this runs only for a map prepared otherwise.
                let mut t = vec![0.0; m * n];
                self.forward(&mut t, x, None, m);
                y.iter_mut().zip(&t).for_each(|(a, b)| *a += b);
            }
        }
    }

    /// Y = X (as given) · packed W [+ bias]; threads split the panels, so each writes its own
    /// columns.
    fn panels_times(&self, panels: &[f32], y: &mut [f32], x: &[f32], bias: Option<&[f32]>, m: usize) {
        let (n, k) = (self.n, self.k);
        let blocks = m.div_ceil(MR);
        let np = n.div_ceil(NR);
        let threads = rayon::current_num_threads().clamp(1, np);
        let per = np.div_ceil(threads);
        let out = SendPtr(y.as_mut_ptr());
        // The last block may hold only a few rows (decoding one sentence: one to four). It runs a
        // kernel of that many rows (the full one would multiply MR rows for every row it keeps)
        // over several panels at once, so that enough independent sums are in flight to hide the
        // multiply-add's latency (one row times one panel is two chains of k dependent FMAs).
        let last = m - (blocks - 1) * MR;
        let full = if last <= 4 { blocks - 1 } else { blocks };
        (0..threads).into_par_iter().for_each(|t| {
            let out = &out;
            let (lo, hi) = (t * per, ((t + 1) * per).min(np));
            // Panels in groups of about PANEL_GROUP_BYTES: every block of X (12·k·4 bytes, in L1
            // at the model widths decoding meets, k ≤ 512) passes over a group (held in L2)
            // before the next group is read. (At k ≥ 2048 a panel alone fills the group.)
            let per_group = (PANEL_GROUP_BYTES / (k * NR * 4)).max(1);
            let mut g0 = lo;
            while g0 < hi {
                let g1 = (g0 + per_group).min(hi);
                for b in 0..full {
                    let rows = MR.min(m - b * MR);
                    let xb = &x[b * k * MR..][..k * rows];
                    for p in g0..g1 {
                        let panel = &panels[p * k * NR..][..k * NR];
                        let c0 = p * NR;
                        let cols = NR.min(n - c0);
                        let bias = bias.map(|b| &b[c0..c0 + cols]);
                        // SAFETY: rows b·MR..b·MR + rows ≤ m and columns c0..c0 + cols ≤ n lie inside Y
                        // (asserted in `forward`); threads write disjoint column ranges.
                        unsafe {
                            let y = out.0.add(b * MR * n + c0);
                            kernel::<MR, 1>(xb, panel, k, y, n, rows, cols, bias);
                        }
                    }
                }
                g0 = g1;
            }
            if full == blocks {
                return;
            }
            let b = blocks - 1;
            let xb = &x[b * k * MR..][..k * last];
            let mut p = lo;
            while p < hi {
                // Panels p..p + g: g of them, the last possibly partial (only the matrix's last
                // panel is).
                let g = match last {
                    1 | 2 => (hi - p).min(4),
                    _ => (hi - p).min(2),
                };
                let g = if g == 3 { 2 } else { g };
                let c0 = p * NR;
                let cols = (g * NR).min(n - c0);
                let bias = bias.map(|b| &b[c0..c0 + cols]);
                let group = &panels[p * k * NR..][..g * k * NR];
                // SAFETY: rows b·MR..m and columns c0..c0 + cols ≤ n lie inside Y; threads write
                // disjoint column ranges.
                unsafe {
                    let y = out.0.add(b * MR * n + c0);
                    match (last, g) {
                        (1, 4) => kernel::<1, 4>(xb, group, k, y, n, last, cols, bias),
                        (1, 2) => kernel::<1, 2>(xb, group, k, y, n, last, cols, bias),
                        (1, _) => kernel::<1, 1>(xb, group, k, y, n, last, cols, bias),
                        (2, 4) => kernel::<2, 4>(xb, group, k, y, n, last, cols, bias),
                        (2, 2) => kernel::<2, 2>(xb, group, k, y, n, last, cols, bias),
                        (2, _) => kernel::<2, 1>(xb, group, k, y, n, last, cols, bias),
                        (_, 2) => kernel::<4, 2>(xb, group, k, y, n, last, cols, bias),
                        _ => kernel::<4, 1>(xb, group, k, y, n, last, cols, bias),
                    }
                }
                p += g;
            }
        });
    }
}

/// The micro-kernel: Y[i][j] = Σ_p xb[i][p] · panels[p][j] (+ bias[j]) for i < rows, j < cols, over
/// P consecutive panels (`panels`: P · k × NR, columns 0..cols of Y, cols > (P − 1) · NR), the sums
/// in registers: per step p a broadcast of each of R rows of X (`xb`: rows × k, row-major) times
/// 2P vectors of weights. On AVX-512 intrinsics (the panels exist only where [`use_packed`] found
/// AVX-512). Every element of Y adds its k products in the order p = 0, 1, …, so a row's result
/// does not depend on the rows beside it. R · 2P sums are in flight: a full block (R = MR, P = 1) holds 24 of the 32 vector
/// registers; a few rows take several panels at once (at R = 1, P = 1 only two sums, and each step
/// would wait for the last multiply-add's result). (The `multiversion` macro on a generic
/// function, or beside several kernels in one `match`, ran 4× slower than the single kernel; a
/// version left to the compiler's vectoriser zeroed its block on the stack with `memset` at every
/// call, 3% of f32 decoding, and so did this one while its sums started from zeros.)
///
/// # Safety
/// The CPU has AVX-512F and FMA; `y` must be valid for writes at `i·ldy + j` for every i < rows,
/// j < cols.
#[allow(clippy::too_many_arguments)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn kernel<const R: usize, const P: usize>(
    xb: &[f32],
    panels: &[f32],
    k: usize,
    y: *mut f32,
    ldy: usize,
    rows: usize,
    cols: usize,
    bias: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    // k > 0: weights are laid in panels only then (`PackedLinear::new`).
    assert!(k > 0 && R <= MR && rows >= 1 && rows <= R && xb.len() >= k * rows && panels.len() >= P * k * NR);
    assert!(cols <= P * NR && cols > (P - 1) * NR);
    // SAFETY: loads read inside `xb` (rows rows of k) and `panels` (P panels of k rows of NR);
    // stores are masked to `cols` columns of rows < rows, which the caller guarantees writable.
    unsafe {
        super::prefetch_rows(y, ldy, rows, cols);
        // Row i of the block (rows past `rows` repeat the last; their sums are not stored).
        let xr: [*const f32; R] = std::array::from_fn(|i| xb.as_ptr().add(i.min(rows - 1) * k));
        let wp = panels.as_ptr();
        // The sums start from step 0's products (the value a multiply-add onto zero gives, but
        // for the sign of an exact zero) rather than from zeros, which the compiler set with
        // `memset` on the stack at every call (1% of f32 decoding).
        let mut c: [[[__m512; 2]; P]; R] = std::array::from_fn(|i| {
            let a = _mm512_set1_ps(*xr[i]);
            std::array::from_fn(|q| {
                let w = wp.add(q * k * NR);
                [_mm512_mul_ps(a, _mm512_loadu_ps(w)), _mm512_mul_ps(a, _mm512_loadu_ps(w.add(16)))]
            })
        });
        for p in 1..k {
            let mut b = [[_mm512_setzero_ps(); 2]; P];
            for (q, bq) in b.iter_mut().enumerate() {
                bq[0] = _mm512_loadu_ps(wp.add(q * k * NR + p * NR));
                bq[1] = _mm512_loadu_ps(wp.add(q * k * NR + p * NR + 16));
            }
            for (i, ci) in c.iter_mut().enumerate() {
                let a = _mm512_set1_ps(*xr[i].add(p));
                for (cq, bq) in ci.iter_mut().zip(&b) {
                    cq[0] = _mm512_fmadd_ps(a, bq[0], cq[0]);
                    cq[1] = _mm512_fmadd_ps(a, bq[1], cq[1]);
                }
            }
        }
        for (i, ci) in c.iter().enumerate().take(rows) {
            for (h, v) in ci.iter().flatten().enumerate() {
                // Columns 16h..16h + 16 of the group, masked to those < cols.
                let left = cols.saturating_sub(16 * h).min(16);
                if left == 0 {
                    continue;
                }
                let mask = ((1u32 << left) - 1) as u16;
                let mut v = *v;
                if let Some(b) = bias {
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, b.as_ptr().add(16 * h)));
                }
                _mm512_mask_storeu_ps(y.add(i * ldy + 16 * h), mask, v);
            }
        }
    }
}
