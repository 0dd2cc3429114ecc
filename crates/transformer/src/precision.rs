//! The arithmetic of matrix products, as a value: chosen when a model (or its packed inference
//! weights) is built and carried by that object, never switched for the whole process. Two models
//! at two precisions can therefore run side by side in one process.
//!
//! Only the products change: weights, gradients, Adam and every other kernel stay f32. Whether
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
}

impl Precision {
    /// Every precision, in order.
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::Bf16];

    /// The lower-case name (`f32`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
