//! Every fast f32 kernel against its naive f64 twin, forward and backward, on random and odd shapes
//! (widths not a multiple of the SIMD width, T = 1, sentences with no valid key).
//!
//! Tolerances: f32 arithmetic over sums of at most a few hundred O(1) terms stays within ~1e-5
//! relative of the f64 result; a wrong term in a formula is off by O(1e-2) or more.

mod common;
use common::*;
use transformer::kernels::cpu::{
    adam, attention, bf16, cached_attention, elementwise, embedding, guided, layer_norm, linear, matmul, packed,
    search, softmax_xent,
};
use transformer::kernels::reference as r;
use transformer::kernels::{AttnDims, Mask};
use transformer::rng::{DropoutMask, Rng};

const ATOL: f64 = 3e-6;
const RTOL: f64 = 3e-5;

fn mask_array(mask: Option<DropoutMask>, n: usize) -> Option<Vec<f64>> {
    mask.map(|m| (0..n).map(|i| m.factor(i) as f64).collect())
}

#[test]
fn matmul_all_transpositions_and_accumulate() {
    let mut rng = Rng::new(10);
    for &(m, n, k) in &[(1, 1, 1), (7, 13, 5), (33, 17, 70), (64, 96, 128)] {
        let a = rand_vec(&mut rng, m * k, 1.0);
        let b = rand_vec(&mut rng, k * n, 1.0);
        let c0 = rand_vec(&mut rng, m * n, 1.0);
        let want = r::matmul(&a, &b, m, n, k);
        for (op_a, a_st) in [(matmul::Op::N, a.clone()), (matmul::Op::T, r::transpose(&a, m, k))] {
            for (op_b, b_st) in [(matmul::Op::N, b.clone()), (matmul::Op::T, r::transpose(&b, k, n))] {
                let mut c = to_f32(&c0);
                matmul::matmul(&mut c, &to_f32(&a_st), op_a, &to_f32(&b_st), op_b, m, n, k, false);
                assert_close(&format!("{m}x{n}x{k} {op_a:?}{op_b:?}"), &to_f64(&c), &want, ATOL, RTOL);
                let mut c = to_f32(&c0);
                matmul::matmul(&mut c, &to_f32(&a_st), op_a, &to_f32(&b_st), op_b, m, n, k, true);
                let acc: Vec<f64> = want.iter().zip(&c0).map(|(w, c)| w + c).collect();
                assert_close("accumulate", &to_f64(&c), &acc, ATOL, RTOL);
            }
        }
    }
}

#[test]
fn linear_forward_backward() {
    let mut rng = Rng::new(11);
    let (m, n, k) = (19, 23, 37);
    let (x, w, b) = (rand_vec(&mut rng, m * k, 1.0), rand_vec(&mut rng, n * k, 1.0), rand_vec(&mut rng, n, 1.0));
    let mut y = vec![0f32; m * n];
    linear::linear_forward(transformer::Float::F32, &mut y, &to_f32(&x), &to_f32(&w), Some(&to_f32(&b)), m, n, k);
    assert_close("y", &to_f64(&y), &r::linear_forward(&x, &w, &b, m, n, k), ATOL, RTOL);
    let g = rand_vec(&mut rng, m * n, 1.0);
    let (dx, dw, db) = r::linear_backward(&g, &x, &w, m, n, k);
    let (mut fdx, mut fdw, mut fdb) = (vec![0f32; m * k], vec![0f32; n * k], vec![0f32; n]);
    linear::linear_backward(
        transformer::Float::F32,
        Some(&mut fdx),
        false,
        &mut fdw,
        Some(&mut fdb),
        &to_f32(&g),
        &to_f32(&x),
        &to_f32(&w),
        m,
        n,
        k,
    );
    assert_close("dx", &to_f64(&fdx), &dx, ATOL, RTOL);
    assert_close("dw", &to_f64(&fdw), &dw, ATOL, RTOL);
    assert_close("db", &to_f64(&fdb), &db, ATOL, RTOL);
}

/// The inference product with pre-packed weights, on shapes with partial row blocks and partial
/// column panels, one row, no rows and no inputs (on a machine without AVX-512 it runs the `gemm`
/// fallback, which this checks instead).
#[test]
fn packed_linear_matches_reference() {
    let mut rng = Rng::new(14);
    // Row counts that end in a block of 1, 2, 3–4 rows (each has its own kernel) and 5–12 (the
    // full kernel, its rows past the last repeating it).
    for &(m, n, k) in &[
        (1, 1, 1),
        (13, 33, 7),
        (12, 32, 256),
        (50, 100, 70),
        (25, 70, 300),
        (0, 5, 3),
        (3, 5, 0),
        (2, 40, 9),
        (4, 33, 17),
        (7, 70, 31),
        (26, 65, 12),
        // A last block of 1, 2 or 3–4 rows over groups of 4, 2 and 1 panels (the last partial).
        (1, 200, 9),
        (2, 130, 5),
        (3, 97, 11),
        (13, 150, 7),
        (16, 70, 6),
        // More rows than one pass takes (PACKED_MAX_ROWS): chunks, the last a partial one.
        (packed::PACKED_MAX_ROWS + 1, 33, 20),
        (2 * packed::PACKED_MAX_ROWS + 37, 70, 9),
    ] {
        check_packed(&mut rng, m, n, k);
    }
    // More panels than one thread's group (PANEL_GROUP_BYTES: 16 panels at k = 128, 32 at k = 64)
    // over several blocks, so every block meets each group in turn: on one thread and on two (a
    // thread's share of the panels is what it groups).
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            for (m, n, k) in [(40, 1100, 128), (29, 1500, 64), (61, 2200, 64)] {
                check_packed(&mut rng, m, n, k);
            }
        });
    }
}

/// [`packed::PackedLinear`] (m, n, k) with and without a bias against the f64 reference.
fn check_packed(rng: &mut Rng, m: usize, n: usize, k: usize) {
    let (x, w, b) = (rand_vec(rng, m * k, 1.0), rand_vec(rng, n * k, 1.0), rand_vec(rng, n, 1.0));
    let packed = packed::PackedLinear::new(&to_f32(&w), n, k, transformer::Precision::F32, true);
    assert_eq!((packed.n(), packed.k()), (n, k));
    let mut y = vec![f32::NAN; m * n];
    packed.forward(&mut y, &to_f32(&x), Some(&to_f32(&b)), m);
    assert_close(&format!("{m}x{n}x{k} + bias"), &to_f64(&y), &r::linear_forward(&x, &w, &b, m, n, k), ATOL, RTOL);
    let mut y = vec![f32::NAN; m * n];
    packed.forward(&mut y, &to_f32(&x), None, m);
    let zero = vec![0.0; n];
    assert_close(&format!("{m}x{n}x{k}"), &to_f64(&y), &r::linear_forward(&x, &w, &zero, m, n, k), ATOL, RTOL);
}

