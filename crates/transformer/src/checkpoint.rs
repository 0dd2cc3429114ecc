//! Checkpoints in safetensors: one tensor per layout name, optional flat Adam moments, and metadata
//! (format and version, the resolved config, step, vocabulary hash, trainer state). Written to a
//! temporary file, synced and renamed, so a crash never leaves a half-written checkpoint.

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::io::{io_err, write_atomically};
use crate::params::ParamLayout;
use safetensors::tensor::{Dtype, TensorView};
use safetensors::SafeTensors;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

mod int8;
pub use int8::{load_int8, quantize, save_int8};

/// The `format` metadata value of our checkpoints.
pub const FORMAT: &str = "transformer-checkpoint";
/// The current format version.
pub const FORMAT_VERSION: u32 = 1;
/// The metadata key naming the model's task (`translation`, `parsing`); absent in checkpoints
/// written before tasks existed, which are translation models.
pub const TASK_KEY: &str = "task";

/// The metadata key of a parsing checkpoint's tree format ([`crate::data::trees::TreeFormat`]);
/// absent in translation checkpoints and in parsing ones that predate it (`tags+words`).
pub const TREE_FORMAT_KEY: &str = "tree_format";
/// Metadata key of the CRC-32 of every tensor's data, in file order of the layout (parameters, then
/// Adam's moments): a checkpoint damaged after it was written fails to load instead of resuming
/// from altered weights. Files written before it existed (and by other tools) have none.
const CRC_KEY: &str = "tensor_crc32";
/// Metadata key of an int8 checkpoint (`transformer quantize`), with the value `int8`.
pub const PRECISION_KEY: &str = "precision";
const ADAM_M: &str = "optimizer.adam_m";
const ADAM_V: &str = "optimizer.adam_v";

/// Everything a checkpoint holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// The model's resolved configuration.
    pub config: ModelConfig,
    /// Updates done.
    pub step: u64,
    /// Hash of the vocabulary the model was trained with ("" if none).
    pub vocab_hash: String,
    /// Parameters in layout order.
    pub params: Vec<f32>,
    /// Adam's first and second moments, when saved for resuming.
    pub adam: Option<(Vec<f32>, Vec<f32>)>,
    /// Further string metadata (trainer state and the like).
    pub extra: BTreeMap<String, String>,
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Writes `ckpt` to `path` atomically (temporary file in the same directory, fsync, rename).
pub fn save(path: &Path, ckpt: &Checkpoint) -> Result<()> {
    let layout = savable(path, ckpt)?;
    let tensors: Vec<Tensor> = layout
        .entries()
        .iter()
        .map(|e| (e.name.clone(), Dtype::F32, le_bytes(&ckpt.params[e.range()]), e.shape.clone()))
        .chain(ckpt.adam.iter().flat_map(|(m, v)| {
            [
                (ADAM_M.to_string(), Dtype::F32, le_bytes(m), vec![m.len()]),
                (ADAM_V.to_string(), Dtype::F32, le_bytes(v), vec![v.len()]),
            ]
        }))
        .collect();
    write_tensors(path, ckpt, &tensors, &[])
}

/// The layout of `ckpt`, after checking that its config is valid and that its values are finite
/// and fit the config (parameters and Adam moments alike).
fn savable(path: &Path, ckpt: &Checkpoint) -> Result<ParamLayout> {
    ckpt.config.validate()?;
    check_finite(path, ckpt)?;
    let layout = ParamLayout::new(&ckpt.config);
    if ckpt.params.len() != layout.total() {
        return Err(Error::Mismatch(format!(
            "checkpoint has {} parameters, its config needs {}",
            ckpt.params.len(),
            layout.total()
        )));
    }
    if let Some((m, v)) = &ckpt.adam {
        if m.len() != layout.total() || v.len() != layout.total() {
            return Err(Error::Mismatch(format!(
                "checkpoint has {} and {} Adam moments for its {} parameters: there must be one of each a parameter",
                m.len(),
                v.len(),
                layout.total()
            )));
        }
    }
    Ok(layout)
}

/// A tensor to write: name, dtype, little-endian bytes, shape.
type Tensor = (String, Dtype, Vec<u8>, Vec<usize>);

