//! The run configuration (TOML text and `--set` overrides): any bytes give a config or an error,
//! never a panic, and a config that parses is validated without panicking either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use transformer::train::run::RunConfig;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The last line, if it looks like one, doubles as a `--set` override.
    let overrides: Vec<String> = text.lines().last().filter(|l| l.contains('=')).map(|l| l.to_string()).into_iter().collect();
    if let Ok(cfg) = RunConfig::from_toml(&text, "fuzz.toml", &overrides) {
        let _ = cfg.validate();
        if let Ok(model) = cfg.model_config(cfg.data.vocab_size.clamp(5, 1 << 16)) {
            let _ = cfg.validate_for(&model, Some(24 << 30));
        }
    }
});
