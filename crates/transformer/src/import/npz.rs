//! Arrays from a NumPy `.npz` archive (a zip of `.npy` files), as Marian saves its models: float32
//! or float16 arrays, plus byte arrays such as Marian's `special:model.yml`; also every other
//! numeric or text element type numpy writes (f8, integers, booleans, byte and Unicode strings),
//! in either byte order, C- or Fortran-ordered.

use super::pickle::Tensor;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// One array: f32 values, or raw bytes for 1-byte integer and byte-string arrays.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// A float array, converted to f32.
    Float(Tensor),
    /// The bytes of an `int8`, `uint8` or byte-string array.
    Bytes(Vec<u8>),
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Import(format!("{}: {msg}", path.display()))
}

/// Reads every array of the archive, by name (the entry name without `.npy`). What the entries
/// inflate to is bounded in all, not only each: no more than [`super::max_entry_bytes`] of the
/// archive's size, checked against the sizes the archive declares before anything is inflated and
/// counted again as the entries are read.
pub fn read_npz(path: &Path) -> Result<BTreeMap<String, Array>> {
    // A pipe or a device named `*.npz` would block `open` or never end.
    let meta = std::fs::metadata(path).map_err(crate::io::io_err(path))?;
    if !meta.is_file() {
        return Err(bad(path, "not a regular file (a directory, a device or a pipe): not an .npz archive"));
    }
    let file = std::fs::File::open(path).map_err(crate::io::io_err(path))?;
    let archive = file.metadata().map_err(crate::io::io_err(path))?.len();
    let bound = super::max_entry_bytes(archive);
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| bad(path, format!("not an .npz (zip) archive: {e}")))?;
    if let Some(all) = zip.decompressed_size().filter(|&d| d > bound as u128) {
        return Err(bad(
            path,
            format!("its entries expand to {all} bytes in all, more than its {archive}-byte archive could hold"),
        ));
    }
    let mut left = bound;
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(|e| bad(path, format!("entry {i}: {e}")))?;
        let name = entry.name().map_err(|e| bad(path, format!("entry {i}: {e}")))?.to_string();
        let Some(key) = name.strip_suffix(".npy") else { continue };
        if entry.size() > left {
            return Err(bad(
                path,
                format!(
                    "{name} expands to {} bytes, past the {bound} bytes in all its {archive}-byte archive could hold",
                    entry.size()
                ),
            ));
        }
        let mut bytes = Vec::new();
        entry.take(left.saturating_add(1)).read_to_end(&mut bytes).map_err(|e| bad(path, format!("{name}: {e}")))?;
        if bytes.len() as u64 > left {
            return Err(bad(
                path,
                format!("{name}: the entries expand past {bound} bytes in all, more than its {archive}-byte archive could hold"),
            ));
        }
        left -= bytes.len() as u64;
        let array = parse_npy(&bytes).map_err(|m| bad(path, format!("{name}: {m}")))?;
        out.insert(key.to_string(), array);
    }
    Ok(out)
}

/// A reader of the Python literals a `.npy` header is written in: `b` from byte `i` on.
struct Lit<'a> {
    b: &'a [u8],
    i: usize,
}

impl Lit<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn try_eat(&mut self, c: u8) -> bool {
        self.ws();
        let hit = self.b.get(self.i) == Some(&c);
        self.i += hit as usize;
        hit
    }
    fn eat(&mut self, c: u8, what: &str) -> std::result::Result<(), String> {
        if self.try_eat(c) {
            Ok(())
        } else {
            Err(format!("a malformed header: {what} expected at byte {}", self.i))
        }
    }
    fn string(&mut self) -> std::result::Result<String, String> {
        self.ws();
        let q = match self.b.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("a malformed header: a quoted string expected at byte {}", self.i)),
        };
        let start = self.i + 1;
        let len = self.b[start..].iter().position(|&c| c == q).ok_or("a malformed header: an unclosed string")?;
        let s = &self.b[start..start + len];
        if s.contains(&b'\\') {
            return Err("a malformed header: an escape inside a string".into());
        }
        self.i = start + len + 1;
        String::from_utf8(s.to_vec()).map_err(|_| "the header is not text".into())
    }
    fn ident(&mut self) -> &[u8] {
        self.ws();
        let start = self.i;
        while self.i < self.b.len() && (self.b[self.i].is_ascii_alphanumeric() || self.b[self.i] == b'_') {
            self.i += 1;
        }
        &self.b[start..self.i]
    }
    fn int(&mut self) -> std::result::Result<usize, String> {
        let word = self.ident();
        let digits = word.strip_suffix(b"L").unwrap_or(word);
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return Err("a malformed 'shape': a dimension is not a whole number".into());
        }
        std::str::from_utf8(digits).unwrap().parse().map_err(|_| "a malformed 'shape': a dimension overflows".into())
    }
    /// A `shape` tuple: whole numbers, at most 64 (numpy's own limit, NPY_MAXDIMS is 32, 64
    /// from numpy 2: a header may not list more).
    fn shape(&mut self) -> std::result::Result<Vec<usize>, String> {
        self.eat(b'(', "'(' of 'shape'")?;
        let mut dims = Vec::new();
        while !self.try_eat(b')') {
            if dims.len() == 64 {
                return Err("more than 64 dimensions, more than numpy writes".into());
            }
            dims.push(self.int()?);
            if !self.try_eat(b',') {
                self.eat(b')', "')' of 'shape'")?;
                break;
            }
        }
        Ok(dims)
    }
}

