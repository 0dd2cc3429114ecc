//! BPE model files (the tokenizers JSON): any text gives a model or an error, never a panic; a
//! model that loads encodes and decodes a line without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(bpe) = transformer::data::bpe::Bpe::from_json(text, std::path::Path::new("fuzz.json")) {
        if let Ok(ids) = bpe.encode("A dog runs <s> über Wiesen.") {
            let _ = bpe.decode(&ids);
        }
    }
});
