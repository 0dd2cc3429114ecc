//! The int8 linear map (`kernels::cpu::int8`) against its naive twin (`reference::linear_int8`):
//! every kernel this CPU has gives the twin's outputs exactly (the integer sums are exact, and the
//! scaling is one formula), on odd shapes, zero and constant rows, and rows holding NaN. Then the
//! twin against f32: the error stays inside the bound the quantisation step allows.

mod common;
use common::*;
use transformer::kernels::cpu::int8::{self, Int8Kernel, QuantizedLinear};
use transformer::kernels::reference as r;
use transformer::rng::Rng;

fn rv(rng: &mut Rng, n: usize, scale: f64) -> Vec<f32> {
    to_f32(&rand_vec(rng, n, scale))
}

fn same(a: f32, b: f32) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fn check(kern: Int8Kernel, x: &[f32], w: &[f32], bias: Option<&[f32]>, m: usize, n: usize, k: usize) {
    let want = r::linear_int8(x, w, bias, m, n, k);
    let q = QuantizedLinear::new(w, n, k);
    // Poisoned output: every element must be written.
    let mut y = vec![f32::from_bits(0x7FA0_0001); m * n];
    q.forward_on(kern, &mut y, x, bias, m);
    for (i, (&got, &want)) in y.iter().zip(&want).enumerate() {
        assert!(same(got, want), "{kern:?} m={m} n={n} k={k}: element {i} is {got}, the twin gives {want}");
    }
}

#[test]
fn every_kernel_equals_the_twin_on_odd_shapes() {
    let mut rng = Rng::new(81);
    let shapes =
        [(1, 1, 1), (1, 33, 3), (5, 31, 4), (12, 32, 5), (13, 70, 67), (37, 64, 256), (200, 40, 130), (3, 257, 1030)];
    for kern in int8::kernels() {
        for &(m, n, k) in &shapes {
            let x = rv(&mut rng, m * k, 3.0);
            let w = rv(&mut rng, n * k, 0.2);
            let b = rv(&mut rng, n, 1.0);
            check(kern, &x, &w, Some(&b), m, n, k);
            check(kern, &x, &w, None, m, n, k);
        }
    }
}

#[test]
fn zero_constant_and_nan_rows() {
    let (m, n, k) = (14, 35, 21);
    let mut rng = Rng::new(82);
    let mut x = rv(&mut rng, m * k, 1.0);
    let mut w = rv(&mut rng, n * k, 1.0);
    x[..k].fill(0.0); // a zero row
    x[k..2 * k].fill(-0.75); // a constant row
    x[3 * k + 4] = f32::NAN; // a NaN row
    x[5 * k] = 1e30; // one huge value: the rest of the row quantises to 0
    w[2 * k..3 * k].fill(0.0);
    w[4 * k..5 * k].fill(0.5);
    let b = rv(&mut rng, n, 1.0);
    for kern in int8::kernels() {
        check(kern, &x, &w, Some(&b), m, n, k);
    }
    let q = QuantizedLinear::new(&w, n, k);
    let mut y = vec![0.0; m * n];
    q.forward(&mut y, &x, Some(&b), m);
    // The zero row gives the bias; the NaN row gives NaN everywhere; the zero weight row gives
    // the bias everywhere except on the NaN row.
    assert_eq!(&y[..n], &b[..]);
    assert!(y[3 * n..4 * n].iter().all(|v| v.is_nan()));
    for i in (0..m).filter(|&i| i != 3) {
        assert_eq!(y[i * n + 2], b[2], "row {i}");
    }
}

