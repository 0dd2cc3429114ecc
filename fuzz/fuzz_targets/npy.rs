//! One `.npy` array of a Marian `.npz` model: any bytes give an array or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = transformer::import::npz::parse_npy(data);
});
