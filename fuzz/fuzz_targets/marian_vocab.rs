//! The vocabularies of imported Marian models, Hugging Face's `vocab.json` and Marian's `.yml`:
//! any text gives a vocabulary or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = std::path::Path::new("fuzz");
    let _ = transformer::import::marian::parse_hf_vocab(text, path);
    let _ = transformer::import::marian::parse_yml_vocab(text, path);
});
