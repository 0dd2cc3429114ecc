//! A Marian model directory's YAML: any `special:model.yml` text (and a `decoder.yml` beside it)
//! gives a model or an error naming the file, never a panic, and no count in it is built from
//! before it is checked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("fuzz-marian-yml-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    // The first NUL splits the model's YAML from decoder.yml's.
    let (model, decoder) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let _ = std::fs::write(dir.join("model.yml"), model);
    let _ = std::fs::write(dir.join("decoder.yml"), decoder);
    // An archive holding no special:model.yml: the .yml beside it is the model's YAML.
    let empty = [80u8, 75, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let _ = std::fs::write(dir.join("model.npz"), empty);
    let _ = transformer::import::marian::import(&dir);
});