/// A row's product does not depend on the rows beside it: runs of 1–4 rows computed alone (the
/// few-rows kernels over groups of panels: decoding one sentence) and of 5 and 9 (the full kernel,
/// the rows it lacks repeating its last) equal the same rows in a product of 24 rows (full
/// blocks) bit for bit, so batch-1 and batched decoding add in the same order. (Only
/// where the weights are laid in panels, i.e. on AVX-512: the `gemm` fallback promises no order.)
#[test]
fn packed_linear_row_alone_equals_row_in_block() {
    if !matches!(
        packed::PackedLinear::new(&[1.0], 1, 1, transformer::Precision::F32, true).rows(),
        Some(embedding::Rows::Panels { .. })
    ) {
        eprintln!("skipped: no AVX-512 here, so no panels (the gemm fallback runs)");
        return;
    }
    let mut rng = Rng::new(15);
    for &(n, k) in &[(200, 9), (8000 / 16, 64), (97, 33), (32, 5)] {
        let m = 24;
        let (x, w, b) = (rand_vec(&mut rng, m * k, 1.0), rand_vec(&mut rng, n * k, 1.0), rand_vec(&mut rng, n, 1.0));
        let (x, w, b) = (to_f32(&x), to_f32(&w), to_f32(&b));
        let packed = packed::PackedLinear::new(&w, n, k, transformer::Precision::F32, true);
        let mut all = vec![0.0; m * n];
        packed.forward(&mut all, &x, Some(&b), m);
        for rows in [1, 2, 3, 4, 5, 9] {
            for start in (0..=m - rows).step_by(rows).take(5) {
                let mut y = vec![f32::NAN; rows * n];
                packed.forward(&mut y, &x[start * k..(start + rows) * k], Some(&b), rows);
                let same = y.iter().zip(&all[start * n..]).all(|(a, c)| a.to_bits() == c.to_bits());
                assert!(same, "{n}x{k}: rows {start}..{} alone differ from the 24-row product", start + rows);
            }
        }
    }
}

/// A shortlist's output layer: the map of some rows of W (`select_rows`, in any order) gives the
/// whole map's columns at those rows, bit for bit where the kernel fixes its order of sums (panels,
/// int8, bf16) and to f32 rounding on the `gemm` fallback, at every precision and layout.
#[test]
fn packed_linear_select_rows_gives_the_whole_products_columns() {
    let mut rng = Rng::new(16);
    let panels = matches!(
        packed::PackedLinear::new(&[1.0], 1, 1, transformer::Precision::F32, true).rows(),
        Some(embedding::Rows::Panels { .. })
    );
    for &(m, n, k) in &[(5, 300, 64), (1, 97, 33), (12, 64, 16)] {
        let (x, w, b) = (rand_vec(&mut rng, m * k, 1.0), rand_vec(&mut rng, n * k, 1.0), rand_vec(&mut rng, n, 1.0));
        let (x, w, b) = (to_f32(&x), to_f32(&w), to_f32(&b));
        let rows: Vec<u32> = vec![0, 3, n as u32 - 1, 17, 2, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51];
        let bias: Vec<f32> = rows.iter().map(|&r| b[r as usize]).collect();
        for (precision, pack) in [
            (transformer::Precision::F32, true),
            (transformer::Precision::F32, false),
            (transformer::Precision::Int8, true),
            (transformer::Precision::Bf16, true),
        ] {
            if let Err(why) = precision.available() {
                eprintln!("{precision:?} skipped: {why}");
                continue;
            }
            let whole = packed::PackedLinear::new(&w, n, k, precision, pack);
            let part = whole.select_rows(&rows, Some(embedding::Rows::Dense(&w)));
            assert_eq!((part.n(), part.k()), (rows.len(), k));
            let (mut all, mut y) = (vec![0.0; m * n], vec![f32::NAN; m * rows.len()]);
            whole.forward(&mut all, &x, Some(&b), m);
            part.forward(&mut y, &x, Some(&bias), m);
            let want: Vec<f32> =
                (0..m).flat_map(|i| rows.iter().map(|&r| all[i * n + r as usize]).collect::<Vec<_>>()).collect();
            let what = format!("{precision:?} pack {pack} {m}x{n}x{k}");
            // The prepared panels give each column's sum in one fixed order, so a subset of rows is
            // bit for bit; the gemm path (unpacked f32) picks its blocking by shape.
            if (panels && pack) || precision != transformer::Precision::F32 {
                let same = y.iter().zip(&want).all(|(a, c)| a.to_bits() == c.to_bits());
                assert!(same, "{what}: the selected rows' products differ from the whole map's");
            } else {
                assert_close(&what, &to_f64(&y), &to_f64(&want), 1e-6, 1e-6);
            }
        }
    }
}

#[test]
fn bf16_rounding_is_nearest_even() {
    let bits = |b: u32| bf16::to_bf16(f32::from_bits(b));
    assert_eq!(bits(0x3F80_0000), 0x3F80); // 1.0
    assert_eq!(bits(0x3F80_7FFF), 0x3F80); // below the halfway point: down
    assert_eq!(bits(0x3F80_8000), 0x3F80); // tie, even below: down
    assert_eq!(bits(0x3F81_8000), 0x3F82); // tie, odd below: up
    assert_eq!(bits(0x3F80_8001), 0x3F81); // above the halfway point: up
    assert_eq!(bits(0xBF80_C000), 0xBF81); // negative, up in magnitude
    assert_eq!(bits(0x7F7F_FFFF), 0x7F80); // the largest f32 rounds to +inf
    assert_eq!(bf16::to_bf16(f32::INFINITY), 0x7F80);
    assert!(bf16::from_bf16(bf16::to_bf16(f32::NAN)).is_nan());
    assert!(bf16::from_bf16(bf16::to_bf16(f32::from_bits(0x7FFF_FFFF))).is_nan());
    assert_eq!(bf16::from_bf16(0x4049), 3.140625);
}

/// bf16 products, on every unit this CPU has (AMX tiles, AVX512-BF16 dot products), against the
/// f64 product of the same bf16-rounded operands: what is left is f32 summation error. Odd shapes
/// cover partial tiles and blocks; k = 600 covers several k passes. Where the CPU has no bf16 unit,
/// switching bf16 on must fail with a reason instead.
/// A product of all-NaN operands whose sizes are multiples of 32 and at least those of every shape
/// tested below: it leaves this thread's packed buffers full of NaN, padding included.
fn poison(unit: bf16::Unit) {
    let (m, n, k) = (128, 320, 640);
    let mut c = vec![0f32; m * n];
    bf16::matmul_bf16_on(
        unit,
        &mut c,
        &vec![f32::NAN; m * k],
        matmul::Op::N,
        &vec![f32::NAN; k * n],
        matmul::Op::N,
        m,
        n,
        k,
        false,
    );
    assert!(c.iter().all(|x| x.is_nan()));
}

#[test]
fn bf16_weights_packed_once_give_the_product_exactly() {
    // linear_bf16 on weights packed at load equals matmul_bf16 on the same operands bit for bit,
    // on every unit and for every row count (a short block runs only the strips it needs).
    if bf16::available().is_err() {
        return;
    }
    let mut rng = Rng::new(16);
    for &(m, n, k) in
        &[(1, 40, 33), (2, 64, 64), (3, 33, 100), (5, 70, 7), (8, 32, 256), (9, 31, 65), (33, 100, 40), (70, 8, 300)]
    {
        let x = to_f32(&rand_vec(&mut rng, m * k, 1.0));
        let w = to_f32(&rand_vec(&mut rng, n * k, 1.0));
        let packed = bf16::Bf16Weights::new(&w, n, k);
        for acc in [false, true] {
            let start = to_f32(&rand_vec(&mut rng, m * n, 1.0));
            let (mut want, mut got) = (start.clone(), start);
            bf16::matmul_bf16(&mut want, &x, matmul::Op::N, &w, matmul::Op::T, m, n, k, acc);
            bf16::linear_bf16(&mut got, &x, &packed, m, acc);
            assert_eq!(got, want, "{m}x{n}x{k} accumulate {acc}");
        }
    }
}

