//! Shared test helpers: random data and closeness checks that report the worst element.
#![allow(dead_code)]

use transformer::rng::Rng;

/// `n` values uniform in (-scale, scale).
pub fn rand_vec(rng: &mut Rng, n: usize, scale: f64) -> Vec<f64> {
    (0..n).map(|_| (rng.uniform() * 2.0 - 1.0) * scale).collect()
}

pub fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

pub fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// The valid source positions of a padded (B·S, D) buffer, sentence after sentence: the layout
/// of the encoder's packed rows (what `Workspace::enc_in` holds after a forward pass).
pub fn packed_rows(padded: &[f64], src_lens: &[usize], s: usize, d: usize) -> Vec<f64> {
    src_lens.iter().enumerate().flat_map(|(b, &n)| padded[b * s * d..][..n * d].iter().copied()).collect()
}

/// Asserts |got − want| ≤ atol + rtol·|want| elementwise; on failure names the first bad index and
/// the max abs/rel errors.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length {} vs {}", got.len(), want.len());
    let mut first_bad = None;
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs();
        max_abs = max_abs.max(err);
        if w.abs() > 1e-12 {
            max_rel = max_rel.max(err / w.abs());
        }
        // Written so that a NaN (which compares false) counts as a failure.
        let within = err <= atol + rtol * w.abs();
        if !within && first_bad.is_none() {
            first_bad = Some((i, *g, *w));
        }
    }
    if let Some((i, g, w)) = first_bad {
        panic!("{what}: element {i}: got {g}, want {w} (max abs err {max_abs:.3e}, max rel err {max_rel:.3e}, atol {atol:e}, rtol {rtol:e})");
    }
}

/// Central-difference gradient of the scalar `f` at `x` (f64, step h).
pub fn numeric_grad(x: &[f64], h: f64, mut f: impl FnMut(&[f64]) -> f64) -> Vec<f64> {
    let mut x = x.to_vec();
    (0..x.len())
        .map(|i| {
            let orig = x[i];
            x[i] = orig + h;
            let fp = f(&x);
            x[i] = orig - h;
            let fm = f(&x);
            x[i] = orig;
            (fp - fm) / (2.0 * h)
        })
        .collect()
}

pub fn weighted_sum(y: &[f64], g: &[f64]) -> f64 {
    y.iter().zip(g).map(|(a, b)| a * b).sum()
}

/// Beam search over a batch of sources with fresh buffers: `search_batch` as a one-off.
pub fn translate_batch(
    model: &transformer::Transformer,
    srcs: &[&[u32]],
    cfg: &transformer::decode::BeamConfig,
    ws: &mut transformer::Workspace,
) -> transformer::Result<Vec<Vec<transformer::decode::Hypothesis>>> {
    let mut state = transformer::model::incremental::DecoderState::default();
    Ok(transformer::decode::search_batch(model, srcs, cfg, ws, &mut state, None)?.0)
}

/// Saves `model` at `path` as a step-1 checkpoint "trained" with the tokenizer hashed `vocab_hash`.
pub fn save_checkpoint(path: &std::path::Path, model: &transformer::Transformer, vocab_hash: &str) {
    let ckpt = transformer::checkpoint::Checkpoint {
        config: model.config.clone(),
        step: 1,
        vocab_hash: vocab_hash.to_string(),
        params: model.params.clone(),
        adam: None,
        extra: Default::default(),
    };
    transformer::checkpoint::save(path, &ckpt).unwrap();
}

/// Copies the `.npz` archive `from` to `to` with its `special:model.yml` array's bytes changed by
/// `edit` (which must keep their length: the array's header is kept), every entry stored
/// uncompressed. Panics unless the archive has exactly one such entry.
pub fn rewrite_model_yml(from: &std::path::Path, to: &std::path::Path, edit: impl Fn(&mut Vec<u8>)) {
    use std::io::{Read, Write};
    let original = std::fs::read(from).unwrap();
    let mut zin = zip::ZipArchive::new(std::io::Cursor::new(original)).unwrap();
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let mut rewritten = 0;
    for i in 0..zin.len() {
        let mut f = zin.by_index(i).unwrap();
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).unwrap();
        let name = f.name().unwrap().to_string();
        if name.starts_with("special:model.yml") {
            let len = bytes.len();
            edit(&mut bytes);
            assert_eq!(bytes.len(), len, "the edit must keep the array's length");
            rewritten += 1;
        }
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        out.start_file(name, opts).unwrap();
        out.write_all(&bytes).unwrap();
    }
    assert_eq!(rewritten, 1, "{}: one special:model.yml", from.display());
    std::fs::write(to, out.finish().unwrap().into_inner()).unwrap();
}

pub mod scripted;
mod test_dir;
#[allow(unused_imports)]
pub use test_dir::TestDir;
