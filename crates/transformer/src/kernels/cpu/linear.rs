//! Matrix products of two f32 operands at a given [`Float`] precision, and the linear maps
//! (`nn.Linear`) of the model built on them, forward and backward. The precision is an argument,
//! carried by the model that calls: f32 goes to [`super::matmul::matmul`], bf16 to
//! [`super::bf16::matmul_bf16`]. int8 products exist only on prepared weights
//! ([`super::packed::PackedLinear`]).

use super::matmul::{matmul, Op};
use crate::error::{Error, Result};
use crate::precision::{Float, Precision};

impl Precision {
    /// Whether this CPU can compute products at this precision; the error says why not.
    pub fn available(self) -> Result<()> {
        match self {
            Precision::F32 | Precision::Int8 => Ok(()),
            Precision::Bf16 => super::bf16::available()
                .map_err(|why| Error::Unsupported(format!("bf16 matrix products are not available: {why}"))),
        }
    }
}

/// C (m, n) = [C +] op(A) · op(B) at precision `prec`; the contract of [`matmul`]. For
/// [`Float::Bf16`] the caller has checked [`Precision::available`] (the model does so when it
/// is built).
#[allow(clippy::too_many_arguments)]
pub fn product(
    prec: Float,
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
    match prec {
        Float::F32 => matmul(c, a, op_a, b, op_b, m, n, k, accumulate),
        Float::Bf16 => {
            let _t = super::profile::product_scope(m, n, k, op_a == Op::T, op_b == Op::T);
            super::bf16::matmul_bf16(c, a, op_a, b, op_b, m, n, k, accumulate);
        }
    }
}

/// Y (m, n) = X (m, k) · Wᵀ + bias, with W stored (n, k) like PyTorch's `nn.Linear`.
#[allow(clippy::too_many_arguments)]
pub fn linear_forward(
    prec: Float,
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
            let fill = |rows: &mut [f32]| rows.chunks_exact_mut(n).for_each(|row| row.copy_from_slice(bias));
            if m * n >= 1 << 16 {
                use rayon::prelude::*;
                y.par_chunks_mut(n * 64).for_each(fill);
            } else if n > 0 {
                fill(y);
            }
            product(prec, y, x, Op::N, w, Op::T, m, n, k, true);
        }
        None => product(prec, y, x, Op::N, w, Op::T, m, n, k, false),
    }
}

/// Backward of [`linear_forward`]: dW (n, k) += dYᵀ X; db (n) += Σ_rows dY; dX (m, k) = or += dY W.
#[allow(clippy::too_many_arguments)]
pub fn linear_backward(
    prec: Float,
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
    product(prec, dw, dy, Op::T, x, Op::N, n, k, m, true);
    if let Some(db) = db {
        super::elementwise::column_sum_add(db, dy, n);
    }
    if let Some(dx) = dx {
        product(prec, dx, dy, Op::N, w, Op::N, m, k, n, accumulate_dx);
    }
}
