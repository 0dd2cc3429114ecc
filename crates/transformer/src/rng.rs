//! Random numbers: a counter-based hash for dropout (the same mask for any thread count, regenerated
//! in the backward pass instead of stored) and a small sequential generator for initialisation.

/// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Identifies one dropout site in one training step; `factor(i)` decides element `i`.
///
/// Each 64-bit hash gives the 16-bit draws of 4 consecutive elements, so p is quantised to
/// 1/65536 (|error| ≤ 7.6e-6; 0.1 becomes 0.100006).
#[derive(Clone, Copy, Debug)]
pub struct DropoutMask {
    key: u64,
    /// Elements whose 16-bit draw is below this are dropped.
    threshold: u32,
    /// 1 / (1 − p), applied to kept elements.
    pub scale: f32,
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl DropoutMask {
    /// A mask for dropout probability `p` keyed by (seed, step, site). `p` must lie in [0, 1).
    pub fn new(p: f32, seed: u64, step: u64, site: u64) -> Self {
        assert!((0.0..1.0).contains(&p), "dropout probability {p} outside [0, 1)");
        let key = mix64(mix64(seed ^ 0x5851_f42d_4c95_7f2d).wrapping_add(step).wrapping_mul(GOLDEN) ^ mix64(site));
        DropoutMask { key, threshold: (p as f64 * 65536.0).round() as u32, scale: 1.0 / (1.0 - p) }
    }

    /// The probability actually applied: p quantised to 1/65536.
    pub fn effective_p(&self) -> f64 {
        self.threshold as f64 / 65536.0
    }

    #[inline(always)]
    fn group(&self, g: usize) -> u64 {
        mix64(self.key ^ (g as u64).wrapping_mul(GOLDEN))
    }

    #[inline(always)]
    fn decide(&self, bits: u64, lane: usize) -> f32 {
        if (((bits >> (16 * lane)) & 0xffff) as u32) < self.threshold {
            0.0
        } else {
            self.scale
        }
    }

    /// The multiplier of element `i`: 0 if dropped, `scale` if kept.
    #[inline(always)]
    pub fn factor(&self, i: usize) -> f32 {
        self.decide(self.group(i >> 2), i & 3)
    }

    /// out[j] = factor(i0 + j), one hash per 4 elements.
    #[inline(always)]
    pub fn fill(&self, i0: usize, out: &mut [f32]) {
        if i0.is_multiple_of(4) {
            // Aligned: whole groups of 4, a fixed-shape loop the compiler vectorises.
            let g0 = i0 >> 2;
            let done = out.len() & !3;
            let mut quads = out.chunks_exact_mut(4);
            for (g, q) in (&mut quads).enumerate() {
                let bits = self.group(g0 + g);
                for (l, o) in q.iter_mut().enumerate() {
                    *o = self.decide(bits, l);
                }
            }
            let rest = quads.into_remainder();
            if !rest.is_empty() {
                let bits = self.group((i0 + done) >> 2);
                for (l, o) in rest.iter_mut().enumerate() {
                    *o = self.decide(bits, l);
                }
            }
            return;
        }
        let end = i0 + out.len();
        let mut i = i0;
        let mut o = 0;
        while i < end {
            let bits = self.group(i >> 2);
            let lane0 = i & 3;
            let lanes = (4 - lane0).min(end - i);
            for l in lane0..lane0 + lanes {
                out[o] = self.decide(bits, l);
                o += 1;
            }
            i += lanes;
        }
    }

    /// Calls `f(j, factors)` for consecutive chunks of at most 64 factors covering elements
    /// [i0, i0 + n); `j` is the chunk's offset from i0.
    #[inline(always)]
    pub fn for_chunks(&self, i0: usize, n: usize, mut f: impl FnMut(usize, &[f32])) {
        let mut buf = [0f32; 64];
        let mut j = 0;
        while j < n {
            let w = (n - j).min(64);
            self.fill(i0 + j, &mut buf[..w]);
            f(j, &buf[..w]);
            j += w;
        }
    }
}

/// A small sequential generator (SplitMix64 stream) for parameter initialisation and synthetic data.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}
