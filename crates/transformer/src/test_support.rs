//! For tests (of this crate and of the CLI): the tiny model every seconds-long test run trains,
//! written once, in the repository's `configs/tiny-test.toml` (read when asked, so the library
//! itself needs no file outside its crate), and where the tests' data lies. The default suite
//! reads only what the repository holds ([`repo`]); the extra checks on real data that only the
//! project's CI machines have beside the checkout find it with [`shared`], which says when they
//! are skipped.

use std::path::{Path, PathBuf};

/// A path inside the repository (`repo("data/multi30k")`), wherever the checkout is.
pub fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(relative)
}

/// A file of the repository's built-in Multi30k (`data/multi30k`: English and German).
pub fn multi30k(name: &str) -> PathBuf {
    repo("data/multi30k").join(name)
}

/// The project's own treebank (`tests/treebank`, written by `dev/treebank/grammar.py`): 40 files
/// `own_0001.mrg` … `own_0040.mrg` in the Penn Treebank's format.
pub fn treebank() -> PathBuf {
    repo("tests/treebank")
}

/// `../shared/<relative>` beside the repository (real data the project's CI machines keep there:
/// the Penn Treebank sample, the EVALB fixtures on it, every Multi30k language), or `None` after
/// saying on stderr that the calling check is skipped. A fresh clone has no `../shared`; nothing
/// of the default suite depends on it. The tests that call it are named `shared_…`, so that
/// `cargo test --workspace -- shared_` runs every extra check (as `.ci/run` does beside ../shared).
pub fn shared(relative: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared").join(relative);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipped: ../shared/{relative} is not present beside the repository (an extra check on real data)");
        None
    }
}

/// The `[model]` section of `configs/tiny-test.toml` (1+1 layers, d_model 32, 2 heads), header
/// included, to begin a test's run configuration: append other `[model]` fields the section does
/// not set, then the test's `[data]` and `[train]`; change the ones it sets with overrides
/// (`model.max_positions=…`). Panics when the repository's file cannot be read.
pub fn tiny_model_toml() -> String {
    let path = repo("configs/tiny-test.toml");
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
