//! Naive f64 twins of every CPU kernel: plain loops written straight from the equations, for tests
//! (finite-difference gradient checks, fused-vs-naive comparisons) and benchmarks only.
//!
//! Layouts match the fast kernels, but buffers are dense: q (B·T, H·K), k (B·S, H·K), v (B·S, H·V).
//! Dropout is an explicit multiplier array (0 or 1/(1−p)) so gradients can be checked through it.

use super::{AttnDims, Mask};

/// C (m, n) = A (m, k) · B (k, n), all row-major.
pub fn matmul(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0;
            for p in 0..k {
                s += a[i * k + p] * b[p * n + j];
            }
            c[i * n + j] = s;
        }
    }
    c
}

/// The transpose of a (rows, cols) matrix.
pub fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; a.len()];
    for i in 0..rows {
        for j in 0..cols {
            t[j * rows + i] = a[i * cols + j];
        }
    }
    t
}

/// y (m, n) = x (m, k) Wᵀ + b, W stored (n, k).
pub fn linear_forward(x: &[f64], w: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut y = matmul(x, &transpose(w, n, k), m, n, k);
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] += b[j];
        }
    }
    y
}

/// Gradients of [`linear_forward`]: (dx (m, k), dW (n, k), db (n)).
pub fn linear_backward(
    dy: &[f64],
    x: &[f64],
    w: &[f64],
    m: usize,
    n: usize,
    k: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let dx = matmul(dy, w, m, k, n);
    let dw = matmul(&transpose(dy, m, n), x, n, k, m);
    let mut db = vec![0.0; n];
    for i in 0..m {
        for j in 0..n {
            db[j] += dy[i * n + j];
        }
    }
    (dx, dw, db)
}

/// Saved values of [`residual_layer_norm_forward`].
pub struct LnSaved {
    /// The sum x + mask·y (M, D).
    pub s: Vec<f64>,
    /// Row means (M).
    pub mean: Vec<f64>,
    /// Row 1/√(var + ε) (M).
    pub rstd: Vec<f64>,
}

/// out = LN(x + mask ⊙ y) · gamma + beta, rows of width D.
pub fn residual_layer_norm_forward(
    x: &[f64],
    y: &[f64],
    mask: Option<&[f64]>,
    gamma: &[f64],
    beta: &[f64],
    eps: f64,
) -> (Vec<f64>, LnSaved) {
    let d = gamma.len();
    let m = x.len() / d;
    let s: Vec<f64> = (0..m * d).map(|i| x[i] + y[i] * mask.map_or(1.0, |mk| mk[i])).collect();
    let mut out = vec![0.0; m * d];
    let (mut mean, mut rstd) = (vec![0.0; m], vec![0.0; m]);
    for r in 0..m {
        let row = &s[r * d..(r + 1) * d];
        let mu = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / d as f64;
        let rs = 1.0 / (var + eps).sqrt();
        for j in 0..d {
            out[r * d + j] = (row[j] - mu) * rs * gamma[j] + beta[j];
        }
        mean[r] = mu;
        rstd[r] = rs;
    }
    (out, LnSaved { s, mean, rstd })
}

/// Gradients of [`residual_layer_norm_forward`]: (dx, dy, dgamma, dbeta).
pub fn residual_layer_norm_backward(
    dout: &[f64],
    saved: &LnSaved,
    mask: Option<&[f64]>,
    gamma: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let d = gamma.len();
    let m = dout.len() / d;
    let mut dx = vec![0.0; m * d];
    let (mut dg, mut db) = (vec![0.0; d], vec![0.0; d]);
    for r in 0..m {
        let (mu, rs) = (saved.mean[r], saved.rstd[r]);
        let xhat: Vec<f64> = (0..d).map(|j| (saved.s[r * d + j] - mu) * rs).collect();
        let g: Vec<f64> = (0..d).map(|j| dout[r * d + j] * gamma[j]).collect();
        let mg = g.iter().sum::<f64>() / d as f64;
        let mgx = g.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / d as f64;
        for j in 0..d {
            dx[r * d + j] = rs * (g[j] - mg - xhat[j] * mgx);
            dg[j] += dout[r * d + j] * xhat[j];
            db[j] += dout[r * d + j];
        }
    }
    let dy = (0..m * d).map(|i| dx[i] * mask.map_or(1.0, |mk| mk[i])).collect();
    (dx, dy, dg, db)
}

