//! Tensors from a PyTorch `pytorch_model.bin` (the zip format of `torch.save`, PyTorch ≥ 1.6)
//! without running any pickle code.
//!
//! The archive holds `<name>/data.pkl`, a pickle of the state dict, and one `<name>/data/<key>`
//! entry per storage. The pickle is read by a small stack machine that knows the opcodes
//! `torch.save` writes and builds plain values; it never imports or calls anything. A call
//! (`REDUCE`) is only understood for an allowlist of callables, by name:
//! `collections.OrderedDict` (a dict), `torch._utils._rebuild_tensor_v2` and
//! `torch._utils._rebuild_parameter` (a tensor: storage, offset, shape, strides), and the storage
//! types `torch.FloatStorage`, `HalfStorage`, `BFloat16Storage` named in persistent ids. Any other
//! global is refused with an error naming it.
//!
//! Untrusted pickles are read in bounded memory and stack: values are shared, so a memo read
//! copies a pointer (a pickle that doubles a value from the memo, level upon level, holds one node
//! a level); no value may nest deeper than [`MAX_DEPTH`], so nothing that recurses over values
//! (dropping, printing) can overflow the stack; at most [`MAX_VALUES`] values are built (counting
//! the copies that changing a shared list or dict makes); `data.pkl` is at most
//! [`MAX_PICKLE_BYTES`]; and error messages describe a value briefly, never print it whole.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::rc::Rc;

/// A tensor's element type in the archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// float32.
    F32,
    /// float16.
    F16,
    /// bfloat16.
    Bf16,
}

impl DType {
    fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
        }
    }
}

/// One tensor of the state dict, as f32.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Shape.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: Vec<f32>,
}

/// Most nesting a value may have. A state dict nests four deep; anything deeper is refused before
/// any code recurses over it (dropping, printing), so untrusted nesting cannot overflow the stack.
pub const MAX_DEPTH: usize = 100;
/// Most values one pickle may build, counting the elements copied when a list or dict that is also
/// in the memo is changed. A state dict of a thousand tensors builds about twenty thousand.
pub const MAX_VALUES: usize = 1 << 22;
/// Most dimensions a tensor may have.
pub const MAX_DIMS: usize = 16;
/// Largest `data.pkl` read (a state dict's pickle takes some kilobytes per hundred tensors).
pub const MAX_PICKLE_BYTES: u64 = 64 << 20;

/// A value built by the pickle machine. Compound values and strings are shared (`Rc`), so a memo
/// read (`GET`) copies a pointer, never the value: a pickle that builds `(x, x)` from memo reads,
/// level upon level, holds one node a level instead of doubling. Some payloads are kept for error
/// messages only.
#[derive(Clone, Debug)]
#[allow(dead_code)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    Tuple(Seq<Value>),
    List(Seq<Value>),
    Dict(Seq<(Value, Value)>),
    /// `module.name`, not resolved.
    Global(Rc<str>),
    /// A persistent id (a storage reference): its tuple, as a one-element sequence.
    PersId(Seq<Value>),
    /// A tensor view.
    Tensor(Rc<TensorView>),
    /// The stack mark.
    Mark,
}

/// Shared elements with the nesting depth of the value that holds them (1 + the deepest element),
/// kept so that no check ever walks the elements.
#[derive(Clone, Debug)]
struct Seq<T> {
    depth: usize,
    items: Rc<Vec<T>>,
}

impl Value {
    fn depth(&self) -> usize {
        match self {
            Value::Tuple(s) | Value::List(s) | Value::PersId(s) => s.depth,
            Value::Dict(s) => s.depth,
            _ => 0,
        }
    }

