//! Data-parallel training over MPI (`--features mpi`; needs `mpirun` on the PATH): two workers give
//! the updates of one process, a worker killed with SIGKILL ends the run within a bounded time and
//! the same command resumes it exactly, the worker count may change between runs, and workers that
//! disagree on the configuration or the data stop at the start, naming what differs.
//!
//! Every process runs one thread (`--threads 1`), so that the comparisons measure only what the
//! worker count changes.

mod common;

use common::{bin, multi30k, TestDir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use transformer::checkpoint::{self, Checkpoint};
use transformer::train::run::list_checkpoints;

/// Updates of the runs killed and resumed.
const STEPS: u64 = 40;
/// Updates after which one process and two workers are compared: the sum order's rounding grows
/// slowly at first and then, as training is chaotic, faster (measured on this run: losses agree to
/// 1e-8 relative up to update 30, 1e-3 by update 40).
const COMPARED: u64 = 16;

/// A run of `STEPS` updates of 4 batches with dropout, crossing an epoch's end (the first 400
/// pairs of Multi30k's validation set make 29 batches: 7 updates and one of 1 batch an epoch).
fn config(dir: &Path, bpe: &Path, train: (&str, &str)) -> PathBuf {
    common::Run {
        model: "dropout = 0.1\nattention_dropout = 0.1",
        train,
        bpe,
        vocab_size: 600,
        data: "",
        train_section: &format!(
            "seed = 5\nmax_src_tokens = 200\nmax_tgt_tokens = 200\naccumulate = 4\nwarmup = 20\n\
             max_steps = {STEPS}\ncheckpoint_steps = 2\nkeep_last = 100\n"
        ),
    }
    .write(dir)
}

/// The first 400 pairs of the validation set, written to `dir` (shorter than the whole file, so
/// that a run crosses an epoch in a few updates).
fn small_corpus(dir: &Path, lines: usize) -> (String, String) {
    std::fs::create_dir_all(dir).unwrap();
    let mut out = Vec::new();
    for (name, lang) in [("train.en", "val.en.gz"), ("train.de", "val.de.gz")] {
        let text = transformer::data::corpus::read_lines(Path::new(&multi30k(lang))).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text[..lines].join("\n") + "\n").unwrap();
        out.push(p.display().to_string());
    }
    (out[0].clone(), out[1].clone())
}

/// `mpirun -np N transformer --threads 1 train --config CFG ARGS…`, as root if need be, with
/// more processes than cores allowed.
fn mpirun(n: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    c.args(["--oversubscribe", "-np", &n.to_string()]);
    c
}

fn train(n: usize, cfg: &Path, extra: &[&str]) -> Command {
    let mut c = if n == 1 { Command::new(bin()) } else { mpirun(n) };
    if n > 1 {
        c.arg(bin());
    }
    c.args(["--threads", "1", "train", "--config", cfg.to_str().unwrap()]).args(extra);
    c
}

fn ok(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

fn last(dir: &Path) -> Checkpoint {
    checkpoint::load(&list_checkpoints(&dir.join("out")).unwrap().last().unwrap().1).unwrap()
}

/// (step, loss) of every training record.
fn curve(dir: &Path) -> Vec<(u64, f64)> {
    let text = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
    let records = text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
    records
        .filter(|v| v["kind"] == "train")
        .map(|v| (v["step"].as_u64().unwrap(), v["loss"].as_f64().unwrap()))
        .collect()
}

fn run_state(c: &Checkpoint) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(&c.extra["run_state"]).unwrap();
    v.as_object_mut().unwrap().remove("elapsed_s");
    v
}

/// The largest |a − b| over the parameters of `a` and `b` (checkpoints of one model), leaving out
/// the attention key biases `b_k`, and the largest over those. A key bias adds the same q·b_k to
/// every score of a query, which the softmax ignores: its gradient is exactly 0, so what is
/// computed is rounding noise, and Adam (dividing by √v) turns noise into full-size steps whose
/// sign depends on the order of the sum. The key biases therefore drift apart by about the
/// learning rate times the steps whatever the tolerance of the rest.
fn max_diff(a: &Checkpoint, b: &Checkpoint) -> (f32, f32) {
    assert_eq!(a.params.len(), b.params.len());
    let (mut rest, mut key_bias) = (0.0f32, 0.0f32);
    for e in transformer::params::ParamLayout::new(&a.config).entries() {
        let d = a.params[e.range()].iter().zip(&b.params[e.range()]).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        let m = if e.name.ends_with(".b_k") { &mut key_bias } else { &mut rest };
        *m = m.max(d);
    }
    (rest, key_bias)
}

