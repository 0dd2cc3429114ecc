//! §6.1 Decoding. For now greedy search (beam size 1) without incremental state: every step runs
//! the full model on the prefix. Beam search with cached keys and values is the inference issue.

pub mod greedy;