    /// A short description for error messages, however large or deep the value is.
    fn brief(&self) -> String {
        let quoted = |s: &str| format!("{:?}", cut(s));
        match self {
            Value::None => "None".into(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Str(s) => format!("the string {}", quoted(s)),
            Value::Bytes(b) => format!("{} bytes", b.len()),
            Value::Tuple(s) => format!("a tuple of {} values", s.items.len()),
            Value::List(s) => format!("a list of {} values", s.items.len()),
            Value::Dict(s) => format!("a dict of {} items", s.items.len()),
            Value::Global(g) => format!("the global {}", quoted(g)),
            Value::PersId(_) => "a persistent id".into(),
            Value::Tensor(_) => "a tensor".into(),
            Value::Mark => "a MARK".into(),
        }
    }
}

/// One tensor of a state dict as its pickle describes it: a view of a storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorView {
    /// The storage's key (its entry is `<archive>/data/<key>`).
    pub key: String,
    /// The storage's element type.
    pub dtype: DType,
    /// The view's first element, in elements from the storage's start.
    pub offset: usize,
    /// Shape.
    pub shape: Vec<usize>,
    /// Strides, in elements.
    pub strides: Vec<usize>,
}

/// At most 200 characters of `s`, for error messages (names in a hostile pickle can be megabytes).
fn cut(s: &str) -> String {
    let head: String = s.chars().take(200).collect();
    if head.len() < s.len() {
        format!("{head}…")
    } else {
        head
    }
}

fn bad(path: &Path, msg: impl std::fmt::Display) -> Error {
    Error::Import(format!("{}: {msg}", path.display()))
}

/// Reads every tensor of the state dict in `path` (a `torch.save` zip archive), converted to f32.
/// Refuses the old non-zip format, pickles that call anything outside the allowlist, and
/// storages that are missing or too short for their views.
pub fn read_state_dict(path: &Path) -> Result<BTreeMap<String, Tensor>> {
    let file = std::fs::File::open(path).map_err(crate::io::io_err(path))?;
    let bound = super::max_entry_bytes(file.metadata().map_err(crate::io::io_err(path))?.len());
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file)).map_err(|e| {
        bad(
            path,
            format!(
                "not a zip archive ({e}): only the zip format of torch.save (PyTorch ≥ 1.6) is read; re-save it with \
                 torch.save(state_dict, path) or use model.safetensors"
            ),
        )
    })?;
    let (pkl_name, pkl) = read_pickle(&mut zip, path)?;
    let prefix = pkl_name.trim_end_matches("data.pkl").to_string();
    let views = tensor_views(&pkl).map_err(|m| bad(path, format!("{pkl_name}: {m}")))?;
    let Geometry { extents, need } = geometry(&views, path, &pkl_name)?;
    let mut storages: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for ((name, view), (n, end)) in views.into_iter().zip(extents) {
        if !storages.contains_key(&view.key) {
            let entry = format!("{prefix}data/{}", view.key);
            let mut bytes = Vec::new();
            zip.by_name(&entry)
                .and_then(|f| f.take((need[&view.key] as u64).min(bound)).read_to_end(&mut bytes).map_err(Into::into))
                .map_err(|e| bad(path, format!("{}: storage {}: {e}", cut(&name), cut(&entry))))?;
            storages.insert(view.key.clone(), bytes);
        }
        let bytes = &storages[&view.key];
        // The view must lie inside the storage, and every element must have bytes of its own (a
        // zero stride could repeat one element without bound).
        if n > 0 && (end > bytes.len() || n.saturating_mul(view.dtype.size()) > bytes.len()) {
            return Err(bad(
                path,
                format!("{}: its view reaches past its storage ({} bytes)", cut(&name), bytes.len()),
            ));
        }
        let data = gather(bytes, &view, n);
        out.insert(name, Tensor { shape: view.shape, data });
    }
    Ok(out)
}