#[test]
fn bf16_matmul_matches_reference_on_rounded_operands() {
    if let Err(why) = bf16::available() {
        eprintln!("no bf16 unit here ({why}); checking that bf16 products are refused");
        assert!(bf16::units().is_empty());
        assert!(transformer::Precision::Bf16.available().is_err());
        return;
    }
    assert_eq!(bf16::units().first(), bf16::unit().ok().as_ref(), "the fastest unit comes first");
    let round =
        |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| bf16::from_bf16(bf16::to_bf16(x as f32)) as f64).collect() };
    let mut rng = Rng::new(15);
    for &(m, n, k) in &[
        (1, 1, 1),
        (7, 13, 5),
        (33, 17, 70),
        (64, 96, 128),
        (40, 50, 600),
        (100, 290, 33),
        (32, 32, 32),
        (128, 45, 70),
    ] {
        let a = rand_vec(&mut rng, m * k, 1.0);
        let b = rand_vec(&mut rng, k * n, 1.0);
        let c0 = rand_vec(&mut rng, m * n, 1.0);
        let want = r::matmul(&round(&a), &round(&b), m, n, k);
        let want_acc: Vec<f64> = want.iter().zip(&c0).map(|(w, c)| w + c).collect();
        // Summation error of k products of magnitude ≤ 1 in f32.
        let atol = 1e-6 * (k as f64).sqrt() + 1e-6;
        assert!(m <= 128 && n <= 320 && k <= 640, "poison() must cover {m}x{n}x{k}");
        for unit in bf16::units() {
            for (op_a, a_st) in [(matmul::Op::N, a.clone()), (matmul::Op::T, r::transpose(&a, m, k))] {
                for (op_b, b_st) in [(matmul::Op::N, b.clone()), (matmul::Op::T, r::transpose(&b, k, n))] {
                    let what = format!("{unit:?} {m}x{n}x{k} {op_a:?}{op_b:?}");
                    // The packed buffers are reused: fill them with NaN first, so padding that a
                    // packing leaves unwritten shows up as NaN in C.
                    poison(unit);
                    let mut c = vec![f32::NAN; m * n];
                    bf16::matmul_bf16_on(unit, &mut c, &to_f32(&a_st), op_a, &to_f32(&b_st), op_b, m, n, k, false);
                    assert_close(&what, &to_f64(&c), &want, atol, 1e-5);
                    poison(unit);
                    let mut c = to_f32(&c0);
                    bf16::matmul_bf16_on(unit, &mut c, &to_f32(&a_st), op_a, &to_f32(&b_st), op_b, m, n, k, true);
                    assert_close(&format!("{what} accumulate"), &to_f64(&c), &want_acc, atol, 1e-5);
                }
            }
        }
    }
}

#[test]
fn residual_layer_norm() {
    for &(m, d, p, with_bias) in &[(1, 1, 0.0, false), (5, 13, 0.0, true), (70, 37, 0.3, true), (33, 512, 0.1, false)] {
        let mut rng = Rng::new(12 + d as u64);
        let (x, y) = (rand_vec(&mut rng, m * d, 2.0), rand_vec(&mut rng, m * d, 2.0));
        let bias = rand_vec(&mut rng, d, 1.0);
        let gamma: Vec<f64> = rand_vec(&mut rng, d, 0.5).iter().map(|v| v + 1.0).collect();
        let beta = rand_vec(&mut rng, d, 0.5);
        let dm = (p > 0.0).then(|| DropoutMask::new(p, 9, 3, 77));
        let mask = mask_array(dm, m * d);
        // The fused kernel adds the sub-layer bias to y; the reference takes y + b.
        let yb: Vec<f64> = (0..m * d).map(|i| y[i] + if with_bias { bias[i % d] } else { 0.0 }).collect();
        let (want, saved) = r::residual_layer_norm_forward(&x, &yb, mask.as_deref(), &gamma, &beta, 1e-6);
        let (mut out, mut s, mut mean, mut rstd) = (vec![0f32; m * d], vec![0f32; m * d], vec![0f32; m], vec![0f32; m]);
        let bias32 = to_f32(&bias);
        let yb32 = with_bias.then_some(&bias32[..]);
        layer_norm::residual_layer_norm_forward(
            &mut out,
            &mut s,
            &mut mean,
            &mut rstd,
            &to_f32(&x),
            &to_f32(&y),
            yb32,
            &to_f32(&gamma),
            &to_f32(&beta),
            1e-6,
            dm,
        );
        // d = 1: every row normalises to 0 and the output is beta.
        assert_close(&format!("ln fwd d={d}"), &to_f64(&out), &want, ATOL, RTOL);
        let g = rand_vec(&mut rng, m * d, 1.0);
        let (dx, dy, dg, db) = r::residual_layer_norm_backward(&g, &saved, mask.as_deref(), &gamma);
        let (mut fdx, mut fdy) = (vec![0f32; m * d], vec![0f32; m * d]);
        let (mut fdg, mut fdb, mut fdbias) = (vec![0.5f32; d], vec![-0.5f32; d], vec![0.25f32; d]); // accumulate onto these
        let mut partials = vec![f32::NAN; m.div_ceil(transformer::kernels::cpu::ROW_BLOCK) * 3 * d];
        let dbias = with_bias.then_some(&mut fdbias[..]);
        layer_norm::residual_layer_norm_backward(
            &mut fdx,
            &mut fdy,
            &mut fdg,
            &mut fdb,
            dbias,
            &mut partials,
            &to_f32(&g),
            &s,
            &mean,
            &rstd,
            &to_f32(&gamma),
            dm,
        );
        // With d = 1 the gradient is ~0 up to rounding; use an absolute floor there.
        let atol = if d == 1 { 1e-3 } else { 1e-5 };
        assert_close("ln dx", &to_f64(&fdx), &dx, atol, 1e-4);
        assert_close("ln dy", &to_f64(&fdy), &dy, atol, 1e-4);
        let dg: Vec<f64> = dg.iter().map(|v| v + 0.5).collect();
        let db: Vec<f64> = db.iter().map(|v| v - 0.5).collect();
        assert_close("ln dgamma", &to_f64(&fdg), &dg, 1e-5, 1e-4);
        assert_close("ln dbeta", &to_f64(&fdb), &db, 1e-5, 1e-4);
        let want_dbias: Vec<f64> =
            (0..d).map(|j| 0.25 + if with_bias { (0..m).map(|i| dy[i * d + j]).sum::<f64>() } else { 0.0 }).collect();
        assert_close("ln dbias", &to_f64(&fdbias), &want_dbias, 1e-5, 1e-4);
    }
}

#[test]
fn bias_relu_matches_reference() {
    let mut rng = Rng::new(13);
    let (m, f) = (77, 45);
    let x = rand_vec(&mut rng, m * f, 1.0);
    let bias = rand_vec(&mut rng, f, 0.5);
    let xb: Vec<f64> = (0..m * f).map(|i| x[i] + bias[i % f]).collect();
    let mut h = to_f32(&x);
    elementwise::bias_relu_forward(&mut h, &to_f32(&bias));
    assert_close("bias relu", &to_f64(&h), &r::relu_forward(&xb), 1e-6, 1e-6);
    let g = rand_vec(&mut rng, m * f, 1.0);
    let dh_want = r::relu_backward(&g, &r::relu_forward(&xb));
    let mut dh = to_f32(&g);
    let mut db = vec![1f32; f];
    let mut partials = vec![f32::NAN; m.div_ceil(transformer::kernels::cpu::ROW_BLOCK) * f];
    elementwise::bias_relu_backward(&mut dh, &h, &mut db, &mut partials);
    assert_close("bias relu dh", &to_f64(&dh), &dh_want, 0.0, 1e-7);
    let db_want: Vec<f64> = (0..f).map(|j| 1.0 + (0..m).map(|i| dh_want[i * f + j]).sum::<f64>()).collect();
    assert_close("bias relu db", &to_f64(&db), &db_want, 1e-5, 1e-5);
}

