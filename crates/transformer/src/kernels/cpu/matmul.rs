//! Matrix products for every linear map of the model, on the `gemm` crate (runtime-dispatched
//! AVX-512/AVX2/SSE micro-kernels, rayon-parallel).

/// Whether an operand is used as stored (row-major) or transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Use as stored.
    N,
    /// Use transposed.
    T,
}

/// C (m, n) = [C +] op(A) · op(B), all row-major and contiguous.
///
/// `op(A)` is (m, k): A is stored (m, k) for `Op::N`, (k, m) for `Op::T`. `op(B)` is (k, n): B is stored
/// (k, n) for `Op::N`, (n, k) for `Op::T`. With `accumulate` the product is added to C, else C is
/// overwritten.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
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
    assert_eq!(
        c.len(),
        m * n,
        "matmul: C has {} elements, expected {m}x{n}",
        c.len()
    );
    assert_eq!(
        a.len(),
        m * k,
        "matmul: A has {} elements, expected {m}x{k}",
        a.len()
    );
    assert_eq!(
        b.len(),
        k * n,
        "matmul: B has {} elements, expected {k}x{n}",
        b.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
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

/// Y (m, n) = X (m, k) · Wᵀ + bias, with W stored (n, k) like PyTorch's `nn.Linear`.
pub fn linear_forward(
    y: &mut [f32],
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    m: usize,
    n: usize,
    k: usize,
) {
    match bias {
        Some(bias) => {
            assert_eq!(bias.len(), n);
            for row in y.chunks_exact_mut(n) {
                row.copy_from_slice(bias);
            }
            matmul(y, x, Op::N, w, Op::T, m, n, k, true);
        }
        None => matmul(y, x, Op::N, w, Op::T, m, n, k, false),
    }
}

/// Backward of [`linear_forward`]: dW (n, k) += dYᵀ X; db (n) += Σ_rows dY; dX (m, k) = or += dY W.
#[allow(clippy::too_many_arguments)]
pub fn linear_backward(
    dx: Option<&mut [f32]>,
    accumulate_dx: bool,
    dw: &mut [f32],
    db: Option<&mut [f32]>,
    dy: &[f32],
    x: &[f32],
    w: &[f32],
    m: usize,
    n: usize,
    k: usize,
) {
    matmul(dw, dy, Op::T, x, Op::N, n, k, m, true);
    if let Some(db) = db {
        super::elementwise::column_sum_add(db, dy, n);
    }
    if let Some(dx) = dx {
        matmul(dx, dy, Op::N, w, Op::N, m, k, n, accumulate_dx);
    }
}
