//! Small element-wise kernels and the vector helpers the fused kernels inline: dot, axpy, a
//! vectorisable exp, ReLU, bias-gradient column sums.

use super::ROW_BLOCK;
use multiversion::multiversion;
use rayon::prelude::*;

/// Σ a[i]·b[i] with 16 independent partial sums, so the compiler can vectorise it.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let b = &b[..a.len()];
    let mut acc = [0f32; 16];
    let (ac, ar) = (a.chunks_exact(16), a.chunks_exact(16).remainder());
    let (bc, br) = (b.chunks_exact(16), b.chunks_exact(16).remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..16 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0.0;
    for (x, y) in ar.iter().zip(br) {
        tail += x * y;
    }
    let mut s = 0.0;
    for v in acc {
        s += v;
    }
    s + tail
}

/// y[i] += alpha · x[i].
#[inline(always)]
pub fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// e^x for f32 by range reduction (x = n·ln2 + r) and a degree-6 polynomial; relative error below
/// 2e-7 on [-87, 88], 0 below, +inf above. Written branch-free so loops over it vectorise.
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    let n = (x * std::f32::consts::LOG2_E).round();
    // Cody–Waite split of ln 2 keeps r exact enough.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67 + r * (0.041_666_668 + r * (0.008_333_334 + r * (0.001_388_889 + r * 0.000_198_412_7))))));
    let bits = ((n as i32 + 127) as u32) << 23;
    p * f32::from_bits(bits)
}

/// In place: x = max(x, 0).
pub fn relu_forward(x: &mut [f32]) {
    x.par_chunks_mut(ROW_BLOCK * 256).for_each(|c| {
        for v in c {
            *v = v.max(0.0);
        }
    });
}

/// In place: dh = dh · [h > 0], with `h` the ReLU output saved by the forward pass.
pub fn relu_backward(dh: &mut [f32], h: &[f32]) {
    assert_eq!(dh.len(), h.len());
    dh.par_chunks_mut(ROW_BLOCK * 256).zip(h.par_chunks(ROW_BLOCK * 256)).for_each(|(d, h)| {
        for (d, h) in d.iter_mut().zip(h) {
            if *h <= 0.0 {
                *d = 0.0;
            }
        }
    });
}

/// Columns per task in column reductions.
const COL_BLOCK: usize = 64;

/// db (n) += Σ over rows of dy (m, n). Each task owns a block of columns and sums rows in order, so
/// the result does not depend on the thread count.
pub fn column_sum_add(db: &mut [f32], dy: &[f32], n: usize) {
    assert_eq!(db.len(), n);
    assert_eq!(dy.len() % n.max(1), 0);
    db.par_chunks_mut(COL_BLOCK).enumerate().for_each(|(cb, out)| {
        column_sum_block(out, dy, n, cb * COL_BLOCK);
    });
}

#[multiversion(targets = "simd")]
fn column_sum_block(out: &mut [f32], dy: &[f32], n: usize, c0: usize) {
    let w = out.len();
    for row in dy.chunks_exact(n) {
        for (o, v) in out.iter_mut().zip(&row[c0..c0 + w]) {
            *o += v;
        }
    }
}