/// The three keys of a `.npy` header, read from the Python dict literal it is (`{'descr': '<f4',
/// 'fortran_order': False, 'shape': (3, 2), }`): each key once, `True`/`False` exactly, a tuple
/// of whole numbers (an old numpy's `3L` too), nothing after the closing brace but padding.
/// Messages never quote the header.
fn header_dict(h: &str) -> std::result::Result<(String, bool, Vec<usize>), String> {
    let mut p = Lit { b: h.as_bytes(), i: 0 };
    p.eat(b'{', "'{'")?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    while !p.try_eat(b'}') {
        let key = p.string()?;
        p.eat(b':', "':'")?;
        match key.as_str() {
            "descr" if descr.is_none() => descr = Some(p.string()?),
            "fortran_order" if fortran.is_none() => {
                fortran = Some(match p.ident() {
                    b"True" => true,
                    b"False" => false,
                    _ => return Err("a malformed 'fortran_order': neither True nor False".into()),
                })
            }
            "shape" if shape.is_none() => shape = Some(p.shape()?),
            "descr" | "fortran_order" | "shape" => return Err("a malformed header: a key given twice".into()),
            _ => return Err("a malformed header: a key numpy does not write (only descr, fortran_order, shape)".into()),
        }
        if !p.try_eat(b',') {
            p.eat(b'}', "'}'")?;
            break;
        }
    }
    p.ws();
    if p.i != p.b.len() {
        return Err("a malformed header: text after its dict".into());
    }
    Ok((
        descr.ok_or("the header has no 'descr'")?,
        fortran.ok_or("the header has no 'fortran_order'")?,
        shape.ok_or("the header has no 'shape'")?,
    ))
}

/// Parses one `.npy` file (format versions 1–3).
pub fn parse_npy(b: &[u8]) -> std::result::Result<Array, String> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err("not a .npy array (bad magic)".into());
    }
    let (header_len, start): (usize, usize) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(format!(".npy format version {v} is not read")),
    };
    let end = start.checked_add(header_len).filter(|&e| e <= b.len()).ok_or("the header runs past the file")?;
    let header = std::str::from_utf8(&b[start..end]).map_err(|_| "the header is not text")?;
    let (descr, fortran, shape) = header_dict(header)?;
    let descr = descr.as_str();
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or("the shape overflows")?;
    let data = &b[end..];
    let need = |size: usize| -> std::result::Result<&[u8], String> {
        n.checked_mul(size)
            .filter(|&m| m <= data.len())
            .map(|m| &data[..m])
            .ok_or_else(|| format!("{} bytes of data for {n} elements of {descr}", data.len()))
    };
    let (order, kind, size) = dtype(descr)?;
    // An item's bytes: `U`'s size counts 4-byte characters.
    let size = if kind == 'U' { size.checked_mul(4).ok_or("a malformed 'descr'")? } else { size };
    let d = need(size)?;
    // A Fortran-ordered array (numpy saves a transposed array so) is put in C order, element by
    // element, before its elements are read.
    let c_order;
    let d = if fortran && shape.len() > 1 {
        c_order = fortran_to_c(d, &shape, size);
        &c_order[..]
    } else {
        d
    };
    // A number's bytes in little-endian order ('<', and '=' and '|' on this little-endian CPU).
    let le = |c: &[u8]| -> Vec<u8> {
        let mut v = c.to_vec();
        if order == '>' {
            v.reverse();
        }
        v
    };
    let float = |v: Vec<f32>| Ok(Array::Float(Tensor { shape: shape.clone(), data: v }));
    match (kind, size) {
        ('f', 4) => float(d.chunks_exact(4).map(|c| f32::from_le_bytes(le(c).try_into().expect("4 bytes"))).collect()),
        ('f', 2) => float(d.chunks_exact(2).map(|c| half::f16::from_le_bytes([le(c)[0], le(c)[1]]).to_f32()).collect()),
        // Rounded to f32, the engine's type.
        ('f', 8) => {
            float(d.chunks_exact(8).map(|c| f64::from_le_bytes(le(c).try_into().expect("8 bytes")) as f32).collect())
        }
        // Bytes: Marian's `special:model.yml` (int8, written '<i1' or '|i1'), booleans, strings.
        ('i' | 'u' | 'b', 1) | ('S', _) => Ok(Array::Bytes(d.to_vec())),
        // Unicode strings (numpy's `str` arrays: UTF-32 code units, each element NUL-padded to
        // the same length): the elements' text as UTF-8 bytes, one after another, each without
        // the NULs numpy padded it with (as numpy reads it back).
        ('U', _) => {
            let mut text = String::new();
            for element in d.chunks_exact(size) {
                let units: Vec<u32> =
                    element.chunks_exact(4).map(|c| u32::from_le_bytes(le(c).try_into().expect("4 bytes"))).collect();
                let len = units.iter().rposition(|&u| u != 0).map_or(0, |p| p + 1);
                for &unit in &units[..len] {
                    let ch = char::from_u32(unit)
                        .ok_or_else(|| format!("{descr}: {unit:#x} is not a Unicode code point"))?;
                    text.push(ch);
                }
            }
            Ok(Array::Bytes(text.into_bytes()))
        }
        // Wider integers as numbers (exact up to 2²⁴).
        ('i', 2 | 4 | 8) => float(d.chunks_exact(size).map(|c| signed(&le(c)) as f32).collect()),
        ('u', 2 | 4 | 8) => float(d.chunks_exact(size).map(|c| unsigned(&le(c)) as f32).collect()),
        _ => Err(format!(
            "element type {descr} is not read (floats of 2, 4 and 8 bytes, integers, booleans, byte and \
             Unicode strings are)"
        )),
    }
}

