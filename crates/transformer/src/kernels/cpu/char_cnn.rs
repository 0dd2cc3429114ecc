//! The character-level word encoder (`model.char_dim`; a named deviation, `char-word-encoder`):
//! each word's bytes, between a begin-of-word and an end-of-word marker, are embedded
//! (`CHAR_VOCAB`, dc), convolved with a bank of D filters of width `CHAR_WIDTH` (weights
//! (W·dc, D), bias D) and max-pooled over the windows after a ReLU: one D-vector per word, the
//! same for a word seen in training and one never seen, so spelling (suffixes, capitals, digits)
//! reaches the encoder whatever BPE made of the word. The naive twin is
//! [`crate::kernels::reference::char_cnn_forward`].
//!
//! Words are given as one flat list of character ids and the offsets where each word starts
//! (`offsets[w]..offsets[w + 1]`); every word must have at least `CHAR_WIDTH` characters
//! (markers and padding included: [`word_chars`] pads).

use rayon::prelude::*;

/// Padding up to the filter width (its embedding is learned like any other).
pub const CHAR_PAD: u32 = 0;
/// Begin of word.
pub const CHAR_BOW: u32 = 1;
/// End of word.
pub const CHAR_EOW: u32 = 2;
/// Rows of the character embedding: the three markers and the 256 byte values.
pub const CHAR_VOCAB: usize = 3 + 256;
/// The filters' width in characters.
pub const CHAR_WIDTH: usize = 3;
/// `arg` of a filter whose every window is ≤ 0: the ReLU passes no gradient.
pub const NO_WINDOW: u32 = u32::MAX;

/// Appends one word's character ids to `chars`: BOW, its bytes, EOW, then padding up to
/// `CHAR_WIDTH`.
pub fn word_chars(chars: &mut Vec<u32>, bytes: impl IntoIterator<Item = u8>) {
    let start = chars.len();
    chars.push(CHAR_BOW);
    chars.extend(bytes.into_iter().map(|b| 3 + b as u32));
    chars.push(CHAR_EOW);
    while chars.len() - start < CHAR_WIDTH {
        chars.push(CHAR_PAD);
    }
}

fn check(chars: &[u32], offsets: &[usize], emb: &[f32], w: &[f32], b: &[f32], dc: usize, d: usize) -> usize {
    assert!(dc > 0 && d > 0, "char_cnn: zero width");
    assert_eq!(emb.len(), CHAR_VOCAB * dc, "char_cnn: the character embedding is not ({CHAR_VOCAB}, {dc})");
    assert_eq!(w.len(), CHAR_WIDTH * dc * d, "char_cnn: the filters are not ({CHAR_WIDTH}·{dc}, {d})");
    assert_eq!(b.len(), d, "char_cnn: the bias is not {d} long");
    assert!(!offsets.is_empty() && offsets[offsets.len() - 1] == chars.len(), "char_cnn: offsets do not cover chars");
    assert!(offsets.windows(2).all(|p| p[1] >= p[0] + CHAR_WIDTH), "char_cnn: a word is shorter than the filter");
    assert!(chars.iter().all(|&c| (c as usize) < CHAR_VOCAB), "char_cnn: a character id is outside the table");
    offsets.len() - 1
}

