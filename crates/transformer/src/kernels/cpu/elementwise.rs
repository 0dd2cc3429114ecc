//! Small element-wise kernels and the vector helpers the fused kernels inline: dot, axpy, a
//! vectorisable exp, ReLU, bias-gradient column sums.

use super::ROW_BLOCK;
use crate::config::Activation;
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

/// Σ x[i] with 16 independent partial sums (a serial f32 sum cannot be vectorised).
#[inline(always)]
pub fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let mut tail = 0.0;
    for v in chunks.remainder() {
        tail += v;
    }
    for c in chunks {
        for l in 0..16 {
            acc[l] += c[l];
        }
    }
    let mut s = 0.0;
    for v in acc {
        s += v;
    }
    s + tail
}

/// max x[i] (−∞ for an empty slice), vectorisable.
#[inline(always)]
pub fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = x.chunks_exact(16);
    let mut m = f32::NEG_INFINITY;
    for v in chunks.remainder() {
        m = if *v > m { *v } else { m };
    }
    for c in chunks {
        for l in 0..16 {
            acc[l] = if c[l] > acc[l] { c[l] } else { acc[l] };
        }
    }
    for v in acc {
        m = if v > m { v } else { m };
    }
    m
}

/// max |x[i]| over the values that are not NaN (0 for an empty slice), in 16 lanes so that it
/// vectorises (a fold that tests for NaN at every step compiles to a scalar loop).
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
pub fn max_abs(x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let mut m = 0f32;
    for v in chunks.remainder() {
        m = if v.abs() > m { v.abs() } else { m };
    }
    for c in chunks {
        for l in 0..16 {
            let a = c[l].abs();
            acc[l] = if a > acc[l] { a } else { acc[l] };
        }
    }
    for v in acc {
        m = if v > m { v } else { m };
    }
    m
}

/// In place x[i] = e^(x[i] − shift); returns Σ of the results.
#[inline(always)]
pub fn exp_shift_sum(x: &mut [f32], shift: f32) -> f32 {
    let mut acc = [0f32; 16];
    let mut chunks = x.chunks_exact_mut(16);
    for c in &mut chunks {
        for l in 0..16 {
            let e = exp_approx(c[l] - shift);
            c[l] = e;
            acc[l] += e;
        }
    }
    let mut tail = 0.0;
    for v in chunks.into_remainder() {
        *v = exp_approx(*v - shift);
        tail += *v;
    }
    let mut s = 0.0;
    for v in acc {
        s += v;
    }
    s + tail
}

/// Σ e^(x[i] − shift), leaving x as it is.
#[inline(always)]
pub fn exp_sum(x: &[f32], shift: f32) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let mut tail = 0.0;
    for v in chunks.remainder() {
        tail += exp_approx(*v - shift);
    }
    for c in chunks {
        for l in 0..16 {
            acc[l] += exp_approx(c[l] - shift);
        }
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

/// e^x for f32 by range reduction (x = n·ln2 + r) and a degree-7 polynomial: relative error below
/// 1e-6 on [−87, 88] (tested against f64). Below −87.3 it returns the smallest normal (~1.2e-38)
/// rather than 0, and it overflows to +∞ from about 88.4. Written branch-free so loops over it
/// vectorise. The softmaxes call it only on x ≤ 0.
#[inline(always)]
pub fn exp_approx(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.7);
    // floor(· + 0.5) rather than round(): it maps to one vector instruction.
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    // Cody–Waite split of ln 2 keeps r exact enough.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67
                    + r * (0.041_666_668 + r * (0.008_333_334 + r * (0.001_388_889 + r * 0.000_198_412_7))))));
    // 2^n from n's bits: adding 1.5·2^23 puts the integer n (|n| ≤ 128 here) in the low mantissa
    // bits, exactly. Unlike `n as i32` (a saturating conversion), this vectorises.
    let bits = (n + 12_582_912.0).to_bits().wrapping_sub(0x4B40_0000 - 127) << 23;
    p * f32::from_bits(bits)
}

/// In place over rows of width `bias.len()`: h = max(h + bias, 0) (§3.3, Eq. 2's inner layer).
pub fn bias_relu_forward(h: &mut [f32], bias: &[f32]) {
    let _t = super::profile::scope(super::profile::Slot::Relu);
    let f = bias.len();
    assert_eq!(h.len() % f.max(1), 0);
    h.par_chunks_mut(ROW_BLOCK * f).for_each(|rows| bias_relu_rows(rows, bias));
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn bias_relu_rows(rows: &mut [f32], bias: &[f32]) {
    for row in rows.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            let x = *v + b;
            *v = if x > 0.0 { x } else { 0.0 };
        }
    }
}

