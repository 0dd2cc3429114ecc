//! Bad settings and damaged files never kill a training run hours in, poison a checkpoint or pass
//! silently: each is refused up front with an error naming the field (or file), or handled and
//! said. A test per case; the runs are seconds long (configs/tiny-test.toml's model).

mod common;

use common::TestDir;
use std::path::Path;
use transformer::error::Error;
use transformer::train::run::{list_checkpoints, run, RunConfig};

fn data(name: &str) -> String {
    transformer::test_support::multi30k(name).display().to_string()
}

/// A fresh directory for one test.
fn dir(name: &str) -> TestDir {
    TestDir::new(&format!("transformer-guards-{name}"))
}

/// The tiny test run in `out`, with `extra` overrides.
fn config(out: &Path, extra: &[&str]) -> transformer::Result<RunConfig> {
    let text = format!(
        "{}[data]\ntrain_src = \"{}\"\ntrain_tgt = \"{}\"\nvalid_src = \"{}\"\nvalid_tgt = \"{}\"\nbpe = \"{}\"\nvocab_size = 1000\n\
         [train]\noutput_dir = \"{}\"\nseed = 3\nmax_src_tokens = 1024\nmax_tgt_tokens = 1024\nwarmup = 50\nmax_steps = 20\ncheckpoint_steps = 10\n",
        transformer::test_support::tiny_model_toml(),
        data("val.en.gz"),
        data("val.de.gz"),
        data("test_2016_flickr.en.gz"),
        data("test_2016_flickr.de.gz"),
        out.join("bpe.json").display(),
        out.display()
    );
    let overrides: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    RunConfig::from_toml(&text, "test.toml", &overrides)
}

fn run_quiet(cfg: &RunConfig) -> (transformer::Result<transformer::train::run::RunSummary>, Vec<String>) {
    let mut log = Vec::new();
    let r = run(cfg, &mut log);
    (r, log)
}

fn config_error(out: &Path, extra: &[&str]) -> String {
    let cfg = config(out, extra).unwrap();
    match run_quiet(&cfg).0 {
        Err(e @ Error::Config(_)) => e.to_string(),
        other => panic!("{extra:?}: expected a configuration error, got {other:?}"),
    }
}

#[test]
fn zero_intervals_and_counts_are_refused_naming_the_field() {
    let d = dir("zeros");
    for field in
        ["train.valid_steps", "train.checkpoint_steps", "train.accumulate", "train.keep_last", "data.max_tokens"]
    {
        let err = config_error(&d, &[&format!("{field}=0")]);
        assert!(err.contains(field) && err.contains("at least 1"), "{field}: {err}");
    }
    assert!(list_checkpoints(&d).unwrap().is_empty(), "nothing may be trained on a refused config");
}

#[test]
fn a_learning_rate_that_is_not_a_positive_number_is_refused() {
    let d = dir("lr");
    for v in ["nan", "0", "-1", "inf", "1e9"] {
        let err = config_error(&d, &[&format!("train.lr_scale={v}")]);
        assert!(err.contains("train.lr_scale") && err.contains("(0, 1000]"), "lr_scale = {v}: {err}");
    }
    for (field, v) in
        [("train.checkpoint_minutes", "0"), ("train.time_limit_minutes", "nan"), ("data.max_ratio", "0.5")]
    {
        let err = config_error(&d, &[&format!("{field}={v}")]);
        assert!(err.contains(field), "{field} = {v}: {err}");
    }
}

#[test]
fn max_tokens_must_leave_room_for_eos_within_max_positions() {
    let d = dir("maxtok");
    let err = config_error(&d, &["data.max_tokens=256"]);
    assert!(err.contains("data.max_tokens = 256") && err.contains("model.max_positions = 256"), "{err}");
    // One below is fine: a target of 255 tokens takes 256 positions with its EOS.
    let cfg = config(&d, &["data.max_tokens=255", "train.max_steps=1"]).unwrap();
    run_quiet(&cfg).0.unwrap();
}

