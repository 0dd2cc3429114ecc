//! The main job, `transformer quickstart`, from a temporary directory that has no `../shared`
//! and no repository around it: the built-in data alone must carry it. Checks every file and every
//! line of the report it promises (not the BLEU value: a few seconds of training give ~0), then
//! that a SIGKILL during training followed by the same command resumes. The parsing quick start
//! runs there too, on the project's treebank (tests/treebank), and, as an extra check where
//! ../shared has it, on the Penn Treebank sample that `data ptb-sample` copies from there (a
//! user's clone fetches it from NLTK).

mod common;

use common::TestDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn workdir(name: &str) -> TestDir {
    let dir = TestDir::new(&format!("transformer-qs-{name}"));
    assert!(!dir.join("../shared/data").exists(), "the test must run away from ../shared");
    dir
}

fn quickstart(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(common::bin());
    c.current_dir(dir).args(["--threads", "2", "quickstart"]).args(args);
    c
}

/// Every record of a run's `metrics.jsonl` once: no (kind, step, epoch) twice, however often the
/// quick start was interrupted and run again. Returns how many validations were recorded.
fn records_once_each(run: &Path) -> usize {
    let path = run.join("metrics.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = (r["kind"].as_str().unwrap().to_string(), r["step"].as_u64().unwrap(), r["epoch"].as_u64().unwrap());
        assert!(seen.insert(key.clone()), "{key:?} recorded twice in {}", path.display());
    }
    seen.iter().filter(|k| k.0.starts_with("valid")).count()
}

const SMALL: [&str; 6] = ["--minutes", "0.25", "--test-sentences", "20", "--output", "out"];

#[test]
fn quickstart_writes_every_promised_file_and_report_line_then_resumes() {
    let dir = workdir("report");
    let out = quickstart(&dir, &SMALL).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    // Stages and the plain (non-terminal) progress lines.
    for stage in ["== data", "== training", "== averaging", "== evaluating", "== examples"] {
        assert!(stderr.contains(stage), "missing {stage:?} in stderr:\n{stderr}");
    }
    assert!(stderr.contains("train.en.gz: 568929 bytes, checksum ok"), "{stderr}");
    assert!(stderr.contains("tgt tok/s") && stderr.contains("ETA"), "no progress line:\n{stderr}");
    // The report, line by line.
    let lines: Vec<&str> = stdout.lines().collect();
    let find = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?}:\n{stdout}"))
    };
    assert!(lines[find("# Quick start: Multi30k en-de")].contains("minutes of training"));
    assert!(lines[find("Trained ")].contains("time limit of 0.25 minutes"), "{stdout}");
    // As many as were written, up to 5 (how many depends on the machine's speed).
    let written = std::fs::read_dir(dir.join("out/run"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("ckpt-"))
        .count();
    assert!(written >= 1, "no checkpoint in out/run");
    let averaged = format!("Averaged the last {} checkpoints.", written.min(5));
    assert_eq!(lines[find("Averaged the last ")], averaged, "{stdout}");
    assert!(lines[find("test_2016_flickr (20 sentences, beam 4, alpha 0.6)")].ends_with(':'));
    assert!(lines[find("BLEU|nrefs:1|case:mixed")].contains("tok:13a"), "cased sacreBLEU: {stdout}");
    find("chrF2|nrefs:1");
    let ex = find("Examples:");
    for (k, src) in transformer::recipes::quickstart::EXAMPLES.iter().enumerate() {
        assert_eq!(lines[ex + 1 + 2 * k].trim(), *src);
        assert!(lines[ex + 2 + 2 * k].trim_start().starts_with("->"), "{stdout}");
    }
    let files = find("Files:");
    let expected = [
        "data (verified copy)",
        "run directory",
        "vocabulary",
        "learning curve",
        "metrics",
        "model",
        "test translations",
        "attention heatmap",
        "report",
    ];
    for (k, what) in expected.iter().enumerate() {
        let line = lines[files + 1 + k].trim();
        assert!(line.starts_with(what), "file line {k}: {line:?}");
        let path = dir.join(line[what.len()..].trim());
        assert!(path.exists(), "{} is promised but missing", path.display());
    }
    let next = find("Next:");
    assert!(lines[next + 1].contains("transformer quickstart --output out --minutes 0.75"), "{stdout}");
    assert!(lines[next + 2].contains("transformer translate --checkpoint out/model.safetensors --bpe out/run/bpe.json"));
    assert!(lines[next + 3].contains("transformer serve --checkpoint out/model.safetensors"));
    assert!(lines[next + 4].contains("configs/multi30k-en-de.toml"));
    // The files hold what they say.
    let hyps = std::fs::read_to_string(dir.join("out/test_2016_flickr.hyp.de")).unwrap();
    assert_eq!(hyps.lines().count(), 20);
    let png = std::fs::read(dir.join("out/attention.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(std::fs::read_to_string(dir.join("out/run/learning_curve.svg")).unwrap().starts_with("<svg"));
    assert_eq!(std::fs::read_to_string(dir.join("out/report.txt")).unwrap().trim_end(), stdout.trim_end());
    // Running it again resumes from the last checkpoint rather than starting over, and removes
    // what a quick start killed while writing its report left (a dead writer's temporary file).
    let orphan = dir.join("out/.report.txt.tmp.4000000.1");
    std::fs::write(&orphan, "half a report").unwrap();
    let again = quickstart(&dir, &SMALL).output().unwrap();
    assert!(!orphan.exists(), "the orphan temporary file was left");
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(stderr.contains("cached, checksum ok") && stderr.contains("resuming from"), "{stderr}");
    assert!(records_once_each(&dir.join("out/run")) >= 1);
}

#[test]
fn quickstart_killed_during_training_resumes_when_run_again() {
    let dir = workdir("kill");
    let args = ["--minutes", "5", "--test-sentences", "5", "--output", "out"];
    let mut child = quickstart(&dir, &args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let run = dir.join("out/run");
    let start = Instant::now();
    // Wait for two checkpoints (every 15 s at 5 minutes), then kill without warning.
    loop {
        let n = std::fs::read_dir(&run)
            .map(|d| {
                d.filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().starts_with("ckpt-"))).count()
            })
            .unwrap_or(0);
        if n >= 2 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(240), "no checkpoints after 4 minutes");
        assert!(child.try_wait().unwrap().is_none(), "quickstart ended before it was killed");
        std::thread::sleep(Duration::from_millis(200));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The same command, with a budget already spent: it resumes and finishes.
    let again = quickstart(&dir, &["--minutes", "0.25", "--test-sentences", "5", "--output", "out"]).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&again.stdout), String::from_utf8_lossy(&again.stderr));
    assert!(again.status.success(), "{stderr}");
    assert!(stderr.contains("resuming from"), "{stderr}");
    assert!(stdout.contains("time limit of 0.25 minutes"), "{stdout}");
    assert!(records_once_each(&run) >= 1);
}

