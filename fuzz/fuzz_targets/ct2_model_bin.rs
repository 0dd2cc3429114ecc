//! CTranslate2's `model.bin`: any bytes give the model's variables or an error, never a panic,
//! and never an allocation larger than the bytes given (counts and sizes are checked first).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = transformer::import::ct2::ModelBin::parse(data) {
        // What parses writes back to bytes that parse to the same model (in name order, which
        // a file need not be in).
        assert_eq!(transformer::import::ct2::ModelBin::parse(&m.to_bytes()).as_ref(), Ok(&m));
    }
});
