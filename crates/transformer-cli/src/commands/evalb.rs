//! `parse-eval`: score parse trees against gold trees exactly as EVALB with COLLINS.prm, and print
//! EVALB's report; EVALB's error messages go to stderr as it writes them (`ID : message`).

use super::input::read_lines;
use anyhow::Result;
use std::io::Write;
use std::path::Path;
use transformer::eval::evalb::{score, Params};

/// Scores `test_path` against `gold_path` (one tree a line, equal line counts) and prints the report.
pub fn parse_eval(gold_path: &Path, test_path: &Path, summary_only: bool) -> Result<()> {
    let gold = read_lines(gold_path)?;
    let test = read_lines(test_path)?;
    if gold.len() != test.len() {
        anyhow::bail!(
            "{} has {} lines but {} has {}: gold and test trees must be line-aligned, one tree a line \
             (line {} is the first without a partner)",
            gold_path.display(),
            gold.len(),
            test_path.display(),
            test.len(),
            gold.len().min(test.len()) + 1
        );
    }
    let params = Params::collins();
    let report = score(&gold, &test, &params)?;
    for line in report.error_lines() {
        eprintln!("{line}");
    }
    if let Some(note) = report.evalb_limit_note() {
        eprintln!("{note}");
    }
    if let Some(line) = report.evalb_abort_line {
        eprintln!(
            "note: EVALB itself would have stopped at line {line} without a summary (more than MAX_ERROR = {} \
             errors, or a line it cannot read); this scorer goes on and counts such lines as error sentences",
            params.max_error
        );
    }
    let mut out = std::io::stdout().lock();
    report.write_evalb(&mut out, summary_only)?;
    out.flush()?;
    Ok(())
}
