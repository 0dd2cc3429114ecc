//! Prepared (binarised) data directories: meta.json, the token files and their offsets, given as
//! one input split at "\n--\n" into meta.json, src.bin, src.idx, tgt.bin, tgt.idx. Any contents
//! give an opened corpus or an error naming the file, never a panic; an opened corpus reads every
//! pair without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Write;
use transformer::data::binarized::{Binarized, Pairs};

const FILES: [&str; 5] = ["meta.json", "src.bin", "src.idx", "tgt.bin", "tgt.idx"];

fuzz_target!(|data: &[u8]| {
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut rest = data;
    while parts.len() < 4 {
        match rest.windows(4).position(|w| w == b"\n--\n") {
            Some(i) => {
                parts.push(&rest[..i]);
                rest = &rest[i + 4..];
            }
            None => break,
        }
    }
    parts.push(rest);
    let dir = std::env::temp_dir().join(format!("transformer-fuzz-prepared-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, name) in FILES.iter().enumerate() {
        let mut f = std::fs::File::create(dir.join(name)).unwrap();
        f.write_all(parts.get(i).copied().unwrap_or(&[])).unwrap();
    }
    if let Ok(corpus) = Binarized::open(&dir) {
        for i in 0..corpus.len().min(1000) {
            let _ = corpus.get(i);
        }
    }
});