/// The elements of a Fortran-ordered array (`size` bytes each; the first index varies fastest)
/// laid out in C order (the last index varies fastest). The element at index (i_0, …, i_{r−1})
/// sits at Σ i_k · Π_{j<k} d_j; the index runs as an odometer, last digit fastest, its offset
/// kept up to date on every step, so the work is linear in the elements.
fn fortran_to_c(d: &[u8], shape: &[usize], size: usize) -> Vec<u8> {
    // Dimensions of one change no offset.
    let dims: Vec<usize> = shape.iter().copied().filter(|&x| x != 1).collect();
    let n = dims.iter().product::<usize>();
    if n == 0 || dims.len() < 2 {
        return d[..n * size].to_vec();
    }
    let strides: Vec<usize> = dims.iter().scan(1, |s, &x| Some(std::mem::replace(s, *s * x))).collect();
    let mut out = Vec::with_capacity(n * size);
    let (mut index, mut at) = (vec![0usize; dims.len()], 0usize);
    for _ in 0..n {
        out.extend_from_slice(&d[at * size..][..size]);
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            at += strides[k];
            if index[k] < dims[k] {
                break;
            }
            at -= dims[k] * strides[k];
            index[k] = 0;
        }
    }
    out
}

/// A numpy `descr` as (byte order, kind, item size): `<f4` → ('<', 'f', 4), `|S12` → ('|', 'S', 12).
/// '=' (native) is read as '<', this machine's order.
fn dtype(descr: &str) -> std::result::Result<(char, char, usize), String> {
    let bad = || format!("element type {descr:?} is not a numpy type");
    let mut chars = descr.chars();
    let order = match chars.next().ok_or_else(bad)? {
        '=' => '<',
        o @ ('<' | '>' | '|') => o,
        _ => return Err(bad()),
    };
    let kind = chars.next().ok_or_else(bad)?;
    let size: usize = chars.as_str().parse().map_err(|_| bad())?;
    if size == 0 || size > 1 << 20 {
        return Err(bad());
    }
    Ok((order, kind, size))
}

/// A little-endian two's-complement integer of 2, 4 or 8 bytes.
fn signed(b: &[u8]) -> i64 {
    let shift = 64 - 8 * b.len() as u32;
    ((unsigned(b) << shift) as i64) >> shift
}

