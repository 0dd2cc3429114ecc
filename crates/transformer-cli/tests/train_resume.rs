//! Exact resume: a run killed with SIGKILL at an arbitrary moment and started again with the same
//! command ends with the same parameters, Adam moments and loss curve as an uninterrupted run.

mod common;

use common::{multi30k, TestDir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use transformer::checkpoint;
use transformer::train::run::list_checkpoints;

fn config(dir: &Path, bpe: &Path) -> PathBuf {
    common::Run {
        model: "dropout = 0.1\nattention_dropout = 0.1",
        train: (&multi30k("val.en.gz"), &multi30k("val.de.gz")),
        bpe,
        vocab_size: 1000,
        data: "",
        train_section: "seed = 11\nmax_src_tokens = 600\nmax_tgt_tokens = 600\naccumulate = 2\nwarmup = 50\n\
                        max_steps = 240\ncheckpoint_steps = 7\nkeep_last = 100\nvalid_steps = 50\n",
    }
    .write(dir)
}

fn train_cmd(cfg: &Path) -> Command {
    let mut c = Command::new(common::bin());
    c.args(["--threads", "2", "train", "--config", cfg.to_str().unwrap()]);
    c
}

/// The last record of each training step: (step, loss bits, nll bits).
fn curve(dir: &Path) -> Vec<(u64, u64, u64)> {
    let text = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
    let mut by_step = std::collections::BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("every metrics line is complete JSON");
        if v["kind"] == "train" {
            by_step.insert(
                v["step"].as_u64().unwrap(),
                (v["loss"].as_f64().unwrap().to_bits(), v["nll"].as_f64().unwrap().to_bits()),
            );
        }
    }
    by_step.into_iter().map(|(s, (l, n))| (s, l, n)).collect()
}

#[test]
fn sigkill_and_restart_equals_uninterrupted() {
    let root = TestDir::new("transformer-resume");
    let (a, b) = (root.join("a"), root.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let bpe = root.join("bpe.json");

    // Uninterrupted run (it also learns the shared BPE model).
    let out = train_cmd(&config(&a, &bpe)).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Interrupted run: SIGKILL once it is well past a few checkpoints, then the same command again.
    let cfg_b = config(&b, &bpe);
    let mut child =
        train_cmd(&cfg_b).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    loop {
        let latest = list_checkpoints(&b.join("out")).unwrap().last().map_or(0, |c| c.0);
        if latest >= 60 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "run b made no progress");
        if child.try_wait().unwrap().is_some() {
            panic!("run b finished before it could be killed; make the run longer");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    let killed_at = list_checkpoints(&b.join("out")).unwrap().last().unwrap().0;
    assert!(killed_at < 240, "killed after the end");
    // Whatever the moment of the kill, every checkpoint on disk is complete.
    for (_, p) in list_checkpoints(&b.join("out")).unwrap() {
        checkpoint::load(&p).unwrap_or_else(|e| panic!("half-written checkpoint {}: {e}", p.display()));
    }
    let out = train_cmd(&cfg_b).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming from"), "the second run must resume");

    let last = |d: &Path| checkpoint::load(&list_checkpoints(&d.join("out")).unwrap().last().unwrap().1).unwrap();
    let (ca, cb) = (last(&a), last(&b));
    assert_eq!(ca.step, 240);
    assert_eq!(cb.step, 240);
    assert!(ca.params == cb.params, "final parameters differ after resume");
    assert!(ca.adam == cb.adam, "final Adam moments differ after resume");
    // The saved position in the data and the dropout counter agree too (wall time does not).
    let state = |c: &checkpoint::Checkpoint| {
        let v: serde_json::Value = serde_json::from_str(&c.extra["run_state"]).unwrap();
        (v["step"].clone(), v["passes"].clone(), v["epoch"].clone(), v["cursor"].clone())
    };
    assert_eq!(state(&ca), state(&cb));
    let (la, lb) = (curve(&a), curve(&b));
    assert_eq!(la.len(), 240);
    assert!(la == lb, "loss curves differ after resume");
    // The records the killed process wrote after its last checkpoint were replaced, not duplicated.
    let train_steps = |d: &Path| -> Vec<u64> {
        let text = std::fs::read_to_string(d.join("out/metrics.jsonl")).unwrap();
        let records = text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
        records.filter(|v| v["kind"] == "train").map(|v| v["step"].as_u64().unwrap()).collect()
    };
    assert_eq!(train_steps(&b), (1..=240).collect::<Vec<_>>(), "duplicate or missing steps after resume");
}

#[test]
fn a_second_run_on_the_same_directory_fails_fast_naming_the_holder() {
    let root = TestDir::new("transformer-lock");
    let cfg = config(&root, &root.join("bpe.json"));
    let mut first =
        train_cmd(&cfg).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let lock = root.join("out/.lock");
    let t0 = Instant::now();
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.ends_with('\n')) {
        assert!(t0.elapsed() < Duration::from_secs(60), "the first run never locked its directory");
        assert!(first.try_wait().unwrap().is_none(), "the first run ended before the second could start");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t1 = Instant::now();
    let out = train_cmd(&cfg).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the second run must not start");
    assert!(t1.elapsed() < Duration::from_secs(20), "the second run must fail fast");
    let want = format!("{}: another training run (pid {} on ", root.join("out").display(), first.id());
    assert!(err.contains(&want), "{err}");
    first.kill().unwrap();
    first.wait().unwrap();
    // The killed run's lock is stale: the next run takes it over (and stops at once).
    let out = train_cmd(&cfg).args(["--set", "train.max_steps=1"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("taking over a stale lock"), "{err}");
}
