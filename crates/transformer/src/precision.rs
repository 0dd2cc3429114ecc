//! The arithmetic of matrix products, as a value: chosen when a model (or its packed inference
//! weights) is built and carried by that object, never switched for the whole process. Two models
//! at two precisions can therefore run side by side in one process.
//!
//! Only the products change: gradients, Adam and every other kernel stay f32. A model prepared for
//! inference (`model::Prepared`) holds each linear map once, in its precision's layout (f32 panels,
//! bf16 tiles, or int8 codes with their scales), instead of in the parameter buffer. Whether
//! this CPU can compute at a precision ([`Precision::available`]) is the kernels' to say
//! (`kernels/cpu/linear.rs`), so this ground-floor module imports nothing above it.

use serde::{Deserialize, Serialize};

/// How matrix products are computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 operands and sums (the paper).
    #[default]
    F32,
    /// Operands rounded to bf16 (nearest even), sums in f32, on the CPU's bf16 unit (AMX tiles or
    /// AVX512-BF16): the `bf16-matmul` departure (docs/deviations.md).
    Bf16,
    /// Decoding only: every linear map's weights quantised once to int8 with one scale per output
    /// row, activations quantised per row at run time, exact 32-bit integer sums scaled back to
    /// f32 (`kernels::cpu::int8`; the `int8-decoding` departure, docs/deviations.md). Training
    /// refuses it.
    Int8,
}

impl Precision {
    /// Every precision, in order.
    pub const ALL: [Precision; 3] = [Precision::F32, Precision::Bf16, Precision::Int8];
    /// The precisions a model can train at.
    pub const TRAINING: [Precision; 2] = [Precision::F32, Precision::Bf16];

    /// The lower-case name (`f32`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
        }
    }
}

/// The precisions of products between two f32 operands: what training computes at (forward and
/// backward), and what a model that is not prepared for inference runs its products at. int8 is
/// not one of them: it is a property of prepared weights (`Transformer::prepare`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Float {
    /// f32 operands and sums.
    #[default]
    F32,
    /// Operands rounded to bf16, sums in f32.
    Bf16,
}

impl From<Float> for Precision {
    fn from(f: Float) -> Precision {
        match f {
            Float::F32 => Precision::F32,
            Float::Bf16 => Precision::Bf16,
        }
    }
}

impl Precision {
    /// The same precision as a [`Float`], or `None` for int8 (which only prepared weights have).
    pub fn float(self) -> Option<Float> {
        match self {
            Precision::F32 => Some(Float::F32),
            Precision::Bf16 => Some(Float::Bf16),
            Precision::Int8 => None,
        }
    }
}

impl Precision {
    /// The precisions this CPU decodes at: f32 and int8 always, bf16 where it has a bf16 unit
    /// (AMX or AVX512-BF16).
    pub fn supported() -> Vec<Precision> {
        let bf16 = crate::kernels::cpu::bf16::available().is_ok();
        Precision::ALL.into_iter().filter(|&p| p != Precision::Bf16 || bf16).collect()
    }

    /// CTranslate2's `compute_type` as our precision, for a checkpoint that is int8 or not:
    /// `float32` f32; `bfloat16` bf16; `int8`, `int8_float32` and `int8_bfloat16` int8 (int8
    /// weights, f32 activations and sums: the `int8-decoding` departure); `default` the
    /// checkpoint's own (int8 for a `transformer quantize` checkpoint, else f32); `auto` the
    /// fastest this CPU has, int8. The float16 types are an error naming what is supported.
    pub fn from_compute_type(name: &str, int8_checkpoint: bool) -> crate::Result<Precision> {
        let p = match name {
            "default" if int8_checkpoint => Precision::Int8,
            "default" => Precision::F32,
            "auto" | "int8" | "int8_float32" | "int8_bfloat16" => Precision::Int8,
            "float32" => Precision::F32,
            "bfloat16" => Precision::Bf16,
            _ => {
                return Err(crate::Error::Unsupported(format!(
                    "compute_type {name:?} is not supported: use one of default, auto, float32, bfloat16, int8, \
                     int8_float32, int8_bfloat16 (no float16 or int16 arithmetic on this engine)"
                )))
            }
        };
        if !Precision::supported().contains(&p) {
            return Err(crate::Error::Unsupported(format!(
                "compute_type {name:?} needs bf16 products, and this CPU has no bf16 unit (AMX or AVX512-BF16): use \
                 float32 or int8"
            )));
        }
        Ok(p)
    }
}

impl std::fmt::Display for Float {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Precision::from(*self).fmt(f)
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