/// The archive's `data.pkl` (at any prefix), by its entry name, read up to [`MAX_PICKLE_BYTES`].
fn read_pickle<R: std::io::Read + std::io::Seek>(
    zip: &mut zip::ZipArchive<R>,
    path: &Path,
) -> Result<(String, Vec<u8>)> {
    let pkl_name = (0..zip.len())
        .filter_map(|i| zip.name_for_index(i).and_then(|n| n.ok()).map(|n| n.to_string()))
        .find(|n| n.ends_with("/data.pkl") || n == "data.pkl")
        .ok_or_else(|| bad(path, "no data.pkl in the archive: not a torch.save file"))?;
    let mut pkl = Vec::new();
    zip.by_name(&pkl_name)
        .and_then(|f| f.take(MAX_PICKLE_BYTES + 1).read_to_end(&mut pkl).map_err(Into::into))
        .map_err(|e| bad(path, format!("{pkl_name}: {e}")))?;
    if pkl.len() as u64 > MAX_PICKLE_BYTES {
        return Err(bad(
            path,
            format!("{pkl_name} is larger than {MAX_PICKLE_BYTES} bytes: not the pickle of a state dict"),
        ));
    }
    Ok((pkl_name, pkl))
}

/// Where a state dict's views lie in their storages.
struct Geometry {
    /// Per view: its element count, and the end of the bytes of its storage it reaches.
    extents: Vec<(usize, usize)>,
    /// Per storage key: the bytes its views reach.
    need: BTreeMap<String, usize>,
}

/// The geometry of every view first: its element count and the bytes of its storage it reaches
/// (without overflow), so that each storage is read only as far as its views need, and a state
/// dict cannot name its storages over and over to multiply what is built from them.
fn geometry(views: &[(String, TensorView)], path: &Path, pkl_name: &str) -> Result<Geometry> {
    let mut extents = Vec::with_capacity(views.len());
    let mut need: BTreeMap<String, usize> = BTreeMap::new();
    let mut elements = 0usize;
    for (name, v) in views {
        let n = v.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let last = v
            .shape
            .iter()
            .zip(&v.strides)
            .try_fold(v.offset, |a, (&s, &st)| s.saturating_sub(1).checked_mul(st).and_then(|x| a.checked_add(x)));
        let end = last.and_then(|l| l.checked_add(1)).and_then(|e| e.checked_mul(v.dtype.size()));
        let (Some(n), Some(end)) = (n, end) else {
            return Err(bad(path, format!("{}: its shape and strides overflow", cut(name))));
        };
        let end = if n == 0 { 0 } else { end };
        let e = need.entry(v.key.clone()).or_insert(0);
        *e = (*e).max(end);
        elements = elements.saturating_add(n);
        extents.push((n, end));
    }
    let stored: usize = need.values().fold(0usize, |a, &b| a.saturating_add(b));
    // Tied weights name one storage a few times (an embedding three or four); sixteen f32 names
    // of every storage are allowed.
    if elements > stored.saturating_mul(4).saturating_add(1 << 20) {
        return Err(bad(
            path,
            format!(
                "{pkl_name}: its {} tensors hold {elements} elements, read from {stored} bytes of storage: the state dict \
                 names its storages many times over",
                views.len()
            ),
        ));
    }
    Ok(Geometry { extents, need })
}

