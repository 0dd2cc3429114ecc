//! Times the decoder's matrix products (Multi30k model: d_model 256, d_ff 1024, vocabulary 8000)
//! at 512, 128 and 32 rows, on the `gemm` crate and on pre-packed weights (`PackedLinear`), and
//! checks they agree. This is where `PACKED_MAX_ROWS` comes from.
//!
//!     cargo run --release -p transformer --example packed_vs_gemm
use std::time::Instant;
use transformer::kernels::cpu::matmul::{matmul, Op};
use transformer::kernels::cpu::packed::PackedLinear;
/// Median seconds per call over 5 timings of about 1 GFLOP each.
fn time(mut f: impl FnMut(), flops: f64) -> f64 {
    for _ in 0..3 {
        f();
    }
    let reps = (1e9 / flops).ceil() as usize;
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
    let shapes = [(768, 256), (256, 256), (1024, 256), (256, 1024), (8000, 256)];
    for m in [512usize, 128, 32] {
        for &(n, k) in &shapes {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5).collect();
            let b: Vec<f32> = (0..n * k).map(|i| ((i * 104729) % 1000) as f32 * 1e-3 - 0.5).collect();
            let mut c = vec![0f32; m * n];
            let mut c2 = vec![0f32; m * n];
            let flops = 2.0 * (m * n * k) as f64;
            let t1 = time(|| matmul(&mut c, &a, Op::N, &b, Op::T, m, n, k, false), flops);
            let pk = PackedLinear::new(&b, n, k, transformer::Precision::F32, true);
            let t2 = time(|| pk.forward(&mut c2, &a, None, m), flops);
            let err = c.iter().zip(&c2).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            println!("m {m:4} n {n:5} k {k:5}: gemm {:7.1} us {:6.1} GF/s | packed {:7.1} us {:6.1} GF/s | max diff {err:.2e}",
                t1 * 1e6, flops / t1 / 1e9, t2 * 1e6, flops / t2 / 1e9);
        }
    }
}