/// Attention forward: (out (B·T, H·V), probs (B, H, T, S)). `mask` (B, H, T, S) multiplies the weights.
pub fn attention_forward(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    key_lens: &[usize],
    attn_mask: Mask,
    mask: Option<&[f64]>,
    d: AttnDims,
) -> (Vec<f64>, Vec<f64>) {
    let (hk, hv) = (d.h * d.k, d.h * d.v);
    let scale = 1.0 / (d.k as f64).sqrt();
    let mut out = vec![0.0; d.b * d.t * hv];
    let mut probs = vec![0.0; d.b * d.h * d.t * d.s];
    for b in 0..d.b {
        for h in 0..d.h {
            for i in 0..d.t {
                let n = attn_mask.visible(key_lens[b], i);
                if n == 0 {
                    continue;
                }
                let scores: Vec<f64> = (0..n)
                    .map(|j| {
                        (0..d.k)
                            .map(|c| q[(b * d.t + i) * hk + h * d.k + c] * k[(b * d.s + j) * hk + h * d.k + c])
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                let base = ((b * d.h + h) * d.t + i) * d.s;
                for j in 0..n {
                    let p = (scores[j] - max).exp() / z;
                    probs[base + j] = p;
                    let pm = p * mask.map_or(1.0, |m| m[base + j]);
                    for c in 0..d.v {
                        out[(b * d.t + i) * hv + h * d.v + c] += pm * v[(b * d.s + j) * hv + h * d.v + c];
                    }
                }
            }
        }
    }
    (out, probs)
}

/// Attention backward: (dq, dk, dv) in the layouts of q, k, v.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    dout: &[f64],
    probs: &[f64],
    q: &[f64],
    k: &[f64],
    v: &[f64],
    key_lens: &[usize],
    attn_mask: Mask,
    mask: Option<&[f64]>,
    d: AttnDims,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (hk, hv) = (d.h * d.k, d.h * d.v);
    let scale = 1.0 / (d.k as f64).sqrt();
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    for b in 0..d.b {
        for h in 0..d.h {
            for i in 0..d.t {
                let n = attn_mask.visible(key_lens[b], i);
                let base = ((b * d.h + h) * d.t + i) * d.s;
                let go = |c: usize| dout[(b * d.t + i) * hv + h * d.v + c];
                let mut dp = vec![0.0; n];
                for j in 0..n {
                    let m = mask.map_or(1.0, |mk| mk[base + j]);
                    dp[j] = (0..d.v).map(|c| go(c) * v[(b * d.s + j) * hv + h * d.v + c]).sum::<f64>() * m;
                    for c in 0..d.v {
                        dv[(b * d.s + j) * hv + h * d.v + c] += probs[base + j] * m * go(c);
                    }
                }
                let sum: f64 = (0..n).map(|j| dp[j] * probs[base + j]).sum();
                for j in 0..n {
                    let ds = probs[base + j] * (dp[j] - sum) * scale;
                    for c in 0..d.k {
                        dq[(b * d.t + i) * hk + h * d.k + c] += ds * k[(b * d.s + j) * hk + h * d.k + c];
                        dk[(b * d.s + j) * hk + h * d.k + c] += ds * q[(b * d.t + i) * hk + h * d.k + c];
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}

/// Label-smoothed cross-entropy summed over non-padding rows, and ∂/∂logits of that sum:
/// (loss, nll, grad (M, V)); the smoothing spreads over every entry but `excluded`. See the fast
/// kernel for the definition.
pub fn softmax_xent(
    logits: &[f64],
    targets: &[u32],
    pad: u32,
    epsilon: f64,
    vocab: usize,
    excluded: &[u32],
) -> (f64, f64, Vec<f64>) {
    let support = (vocab - excluded.len()) as f64;
    let mut grad = vec![0.0; logits.len()];
    let (mut loss, mut nll) = (0.0, 0.0);
    for (r, &y) in targets.iter().enumerate() {
        if y == pad {
            continue;
        }
        let z = &logits[r * vocab..(r + 1) * vocab];
        let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        for vv in 0..vocab {
            let lp = z[vv] - lse;
            let smooth = if excluded.contains(&(vv as u32)) { 0.0 } else { epsilon / support };
            let q = smooth + if vv == y as usize { 1.0 - epsilon } else { 0.0 };
            if q > 0.0 {
                loss -= q * lp;
            }
            grad[r * vocab + vv] = lp.exp() - q;
        }
        nll -= z[y as usize] - lse;
    }
    (loss, nll, grad)
}

/// out (B·L, D) = mask ⊙ (table[tokens] · scale + positions[l]).
pub fn embedding_forward(
    tokens: &[u32],
    table: &[f64],
    positions: &[f64],
    seq_len: usize,
    d: usize,
    scale: f64,
    mask: Option<&[f64]>,
) -> Vec<f64> {
    let mut out = vec![0.0; tokens.len() * d];
    for (r, &t) in tokens.iter().enumerate() {
        for j in 0..d {
            let m = mask.map_or(1.0, |mk| mk[r * d + j]);
            out[r * d + j] = m * (table[t as usize * d + j] * scale + positions[(r % seq_len) * d + j]);
        }
    }
    out
}

/// Gradients of [`embedding_forward`]: (dtable, dpositions) with the shapes of table and positions.
#[allow(clippy::too_many_arguments)]
pub fn embedding_backward(
    dout: &[f64],
    tokens: &[u32],
    vocab: usize,
    pos_rows: usize,
    seq_len: usize,
    d: usize,
    scale: f64,
    mask: Option<&[f64]>,
) -> (Vec<f64>, Vec<f64>) {
    let (mut dt, mut dp) = (vec![0.0; vocab * d], vec![0.0; pos_rows * d]);
    for (r, &t) in tokens.iter().enumerate() {
        for j in 0..d {
            let g = dout[r * d + j] * mask.map_or(1.0, |mk| mk[r * d + j]);
            dt[t as usize * d + j] += g * scale;
            dp[(r % seq_len) * d + j] += g;
        }
    }
    (dt, dp)
}

/// The character-level word encoder (see `kernels::cpu::char_cnn`): for word w (characters
/// `chars[offsets[w]..offsets[w + 1]]`, ids into `emb` (·, dc)), out[w, j] = max(0, max over
/// windows t of b[j] + Σ_{k < width, m < dc} emb[chars[t + k], m] · w[(k·dc + m), j]).
#[allow(clippy::too_many_arguments)]
pub fn char_cnn_forward(
    chars: &[u32],
    offsets: &[usize],
    emb: &[f64],
    w: &[f64],
    b: &[f64],
    dc: usize,
    width: usize,
    d: usize,
) -> Vec<f64> {
    let words = offsets.len() - 1;
    let mut out = vec![0.0; words * d];
    for word in 0..words {
        let cs = &chars[offsets[word]..offsets[word + 1]];
        for j in 0..d {
            let windows = (0..=cs.len() - width).map(|t| char_window(cs, t, j, emb, w, b[j], dc, width, d));
            out[word * d + j] = windows.fold(0.0f64, f64::max);
        }
    }
    out
}

/// Filter j's pre-activation at window t of the characters `cs`: bias + Σ_{k, m} emb · w.
#[allow(clippy::too_many_arguments)]
fn char_window(
    cs: &[u32],
    t: usize,
    j: usize,
    emb: &[f64],
    w: &[f64],
    bias: f64,
    dc: usize,
    width: usize,
    d: usize,
) -> f64 {
    let mut h = bias;
    for k in 0..width {
        for m in 0..dc {
            h += emb[cs[t + k] as usize * dc + m] * w[(k * dc + m) * d + j];
        }
    }
    h
}

/// Gradients of [`char_cnn_forward`] from `dout`: (demb, dw, db). The maximum's window (the
/// first, on ties) takes each filter's gradient; none where the maximum is ≤ 0.
#[allow(clippy::too_many_arguments)]
pub fn char_cnn_backward(
    dout: &[f64],
    chars: &[u32],
    offsets: &[usize],
    emb: &[f64],
    w: &[f64],
    b: &[f64],
    dc: usize,
    width: usize,
    d: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut de, mut dw, mut db) = (vec![0.0; emb.len()], vec![0.0; w.len()], vec![0.0; d]);
    for word in 0..offsets.len() - 1 {
        let cs = &chars[offsets[word]..offsets[word + 1]];
        for j in 0..d {
            let (mut best, mut arg) = (0.0f64, None);
            for t in 0..=cs.len() - width {
                let h = char_window(cs, t, j, emb, w, b[j], dc, width, d);
                if h > best {
                    (best, arg) = (h, Some(t));
                }
            }
            let Some(t) = arg else { continue };
            let g = dout[word * d + j];
            db[j] += g;
            for k in 0..width {
                for m in 0..dc {
                    let c = cs[t + k] as usize;
                    dw[(k * dc + m) * d + j] += emb[c * dc + m] * g;
                    de[c * dc + m] += w[(k * dc + m) * d + j] * g;
                }
            }
        }
    }
    (de, dw, db)
}

/// max(x, 0) and its backward.
pub fn relu_forward(x: &[f64]) -> Vec<f64> {
    x.iter().map(|v| v.max(0.0)).collect()
}

/// dh ⊙ [h > 0].
pub fn relu_backward(dh: &[f64], h: &[f64]) -> Vec<f64> {
    dh.iter().zip(h).map(|(d, h)| if *h > 0.0 { *d } else { 0.0 }).collect()
}

/// act(x) in f64, each from its definition: ReLU max(x, 0); swish x·σ(x); GELU x·Φ(x) =
/// ½·x·erfc(−x/√2) with [`erfc_reference`];
/// GELU's tanh form as written; Marian's GELU x·σ(1.702x).
pub fn activation_forward(x: &[f64], act: crate::config::Activation) -> Vec<f64> {
    use crate::config::Activation::*;
    x.iter()
        .map(|&x| match act {
            Relu => x.max(0.0),
            Swish => x / (1.0 + (-x).exp()),
            Gelu => 0.5 * x * erfc_reference(-x / std::f64::consts::SQRT_2),
            GeluTanh => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh()),
            GeluSigmoid => x / (1.0 + (-1.702 * x).exp()),
        })
        .collect()
}

/// dL/dz = dL/dact · act'(z) for pre-activations `z`, in f64, each derivative from its closed
/// form: ReLU [z > 0]; swish σ(z)·(1 + z·(1 − σ(z))); GELU Φ(z) + z·φ(z) with Φ from
/// [`erfc_reference`]; the tanh form ½(1 + tanh u) + ½·z·(1 − tanh² u)·u′, u = √(2/π)(z +
/// 0.044715z³); x·σ(1.702x) as swish at 1.702x.
pub fn activation_backward(dy: &[f64], z: &[f64], act: crate::config::Activation) -> Vec<f64> {
    use crate::config::Activation::*;
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    let c = (2.0 / std::f64::consts::PI).sqrt();
    dy.iter()
        .zip(z)
        .map(|(&d, &z)| {
            let slope = match act {
                Relu => (z > 0.0) as u8 as f64,
                Swish => sigmoid(z) * (1.0 + z * (1.0 - sigmoid(z))),
                Gelu => {
                    let pdf = (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
                    0.5 * erfc_reference(-z / std::f64::consts::SQRT_2) + z * pdf
                }
                GeluTanh => {
                    let t = (c * (z + 0.044715 * z.powi(3))).tanh();
                    0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * z * z)
                }
                GeluSigmoid => {
                    let s = sigmoid(1.702 * z);
                    s * (1.0 + 1.702 * z * (1.0 - s))
                }
            };
            d * slope
        })
        .collect()
}

/// erfc(z) = 1 − erf(z), by an independent route from the kernel's Chebyshev fit: for |z| ≤ 3,
/// 1 − the Taylor series 2/√π · Σ (−1)ⁿ z^(2n+1) / (n! (2n+1)); beyond, the continued fraction
/// erfc(z) = e^(−z²)/√π · 1/(z + ½/(z + 1/(z + 3⁄2/(z + …)))) (relative accuracy in the tail), and
/// erfc(−z) = 2 − erfc(z).
pub fn erfc_reference(z: f64) -> f64 {
    if z.abs() <= 3.0 {
        let (mut term, mut sum, mut n) = (z, z, 0.0);
        while term.abs() > 1e-18 * sum.abs().max(1e-300) {
            n += 1.0;
            term *= -z * z / n;
            sum += term / (2.0 * n + 1.0);
        }
        return 1.0 - sum * 2.0 / std::f64::consts::PI.sqrt();
    }
    let a = z.abs();
    let mut k = a;
    for n in (1..=200).rev() {
        k = a + (n as f64 / 2.0) / k;
    }
    let tail = (-a * a).exp() / (std::f64::consts::PI.sqrt() * k);
    if z > 0.0 {
        tail
    } else {
        2.0 - tail
    }
}

/// The sinusoid table (max_len, d) in f64 for each [`crate::config::SinusoidLayout`], from its
/// definition.
pub fn sinusoids(max_len: usize, d: usize, layout: crate::config::SinusoidLayout) -> Vec<f64> {
    use crate::config::SinusoidLayout::*;
    let mut t = vec![0.0; max_len * d];
    let half = d / 2;
    for pos in 0..max_len {
        for i in 0..half {
            let p = pos as f64;
            let angle = match layout {
                Interleaved | Halves => p / 10000f64.powf(2.0 * i as f64 / d as f64),
                Marian => p * (-(i as f64) * 10000f64.ln() / (half as f64 - 1.0)).exp(),
            };
            let (s, c) = match layout {
                Interleaved => (2 * i, 2 * i + 1),
                Halves | Marian => (i, half + i),
            };
            t[pos * d + s] = angle.sin();
            t[pos * d + c] = angle.cos();
        }
    }
    t
}

/// One Adam step in f64, as textbook: m̂ = m/(1−β1^t), v̂ = v/(1−β2^t), p −= lr·m̂/(√v̂ + ε).
#[allow(clippy::too_many_arguments)]
pub fn adam_update(
    p: &mut [f64],
    g: &[f64],
    m: &mut [f64],
    v: &mut [f64],
    beta1: f64,
    beta2: f64,
    eps: f64,
    lr: f64,
    t: u64,
) {
    for i in 0..p.len() {
        m[i] = beta1 * m[i] + (1.0 - beta1) * g[i];
        v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];
        let mh = m[i] / (1.0 - beta1.powi(t as i32));
        let vh = v[i] / (1.0 - beta2.powi(t as i32));
        p[i] -= lr * mh / (vh.sqrt() + eps);
    }
}

/// out (rows, D) = table[tokens[r]] · scale + position (one decoder step, no dropout).
pub fn embedding_step(tokens: &[u32], table: &[f64], position: &[f64], d: usize, scale: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(tokens.len() * d);
    for &t in tokens {
        for j in 0..d {
            out.push(table[t as usize * d + j] * scale + position[j]);
        }
    }
    out
}

/// One query row attending to `n` keys and values given row by row: keys[j] (H·K), values[j]
/// (H·V). Returns (H·V); zeros with no keys.
pub fn cached_attention(
    q: &[f64],
    keys: &[Vec<f64>],
    values: &[Vec<f64>],
    heads: usize,
    dk: usize,
    dv: usize,
) -> Vec<f64> {
    let mut out = vec![0.0; heads * dv];
    let n = keys.len();
    for h in 0..heads {
        let scores: Vec<f64> = (0..n)
            .map(|j| (0..dk).map(|i| q[h * dk + i] * keys[j][h * dk + i]).sum::<f64>() / (dk as f64).sqrt())
            .collect();
        let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = scores.iter().map(|s| (s - mx).exp()).sum();
        for j in 0..n {
            let p = (scores[j] - mx).exp() / z;
            for i in 0..dv {
                out[h * dv + i] += p * values[j][h * dv + i];
            }
        }
    }
    out
}

/// log Σ exp(row); NaN when the row holds a NaN or an infinity.
pub fn log_sum_exp(row: &[f64]) -> f64 {
    if row.iter().any(|x| !x.is_finite()) {
        return f64::NAN;
    }
    let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    mx + row.iter().map(|x| (x - mx).exp()).sum::<f64>().ln()
}

/// The `k` best next tokens of a row by a full sort: (score − norm, token), best first, ties by
/// lower id, NaN as −∞, never PAD or BOS (nor UNK when `no_unk`); only EOS when `eos_only`. The scores are f32 and the
/// subtraction is done in f32, as the search does.
pub fn top_k(row: &[f32], norm: f32, k: usize, eos_only: bool, no_unk: bool) -> Vec<(f64, u32)> {
    let key = |x: f32| if (x - norm).is_nan() { f64::NEG_INFINITY } else { (x - norm) as f64 };
    if eos_only {
        return vec![(key(row[crate::vocab::EOS as usize]), crate::vocab::EOS)];
    }
    let mut all: Vec<(f64, u32)> = (0..row.len() as u32)
        .filter(|&j| j != crate::vocab::PAD && j != crate::vocab::BOS && !(no_unk && j == crate::vocab::UNK))
        .map(|j| (key(row[j as usize]), j))
        .collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    all.truncate(k);
    all
}

/// The int8 quantisation rule, written plainly: scale max|x| / 127 (0 for a zero row or one whose
/// largest magnitude is subnormal, NaN if any value is NaN or infinite), codes x · (127 / max|x|)
/// rounded to nearest (ties to even) in −127..=127.
pub fn quantize_row_int8(x: &[f32]) -> (Vec<i8>, f32) {
    if x.iter().any(|v| !v.is_finite()) {
        return (vec![0; x.len()], f32::NAN);
    }
    let amax = x.iter().map(|v| v.abs()).fold(0.0f32, f32::max);
    if amax < f32::MIN_POSITIVE {
        return (vec![0; x.len()], 0.0);
    }
    let inv = 127.0 / amax;
    let q = x.iter().map(|&v| (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8).collect();
    (q, amax / 127.0)
}

/// Twin of `int8::QuantizedLinear::forward`: W (n, k) quantised per row, X (m, k) per row, sums in
/// i64, y = sum · (sx · sw) + b.
pub fn linear_int8(x: &[f32], w: &[f32], b: Option<&[f32]>, m: usize, n: usize, k: usize) -> Vec<f32> {
    let qw: Vec<(Vec<i8>, f32)> = (0..n).map(|j| quantize_row_int8(&w[j * k..(j + 1) * k])).collect();
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        let (qx, sx) = quantize_row_int8(&x[i * k..(i + 1) * k]);
        for j in 0..n {
            let (qwj, sw) = &qw[j];
            let s: i64 = (0..k).map(|p| qx[p] as i64 * qwj[p] as i64).sum();
            y[i * n + j] = s as f32 * (sx * sw) + b.map_or(0.0, |b| b[j]);
        }
    }
    y
}

/// Guided alignment's loss and its gradients for one sentence and one head, from the queries
/// `q` (T, K) and keys `k` (S, K): P = softmax(q kᵀ / √K) over the first `key_len` keys,
/// L = −w Σ A ⊙ ln(P + ε) with A (T, S) the guide. Returns (L, dq, dk). The naive twin of
/// `kernels::cpu::guided`.
#[allow(clippy::too_many_arguments)]
pub fn guided_alignment(
    q: &[f64],
    k: &[f64],
    guide: &[f64],
    t: usize,
    s: usize,
    dk_width: usize,
    key_len: usize,
    weight: f64,
) -> (f64, Vec<f64>, Vec<f64>) {
    let eps = crate::kernels::cpu::guided::EPSILON as f64;
    let scale = 1.0 / (dk_width as f64).sqrt();
    let (mut loss, mut dq, mut dk) = (0.0, vec![0.0; t * dk_width], vec![0.0; s * dk_width]);
    for i in 0..t {
        let scores: Vec<f64> = (0..key_len)
            .map(|j| (0..dk_width).map(|c| q[i * dk_width + c] * k[j * dk_width + c]).sum::<f64>() * scale)
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = scores.iter().map(|x| (x - max).exp()).sum();
        let p: Vec<f64> = scores.iter().map(|x| (x - max).exp() / z).collect();
        // dL/dP, then through the softmax: dL/dscore_j = P_j (dP_j − Σ P dP).
        let dp: Vec<f64> = (0..key_len).map(|j| -weight * guide[i * s + j] / (p[j] + eps)).collect();
        for j in 0..key_len {
            loss -= weight * guide[i * s + j] * (p[j] + eps).ln();
        }
        let sum: f64 = (0..key_len).map(|j| p[j] * dp[j]).sum();
        for j in 0..key_len {
            let g = p[j] * (dp[j] - sum) * scale;
            for c in 0..dk_width {
                dq[i * dk_width + c] += g * k[j * dk_width + c];
                dk[j * dk_width + c] += g * q[i * dk_width + c];
            }
        }
    }
    (loss, dq, dk)
}
