//! §5.1 Data: one shared BPE vocabulary, parallel corpora, batches of similar length.

pub mod bpe;
pub mod corpus;
