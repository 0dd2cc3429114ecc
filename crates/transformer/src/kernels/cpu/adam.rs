//! §5.3 Adam (β1 0.9, β2 0.98, ε 1e-9), with bias correction, in PyTorch's formulation.

use multiversion::multiversion;
use rayon::prelude::*;

/// Adam's constants.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamConfig {
    /// β1.
    pub beta1: f32,
    /// β2.
    pub beta2: f32,
    /// ε.
    pub eps: f32,
}

impl AdamConfig {
    /// The paper's values.
    pub const fn paper() -> Self {
        AdamConfig { beta1: 0.9, beta2: 0.98, eps: 1e-9 }
    }
}

/// One Adam update of step `t` (1-based) at learning rate `lr`:
/// m ← β1 m + (1−β1) g; v ← β2 v + (1−β2) g²; p ← p − lr/(1−β1^t) · m / (√v/√(1−β2^t) + ε).
/// Returns whether every updated parameter is finite (checked per chunk while it is in cache).
#[must_use = "an update that overflowed leaves non-finite parameters"]
pub fn adam_update(
    params: &mut [f32],
    grads: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    cfg: AdamConfig,
    lr: f32,
    t: u64,
) -> bool {
    let _t = super::profile::scope(super::profile::Slot::Adam);
    assert!(t >= 1);
    let n = params.len();
    assert!(grads.len() == n && m.len() == n && v.len() == n);
    let bc1 = 1.0 - (cfg.beta1 as f64).powi(t as i32);
    let bc2 = 1.0 - (cfg.beta2 as f64).powi(t as i32);
    let step = (lr as f64 / bc1) as f32;
    let inv_sqrt_bc2 = (1.0 / bc2.sqrt()) as f32;
    const CHUNK: usize = 1 << 14;
    params
        .par_chunks_mut(CHUNK)
        .zip(grads.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
        .map(|((p, g), (m, v))| {
            adam_chunk(p, g, m, v, cfg, step, inv_sqrt_bc2);
            super::elementwise::row_is_finite(p)
        })
        .reduce(|| true, |a, b| a && b)
}

#[multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512dq+avx512vl+avx2+fma+bmi1+bmi2+lzcnt+popcnt",
    "x86_64+avx2+fma"
))]
fn adam_chunk(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], cfg: AdamConfig, step: f32, inv_sqrt_bc2: f32) {
    let (b1, b2) = (cfg.beta1, cfg.beta2);
    for i in 0..p.len() {
        let gi = g[i];
        let mi = b1 * m[i] + (1.0 - b1) * gi;
        let vi = b2 * v[i] + (1.0 - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= step * mi / (vi.sqrt() * inv_sqrt_bc2 + cfg.eps);
    }
}
