//! For tests (of this crate and of the CLI): the tiny model every seconds-long test run trains,
//! written once, in the repository's `configs/tiny-test.toml` (read when asked, so the library
//! itself needs no file outside its crate).

/// The `[model]` section of `configs/tiny-test.toml` (1+1 layers, d_model 32, 2 heads), header
/// included, to begin a test's run configuration: append other `[model]` fields the section does
/// not set, then the test's `[data]` and `[train]`; change the ones it sets with overrides
/// (`model.max_positions=…`). Panics when the repository's file cannot be read.
pub fn tiny_model_toml() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/tiny-test.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    model_section(&text)
}

/// The `[model]` section of a TOML text, header included.
fn model_section(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
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
        assert_eq!(super::model_section("# x\n[data]\na = 1\n[model]\nb = 2\n[train]\nc = 3\n"), "[model]\nb = 2\n");
    }
}