/// In place over rows of width `bias.len()`: h = act(h + bias), the FFN's inner layer with the
/// model's activation ([`Activation`]; ReLU is [`bias_relu_forward`]).
pub fn bias_activation_forward(h: &mut [f32], bias: &[f32], act: Activation) {
    if act == Activation::Relu {
        return bias_relu_forward(h, bias);
    }
    let _t = super::profile::scope(super::profile::Slot::Relu);
    let f = bias.len();
    assert_eq!(h.len() % f.max(1), 0);
    h.par_chunks_mut(ROW_BLOCK * f).for_each(|rows| match act {
        Activation::Swish => bias_swish_rows(rows, bias),
        _ => {
            for row in rows.chunks_exact_mut(f) {
                for (v, b) in row.iter_mut().zip(bias) {
                    *v = activation(*v + b, act);
                }
            }
        }
    });
}

/// x · σ(x) = x / (1 + e^(−x)) over rows, with [`exp_approx`] so that the loop vectorises
/// (relative error below 2·10⁻⁶; OPUS-MT's activation, in every decoder step).
#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn bias_swish_rows(rows: &mut [f32], bias: &[f32]) {
    for row in rows.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            let x = *v + b;
            *v = x / (1.0 + exp_approx(-x));
        }
    }
}

/// Backward of [`bias_activation_forward`] for a smooth activation: dh = dh · act′(z) in place,
/// z the pre-activations h + bias the forward kept (rows of width F = dbias.len()), and
/// dbias += Σ_rows dh. `partials` is workspace of at least ⌈M / ROW_BLOCK⌉ · F. (ReLU's backward,
/// which needs only the output, is [`bias_relu_backward`].)
pub fn bias_activation_backward(dh: &mut [f32], z: &[f32], act: Activation, dbias: &mut [f32], partials: &mut [f32]) {
    let _t = super::profile::scope(super::profile::Slot::Relu);
    let f = dbias.len();
    assert_eq!(dh.len(), z.len());
    let blocks = (dh.len() / f).div_ceil(ROW_BLOCK);
    let partials = &mut partials[..blocks * f];
    dh.par_chunks_mut(ROW_BLOCK * f).zip(z.par_chunks(ROW_BLOCK * f)).zip(partials.par_chunks_mut(f)).for_each(
        |((d, z), p)| {
            p.fill(0.0);
            for (dr, zr) in d.chunks_exact_mut(f).zip(z.chunks_exact(f)) {
                for j in 0..f {
                    let g = dr[j] * activation_slope(zr[j], act);
                    dr[j] = g;
                    p[j] += g;
                }
            }
        },
    );
    reduce_partials(dbias, partials, 1, 0);
}

/// act′(z), in f32 out (f64 inside for GELU's Φ and φ).
#[inline]
pub fn activation_slope(z: f32, act: Activation) -> f32 {
    // d/dz z·σ(βz) = σ(βz)·(1 + βz·(1 − σ(βz))): swish at β = 1, Marian's old GELU at 1.702.
    let swish_slope = |beta: f32| {
        let s = 1.0 / (1.0 + (-beta * z).exp());
        s * (1.0 + beta * z * (1.0 - s))
    };
    match act {
        Activation::Relu => (z > 0.0) as u8 as f32,
        Activation::Swish => swish_slope(1.0),
        Activation::Gelu => {
            let z = z as f64;
            let pdf = (-0.5 * z * z).exp() * (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2);
            (0.5 * erfc(-z * std::f64::consts::FRAC_1_SQRT_2) + z * pdf) as f32
        }
        Activation::GeluTanh => {
            let z = z as f64;
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let t = (c * (z + 0.044715 * z * z * z)).tanh();
            (0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * z * z)) as f32
        }
        Activation::GeluSigmoid => swish_slope(1.702),
    }
}

/// One value through `act` (f32 in and out; GELU's normal CDF is evaluated in f64).
#[inline]
pub fn activation(x: f32, act: Activation) -> f32 {
    match act {
        Activation::Relu => x.max(0.0),
        Activation::Swish => x / (1.0 + (-x).exp()),
        Activation::Gelu => (0.5 * x as f64 * erfc(-x as f64 * std::f64::consts::FRAC_1_SQRT_2)) as f32,
        Activation::GeluTanh => {
            let x = x as f64;
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            (0.5 * x * (1.0 + inner.tanh())) as f32
        }
        Activation::GeluSigmoid => x / (1.0 + (-1.702 * x).exp()),
    }
}