/// The `n` elements of `view` from its storage's `bytes` (checked to hold them), in row-major
/// order, as f32.
fn gather(bytes: &[u8], view: &TensorView, n: usize) -> Vec<f32> {
    let TensorView { dtype, offset, shape, strides, .. } = view;
    let mut data = Vec::with_capacity(n);
    let mut index = vec![0usize; shape.len()];
    for _ in 0..n {
        let at = offset + index.iter().zip(strides).map(|(&i, &s)| i * s).sum::<usize>();
        let b = &bytes[at * dtype.size()..][..dtype.size()];
        data.push(match dtype {
            DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            DType::F16 => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
            DType::Bf16 => half::bf16::from_le_bytes([b[0], b[1]]).to_f32(),
        });
        for d in (0..shape.len()).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    data
}

/// The tensors a state dict's pickle (`data.pkl`) describes, by name, in the pickle's order,
/// without reading their storages. Refuses what [`read_state_dict`] refuses in the pickle: calls
/// outside the allowlist, values nested deeper than [`MAX_DEPTH`], more than [`MAX_VALUES`] values
/// built, and anything but a dict of tensors at the root.
pub fn tensor_views(pkl: &[u8]) -> std::result::Result<Vec<(String, TensorView)>, String> {
    let root = Machine::new(pkl).run()?;
    let Value::Dict(items) = root else {
        return Err(format!("the pickle is {}, not a state dict (a dict of tensors)", root.brief()));
    };
    let mut out = Vec::with_capacity(items.items.len());
    for (k, v) in items.items.iter() {
        let Value::Str(name) = k else { return Err(format!("a state dict key is {}, not a string", k.brief())) };
        let Value::Tensor(view) = v else { return Err(format!("{} is {}, not a tensor", cut(name), v.brief())) };
        out.push((name.to_string(), view.as_ref().clone()));
    }
    Ok(out)
}

struct Machine<'a> {
    code: &'a [u8],
    at: usize,
    stack: Vec<Value>,
    memo: BTreeMap<u64, Value>,
    /// Values built so far (see [`MAX_VALUES`]).
    built: usize,
}

type Step<T> = std::result::Result<T, String>;

fn check_depth(depth: usize) -> Step<()> {
    if depth > MAX_DEPTH {
        return Err(format!("values nested deeper than {MAX_DEPTH}: not a state dict"));
    }
    Ok(())
}

/// Elements shared in a new sequence, with its depth checked.
fn seq<T>(items: Vec<T>, depth_of: impl Fn(&T) -> usize) -> Step<Seq<T>> {
    let depth = 1 + items.iter().map(depth_of).max().unwrap_or(0);
    check_depth(depth)?;
    Ok(Seq { depth, items: Rc::new(items) })
}

fn tuple(items: Vec<Value>) -> Step<Value> {
    Ok(Value::Tuple(seq(items, Value::depth)?))
}

fn pair_depth(p: &(Value, Value)) -> usize {
    p.0.depth().max(p.1.depth())
}

impl<'a> Machine<'a> {
    fn new(code: &'a [u8]) -> Self {
        Machine { code, at: 0, stack: Vec::new(), memo: BTreeMap::new(), built: 0 }
    }

    /// Counts `n` more values built.
    fn count(&mut self, n: usize) -> Step<()> {
        self.built = self.built.saturating_add(n);
        if self.built > MAX_VALUES {
            return Err(format!("the pickle builds more than {MAX_VALUES} values: not a state dict"));
        }
        Ok(())
    }

    fn push(&mut self, v: Value) -> Step<()> {
        self.count(1)?;
        self.stack.push(v);
        Ok(())
    }

