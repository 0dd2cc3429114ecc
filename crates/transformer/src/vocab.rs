//! §3.4 The special tokens every vocabulary reserves, ids and strings in one place: the ids are
//! fixed for every BPE model (checked when one is loaded), so models, batches and decoders use them
//! without asking the vocabulary.

/// Padding id (fixed for every vocabulary).
pub const PAD: u32 = 0;
/// Beginning-of-sentence id: the decoder's first input.
pub const BOS: u32 = 1;
/// End-of-sentence id.
pub const EOS: u32 = 2;
/// Unknown-token id.
pub const UNK: u32 = 3;
/// Number of reserved special ids (pad, bos, eos, unk).
pub const SPECIAL_TOKENS: usize = 4;

/// The special tokens' strings, in id order: `SPECIALS[PAD as usize]` is `"<pad>"`.
pub const SPECIALS: [&str; SPECIAL_TOKENS] = ["<pad>", "<s>", "</s>", "<unk>"];

/// The logit bias of output rows that do not exist in an imported model (its ids that our
/// special ids add): their probability is exactly zero (exp(−10⁹) underflows), no search picks
/// them, and label smoothing leaves them out of its support.
pub const MASKED_LOGIT: f32 = -1e9;
