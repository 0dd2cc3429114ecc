//! The model file: a protobuf `ModelProto` (`sentencepiece_model.proto`), read by hand. Only the
//! fields that change encoding or decoding are read: the pieces (text, score, type), the
//! `TrainerSpec`'s model type, whitespace, byte-fallback and special-id settings, and the
//! normaliser specs (their fields are read by `normalizer.rs`).

use crate::error::{Error, Result};

/// What decoding writes for the unknown piece unless the model names another `unk_surface`.
const DEFAULT_UNK_SURFACE: &str = " \u{2047} ";

/// An error for a file that is not a usable SentencePiece model.
pub(super) fn spm_err(reason: impl std::fmt::Display) -> Error {
    Error::Input(format!("not a usable SentencePiece model: {reason}"))
}

// ---------------------------------------------------------------------------------------------
// Protobuf wire format: just enough to read ModelProto.

/// One field of a protobuf message: its number and its value.
pub(super) enum Field<'a> {
    Varint(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
    Fixed64,
}

/// Iterates over the fields of one protobuf message.
pub(super) struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    /// The fields of the message `data`.
    pub(super) fn new(data: &'a [u8]) -> Self {
        Fields { data, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.data.get(self.pos).ok_or_else(|| spm_err("the protobuf data ends inside a number"))?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(spm_err("a protobuf number is longer than 10 bytes"))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or_else(|| spm_err("the protobuf data ends inside a field"))?;
        let bytes = &self.data[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The next field as (number, value), `None` at the end of the message.
    pub(super) fn next_field(&mut self) -> Result<Option<(u64, Field<'a>)>> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed64
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| spm_err("a protobuf field is too long"))?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                let b = self.take(4)?;
                Field::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            wire => return Err(spm_err(format!("unsupported protobuf wire type {wire}"))),
        };
        Ok(Some((key >> 3, value)))
    }
}

/// A `string` field.
fn field_str<'a>(value: &Field<'a>, what: &str) -> Result<&'a str> {
    match value {
        Field::Bytes(b) => std::str::from_utf8(b).map_err(|_| spm_err(format!("{what} is not UTF-8"))),
        _ => Err(spm_err(format!("{what} has the wrong protobuf type"))),
    }
}

/// A `bytes` or message field.
pub(super) fn field_bytes<'a>(value: &Field<'a>, what: &str) -> Result<&'a [u8]> {
    match value {
        Field::Bytes(b) => Ok(b),
        _ => Err(spm_err(format!("{what} has the wrong protobuf type"))),
    }
}

/// A `uint64`, `int64` or `bool` field.
pub(super) fn field_varint(value: &Field, what: &str) -> Result<u64> {
    match value {
        Field::Varint(v) => Ok(*v),
        _ => Err(spm_err(format!("{what} has the wrong protobuf type"))),
    }
}

/// An `int32` field: negative values travel as 64-bit two's complement.
fn field_i32(value: &Field, what: &str) -> Result<i32> {
    Ok(field_varint(value, what)? as i64 as i32)
}

// ---------------------------------------------------------------------------------------------
// The model's records.

/// The kind of a vocabulary entry (`ModelProto.SentencePiece.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceType {
    /// An ordinary piece.
    Normal,
    /// The unknown piece (`<unk>`).
    Unknown,
    /// A control symbol (`<s>`, `</s>`): never produced from text, invisible when decoded.
    Control,
    /// A user-defined symbol: always kept whole, never normalised.
    UserDefined,
    /// A piece in the vocabulary that encoding must not produce.
    Unused,
    /// A byte piece `<0xXX>` (byte fallback).
    Byte,
}

/// One vocabulary entry (`ModelProto.SentencePiece`).
#[derive(Clone, Debug)]
pub(super) struct Piece {
    /// Its text.
    pub(super) piece: String,
    /// Its score (a unigram log probability, or a BPE merge's rank).
    pub(super) score: f32,
    /// Its kind.
    pub(super) kind: PieceType,
}

/// The model kind (`TrainerSpec.model_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelType {
    /// Unigram language model (Viterbi segmentation).
    Unigram,
    /// Byte-pair encoding.
    Bpe,
}

/// The top level of a `ModelProto`: its pieces, and its specs still as bytes.
pub(super) struct ModelProto<'a> {
    /// The vocabulary, by id (never empty).
    pub(super) pieces: Vec<Piece>,
    /// `trainer_spec`.
    pub(super) trainer: &'a [u8],
    /// `normalizer_spec`.
    pub(super) normalizer: &'a [u8],
    /// `denormalizer_spec`, when present.
    pub(super) denormalizer: Option<&'a [u8]>,
}

