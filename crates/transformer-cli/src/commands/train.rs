//! Training commands: `params`, `synthetic`, `train`, `average` and `prepare`.

use crate::args::PrepareArgs;
use crate::usage;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use transformer::checkpoint;
use transformer::config::{Preset, PAPER_VOCAB};
use transformer::params::param_count;
use transformer::synthetic::{self, SyntheticTask};

/// `params --cost` settings.
pub struct CostArgs {
    pub src_len: u64,
    pub tgt_len: u64,
    pub tokens_per_step: Option<u64>,
    pub steps: Option<u64>,
}

/// Table 2's training cost of base and big: hours × 8 P100 GPUs × 9.5 TFLOPS (the paper's
/// footnote 5 accounting), with the hours of §5.2.
fn paper_training_flops(preset: &str) -> Option<(f64, &'static str)> {
    match preset {
        "base" => Some((3.3e18, "12 hours on 8 P100 at 9.5 TFLOPS")),
        "big" => Some((2.3e19, "3.5 days on 8 P100 at 9.5 TFLOPS")),
        _ => None,
    }
}

pub fn params(preset: Preset, vocab: usize, all: bool, json: bool, cost: Option<CostArgs>) -> Result<()> {
    let presets: Vec<Preset> = if all { Preset::ALL.to_vec() } else { vec![preset] };
    let mut rows = Vec::new();
    for p in presets {
        let mut c = p.config();
        c.vocab_size = vocab;
        c.validate()?;
        let count = param_count(&c);
        let paper = if vocab == PAPER_VOCAB { p.paper_params_millions() } else { None };
        rows.push((p.name(), c, count, paper));
    }
    for (name, c, count, paper) in rows {
        let cost = cost.as_ref().map(|a| {
            let k = transformer::params::cost(&c, a.src_len, a.tgt_len);
            let total = match (a.tokens_per_step, a.steps) {
                (Some(t), Some(s)) => Some(k.train_step_flops(t, t) * s as f64),
                _ => None,
            };
            let step = a.tokens_per_step.map(|t| k.train_step_flops(t, t));
            (a, k, step, total)
        });
        if json {
            let mut v = serde_json::json!({ "preset": name, "vocab": vocab, "params": count, "paper_params_millions": paper, "config": c });
            if let Some((a, k, step, total)) = &cost {
                v["cost"] = serde_json::json!({
                    "src_len": a.src_len, "tgt_len": a.tgt_len,
                    "forward_macs_per_src_token": k.per_src_token, "forward_macs_per_tgt_token": k.per_tgt_token,
                    "train_macs_per_src_token": k.per_src_token * transformer::params::TRAIN_STEP_OVER_FORWARD,
                    "train_macs_per_tgt_token": k.per_tgt_token * transformer::params::TRAIN_STEP_OVER_FORWARD,
                    "tokens_per_step": a.tokens_per_step, "steps": a.steps,
                    "train_step_flops": step, "train_flops": total,
                    "paper_train_flops": paper_training_flops(name).map(|p| p.0),
                });
            }
            println!("{v}");
            continue;
        }
        let paper = paper
            .map(|p| format!(" (paper: {p}M, {:+.1}%)", (count as f64 / 1e6 / p - 1.0) * 100.0))
            .unwrap_or_default();
        println!("{name:<5} {count:>11} parameters = {:.1}M{paper}", count as f64 / 1e6);
        if let Some((a, k, step, total)) = cost {
            let x = transformer::params::TRAIN_STEP_OVER_FORWARD;
            println!(
                "      forward: {} multiply-adds per source token, {} per target token (sentences of {} + {} tokens)",
                k.per_src_token, k.per_tgt_token, a.src_len, a.tgt_len
            );
            println!(
                "      training step ({x}x forward): {} per source token, {} per target token",
                k.per_src_token * x,
                k.per_tgt_token * x
            );
            if let (Some(t), Some(step)) = (a.tokens_per_step, step) {
                println!("      one step of {t} + {t} tokens: {step:.3e} FLOPs (2 per multiply-add)");
            }
            if let (Some(s), Some(total)) = (a.steps, total) {
                let paper = paper_training_flops(name)
                    .map(|(p, how)| format!("; paper (Table 2): {p:.1e} = {how}, {:.2}x this count", p / total))
                    .unwrap_or_default();
                println!("      training, {s} steps: {total:.3e} FLOPs{paper}");
            }
        }
    }
    Ok(())
}

