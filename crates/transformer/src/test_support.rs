//! For tests (of this crate and of the CLI): the tiny model every seconds-long test run trains,
//! written once, in `configs/tiny-test.toml`.

/// `configs/tiny-test.toml` as built into the library.
pub const TINY_TEST_TOML: &str = include_str!("../../../configs/tiny-test.toml");

/// The `[model]` section of `configs/tiny-test.toml` (1+1 layers, d_model 32, 2 heads), header
/// included, to begin a test's run configuration: append other `[model]` fields the section does
/// not set, then the test's `[data]` and `[train]`; change the ones it sets with overrides
/// (`model.max_positions=…`).
pub fn tiny_model_toml() -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in TINY_TEST_TOML.lines() {
        if line.starts_with('[') {
            inside = line.trim() == "[model]";
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_model_section_is_whole_and_alone() {
        let m = super::tiny_model_toml();
        assert!(m.starts_with("[model]\n") && m.contains("d_model = 32") && !m.contains("[data]"), "{m}");
    }
}