#[test]
fn quickstart_names_what_is_missing_for_other_languages() {
    let dir = workdir("langs");
    let out = quickstart(&dir, &["--src", "fr", "--tgt", "de", "--data", "nowhere"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("fr-de is not built in") && stderr.contains("transformer data multi30k --cache nowhere"),
        "{stderr}"
    );
    let out = quickstart(&dir, &["--src", "de", "--tgt", "de"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("both \"de\""), "{stderr}");
    // An output directory made for one pair is not resumed with another.
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::write(dir.join("out/quickstart.json"), "{\"src\":\"en\",\"tgt\":\"de\"}\n").unwrap();
    let out = quickstart(&dir, &["--src", "de", "--tgt", "en", "--output", "out"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("holds a quick start of en-de, not de-en: choose another --output"), "{stderr}");
    assert!(!dir.join("out/run").exists(), "nothing was trained");
    let out = quickstart(&dir, &["--minutes", "0"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--minutes 0 must be a positive number"), "{stderr}");
}

/// A seconds-long parsing quick start on the project's treebank (tests/treebank), split as the
/// Penn Treebank sample is (train, validation, test) with one validation file (an untrained model
/// decoded with beam 21 and no constraint runs every sentence to its length limit, so more would
/// take minutes).
fn small_parsing_on_the_owned_treebank() -> Vec<String> {
    let treebank = transformer::test_support::treebank().display().to_string();
    let args = [
        "--task",
        "parsing",
        "--minutes",
        "0.25",
        "--test-sentences",
        "4",
        "--treebank",
        &treebank,
        "--train-files",
        "own_0001..own_0030",
        "--valid-files",
        "own_0031..own_0031",
        "--test-files",
        "own_0036..own_0040",
        "--output",
        "out",
    ];
    args.iter().map(|s| s.to_string()).collect()
}

#[test]
fn quickstart_parsing_trains_parses_reports_then_resumes() {
    let dir = workdir("parsing");
    let treebank = transformer::test_support::treebank().display().to_string();
    let args = small_parsing_on_the_owned_treebank();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    check_parsing_quickstart(
        &dir,
        &args,
        &Expected {
            train: &format!("train: 30 files own_0001..own_0030 of {treebank}"),
            test: "Test own_0036..own_0040",
            longer: &format!(
                "transformer quickstart --task parsing --output out --treebank {treebank} --train-files \
                 own_0001..own_0030 --valid-files own_0031..own_0031 --test-files own_0036..own_0040 --minutes 0.75"
            ),
            marker: "out holds a quick start of parsing (train own_0001..own_0030",
        },
    );
}

/// The verified Penn Treebank sample the extra check fetches from (as a local mirror), or `None`
/// with a message where this checkout has no ../shared.
fn ptb_mirror() -> Option<PathBuf> {
    transformer::test_support::shared("data/ptb-sample")
}

/// Extra check: the quick start's own path on the Penn Treebank sample, from a fresh clone: `data
/// ptb-sample` fetches it (here from the copy in ../shared) into data/ptb-sample, where the quick
/// start looks by default, and the default split is used (with one validation file).
#[test]
fn shared_quickstart_parsing_fetches_the_sample_trains_parses_reports_then_resumes() {
    let Some(mirror) = ptb_mirror() else { return };
    let dir = workdir("parsing-sample");
    let fetch = Command::new(common::bin())
        .current_dir(&dir)
        .args(["data", "ptb-sample", "--from", mirror.to_str().unwrap()])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&fetch.stdout), String::from_utf8_lossy(&fetch.stderr));
    assert!(fetch.status.success(), "{stderr}");
    assert!(stderr.contains("non-commercial use only") && stderr.contains("University of Pennsylvania"), "{stderr}");
    assert!(
        stdout.contains("189 files verified (SHA-256) in data/ptb-sample; terms: data/ptb-sample/README"),
        "{stdout}"
    );
    let args = [
        "--task",
        "parsing",
        "--minutes",
        "0.25",
        "--test-sentences",
        "4",
        "--valid-files",
        "wsj_0160..wsj_0160",
        "--output",
        "out",
    ];
    check_parsing_quickstart(
        &dir,
        &args,
        &Expected {
            train: "train: 159 files wsj_0001..wsj_0159 of data/ptb-sample",
            test: "Test wsj_0175..wsj_0189",
            longer:
                "transformer quickstart --task parsing --output out --valid-files wsj_0160..wsj_0160 --minutes 0.75",
            marker: "out holds a quick start of parsing (train wsj_0001..wsj_0159",
        },
    );
}

/// What a parsing quick start's messages and report say of its data.
struct Expected<'a> {
    /// The line on the training files.
    train: &'a str,
    /// The start of the report's test line.
    test: &'a str,
    /// The report's command that trains longer.
    longer: &'a str,
    /// The start of the refusal of a translation quick start in the same directory.
    marker: &'a str,
}

/// Runs a seconds-long parsing quick start in `dir` with `args` (4 test sentences, 0.25 minutes,
/// output `out`) and checks every stage, report line and file it promises; then that running it
/// again resumes, and that a translation quick start is refused there.
fn check_parsing_quickstart(dir: &Path, args: &[&str], want: &Expected) {
    let out = quickstart(dir, args).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for stage in ["== data", "== training", "== picking", "== parsing"] {
        assert!(stderr.contains(stage), "missing {stage:?} in stderr:\n{stderr}");
    }
    assert!(stderr.contains(want.train), "{stderr}");
    assert!(stderr.contains("tgt tok/s") && stderr.contains("ETA"), "no progress line:\n{stderr}");
    assert!(stderr.contains("validation F1"), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let find = |prefix: &str| {
        lines
            .iter()
            .position(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?}:\n{stdout}"))
    };
    assert!(lines[find("# Quick start: parsing the Penn Treebank")].contains("minutes of training"));
    assert!(lines[find("Trained ")].contains("time limit of 0.25 minutes"), "{stdout}");
    assert!(lines[find("Picked the checkpoint of step ")].contains("best by validation F1"), "{stdout}");
    // The test is decoded as the built-in config's validation decodes.
    let cfg = transformer::train::run::RunConfig::from_toml(
        transformer::recipes::parsing::PTB_PARSE_CONFIG,
        "ptb-parse.toml",
        &[],
    )
    .unwrap();
    let constrained = if cfg.train.valid_f1_constrained { ", constrained" } else { "" };
    let beam = cfg.train.valid_f1_beam;
    let test = find(&format!("{} (4 sentences; beam {beam}, alpha 0.3{constrained})", want.test));
    assert_eq!(lines[test + 1].trim(), "=== Summary ===");
    // EVALB's summary, both blocks, as `parse-eval --summary-only` prints it: all 4 sentences,
    // then those of at most 40 tokens.
    let gold = std::fs::read_to_string(dir.join("out/test.gold")).unwrap();
    let short = transformer::data::trees::parse_trees(&gold, "test.gold").unwrap();
    let short = short.iter().filter(|t| t.words().len() <= 40).count();
    for (k, (block, n)) in [("-- All --", 4), ("-- len<=40 --", short)].iter().enumerate() {
        let at = lines.iter().position(|l| l.trim() == *block);
        let at = at.unwrap_or_else(|| panic!("no {block} block:\n{stdout}"));
        assert_eq!(lines[at + 1].trim(), format!("Number of sentence        = {n:>6}"), "block {k}: {stdout}");
        assert!(lines[at + 7].trim().starts_with("Bracketing FMeasure       ="), "block {k}: {stdout}");
        assert!(lines[at + 12].trim().starts_with("Tagging accuracy"), "block {k}: {stdout}");
    }
    assert!(lines[find("Outputs repaired")].contains("of 4"), "{stdout}");
    // Three example trees, each over exactly its sentence's words.
    let ex = find("Examples:");
    for k in 0..3 {
        let sentence = lines[ex + 1 + 2 * k].trim();
        let tree = lines[ex + 2 + 2 * k].trim().strip_prefix("-> ").unwrap_or_else(|| panic!("{stdout}"));
        assert!(tree.starts_with("(TOP "), "{tree}");
        let parsed = transformer::data::trees::parse_trees(tree, "report").unwrap();
        assert_eq!(parsed[0].words().join(" "), sentence, "{stdout}");
    }
    let files = find("Files:");
    let expected = [
        "treebank",
        "run directory",
        "vocabulary",
        "learning curve",
        "metrics",
        "model",
        "test sentences",
        "gold trees",
        "test trees",
        "EVALB report",
        "report",
    ];
    for (k, what) in expected.iter().enumerate() {
        let line = lines[files + 1 + k].trim();
        assert!(line.starts_with(what), "file line {k}: {line:?}");
        let path = dir.join(line[what.len()..].trim());
        assert!(path.exists(), "{} is promised but missing", path.display());
    }
    let next = find("Next:");
    // The same data (here one validation file) and three times the budget.
    assert!(lines[next + 1].contains(want.longer), "{stdout}");
    let flag = if cfg.train.valid_f1_constrained { " --constrained" } else { "" };
    let parse =
        format!("transformer parse --tokenize{flag} --checkpoint out/model.safetensors --bpe out/run/vocab.json");
    assert!(lines[next + 2].contains(&parse), "{stdout}");
    assert!(lines[next + 3].contains("transformer parse-eval --gold out/test.gold --test out/test.trees"));
    assert!(lines[next + 4].contains("configs/ptb-parse.toml"));
    for name in ["test.words", "test.gold", "test.trees"] {
        assert_eq!(std::fs::read_to_string(dir.join("out").join(name)).unwrap().lines().count(), 4, "{name}");
    }
    let evalb = std::fs::read_to_string(dir.join("out/test.evalb")).unwrap();
    assert!(evalb.contains(" ID  Len.  Stat. Recal") && evalb.contains("=== Summary ==="), "{evalb}");
    assert!(dir.join("out/run/best.safetensors").is_file());
    assert_eq!(std::fs::read_to_string(dir.join("out/report.txt")).unwrap().trim_end(), stdout.trim_end());

    // Again: it resumes rather than starting over.
    let again = quickstart(dir, args).output().unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(stderr.contains("resuming from"), "{stderr}");
    assert!(records_once_each(&dir.join("out/run")) >= 2);
    // A translation quick start is refused there, before anything is trained.
    let other = quickstart(dir, &["--minutes", "0.25", "--output", "out"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(want.marker), "{stderr}");
    assert!(!dir.join("out/data").exists(), "nothing of a translation run was written");
}

#[test]
fn quickstart_parsing_names_what_is_missing() {
    let dir = workdir("parsing-missing");
    // No treebank yet: the error says how to get it.
    let out = quickstart(&dir, &["--task", "parsing"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the treebank data/ptb-sample does not exist")
            && stderr.contains("`transformer data ptb-sample`")
            && stderr.contains("--treebank DIR"),
        "{stderr}"
    );
    assert!(!dir.join("quickstart-parsing").exists(), "nothing is written before the data is there");
    // An output directory of a translation quick start is refused.
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::write(dir.join("out/quickstart.json"), "{\"src\":\"en\",\"tgt\":\"de\"}\n").unwrap();
    let args = small_parsing_on_the_owned_treebank();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = quickstart(&dir, &args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("out holds a quick start of en-de, not parsing"), "{stderr}");
    assert!(!dir.join("out/run").exists(), "nothing was trained");
    // Options of the other task are usage errors.
    let out = quickstart(&dir, &["--task", "parsing", "--src", "de"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--src is an option of --task translation, not of --task parsing"), "{stderr}");
    let out = quickstart(&dir, &["--treebank", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
