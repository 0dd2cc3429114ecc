//! Times the decoder's matrix products (Multi30k model: d_model 256, d_ff 1024, vocabulary 8000;
//! with the argument `base`, Transformer-base as OPUS-MT: d_model 512, d_ff 2048, vocabulary 11,000)
//! at 512, 128 and 32 rows on the weights as decoding prepares them at each precision
//! (`PackedLinear`: f32 panels, bf16 tiles, int8 codes), in GFLOP/s (int8: multiply-adds × 2).
//!
//!     cargo run --release -p transformer --example decode_products [base]
use std::time::Instant;
use transformer::kernels::cpu::packed::PackedLinear;
use transformer::Precision;

/// Median seconds per call over 5 timings of about 0.5 GFLOP each.
fn time(mut f: impl FnMut(), flops: f64) -> f64 {
    for _ in 0..3 {
        f();
    }
    let reps = (5e8 / flops).ceil() as usize;
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
    // From a thread of the pool, as decoding calls them (a call from outside it pays for waking
    // the pool at every product).
    rayon::ThreadPoolBuilder::new().build().expect("thread pool").install(run)
}

fn run() {
    let shapes = match std::env::args().nth(1).as_deref() {
        Some("base") => [(1536, 512), (512, 512), (2048, 512), (512, 2048), (11000, 512)],
        _ => [(768, 256), (256, 256), (1024, 256), (256, 1024), (8000, 256)],
    };
    let precisions: Vec<Precision> = Precision::ALL.into_iter().filter(|p| p.available().is_ok()).collect();
    for m in [512usize, 128, 32] {
        for &(n, k) in &shapes {
            let x: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5).collect();
            let w: Vec<f32> = (0..n * k).map(|i| ((i * 104729) % 1000) as f32 * 1e-3 - 0.5).collect();
            let mut y = vec![0f32; m * n];
            let flops = 2.0 * (m * n * k) as f64;
            let mut line = format!("m {m:4} n {n:5} k {k:5}:");
            for &p in &precisions {
                let pk = PackedLinear::new(&w, n, k, p, true);
                let t = time(|| pk.forward(&mut y, &x, None, m), flops);
                line += &format!(" | {p} {:7.1} us {:6.1} GF/s", t * 1e6, flops / t / 1e9);
            }
            println!("{line}");
        }
    }
}
