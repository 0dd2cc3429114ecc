//! Checkpoint files (safetensors header, metadata, tensors): any bytes give a checkpoint or a
//! clear error, never a panic or an allocation the file cannot back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.safetensors");
    if let Ok(ckpt) = transformer::checkpoint::from_bytes(data, path) {
        let _ = transformer::checkpoint::check_finite(path, &ckpt);
    }
});