/// The smooth activations' fused bias + activation and its backward (from the kept
/// pre-activations) against the naive twins, dh and the bias gradient.
#[test]
fn bias_smooth_activations_match_reference() {
    use transformer::Activation::*;
    let mut rng = Rng::new(14);
    let (m, f) = (77, 45);
    for act in [Swish, Gelu, GeluTanh, GeluSigmoid] {
        let x = rand_vec(&mut rng, m * f, 2.5);
        let bias = rand_vec(&mut rng, f, 0.5);
        let z: Vec<f64> = (0..m * f).map(|i| (x[i] as f32 + bias[i % f] as f32) as f64).collect();
        let mut h = to_f32(&x);
        elementwise::bias_activation_forward(&mut h, &to_f32(&bias), act);
        assert_close(&format!("{act:?}"), &to_f64(&h), &r::activation_forward(&z, act), 1e-6, 1e-5);
        let g = rand_vec(&mut rng, m * f, 1.0);
        let dh_want = r::activation_backward(&g, &z, act);
        let mut dh = to_f32(&g);
        let mut db = vec![1f32; f];
        let mut partials = vec![f32::NAN; m.div_ceil(transformer::kernels::cpu::ROW_BLOCK) * f];
        elementwise::bias_activation_backward(&mut dh, &to_f32(&z), act, &mut db, &mut partials);
        assert_close(&format!("{act:?} dh"), &to_f64(&dh), &dh_want, 1e-6, 1e-5);
        let db_want: Vec<f64> = (0..f).map(|j| 1.0 + (0..m).map(|i| dh_want[i * f + j]).sum::<f64>()).collect();
        assert_close(&format!("{act:?} db"), &to_f64(&db), &db_want, 1e-5, 1e-5);
    }
}

/// Runs the fused attention with Q|K|V packed in one buffer (self) or Q apart from K|V (cross).
fn check_attention(d: AttnDims, key_lens: &[usize], attn_mask: Mask, p: f32, fused: bool, seed: u64) {
    check_attention_rows(d, key_lens, attn_mask, p, fused, false, seed)
}

/// As [`check_attention`]; with `packed`, the buffers hold only each sentence's valid rows, one
/// sentence after another: Q|K|V with `fused` (self-attention: a packed buffer has no padding
/// queries, so only valid rows are compared and padding queries' weights must be zero), K|V alone
/// otherwise (encoder–decoder attention over the encoder's packed rows).
fn check_attention_rows(
    d: AttnDims,
    key_lens: &[usize],
    attn_mask: Mask,
    p: f32,
    fused: bool,
    packed: bool,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    let (hk, hv) = (d.h * d.k, d.h * d.v);
    let q = rand_vec(&mut rng, d.b * d.t * hk, 1.5);
    let k = rand_vec(&mut rng, d.b * d.s * hk, 1.5);
    let v = rand_vec(&mut rng, d.b * d.s * hv, 1.5);
    let dm = (p > 0.0).then(|| DropoutMask::new(p, 4, 5, 6));
    let mask = mask_array(dm, d.b * d.h * d.t * d.s);
    let (want, probs) = r::attention_forward(&q, &k, &v, key_lens, attn_mask, mask.as_deref(), d);
    let mut g = rand_vec(&mut rng, d.b * d.t * hv, 1.0);
    // The padded rows a buffer holds, in order: all of them, or (packed) each sentence's valid ones.
    let held = |per: usize, pack: bool| -> Vec<usize> {
        (0..d.b * per).filter(|&r_| !pack || r_ % per < key_lens[r_ / per]).collect()
    };
    let (qrows, krows) = (held(d.t, packed && fused), held(d.s, packed));
    if packed && fused {
        // A packed buffer has no padding queries, so nothing flows from them into dK and dV.
        for (r_, row) in g.chunks_exact_mut(hv).enumerate() {
            if !qrows.contains(&r_) {
                row.fill(0.0);
            }
        }
    }
    let (dq, dk, dv) = r::attention_backward(&g, &probs, &q, &k, &v, key_lens, attn_mask, mask.as_deref(), d);
    let offsets: Vec<usize> = std::iter::once(0)
        .chain(key_lens.iter().scan(0, |at, &n| {
            *at += n;
            Some(*at)
        }))
        .collect();
    let layout = packed.then_some(offsets.as_slice());
    let g32: Vec<f32> = qrows.iter().flat_map(|&r_| g[r_ * hv..(r_ + 1) * hv].iter().map(|&x| x as f32)).collect();
    let mut out = vec![f32::NAN; qrows.len() * hv];
    let mut fprobs = vec![f32::NAN; d.b * d.h * d.t * d.s];
    let mut ds = vec![0f32; fprobs.len()];
    // (dQ, dK, dV) as (rows, width) buffers in the layout of `qrows` and `krows`.
    let (mut gq, mut gk, mut gv) =
        (vec![0f32; qrows.len() * hk], vec![0f32; krows.len() * hk], vec![0f32; krows.len() * hv]);
    let copy_cols = |dst: &mut [f32], src: &[f32], ld: usize, off: usize, w: usize| {
        for (i, row) in dst.chunks_exact_mut(w).enumerate() {
            row.copy_from_slice(&src[i * ld + off..i * ld + off + w]);
        }
    };
    if fused {
        assert_eq!(d.t, d.s);
        let ld = 2 * hk + hv + 3; // padding columns exercise the stride
        let mut qkv = vec![0f32; qrows.len() * ld];
        for (i, &r_) in qrows.iter().enumerate() {
            for c in 0..hk {
                qkv[i * ld + c] = q[r_ * hk + c] as f32;
                qkv[i * ld + hk + c] = k[r_ * hk + c] as f32;
            }
            for c in 0..hv {
                qkv[i * ld + 2 * hk + c] = v[r_ * hv + c] as f32;
            }
        }
        let heads = |off| attention::Heads { data: &qkv, ld, off, packed: layout };
        attention::attention_forward(
            &mut out,
            &mut fprobs,
            heads(0),
            heads(hk),
            heads(2 * hk),
            key_lens,
            attn_mask,
            dm,
            d,
        );
        let mut dqkv = vec![f32::NAN; qrows.len() * ld];
        attention::attention_backward(
            attention::AttnGrads::Fused { dqkv: &mut dqkv, ld, offs: [0, hk, 2 * hk] },
            &mut ds,
            &g32,
            &fprobs,
            heads(0),
            heads(hk),
            heads(2 * hk),
            key_lens,
            attn_mask,
            dm,
            d,
        );
        copy_cols(&mut gq, &dqkv, ld, 0, hk);
        copy_cols(&mut gk, &dqkv, ld, hk, hk);
        copy_cols(&mut gv, &dqkv, ld, 2 * hk, hv);
    } else {
        let q32 = to_f32(&q);
        let kv32: Vec<f32> = krows
            .iter()
            .flat_map(|&r_| k[r_ * hk..(r_ + 1) * hk].iter().chain(&v[r_ * hv..(r_ + 1) * hv]).map(|&x| x as f32))
            .collect();
        let qh = attention::Heads::padded(&q32, hk, 0);
        let kvh = |off| attention::Heads { data: &kv32, ld: hk + hv, off, packed: layout };
        attention::attention_forward(&mut out, &mut fprobs, qh, kvh(0), kvh(hk), key_lens, attn_mask, dm, d);
        let mut fdkv = vec![f32::NAN; krows.len() * (hk + hv)];
        gq.fill(f32::NAN);
        attention::attention_backward(
            attention::AttnGrads::Split { dq: &mut gq, ldq: hk, qoff: 0, dkv: &mut fdkv, ldkv: hk + hv, offs: [0, hk] },
            &mut ds,
            &g32,
            &fprobs,
            qh,
            kvh(0),
            kvh(hk),
            key_lens,
            attn_mask,
            dm,
            d,
        );
        copy_cols(&mut gk, &fdkv, hk + hv, 0, hk);
        copy_cols(&mut gv, &fdkv, hk + hv, hk, hv);
    }
    // Back in padded places. Rows a packed buffer lacks take the reference's values, except that a
    // padding query's weights must be zero (padding keys' dK and dV are zero in the reference).
    let unpack = |got: &[f32], rows: &[usize], w: usize, want: &[f64]| -> Vec<f64> {
        let mut all = want.to_vec();
        for (i, &r_) in rows.iter().enumerate() {
            for c in 0..w {
                all[r_ * w + c] = got[i * w + c] as f64;
            }
        }
        all
    };
    let mut got_probs = to_f64(&fprobs);
    for r_ in (0..d.b * d.t).filter(|r_| !qrows.contains(r_)) {
        let (b, i) = (r_ / d.t, r_ % d.t);
        for h in 0..d.h {
            let at = ((b * d.h + h) * d.t + i) * d.s;
            assert!(fprobs[at..at + d.s].iter().all(|&x| x == 0.0), "padding query {i} of sentence {b} has weights");
            got_probs[at..at + d.s].copy_from_slice(&probs[at..at + d.s]);
        }
    }
    assert_close("attn out", &unpack(&out, &qrows, hv, &want), &want, ATOL, RTOL);
    assert_close("attn probs", &got_probs, &probs, ATOL, RTOL);
    assert_close("attn dq", &unpack(&gq, &qrows, hk, &dq), &dq, ATOL, RTOL);
    let zero_dk: Vec<f64> = vec![0.0; dk.len()];
    let zero_dv: Vec<f64> = vec![0.0; dv.len()];
    assert_close("attn dk", &unpack(&gk, &krows, hk, &zero_dk), &dk, ATOL, RTOL);
    assert_close("attn dv", &unpack(&gv, &krows, hv, &zero_dv), &dv, ATOL, RTOL);
}

