//! CTranslate2's `model.bin`, binary version 6 (what its converters write since CTranslate2 2.0):
//! little-endian throughout,
//!
//! ```text
//! u32 version · string spec name · u32 spec revision · u32 variable count
//! per variable: string name · u8 rank · u32 dims[rank] · u8 dtype · u32 byte count · the bytes
//! u32 alias count · per alias: string alias · string variable it names
//! ```
//!
//! where a string is a u16 length (the NUL counted), its UTF-8 bytes and a NUL, and dtype is
//! CTranslate2's `DataType` (0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16). Variables
//! and aliases are each in name order, as the converters' `ModelSpec._serialize` writes them.
//!
//! The reader ([`ModelBin::parse`]) trusts nothing: every count and size is checked against the
//! bytes left before anything is allocated, shapes against byte counts, names for UTF-8 and
//! duplicates, aliases for a variable they name; a malformed file is an error naming the offset.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// The binary version read and written.
pub const BINARY_VERSION: u32 = 6;
/// The largest `model.bin` read (CTranslate2's largest translation models are under 10 GB).
pub const MAX_MODEL_BIN_BYTES: u64 = 64 << 30;
/// The most dimensions a variable may have (CTranslate2's have at most 4).
const MAX_RANK: usize = 8;

/// A variable's element type, CTranslate2's `DataType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// Signed 8-bit codes (with a `_scale`).
    I8,
    /// Signed 16-bit codes (with a `_scale`).
    I16,
    /// Signed 32-bit integers.
    I32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
}

impl DType {
    fn from_id(id: u8) -> Option<Self> {
        Some(match id {
            0 => DType::F32,
            1 => DType::I8,
            2 => DType::I16,
            3 => DType::I32,
            4 => DType::F16,
            5 => DType::BF16,
            _ => return None,
        })
    }

    fn id(self) -> u8 {
        self as u8
    }

    /// Bytes of one element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 => 1,
            DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
        }
    }
}

/// One variable: its shape (empty for a scalar), type and little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Variable {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// The elements' bytes, `shape`'s product times the type's size.
    pub bytes: Vec<u8>,
}