#[test]
fn a_model_too_large_for_the_machine_is_refused_before_allocating() {
    let d = dir("huge");
    let err = config_error(&d, &["model.n_layers=1024", "model.d_model=65536", "model.d_k=8192", "model.d_v=8192"]);
    assert!(err.contains("GB") && err.contains("model.n_layers"), "{err}");
}

#[test]
fn a_validation_pair_too_long_for_the_model_is_reported_up_front_and_left_out() {
    let d = dir("longvalid");
    let (src, tgt) = (d.join("valid.en"), d.join("valid.de"));
    let long = vec!["word"; 400].join(" ");
    std::fs::write(&src, format!("A dog runs.\n{long}\nTwo men talk.\n")).unwrap();
    std::fs::write(&tgt, "Ein Hund rennt.\nEin Satz.\nZwei Männer reden.\n").unwrap();
    let (s, t) = (format!("data.valid_src=\"{}\"", src.display()), format!("data.valid_tgt=\"{}\"", tgt.display()));
    let cfg = config(&d, &[&s, &t, "model.max_positions=64", "data.max_tokens=60", "train.max_steps=12"]).unwrap();
    let (r, log) = run_quiet(&cfg);
    let summary = r.expect("the run trains despite the long validation pair");
    assert_eq!(summary.state.step, 12);
    let warning = format!("{}:2:", src.display());
    assert!(log.iter().any(|l| l.contains(&warning) && l.contains("left out")), "{log:#?}");
    assert!(summary.valid.nll.is_finite());
}

#[test]
fn an_empty_validation_set_is_an_error_not_a_perfect_score() {
    let d = dir("emptyvalid");
    let (src, tgt) = (d.join("valid.en"), d.join("valid.de"));
    std::fs::write(&src, "\n\n").unwrap();
    std::fs::write(&tgt, "\n\n").unwrap();
    let (s, t) = (format!("data.valid_src=\"{}\"", src.display()), format!("data.valid_tgt=\"{}\"", tgt.display()));
    let err = config_error(&d, &[&s, &t]);
    assert!(err.contains("no validation pair"), "{err}");
}

