//! f32 matrix products on the `gemm` crate (runtime-dispatched AVX-512/AVX2/SSE micro-kernels,
//! rayon-parallel), and small strided products for attention. The products at a chosen
//! [`crate::precision::Precision`] are in [`super::linear`].

/// Checks the operand sizes of a product (each at most `limit` elements, with checked products: a
/// wrapped size could otherwise pass), and finishes the empty cases (m or n = 0: nothing; k = 0:
/// C = 0 unless accumulating). Returns whether a product is left to compute.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_and_trivial(
    what: &str,
    limit: usize,
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    m: usize,
    n: usize,
    k: usize,
    accumulate: bool,
) -> bool {
    let size = |r: usize, c: usize| r.checked_mul(c).filter(|&x| x <= limit);
    assert_eq!(Some(c.len()), size(m, n), "{what}: C has {} elements, expected {m}x{n}", c.len());
    assert_eq!(Some(a.len()), size(m, k), "{what}: A has {} elements, expected {m}x{k}", a.len());
    assert_eq!(Some(b.len()), size(k, n), "{what}: B has {} elements, expected {k}x{n}", b.len());
    if m == 0 || n == 0 {
        return false;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return false;
    }
    true
}

/// Whether an operand is used as stored (row-major) or transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Use as stored.
    N,
    /// Use transposed.
    T,
}

/// C (m, n) = [C +] op(A) · op(B) in f32, all row-major and contiguous.
///
/// `op(A)` is (m, k): A is stored (m, k) for `Op::N`, (k, m) for `Op::T`. `op(B)` is (k, n): B is stored
/// (k, n) for `Op::N`, (n, k) for `Op::T`. With `accumulate` the product is added to C, else C is
/// overwritten.
#[allow(clippy::too_many_arguments)]
pub fn matmul(c: &mut [f32], a: &[f32], op_a: Op, b: &[f32], op_b: Op, m: usize, n: usize, k: usize, accumulate: bool) {
    if !check_and_trivial("matmul", isize::MAX as usize, c, a, b, m, n, k, accumulate) {
        return;
    }
    // (row stride, column stride) of each operand as op() sees it.
    let (a_rs, a_cs) = match op_a {
        Op::N => (k as isize, 1),
        Op::T => (1, m as isize),
    };
    let (b_rs, b_cs) = match op_b {
        Op::N => (n as isize, 1),
        Op::T => (1, k as isize),
    };
    let threads = rayon::current_num_threads();
    let par = if threads > 1 && m * n * k >= 64 * 64 * 64 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    let _t = super::profile::product_scope(m, n, k, op_a == Op::T, op_b == Op::T);
    // SAFETY: the asserts above guarantee every index op(A)[i][p], op(B)[p][j], C[i][j] for i < m,
    // j < n, p < k lies inside its slice with the strides computed above; C does not alias A or B
    // (it is borrowed mutably).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

/// A read-only strided matrix view: element (i, j) is `data[off + i·rs + j·cs]`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    /// Backing buffer.
    pub data: &'a [f32],
    /// Index of element (0, 0).
    pub off: usize,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl<'a> MatRef<'a> {
    /// A row-major view of `rows` × `cols` starting at `off`, rows `ld` apart.
    pub fn rows(data: &'a [f32], off: usize, rows: usize, cols: usize, ld: usize) -> Self {
        MatRef { data, off, rows, cols, rs: ld, cs: 1 }
    }
    /// The transposed view (no copy).
    pub fn t(self) -> Self {
        MatRef { rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs, ..self }
    }
    /// Asserts that every element of the (non-empty) view lies inside `data`, with checked
    /// arithmetic and strides small enough for the signed strides gemm takes.
    fn check(&self, what: &str) {
        assert!(self.rs <= isize::MAX as usize && self.cs <= isize::MAX as usize, "{what}: stride too large");
        let last = last_index(self.off, self.rows, self.rs, self.cols, self.cs);
        assert!(last.is_some_and(|l| l < self.data.len()), "{what}: view exceeds its buffer of {}", self.data.len());
    }
}

/// off + (rows − 1)·rs + (cols − 1)·cs without overflow, for rows, cols ≥ 1.
fn last_index(off: usize, rows: usize, rs: usize, cols: usize, cs: usize) -> Option<usize> {
    off.checked_add((rows - 1).checked_mul(rs)?)?.checked_add((cols - 1).checked_mul(cs)?)
}

/// C = [C +] alpha · A · B on strided views, single-threaded: for the many small per-head products
/// inside attention, which is itself parallel over sentences. C is row-major with row stride `ldc`.
pub fn gemm_small(c: &mut [f32], c_off: usize, ldc: usize, a: MatRef, b: MatRef, alpha: f32, accumulate: bool) {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    assert_eq!(b.rows, k, "gemm_small: inner dimensions {k} and {}", b.rows);
    if m == 0 || n == 0 {
        return;
    }
    assert!(ldc >= n && ldc <= isize::MAX as usize, "gemm_small: row stride {ldc} for {n} columns");
    let last = last_index(c_off, m, ldc, n, 1);
    assert!(last.is_some_and(|l| l < c.len()), "gemm_small: C view exceeds its buffer of {}", c.len());
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                c[c_off + i * ldc..c_off + i * ldc + n].fill(0.0);
            }
        }
        return;
    }
    a.check("gemm_small A");
    b.check("gemm_small B");
    if small::available() && (b.cs == 1 || b.rs == 1) && k <= small::MAX_K && n <= small::MAX_N {
        // SAFETY: avx512f is present (`available`); the views were bounds-checked above and C is
        // borrowed mutably.
        unsafe { small::product(c, c_off, ldc, a, b, alpha, accumulate) };
        return;
    }
    // SAFETY: every element of the three views was bounds-checked above (the last index of each view
    // is inside its slice and strides are non-negative); C is borrowed mutably, A and B shared.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr().add(c_off),
            1,
            ldc as isize,
            accumulate,
            a.data.as_ptr().add(a.off),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr().add(b.off),
            b.cs as isize,
            b.rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// The attention's per-head products on AVX-512 (sequence by head width, or sequence by