impl Variable {
    /// An f32 variable of `shape`.
    pub fn f32(shape: &[usize], values: &[f32]) -> Self {
        debug_assert_eq!(shape.iter().product::<usize>(), values.len());
        Variable {
            shape: shape.to_vec(),
            dtype: DType::F32,
            bytes: values.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// An int8 variable of `shape`.
    pub fn i8(shape: &[usize], codes: &[i8]) -> Self {
        Variable { shape: shape.to_vec(), dtype: DType::I8, bytes: codes.iter().map(|&c| c as u8).collect() }
    }

    /// A scalar of `dtype` holding `value` (int8 and int16 scalars are how the converters store
    /// booleans, enums and counts).
    pub fn scalar(dtype: DType, value: i64) -> Self {
        let bytes = match dtype {
            DType::I8 => vec![value as i8 as u8],
            DType::I16 => (value as i16).to_le_bytes().to_vec(),
            DType::I32 => (value as i32).to_le_bytes().to_vec(),
            DType::F32 => (value as f32).to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(value as f64).to_le_bytes().to_vec(),
            DType::BF16 => half::bf16::from_f64(value as f64).to_le_bytes().to_vec(),
        };
        Variable { shape: Vec::new(), dtype, bytes }
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The elements as f64 (integers exactly, floats widened).
    pub fn values(&self) -> Vec<f64> {
        let b = &self.bytes;
        match self.dtype {
            DType::F32 => b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            DType::I8 => b.iter().map(|&c| c as i8 as f64).collect(),
            DType::I16 => b.chunks_exact(2).map(|c| i16::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            DType::I32 => b.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            DType::F16 => b.chunks_exact(2).map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64()).collect(),
            DType::BF16 => {
                b.chunks_exact(2).map(|c| half::bf16::from_le_bytes(c.try_into().unwrap()).to_f64()).collect()
            }
        }
    }
}

/// A whole `model.bin`.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelBin {
    /// The specification's name (`TransformerSpec` for the Transformers read here).
    pub spec: String,
    /// The specification's revision.
    pub revision: u32,
    /// Variables by name.
    pub variables: BTreeMap<String, Variable>,
    /// Alias → the variable it names.
    pub aliases: BTreeMap<String, String>,
}

impl ModelBin {
    /// The variable `name`, through its alias if it is one.
    pub fn get(&self, name: &str) -> Option<&Variable> {
        self.variables.get(name).or_else(|| self.aliases.get(name).and_then(|n| self.variables.get(n)))
    }

    /// Whether `name` is a variable or an alias.
    pub fn has(&self, name: &str) -> bool {
        self.variables.contains_key(name) || self.aliases.contains_key(name)
    }

    /// The name `name` resolves to (itself, or the variable its alias names).
    pub fn resolve<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases.get(name).map_or(name, String::as_str)
    }

    /// The bytes of the file, variables and aliases each in name order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let size: usize = self.variables.iter().map(|(n, v)| n.len() + 16 + 4 * v.shape.len() + v.bytes.len()).sum();
        let mut out = Vec::with_capacity(size + 64);
        let string = |out: &mut Vec<u8>, s: &str| {
            out.extend_from_slice(&((s.len() + 1) as u16).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
            out.push(0);
        };
        out.extend_from_slice(&BINARY_VERSION.to_le_bytes());
        string(&mut out, &self.spec);
        out.extend_from_slice(&self.revision.to_le_bytes());
        out.extend_from_slice(&(self.variables.len() as u32).to_le_bytes());
        for (name, v) in &self.variables {
            string(&mut out, name);
            out.push(v.shape.len() as u8);
            for &d in &v.shape {
                out.extend_from_slice(&(d as u32).to_le_bytes());
            }
            out.push(v.dtype.id());
            out.extend_from_slice(&(v.bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&v.bytes);
        }
        out.extend_from_slice(&(self.aliases.len() as u32).to_le_bytes());
        for (alias, name) in &self.aliases {
            string(&mut out, alias);
            string(&mut out, name);
        }
        out
    }

    /// Parses a `model.bin`; the error says what is wrong and at which byte.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Self, String> {
        let mut r = Reader { b: bytes, at: 0 };
        let version = r.u32("the binary version")?;
        if version != BINARY_VERSION {
            return Err(format!(
                "binary version {version}: only version {BINARY_VERSION} is read (what CTranslate2 2.0 and later \
                 write; convert the model again with a current CTranslate2)"
            ));
        }
        let spec = r.string("the specification name")?;
        let revision = r.u32("the specification revision")?;
        let count = r.u32("the variable count")? as usize;
        // A variable takes at least 12 bytes (name length 2 + NUL 1, rank 1, dtype 1, size 4, a
        // one-character name 1, at least 2 more for any real one): more than the bytes left allow
        // is a corrupt count, refused before anything is allocated.
        if count > r.left() / 10 {
            return Err(format!("{count} variables cannot fit in the {} bytes left", r.left()));
        }
        let mut variables = BTreeMap::new();
        for _ in 0..count {
            let at = r.at;
            let name = r.string("a variable name")?;
            let rank = r.u8("a rank")? as usize;
            if rank > MAX_RANK {
                return Err(format!("variable {name:?} (byte {at}) has rank {rank}: at most {MAX_RANK} is read"));
            }
            let mut shape = Vec::with_capacity(rank);
            for _ in 0..rank {
                shape.push(r.u32("a dimension")? as usize);
            }
            let id = r.u8("a data type")?;
            let dtype = DType::from_id(id).ok_or_else(|| format!("variable {name:?} has data type {id}, not 0..5"))?;
            let size = r.u32("a byte count")? as usize;
            let elements = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            if elements.and_then(|e| e.checked_mul(dtype.size())) != Some(size) {
                return Err(format!(
                    "variable {name:?} of shape {shape:?} and type {dtype:?} says it has {size} bytes: the shape \
                     needs {}",
                    elements
                        .and_then(|e| e.checked_mul(dtype.size()))
                        .map_or("more than can be counted".into(), |n| n.to_string())
                ));
            }
            let data = r.take(size, &format!("the {size} bytes of variable {name:?}"))?;
            if variables.insert(name.clone(), Variable { shape, dtype, bytes: data.to_vec() }).is_some() {
                return Err(format!("variable {name:?} is there twice"));
            }
        }
        let count = r.u32("the alias count")? as usize;
        if count > r.left() / 6 {
            return Err(format!("{count} aliases cannot fit in the {} bytes left", r.left()));
        }
        let mut aliases = BTreeMap::new();
        for _ in 0..count {
            let alias = r.string("an alias")?;
            let name = r.string("an aliased variable's name")?;
            if !variables.contains_key(&name) {
                return Err(format!("alias {alias:?} names {name:?}, which is no variable"));
            }
            if variables.contains_key(&alias) || aliases.insert(alias.clone(), name).is_some() {
                return Err(format!("{alias:?} is defined twice"));
            }
        }
        if r.left() != 0 {
            return Err(format!("{} bytes after the last alias (byte {}): the file is not one model", r.left(), r.at));
        }
        Ok(ModelBin { spec, revision, variables, aliases })
    }

    /// Reads `path`: a regular file of at most [`MAX_MODEL_BIN_BYTES`], parsed as above.
    pub fn read(path: &Path) -> Result<Self> {
        let bad = |m: String| Error::Import(format!("{}: {m}", path.display()));
        let meta = std::fs::metadata(path).map_err(crate::io::io_err(path))?;
        if !meta.is_file() {
            return Err(bad("not a regular file (a device or a pipe): not a CTranslate2 model.bin".into()));
        }
        if meta.len() > MAX_MODEL_BIN_BYTES {
            return Err(bad(format!("{} bytes, more than the {MAX_MODEL_BIN_BYTES} read", meta.len())));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_MODEL_BIN_BYTES + 1).read_to_end(&mut bytes))
            .map_err(crate::io::io_err(path))?;
        Self::parse(&bytes).map_err(|e| bad(format!("not a CTranslate2 model.bin: {e}")))
    }
}