#[test]
fn attention_self_fused_causal_with_padding() {
    check_attention(AttnDims { b: 3, h: 3, t: 7, s: 7, k: 13, v: 5 }, &[7, 4, 0], Mask::Causal, 0.0, true, 20);
}

#[test]
fn attention_self_fused_dropout() {
    check_attention(AttnDims { b: 2, h: 2, t: 5, s: 5, k: 8, v: 8 }, &[5, 2], Mask::Padding, 0.2, true, 21);
}

#[test]
fn attention_self_fused_causal_dropout() {
    check_attention(AttnDims { b: 3, h: 2, t: 6, s: 6, k: 7, v: 5 }, &[6, 4, 1], Mask::Causal, 0.3, true, 25);
}

#[test]
fn attention_self_on_packed_rows() {
    // The encoder's layout: only each sentence's valid rows, with dropout, an empty sentence, a
    // full one, and the causal mask as well.
    check_attention_rows(
        AttnDims { b: 4, h: 3, t: 7, s: 7, k: 9, v: 5 },
        &[3, 7, 0, 5],
        Mask::Padding,
        0.2,
        true,
        true,
        28,
    );
    check_attention_rows(
        AttnDims { b: 3, h: 2, t: 6, s: 6, k: 7, v: 5 },
        &[6, 4, 1],
        Mask::Causal,
        0.0,
        true,
        true,
        29,
    );
    check_attention_rows(
        AttnDims { b: 2, h: 2, t: 70, s: 70, k: 16, v: 16 },
        &[70, 33],
        Mask::Padding,
        0.1,
        true,
        true,
        30,
    );
}

#[test]
fn attention_cross_over_packed_keys() {
    // Padded queries over the encoder's packed keys and values, an empty sentence among them.
    check_attention_rows(
        AttnDims { b: 4, h: 2, t: 3, s: 9, k: 17, v: 6 },
        &[9, 1, 0, 5],
        Mask::Padding,
        0.0,
        false,
        true,
        31,
    );
    check_attention_rows(
        AttnDims { b: 3, h: 3, t: 8, s: 5, k: 8, v: 7 },
        &[2, 5, 4],
        Mask::Padding,
        0.2,
        false,
        true,
        32,
    );
}

#[test]
fn attention_cross_split() {
    check_attention(AttnDims { b: 4, h: 2, t: 3, s: 9, k: 17, v: 6 }, &[9, 1, 0, 5], Mask::Padding, 0.0, false, 22);
}

#[test]
fn attention_single_query_and_wide_heads() {
    check_attention(AttnDims { b: 2, h: 8, t: 1, s: 6, k: 64, v: 64 }, &[6, 3], Mask::Padding, 0.1, false, 23);
    check_attention(AttnDims { b: 1, h: 1, t: 1, s: 1, k: 1, v: 1 }, &[1], Mask::Causal, 0.0, true, 24);
    // Long sequences (parse trees run to hundreds of tokens).
    check_attention(AttnDims { b: 2, h: 2, t: 300, s: 300, k: 16, v: 16 }, &[300, 211], Mask::Causal, 0.1, true, 26);
    check_attention(AttnDims { b: 2, h: 2, t: 290, s: 130, k: 16, v: 16 }, &[130, 77], Mask::Padding, 0.1, false, 27);
}

#[test]
fn softmax_xent_matches_reference() {
    let mut rng = Rng::new(30);
    // The last case leaves entries 0, 1 and 36 out of the smoothing (an imported model's masked
    // rows, at their logit of -1e9).
    for &(m, v, eps, excluded) in
        &[(6, 37, 0.1f32, &[][..]), (4, 1000, 0.0, &[]), (3, 5, 0.2, &[]), (6, 37, 0.1, &[0u32, 1, 36][..])]
    {
        let mut z = rand_vec(&mut rng, m * v, 4.0);
        for r in 0..m {
            for &e in excluded {
                z[r * v + e as usize] = transformer::vocab::MASKED_LOGIT as f64;
            }
        }
        // Targets anywhere but PAD (and, with exclusions, off the excluded ids).
        let targets: Vec<u32> = (0..m)
            .map(|i| match i {
                1 => 0,
                _ if excluded.is_empty() => 1 + rng.below(v as u64 - 1) as u32,
                _ => 2 + rng.below(v as u64 - 3) as u32,
            })
            .collect();
        let (loss, nll, grad) = r::softmax_xent(&z, &targets, 0, eps as f64, v, excluded);
        let mut z32 = to_f32(&z);
        let (mut rl, mut rn) = (vec![0f32; m], vec![0f32; m]);
        let sums =
            softmax_xent::softmax_xent_forward_backward(&mut z32, &mut rl, &mut rn, &targets, 0, eps, 0.5, v, excluded);
        assert!(sums.loss < 100.0 * m as f64, "the masked entries stay out of the loss: {}", sums.loss);
        assert_eq!(sums.tokens, m - 1);
        assert_close("loss", &[sums.loss], &[loss], 1e-5, 1e-6);
        assert_close("nll", &[sums.nll], &[nll], 1e-5, 1e-6);
        let half: Vec<f64> = grad.iter().map(|g| g * 0.5).collect();
        assert_close("dlogits", &to_f64(&z32), &half, 1e-7, 1e-5);
    }
}

