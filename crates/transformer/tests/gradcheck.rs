//! f64 central-difference gradient checks of every naive reference kernel: L = Σ G ⊙ f(x) for a
//! random upstream gradient G, compared with the kernel's analytic backward.

mod common;
use common::*;
use transformer::kernels::reference as r;
use transformer::kernels::{AttnDims, Mask};
use transformer::rng::Rng;

const H: f64 = 1e-6;
// Central differences in f64 with h = 1e-6 are accurate to ~1e-9 here; 1e-7 still catches any
// one-term mistake (those change gradients by O(1)).
const ATOL: f64 = 1e-7;
const RTOL: f64 = 1e-6;

#[test]
fn linear() {
    let mut rng = Rng::new(1);
    let (m, n, k) = (3, 5, 7);
    let (x, w, b) = (rand_vec(&mut rng, m * k, 1.0), rand_vec(&mut rng, n * k, 1.0), rand_vec(&mut rng, n, 1.0));
    let g = rand_vec(&mut rng, m * n, 1.0);
    let (dx, dw, db) = r::linear_backward(&g, &x, &w, m, n, k);
    assert_close(
        "dx",
        &dx,
        &numeric_grad(&x, H, |x| weighted_sum(&r::linear_forward(x, &w, &b, m, n, k), &g)),
        ATOL,
        RTOL,
    );
    assert_close(
        "dw",
        &dw,
        &numeric_grad(&w, H, |w| weighted_sum(&r::linear_forward(&x, w, &b, m, n, k), &g)),
        ATOL,
        RTOL,
    );
    assert_close(
        "db",
        &db,
        &numeric_grad(&b, H, |b| weighted_sum(&r::linear_forward(&x, &w, b, m, n, k), &g)),
        ATOL,
        RTOL,
    );
}

#[test]
fn residual_layer_norm_with_dropout() {
    let mut rng = Rng::new(2);
    let (m, d) = (4, 13);
    let x = rand_vec(&mut rng, m * d, 1.0);
    let y = rand_vec(&mut rng, m * d, 1.0);
    let gamma: Vec<f64> = rand_vec(&mut rng, d, 0.5).iter().map(|v| v + 1.0).collect();
    let beta = rand_vec(&mut rng, d, 0.5);
    let mask: Vec<f64> = (0..m * d).map(|_| if rng.uniform() < 0.3 { 0.0 } else { 1.0 / 0.7 }).collect();
    let g = rand_vec(&mut rng, m * d, 1.0);
    let eps = 1e-6;
    let f = |x: &[f64], y: &[f64], ga: &[f64], be: &[f64]| {
        weighted_sum(&r::residual_layer_norm_forward(x, y, Some(&mask), ga, be, eps).0, &g)
    };
    let (_, saved) = r::residual_layer_norm_forward(&x, &y, Some(&mask), &gamma, &beta, eps);
    let (dx, dy, dg, db) = r::residual_layer_norm_backward(&g, &saved, Some(&mask), &gamma);
    assert_close("dx", &dx, &numeric_grad(&x, H, |v| f(v, &y, &gamma, &beta)), ATOL, RTOL);
    assert_close("dy", &dy, &numeric_grad(&y, H, |v| f(&x, v, &gamma, &beta)), ATOL, RTOL);
    assert_close("dgamma", &dg, &numeric_grad(&gamma, H, |v| f(&x, &y, v, &beta)), ATOL, RTOL);
    assert_close("dbeta", &db, &numeric_grad(&beta, H, |v| f(&x, &y, &gamma, v)), ATOL, RTOL);
}