/// A cursor over the file's bytes whose every read is bounded.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn take(&mut self, n: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        if n > self.left() {
            return Err(format!("the file ends at byte {} inside {what}", self.b.len()));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u8(&mut self, what: &str) -> std::result::Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    fn string(&mut self, what: &str) -> std::result::Result<String, String> {
        let at = self.at;
        let n = u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()) as usize;
        let s = self.take(n, what)?;
        match s.split_last() {
            Some((0, text)) => {
                String::from_utf8(text.to_vec()).map_err(|_| format!("{what} at byte {at} is not UTF-8"))
            }
            _ => Err(format!("{what} at byte {at} does not end in a NUL")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ModelBin {
        let mut variables = BTreeMap::new();
        variables.insert("a/weight".to_string(), Variable::f32(&[2, 3], &[1.0, -2.0, 3.5, 0.0, 5.0, 6.0]));
        variables.insert("a/num_heads".to_string(), Variable::scalar(DType::I16, 8));
        variables.insert("b/codes".to_string(), Variable::i8(&[3], &[-127, 0, 127]));
        let mut aliases = BTreeMap::new();
        aliases.insert("c/weight".to_string(), "a/weight".to_string());
        ModelBin { spec: "TransformerSpec".into(), revision: 7, variables, aliases }
    }

    #[test]
    fn the_bytes_are_the_documented_layout_and_read_back() {
        let m = sample();
        let b = m.to_bytes();
        // version, then "TransformerSpec" as u16 16, the 15 bytes and a NUL, then revision 7.
        assert_eq!(&b[..4], &6u32.to_le_bytes());
        assert_eq!(&b[4..6], &16u16.to_le_bytes());
        assert_eq!(&b[6..21], b"TransformerSpec");
        assert_eq!(b[21], 0);
        assert_eq!(&b[22..26], &7u32.to_le_bytes());
        assert_eq!(&b[26..30], &3u32.to_le_bytes());
        // The first variable in name order is a/num_heads: a rank-0 int16 (type 2) of 2 bytes.
        assert_eq!(&b[30..32], &12u16.to_le_bytes());
        assert_eq!(&b[32..44], b"a/num_heads\0");
        assert_eq!(&b[44..52], &[0, 2, 2, 0, 0, 0, 8, 0]);
        assert_eq!(ModelBin::parse(&b).unwrap(), m);
        assert_eq!(m.get("c/weight").unwrap().values(), vec![1.0, -2.0, 3.5, 0.0, 5.0, 6.0]);
        assert_eq!(m.resolve("c/weight"), "a/weight");
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_not_a_panic() {
        let b = sample().to_bytes();
        for n in 0..b.len() {
            assert!(ModelBin::parse(&b[..n]).is_err(), "a file cut at {n} bytes parsed");
        }
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..4000 {
            let mut c = b.clone();
            for _ in 0..3 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let i = (rng % c.len() as u64) as usize;
                c[i] = (rng >> 32) as u8;
            }
            let _ = ModelBin::parse(&c);
        }
        let mut long = b.clone();
        long.push(0);
        assert!(ModelBin::parse(&long).unwrap_err().contains("after the last alias"));
    }

    #[test]
    fn counts_and_sizes_are_checked_before_allocating() {
        let mut b = sample().to_bytes();
        b[26..30].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(ModelBin::parse(&b).unwrap_err().contains("cannot fit"));
        let mut b = sample().to_bytes();
        // a/num_heads' byte count (2) claimed as 4: the shape disagrees.
        b[46..50].copy_from_slice(&4u32.to_le_bytes());
        assert!(ModelBin::parse(&b).unwrap_err().contains("the shape needs 2"));
        let mut b = sample().to_bytes();
        b[..4].copy_from_slice(&5u32.to_le_bytes());
        assert!(ModelBin::parse(&b).unwrap_err().contains("binary version 5"));
    }
}
