//! The `transformer` binary end to end.

use std::process::Command;

fn transformer(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_transformer"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn params_prints_exact_counts_and_json() {
    let (ok, out, _) = transformer(&["params", "--preset", "base", "--vocab", "37000"]);
    assert!(ok);
    assert!(out.contains("63082496"), "{out}");
    let (ok, out, _) = transformer(&["params", "--all", "--json"]);
    assert!(ok);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 20);
    let big = rows.iter().find(|r| r["preset"] == "big").unwrap();
    assert_eq!(big["params"], 214245376);
    assert_eq!(big["paper_params_millions"], 213.0);
    assert_eq!(big["config"]["d_model"], 1024);
}

#[test]
fn unknown_preset_is_a_clear_error() {
    let (ok, _, err) = transformer(&["params", "--preset", "huge"]);
    assert!(!ok);
    assert!(
        err.contains("unknown preset 'huge'") && err.contains("base, a1"),
        "{err}"
    );
}
