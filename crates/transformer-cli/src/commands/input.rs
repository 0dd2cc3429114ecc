//! Reading what commands read: text files, input sentences as the user means them, references
//! aligned with their sources; and how warnings are shown.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use transformer::data::corpus::input_line;

/// Reads a text file (plain or .gz), one entry a line.
pub(crate) fn read_lines(path: &std::path::Path) -> Result<Vec<String>> {
    Ok(transformer::data::corpus::read_lines(path)?)
}

/// Reads a file of sentences (sources, references), each line as the user means it
/// (`corpus::input_line`: a whitespace-only line is empty).
pub(crate) fn read_input_lines(path: &std::path::Path) -> Result<Vec<String>> {
    let mut lines = transformer::data::corpus::read_lines(path)?;
    for l in &mut lines {
        let meant = transformer::data::corpus::input_line(l);
        if meant.len() != l.len() {
            *l = meant.to_string();
        }
    }
    Ok(lines)
}

/// Warnings (and messages) printed to stderr, progress not shown.
pub(crate) struct Stderr;

impl transformer::events::Events for Stderr {
    fn log(&mut self, message: &str) {
        eprintln!("{message}");
    }
}

/// Runs `f` on every line of `input` (a plain or .gz file) or of stdin, read as the user means it
/// (`corpus::input_line`: a byte-order mark dropped, any line end, a whitespace-only line empty);
/// errors name the file (or `<stdin>`) and the line.
pub(crate) fn for_each_input_line(input: Option<&Path>, mut f: impl FnMut(&str) -> Result<()>) -> Result<()> {
    match input {
        Some(p) => transformer::data::corpus::for_each_line(p, |n, line| {
            f(input_line(line)).with_context(|| format!("{}:{n}", p.display()))
        }),
        None => {
            let mut lines = transformer::data::corpus::Lines::from_reader(Box::new(std::io::stdin().lock()), "<stdin>");
            while let Some(line) = lines.next_line()? {
                f(input_line(line)).with_context(|| format!("<stdin>:{}", lines.line_number()))?;
            }
            Ok(())
        }
    }
}

/// Reads reference files, each line-aligned with `base` (`n` lines of `what`).
pub(crate) fn read_references(paths: &[PathBuf], base: &Path, n: usize, what: &str) -> Result<Vec<Vec<String>>> {
    let mut refs = Vec::with_capacity(paths.len());
    for p in paths {
        let r = read_input_lines(p)?;
        if r.len() != n {
            anyhow::bail!(
                "{} has {} lines but {} has {n}: references and {what} must be line-aligned",
                p.display(),
                r.len(),
                base.display()
            );
        }
        refs.push(r);
    }
    Ok(refs)
}
