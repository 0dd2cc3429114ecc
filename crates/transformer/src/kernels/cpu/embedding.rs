//! §3.4–3.5 Token embeddings scaled by √d_model plus positions, with dropout; the backward scatters
//! into the one shared embedding matrix (tied three ways).

use crate::config::SinusoidLayout;
use crate::rng::DropoutMask;
use rayon::prelude::*;

/// An embedding table (V, D) as a lookup reads it: row-major, or the output projection's packed
/// panels (`PackedLinear::rows`), which then need no second copy.
#[derive(Clone, Copy, Debug)]
pub enum Rows<'a> {
    /// (V, D) row-major.
    Dense(&'a [f32]),
    /// ceil(n / nr) panels of k × nr: row i is column i % nr of panel i / nr.
    Panels {
        /// The panels.
        data: &'a [f32],
        /// Row width (D).
        k: usize,
        /// Columns per panel.
        nr: usize,
        /// Rows (V).
        n: usize,
    },
}

impl Rows<'_> {
    /// Rows in the table, each `d` wide.
    pub fn count(&self, d: usize) -> usize {
        match *self {
            Rows::Dense(t) => t.len() / d,
            Rows::Panels { k, n, .. } => {
                assert_eq!(k, d, "embedding rows are {k} wide, not {d}");
                n
            }
        }
    }

    /// out = row i, exactly (out is the row's width).
    pub fn copy_row(&self, i: usize, out: &mut [f32]) {
        let d = out.len();
        match *self {
            Rows::Dense(t) => out.copy_from_slice(&t[i * d..][..d]),
            Rows::Panels { data, nr, .. } => {
                let panel = &data[(i / nr) * d * nr..][..d * nr];
                for (j, o) in out.iter_mut().enumerate() {
                    *o = panel[j * nr + i % nr];
                }
            }
        }
    }

    /// out = row i × scale + add, element by element (the same arithmetic whichever layout).
    #[inline]
    fn scaled_row(&self, i: usize, out: &mut [f32], scale: f32, add: &[f32]) {
        let d = out.len();
        match *self {
            Rows::Dense(t) => {
                let e = &t[i * d..][..d];
                for j in 0..d {
                    out[j] = e[j] * scale + add[j];
                }
            }
            Rows::Panels { data, nr, .. } => {
                let panel = &data[(i / nr) * d * nr..][..d * nr];
                let col = i % nr;
                for j in 0..d {
                    out[j] = panel[j * nr + col] * scale + add[j];
                }
            }
        }
    }
}

/// out (B·L, D) = Dropout(table[tokens] · scale + positions[l]) for row b·L + l.
/// `positions` is (≥ L, D): the sinusoid table or the learned one.
#[allow(clippy::too_many_arguments)]
pub fn embedding_forward(
    out: &mut [f32],
    tokens: &[u32],
    table: Rows,
    positions: &[f32],
    seq_len: usize,
    d: usize,
    scale: f32,
    dropout: Option<DropoutMask>,
) {
    let _t = super::profile::scope(super::profile::Slot::Embedding);
    assert!(d > 0, "embedding_forward: zero width");
    assert_eq!(Some(out.len()), tokens.len().checked_mul(d));
    if tokens.is_empty() {
        return;
    }
    let needed = seq_len.checked_mul(d);
    assert!(seq_len > 0 && needed.is_some_and(|n| positions.len() >= n), "position table shorter than the sequence");
    let vocab = table.count(d);
    assert!(tokens.iter().all(|&t| (t as usize) < vocab), "a token id is outside the vocabulary of {vocab}");
    out.par_chunks_mut(d).enumerate().for_each(|(r, o)| {
        let p = &positions[(r % seq_len) * d..(r % seq_len + 1) * d];
        table.scaled_row(tokens[r] as usize, o, scale, p);
        if let Some(mask) = dropout {
            mask.for_chunks(r * d, d, |j0, f| {
                for (t, &f) in f.iter().enumerate() {
                    o[j0 + t] *= f;
                }
            });
        }
    });
}