/// Writes `tensors` (in this order for the CRC) with `ckpt`'s metadata and `more` entries,
/// atomically.
fn write_tensors(path: &Path, ckpt: &Checkpoint, tensors: &[Tensor], more: &[(&str, &str)]) -> Result<()> {
    let views = tensors
        .iter()
        .map(|(name, dtype, data, shape)| {
            let view = TensorView::new(*dtype, shape.clone(), data)
                .map_err(|e| Error::Config(format!("tensor {name}: {e}")))?;
            Ok((name.clone(), view))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut meta: HashMap<String, String> = ckpt.extra.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    meta.insert("format".into(), FORMAT.into());
    meta.insert("format_version".into(), FORMAT_VERSION.to_string());
    meta.insert("config".into(), serde_json::to_string(&ckpt.config).expect("config serialises"));
    meta.insert("step".into(), ckpt.step.to_string());
    meta.insert("vocab_hash".into(), ckpt.vocab_hash.clone());
    for (k, v) in more {
        meta.insert((*k).into(), (*v).into());
    }
    let mut crc = crc32fast::Hasher::new();
    for (_, _, data, _) in tensors {
        crc.update(data);
    }
    meta.insert(CRC_KEY.into(), format!("{:08x}", crc.finalize()));
    let data = safetensors::tensor::serialize(views, &Some(meta))
        .map_err(|e| Error::Config(format!("serialising checkpoint: {e}")))?;
    write_atomically(path, &data)
}

/// Checks that every parameter and Adam moment of `ckpt` (for the file `path`) is finite.
pub fn check_finite(path: &Path, ckpt: &Checkpoint) -> Result<()> {
    use crate::kernels::cpu::elementwise::all_finite;
    let bad = |what: &str| Err(Error::NonFiniteCheckpoint { path: path.to_path_buf(), what: what.into() });
    if !all_finite(&ckpt.params) {
        return bad("parameters");
    }
    if let Some((m, v)) = &ckpt.adam {
        if !all_finite(m) || !all_finite(v) {
            return bad("Adam moments");
        }
    }
    Ok(())
}

/// Reads a checkpoint, checking that it is one of ours and that every tensor matches the layout of
/// its own stored config. Never panics on a corrupt file. The file is read tensor by tensor into
/// the parameters (never whole into memory beside them), so loading peaks at the parameters plus
/// a megabyte.
pub fn load(path: &Path) -> Result<Checkpoint> {
    let Opened { header, file_len, mut tensors } = open(path)?;
    parse(header, file_len, &mut tensors)
}

/// A checkpoint's model prepared for inference at `precision` on `kernels`: [`Opened::prepared`]
/// on the file at `path`.
pub fn load_prepared(
    path: &Path,
    precision: crate::precision::Precision,
    kernels: crate::model::DecoderKernels,
) -> Result<(Checkpoint, crate::model::Transformer)> {
    open(path)?.prepared(precision, kernels)
}

/// What a checkpoint's header says, read and checked once by [`open`]: the metadata every
/// checkpoint has, and what a decoder decides on before it reads a tensor (int8 or f32, the task,
/// the tree format).
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The model's resolved configuration.
    pub config: ModelConfig,
    /// Updates done.
    pub step: u64,
    /// Hash of the vocabulary the model was trained with ("" if none).
    pub vocab_hash: String,
    /// Whether it is an int8 checkpoint ([`save_int8`], from `transformer quantize`).
    pub int8: bool,
    /// The file, named in errors.
    path: PathBuf,
    /// All of its string metadata (the fields above, the task, the CRC, the trainer's state).
    meta: HashMap<String, String>,
}

impl Header {
    /// The metadata every checkpoint has, checked: format and version, config, step, vocabulary
    /// hash (`path` names the file in errors).
    fn new(path: &Path, meta: HashMap<String, String>) -> Result<Header> {
        let corrupt = |reason: String| Error::CorruptCheckpoint { path: path.to_path_buf(), reason };
        let field = |k: &str| meta.get(k).cloned().ok_or_else(|| corrupt(format!("metadata has no '{k}'")));
        if field("format")? != FORMAT {
            return Err(corrupt("not a transformer checkpoint (metadata 'format' differs)".into()));
        }
        let version: u32 = field("format_version")?.parse().map_err(|_| corrupt("bad format_version".into()))?;
        if version != FORMAT_VERSION {
            return Err(corrupt(format!("format version {version}, this build reads version {FORMAT_VERSION}")));
        }
        let config: ModelConfig =
            serde_json::from_str(&field("config")?).map_err(|e| corrupt(format!("bad config metadata ({e})")))?;
        config.validate().map_err(|e| corrupt(format!("stored config invalid: {e}")))?;
        let step: u64 = field("step")?.parse().map_err(|_| corrupt("bad step".into()))?;
        let vocab_hash = field("vocab_hash")?;
        let int8 = meta.get(PRECISION_KEY).is_some_and(|p| p == "int8");
        Ok(Header { config, step, vocab_hash, int8, path: path.to_path_buf(), meta })
    }

    /// The file the header was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The task stored in the metadata (translation when none is stored); an unknown name is an
    /// error naming the file.
    pub fn task(&self) -> Result<crate::task::Task> {
        task_named(&self.path, self.meta.get(TASK_KEY).map(String::as_str))
    }

    /// The tree format stored in a parsing checkpoint's metadata (`tags+words` when none is
    /// stored); an unknown name is an error naming the file.
    pub fn tree_format(&self) -> Result<crate::data::trees::TreeFormat> {
        tree_format_named(&self.path, self.meta.get(TREE_FORMAT_KEY).map(String::as_str))
    }

    /// The checkpoint of these metadata with `params` and `adam`.
    fn into_checkpoint(self, params: Vec<f32>, adam: Option<(Vec<f32>, Vec<f32>)>) -> Checkpoint {
        let Header { config, step, vocab_hash, meta, .. } = self;
        Checkpoint { config, step, vocab_hash, params, adam, extra: extra_metadata(meta) }
    }
}

/// A checkpoint file opened for reading: its [`Header`] read and checked, its tensors still in the
/// file, for [`Opened::prepared`] or [`Opened::int8`] to read (so that a decoder reads the header
/// once, decides, and goes on in the same file).
pub struct Opened {
    header: Header,
    file_len: usize,
    tensors: FileTensors,
}

/// Opens a checkpoint file and reads its header: the one reader of a checkpoint's header. The
/// safetensors header is checked as the crate checks a whole buffer, then the metadata every
/// checkpoint has ([`Header`]); the tensors are not read.
pub fn open(path: &Path) -> Result<Opened> {
    let (meta, file_len, tensors) = open_safetensors(path)?;
    Ok(Opened { header: Header::new(path, meta)?, file_len, tensors })
}

/// A checkpoint's header alone ([`open`], the tensors not read).
pub fn read_header(path: &Path) -> Result<Header> {
    Ok(open(path)?.header)
}

impl Opened {
    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The model prepared for inference at `precision` on `kernels` (`Transformer::prepare`), read
    /// tensor by tensor: each linear map is prepared as soon as it is read, so loading holds one
    /// map's f32 weights beside what is prepared, never all of them (the process's peak memory is
    /// the prepared model's, not twice it). The checks are [`load`]'s; the returned checkpoint has
    /// the metadata but no parameters and no Adam moments.
    pub fn prepared(
        self,
        precision: crate::precision::Precision,
        kernels: crate::model::DecoderKernels,
    ) -> Result<(Checkpoint, crate::model::Transformer)> {
        precision.available()?;
        let Opened { header, file_len, tensors: mut src } = self;
        let path = header.path.clone();
        let layout = check_tensors(&header, file_len, &mut src)?;
        let mut loader = crate::model::PreparedLoader::new(&header.config, precision, kernels);
        let mut crc = crc32fast::Hasher::new();
        let mut buf = Vec::new();
        for e in layout.entries() {
            buf.resize(e.len(), 0.0);
            src.read_f32(&e.name, &mut buf, &mut crc).map_err(read_error(&path))?;
            loader.tensor(&e.name, &buf);
        }
        drop(buf);
        read_adam(&path, &mut src, layout.total(), &mut crc, false)?;
        check_crc(&header, crc)?;
        let (model_config, kept, prepared) = loader.finish()?;
        let model = crate::model::Transformer::from_prepared(model_config, kept, prepared)?;
        Ok((header.into_checkpoint(Vec::new(), None), model))
    }
}

/// Opens `path` for reading as a checkpoint: a regular file, or an error that says what it is
/// instead (a directory, with the checkpoint inside it named when there is one; a pipe or a device,
/// which could block or never end).
fn open_file(path: &Path) -> Result<std::fs::File> {
    let m = std::fs::metadata(path).map_err(io_err(path))?;
    if !m.is_file() {
        let (what, hint) = if m.is_dir() {
            let inside = ["model.safetensors", "best.safetensors"].iter().map(|n| path.join(n)).find(|p| p.is_file());
            ("a directory", inside.map_or(String::new(), |p| format!("; did you mean {}?", p.display())))
        } else {
            ("a pipe or a device", String::new())
        };
        return Err(Error::Input(format!("{}: {what}, not a checkpoint file{hint}", path.display())));
    }
    std::fs::File::open(path).map_err(io_err(path))
}

/// Opens a checkpoint file and checks its safetensors header: the metadata, the file's length and
/// the file to read the tensors from.
fn open_safetensors(path: &Path) -> Result<(HashMap<String, String>, usize, FileTensors)> {
    use std::io::Read;
    let corrupt = |reason: String| Error::CorruptCheckpoint { path: path.to_path_buf(), reason };
    let mut file = open_file(path)?;
    let file_len = file.metadata().map_err(io_err(path))?.len() as usize;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(|_| corrupt("unreadable safetensors header (shorter than 8 bytes)".into()))?;
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER || n as usize > file_len - 8 {
        return Err(corrupt(format!("unreadable safetensors header (length {n} for a file of {file_len} bytes)")));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact(&mut header).map_err(|e| corrupt(format!("unreadable safetensors header ({e})")))?;
    let metadata: safetensors::tensor::Metadata =
        serde_json::from_slice(&header).map_err(|e| corrupt(format!("unreadable safetensors header ({e})")))?;
    // What SafeTensors::deserialize checks on a whole buffer: tensors back to back from offset 0,
    // each as long as its shape and dtype say, ending where the file ends.
    let mut infos: Vec<(String, &safetensors::tensor::TensorInfo)> = metadata.tensors().into_iter().collect();
    infos.sort_by_key(|(_, i)| i.data_offsets);
    let mut at = 0usize;
    for (name, info) in &infos {
        let (s, e) = info.data_offsets;
        let bytes = info.shape.iter().try_fold(info.dtype.size(), |a, &d| a.checked_mul(d));
        if s != at || bytes != e.checked_sub(s) {
            return Err(corrupt(format!("unreadable safetensors header (tensor '{name}' has bad offsets)")));
        }
        at = e;
    }
    let data_start = 8 + n as usize;
    if at != file_len - data_start {
        return Err(corrupt(format!(
            "its tensors need {at} bytes of data but the file has {}: it was cut short or has bytes appended",
            file_len - data_start
        )));
    }
    let tensors: HashMap<String, (Dtype, Vec<usize>, std::ops::Range<usize>)> = infos
        .iter()
        .map(|(name, i)| {
            (name.clone(), (i.dtype, i.shape.clone(), data_start + i.data_offsets.0..data_start + i.data_offsets.1))
        })
        .collect();
    let meta = metadata.metadata().clone().unwrap_or_default();
    Ok((meta, file_len, FileTensors { file, tensors, buf: Vec::new() }))
}

/// The largest safetensors header read (the crate's own limit).
const MAX_HEADER: u64 = 100_000_000;

/// [`load`] on the bytes of a checkpoint file (`path` names it in errors). Never panics, whatever
/// the bytes (fuzzed: `fuzz/fuzz_targets/checkpoint.rs`).
pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Checkpoint> {
    let corrupt = |reason: String| Error::CorruptCheckpoint { path: path.to_path_buf(), reason };
    let (_, header) =
        SafeTensors::read_metadata(bytes).map_err(|e| corrupt(format!("unreadable safetensors header ({e})")))?;
    let mut st = SafeTensors::deserialize(bytes).map_err(|e| corrupt(format!("{e}")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    parse(Header::new(path, meta)?, bytes.len(), &mut st)
}

/// Where a checkpoint's tensors are read from: a whole file in memory, or the file itself.
trait TensorSource {
    /// A tensor's dtype and shape.
    fn info(&self, name: &str) -> Option<(Dtype, Vec<usize>)>;
    /// Its little-endian f32 data into `dst` (as many values as the shape says), its bytes fed to
    /// `crc`. The caller has checked the dtype and shape.
    fn read_f32(&mut self, name: &str, dst: &mut [f32], crc: &mut crc32fast::Hasher) -> std::io::Result<()>;
    /// Its bytes fed to `crc` only.
    fn check_f32(&mut self, name: &str, crc: &mut crc32fast::Hasher) -> std::io::Result<()>;
}

impl TensorSource for SafeTensors<'_> {
    fn info(&self, name: &str) -> Option<(Dtype, Vec<usize>)> {
        self.tensor(name).ok().map(|t| (t.dtype(), t.shape().to_vec()))
    }

    fn read_f32(&mut self, name: &str, dst: &mut [f32], crc: &mut crc32fast::Hasher) -> std::io::Result<()> {
        let t = self.tensor(name).map_err(|e| std::io::Error::other(e.to_string()))?;
        crc.update(t.data());
        read_f32(t.data(), dst);
        Ok(())
    }

    fn check_f32(&mut self, name: &str, crc: &mut crc32fast::Hasher) -> std::io::Result<()> {
        let t = self.tensor(name).map_err(|e| std::io::Error::other(e.to_string()))?;
        crc.update(t.data());
        Ok(())
    }
}

/// A checkpoint file read tensor by tensor, through a buffer of a megabyte.
struct FileTensors {
    file: std::fs::File,
    tensors: HashMap<String, (Dtype, Vec<usize>, std::ops::Range<usize>)>,
    buf: Vec<u8>,
}

impl TensorSource for FileTensors {
    fn info(&self, name: &str) -> Option<(Dtype, Vec<usize>)> {
        self.tensors.get(name).map(|(d, s, _)| (*d, s.clone()))
    }

    fn read_f32(&mut self, name: &str, dst: &mut [f32], crc: &mut crc32fast::Hasher) -> std::io::Result<()> {
        let mut at = 0;
        self.stream(name, |bytes| {
            crc.update(bytes);
            read_f32(bytes, &mut dst[at..at + bytes.len() / 4]);
            at += bytes.len() / 4;
        })
    }

    fn check_f32(&mut self, name: &str, crc: &mut crc32fast::Hasher) -> std::io::Result<()> {
        self.stream(name, |bytes| crc.update(bytes))
    }
}

impl FileTensors {
    /// A tensor's bytes, a megabyte at a time, each piece handed to `each`.
    fn stream(&mut self, name: &str, mut each: impl FnMut(&[u8])) -> std::io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        const CHUNK: usize = 1 << 20; // bytes, a whole number of f32 values
        let range = self.tensors[name].2.clone();
        self.file.seek(SeekFrom::Start(range.start as u64))?;
        let mut left = range.len();
        while left > 0 {
            self.buf.resize(left.min(CHUNK), 0);
            self.file.read_exact(&mut self.buf)?;
            each(&self.buf);
            left -= self.buf.len();
        }
        Ok(())
    }
}

/// A checkpoint's model configuration, from its header alone (the tensors are not read).
pub fn read_config(path: &Path) -> Result<ModelConfig> {
    Ok(read_header(path)?.config)
}

/// The checks and reads common to [`load`] and [`from_bytes`], after the safetensors header.
fn parse(header: Header, file_len: usize, src: &mut dyn TensorSource) -> Result<Checkpoint> {
    let path = header.path.clone();
    let layout = check_tensors(&header, file_len, src)?;
    let mut params = vec![0f32; layout.total()];
    let mut crc = crc32fast::Hasher::new();
    for e in layout.entries() {
        src.read_f32(&e.name, &mut params[e.range()], &mut crc).map_err(read_error(&path))?;
    }
    let adam = read_adam(&path, src, layout.total(), &mut crc, true)?;
    check_crc(&header, crc)?;
    Ok(header.into_checkpoint(params, adam))
}

/// Every tensor's presence, dtype and shape against the configuration the header names, before
/// anything is read (an int8 checkpoint is refused: it has no f32 weights): the layout.
fn check_tensors(header: &Header, file_len: usize, src: &mut dyn TensorSource) -> Result<ParamLayout> {
    let path = &header.path;
    let corrupt = |reason: String| Error::CorruptCheckpoint { path: path.to_path_buf(), reason };
    if header.int8 {
        return Err(Error::Unsupported(format!(
            "{} is an int8 checkpoint (from `transformer quantize`): it holds no f32 weights for the linear maps, so it \
             only decodes (translate, evaluate, parse, serve with --precision int8); train, resume and average need the \
             f32 checkpoint it was made from",
            path.display()
        )));
    }
    let layout = ParamLayout::new(&header.config);
    // Shapes first, allocation after: a config that does not fit the file is refused without
    // asking for memory it implies.
    if layout.total().saturating_mul(4) > file_len {
        return Err(corrupt(format!(
            "its config needs {} parameters ({} bytes) but the file has {} bytes",
            layout.total(),
            layout.total().saturating_mul(4),
            file_len
        )));
    }
    for e in layout.entries() {
        let (dtype, shape) = src.info(&e.name).ok_or_else(|| corrupt(format!("tensor '{}' is missing", e.name)))?;
        if dtype != Dtype::F32 || shape != e.shape {
            return Err(corrupt(format!(
                "tensor '{}' is {:?} {:?}, its config implies F32 {:?}",
                e.name, dtype, shape, e.shape
            )));
        }
    }
    Ok(layout)
}

/// An I/O error reading `path`'s tensors, as a corrupt-checkpoint error.
fn read_error(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::CorruptCheckpoint { path: path.to_path_buf(), reason: format!("reading its tensors: {e}") }
}

/// Adam's moments, if the checkpoint has them (checked against `n` parameters), read through
/// `crc`; returned only with `keep` (otherwise read for the checksum alone, a megabyte at a time).
fn read_adam(
    path: &Path,
    src: &mut dyn TensorSource,
    n: usize,
    crc: &mut crc32fast::Hasher,
    keep: bool,
) -> Result<Option<(Vec<f32>, Vec<f32>)>> {
    let corrupt = |reason: String| Error::CorruptCheckpoint { path: path.to_path_buf(), reason };
    let (Some(m), Some(v)) = (src.info(ADAM_M), src.info(ADAM_V)) else { return Ok(None) };
    if m.1 != [n] || v.1 != [n] || m.0 != Dtype::F32 || v.0 != Dtype::F32 {
        return Err(corrupt("optimizer moments do not match the parameter count".into()));
    }
    if !keep {
        src.check_f32(ADAM_M, crc).map_err(read_error(path))?;
        src.check_f32(ADAM_V, crc).map_err(read_error(path))?;
        return Ok(None);
    }
    let (mut am, mut av) = (vec![0f32; n], vec![0f32; n]);
    src.read_f32(ADAM_M, &mut am, crc).map_err(read_error(path))?;
    src.read_f32(ADAM_V, &mut av, crc).map_err(read_error(path))?;
    Ok(Some((am, av)))
}

/// Compares the tensors' CRC-32 with the one stored when the file was written (files without one
/// predate it).
fn check_crc(header: &Header, crc: crc32fast::Hasher) -> Result<()> {
    if let Some(stored) = header.meta.get(CRC_KEY) {
        let found = format!("{:08x}", crc.finalize());
        if *stored != found {
            return Err(Error::CorruptCheckpoint {
                path: header.path.clone(),
                reason: format!(
                    "its tensor data have CRC-32 {found}, not the {stored} stored when it was written: the file was damaged"
                ),
            });
        }
    }
    Ok(())
}

/// The metadata beyond what every checkpoint has.
fn extra_metadata(meta: HashMap<String, String>) -> BTreeMap<String, String> {
    meta.into_iter()
        .filter(|(k, _)| !["format", "format_version", "config", "step", "vocab_hash", CRC_KEY].contains(&k.as_str()))
        .collect()
}

/// Reads a checkpoint for a model configured as `expected`; a different config is an error naming
/// the first differing field with both values.
pub fn load_for(path: &Path, expected: &ModelConfig) -> Result<Checkpoint> {
    let ckpt = load(path)?;
    check_config(path, expected, &ckpt.config)?;
    Ok(ckpt)
}

/// The checkpoint at `path`, whose configuration is `found`, is of the model `expected`, or an
/// error naming the first field that differs with both values.
pub fn check_config(path: &Path, expected: &ModelConfig, found: &ModelConfig) -> Result<()> {
    let a = serde_json::to_value(expected).expect("config serialises");
    let b = serde_json::to_value(found).expect("config serialises");
    if let (Some(a), Some(b)) = (a.as_object(), b.as_object()) {
        for (k, va) in a {
            let vb = b.get(k).cloned().unwrap_or(serde_json::Value::Null);
            if *va != vb {
                return Err(Error::CheckpointMismatch {
                    path: path.to_path_buf(),
                    what: format!("config field '{k}'"),
                    expected: va.to_string(),
                    found: vb.to_string(),
                });
            }
        }
    }
    Ok(())
}

fn read_f32(bytes: &[u8], dst: &mut [f32]) {
    for (d, c) in dst.iter_mut().zip(bytes.chunks_exact(4)) {
        *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// §6.1 Checkpoint averaging: the element-wise mean of the parameters of `paths` (the paper averages
/// the last 5 base-model checkpoints, the last 20 big-model ones). All must share configuration and
/// vocabulary; a difference is an error naming the file, the field and both values. The result keeps
/// the newest step and no optimizer state.
pub fn average(paths: &[PathBuf]) -> Result<Checkpoint> {
    let first = paths.first().ok_or_else(|| Error::Input("no checkpoints to average".into()))?;
    let mut acc: Option<(Checkpoint, Vec<f64>)> = None;
    for p in paths {
        let ck = match &acc {
            None => load(p)?,
            Some((base, _)) => {
                let ck = load_for(p, &base.config)?;
                if ck.vocab_hash != base.vocab_hash {
                    return Err(Error::CheckpointMismatch {
                        path: p.clone(),
                        what: format!("vocabulary (compared with {})", first.display()),
                        expected: base.vocab_hash.clone(),
                        found: ck.vocab_hash,
                    });
                }
                let (want, found) = (tree_format_of(first, base)?, tree_format_of(p, &ck)?);
                if found != want {
                    return Err(Error::CheckpointMismatch {
                        path: p.clone(),
                        what: format!("tree format (compared with {})", first.display()),
                        expected: want.name().into(),
                        found: found.name().into(),
                    });
                }
                ck
            }
        };
        match &mut acc {
            None => {
                let sum = ck.params.iter().map(|&x| x as f64).collect();
                acc = Some((ck, sum));
            }
            Some((base, sum)) => {
                for (s, &x) in sum.iter_mut().zip(&ck.params) {
                    *s += x as f64;
                }
                base.step = base.step.max(ck.step);
            }
        }
    }
    let (mut out, sum) = acc.expect("at least one checkpoint");
    let n = paths.len() as f64;
    out.params = sum.iter().map(|&s| (s / n) as f32).collect();
    out.adam = None;
    let task = out.extra.remove(TASK_KEY);
    let tree_format = out.extra.remove(TREE_FORMAT_KEY);
    out.extra =
        [("averaged_from".to_string(), paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(","))]
            .into_iter()
            .collect();
    if let Some(task) = task {
        out.extra.insert(TASK_KEY.to_string(), task);
    }
    if let Some(format) = tree_format {
        out.extra.insert(TREE_FORMAT_KEY.to_string(), format);
    }
    Ok(out)
}

/// The tree format stored in a parsing checkpoint's metadata (`tags+words` when none is stored);
/// an unknown name is an error naming the file.
pub fn tree_format_of(path: &Path, ckpt: &Checkpoint) -> Result<crate::data::trees::TreeFormat> {
    tree_format_named(path, ckpt.extra.get(TREE_FORMAT_KEY).map(String::as_str))
}

fn task_named(path: &Path, name: Option<&str>) -> Result<crate::task::Task> {
    match name {
        None => Ok(crate::task::Task::Translation),
        Some(name) => {
            crate::task::Task::ALL.into_iter().find(|t| t.name() == name).ok_or_else(|| Error::CorruptCheckpoint {
                path: path.to_path_buf(),
                reason: format!("unknown task {name:?} in its metadata"),
            })
        }
    }
}

fn tree_format_named(path: &Path, name: Option<&str>) -> Result<crate::data::trees::TreeFormat> {
    match name {
        None => Ok(crate::data::trees::TreeFormat::default()),
        Some(name) => crate::data::trees::TreeFormat::from_name(name).ok_or_else(|| Error::CorruptCheckpoint {
            path: path.to_path_buf(),
            reason: format!("unknown tree format {name:?} in its metadata"),
        }),
    }
}