#[test]
fn saturating_inputs_do_not_overflow_the_avx2_pairs() {
    // Every code at ±127 with matching signs: each 16-bit pair reaches 2 · 127 · 127, the most
    // the AVX2 kernel's vpmaddubsw can hold.
    let (m, n, k) = (12, 32, 64);
    let x: Vec<f32> = (0..m * k).map(|i| if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
    let w: Vec<f32> = (0..n * k).map(|i| if i % 3 == 0 { -2.0 } else { 2.0 }).collect();
    for kern in int8::kernels() {
        check(kern, &x, &w, None, m, n, k);
    }
}

#[test]
fn dispatch_picks_the_fastest_kernel_this_cpu_has() {
    let ks = int8::kernels();
    assert_eq!(int8::kernel(), ks[0]);
    assert_eq!(*ks.last().unwrap(), Int8Kernel::Scalar);
    #[cfg(target_arch = "x86_64")]
    {
        let vnni = is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni");
        assert_eq!(ks.contains(&Int8Kernel::Vnni), vnni);
        assert_eq!(ks.contains(&Int8Kernel::Avx2), is_x86_feature_detected!("avx2"));
        assert_eq!(ks.contains(&Int8Kernel::Amx), int8::amx_int8_available().is_ok());
        if !ks.contains(&Int8Kernel::Amx) {
            eprintln!("no AMX-INT8 here ({}): its kernel is not tested", int8::amx_int8_available().unwrap_err());
        }
    }
    // AMX gives way below its row threshold, and only there.
    if ks[0] == Int8Kernel::Amx {
        assert_eq!(int8::kernel_for(int8::AMX_MIN_ROWS - 1), ks[1]);
        assert_eq!(int8::kernel_for(int8::AMX_MIN_ROWS), Int8Kernel::Amx);
    } else {
        assert_eq!(int8::kernel_for(1), ks[0]);
    }
}

#[test]
fn accumulating_adds_the_product_on_every_row_count() {
    // forward_accumulate (the kernel `kernel_for` picks: AMX from its threshold up, where present)
    // adds exactly what forward computes without a bias.
    let mut rng = Rng::new(84);
    for &(m, n, k) in &[(1, 40, 70), (15, 33, 64), (16, 64, 65), (40, 70, 300), (100, 32, 130)] {
        let x = rv(&mut rng, m * k, 1.0);
        let w = rv(&mut rng, n * k, 0.3);
        let q = QuantizedLinear::new(&w, n, k);
        let start = rv(&mut rng, m * n, 1.0);
        let mut product = vec![0f32; m * n];
        q.forward_on(int8::kernel_for(m), &mut product, &x, None, m);
        let want_product = r::linear_int8(&x, &w, None, m, n, k);
        assert!(product.iter().zip(&want_product).all(|(a, b)| same(*a, *b)), "{m}x{n}x{k}");
        let mut got = start.clone();
        q.forward_accumulate(&mut got, &x, m);
        for (i, ((&g, &s), &p)) in got.iter().zip(&start).zip(&product).enumerate() {
            assert!(same(g, s + p), "{m}x{n}x{k} element {i}: {g} != {s} + {p}");
        }
    }
}

#[test]
fn twin_stays_within_the_quantisation_bound_of_f32() {
    // Each code is off by at most half a step, so |y_int8 − y_f32| ≤ Σ_p (½sx|w| + ½sw|x| + ¼sx·sw)
    // plus f32 rounding.
    let (m, n, k) = (9, 17, 300);
    let mut rng = Rng::new(83);
    let x = rv(&mut rng, m * k, 2.0);
    let w = rv(&mut rng, n * k, 0.1);
    let y = r::linear_int8(&x, &w, None, m, n, k);
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        let sx = xr.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let sw = wr.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
            let exact: f64 = xr.iter().zip(wr).map(|(&a, &b)| a as f64 * b as f64).sum();
            let bound: f64 = xr
                .iter()
                .zip(wr)
                .map(|(&a, &b)| {
                    0.5 * sx as f64 * b.abs() as f64 + 0.5 * sw as f64 * a.abs() as f64 + 0.25 * (sx * sw) as f64
                })
                .sum();
            let err = (y[i * n + j] as f64 - exact).abs();
            assert!(err <= bound * 1.0001 + 1e-6, "({i},{j}): error {err} over bound {bound}");
            // And the bound is not vacuous: it is a few percent of the terms' magnitude.
            let mag: f64 = xr.iter().zip(wr).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
            assert!(bound < 0.05 * mag, "bound {bound} against magnitude {mag}");
        }
    }
}

#[test]
fn codes_round_trip_and_bad_codes_are_refused() {
    let (n, k) = (45, 13);
    let mut rng = Rng::new(84);
    let w = rv(&mut rng, n * k, 1.0);
    let q = QuantizedLinear::new(&w, n, k);
    let (codes, scales) = q.codes();
    for j in 0..n {
        let (want, s) = r::quantize_row_int8(&w[j * k..(j + 1) * k]);
        assert_eq!(&codes[j * k..(j + 1) * k], &want[..], "row {j}");
        assert_eq!(scales[j], s);
    }
    // Rebuilt from its codes, it multiplies exactly as before.
    let again = QuantizedLinear::from_codes(&codes, scales.clone(), n, k).unwrap();
    let x = rv(&mut rng, 7 * k, 1.0);
    let (mut y1, mut y2) = (vec![0.0; 7 * n], vec![0.0; 7 * n]);
    q.forward(&mut y1, &x, None, 7);
    again.forward(&mut y2, &x, None, 7);
    assert_eq!(y1, y2);
    // Accumulating adds the same product.
    let mut y3 = vec![1.5; 7 * n];
    q.forward_accumulate(&mut y3, &x, 7);
    for (a, b) in y3.iter().zip(&y1) {
        assert_eq!(*a, 1.5 + b);
    }
    let mut bad = codes.clone();
    bad[3 * k + 2] = -128;
    let e = QuantizedLinear::from_codes(&bad, scales.clone(), n, k).unwrap_err();
    assert!(e.contains("row 3, column 2"), "{e}");
    let mut bad_scales = scales;
    bad_scales[5] = -1.0;
    assert!(QuantizedLinear::from_codes(&codes, bad_scales, n, k).unwrap_err().contains("row 5"));
    assert!(QuantizedLinear::from_codes(&codes[1..], vec![0.0; n], n, k).is_err());
}