fn check_attention(d: AttnDims, key_lens: &[usize], attn_mask: Mask, dropout: bool, seed: u64) {
    let mut rng = Rng::new(seed);
    let q = rand_vec(&mut rng, d.b * d.t * d.h * d.k, 1.0);
    let k = rand_vec(&mut rng, d.b * d.s * d.h * d.k, 1.0);
    let v = rand_vec(&mut rng, d.b * d.s * d.h * d.v, 1.0);
    let mask: Option<Vec<f64>> = dropout
        .then(|| (0..d.b * d.h * d.t * d.s).map(|_| if rng.uniform() < 0.25 { 0.0 } else { 1.0 / 0.75 }).collect());
    let mask = mask.as_deref();
    let g = rand_vec(&mut rng, d.b * d.t * d.h * d.v, 1.0);
    let f = |q: &[f64], k: &[f64], v: &[f64]| {
        weighted_sum(&r::attention_forward(q, k, v, key_lens, attn_mask, mask, d).0, &g)
    };
    let (_, probs) = r::attention_forward(&q, &k, &v, key_lens, attn_mask, mask, d);
    let (dq, dk, dv) = r::attention_backward(&g, &probs, &q, &k, &v, key_lens, attn_mask, mask, d);
    assert_close("dq", &dq, &numeric_grad(&q, H, |x| f(x, &k, &v)), ATOL, RTOL);
    assert_close("dk", &dk, &numeric_grad(&k, H, |x| f(&q, x, &v)), ATOL, RTOL);
    assert_close("dv", &dv, &numeric_grad(&v, H, |x| f(&q, &k, x)), ATOL, RTOL);
}

#[test]
fn attention_padding_mask() {
    // Sentence 1 has no valid key at all: its queries must get zero output and gradient.
    check_attention(AttnDims { b: 3, h: 2, t: 3, s: 4, k: 5, v: 3 }, &[4, 0, 2], Mask::Padding, false, 3);
}

#[test]
fn attention_causal() {
    check_attention(AttnDims { b: 2, h: 2, t: 4, s: 4, k: 3, v: 5 }, &[4, 3], Mask::Causal, false, 4);
}

#[test]
fn attention_with_dropout() {
    check_attention(AttnDims { b: 2, h: 3, t: 3, s: 5, k: 4, v: 2 }, &[5, 3], Mask::Padding, true, 5);
}

#[test]
fn softmax_cross_entropy_label_smoothed() {
    let mut rng = Rng::new(6);
    let (m, v) = (5, 11);
    let z = rand_vec(&mut rng, m * v, 3.0);
    let targets = [3u32, 0, 10, 1, 7]; // row 1 is padding
    let (_, _, grad) = r::softmax_xent(&z, &targets, 0, 0.1, v, &[]);
    let num = numeric_grad(&z, H, |z| r::softmax_xent(z, &targets, 0, 0.1, v, &[]).0);
    assert_close("dlogits", &grad, &num, ATOL, RTOL);
    assert!(grad[v..2 * v].iter().all(|&g| g == 0.0), "padding row must have zero gradient");
    // With entries 2 and 5 outside the smoothing's support.
    let (_, _, grad) = r::softmax_xent(&z, &targets, 0, 0.1, v, &[2, 5]);
    let num = numeric_grad(&z, H, |z| r::softmax_xent(z, &targets, 0, 0.1, v, &[2, 5]).0);
    assert_close("dlogits, two entries excluded", &grad, &num, ATOL, RTOL);
}

#[test]
fn embedding_scaled_with_positions_and_dropout() {
    let mut rng = Rng::new(7);
    let (vocab, d, seq, b) = (9, 6, 4, 2);
    let tokens = [1u32, 5, 5, 0, 8, 2, 5, 3];
    let table = rand_vec(&mut rng, vocab * d, 1.0);
    let pos = rand_vec(&mut rng, 6 * d, 1.0);
    let mask: Vec<f64> = (0..b * seq * d).map(|_| if rng.uniform() < 0.2 { 0.0 } else { 1.25 }).collect();
    let g = rand_vec(&mut rng, b * seq * d, 1.0);
    let scale = (d as f64).sqrt();
    let (dt, dp) = r::embedding_backward(&g, &tokens, vocab, 6, seq, d, scale, Some(&mask));
    let nt = numeric_grad(&table, H, |t| {
        weighted_sum(&r::embedding_forward(&tokens, t, &pos, seq, d, scale, Some(&mask)), &g)
    });
    let np = numeric_grad(&pos, H, |p| {
        weighted_sum(&r::embedding_forward(&tokens, &table, p, seq, d, scale, Some(&mask)), &g)
    });
    assert_close("dtable", &dt, &nt, ATOL, RTOL);
    assert_close("dpositions", &dp, &np, ATOL, RTOL);
}