#[test]
fn label_smoothing_zero_is_nll() {
    let mut rng = Rng::new(31);
    let (m, v) = (5, 50);
    let z = to_f32(&rand_vec(&mut rng, m * v, 3.0));
    let targets = [5u32, 9, 0, 49, 4];
    let (mut rl, mut rn) = (vec![0f32; m], vec![0f32; m]);
    let sums =
        softmax_xent::softmax_xent_forward_backward(&mut z.clone(), &mut rl, &mut rn, &targets, 0, 0.0, 1.0, v, &[]);
    assert_eq!(sums.loss, sums.nll);
    let direct: f64 = targets
        .iter()
        .enumerate()
        .filter(|(_, &t)| t != 0)
        .map(|(i, &t)| {
            let row = &z[i * v..(i + 1) * v];
            let lse = row.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
            lse - row[t as usize] as f64
        })
        .sum();
    assert_close("nll", &[sums.nll], &[direct], 1e-5, 1e-6);
}

#[test]
fn embedding_matches_reference() {
    let mut rng = Rng::new(40);
    for &(vocab, d, seq, b, p) in &[(11, 70, 3, 4, 0.1f32), (5, 3, 1, 2, 0.0)] {
        let tokens: Vec<u32> =
            (0..b * seq).map(|i| if i % 3 == 0 { 2 } else { rng.below(vocab as u64) as u32 }).collect();
        let table = rand_vec(&mut rng, vocab * d, 1.0);
        let pos = rand_vec(&mut rng, (seq + 2) * d, 1.0);
        let dm = (p > 0.0).then(|| DropoutMask::new(p, 1, 2, 3));
        let mask = mask_array(dm, b * seq * d);
        let scale = (d as f64).sqrt();
        let want = r::embedding_forward(&tokens, &table, &pos, seq, d, scale, mask.as_deref());
        let mut out = vec![0f32; b * seq * d];
        embedding::embedding_forward(
            &mut out,
            &tokens,
            embedding::Rows::Dense(&to_f32(&table)),
            &to_f32(&pos),
            seq,
            d,
            scale as f32,
            dm,
        );
        assert_close("emb fwd", &to_f64(&out), &want, ATOL, RTOL);
        let g = rand_vec(&mut rng, b * seq * d, 1.0);
        let (dt, dp) = r::embedding_backward(&g, &tokens, vocab, seq + 2, seq, d, scale, mask.as_deref());
        let (mut fdt, mut fdp) = (vec![0f32; vocab * d], vec![0f32; (seq + 2) * d]);
        embedding::embedding_backward(&mut fdt, Some(&mut fdp), &to_f32(&g), &tokens, seq, d, scale as f32, dm);
        assert_close("emb dtable", &to_f64(&fdt), &dt, ATOL, RTOL);
        assert_close("emb dpos", &to_f64(&fdp), &dp, ATOL, RTOL);
    }
}

#[test]
fn column_sum_matches_reference() {
    let mut rng = Rng::new(51);
    let (m, n) = (77, 133);
    let dy = rand_vec(&mut rng, m * n, 1.0);
    let mut db = vec![1f32; n];
    elementwise::column_sum_add(&mut db, &to_f32(&dy), n);
    let want: Vec<f64> = (0..n).map(|j| 1.0 + (0..m).map(|i| dy[i * n + j]).sum::<f64>()).collect();
    assert_close("colsum", &to_f64(&db), &want, 1e-5, 1e-5);
}

#[test]
fn exp_approx_is_accurate() {
    let mut worst = 0.0f64;
    let mut x = -87.0f32;
    while x < 88.0 {
        let want = (x as f64).exp();
        let got = elementwise::exp_approx(x) as f64;
        worst = worst.max((got - want).abs() / want);
        x += 0.0137;
    }
    assert!(worst < 1e-6, "exp_approx max relative error {worst:e}");
    // Far below the range it saturates to a tiny non-negative value, never NaN or negative.
    let tiny = elementwise::exp_approx(-1000.0);
    assert!((0.0..1e-37).contains(&tiny), "exp_approx(-1000) = {tiny:e}");
}

#[test]
fn adam_matches_reference_over_steps() {
    let mut rng = Rng::new(60);
    let n = 40_000; // more than one parallel chunk
    let mut p64 = rand_vec(&mut rng, n, 1.0);
    let mut p32 = to_f32(&p64);
    let (mut m64, mut v64) = (vec![0.0; n], vec![0.0; n]);
    let (mut m32, mut v32) = (vec![0f32; n], vec![0f32; n]);
    for t in 1..=5 {
        let g = rand_vec(&mut rng, n, 0.1);
        let lr = 1e-3 * t as f64;
        r::adam_update(&mut p64, &g, &mut m64, &mut v64, 0.9, 0.98, 1e-9, lr, t);
        assert!(adam::adam_update(&mut p32, &to_f32(&g), &mut m32, &mut v32, adam::AdamConfig::paper(), lr as f32, t));
    }
    assert_close("adam params", &to_f64(&p32), &p64, 1e-6, 1e-5);
    assert_close("adam m", &to_f64(&m32), &m64, 1e-7, 1e-5);
}

#[test]
fn all_finite_detects_nan_and_inf_anywhere() {
    let mut x = vec![1.5f32; 200_003];
    assert!(elementwise::all_finite(&x));
    for (i, bad) in [(0, f32::NAN), (70_001, f32::INFINITY), (200_002, f32::NEG_INFINITY), (17, f32::NAN)] {
        x[i] = bad;
        assert!(!elementwise::all_finite(&x), "missed {bad} at {i}");
        x[i] = 1.5;
    }
    assert!(elementwise::all_finite(&[f32::MAX, -f32::MAX, 0.0]));
}

#[test]
#[should_panic(expected = "matmul: C has")]
fn matmul_sizes_that_overflow_panic_instead_of_writing() {
    matmul::matmul(&mut [], &[], matmul::Op::N, &[], matmul::Op::N, 1 << 32, 1 << 32, 1 << 32, false);
}

#[test]
#[should_panic(expected = "row stride")]
fn gemm_small_with_wrapping_stride_panics() {
    let a = [1f32; 4];
    let v = matmul::MatRef::rows(&a, 0, 2, 2, 2);
    let mut c = [0f32; 4];
    matmul::gemm_small(&mut c, 0, usize::MAX, v, v, 1.0, false);
}

#[test]
#[should_panic(expected = "view exceeds its buffer")]
fn matref_with_wrapping_offset_panics() {
    let a = [1f32; 4];
    let v = matmul::MatRef { data: &a, off: usize::MAX, rows: 2, cols: 2, rs: 2, cs: 1 };
    let mut c = [0f32; 4];
    matmul::gemm_small(&mut c, 0, 2, v, matmul::MatRef::rows(&a, 0, 2, 2, 2), 1.0, false);
}

/// A sequence length whose product with D wraps is refused before any raw-pointer write.
#[test]
#[should_panic(expected = "rows not a multiple of the sequence length")]
fn embedding_scatter_with_wrapping_length_panics() {
    let mut table = [0f32; 8];
    let mut pos = [0f32; 0];
    embedding::embedding_backward(&mut table, Some(&mut pos), &[1.0, 1.0], &[0], 1 << 63, 2, 1.0, None);
}

