//! Times the training step's matrix products (Multi30k model: d_model 256, d_ff 1024, vocabulary
//! 8000, ~3000 tokens per batch) in f32 on the `gemm` crate and in bf16 on every bf16 unit this CPU
//! has (AMX tiles, AVX512-BF16 dot products), forward (X·Wᵀ), input gradient (dY·W) and weight
//! gradient (dYᵀ·X), and prints the largest difference relative to the largest |C|.
//!
//!     cargo run --release -p transformer --example bf16_vs_gemm
use std::time::Instant;
use transformer::kernels::cpu::bf16;
use transformer::kernels::cpu::matmul::{matmul, Op};
/// Median seconds per call over 5 timings of about 2 GFLOP each.
fn time(mut f: impl FnMut(), flops: f64) -> f64 {
    f();
    let reps = (2e9 / flops).ceil() as usize;
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps {
            f();
        }
        times.push(t.elapsed().as_secs_f64() / reps as f64);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    times[2]
}
fn main() {
    if let Err(e) = bf16::available() {
        println!("no bf16 unit: {e}");
    }
    let units = bf16::units();
    let tokens = 3000usize;
    let shapes = [(768, 256), (256, 256), (1024, 256), (256, 1024), (8000, 256)];
    let mut tf = 0.0;
    let mut tb = vec![0.0; units.len()];
    for &(n, k) in &shapes {
        // (label, op_a, op_b, m, n, k): forward, dX, dW for a linear map W (n, k) over `tokens` rows.
        for (label, op_a, op_b, mm, nn, kk) in [
            ("fwd", Op::N, Op::T, tokens, n, k),
            ("dX ", Op::N, Op::N, tokens, k, n),
            ("dW ", Op::T, Op::N, n, k, tokens),
        ] {
            let a: Vec<f32> = (0..mm * kk).map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5).collect();
            let b: Vec<f32> = (0..kk * nn).map(|i| ((i * 104729) % 1000) as f32 * 1e-3 - 0.5).collect();
            let mut c = vec![0f32; mm * nn];
            let mut c2 = vec![0f32; mm * nn];
            let flops = 2.0 * (mm * nn * kk) as f64;
            let t1 = time(|| matmul(&mut c, &a, op_a, &b, op_b, mm, nn, kk, false), flops);
            tf += t1;
            let mut line = format!(
                "{label} m {mm:5} n {nn:5} k {kk:5}: f32 gemm {:7.0} us {:4.0} GF/s",
                t1 * 1e6,
                flops / t1 / 1e9
            );
            for (u, &unit) in units.iter().enumerate() {
                let t2 = time(|| bf16::matmul_bf16_on(unit, &mut c2, &a, op_a, &b, op_b, mm, nn, kk, false), flops);
                tb[u] += t2;
                let scale = c.iter().fold(0f32, |s, x| s.max(x.abs()));
                let err = c.iter().zip(&c2).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max) / scale;
                line += &format!(
                    " | {unit:?} {:7.0} us {:4.0} GF/s {:4.2}x rel diff {err:.1e}",
                    t2 * 1e6,
                    flops / t2 / 1e9,
                    t1 / t2
                );
            }
            println!("{line}");
        }
    }
    let mut line = format!("all shapes: f32 {:.1} ms", tf * 1e3);
    for (u, unit) in units.iter().enumerate() {
        line += &format!(", bf16 {unit:?} {:.1} ms ({:.2}x)", tb[u] * 1e3, tf / tb[u]);
    }
    println!("{line}");
}