impl<'a> ModelProto<'a> {
    /// Reads the top level of a model file's `bytes`; a model without pieces is refused.
    pub(super) fn parse(bytes: &'a [u8]) -> Result<Self> {
        let mut pieces = Vec::new();
        let mut trainer: &[u8] = &[];
        let mut normalizer: &[u8] = &[];
        let mut denormalizer: Option<&[u8]> = None;
        let mut fields = Fields::new(bytes);
        while let Some((number, value)) = fields.next_field()? {
            match number {
                1 => pieces.push(parse_piece(field_bytes(&value, "a piece")?)?),
                2 => trainer = field_bytes(&value, "trainer_spec")?,
                3 => normalizer = field_bytes(&value, "normalizer_spec")?,
                5 => denormalizer = Some(field_bytes(&value, "denormalizer_spec")?),
                _ => {}
            }
        }
        if pieces.is_empty() {
            return Err(spm_err("it holds no pieces (is this a SentencePiece .model/.spm file?)"));
        }
        Ok(ModelProto { pieces, trainer, normalizer, denormalizer })
    }
}

/// The fields of a `TrainerSpec` that change encoding or decoding.
pub(super) struct TrainerSpec {
    /// `model_type` (unigram or BPE; word and char models are refused).
    pub(super) model_type: ModelType,
    /// `treat_whitespace_as_suffix`.
    pub(super) treat_whitespace_as_suffix: bool,
    /// `byte_fallback`.
    pub(super) byte_fallback: bool,
    /// `bos_id`, `eos_id`, `pad_id` (−1 for none).
    pub(super) bos: i32,
    /// End of sentence.
    pub(super) eos: i32,
    /// Padding.
    pub(super) pad: i32,
    /// `unk_surface`.
    pub(super) unk_surface: String,
}

impl TrainerSpec {
    /// Reads a `TrainerSpec` message, with sentencepiece's defaults for the fields it lacks.
    pub(super) fn parse(data: &[u8]) -> Result<Self> {
        let mut model_type = 1u64;
        let (mut byte_fallback, mut suffix) = (false, false);
        let (mut bos, mut eos, mut pad) = (1i32, 2i32, -1i32);
        let mut unk_surface = DEFAULT_UNK_SURFACE.to_string();
        let mut fields = Fields::new(data);
        while let Some((number, value)) = fields.next_field()? {
            match number {
                3 => model_type = field_varint(&value, "trainer_spec.model_type")?,
                24 => suffix = field_varint(&value, "trainer_spec.treat_whitespace_as_suffix")? != 0,
                35 => byte_fallback = field_varint(&value, "trainer_spec.byte_fallback")? != 0,
                41 => bos = field_i32(&value, "trainer_spec.bos_id")?,
                42 => eos = field_i32(&value, "trainer_spec.eos_id")?,
                43 => pad = field_i32(&value, "trainer_spec.pad_id")?,
                44 => unk_surface = field_str(&value, "trainer_spec.unk_surface")?.to_string(),
                _ => {}
            }
        }
        let model_type = match model_type {
            1 => ModelType::Unigram,
            2 => ModelType::Bpe,
            3 => return Err(spm_err("it is a WORD model; only unigram and BPE models are supported")),
            4 => return Err(spm_err("it is a CHAR model; only unigram and BPE models are supported")),
            t => return Err(spm_err(format!("unknown model_type {t}"))),
        };
        Ok(TrainerSpec { model_type, treat_whitespace_as_suffix: suffix, byte_fallback, bos, eos, pad, unk_surface })
    }
}

/// Reads one `ModelProto.SentencePiece`.
fn parse_piece(data: &[u8]) -> Result<Piece> {
    let mut piece = Piece { piece: String::new(), score: 0.0, kind: PieceType::Normal };
    let mut fields = Fields::new(data);
    while let Some((number, value)) = fields.next_field()? {
        match number {
            1 => piece.piece = field_str(&value, "a piece's text")?.to_string(),
            2 => match value {
                Field::Fixed32(bits) => piece.score = f32::from_bits(bits),
                _ => return Err(spm_err("a piece's score is not a float")),
            },
            3 => {
                piece.kind = match field_varint(&value, "a piece's type")? {
                    1 => PieceType::Normal,
                    2 => PieceType::Unknown,
                    3 => PieceType::Control,
                    4 => PieceType::UserDefined,
                    5 => PieceType::Unused,
                    6 => PieceType::Byte,
                    t => return Err(spm_err(format!("piece type {t} is unknown"))),
                }
            }
            _ => {}
        }
    }
    Ok(piece)
}
