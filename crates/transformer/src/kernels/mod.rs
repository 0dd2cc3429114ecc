//! Kernels: pure functions over slices and small dims structs, forward and backward side by side.
//!
//! `cpu` holds the fast, fused, multi-threaded kernels the model runs; `reference` holds naive twins of
//! each for tests and benchmarks. Gradient convention everywhere: gradients of *parameters* accumulate
//! (`+=`), gradients of *activations* overwrite, unless a function's doc says otherwise.

pub mod cpu;
pub mod reference;

/// Dimensions of one multi-head attention call (§3.2.2): batch B, heads H, queries T, keys S,
/// query/key width K (= d_k) and value width V (= d_v).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnDims {
    /// B: sentences in the batch.
    pub b: usize,
    /// H: heads.
    pub h: usize,
    /// T: query positions per sentence.
    pub t: usize,
    /// S: key/value positions per sentence.
    pub s: usize,
    /// K: d_k, width of a query/key head.
    pub k: usize,
    /// V: d_v, width of a value head.
    pub v: usize,
}

/// Which keys each query may attend to (§3.2.3). Padding keys (beyond each sentence's key length)
/// are always masked out; `Causal` also masks every key after the query's own position, "masking
/// out (setting to −∞) all values in the input of the softmax which correspond to illegal
/// connections", so that a decoder position depends only on the positions before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Key padding only (encoder self-attention, encoder–decoder attention).
    Padding,
    /// Key padding and the causal mask (decoder self-attention).
    Causal,
}

impl Mask {
    /// Query i sees keys [0, n): n from the sentence's key length and, if causal, the position.
    #[inline(always)]
    pub fn visible(self, key_len: usize, i: usize) -> usize {
        match self {
            Mask::Padding => key_len,
            Mask::Causal => key_len.min(i + 1),
        }
    }
}