/// Overwrites the last 4 bytes of a checkpoint (the end of its last tensor's data) with a NaN.
fn poison(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let n = bytes.len();
    bytes[n - 4..].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn resume_passes_over_damaged_and_poisoned_checkpoints_saying_which() {
    let d = dir("skipback");
    let cfg = config(&d, &["train.max_steps=30", "train.keep_last=5"]).unwrap();
    run_quiet(&cfg).0.unwrap();
    let ckpts = list_checkpoints(&d).unwrap();
    assert_eq!(ckpts.iter().map(|c| c.0).collect::<Vec<_>>(), vec![10, 20, 30]);
    // The newest is cut short, the one before holds a NaN: the run goes on from step 10.
    let truncated = std::fs::read(&ckpts[2].1).unwrap();
    std::fs::write(&ckpts[2].1, &truncated[..truncated.len() / 2]).unwrap();
    poison(&ckpts[1].1);
    let cfg = config(&d, &["train.max_steps=40", "train.keep_last=5"]).unwrap();
    let (r, log) = run_quiet(&cfg);
    let summary = r.unwrap();
    assert_eq!(summary.state.step, 40);
    for (_, p) in &ckpts[1..] {
        let name = p.display().to_string();
        assert!(log.iter().any(|l| l.contains("not resuming from") && l.contains(&name)), "{name}: {log:#?}");
    }
    assert!(log.iter().any(|l| l.contains("resuming from") && l.contains("ckpt-00000010")), "{log:#?}");
    // Every checkpoint left is finite.
    for (_, p) in list_checkpoints(&d).unwrap() {
        let ck = transformer::checkpoint::load(&p).unwrap();
        transformer::checkpoint::check_finite(&p, &ck).unwrap();
    }
}

#[test]
fn when_every_checkpoint_is_damaged_the_error_says_how_to_start_afresh() {
    let d = dir("alldamaged");
    run_quiet(&config(&d, &["train.max_steps=10"]).unwrap()).0.unwrap();
    for (_, p) in list_checkpoints(&d).unwrap() {
        std::fs::write(&p, b"not a checkpoint").unwrap();
    }
    let err = config_error(&d, &[]);
    assert!(err.contains("every checkpoint") && err.contains("start the run afresh"), "{err}");
}

#[test]
fn a_checkpoint_with_non_finite_values_is_never_written() {
    let d = dir("nanwrite");
    run_quiet(&config(&d, &["train.max_steps=10"]).unwrap()).0.unwrap();
    let (_, p) = list_checkpoints(&d).unwrap().pop().unwrap();
    let mut ck = transformer::checkpoint::load(&p).unwrap();
    ck.params[7] = f32::INFINITY;
    let target = d.join("poisoned.safetensors");
    let err = transformer::checkpoint::save(&target, &ck).unwrap_err();
    assert!(matches!(err, Error::NonFiniteCheckpoint { .. }), "{err}");
    assert!(!target.exists(), "nothing may be written");
}

#[test]
fn the_time_limit_counts_training_time_over_every_process_of_the_run() {
    let d = dir("timebudget");
    let first = run_quiet(&config(&d, &["train.max_steps=10"]).unwrap()).0.unwrap();
    assert!(first.state.elapsed_s > 0.0);
    // A budget the first process already spent: the rerun stops at once, training nothing more.
    let limit = format!("train.time_limit_minutes={}", first.state.elapsed_s / 60.0 * 0.5);
    let (r, log) = run_quiet(&config(&d, &["train.max_steps=1000", &limit]).unwrap());
    let second = r.unwrap();
    assert_eq!(second.state.step, 10, "{log:#?}");
    assert!(matches!(second.stopped, transformer::train::run::StopReason::TimeLimit(_)), "{}", second.stopped);
}

#[test]
fn an_update_that_makes_parameters_non_finite_stops_with_an_error() {
    use transformer::rng::Rng;
    use transformer::synthetic::{model_config, pairs, SyntheticTask};
    use transformer::train::{Schedule, Trainer};
    let cfg = model_config(20);
    let model = transformer::Transformer::new(cfg, 1).unwrap();
    // An infinite learning rate (the library takes any schedule; run configs are bounded).
    let mut trainer = Trainer::new(model, Schedule { d_model: 64, warmup: 10, lr_scale: f32::INFINITY }, 1).unwrap();
    let batch = transformer::Batch::from_pairs(&pairs(SyntheticTask::Reverse, &mut Rng::new(1), 8, 20, 4, 8));
    let err = trainer.train_step(&[batch]).unwrap_err();
    assert!(matches!(err, Error::NonFiniteParameters { step: 1, .. }), "{err}");
    assert!(err.to_string().contains("before anything was saved"), "{err}");
}

/// A run whose last update ends an epoch validates that model once: one `valid` record at the
/// step, not a second one under the next epoch's number.
#[test]
fn a_run_that_stops_at_an_epoch_end_records_its_validation_once() {
    let d = dir("epoch-end");
    let (r, log) = run_quiet(&config(&d, &["train.max_steps=1"]).unwrap());
    r.unwrap();
    // "N parameters, M training pairs in K batches, 1 per update"
    let line = log.iter().find(|l| l.contains("training pairs in")).expect("the batch count is logged");
    let batches: u64 = line.split(" batches").next().unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    let d = dir("epoch-end-2");
    let steps = format!("train.max_steps={batches}");
    run_quiet(&config(&d, &[&steps, "train.checkpoint_steps=1000"]).unwrap()).0.unwrap();
    let records: Vec<serde_json::Value> = std::fs::read_to_string(d.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|r: &serde_json::Value| r["kind"] == "valid")
        .collect();
    let at_end: Vec<_> = records.iter().filter(|r| r["step"] == batches).collect();
    assert_eq!(at_end.len(), 1, "valid records at step {batches}: {at_end:?}");
    assert_eq!(at_end[0]["epoch"], 1);
    // Each record says how long the validation took (it counts in the time budget).
    for r in &records {
        let secs = r["seconds"].as_f64().unwrap_or(-1.0);
        assert!(secs > 0.0 && secs < 600.0, "validation seconds {secs} in {r}");
    }
}

#[test]
fn a_batch_budget_no_pair_fits_is_refused() {
    let d = dir("budget");
    for field in ["train.max_src_tokens", "train.max_tgt_tokens"] {
        let err = config_error(&d, &[&format!("{field}=1")]);
        assert!(err.contains(&format!("{field} = 1")) && err.contains("fit none of the"), "{field}: {err}");
    }
}

/// Fine-tuning (`train.init`): a run with no checkpoint of its own starts from another run's
/// weights, at step 0; its dropout may differ, its model and vocabulary may not (an error naming
/// the field and both values); `train.init_optimizer` needs Adam moments in the checkpoint.
#[test]
fn a_run_starts_from_another_runs_weights_and_refuses_another_model() {
    use transformer::checkpoint;
    let a = dir("init-from");
    run_quiet(&config(&a, &["train.max_steps=10"]).unwrap()).0.unwrap();
    let from = list_checkpoints(&a).unwrap().last().unwrap().1.clone();
    let trained = checkpoint::load(&from).unwrap();
    assert_eq!(trained.step, 10);
    let init = format!("train.init={:?}", from.display().to_string());
    // One update at a learning rate of almost nothing: the weights stay the checkpoint's.
    let b = dir("init-to");
    std::fs::copy(a.join("bpe.json"), b.join("bpe.json")).unwrap();
    let tiny_lr = ["train.max_steps=1", "train.lr_scale=1e-12", "train.checkpoint_steps=1", "model.dropout=0.3"];
    let mut extra = tiny_lr.to_vec();
    extra.push(&init);
    let (r, log) = run_quiet(&config(&b, &extra).unwrap());
    r.unwrap();
    assert!(log.iter().any(|l| l.contains("starting from the weights of") && l.contains("its step 10")), "{log:?}");
    let tuned = checkpoint::load(&list_checkpoints(&b).unwrap().last().unwrap().1).unwrap();
    assert_eq!(tuned.step, 1, "a fresh schedule");
    let far = tuned.params.iter().zip(&trained.params).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(far < 1e-6, "moved {far} from the checkpoint's weights");
    // Resumed, the run reads its model from its own checkpoints: the initial file may be gone.
    let b2 = dir("init-resume");
    std::fs::copy(a.join("bpe.json"), b2.join("bpe.json")).unwrap();
    let copy = b2.join("init-copy.safetensors");
    std::fs::copy(&from, &copy).unwrap();
    let init_copy = format!("train.init={:?}", copy.display().to_string());
    let mut extra = tiny_lr.to_vec();
    extra.push(&init_copy);
    run_quiet(&config(&b2, &extra).unwrap()).0.unwrap();
    std::fs::remove_file(&copy).unwrap();
    extra[0] = "train.max_steps=2";
    let (r, log) = run_quiet(&config(&b2, &extra).unwrap());
    assert_eq!(r.unwrap().state.step, 2, "{log:?}");
    assert!(log.iter().any(|l| l.contains("resuming from")), "{log:?}");
    // Without init, the same run starts from its own initialisation, far from them.
    let c = dir("init-none");
    std::fs::copy(a.join("bpe.json"), c.join("bpe.json")).unwrap();
    run_quiet(&config(&c, &tiny_lr).unwrap()).0.unwrap();
    let fresh = checkpoint::load(&list_checkpoints(&c).unwrap().last().unwrap().1).unwrap();
    assert!(fresh.params.iter().zip(&trained.params).any(|(x, y)| (x - y).abs() > 1e-3));
    // Another model: refused, naming the field and both values.
    let d = dir("init-other-model");
    std::fs::copy(a.join("bpe.json"), d.join("bpe.json")).unwrap();
    let (r, _) = run_quiet(&config(&d, &["model.d_ff=48", &init]).unwrap());
    let e = r.unwrap_err().to_string();
    assert!(e.contains("d_ff") && e.contains("48") && e.contains(&from.display().to_string()), "{e}");
    // Another vocabulary: refused.
    let e2 = dir("init-other-vocab");
    let (r, _) = run_quiet(&config(&e2, &["data.vocab_size=900", &init]).unwrap());
    let e = r.unwrap_err().to_string();
    assert!(e.contains("vocab") && e.contains(&from.display().to_string()), "{e}");
    // A vocabulary of the same size with other ids (two entries swapped): refused, naming the
    // run's tokenizer file.
    let e3 = dir("init-other-ids");
    let mut bpe: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("bpe.json")).unwrap()).unwrap();
    let vocab = bpe["model"]["vocab"].as_object_mut().unwrap();
    let (x, y) = (vocab["!"].clone(), vocab["#"].clone());
    (vocab["!"], vocab["#"]) = (y, x);
    std::fs::write(e3.join("bpe.json"), bpe.to_string()).unwrap();
    let (r, _) = run_quiet(&config(&e3, &[&init]).unwrap());
    let e = r.unwrap_err().to_string();
    let file = e3.join("bpe.json").display().to_string();
    assert!(e.contains("vocabulary") && e.contains(&file) && e.contains(&from.display().to_string()), "{e}");
    // Keeping Adam moments from an averaged checkpoint (which has none): refused, saying why.
    let avg = a.join("average.safetensors");
    let mut averaged = checkpoint::average(std::slice::from_ref(&from)).unwrap();
    averaged.adam = None;
    checkpoint::save(&avg, &averaged).unwrap();
    let f = dir("init-optimizer");
    std::fs::copy(a.join("bpe.json"), f.join("bpe.json")).unwrap();
    let avg_init = format!("train.init={:?}", avg.display().to_string());
    let (r, _) = run_quiet(&config(&f, &[&avg_init, "train.init_optimizer=true"]).unwrap());
    let e = r.unwrap_err().to_string();
    assert!(e.contains("init_optimizer") && e.contains("no Adam moments"), "{e}");
    // Keeping the moments of a checkpoint that has them: the first update, on the same weights,
    // batch and dropout masks as the fresh run above (b), gives m = β1·m₀ + (1 − β1)·g where the
    // fresh run's is (1 − β1)·g, and v likewise with β2 (the paper's 0.9 and 0.98, §5.3).
    let k = dir("init-optimizer-kept");
    std::fs::copy(a.join("bpe.json"), k.join("bpe.json")).unwrap();
    let mut extra = tiny_lr.to_vec();
    extra.push(&init);
    extra.push("train.init_optimizer=true");
    let (r, log) = run_quiet(&config(&k, &extra).unwrap());
    r.unwrap();
    assert!(
        log.iter().any(|l| l.contains("starting from the weights of") && l.contains("its Adam moments")),
        "{log:?}"
    );
    let kept = checkpoint::load(&list_checkpoints(&k).unwrap().last().unwrap().1).unwrap();
    assert_eq!(kept.step, 1, "a fresh schedule");
    let ((m0, v0), (mf, vf), (mk, vk)) =
        (trained.adam.as_ref().unwrap(), tuned.adam.as_ref().unwrap(), kept.adam.as_ref().unwrap());
    for (name, old, fresh, got, beta) in [("m", m0, mf, mk, 0.9f32), ("v", v0, vf, vk, 0.98)] {
        assert!(old.iter().any(|&x| x != 0.0) && got.iter().any(|&x| x != 0.0), "{name}");
        for (i, ((&o, &f), &g)) in old.iter().zip(fresh).zip(got).enumerate() {
            // Each element to float rounding of its own terms.
            let want = beta * o + f;
            let tol = 1e-5 * ((beta * o).abs() + f.abs()) + 1e-30;
            assert!((g - want).abs() <= tol, "{name}[{i}] = {g}, want {beta}·{o} + {f} = {want}");
        }
    }
    // init_optimizer without init is a configuration error.
    let err = config_error(&f, &["train.init_optimizer=true"]);
    assert!(err.contains("train.init_optimizer"), "{err}");
}