#[test]
fn relu() {
    let mut rng = Rng::new(8);
    // Keep inputs away from the kink at 0, where the derivative is undefined.
    let x: Vec<f64> = rand_vec(&mut rng, 20, 1.0).iter().map(|v| if v.abs() < 0.1 { v + 0.2 } else { *v }).collect();
    let g = rand_vec(&mut rng, 20, 1.0);
    let h = r::relu_forward(&x);
    assert_close(
        "drelu",
        &r::relu_backward(&g, &h),
        &numeric_grad(&x, H, |x| weighted_sum(&r::relu_forward(x), &g)),
        ATOL,
        RTOL,
    );
}

/// Each smooth activation's derivative (the naive twin's closed forms) against f64 central
/// differences of its definition, over both tails and the bend near zero.
#[test]
fn smooth_activations() {
    use transformer::Activation::*;
    let mut rng = Rng::new(81);
    let x: Vec<f64> = rand_vec(&mut rng, 40, 3.0).into_iter().chain([-8.0, -2.5, -0.3, 0.0, 0.3, 2.5, 8.0]).collect();
    let g = rand_vec(&mut rng, x.len(), 1.0);
    for act in [Swish, Gelu, GeluTanh, GeluSigmoid] {
        assert_close(
            &format!("d{act:?}"),
            &r::activation_backward(&g, &x, act),
            &numeric_grad(&x, H, |x| weighted_sum(&r::activation_forward(x, act), &g)),
            ATOL,
            RTOL,
        );
    }
}

/// The reference Adam equals the closed form after one step: p − lr·g/(|g| + ε) (m̂ = g, v̂ = g²).
#[test]
fn adam_first_step_closed_form() {
    let mut p = vec![1.0, -2.0, 0.5];
    let g = vec![0.3, -0.01, 2.0];
    let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
    r::adam_update(&mut p, &g, &mut m, &mut v, 0.9, 0.98, 1e-9, 0.01, 1);
    let want: Vec<f64> = [1.0, -2.0, 0.5].iter().zip(&g).map(|(p, g)| p - 0.01 * g / (g.abs() + 1e-9)).collect();
    assert_close("adam", &p, &want, 1e-12, 1e-12);
}

#[test]
fn guided_alignment_cross_entropy() {
    let mut rng = Rng::new(11);
    let (t, s, k, key_len, w) = (4, 5, 3, 4, 0.3);
    let q = rand_vec(&mut rng, t * k, 1.0);
    let kk = rand_vec(&mut rng, s * k, 1.0);
    // Row 0 aligned to one source, row 1 split over two, row 2 unaligned, row 3 over three.
    let mut guide = vec![0.0; t * s];
    guide[2] = 1.0;
    guide[s] = 0.5;
    guide[s + 3] = 0.5;
    for j in [0, 1, 2] {
        guide[3 * s + j] = 1.0 / 3.0;
    }
    let f = |q: &[f64], k: &[f64]| r::guided_alignment(q, k, &guide, t, s, 3, key_len, w).0;
    let (_, dq, dk) = r::guided_alignment(&q, &kk, &guide, t, s, 3, key_len, w);
    assert_close("dq", &dq, &numeric_grad(&q, H, |x| f(x, &kk)), ATOL, RTOL);
    assert_close("dk", &dk, &numeric_grad(&kk, H, |x| f(&q, x)), ATOL, RTOL);
    // The padding key gets no gradient; an unaligned row's query none either.
    assert!(dk[(s - 1) * k..].iter().all(|&x| x == 0.0));
    assert!(dq[2 * k..3 * k].iter().all(|&x| x == 0.0));
}