/// dtable += scatter(tokens, dout · mask · scale); dpositions (if learned) += Σ_b dout · mask.
/// Tasks own column blocks and visit rows in order, so repeated tokens add up deterministically.
#[allow(clippy::too_many_arguments)]
pub fn embedding_backward(
    dtable: &mut [f32],
    dpositions: Option<&mut [f32]>,
    dout: &[f32],
    tokens: &[u32],
    seq_len: usize,
    d: usize,
    scale: f32,
    dropout: Option<DropoutMask>,
) {
    let _t = super::profile::scope(super::profile::Slot::Embedding);
    const CB: usize = 64;
    assert!(d > 0 && seq_len > 0, "embedding_backward: empty width or sequence");
    assert_eq!(Some(dout.len()), tokens.len().checked_mul(d));
    assert_eq!(dtable.len() % d, 0);
    assert_eq!(tokens.len() % seq_len, 0, "embedding_backward: rows not a multiple of the sequence length");
    let vocab = dtable.len() / d;
    for &t in tokens {
        assert!((t as usize) < vocab, "token id {t} outside the vocabulary of {vocab}");
    }
    let table = SharedMut(dtable.as_mut_ptr());
    let positions = dpositions.map(|p| {
        assert!(seq_len.checked_mul(d).is_some_and(|n| p.len() >= n), "position table shorter than the sequence");
        SharedMut(p.as_mut_ptr())
    });
    (0..d.div_ceil(CB)).into_par_iter().for_each(|cb| {
        let (c0, w) = (cb * CB, CB.min(d - cb * CB));
        // SAFETY: task cb writes only columns [c0, c0 + w) of each row, disjoint from every other
        // task; token ids and positions were checked against the buffer sizes above.
        unsafe {
            scatter_block(&table, dout, tokens, d, c0, w, scale, dropout, |r| tokens[r] as usize);
            if let Some(pos) = &positions {
                scatter_block(pos, dout, tokens, d, c0, w, 1.0, dropout, |r| r % seq_len);
            }
        }
    });
}

/// A raw pointer handed to rayon tasks that write disjoint column blocks.
struct SharedMut(*mut f32);
// SAFETY: see embedding_backward: tasks write disjoint elements.
unsafe impl Sync for SharedMut {}

/// dst[row_of(r)][c0..c0+w] += dout[r][c0..c0+w] · mask · scale for every row r.
///
/// # Safety
/// `dst` must be valid for every row `row_of` returns, and no other task may touch these columns.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn scatter_block(
    dst: &SharedMut,
    dout: &[f32],
    tokens: &[u32],
    d: usize,
    c0: usize,
    w: usize,
    scale: f32,
    dropout: Option<DropoutMask>,
    row_of: impl Fn(usize) -> usize,
) {
    for r in 0..tokens.len() {
        let dst = dst.0.add(row_of(r) * d + c0);
        let src = &dout[r * d + c0..r * d + c0 + w];
        match dropout {
            Some(mask) => mask.for_chunks(r * d + c0, w, |j0, f| {
                for (t, &f) in f.iter().enumerate() {
                    *dst.add(j0 + t) += src[j0 + t] * f * scale;
                }
            }),
            None => {
                for (j, g) in src.iter().enumerate() {
                    *dst.add(j) += g * scale;
                }
            }
        }
    }
}

/// The §3.5 sinusoid table (max_len, d) in `layout` ([`SinusoidLayout`]): the paper's
/// PE(pos, 2i) = sin(pos/10000^(2i/d)), PE(pos, 2i+1) = cos(…); or sines in the first half and
/// cosines in the second, at the paper's frequencies (Hugging Face's Marian) or at
/// tensor2tensor's, pos · exp(−i · ln 10000 / (d/2 − 1)) (Marian's own).
pub fn sinusoid_table(max_len: usize, d: usize, layout: SinusoidLayout) -> Vec<f32> {
    let mut t = vec![0f32; max_len * d];
    let half = d / 2;
    for pos in 0..max_len {
        for i in 0..half {
            let angle = match layout {
                SinusoidLayout::Interleaved | SinusoidLayout::Halves => {
                    pos as f64 / 10000f64.powf(2.0 * i as f64 / d as f64)
                }
                SinusoidLayout::Marian => {
                    pos as f64 * (-(i as f64) * 10000f64.ln() / (half as f64 - 1.0).max(1.0)).exp()
                }
            };
            let (s, c) = match layout {
                SinusoidLayout::Interleaved => (2 * i, 2 * i + 1),
                SinusoidLayout::Halves | SinusoidLayout::Marian => (i, half + i),
            };
            t[pos * d + s] = angle.sin() as f32;
            t[pos * d + c] = angle.cos() as f32;
        }
    }
    t
}

/// One decoder step's inputs (§6.1): out (rows, D) = table[tokens[r]] · scale + position, where
/// `position` (D) is the row of the position table for the step every row is at. No dropout
/// (inference).
pub fn embedding_step(out: &mut [f32], tokens: &[u32], table: Rows, position: &[f32], d: usize, scale: f32) {
    assert!(d > 0, "embedding_step: zero width");
    assert_eq!(Some(out.len()), tokens.len().checked_mul(d));
    assert_eq!(position.len(), d, "embedding_step: the position row has {} values, not {d}", position.len());
    let vocab = table.count(d);
    assert!(tokens.iter().all(|&t| (t as usize) < vocab), "a token id is outside the vocabulary of {vocab}");
    out.par_chunks_mut(d)
        .zip(tokens.par_iter())
        .for_each(|(x, &tok)| table.scaled_row(tok as usize, x, scale, position));
}