/// sequence): C = alpha · A · B [+ C] as outer products, four rows of C by up to 64 columns in
/// registers, summed over k with A broadcast and B loaded along its rows. A B stored transposed
/// (Kᵀ, Vᵀ) is first transposed into a thread-local scratch, 16 × 16 at a time. The `gemm` crate,
/// built for large products, spends most of such a product's time dispatching and packing; this
/// sums each element of C in order of k, one FMA at a time (its naive twin: `gemm_small_naive` in
/// the tests).
mod small {
    use super::MatRef;
    use std::arch::x86_64::*;
    use std::cell::RefCell;

    /// Largest k and n this path takes: the scratch holds k × n of a transposed B.
    pub const MAX_K: usize = 4096;
    pub const MAX_N: usize = 4096;

    pub fn available() -> bool {
        is_x86_feature_detected!("avx512f")
    }

    thread_local! {
        /// B transposed into rows (k, round_up(n, 16)); grows once.
        static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }

    /// # Safety
    /// avx512f is present; every element of the views and of C's (a.rows, b.cols) block at `c_off`
    /// with row stride `ldc` lies inside its slice; a.rows, b.cols, a.cols ≥ 1; b.cs == 1 or b.rs == 1.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn product(c: &mut [f32], c_off: usize, ldc: usize, a: MatRef, b: MatRef, alpha: f32, accumulate: bool) {
        let (m, n, k) = (a.rows, b.cols, a.cols);
        let cp = c.as_mut_ptr().wrapping_add(c_off);
        let ap = a.data.as_ptr().wrapping_add(a.off);
        if b.cs == 1 {
            // SAFETY: the caller's contract.
            unsafe { outer(cp, ldc, ap, a.rs, a.cs, b.data.as_ptr().add(b.off), b.rs, m, n, k, alpha, accumulate) };
            return;
        }
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let ld = n.next_multiple_of(16);
            if s.len() < k * ld {
                s.resize(k * ld, 0.0);
            }
            // SAFETY: B (k, n) is stored with b.rs == 1: column j is the contiguous run of k floats
            // at b.off + j·b.cs, inside b.data (checked by the caller); the scratch holds k × ld.
            unsafe {
                transpose(s.as_mut_ptr(), ld, b.data.as_ptr().add(b.off), b.cs, n, k);
                outer(cp, ldc, ap, a.rs, a.cs, s.as_ptr(), ld, m, n, k, alpha, accumulate);
            }
        });
    }

    /// out (k, ld) ← the transpose of the n rows of k floats at `src` (row stride `lds`), 16 × 16
    /// at a time; columns n..ld of `out` are zero.
    #[target_feature(enable = "avx512f")]
    unsafe fn transpose(out: *mut f32, ld: usize, src: *const f32, lds: usize, n: usize, k: usize) {
        for j0 in (0..n).step_by(16) {
            let rows = (n - j0).min(16);
            for p0 in (0..k).step_by(16) {
                let len = (k - p0).min(16);
                let mask: __mmask16 = if len == 16 { 0xffff } else { (1u16 << len) - 1 };
                let mut r = [_mm512_setzero_si512(); 16];
                for (j, v) in r.iter_mut().enumerate().take(rows) {
                    // SAFETY: row j0 + j < n, floats p0..p0 + len < k of it (masked).
                    *v = unsafe { _mm512_castps_si512(_mm512_maskz_loadu_ps(mask, src.add((j0 + j) * lds + p0))) };
                }
                // SAFETY: rows p0.. p0 + len of out, columns j0..j0 + 16 ≤ ld.
                unsafe { super::super::transpose16(out.add(p0 * ld + j0).cast(), ld, &r, len) };
            }
        }
    }

    /// C (m, n) = alpha · A · B [+ C]: A(i, p) at `a + i·ars + p·acs`, B(p, j) at `b + p·ldb + j`.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    unsafe fn outer(
        c: *mut f32,
        ldc: usize,
        a: *const f32,
        ars: usize,
        acs: usize,
        b: *const f32,
        ldb: usize,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        accumulate: bool,
    ) {
        for j0 in (0..n).step_by(64) {
            let cols = (n - j0).min(64);
            for i0 in (0..m).step_by(4) {
                let rows = (m - i0).min(4);
                // SAFETY: the caller's contract; `block` touches rows i0..i0 + rows of A and C and
                // columns j0..j0 + cols of B and C.
                unsafe {
                    let (c, a, b) = (c.add(i0 * ldc + j0), a.add(i0 * ars), b.add(j0));
                    match cols.div_ceil(16) {
                        1 => block::<1>(c, ldc, a, ars, acs, b, ldb, rows, cols, k, alpha, accumulate),
                        2 => block::<2>(c, ldc, a, ars, acs, b, ldb, rows, cols, k, alpha, accumulate),
                        3 => block::<3>(c, ldc, a, ars, acs, b, ldb, rows, cols, k, alpha, accumulate),
                        _ => block::<4>(c, ldc, a, ars, acs, b, ldb, rows, cols, k, alpha, accumulate),
                    }
                }
            }
        }
    }

    /// `rows` ≤ 4 rows by `cols` ≤ 16·NV columns of C; a missing row repeats the last (its sums
    /// are not stored).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn block<const NV: usize>(
        c: *mut f32,
        ldc: usize,
        a: *const f32,
        ars: usize,
        acs: usize,
        b: *const f32,
        ldb: usize,
        rows: usize,
        cols: usize,
        k: usize,
        alpha: f32,
        accumulate: bool,
    ) {
        let masks: [__mmask16; NV] = std::array::from_fn(|v| {
            let left = cols.saturating_sub(16 * v).min(16);
            if left == 16 {
                0xffff
            } else {
                (1u16 << left) - 1
            }
        });
        let row = [0, 1.min(rows - 1), 2.min(rows - 1), 3.min(rows - 1)].map(|r| r * ars);
        let mut acc = [[_mm512_setzero_ps(); NV]; 4];
        // SAFETY: the caller's contract: A rows < rows, p < k; B row p, masked columns < cols.
        unsafe {
            for p in 0..k {
                let bp = b.add(p * ldb);
                let bv: [__m512; NV] = std::array::from_fn(|v| _mm512_maskz_loadu_ps(masks[v], bp.add(16 * v)));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*a.add(row[r] + p * acs));
                    for v in 0..NV {
                        acc[v] = _mm512_fmadd_ps(av, bv[v], acc[v]);
                    }
                }
            }
            let al = _mm512_set1_ps(alpha);
            for (r, acc) in acc.iter().enumerate().take(rows) {
                for v in 0..NV {
                    let out = c.add(r * ldc + 16 * v);
                    let mut x = _mm512_mul_ps(al, acc[v]);
                    if accumulate {
                        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(masks[v], out));
                    }
                    _mm512_mask_storeu_ps(out, masks[v], x);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The naive twin of [`gemm_small`], summing in f64.
    /// Returns, for every element of `c`, the bound on an f32 sum's rounding error:
    /// (k + 2)·ε·(|alpha|·Σ|a·b| + |C|) inside the product, 0 outside.
    fn gemm_small_naive(
        c: &mut [f32],
        c_off: usize,
        ldc: usize,
        a: MatRef,
        b: MatRef,
        alpha: f32,
        accumulate: bool,
    ) -> Vec<f32> {
        let mut bound = vec![0f32; c.len()];
        for i in 0..a.rows {
            for j in 0..b.cols {
                let terms = (0..a.cols)
                    .map(|p| a.data[a.off + i * a.rs + p * a.cs] as f64 * b.data[b.off + p * b.rs + j * b.cs] as f64);
                let (s, abs) = terms.fold((0.0, 0.0), |(s, abs), t| (s + t, abs + t.abs()));
                let x = &mut c[c_off + i * ldc + j];
                let old = if accumulate { *x as f64 } else { 0.0 };
                *x = (alpha as f64 * s + old) as f32;
                let scale = (alpha as f64).abs() * abs + old.abs();
                bound[c_off + i * ldc + j] = ((a.cols + 2) as f64 * f32::EPSILON as f64 * scale) as f32;
            }
        }
        bound
    }

    /// Every view the attention uses (rows of a wider buffer, their transposes), at sizes around
    /// the register blocks (4 rows, 16 and 64 columns) and the transposes (16 × 16), against the
    /// naive twin; elements of C outside the product are left alone.
    #[test]
    fn small_products_match_their_naive_twin() {
        let mut rng = crate::rng::Rng::new(3);
        let mut rand = |len: usize| (0..len).map(|_| rng.uniform() as f32 * 2.0 - 1.0).collect::<Vec<f32>>();
        let mut checked = 0;
        for &(m, n, k) in &[
            (1, 1, 1),
            (3, 5, 7),
            (4, 16, 64),
            (5, 17, 64),
            (16, 16, 64),
            (17, 33, 65),
            (31, 64, 16),
            (9, 100, 3),
            (64, 65, 64),
            (2, 130, 40),
        ] {
            // A and B as rows of buffers 3 columns wider than they need, at an offset.
            for (a_t, b_t) in [(false, false), (false, true), (true, false), (true, true)] {
                let (ar, ac) = if a_t { (k, m) } else { (m, k) };
                let (br, bc) = if b_t { (n, k) } else { (k, n) };
                let (lda, ldb) = (ac + 3, bc + 3);
                let (abuf, bbuf) = (rand(2 + ar * lda), rand(1 + br * ldb));
                let a = MatRef::rows(&abuf, 2, ar, ac, lda);
                let b = MatRef::rows(&bbuf, 1, br, bc, ldb);
                let (a, b) = (if a_t { a.t() } else { a }, if b_t { b.t() } else { b });
                for (alpha, accumulate) in [(1.0, false), (0.125, true)] {
                    let ldc = n + 5;
                    let init = rand(3 + m * ldc);
                    let (mut got, mut want) = (init.clone(), init.clone());
                    gemm_small(&mut got, 3, ldc, a, b, alpha, accumulate);
                    let bound = gemm_small_naive(&mut want, 3, ldc, a, b, alpha, accumulate);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        // Outside the product (bound 0) C must be untouched, bit for bit.
                        assert!((g - w).abs() <= bound[i], "({m}, {n}, {k}) a_t {a_t} b_t {b_t}: {g} against {w}");
                    }
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 80);
    }
}