#[test]
fn quantize_row_equals_the_twin_on_every_kind_of_row() {
    // The vectorised quantiser (16 lanes and a tail) against the plain rule, value for value:
    // lengths around the lane count, scales from subnormal to huge, exact halves (ties to even),
    // −0, and one NaN, ±∞ or subnormal put in the lanes or in the tail.
    let mut rng = Rng::new(85);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 1e-39, f32::MIN_POSITIVE, f32::MAX, -f32::MAX];
    let mut rows = 0;
    for len in (0..=70).chain([255, 256, 1030]) {
        for trial in 0..12 {
            let scale = [1e-30, 1e-3, 1.0, 127.0, 1e30][trial % 5];
            let mut x: Vec<f32> = (0..len).map(|_| (rng.normal() * scale) as f32).collect();
            if trial == 5 && len > 0 {
                // amax 127, so codes are the values themselves rounded: exact halves test the ties.
                x.iter_mut().for_each(|v| *v = ((rng.below(509) as f32) - 254.0) / 2.0);
                x[0] = 127.0;
            }
            if trial >= 6 && len > 0 {
                let at = rng.below(len as u64) as usize;
                x[at] = specials[(trial - 6 + len) % specials.len()];
            }
            let mut q = vec![7i8; len];
            let s = int8::quantize_row(&x, &mut q);
            let (want, ws) = r::quantize_row_int8(&x);
            assert_eq!(q, want, "codes of a row of {len} (trial {trial})");
            assert!(s == ws || (s.is_nan() && ws.is_nan()), "scale {s} against {ws} (len {len}, trial {trial})");
            rows += 1;
        }
    }
    assert_eq!(rows, 74 * 12);
    // Rows whose largest magnitude is so small that 127 / max|x| overflows to +∞: a zero times ∞
    // is NaN, which must still give code 0 (as `NaN as i8` did), in a vector lane and in the tail.
    let tiny = [
        vec![0.0, f32::MIN_POSITIVE],
        {
            let mut r = vec![-0.0; 20];
            r[3] = f32::MIN_POSITIVE;
            r
        },
        {
            let mut r = vec![0.0; 20];
            r[18] = -f32::MIN_POSITIVE;
            r
        },
        vec![2e-37, 1e-37, 0.0, -1e-39, -0.0, 3e-38, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -2e-37, 0.0],
    ];
    for x in &tiny {
        assert!((127.0 / x.iter().fold(0f32, |m, v| m.max(v.abs()))).is_infinite());
        let mut q = vec![7i8; x.len()];
        let s = int8::quantize_row(x, &mut q);
        assert_eq!((q, s), r::quantize_row_int8(x), "row {x:?}");
    }
}

#[test]
fn subnormal_rows_count_as_zero_and_k_zero_gives_the_bias() {
    let mut q = [0i8; 3];
    // 127 / 1e-38 overflows f32: such a row is zero, not all ±127.
    assert_eq!(int8::quantize_row(&[1e-38, -5e-39, 0.0], &mut q), 0.0);
    assert_eq!(q, [0; 3]);
    assert_eq!(r::quantize_row_int8(&[1e-38, -5e-39, 0.0]), (vec![0; 3], 0.0));
    // The smallest normal magnitude still quantises.
    assert_eq!(int8::quantize_row(&[f32::MIN_POSITIVE, 0.0, 0.0], &mut q), f32::MIN_POSITIVE / 127.0);
    assert_eq!(q, [127, 0, 0]);
    let lin = QuantizedLinear::new(&[], 3, 0);
    let mut y = vec![f32::NAN; 6];
    lin.forward(&mut y, &[], Some(&[1.0, 2.0, 3.0]), 2);
    assert_eq!(y, [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    lin.forward(&mut y, &[], None, 2);
    assert_eq!(y, [0.0; 6]);
}
