//! int8 checkpoints (`transformer quantize`): every linear map's weights stored as int8 codes with
//! one f32 scale per row, the rest as in an f32 checkpoint; they decode at `--precision int8` only.

use super::{
    le_bytes, load, open, read_error, savable, write_tensors, Checkpoint, Opened, Tensor, TensorSource, CRC_KEY,
    PRECISION_KEY,
};
use crate::error::{Error, Result};
use crate::io::io_err;
use crate::params::ParamLayout;
use safetensors::tensor::Dtype;
use std::path::Path;

/// Writes an int8 checkpoint: `ckpt`'s metadata and f32 tensors, except that every tensor in
/// `codes` (the linear maps' weights) is stored as `NAME.int8` (I8, its shape) and `NAME.scale`
/// (F32, one per row) instead; the embedding, which the encoder and decoder also look rows up in,
/// keeps its f32 tensor too. No Adam moments. Atomic like [`super::save`].
pub fn save_int8(path: &Path, ckpt: &Checkpoint, codes: &crate::model::Int8Codes, embedding: &str) -> Result<()> {
    let layout = savable(path, ckpt)?;
    let mut bytes: Vec<Tensor> = Vec::new();
    for e in layout.entries() {
        match codes.get(&e.name) {
            Some((q, sc)) => {
                let rows = sc.len();
                if q.len() != e.len() || rows == 0 || e.len() % rows != 0 {
                    return Err(Error::Mismatch(format!("the int8 codes of '{}' do not fit its shape", e.name)));
                }
                bytes.push((
                    format!("{}.int8", e.name),
                    Dtype::I8,
                    q.iter().map(|&c| c as u8).collect(),
                    e.shape.clone(),
                ));
                bytes.push((format!("{}.scale", e.name), Dtype::F32, le_bytes(sc), vec![rows]));
                if e.name == embedding {
                    bytes.push((e.name.clone(), Dtype::F32, le_bytes(&ckpt.params[e.range()]), e.shape.clone()));
                }
            }
            None => bytes.push((e.name.clone(), Dtype::F32, le_bytes(&ckpt.params[e.range()]), e.shape.clone())),
        }
    }
    write_tensors(path, ckpt, &bytes, &[(PRECISION_KEY, "int8")])
}

/// Reads an int8 checkpoint written by [`save_int8`]: [`Opened::int8`] on the file at `path`.
pub fn load_int8(path: &Path) -> Result<(Checkpoint, crate::model::Int8Codes)> {
    open(path)?.int8()
}

impl Opened {
    /// The tensors of an int8 checkpoint written by [`save_int8`]: the checkpoint, whose
    /// parameters are zero where only codes are stored, and the codes by tensor name. Never panics
    /// on a corrupt file.
    pub fn int8(self) -> Result<(Checkpoint, crate::model::Int8Codes)> {
        let Opened { header, file_len, tensors: mut src } = self;
        let path = header.path.clone();
        let corrupt = |reason: String| Error::CorruptCheckpoint { path: path.clone(), reason };
        let field = |k: &str| header.meta.get(k).cloned().ok_or_else(|| corrupt(format!("metadata has no '{k}'")));
        if field(PRECISION_KEY)? != "int8" {
            return Err(corrupt("metadata 'precision' is not int8".into()));
        }
        let layout = ParamLayout::new(&header.config);
        if layout.total() > file_len {
            return Err(corrupt(format!(
                "its config needs {} parameters but the file has {} bytes",
                layout.total(),
                file_len
            )));
        }
        // Zeroed (untouched) memory: the regions only codes are stored for are never written.
        let mut params = vec![0f32; layout.total()];
        let mut codes = crate::model::Int8Codes::new();
        let mut crc = crc32fast::Hasher::new();
        let mut found_f32 = 0;
        for e in layout.entries() {
            let (q_name, s_name) = (format!("{}.int8", e.name), format!("{}.scale", e.name));
            if let Some((q_dtype, q_shape)) = src.info(&q_name) {
                let (s_dtype, s_shape) =
                    src.info(&s_name).ok_or_else(|| corrupt(format!("'{}.scale' is missing", e.name)))?;
                let rows = e.shape.first().copied().unwrap_or(0);
                if q_dtype != Dtype::I8 || q_shape != e.shape || s_dtype != Dtype::F32 || s_shape != [rows] {
                    return Err(corrupt(format!(
                        "the int8 tensors of '{}' do not match its shape {:?}",
                        e.name, e.shape
                    )));
                }
                let mut q = Vec::with_capacity(e.len());
                src.stream(&q_name, |bytes| {
                    crc.update(bytes);
                    q.extend(bytes.iter().map(|&b| b as i8));
                })
                .map_err(read_error(&path))?;
                let mut sc = vec![0f32; rows];
                src.read_f32(&s_name, &mut sc, &mut crc).map_err(read_error(&path))?;
                if let Some(r) = sc.iter().position(|v| !(v.is_finite() && *v >= 0.0)) {
                    return Err(corrupt(format!(
                        "scale {} of row {r} of '{}' is not a finite value ≥ 0",
                        sc[r], e.name
                    )));
                }
                codes.insert(e.name.clone(), (q, sc));
            }
            match src.info(&e.name) {
                Some((dtype, shape)) => {
                    if dtype != Dtype::F32 || shape != e.shape {
                        return Err(corrupt(format!(
                            "tensor '{}' is {:?} {:?}, expected F32 {:?}",
                            e.name, dtype, shape, e.shape
                        )));
                    }
                    src.read_f32(&e.name, &mut params[e.range()], &mut crc).map_err(read_error(&path))?;
                    found_f32 += 1;
                }
                // Only a linear map's weights may come as codes alone (checked again when the
                // model takes them); the embedding's rows are looked up, so it needs its f32 values.
                None if codes.contains_key(&e.name) && e.offset != layout.offsets.embed => {}
                None => return Err(corrupt(format!("tensor '{}' is missing", e.name))),
            }
        }
        if found_f32 == 0 {
            return Err(corrupt("no f32 tensors".into()));
        }
        let stored = field(CRC_KEY)?;
        let found = format!("{:08x}", crc.finalize());
        if stored != found {
            return Err(corrupt(format!(
                "its tensor data have CRC-32 {found}, not the {stored} stored when it was written: the file was damaged"
            )));
        }
        let mut ckpt = header.into_checkpoint(params, None);
        ckpt.extra.remove(PRECISION_KEY);
        Ok((ckpt, codes))
    }
}

/// `transformer quantize`: reads the f32 checkpoint `src`, quantises every linear map's weights
/// (as `--precision int8` does at load) and writes the int8 checkpoint `dst` ([`save_int8`]),
/// which then loads without quantising. Returns the two files' sizes in bytes.
pub fn quantize(src: &Path, dst: &Path) -> Result<(u64, u64)> {
    let ckpt = load(src)?;
    let model = crate::model::Transformer::from_params(ckpt.config.clone(), ckpt.params.clone())?
        .prepare(crate::precision::Precision::Int8)?;
    let codes = model.prepared().and_then(|p| p.codes(&model.config)).expect("a model prepared at int8 has codes");
    let embedding = "embed.weight";
    save_int8(dst, &Checkpoint { adam: None, ..ckpt }, &codes, embedding)?;
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).map_err(io_err(p));
    Ok((size(src)?, size(dst)?))
}