/// out (words, D) = max over windows t of ReLU(b + Σ_k emb[chars[t + k]] · W_k), with `arg`
/// (words, D) the window that gave each maximum (the first, on ties), or [`NO_WINDOW`] where
/// it is ≤ 0 (the output is then 0).
#[allow(clippy::too_many_arguments)]
pub fn char_cnn_forward(
    out: &mut [f32],
    arg: &mut [u32],
    chars: &[u32],
    offsets: &[usize],
    emb: &[f32],
    w: &[f32],
    b: &[f32],
    dc: usize,
    d: usize,
) {
    let words = check(chars, offsets, emb, w, b, dc, d);
    assert_eq!(out.len(), words * d);
    assert_eq!(arg.len(), words * d);
    out.par_chunks_mut(d).zip(arg.par_chunks_mut(d)).enumerate().for_each_init(
        || vec![0.0f32; d],
        |h, (word, (o, a))| {
            let cs = &chars[offsets[word]..offsets[word + 1]];
            o.fill(0.0);
            a.fill(NO_WINDOW);
            for t in 0..=cs.len() - CHAR_WIDTH {
                h.copy_from_slice(b);
                for (k, &c) in cs[t..t + CHAR_WIDTH].iter().enumerate() {
                    let e = &emb[c as usize * dc..][..dc];
                    for (m, &x) in e.iter().enumerate() {
                        let row = &w[(k * dc + m) * d..][..d];
                        for (hj, &wj) in h.iter_mut().zip(row) {
                            *hj += x * wj;
                        }
                    }
                }
                for j in 0..d {
                    if h[j] > o[j] {
                        o[j] = h[j];
                        a[j] = t as u32;
                    }
                }
            }
        },
    );
}

/// Filters per task in [`char_cnn_backward`] (tasks own filter blocks, so sums run in a fixed
/// order whatever the thread count).
const FILTER_BLOCK: usize = 16;

/// Gradients of [`char_cnn_forward`] from `dout` (words, D): `demb`, `dw` and `db` are added to
/// (`+=`). Only the window that gave each filter's maximum receives its gradient.
#[allow(clippy::too_many_arguments)]
pub fn char_cnn_backward(
    demb: &mut [f32],
    dw: &mut [f32],
    db: &mut [f32],
    dout: &[f32],
    arg: &[u32],
    chars: &[u32],
    offsets: &[usize],
    emb: &[f32],
    w: &[f32],
    dc: usize,
    d: usize,
) {
    let words = check(chars, offsets, emb, w, db, dc, d);
    assert_eq!(demb.len(), emb.len());
    assert_eq!(dw.len(), w.len());
    assert_eq!((dout.len(), arg.len()), (words * d, words * d));
    let kw = CHAR_WIDTH * dc;
    // Each task owns filters j0..j1: their columns of W (read and written through a transposed
    // copy, so that one filter's W·dc weights are contiguous), their bias entries, and a private
    // character-embedding gradient summed in task order at the end.
    let mut wt = vec![0.0f32; d * kw];
    for r in 0..kw {
        for j in 0..d {
            wt[j * kw + r] = w[r * d + j];
        }
    }
    let blocks: Vec<(usize, usize)> = (0..d).step_by(FILTER_BLOCK).map(|j0| (j0, (j0 + FILTER_BLOCK).min(d))).collect();
    let parts: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = blocks
        .par_iter()
        .map(|&(j0, j1)| {
            let mut dwt = vec![0.0f32; (j1 - j0) * kw];
            let mut dbb = vec![0.0f32; j1 - j0];
            let mut de = vec![0.0f32; CHAR_VOCAB * dc];
            for word in 0..words {
                let cs = &chars[offsets[word]..offsets[word + 1]];
                for j in j0..j1 {
                    let t = arg[word * d + j];
                    if t == NO_WINDOW {
                        continue;
                    }
                    let g = dout[word * d + j];
                    dbb[j - j0] += g;
                    let wj = &wt[j * kw..][..kw];
                    let dwj = &mut dwt[(j - j0) * kw..][..kw];
                    for k in 0..CHAR_WIDTH {
                        let c = cs[t as usize + k] as usize;
                        let e = &emb[c * dc..][..dc];
                        let dek = &mut de[c * dc..][..dc];
                        for m in 0..dc {
                            dwj[k * dc + m] += e[m] * g;
                            dek[m] += wj[k * dc + m] * g;
                        }
                    }
                }
            }
            (dwt, dbb, de)
        })
        .collect();
    for (&(j0, j1), (dwt, dbb, de)) in blocks.iter().zip(&parts) {
        for j in j0..j1 {
            db[j] += dbb[j - j0];
            for r in 0..kw {
                dw[r * d + j] += dwt[(j - j0) * kw + r];
            }
        }
        for (a, &x) in demb.iter_mut().zip(de) {
            *a += x;
        }
    }
}
