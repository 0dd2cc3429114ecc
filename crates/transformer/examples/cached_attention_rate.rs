//! Time of the decoder's cached attention (`kernels::cpu::cached_attention::attend`) per row, at
//! the quick start's shapes (4 heads of 64, 256 rows: a batch of 64 sentences at beam 4), over a
//! self-attention cache (keys in slots named by a position → slot map) and over plain rows
//! (encoder–decoder attention), for several key counts. One thread.
//!
//! `cargo run --release --example cached_attention_rate`

use std::time::Instant;
use transformer::kernels::cpu::cached_attention::{attend, KeyValues};
use transformer::rng::Rng;

fn main() {
    let (heads, dk, dv, rows) = (4, 64, 64, 256);
    let (hk, hv) = (heads * dk, heads * dv);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let mut rng = Rng::new(1);
    let cap = 64;
    let mut v = |n: usize| (0..n).map(|_| rng.normal() as f32).collect::<Vec<f32>>();
    let keys = v(rows * cap * hk);
    let values = v(rows * cap * hv);
    let q = v(rows * hk);
    let mut rng = Rng::new(2);
    // Beam rows share their sentence's history: row r's positions come from slots of its group.
    let origin: Vec<u32> = (0..rows * cap).map(|i| ((i / cap) / 4 * 4 + rng.below(4) as usize) as u32).collect();
    let mut ctx = vec![0.0f32; rows * hv];
    println!("cached attention, {heads} heads of {dk}, {rows} rows, one thread: ns per row");
    for n in [4, 8, 12, 16, 24, 32, 48] {
        let mut best = [f64::INFINITY; 2];
        for _ in 0..7 {
            for (kind, b) in best.iter_mut().enumerate() {
                let reps = 20;
                let t = Instant::now();
                for _ in 0..reps {
                    pool.install(|| {
                        attend(&mut ctx, heads, dk, dv, |r| {
                            let kv = if kind == 0 {
                                KeyValues {
                                    k: &keys,
                                    ldk: hk,
                                    v: &values,
                                    ldv: hv,
                                    n,
                                    origin: Some((&origin[r * cap..][..n], cap * hk, cap * hv)),
                                }
                            } else {
                                // Encoder–decoder: the 4 rows of a sentence read its n source keys.
                                let base = r / 4 * n * hk;
                                KeyValues { k: &keys[base..], ldk: hk, v: &values[base..], ldv: hv, n, origin: None }
                            };
                            (&q[r * hk..][..hk], kv)
                        })
                    });
                }
                *b = b.min(t.elapsed().as_secs_f64() * 1e9 / (reps * rows) as f64);
            }
        }
        println!(
            "  n = {n:2}: self {:7.0} ns   cross {:7.0} ns   (checksum {:.3})",
            best[0],
            best[1],
            ctx.iter().sum::<f32>()
        );
    }
}
