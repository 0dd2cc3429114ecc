//! The encoder's packed rows: its position-wise layers (projections, feed-forward, LayerNorm) run
//! on each sentence's valid source positions only, one sentence after another, instead of on
//! every (sentence, position) of the padded batch. Batches sorted by target length carry 10–15%
//! source padding, all of it work whose result attention masks away. Self-attention reads the
//! packed rows in place ([`Heads::packed`](crate::kernels::cpu::attention::Heads)); the decoder
//! still reads a padded encoder output.
//!
//! Row r of sentence b sits at padded row b·S + r and at packed row offsets[b] + r. Packing moves
//! rows towards the front and unpacking towards the back, so both work in place.

/// Where each sentence's rows start in the packed layout, and their total: B + 1 offsets.
pub(crate) fn offsets(lens: &[usize], out: &mut Vec<usize>) {
    out.clear();
    out.push(0);
    let mut at = 0;
    for &n in lens {
        at += n;
        out.push(at);
    }
}

/// Packs `buf` (B·S rows of `width`) in place: sentence b's first lens[b] rows move to its packed
/// rows; what follows the packed rows is left as it was.
pub(crate) fn pack(buf: &mut [f32], width: usize, s: usize, lens: &[usize]) {
    assert!(
        buf.len() >= lens.len() * s * width,
        "pack: a buffer of {} for {} sentences of {s} rows",
        buf.len(),
        lens.len()
    );
    let mut at = 0;
    for (b, &n) in lens.iter().enumerate() {
        assert!(n <= s, "pack: sentence {b} has {n} rows, more than S = {s}");
        // Destinations come before sources, and sentences go front to back: nothing is overwritten
        // before it has moved.
        if at != b * s {
            buf.copy_within(b * s * width..(b * s + n) * width, at * width);
        }
        at += n;
    }
}

/// Unpacks `buf` in place, the inverse of [`pack`]: packed rows back to their padded rows, the
/// padding rows set to zero.
pub(crate) fn unpack(buf: &mut [f32], width: usize, s: usize, lens: &[usize]) {
    assert!(
        buf.len() >= lens.len() * s * width,
        "unpack: a buffer of {} for {} sentences of {s} rows",
        buf.len(),
        lens.len()
    );
    let mut at: usize = lens.iter().sum();
    for (b, &n) in lens.iter().enumerate().rev() {
        assert!(n <= s, "unpack: sentence {b} has {n} rows, more than S = {s}");
        // Back to front: a sentence's destination lies at or after its packed rows and after every
        // earlier sentence's packed rows.
        at -= n;
        if at != b * s {
            buf.copy_within(at * width..(at + n) * width, b * s * width);
        }
        buf[(b * s + n) * width..(b + 1) * s * width].fill(0.0);
    }
}

/// Writes the packed rows of `src` into `dst` (B·S rows of `width`) in their padded places, zero in
/// the padding.
pub(crate) fn unpack_into(dst: &mut [f32], src: &[f32], width: usize, s: usize, lens: &[usize]) {
    assert_eq!(dst.len(), lens.len() * s * width, "unpack_into: the padded buffer's size");
    let mut at = 0;
    for (row, &n) in dst.chunks_exact_mut(s * width).zip(lens) {
        row[..n * width].copy_from_slice(&src[at * width..(at + n) * width]);
        row[n * width..].fill(0.0);
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Padded rows of a batch with row (b, r) = [100·b + r, 100·b + r + 0.5], padding = −1.
    fn padded(lens: &[usize], s: usize) -> Vec<f32> {
        let mut v = vec![-1.0; lens.len() * s * 2];
        for (b, &n) in lens.iter().enumerate() {
            for r in 0..n {
                let x = (100 * b + r) as f32;
                v[(b * s + r) * 2..][..2].copy_from_slice(&[x, x + 0.5]);
            }
        }
        v
    }

    #[test]
    fn pack_and_unpack_invert_each_other_in_place() {
        for lens in [vec![3, 1, 0, 4, 2], vec![4, 4], vec![0, 0, 1], vec![2], vec![]] {
            let s = 4;
            let orig = padded(&lens, s);
            let mut v = orig.clone();
            pack(&mut v, 2, s, &lens);
            let mut o = Vec::new();
            offsets(&lens, &mut o);
            assert_eq!(o.len(), lens.len() + 1);
            for (b, &n) in lens.iter().enumerate() {
                for r in 0..n {
                    let x = (100 * b + r) as f32;
                    assert_eq!(&v[(o[b] + r) * 2..][..2], &[x, x + 0.5], "packed row {r} of sentence {b} in {lens:?}");
                }
            }
            let mut out = vec![7.0; orig.len()];
            unpack_into(&mut out, &v, 2, s, &lens);
            unpack(&mut v, 2, s, &lens);
            let want: Vec<f32> = orig.iter().map(|&x| if x == -1.0 { 0.0 } else { x }).collect();
            assert_eq!(v, want, "{lens:?}");
            assert_eq!(out, want, "{lens:?}");
        }
    }
}