    fn take(&mut self, n: usize) -> Step<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.code.len()).ok_or("the pickle ends early")?;
        let s = &self.code[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u8(&mut self) -> Step<u8> {
        Ok(self.take(1)?[0])
    }

    fn le(&mut self, n: usize) -> Step<u64> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |a, &b| (a << 8) | b as u64))
    }

    fn line(&mut self) -> Step<String> {
        let rest = &self.code[self.at..];
        let n = rest.iter().position(|&b| b == b'\n').ok_or("unterminated GLOBAL")?;
        let s = String::from_utf8(rest[..n].to_vec()).map_err(|_| "a GLOBAL name is not UTF-8")?;
        self.at += n + 1;
        Ok(s)
    }

    fn pop(&mut self) -> Step<Value> {
        self.stack.pop().ok_or_else(|| "stack underflow".to_string())
    }

    /// The values above the topmost mark, which is removed.
    fn pop_mark(&mut self) -> Step<Vec<Value>> {
        let m = self.stack.iter().rposition(|v| matches!(v, Value::Mark)).ok_or("MARK missing")?;
        let items = self.stack.split_off(m + 1);
        self.stack.pop();
        Ok(items)
    }

    fn top(&self) -> Step<&Value> {
        self.stack.last().ok_or_else(|| "stack underflow".to_string())
    }

    fn string(bytes: &[u8]) -> Step<Value> {
        let s = std::str::from_utf8(bytes).map_err(|_| "a string is not UTF-8")?;
        Ok(Value::Str(Rc::from(s)))
    }

    /// The elements a change of the list or dict on top of the stack copies first: all of them when
    /// the memo shares it, none otherwise.
    fn copied_by_change(&self, op: &str) -> Step<usize> {
        let (len, shared) = match self.top()? {
            Value::List(s) => (s.items.len(), Rc::strong_count(&s.items) > 1),
            Value::Dict(s) => (s.items.len(), Rc::strong_count(&s.items) > 1),
            other => return Err(format!("{op} on {}", other.brief())),
        };
        Ok(if shared { len } else { 0 })
    }

    /// APPEND / APPENDS: `items` onto the list on top of the stack.
    fn extend_list(&mut self, items: Vec<Value>, op: &str) -> Step<()> {
        let depth = 1 + items.iter().map(Value::depth).max().unwrap_or(0);
        check_depth(depth)?;
        let copied = self.copied_by_change(op)?;
        self.count(copied)?;
        match self.stack.last_mut() {
            Some(Value::List(s)) => {
                s.depth = s.depth.max(depth);
                Rc::make_mut(&mut s.items).extend(items);
                Ok(())
            }
            _ => Err(format!("{op} to a non-list")),
        }
    }

    /// SETITEM / SETITEMS: `pairs` into the dict on top of the stack.
    fn extend_dict(&mut self, pairs: Vec<(Value, Value)>, op: &str) -> Step<()> {
        let depth = 1 + pairs.iter().map(pair_depth).max().unwrap_or(0);
        check_depth(depth)?;
        let copied = self.copied_by_change(op)?;
        self.count(copied)?;
        match self.stack.last_mut() {
            Some(Value::Dict(s)) => {
                s.depth = s.depth.max(depth);
                Rc::make_mut(&mut s.items).extend(pairs);
                Ok(())
            }
            _ => Err(format!("{op} on a non-dict")),
        }
    }

    fn memo_put(&mut self, k: u64) -> Step<()> {
        let v = self.top()?.clone();
        self.count(1)?;
        self.memo.insert(k, v);
        Ok(())
    }

    fn run(mut self) -> Step<Value> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    self.u8()?; // PROTO
                }
                0x95 => {
                    self.take(8)?; // FRAME
                }
                b'.' => return self.pop(),
                b'(' => self.push(Value::Mark)?,
                b'}' => self.push(Value::Dict(seq(Vec::new(), pair_depth)?))?,
                b']' => self.push(Value::List(seq(Vec::new(), Value::depth)?))?,
                b')' => self.push(tuple(Vec::new())?)?,
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'K' => {
                    let v = self.le(1)? as i64;
                    self.push(Value::Int(v))?;
                }
                b'M' => {
                    let v = self.le(2)? as i64;
                    self.push(Value::Int(v))?;
                }
                b'J' => {
                    let v = self.le(4)? as u32 as i32 as i64;
                    self.push(Value::Int(v))?;
                }
                0x8a => {
                    // LONG1: little-endian two's complement of n ≤ 8 bytes.
                    let n = self.u8()? as usize;
                    if n > 8 {
                        return Err("an integer wider than 64 bits".into());
                    }
                    let b = self.take(n)?;
                    let mut v = b.iter().rev().fold(0i64, |a, &x| (a << 8) | x as i64);
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v -= 1i64 << (8 * n);
                    }
                    self.push(Value::Int(v))?;
                }
                b'G' => {
                    let b = self.take(8)?;
                    self.push(Value::Float(f64::from_be_bytes(b.try_into().expect("8 bytes"))))?;
                }
                b'X' => {
                    let n = self.le(4)? as usize;
                    let v = Self::string(self.take(n)?)?;
                    self.push(v)?;
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let v = Self::string(self.take(n)?)?;
                    self.push(v)?;
                }
                0x8d => {
                    let n = self.le(8)? as usize;
                    let v = Self::string(self.take(n)?)?;
                    self.push(v)?;
                }
                b'B' => {
                    let n = self.le(4)? as usize;
                    let v = Rc::from(self.take(n)?);
                    self.push(Value::Bytes(v))?;
                }
                b'C' => {
                    let n = self.u8()? as usize;
                    let v = Rc::from(self.take(n)?);
                    self.push(Value::Bytes(v))?;
                }
                b'q' => {
                    let k = self.le(1)?;
                    self.memo_put(k)?;
                }
                b'r' => {
                    let k = self.le(4)?;
                    self.memo_put(k)?;
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    self.memo_put(k)?;
                }
                b'h' | b'j' => {
                    let k = if op == b'h' { self.le(1)? } else { self.le(4)? };
                    // A shared copy: the value itself is not duplicated.
                    let v = self.memo.get(&k).cloned().ok_or("a memo entry read before it was written")?;
                    self.push(v)?;
                }
                b't' => {
                    let items = self.pop_mark()?;
                    let v = tuple(items)?;
                    self.push(v)?;
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return Err("stack underflow".into());
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = tuple(items)?;
                    self.push(v)?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.push(Value::Global(Rc::from(format!("{module}.{name}"))))?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (module, name) {
                        (Value::Str(m), Value::Str(n)) => self.push(Value::Global(Rc::from(format!("{m}.{n}"))))?,
                        _ => return Err("STACK_GLOBAL of non-strings".into()),
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = Value::PersId(seq(vec![pid], Value::depth)?);
                    self.push(v)?;
                }
                b'R' | 0x81 => {
                    // REDUCE, or NEWOBJ (cls.__new__(cls, *args)): allowlisted calls only.
                    let args = self.pop()?;
                    let func = self.pop()?;
                    let v = call(func, args)?;
                    self.push(v)?;
                }
                b'b' => {
                    // BUILD: the state of a dict (the state dict's `_metadata`) or of a tensor
                    // is not needed.
                    self.pop()?;
                }
                b'a' => {
                    let v = self.pop()?;
                    self.extend_list(vec![v], "APPEND")?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.extend_list(items, "APPENDS")?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.extend_dict(vec![(k, v)], "SETITEM")?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err("SETITEMS with an odd number of values".into());
                    }
                    let mut it = items.into_iter();
                    let mut pairs = Vec::new();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    self.extend_dict(pairs, "SETITEMS")?;
                }
                other => {
                    return Err(format!(
                        "pickle opcode 0x{other:02x} at byte {} is not one torch.save writes for a state dict",
                        self.at - 1
                    ))
                }
            }
        }
    }
}