/// The search's top-k (with its 64-wide block skip) against a full sort, on rows long enough for
/// the skip, with ties, NaN and infinities, and normalisers 0 and 7.5.
#[test]
fn top_k_with_block_skip_equals_a_full_sort() {
    let mut rng = Rng::new(21);
    for trial in 0..400 {
        let len = 5 + rng.below(400) as usize;
        let row: Vec<f32> = (0..len)
            .map(|_| match rng.below(50) {
                0 => f32::NAN,
                1 => f32::NEG_INFINITY,
                2 => f32::INFINITY,
                // Few distinct values: many ties.
                x if x < 25 => rng.below(8) as f32 * 0.5 - 2.0,
                _ => rng.below(100_000) as f32 * 1e-4 - 5.0,
            })
            .collect();
        let norm = if trial % 2 == 0 { 0.0 } else { 7.5 };
        let k = 1 + rng.below(8) as usize;
        for no_unk in [false, true] {
            assert_eq!(
                search::top_k(&row, norm, k, false, no_unk),
                r::top_k(&row, norm, k, false, no_unk),
                "trial {trial}: len {len}, k {k}, no_unk {no_unk}"
            );
            assert_eq!(
                search::top_k(&row, norm, k, true, no_unk),
                r::top_k(&row, norm, k, true, no_unk),
                "trial {trial}: EOS only"
            );
        }
        // UNK never among the ones kept when suppressed.
        assert!(search::top_k(&row, norm, k, false, true).iter().all(|&(_, t)| t != transformer::UNK));
        // Restricted to every id but PAD and BOS (listed backwards, one twice), the constrained
        // variant ranks as the full sort does.
        let mut allowed: Vec<u32> = (2..len as u32).rev().collect();
        allowed.push(2);
        assert_eq!(
            search::top_k_among(&row, norm, k, &allowed),
            r::top_k(&row, norm, k, false, false),
            "trial {trial}: among"
        );
    }
}

#[test]
fn log_sum_exp_matches_reference() {
    let mut rng = Rng::new(22);
    for len in [1, 7, 16, 33, 1000, 8000] {
        let row = rand_vec(&mut rng, len, 6.0);
        let got = search::log_sum_exp(&to_f32(&row)) as f64;
        let want = r::log_sum_exp(&to_f64(&to_f32(&row)));
        assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "len {len}: {got} vs {want}");
    }
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut row = vec![0.5f32; 40];
        row[17] = bad;
        assert!(search::log_sum_exp(&row).is_nan(), "{bad} in the row must give NaN");
    }
}

#[test]
fn embedding_step_matches_reference() {
    let mut rng = Rng::new(23);
    let (v, d) = (11, 19);
    let (table, pos) = (rand_vec(&mut rng, v * d, 1.0), rand_vec(&mut rng, d, 1.0));
    let tokens = [3u32, 0, 10, 3, 7];
    let mut out = vec![f32::NAN; tokens.len() * d];
    embedding::embedding_step(&mut out, &tokens, embedding::Rows::Dense(&to_f32(&table)), &to_f32(&pos), d, 4.36);
    assert_close("step embedding", &to_f64(&out), &r::embedding_step(&tokens, &table, &pos, d, 4.36), ATOL, RTOL);
    // The same rows read from a prepared output projection (f32 panels where this CPU packs,
    // W itself elsewhere): bit for bit the dense lookup, in the step and in the batch kernel.
    let w = to_f32(&table);
    let prepared = transformer::kernels::cpu::packed::PackedLinear::new(&w, v, d, transformer::Precision::F32, true);
    let rows = prepared.rows().expect("f32 prepared weights keep their rows exact");
    let mut from_panels = vec![f32::NAN; tokens.len() * d];
    embedding::embedding_step(&mut from_panels, &tokens, rows, &to_f32(&pos), d, 4.36);
    assert_eq!(from_panels, out);
    let positions = to_f32(&rand_vec(&mut rng, tokens.len() * d, 1.0));
    let (mut a, mut b) = (vec![0.0; tokens.len() * d], vec![1.0; tokens.len() * d]);
    embedding::embedding_forward(&mut a, &tokens, embedding::Rows::Dense(&w), &positions, tokens.len(), d, 2.0, None);
    embedding::embedding_forward(&mut b, &tokens, rows, &positions, tokens.len(), d, 2.0, None);
    assert_eq!(a, b);
    if transformer::Precision::Bf16.available().is_ok() {
        let bf16 = transformer::kernels::cpu::packed::PackedLinear::new(&w, v, d, transformer::Precision::Bf16, true);
        assert!(bf16.rows().is_none(), "bf16 tiles hold rounded rows");
    }
}

/// Cached attention over a slot map (each position's key in some slot) and over plain rows, with
/// rows of no keys, against the naive twin on the gathered keys: at odd head widths (the portable
/// row) and at widths of whole vectors (the AVX-512 row, where the CPU has it), with key counts
/// below, at and above a vector's 16 lanes.
#[test]
fn cached_attention_matches_reference() {
    let mut rng = Rng::new(24);
    let shapes: [(usize, usize, usize); 11] = [
        (3, 5, 7),
        (4, 64, 64),
        (2, 32, 48),
        (1, 16, 128),
        (3, 48, 144),
        (2, 16, 16),
        (2, 16, 32),
        (2, 32, 80),
        (2, 16, 96),
        (2, 16, 112),
        (2, 20, 64),
    ];
    for (heads, dk, dv) in shapes {
        // Both rows are reached: the AVX-512 one for whole vectors up to dv 128 where the CPU
        // has AVX-512, the portable one otherwise.
        let whole = dk.is_multiple_of(16) && dv.is_multiple_of(16) && dv <= 128;
        #[cfg(target_arch = "x86_64")]
        let wide = whole && std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma");
        #[cfg(not(target_arch = "x86_64"))]
        let wide = false;
        assert_eq!(cached_attention::avx512_fits(dk, dv), wide, "dk {dk}, dv {dv}");
        let (hk, hv) = (heads * dk, heads * dv);
        let (slots, cap) = (4, 41);
        let keys = rand_vec(&mut rng, slots * cap * hk, 1.0);
        let values = rand_vec(&mut rng, slots * cap * hv, 1.0);
        let (kf, vf) = (to_f32(&keys), to_f32(&values));
        let rows = 7;
        let q = rand_vec(&mut rng, rows * hk, 1.0);
        let qf = to_f32(&q);
        let n_of = |r: usize| [0, 1, 4, 9, 16, 17, 41][r];
        let origin: Vec<u32> = (0..rows * cap).map(|_| rng.below(slots as u64) as u32).collect();
        let mut ctx = vec![f32::NAN; rows * hv];
        cached_attention::attend(&mut ctx, heads, dk, dv, |r| {
            let kv = cached_attention::KeyValues {
                k: &kf,
                ldk: hk,
                v: &vf,
                ldv: hv,
                n: n_of(r),
                origin: Some((&origin[r * cap..][..cap], cap * hk, cap * hv)),
            };
            (&qf[r * hk..][..hk], kv)
        });
        let shape = format!("{heads} heads, dk {dk}, dv {dv}");
        for r in 0..rows {
            let slot = |j: usize| origin[r * cap + j] as usize;
            let ks: Vec<Vec<f64>> = (0..n_of(r)).map(|j| keys[(slot(j) * cap + j) * hk..][..hk].to_vec()).collect();
            let vs: Vec<Vec<f64>> = (0..n_of(r)).map(|j| values[(slot(j) * cap + j) * hv..][..hv].to_vec()).collect();
            let want = r::cached_attention(&q[r * hk..][..hk], &ks, &vs, heads, dk, dv);
            assert_close(&format!("{shape}: row {r} (slot map)"), &to_f64(&ctx[r * hv..][..hv]), &want, ATOL, RTOL);
        }
        // Plain rows (encoder–decoder attention): key j of row r at r·n·hk + j·hk.
        for n in [6, 16, 23] {
            let mut ctx = vec![f32::NAN; rows * hv];
            cached_attention::attend(&mut ctx, heads, dk, dv, |r| {
                let kv = cached_attention::KeyValues {
                    k: &kf[r * n * hk..],
                    ldk: hk,
                    v: &vf[r * n * hv..],
                    ldv: hv,
                    n,
                    origin: None,
                };
                (&qf[r * hk..][..hk], kv)
            });
            for r in 0..rows {
                let ks: Vec<Vec<f64>> = (0..n).map(|j| keys[(r * n + j) * hk..][..hk].to_vec()).collect();
                let vs: Vec<Vec<f64>> = (0..n).map(|j| values[(r * n + j) * hv..][..hv].to_vec()).collect();
                let want = r::cached_attention(&q[r * hk..][..hk], &ks, &vs, heads, dk, dv);
                let what = format!("{shape}: row {r} (plain, {n} keys)");
                assert_close(&what, &to_f64(&ctx[r * hv..][..hv]), &want, ATOL, RTOL);
            }
        }
    }
}

