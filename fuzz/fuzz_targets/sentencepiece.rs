//! SentencePiece model files (protobuf): any bytes give a model or an error, never a panic; a model
//! that loads encodes and decodes a line without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(sp) = transformer::data::sentencepiece::SentencePiece::from_bytes(data) {
        let ids = sp.encode_ids("A dog runs über Wiesen, 42.");
        let _ = sp.decode_ids(&ids);
    }
});