/// The complementary error function, erfc(x) = 1 − erf(x), to a relative error below 1.2·10⁻⁷
/// everywhere (the Chebyshev fit of Numerical Recipes, §6.2), so x·Φ(x) = ½·x·erfc(−x/√2) keeps
/// its relative accuracy in both tails.
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * (-z * z + poly).exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Backward of [`bias_relu_forward`]: dh = dh · [h > 0] in place (rows of width F = dbias.len()),
/// and dbias += Σ_rows dh. `partials` is workspace of at least ⌈M / ROW_BLOCK⌉ · F.
pub fn bias_relu_backward(dh: &mut [f32], h: &[f32], dbias: &mut [f32], partials: &mut [f32]) {
    let _t = super::profile::scope(super::profile::Slot::Relu);
    let f = dbias.len();
    assert_eq!(dh.len(), h.len());
    let blocks = (dh.len() / f).div_ceil(ROW_BLOCK);
    let partials = &mut partials[..blocks * f];
    dh.par_chunks_mut(ROW_BLOCK * f)
        .zip(h.par_chunks(ROW_BLOCK * f))
        .zip(partials.par_chunks_mut(f))
        .for_each(|((d, h), p)| bias_relu_backward_rows(d, h, p));
    reduce_partials(dbias, partials, 1, 0);
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn bias_relu_backward_rows(d: &mut [f32], h: &[f32], p: &mut [f32]) {
    let f = p.len();
    p.fill(0.0);
    for (dr, hr) in d.chunks_exact_mut(f).zip(h.chunks_exact(f)) {
        for j in 0..f {
            let g = if hr[j] > 0.0 { dr[j] } else { 0.0 };
            dr[j] = g;
            p[j] += g;
        }
    }
}

/// dst[j] += Σ_blocks partials[(blk · stride + row) · D + j] in block order, parallel over columns
/// (D = dst.len()): the deterministic reduction of per-row-block partial sums.
pub fn reduce_partials(dst: &mut [f32], partials: &[f32], stride: usize, row: usize) {
    let d = dst.len();
    let blocks = partials.len() / (stride * d);
    dst.par_chunks_mut(COL_BLOCK).enumerate().for_each(|(cb, out)| {
        let c0 = cb * COL_BLOCK;
        for blk in 0..blocks {
            let src = &partials[(blk * stride + row) * d + c0..(blk * stride + row) * d + c0 + out.len()];
            for (o, v) in out.iter_mut().zip(src) {
                *o += v;
            }
        }
    });
}

/// Columns per task in column reductions.
const COL_BLOCK: usize = 64;

/// db (n) += Σ over rows of dy (m, n). Each task owns a block of columns and sums rows in order, so
/// the result does not depend on the thread count.
pub fn column_sum_add(db: &mut [f32], dy: &[f32], n: usize) {
    let _t = super::profile::scope(super::profile::Slot::BiasGrad);
    assert_eq!(db.len(), n);
    assert_eq!(dy.len() % n.max(1), 0);
    db.par_chunks_mut(COL_BLOCK).enumerate().for_each(|(cb, out)| {
        column_sum_block(out, dy, n, cb * COL_BLOCK);
    });
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn column_sum_block(out: &mut [f32], dy: &[f32], n: usize, c0: usize) {
    let w = out.len();
    for row in dy.chunks_exact(n) {
        for (o, v) in out.iter_mut().zip(&row[c0..c0 + w]) {
            *o += v;
        }
    }
}

/// Whether every element is finite. Σ x·0 is 0 for finite x and NaN for ±∞ or NaN, and unlike a
/// short-circuiting search it vectorises; chunks run in parallel.
pub fn all_finite(x: &[f32]) -> bool {
    let _t = super::profile::scope(super::profile::Slot::Elementwise);
    x.par_chunks(1 << 16).all(|c| !finite_probe(c).is_nan())
}

/// Whether every element is finite, in one thread (for a slice that is already in cache).
pub fn row_is_finite(x: &[f32]) -> bool {
    !finite_probe(x).is_nan()
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn finite_probe(x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let mut tail = 0.0;
    for v in chunks.remainder() {
        tail += v * 0.0;
    }
    for c in chunks {
        for l in 0..16 {
            acc[l] += c[l] * 0.0;
        }
    }
    acc.iter().sum::<f32>() + tail
}