pub fn synthetic(task: SyntheticTask, steps: u64, seed: u64, save: Option<&Path>) -> Result<()> {
    let start = Instant::now();
    let (trainer, (ok, total)) = synthetic::train(task, steps, seed, &mut |step, s| {
        if step % 100 == 0 || step == steps {
            eprintln!("step {step:>5}  loss {:.4}  lr {:.2e}  {:.1}s", s.loss, s.lr, start.elapsed().as_secs_f64());
        }
    })?;
    println!("held-out token accuracy: {:.2}% ({ok}/{total})", 100.0 * ok as f64 / total as f64);
    if let Some(path) = save {
        let ckpt = trainer.to_checkpoint("", Default::default());
        checkpoint::save(path, &ckpt).with_context(|| format!("saving {}", path.display()))?;
        eprintln!("saved {}", path.display());
    }
    Ok(())
}

pub fn train(config: &Path, mut overrides: Vec<String>, time_limit: Option<f64>, init: Option<&Path>) -> Result<()> {
    let text = std::fs::read_to_string(config).map_err(transformer::io::io_err(config))?;
    if let Some(m) = time_limit {
        overrides.push(format!("train.time_limit_minutes={m}"));
    }
    let mut cfg = transformer::train::run::RunConfig::from_toml(&text, &config.display().to_string(), &overrides)?;
    if let Some(p) = init {
        cfg.train.init = Some(p.to_path_buf());
    }
    let mut bar = crate::progress::TrainBar::new();
    let summary = super::distributed::train(&cfg, &mut bar);
    bar.finish();
    // Under `mpirun -np N`, rank 0 reports for every worker.
    let Some(summary) = summary? else { return Ok(()) };
    println!(
        "step {} epoch {}: {} ({:.0} s of training); valid perplexity {:.2}; {}",
        summary.state.step,
        summary.state.epoch + 1,
        summary.stopped,
        summary.state.elapsed_s,
        summary.valid.perplexity(),
        summary.checkpoint.display()
    );
    Ok(())
}

pub fn average(last: Option<usize>, dir: Option<&Path>, inputs: Vec<PathBuf>, output: &Path) -> Result<()> {
    let paths = match (last, dir) {
        (Some(k), Some(dir)) => {
            let last = transformer::train::run_dir::last_checkpoints(dir, k)?;
            if last.len() < k {
                anyhow::bail!("{} holds {} checkpoints, fewer than --last {k}", dir.display(), last.len());
            }
            last.into_iter().map(|(_, p)| p).collect()
        }
        _ if !inputs.is_empty() => inputs,
        _ => usage!("give --last K DIR or --inputs FILE..."),
    };
    let avg = checkpoint::average(&paths)?;
    checkpoint::save(output, &avg)?;
    println!("averaged {} checkpoints (newest step {}) -> {}", paths.len(), avg.step, output.display());
    Ok(())
}

pub fn prepare(args: &PrepareArgs) -> Result<()> {
    let PrepareArgs { src, tgt, task, files, tree_format, tokenizer, out, max_tokens, max_ratio } = args;
    let (tgt, files, task, max_tokens, max_ratio) =
        (tgt.as_deref(), files.as_deref(), *task, *max_tokens as usize, *max_ratio);
    let filter = transformer::data::parallel::FilterConfig { max_tokens, max_ratio };
    if let Err(e) = filter.validate(("--max-tokens", "--max-ratio")) {
        usage!("{}", e.to_string().trim_start_matches("invalid configuration: "));
    }
    if task == transformer::Task::Translation && *tree_format != transformer::data::trees::TreeFormat::default() {
        usage!("--tree-format says how trees are written: give --task parsing");
    }
    let model = transformer::data::tokenizer::Tokenizer::load(tokenizer)?;
    let start = Instant::now();
    let spinner = crate::progress::Spinner::new(&format!("binarising {}", src.display()));
    let log = &mut transformer::events::Lines::new(|m: &str| spinner.println(m));
    let report = match (task, tgt) {
        (transformer::Task::Translation, Some(tgt)) if files.is_none() => {
            transformer::data::binarized::prepare(src, tgt, &model, &filter, out, log)?
        }
        (transformer::Task::Translation, None) => usage!("give the target text with --tgt"),
        (transformer::Task::Translation, Some(_)) => usage!("--files selects treebank files: give --task parsing"),
        (transformer::Task::Parsing, Some(_)) => {
            usage!("parsing reads its targets from the trees of --src; give no --tgt")
        }
        (transformer::Task::Parsing, None) => {
            let pairs = task.read_pairs(src, Path::new(""), files)?;
            transformer::data::binarized::prepare_pairs(
                pairs,
                task.target_encoding(*tree_format),
                &model,
                &filter,
                out,
                log,
            )?
        }
    };
    spinner.finish();
    println!(
        "{report} -> {} in {:.1} s, peak RSS {:.0} MB",
        out.display(),
        start.elapsed().as_secs_f64(),
        super::rss::peak_rss_bytes().unwrap_or(0) as f64 / 1e6
    );
    Ok(())
}