/// What the f32 order of the gradient sum may move the parameters other than the key biases by,
/// in `COMPARED` updates of the tiny model (measured: 3.6e-7, a few ulps of the largest, 1.24).
const PARAM_TOLERANCE: f32 = 1e-5;
/// ... and the loss of an update, relative (measured: 5e-9).
const LOSS_TOLERANCE: f64 = 1e-6;

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.split_whitespace().nth(1)?.parse().ok()
}

/// The process with `OMPI_COMM_WORLD_RANK=rank` among the descendants of `mpirun`'s process (its
/// children with Open MPI 4; a daemon's children with Open MPI 5).
fn worker_pid(mpirun_pid: u32, rank: usize) -> Option<u32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    for e in std::fs::read_dir("/proc").ok()? {
        let Some(pid) = e.ok()?.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let mut up = parent_of(pid);
        for _ in 0..4 {
            if up.is_none_or(|p| p == mpirun_pid || p <= 1) {
                break;
            }
            up = up.and_then(parent_of);
        }
        if up != Some(mpirun_pid) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return Some(pid);
        }
    }
    None
}

/// Two workers against one process on the same global batches; a worker killed with SIGKILL; the
/// same command again; and the worker count changed half-way. One test, so that the runs are
/// made once and run one after another (the machine may have 2 cores).
#[test]
fn two_workers_make_the_updates_of_one_process_and_survive_a_kill() {
    let root = TestDir::new("transformer-mpi");
    let data = small_corpus(&root.join("data"), 400);
    let data = (data.0.as_str(), data.1.as_str());
    let bpe = root.join("bpe.json");
    let (one, two, killed, switched) = (root.join("one"), root.join("two"), root.join("killed"), root.join("switched"));

    // One process (it learns the shared BPE model), then two workers.
    let compared = format!("train.max_steps={COMPARED}");
    ok(train(1, &config(&one, &bpe, data), &["--set", &compared]).output().unwrap());
    let err = ok(train(2, &config(&two, &bpe, data), &[]).output().unwrap());
    assert!(err.contains("over 2 workers (2 each)"), "{err}");
    let c1 = last(&one);
    let c2 = checkpoint::load(&two.join(format!("out/ckpt-{COMPARED:08}.safetensors"))).unwrap();
    assert_eq!((c1.step, c2.step), (COMPARED, COMPARED));
    // The same batches, dropout masks and schedule: the run's position agrees exactly.
    assert_eq!(run_state(&c1), run_state(&c2));
    // The gradients differ only in the f32 order of their sum (two partial sums added instead of
    // one sequential accumulation).
    let (d, key_bias) = max_diff(&c1, &c2);
    eprintln!("1 process vs 2 workers after {COMPARED} updates: max |Δparam| = {d:e} (key biases: {key_bias:e})");
    assert!(d <= PARAM_TOLERANCE, "parameters differ by {d}");
    let (l1, l2) = (curve(&one), curve(&two));
    assert_eq!(l1.len(), COMPARED as usize);
    assert_eq!(l2.len(), STEPS as usize);
    assert_eq!(l1.iter().map(|r| r.0).collect::<Vec<_>>(), l2[..l1.len()].iter().map(|r| r.0).collect::<Vec<_>>());
    assert_eq!(l1[0].1.to_bits(), l2[0].1.to_bits(), "the first update's loss comes from equal parameters");
    for ((s, a), (_, b)) in l1.iter().zip(&l2) {
        assert!((a - b).abs() <= LOSS_TOLERANCE * a.abs(), "step {s}: loss {a} with 1 process, {b} with 2 workers");
    }
    // Only rank 0 wrote the run directory: one record per update.
    let text = std::fs::read_to_string(two.join("out/metrics.jsonl")).unwrap();
    assert_eq!(text.lines().filter(|l| l.contains("\"kind\":\"train\"")).count(), STEPS as usize);

    // Two workers again; worker 1 is killed with SIGKILL once a few checkpoints are written.
    let cfg_k = config(&killed, &bpe, data);
    let mut child = train(2, &cfg_k, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let victim = loop {
        let latest = list_checkpoints(&killed.join("out")).unwrap().last().map_or(0, |c| c.0);
        if latest >= 10 {
            if let Some(pid) = worker_pid(child.id(), 1) {
                break pid;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no checkpoint 10, or no process of worker 1, in 120 s");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before a worker could be killed");
        std::thread::sleep(Duration::from_millis(2));
    };
    let killed_at = Instant::now();
    assert!(Command::new("kill").args(["-KILL", &victim.to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let stopped_in = killed_at.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a run whose worker was killed must fail: {err}");
    assert!(stopped_in < Duration::from_secs(60), "the other worker took {stopped_in:?} to stop");
    assert!(err.contains("signal 9"), "mpirun should name the killed worker: {err}");
    eprintln!("worker 1 killed: the run stopped {:.2} s later", stopped_in.as_secs_f64());
    let step_at_kill = list_checkpoints(&killed.join("out")).unwrap().last().unwrap().0;
    assert!(step_at_kill < STEPS, "killed after the end");
    // The same command resumes from the last checkpoint and ends where the uninterrupted run did.
    let err = ok(train(2, &cfg_k, &[]).output().unwrap());
    assert!(err.contains("resuming from"), "{err}");
    let (ck, c2) = (last(&killed), last(&two));
    assert_eq!((ck.step, c2.step), (STEPS, STEPS));
    assert!(ck.params == c2.params, "parameters differ from the uninterrupted 2-worker run");
    assert!(ck.adam == c2.adam, "Adam moments differ from the uninterrupted 2-worker run");
    assert_eq!(run_state(&ck), run_state(&c2));
    let bits = |c: &[(u64, f64)]| c.iter().map(|(s, l)| (*s, l.to_bits())).collect::<Vec<_>>();
    assert_eq!(bits(&curve(&killed)), bits(&l2), "loss curves differ after resume");

    // Half the run with two workers, the rest with one: the same position, parameters within the
    // tolerance of one process against two workers.
    let cfg_s = config(&switched, &bpe, data);
    ok(train(2, &cfg_s, &["--set", &format!("train.max_steps={}", COMPARED / 2)]).output().unwrap());
    let err = ok(train(1, &cfg_s, &["--set", &compared]).output().unwrap());
    assert!(err.contains(&format!("(step {}", COMPARED / 2)), "{err}");
    let cs = last(&switched);
    assert_eq!(run_state(&cs), run_state(&c1));
    let (d, _) = max_diff(&cs, &c1);
    assert!(d <= PARAM_TOLERANCE, "parameters differ by {d}");
}

/// A time limit is rank 0's clock: every worker stops at the same update, and the run ends cleanly
/// with a checkpoint.
#[test]
fn a_time_limit_stops_every_worker_at_the_same_update() {
    let root = TestDir::new("transformer-mpi-time");
    let data = small_corpus(&root.join("data"), 200);
    let cfg = config(&root.join("run"), &root.join("bpe.json"), (&data.0, &data.1));
    let t0 = Instant::now();
    let out = train(2, &cfg, &["--set", "train.max_steps=1000000", "--time-limit", "0.02"]).output().unwrap();
    let err = ok(out);
    assert!(err.contains("stopped: time limit of 0.02 minutes"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(60), "took {:?}", t0.elapsed());
    let c = last(&root.join("run"));
    assert!(c.step > 0, "no update in 1.2 s");
}

/// Workers that disagree stop at the start with an error naming what differs; an accumulation
/// that does not split among the workers is refused naming `train.accumulate`.
#[test]
fn workers_that_disagree_stop_at_the_start() {
    let root = TestDir::new("transformer-mpi-bad");
    let data = small_corpus(&root.join("data"), 200);
    let bpe = root.join("bpe.json");
    let cfg = config(&root.join("run"), &bpe, (&data.0, &data.1));
    // Learn the BPE model once, so the runs below fail on what they are meant to.
    ok(train(
        1,
        &cfg,
        &["--set", "train.max_steps=1", "--set", &format!("train.output_dir=\"{}\"", root.join("first").display())],
    )
    .output()
    .unwrap());

    let t0 = Instant::now();
    let out = train(2, &cfg, &["--set", "train.accumulate=3"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("train.accumulate = 3 is not divisible by the 2 workers"), "{err}");

    // MPMD: worker 1 gets another warmup.
    let mut c = mpirun(1);
    c.args([bin(), "--threads", "1", "train", "--config", cfg.to_str().unwrap()]);
    c.args([":", "-np", "1", bin(), "--threads", "1", "train", "--config", cfg.to_str().unwrap()]);
    c.args(["--set", "train.warmup=21"]);
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("this worker (rank 1 of 2) has a different run configuration (the TOML file"), "{err}");

    // Worker 1 reads other training text through the same (relative) paths.
    let other = small_corpus(&root.join("other/data"), 150);
    let _ = other;
    let rel = config(&root.join("rel"), &bpe, ("data/train.en", "data/train.de"));
    let mut c = mpirun(1);
    c.args(["-wdir", root.to_str().unwrap(), bin(), "--threads", "1", "train", "--config", rel.to_str().unwrap()]);
    let other_dir = root.join("other");
    c.args([":", "-np", "1", "-wdir", other_dir.to_str().unwrap(), bin(), "--threads", "1", "train"]);
    c.args(["--config", rel.to_str().unwrap()]);
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("has a different training data (BPE vocabulary, pair lengths or validation pairs)"), "{err}");

    // Worker 1 does not see rank 0's checkpoints (a run directory that is not shared): the same
    // relative output_dir from two working directories, only the first holding a checkpoint.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let out_line = text.lines().find(|l| l.starts_with("output_dir")).unwrap();
    let local = root.join("local.toml");
    std::fs::write(&local, text.replace(out_line, "output_dir = \"out\"")).unwrap();
    let (here, there) = (root.join("here"), root.join("there"));
    std::fs::create_dir_all(&there).unwrap();
    std::fs::create_dir_all(&here).unwrap();
    let one = train(1, &local, &["--set", "train.max_steps=2"]).current_dir(&here).output().unwrap();
    ok(one);
    let mut c = mpirun(1);
    c.args(["-wdir", here.to_str().unwrap(), bin(), "--threads", "1", "train", "--config", local.to_str().unwrap()]);
    c.args([":", "-np", "1", "-wdir", there.to_str().unwrap(), bin(), "--threads", "1", "train"]);
    c.args(["--config", local.to_str().unwrap()]);
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("(rank 1 of 2) has a different checkpoint to resume from than rank 0"), "{err}");
    assert!(err.contains("put it on a filesystem all hosts share"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(120), "the failing runs took {:?}", t0.elapsed());
}

/// Two "hosts": the workers in two network namespaces talking over TCP only
/// (`bench/mpi/netns.sh`) make exactly the updates of two workers over shared memory. Needs root
/// (CAP_NET_ADMIN, CAP_SYS_ADMIN), hence ignored by default:
/// `cargo test -p transformer-cli --features mpi --test mpi -- --ignored`.
#[test]
#[ignore = "needs root to create network namespaces"]
fn two_hosts_over_tcp_make_the_updates_of_shared_memory() {
    let root = TestDir::new("transformer-mpi-tcp");
    let data = small_corpus(&root.join("data"), 200);
    let bpe = root.join("bpe.json");
    let (shm, tcp) = (root.join("shm"), root.join("tcp"));
    let steps = ["--set", "train.max_steps=8"];
    ok(train(2, &config(&shm, &bpe, (&data.0, &data.1)), &steps).output().unwrap());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/mpi/netns.sh");
    let mut c = Command::new(script);
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1").env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let cfg = config(&tcp, &bpe, (&data.0, &data.1));
    c.args(["mpirun", bin(), "--threads", "1", "train", "--config", cfg.to_str().unwrap()]).args(steps);
    let err = ok(c.output().unwrap());
    assert!(err.contains("over 2 workers (2 each)"), "{err}");
    let (a, b) = (last(&shm), last(&tcp));
    assert_eq!((a.step, b.step), (8, 8));
    assert!(a.params == b.params && a.adam == b.adam, "TCP and shared memory runs differ");
    let bits = |c: &[(u64, f64)]| c.iter().map(|(s, l)| (*s, l.to_bits())).collect::<Vec<_>>();
    assert_eq!(bits(&curve(&shm)), bits(&curve(&tcp)));
}