fn int(v: &Value) -> Step<usize> {
    match v {
        Value::Int(i) if *i >= 0 => Ok(*i as usize),
        _ => Err(format!("expected a non-negative integer, found {}", v.brief())),
    }
}

fn ints(v: &Value) -> Step<Vec<usize>> {
    match v {
        Value::Tuple(t) | Value::List(t) => t.items.iter().map(int).collect(),
        _ => Err(format!("expected a tuple of integers, found {}", v.brief())),
    }
}

/// A call the state dict needs, by the callable's name; anything else is refused.
fn call(func: Value, args: Value) -> Step<Value> {
    let Value::Global(name) = func else { return Err(format!("a call of {}, not a global", func.brief())) };
    let Value::Tuple(args) = args else { return Err(format!("{}: arguments are not a tuple", cut(&name))) };
    let args = args.items.as_slice();
    match &*name {
        "collections.OrderedDict" | "builtins.dict" => Ok(Value::Dict(seq(Vec::new(), pair_depth)?)),
        "torch._utils._rebuild_tensor_v2" | "torch._utils._rebuild_tensor" => {
            if args.len() < 4 {
                return Err(format!("{name} with {} arguments", args.len()));
            }
            let Value::PersId(pid) = &args[0] else {
                return Err(format!("{name}: the storage is {}, not a persistent id", args[0].brief()));
            };
            for a in &args[2..4] {
                if let Value::Tuple(t) | Value::List(t) = a {
                    if t.items.len() > MAX_DIMS {
                        return Err(format!(
                            "{name}: a tensor of {} dimensions (at most {MAX_DIMS} are read)",
                            t.items.len()
                        ));
                    }
                }
            }
            let Value::Tuple(pid) = &pid.items[0] else {
                return Err(format!("a persistent id is {}, not a tuple", pid.items[0].brief()));
            };
            let pid = pid.items.as_slice();
            // ('storage', storage type, key, location, numel)
            if pid.len() < 3 || !matches!(&pid[0], Value::Str(s) if &**s == "storage") {
                let first = pid.first().map_or("nothing".to_string(), Value::brief);
                return Err(format!("unexpected persistent id: {} values, the first {first}", pid.len()));
            }
            let dtype = match &pid[1] {
                Value::Global(g) if &**g == "torch.FloatStorage" => DType::F32,
                Value::Global(g) if &**g == "torch.HalfStorage" => DType::F16,
                Value::Global(g) if &**g == "torch.BFloat16Storage" => DType::Bf16,
                other => {
                    return Err(format!(
                        "storage type {} is not read (float32, float16 and bfloat16 are): convert the model to \
                         one of those",
                        other.brief()
                    ))
                }
            };
            let key = match &pid[2] {
                Value::Str(s) => s.to_string(),
                Value::Int(i) => i.to_string(),
                other => return Err(format!("a storage key {}", other.brief())),
            };
            let (offset, shape, strides) = (int(&args[1])?, ints(&args[2])?, ints(&args[3])?);
            if shape.len() != strides.len() {
                return Err(format!("{name}: {} sizes but {} strides", shape.len(), strides.len()));
            }
            Ok(Value::Tensor(Rc::new(TensorView { key, dtype, offset, shape, strides })))
        }
        "torch._utils._rebuild_parameter" | "torch._utils._rebuild_parameter_with_state" => {
            args.first().cloned().ok_or_else(|| format!("{name} without a tensor"))
        }
        _ => Err(format!(
            "the pickle calls {}, which is not part of a plain state dict: refused (no pickle code is run); \
             save the state dict alone, or use model.safetensors",
            cut(&name)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_calls_outside_the_allowlist() {
        // pickle.dumps(os.system, protocol=2) then a call: c os\nsystem\n ( S'echo' t R .
        let code = b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00echo\x85R.";
        let err = Machine::new(code).run().unwrap_err();
        assert!(err.contains("os.system") && err.contains("refused"), "{err}");
    }

    #[test]
    fn reads_a_dict_of_ints() {
        // {'a': 1, 'b': -2}: } q ( X a K1 X b J-2 u .
        let code = b"\x80\x02}q\x00(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00bJ\xfe\xff\xff\xffu.";
        let Value::Dict(d) = Machine::new(code).run().unwrap() else { panic!("not a dict") };
        assert_eq!(d.items.len(), 2);
        assert!(matches!((&d.items[1].0, &d.items[1].1), (Value::Str(k), Value::Int(-2)) if &**k == "b"));
    }

    #[test]
    fn truncated_pickles_are_errors() {
        assert!(Machine::new(b"\x80\x02}q").run().is_err());
        assert!(Machine::new(b"").run().is_err());
    }
}