/// A NaN in a query or a key turns that row's output NaN in both rows of the cached attention
/// (portable and AVX-512), and leaves the other rows as they were.
#[test]
fn cached_attention_propagates_nan() {
    for (heads, dk, dv) in [(3, 5, 7), (4, 64, 64)] {
        let (hk, hv, n, rows) = (heads * dk, heads * dv, 9, 3);
        let mut rng = Rng::new(25);
        let mut k = to_f32(&rand_vec(&mut rng, rows * n * hk, 1.0));
        let v = to_f32(&rand_vec(&mut rng, rows * n * hv, 1.0));
        let mut q = to_f32(&rand_vec(&mut rng, rows * hk, 1.0));
        q[1] = f32::NAN; // row 0's query
        k[2 * n * hk + 3 * hk + 1] = f32::NAN; // row 2's fourth key
        let mut ctx = vec![0.0f32; rows * hv];
        cached_attention::attend(&mut ctx, heads, dk, dv, |r| {
            let kv = cached_attention::KeyValues {
                k: &k[r * n * hk..],
                ldk: hk,
                v: &v[r * n * hv..],
                ldv: hv,
                n,
                origin: None,
            };
            (&q[r * hk..][..hk], kv)
        });
        assert!(ctx[..dv].iter().all(|x| x.is_nan()), "dk {dk}: row 0's first head (NaN query)");
        assert!(ctx[hv..2 * hv].iter().all(|x| x.is_finite()), "dk {dk}: row 1");
        assert!(ctx[2 * hv..2 * hv + dv].iter().all(|x| x.is_nan()), "dk {dk}: row 2's first head (NaN key)");
    }
}

#[test]
fn guided_alignment_loss_and_backward() {
    // Three sentences, one with two valid keys; packed keys, padded queries, strides wider
    // than one head; head 1 of 2 supervised, head 0 filled with noise that must not count.
    let mut rng = Rng::new(77);
    let d = AttnDims { b: 3, h: 2, t: 4, s: 5, k: 3, v: 2 };
    let key_lens = [5, 2, 4];
    let offsets = [0, 5, 7, 11];
    let (ldq, ldk, head, w) = (d.h * d.k + 1, d.h * (d.k + d.v), 1, 0.25f32);
    let q = rand_vec(&mut rng, d.b * d.t * ldq, 1.0);
    let k = rand_vec(&mut rng, offsets[3] * ldk, 1.0);
    let (ts, per) = (d.t * d.s, d.h * d.t * d.s);
    let mut probs = vec![0f32; d.b * per];
    let mut guide = vec![0f32; d.b * ts];
    let mut want = Vec::new();
    for b in 0..d.b {
        let n = key_lens[b];
        let qh: Vec<f64> = (0..d.t).flat_map(|t| q[(b * d.t + t) * ldq + head * d.k..][..d.k].to_vec()).collect();
        let kh: Vec<f64> = (0..d.s)
            .flat_map(|s| if s < n { k[(offsets[b] + s) * ldk + head * d.k..][..d.k].to_vec() } else { vec![0.0; d.k] })
            .collect();
        let scale = 1.0 / (d.k as f64).sqrt();
        for t in 0..d.t {
            let sc: Vec<f64> =
                (0..n).map(|s| (0..d.k).map(|c| qh[t * d.k + c] * kh[s * d.k + c]).sum::<f64>() * scale).collect();
            let z: f64 = sc.iter().map(|x| x.exp()).sum();
            for s in 0..n {
                probs[b * per + head * ts + t * d.s + s] = (sc[s].exp() / z) as f32;
                probs[b * per + t * d.s + s] = rng.uniform() as f32;
            }
            // Row t aligned to (t mod n) and, on odd rows, also to the last valid key.
            if t != 2 {
                let cols: Vec<usize> = if t % 2 == 1 { vec![t % n, n - 1] } else { vec![t % n] };
                for &c in &cols {
                    guide[b * ts + t * d.s + c] += 1.0 / cols.len() as f32;
                }
            }
        }
        let g64: Vec<f64> = guide[b * ts..][..ts].iter().map(|&x| x as f64).collect();
        want.push(r::guided_alignment(&qh, &kh, &g64, d.t, d.s, d.k, n, w as f64));
    }
    let mut dprobs = vec![0f32; d.b * ts];
    let loss = guided::guided_loss(&probs, &guide, &mut dprobs, head, w, 1.0, d);
    let want_loss: f64 = want.iter().map(|x| x.0).sum();
    assert!((loss - want_loss).abs() < 1e-5 * want_loss.abs().max(1.0), "{loss} vs {want_loss}");
    // The backward adds: start from values that are subtracted again after.
    let (dq0, dk0) = (rand_vec(&mut rng, q.len(), 1.0), rand_vec(&mut rng, k.len(), 1.0));
    let (mut dq, mut dk): (Vec<f32>, Vec<f32>) =
        (dq0.iter().map(|&x| x as f32).collect(), dk0.iter().map(|&x| x as f32).collect());
    let (qf, kf): (Vec<f32>, Vec<f32>) = (q.iter().map(|&x| x as f32).collect(), k.iter().map(|&x| x as f32).collect());
    let heads = guided::GuidedHeads { q: &qf, ldq, k: &kf, ldk, k_packed: Some(&offsets) };
    guided::guided_backward(&mut dq, &mut dk, &heads, &probs, &dprobs, &key_lens, head, d);
    for b in 0..d.b {
        let (_, wq, wk) = &want[b];
        for t in 0..d.t {
            for c in 0..ldq {
                let i = (b * d.t + t) * ldq + c;
                let exp = if (head * d.k..(head + 1) * d.k).contains(&c) { wq[t * d.k + c - head * d.k] } else { 0.0 };
                assert!(
                    (dq[i] as f64 - dq0[i] - exp).abs() < 1e-4,
                    "dq b{b} t{t} c{c}: {} vs {exp}",
                    dq[i] as f64 - dq0[i]
                );
            }
        }
        for s in 0..key_lens[b] {
            for c in 0..ldk {
                let i = (offsets[b] + s) * ldk + c;
                let exp = if (head * d.k..(head + 1) * d.k).contains(&c) { wk[s * d.k + c - head * d.k] } else { 0.0 };
                assert!(
                    (dk[i] as f64 - dk0[i] - exp).abs() < 1e-4,
                    "dk b{b} s{s} c{c}: {} vs {exp}",
                    dk[i] as f64 - dk0[i]
                );
            }
        }
    }
}
