//! A whole Marian `.npz` archive (a zip of `.npy` arrays): any bytes give the arrays or an error,
//! never a panic, and never more memory than the archive's bound on what it may inflate to.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("fuzz-npz-{}.npz", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        let _ = transformer::import::npz::read_npz(&path);
    }
});
