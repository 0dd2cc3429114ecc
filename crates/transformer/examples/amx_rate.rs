//! The bf16 products of the `bench train-step` models on one thread, timed in the thread's own CPU
//! time (so a busy neighbour on a shared 2-core machine costs little accuracy), against the tile
//! unit's one-thread peak (AMX tiles, or `vdpbf16ps` where the CPU has no AMX). For developing the AMX kernels; the step's
//! numbers come from `bench train-step --bf16 --profile`.
//!
//!     cargo run --release -p transformer --example amx_rate
use transformer::kernels::cpu::bf16;
use transformer::kernels::cpu::matmul::Op;
use transformer::kernels::cpu::peak::{peak_gflops, PeakOf};

/// This thread's CPU time in seconds (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`).
fn thread_seconds() -> f64 {
    let mut ts = [0i64; 2];
    let ret: i64;
    // SAFETY: clock_gettime writes 16 bytes into `ts`.
    unsafe {
        std::arch::asm!("syscall", inlateout("rax") 228i64 => ret, in("rdi") 3i64, in("rsi") ts.as_mut_ptr(),
            lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    assert_eq!(ret, 0);
    ts[0] as f64 + ts[1] as f64 * 1e-9
}

fn main() {
    if let Err(e) = bf16::available() {
        println!("no bf16 unit: {e}");
        return;
    }
    let amx = bf16::amx_available().is_ok();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    pool.install(|| {
        let peak = if amx {
            let t = thread_seconds();
            let wall_rate = peak_gflops(PeakOf::AmxBf16, 6_000_000).unwrap();
            let cpu = thread_seconds() - t;
            // peak_gflops runs a tenth of the rounds to warm up, then three timings of a third each.
            let instr = 6.0 * ((600_000 / 64) + 3 * (2_000_000 / 64)) as f64;
            let peak = instr * 16384.0 / cpu / 1e9;
            println!("AMX bf16 peak, 1 thread: {peak:.0} GFLOP/s in CPU time ({wall_rate:.0} by the wall clock)");
            if let Some(int8) = peak_gflops(PeakOf::AmxInt8, 6_000_000) {
                println!("AMX int8 peak, 1 thread: {int8:.0} GOP/s by the wall clock");
            }
            peak
        } else {
            let peak = peak_gflops(PeakOf::Bf16Dot, 20_000_000).unwrap();
            println!("vdpbf16ps peak, 1 thread: {peak:.0} GFLOP/s by the wall clock (no AMX)");
            peak
        };
        // The bench model's products (d 512, 2,048 tokens), then the quick start's (d 256, d_ff
        // 1024, 4,096 tokens; `bench train-step --quickstart`).
        let shapes = [
            (2048, 512, 8000, Op::N, Op::N),
            (2048, 512, 2048, Op::T, Op::N),
            (512, 2048, 2048, Op::T, Op::N),
            (2048, 512, 2048, Op::N, Op::T),
            (2048, 512, 2048, Op::N, Op::N),
            (2048, 8000, 512, Op::N, Op::T),
            (2048, 2048, 512, Op::N, Op::T),
            (2048, 2048, 512, Op::N, Op::N),
            (512, 512, 2048, Op::T, Op::N),
            (2048, 512, 512, Op::N, Op::T),
            (8000, 256, 4096, Op::T, Op::N),
            (4096, 256, 8000, Op::N, Op::N),
            (4096, 8000, 256, Op::N, Op::T),
            (1024, 256, 4096, Op::T, Op::N),
            (256, 1024, 4096, Op::T, Op::N),
            (4096, 256, 1024, Op::N, Op::N),
            (4096, 1024, 256, Op::N, Op::T),
            (4096, 256, 256, Op::N, Op::T),
        ];
        let (mut all_flops, mut all_secs, mut mul_secs) = (0.0, 0.0, 0.0);
        for (m, n, k, oa, ob) in shapes {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7919) % 1000) as f32 * 1e-3 - 0.5).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 104729) % 1000) as f32 * 1e-3 - 0.5).collect();
            let mut c = vec![0f32; m * n];
            let flops = 2.0 * (m * n * k) as f64;
            bf16::matmul_bf16(&mut c, &a, oa, &b, ob, m, n, k, false);
            let reps = (4e9 / flops).ceil() as usize;
            let mut best = f64::INFINITY;
            for _ in 0..3 {
                let t = thread_seconds();
                for _ in 0..reps {
                    bf16::matmul_bf16(&mut c, &a, oa, &b, ob, m, n, k, false);
                }
                best = best.min((thread_seconds() - t) / reps as f64);
            }
            all_flops += flops;
            all_secs += best;
            let [pa, pb, mul] = bf16::time_parts(thread_seconds, 3, &mut c, &a, oa, &b, ob, (m, n, k));
            mul_secs += mul;
            let label = format!("{}{} {m}x{n}x{k}", if oa == Op::T { "T" } else { "N" }, if ob == Op::T { "T" } else { "N" });
            println!(
                "  {label:<20} {:7.2} ms  {:6.0} GFLOP/s  {:4.0}% of peak | pack A {:5.2} ms, pack B {:5.2} ms, multiply {:6.0} GFLOP/s {:4.0}%",
                best * 1e3,
                flops / best / 1e9,
                100.0 * flops / best / 1e9 / peak,
                pa * 1e3,
                pb * 1e3,
                flops / mul / 1e9,
                100.0 * flops / mul / 1e9 / peak
            );
        }
        println!(
            "  all: {:.0} GFLOP/s, {:.0}% of peak; multiplying alone {:.0} GFLOP/s, {:.0}%",
            all_flops / all_secs / 1e9,
            100.0 * all_flops / all_secs / 1e9 / peak,
            all_flops / mul_secs / 1e9,
            100.0 * all_flops / mul_secs / 1e9 / peak
        );
    });
}
