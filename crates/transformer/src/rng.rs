//! Random numbers: a counter-based hash for dropout (the same mask for any thread count, regenerated
//! in the backward pass instead of stored) and a small sequential generator for initialisation.

/// SplitMix64 finaliser: a bijective 64-bit mix with good avalanche.
#[inline(always)]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Identifies one dropout site in one training step; `keep(i)` decides element `i`.
#[derive(Clone, Copy, Debug)]
pub struct DropoutMask {
    key: u64,
    /// Elements whose 32-bit draw is below this are dropped.
    threshold: u32,
    /// 1 / (1 - p), applied to kept elements.
    pub scale: f32,
}

impl DropoutMask {
    /// A mask for dropout probability `p` keyed by (seed, step, site). `p` must lie in [0, 1).
    pub fn new(p: f32, seed: u64, step: u64, site: u64) -> Self {
        assert!(
            (0.0..1.0).contains(&p),
            "dropout probability {p} outside [0, 1)"
        );
        let key = mix64(
            mix64(seed ^ 0x5851_f42d_4c95_7f2d)
                .wrapping_add(step)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ^ mix64(site),
        );
        DropoutMask {
            key,
            threshold: (p as f64 * 4294967296.0).round() as u32,
            scale: 1.0 / (1.0 - p),
        }
    }

    /// The multiplier of element `i`: 0 if dropped, `scale` if kept.
    #[inline(always)]
    pub fn factor(&self, i: usize) -> f32 {
        let r = mix64(self.key ^ (i as u64 >> 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let draw = if i & 1 == 0 {
            r as u32
        } else {
            (r >> 32) as u32
        };
        if draw < self.threshold {
            0.0
        } else {
            self.scale
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