/// A little-endian unsigned integer of up to 8 bytes.
fn unsigned(b: &[u8]) -> u64 {
    b.iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(' ');
        }
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h.as_bytes());
        b.extend(data);
        b
    }

    fn with_header(h: &str, data: &[u8]) -> Vec<u8> {
        let mut h = h.to_string();
        h.push('\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h.as_bytes());
        b.extend(data);
        b
    }

    #[test]
    fn the_header_is_read_as_the_dict_literal_it_is() {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let floats = |b: Vec<u8>| match parse_npy(&b) {
            Ok(Array::Float(t)) => Ok((t.shape, t.data)),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        // Keys in any order, either quote, old numpy's `L`, a one-element tuple, no trailing comma.
        let (shape, d) =
            floats(with_header("{\"shape\": (2L, 3L), 'fortran_order': True, 'descr': '<f4'}", &data)).unwrap();
        assert_eq!((shape, d), (vec![2, 3], vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]));
        assert_eq!(
            floats(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", &data)).unwrap().0,
            [6]
        );
        // A key's name inside a string value is not the key. Before, the first `'fortran_order'` in
        // the text won: here the one inside the value, so the weight was read transposed.
        let inside = "{'descr': '<f4', 'x': \"'fortran_order': True\", 'fortran_order': False, 'shape': (2, 3)}";
        assert!(floats(with_header(inside, &data)).unwrap_err().contains("a key numpy does not write"));
        let quoted = "{'shape': (2, 3), 'descr': '<f4 fortran_order True', 'fortran_order': False}";
        assert!(
            floats(with_header(quoted, &data)).unwrap_err().contains("is not a numpy type"),
            "a descr of other text"
        );
        for (h, want) in [
            ("{'descr': '<f4', 'fortran_order': Truee, 'shape': (2, 3), }", "neither True nor False"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (6,), }", "given twice"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3x), }", "not a whole number"),
            ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } trailing", "text after"),
            ("{'descr': '<f4', 'fortran_order': False}", "no 'shape'"),
            ("{'descr': '<f4\\', 'fortran_order': False, 'shape': (6,)}", "an escape"),
            ("['descr', '<f4']", "'{' expected"),
        ] {
            let e = floats(with_header(h, &data)).unwrap_err();
            assert!(e.contains(want), "{h}: {e}");
            assert!(!e.contains("trailing") && !e.contains("Truee"), "the header is quoted: {e}");
        }
    }

    #[test]
    fn reads_floats_and_bytes() {
        let data: Vec<u8> = [1.5f32, -2.0, 0.25, 8.0, 0.0, 3.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            parse_npy(&npy("<f4", "(2, 3)", &data)).unwrap(),
            Array::Float(Tensor { shape: vec![2, 3], data: vec![1.5, -2.0, 0.25, 8.0, 0.0, 3.0] })
        );
        assert_eq!(parse_npy(&npy("|i1", "(3,)", b"ab\0")).unwrap(), Array::Bytes(b"ab\0".to_vec()));
        // Marian writes its `special:model.yml` as '<i1'; numpy writes '|i1'.
        assert_eq!(parse_npy(&npy("<i1", "(3,)", b"ab\0")).unwrap(), Array::Bytes(b"ab\0".to_vec()));
        // Big-endian and double floats, and integers, are numbers.
        let be: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|x| x.to_be_bytes()).collect();
        let floats = |a: Array| match a {
            Array::Float(t) => t.data,
            other => panic!("{other:?}"),
        };
        assert_eq!(floats(parse_npy(&npy(">f4", "(2,)", &be)).unwrap()), [1.5, -2.0]);
        let f8: Vec<u8> = [0.25f64, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(floats(parse_npy(&npy("<f8", "(2,)", &f8)).unwrap()), [0.25, 3.0]);
        let i4: Vec<u8> = [-7i32, 9].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(floats(parse_npy(&npy("<i4", "(2,)", &i4)).unwrap()), [-7.0, 9.0]);
        let i2: Vec<u8> = [-3i16, 4].iter().flat_map(|x| x.to_be_bytes()).collect();
        assert_eq!(floats(parse_npy(&npy(">i2", "(2,)", &i2)).unwrap()), [-3.0, 4.0]);
        let u8s: Vec<u8> = [5u64, 1 << 20].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(floats(parse_npy(&npy("<u8", "(2,)", &u8s)).unwrap()), [5.0, 1048576.0]);
        for bad in ["<c8", "<f3", "f4", "<f", "<fx", "<O8"] {
            assert!(parse_npy(&npy(bad, "(1,)", &[0; 8])).is_err(), "{bad}");
        }
        assert!(parse_npy(&npy("<f4", "(2, 3)", &data[..20])).unwrap_err().contains("bytes of data"));
        assert!(parse_npy(&npy("<c16", "(1,)", &[0; 16])).unwrap_err().contains("not read"));
        assert!(parse_npy(b"garbage").is_err());
    }

    /// Every other element type numpy writes for numbers and text: half floats (what Marian saves
    /// for an fp16 model) in either byte order, booleans, unsigned bytes, byte strings, Unicode
    /// strings; and Fortran-ordered arrays, put in C order.
    #[test]
    fn reads_halves_strings_and_fortran_order() {
        let floats = |a: Array| match a {
            Array::Float(t) => (t.shape, t.data),
            other => panic!("{other:?}"),
        };
        let halves = [1.5f32, -2.0, 0.099975586, 65504.0];
        let le: Vec<u8> = halves.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect();
        let be: Vec<u8> = halves.iter().flat_map(|&x| half::f16::from_f32(x).to_be_bytes()).collect();
        assert_eq!(floats(parse_npy(&npy("<f2", "(4,)", &le)).unwrap()).1, halves);
        assert_eq!(floats(parse_npy(&npy(">f2", "(2, 2)", &be)).unwrap()), (vec![2, 2], halves.to_vec()));
        assert_eq!(parse_npy(&npy("|b1", "(3,)", &[1, 0, 1])).unwrap(), Array::Bytes(vec![1, 0, 1]));
        assert_eq!(parse_npy(&npy("|u1", "(2,)", &[200, 7])).unwrap(), Array::Bytes(vec![200, 7]));
        assert_eq!(parse_npy(&npy("|S5", "(1,)", b"dim: ")).unwrap(), Array::Bytes(b"dim: ".to_vec()));
        // 'U3' holding "ä:" and a NUL pad, in either byte order.
        let utf32 = |be: bool| -> Vec<u8> {
            ['ä', ':', '\0']
                .iter()
                .flat_map(|&c| if be { (c as u32).to_be_bytes() } else { (c as u32).to_le_bytes() })
                .collect()
        };
        assert_eq!(parse_npy(&npy("<U3", "(1,)", &utf32(false))).unwrap(), Array::Bytes("ä:".as_bytes().to_vec()));
        assert_eq!(parse_npy(&npy(">U3", "(1,)", &utf32(true))).unwrap(), Array::Bytes("ä:".as_bytes().to_vec()));
        let surrogate = 0xd800u32.to_le_bytes();
        assert!(parse_npy(&npy("<U1", "(1,)", &surrogate)).unwrap_err().contains("not a Unicode code point"));
        // np.save(a.T) of a = [[1, 2, 3], [4, 5, 6]]: shape (3, 2), stored column by column.
        let fortran = |descr: &str, shape: &str, data: &[u8]| {
            let mut b = npy(descr, shape, data);
            let at = b.windows(5).position(|w| w == b"False").unwrap();
            b.splice(at..at + 5, b"True ".iter().copied());
            b
        };
        let cols: Vec<u8> = [1f32, 2., 3., 4., 5., 6.].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(
            floats(parse_npy(&fortran("<f4", "(3, 2)", &cols)).unwrap()),
            (vec![3, 2], vec![1., 4., 2., 5., 3., 6.])
        );
        // Three dimensions, (2, 3, 2): element (i, j, k) at i + 2j + 6k.
        let f: Vec<u8> = (0..12).map(|x| x as f32).flat_map(|x| x.to_le_bytes()).collect();
        let (_, got) = floats(parse_npy(&fortran("<f4", "(2, 3, 2)", &f)).unwrap());
        let want: Vec<f32> =
            (0..2).flat_map(|i| (0..3).flat_map(move |j| (0..2).map(move |k| (i + 2 * j + 6 * k) as f32))).collect();
        assert_eq!(got, want);
        // Dimensions of one anywhere: the same elements as without them.
        let (_, got) = floats(parse_npy(&fortran("<f4", "(1, 2, 1, 3, 2, 1)", &f)).unwrap());
        assert_eq!(got, want);
        // A header listing more dimensions than numpy writes is refused (not converted at length).
        let many = format!("({}2,)", "1, ".repeat(200));
        assert!(parse_npy(&fortran("<f4", &many, &[0; 8])).unwrap_err().contains("more than numpy writes"));
        // Two Unicode elements, the first padded: each loses its padding, not what lies between.
        let two: Vec<u8> = ['a', '\0', 'b', 'c'].iter().flat_map(|&c| (c as u32).to_le_bytes()).collect();
        assert_eq!(parse_npy(&npy("<U2", "(2,)", &two)).unwrap(), Array::Bytes(b"abc".to_vec()));
        // One dimension: the same either way.
        assert_eq!(floats(parse_npy(&fortran("<f4", "(6,)", &cols)).unwrap()).1, [1., 2., 3., 4., 5., 6.]);
    }
}
