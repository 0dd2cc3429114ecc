//! §5.1 Data: one shared BPE vocabulary, parallel corpora, batches of similar length.

pub mod batching;
pub mod binarized;
pub mod bpe;
pub mod corpus;
pub mod download;
pub mod encoding;
pub mod marian_tokenizer;
pub mod news_text;
pub mod parallel;
pub mod ptb_sample;
pub mod sentencepiece;
pub mod tokenizer;
pub mod trees;
