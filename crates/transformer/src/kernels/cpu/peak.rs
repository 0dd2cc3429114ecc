//! The arithmetic peak of this machine's product units, measured: every worker thread runs a loop
//! of independent fused multiply-adds (no memory traffic) for a fixed count, and the FLOPs over the
//! wall time is the ceiling a matrix product could reach. `bench train-step --profile` reports each
//! product shape's rate as a share of it.

use std::arch::x86_64::*;
use std::time::Instant;

/// Which instruction the peak is measured for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeakOf {
    /// f32 `vfmadd` on 512-bit registers (AVX-512F), or 256-bit (AVX2 + FMA) where that is all
    /// there is.
    F32Fma,
    /// bf16 pair dot products `vdpbf16ps` on 512-bit registers (AVX512-BF16).
    Bf16Dot,
    /// AMX bf16 tile products `tdpbf16ps` (16 × 32 by 32 × 16, 16,384 FLOPs each).
    AmxBf16,
    /// AMX int8 tile products `tdpbusd` (16 × 64 by 64 × 16, 32,768 integer operations each,
    /// reported as GOP/s).
    AmxInt8,
}

/// Independent accumulators per thread: enough to cover the instruction latency.
const ACC: usize = 16;

/// The arithmetic ceiling of the unit a matrix product runs on, over all rayon worker threads at
/// once, with the unit's name: f32 FMA, or at bf16 `vdpbf16ps` or AMX tiles (whichever
/// [`super::bf16::unit`] picks); `None` where it is not measured (bf16 without a bf16 unit).
/// Takes about 0.1–0.2 s.
pub fn product_peak(bf16: bool) -> Option<(&'static str, f64)> {
    use super::bf16::Unit;
    match (bf16, super::bf16::unit()) {
        (false, _) => peak_gflops(PeakOf::F32Fma, 20_000_000).map(|p| ("f32 FMA", p)),
        (true, Ok(Unit::Avx512Bf16)) => peak_gflops(PeakOf::Bf16Dot, 20_000_000).map(|p| ("vdpbf16ps", p)),
        (true, Ok(Unit::Amx)) => peak_gflops(PeakOf::AmxBf16, 20_000_000).map(|p| ("AMX tdpbf16ps", p)),
        (true, Err(_)) => None,
    }
}

/// GFLOP/s of `which` over all rayon worker threads at once, or `None` where the CPU lacks it.
/// Runs `iters` rounds of 16 instructions per thread, in three timings of a third each, and
/// keeps the fastest (2·10⁷ rounds take about 0.1–0.2 s; the AMX loops run a 64th as many
/// rounds, each instruction doing 256 or 512 times the work).
pub fn peak_gflops(which: PeakOf, iters: usize) -> Option<f64> {
    let (flops_per_op, run): (f64, fn(usize) -> f32) = match which {
        PeakOf::AmxBf16 | PeakOf::AmxInt8 if super::bf16::amx_available().is_ok() => {
            let int8 = which == PeakOf::AmxInt8;
            if int8 && super::int8::amx_int8_available().is_err() {
                return None;
            }
            // `run(n)` issues 6 · (n / 64) instructions; `best_of_three` counts ACC = 16 per
            // round, hence the factor 6 / (16 · 64).
            let flops = if int8 { 2.0 * 16.0 * 16.0 * 64.0 } else { 2.0 * 16.0 * 16.0 * 32.0 };
            let run: fn(usize) -> f32 = if int8 {
                |n| {
                    // SAFETY: AMX tile state granted and amx-int8 present (checked above).
                    unsafe { amx_loop::<true>(n / 64) }
                }
            } else {
                |n| {
                    // SAFETY: AMX tile state granted (checked above).
                    unsafe { amx_loop::<false>(n / 64) }
                }
            };
            return best_of_three(flops * 6.0 / (ACC as f64 * 64.0), run, iters);
        }
        PeakOf::Bf16Dot if super::bf16::avx512_bf16_available().is_ok() => (64.0, |n| {
            // SAFETY: avx512f/bw/bf16 checked just above.
            unsafe { bf16_loop(n) }
        }),
        PeakOf::F32Fma if is_x86_feature_detected!("avx512f") => (32.0, |n| {
            // SAFETY: avx512f checked just above.
            unsafe { f32_loop_512(n) }
        }),
        PeakOf::F32Fma if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") => (16.0, |n| {
            // SAFETY: avx2 and fma checked just above.
            unsafe { f32_loop_256(n) }
        }),
        _ => return None,
    };
    best_of_three(flops_per_op, run, iters)
}

/// Runs `run(iters / 3)` on every worker thread at once, three times, after a warm-up; the
/// fastest gives `flops_per_op · ACC · rounds · threads` over its time, in G/s.
fn best_of_three(flops_per_op: f64, run: fn(usize) -> f32, iters: usize) -> Option<f64> {
    let threads = rayon::current_num_threads();
    // Warm the clocks up first.
    run(iters / 10);
    // The best of three: a neighbour on a shared machine can only slow a run down.
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let start = Instant::now();
        // `broadcast` runs the loop once on every thread of the pool, at once (a parallel
        // iterator over `threads` items may run two of them on one thread, which once measured
        // half the peak).
        let sink: f32 = rayon::broadcast(|_| run(iters / 3)).into_iter().sum();
        best = best.min(start.elapsed().as_secs_f64());
        std::hint::black_box(sink);
    }
    Some(flops_per_op * (ACC * (iters / 3) * threads) as f64 / best / 1e9)
}

