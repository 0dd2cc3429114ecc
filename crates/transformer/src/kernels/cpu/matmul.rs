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