#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
fn bf16_loop(iters: usize) -> f32 {
    let mut acc = [_mm512_setzero_ps(); ACC];
    // bf16 1.0 in every lane of a, a tiny value in b: the sums stay finite and normal.
    // SAFETY: __m512i and __m512bh are both 64-byte vectors; every bit pattern is a valid bf16 pair.
    let a: __m512bh = unsafe { std::mem::transmute(_mm512_set1_epi32(0x3f80_3f80)) };
    // SAFETY: as above.
    let b: __m512bh = unsafe { std::mem::transmute(_mm512_set1_epi32(std::hint::black_box(0x2f80_2f80))) };
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_dpbf16_ps(*x, a, b);
        }
    }
    let total = acc.iter().fold(_mm512_setzero_ps(), |s, &x| _mm512_add_ps(s, x));
    _mm512_reduce_add_ps(total)
}

/// `rounds` rounds of six tile products (`tdpbusd` if `INT8`, else `tdpbf16ps`) into six
/// independent accumulator tiles (tmm0..tmm5; six chains of 16-cycle issue cover the instruction's
/// latency) from two operand tiles of zeros: no memory traffic inside the loop.
///
/// # Safety
/// The AMX tile state is granted to this process, and for `INT8` the CPU has AMX-INT8.
unsafe fn amx_loop<const INT8: bool>(rounds: usize) -> f32 {
    use std::arch::asm;
    let config = super::bf16::tile_config();
    // SAFETY: the caller's contract; the configuration is 64 aligned bytes; the loop reads and
    // writes no memory.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) config.as_ptr(), options(nostack, readonly));
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "tilezero tmm4",
            "tilezero tmm5",
            "tilezero tmm6",
            "tilezero tmm7",
            options(nostack, nomem)
        );
        for _ in 0..rounds {
            // Six instructions, one on each chain.
            if INT8 {
                asm!(
                    "tdpbusd tmm0, tmm6, tmm7",
                    "tdpbusd tmm1, tmm6, tmm7",
                    "tdpbusd tmm2, tmm6, tmm7",
                    "tdpbusd tmm3, tmm6, tmm7",
                    "tdpbusd tmm4, tmm6, tmm7",
                    "tdpbusd tmm5, tmm6, tmm7",
                    options(nostack, nomem)
                );
            } else {
                asm!(
                    "tdpbf16ps tmm0, tmm6, tmm7",
                    "tdpbf16ps tmm1, tmm6, tmm7",
                    "tdpbf16ps tmm2, tmm6, tmm7",
                    "tdpbf16ps tmm3, tmm6, tmm7",
                    "tdpbf16ps tmm4, tmm6, tmm7",
                    "tdpbf16ps tmm5, tmm6, tmm7",
                    options(nostack, nomem)
                );
            }
        }
        asm!("tilerelease", options(nostack, nomem));
    }
    rounds as f32
}

#[target_feature(enable = "avx512f")]
fn f32_loop_512(iters: usize) -> f32 {
    let mut acc = [_mm512_setzero_ps(); ACC];
    let a = _mm512_set1_ps(std::hint::black_box(0.999_999));
    let b = _mm512_set1_ps(1e-7);
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    let total = acc.iter().fold(_mm512_setzero_ps(), |s, &x| _mm512_add_ps(s, x));
    _mm512_reduce_add_ps(total)
}

#[target_feature(enable = "avx2,fma")]
fn f32_loop_256(iters: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); ACC];
    let a = _mm256_set1_ps(std::hint::black_box(0.999_999));
    let b = _mm256_set1_ps(1e-7);
    for _ in 0..iters {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let mut lanes = [0f32; 8];
    let total = acc.iter().fold(_mm256_setzero_ps(), |s, &x| _mm256_add_ps(s, x));
    // SAFETY: `lanes` holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), total) };
    lanes.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_are_positive_where_the_unit_exists() {
        // The f32 loop runs on every x86-64 CPU this project supports (AVX2 at least).
        let f32_peak = peak_gflops(PeakOf::F32Fma, 100_000).expect("an AVX2 or AVX-512 CPU");
        assert!(f32_peak.is_finite() && f32_peak > 1.0, "f32 peak {f32_peak}");
        match peak_gflops(PeakOf::Bf16Dot, 100_000) {
            Some(p) => assert!(p.is_finite() && p > 1.0, "bf16 peak {p}"),
            None => assert!(crate::kernels::cpu::bf16::avx512_bf16_available().is_err()),
        }
        // The tile unit: measured where the CPU has it (and then far above the FMA peak: one
        // `tdpbf16ps` is 16,384 FLOPs), refused where it does not.
        for (which, avail) in [
            (PeakOf::AmxBf16, crate::kernels::cpu::bf16::amx_available().is_ok()),
            (PeakOf::AmxInt8, crate::kernels::cpu::int8::amx_int8_available().is_ok()),
        ] {
            match peak_gflops(which, 640_000) {
                Some(p) => {
                    assert!(avail, "{which:?} measured on a CPU without it");
                    assert!(p.is_finite() && p > 2.0 * f32_peak, "{which:?} peak {p} against f32 {f32_peak}");
                }
                None => {
                    assert!(!avail, "{which:?} not measured on a CPU with it");
                    eprintln!("skipped: no {which:?} on this CPU");
                }
            }
        }
    }
}
