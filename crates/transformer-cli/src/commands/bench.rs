//! `bench`: timings of our own engine (the side-by-side comparisons with PyTorch and CTranslate2
//! are the scripts in bench/).

use crate::args::BenchCommand;
use anyhow::Result;
use std::time::Instant;
use transformer::config::ModelConfig;
use transformer::kernels::cpu::profile::{Profile, Shape, ShapeTimes};
use transformer::rng::Rng;
use transformer::train::{Schedule, Trainer};
use transformer::{Batch, Precision, Transformer};

pub fn run(which: BenchCommand) -> Result<()> {
    match which {
        BenchCommand::TrainStep { steps, warmup, bf16, dropout, quickstart, profile, json } => {
            let model = if quickstart { BenchModel::Quickstart } else { BenchModel::Engine };
            train_step(model, steps as usize, warmup, bf16, dropout, profile, json)
        }
        BenchCommand::Matmul { reps } => matmul_rates(reps as usize),
        #[cfg(feature = "mpi")]
        BenchCommand::Allreduce { floats, reps, json } => {
            super::distributed::bench_allreduce(floats, reps as usize, json)
        }
        BenchCommand::DataIter { data, max_tokens } => {
            use transformer::data::batching::{epoch_order, make_batches, BatchConfig};
            let start = Instant::now();
            let corpus = transformer::data::binarized::Binarized::open(&data)?;
            let lengths: Vec<(usize, usize)> = (0..corpus.len()).map(|i| corpus.lengths(i)).collect();
            let batches =
                make_batches(&lengths, &BatchConfig { max_src_tokens: max_tokens, max_tgt_tokens: max_tokens });
            let (mut tokens, mut checksum) = (0usize, 0u64);
            for b in epoch_order(batches.len(), 1, 0) {
                let pairs: Vec<(Vec<u32>, Vec<u32>)> = batches[b].iter().map(|&i| corpus.pair(i)).collect();
                let batch = Batch::from_pairs(&pairs);
                tokens += batch.target_tokens();
                checksum = checksum.wrapping_add(batch.tgt_out.iter().map(|&x| x as u64).sum::<u64>());
            }
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let kb = |key: &str| {
                status
                    .lines()
                    .find(|l| l.starts_with(key))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            println!(
                "{} pairs, {} batches, {tokens} target tokens (checksum {checksum}) in {:.1} s; peak RSS {:.0} MB, now {:.0} MB anonymous + {:.0} MB file-backed (the memory-mapped corpus, page cache the kernel can reclaim)",
                corpus.len(),
                batches.len(),
                start.elapsed().as_secs_f64(),
                super::rss::peak_rss_bytes().unwrap_or(0) as f64 / 1e6,
                kb("RssAnon:") / 1e3,
                kb("RssFile:") / 1e3
            );
            Ok(())
        }
    }
}

/// Which model `bench train-step` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BenchModel {
    /// The benchmark model of issue "engine" ([`bench_config`]), on 64 sentences of 32 + 32
    /// positions.
    Engine,
    /// The quick start's model (configs/multi30k-en-de.toml: 3+3 layers, d 256, h 4, d_ff 1024,
    /// vocabulary 8000), on 256 sentences of 16 + 16 positions: 4,096 target positions, the
    /// recipe's batch, at Multi30k's typical sentence length.
    Quickstart,
}

impl BenchModel {
    fn config(self, dropout: f32) -> ModelConfig {
        match self {
            BenchModel::Engine => bench_config(dropout),
            BenchModel::Quickstart => {
                ModelConfig { n_layers: 3, d_model: 256, d_ff: 1024, n_heads: 4, ..bench_config(dropout) }
            }
        }
    }

    /// Sentences, source positions and target positions of the timed batch.
    fn batch(self) -> (usize, usize, usize) {
        match self {
            BenchModel::Engine => (64, 32, 32),
            BenchModel::Quickstart => (256, 16, 16),
        }
    }
}

/// The benchmark model of issue "engine": d 512, h 8, d_ff 2048, 2+2 layers, vocabulary 8000.
fn bench_config(dropout: f32) -> ModelConfig {
    ModelConfig { n_layers: 2, dropout, vocab_size: 8000, ..ModelConfig::base() }
}

/// What the timed steps of `bench train-step` measured.
struct StepTimes {
    /// Seconds per timed step.
    times: Vec<f64>,
    /// Per timed step, the seconds of each kernel family.
    slots: Vec<Vec<(&'static str, f64)>>,
    /// The matrix products' floating-point operations in one step.
    matmul_flops: u64,
    /// Per product shape, summed over the timed steps, longest first.
    products: Vec<(Shape, ShapeTimes)>,
    /// Parameters of the model.
    params: usize,
}

fn train_step(
    model: BenchModel,
    steps: usize,
    warmup: usize,
    bf16: bool,
    dropout: f32,
    per_shape: bool,
    json: bool,
) -> Result<()> {
    let precision = if bf16 { Precision::Bf16 } else { Precision::F32 };
    precision.available().map_err(|why| anyhow::anyhow!("--bf16: {why}"))?;
    let m = time_train_steps(model, precision, dropout, steps, warmup, json)?;
    // The unit's arithmetic ceiling on all worker threads: FMA, `vdpbf16ps` or AMX tiles.
    let peak = if per_shape { transformer::kernels::cpu::peak::product_peak(bf16) } else { None };
    let median = median_of(m.times.clone());
    // Per kernel family: the median over steps; "other" is the step minus all accounted time.
    let mut breakdown: Vec<(String, f64)> = (m.slots[0].iter().enumerate())
        .map(|(k, (n, _))| (n.to_string(), median_of(m.slots.iter().map(|s| s[k].1).collect())))
        .collect();
    let other = median_of(m.times.iter().zip(&m.slots).map(|(t, s)| t - s.iter().map(|x| x.1).sum::<f64>()).collect());
    breakdown.push(("other (wiring, rayon waits)".into(), other));
    let threads = rayon::current_num_threads();
    let rss = super::rss::peak_rss_bytes();
    let per_step = steps as f64;
    if json {
        let mut v = serde_json::json!({ "impl": "transformer", "bf16": bf16, "threads": threads, "step_times_s": m.times, "median_s": median, "peak_rss_bytes": rss,
            "params": m.params, "matmul_gflop": m.matmul_flops as f64 / 1e9,
            "breakdown_s": breakdown.iter().map(|(n, t)| (n.clone(), *t)).collect::<std::collections::BTreeMap<_, _>>() });
        if per_shape {
            v["products"] = products_json(&m.products, per_step);
            if let Some((what, p)) = peak {
                v["peak_gflops"] = serde_json::json!({ "unit": what, "gflops": p });
            }
        }
        println!("{v}");
        return Ok(());
    }
    println!(
        "median step {median:.3} s over {steps} steps, {threads} threads, {}, peak RSS {:.2} GB",
        if bf16 { "bf16 products" } else { "f32" },
        rss.unwrap_or(0) as f64 / 1e9
    );
    let matmul_median = breakdown[0].1;
    println!(
        "matmuls: {:.1} GFLOP at {:.0} GFLOP/s",
        m.matmul_flops as f64 / 1e9,
        m.matmul_flops as f64 / matmul_median / 1e9
    );
    for (name, t) in &breakdown {
        println!("  {name:<28} {:>7.1} ms  {:>5.1}%", t * 1e3, 100.0 * t / median);
    }
    if per_shape {
        match peak {
            Some((what, p)) => println!("unit peak ({what}, {threads} threads, no memory traffic): {p:.0} GFLOP/s"),
            None => println!("unit peak: not measured for this unit"),
        }
        print_products(&m.products, per_step, peak.map(|p| p.1));
    }
    Ok(())
}

fn median_of(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Trains `model` on one fixed batch ([`BenchModel::batch`]): `warmup` steps, then `steps` timed
/// ones (each printed unless `quiet`).
fn time_train_steps(
    model: BenchModel,
    precision: Precision,
    dropout: f32,
    steps: usize,
    warmup: usize,
    quiet: bool,
) -> Result<StepTimes> {
    let cfg = model.config(dropout);
    let (b, s, t) = model.batch();
    let model = Transformer::new(cfg.clone(), 1)?.with_precision(precision)?;
    let mut trainer = Trainer::new(model, Schedule::paper(cfg.d_model), 1)?;
    let mut rng = Rng::new(7);
    let special = transformer::vocab::SPECIAL_TOKENS as u64;
    let mut tok = || (special + rng.below(cfg.vocab_size as u64 - special)) as u32;
    // Every sentence is exactly s source and t target positions (decoder input BOS + t - 1 tokens).
    let pairs: Vec<(Vec<u32>, Vec<u32>)> =
        (0..b).map(|_| ((0..s).map(|_| tok()).collect(), (0..t - 1).map(|_| tok()).collect())).collect();
    let batch = Batch::from_pairs(&pairs);
    assert_eq!((batch.s, batch.t), (s, t));
    let profile = Profile::new();
    let mut m = StepTimes { times: Vec::new(), slots: Vec::new(), matmul_flops: 0, products: Vec::new(), params: 0 };
    let mut products: std::collections::BTreeMap<Shape, ShapeTimes> = Default::default();
    for i in 0..warmup + steps {
        profile.take();
        profile.take_products();
        let start = Instant::now();
        let stats = profile.install(|| trainer.train_step(std::slice::from_ref(&batch)))?;
        let dt = start.elapsed().as_secs_f64();
        let (slot_times, flops) = profile.take();
        if i >= warmup {
            m.times.push(dt);
            m.slots.push(slot_times);
            m.matmul_flops = flops;
            for (shape, t) in profile.take_products() {
                let e = products.entry(shape).or_default();
                e.calls += t.calls;
                e.seconds += t.seconds;
                e.pack_a_seconds += t.pack_a_seconds;
                e.pack_b_seconds += t.pack_b_seconds;
            }
        }
        if !quiet {
            let warm = if i < warmup { " (warm-up)" } else { "" };
            eprintln!("step {:>3}: {:.3} s  loss {:.4}{warm}", i + 1, dt, stats.loss);
        }
    }
    m.products = products.into_iter().collect();
    m.products.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
    m.params = trainer.model().params.len();
    Ok(m)
}

fn products_json(products: &[(Shape, ShapeTimes)], per_step: f64) -> serde_json::Value {
    products
        .iter()
        .map(|(s, t)| {
            serde_json::json!({ "shape": s.label(), "calls_per_step": t.calls as f64 / per_step,
                "ms_per_step": 1e3 * t.seconds / per_step, "pack_a_ms_per_step": 1e3 * t.pack_a_seconds / per_step,
                "pack_b_ms_per_step": 1e3 * t.pack_b_seconds / per_step,
                "gflops": s.flops() * t.calls as f64 / t.seconds / 1e9 })
        })
        .collect()
}

/// The table of matrix products by shape, each against the unit's `peak` when measured.
fn print_products(products: &[(Shape, ShapeTimes)], per_step: f64, peak: Option<f64>) {
    let pct = |g: f64| peak.map_or("-".to_string(), |p| format!("{:.0}%", 100.0 * g / p));
    println!("matrix products by shape (C = op(A)·op(B), m×n×k; means over the timed steps):");
    println!(
        "  {:<22} {:>5} {:>9} {:>9} {:>9} {:>8} {:>6} {:>8}",
        "ops m×n×k", "calls", "ms/step", "pack A", "pack B", "GFLOP/s", "peak", "no pack"
    );
    for (s, t) in products {
        let flops = s.flops() * t.calls as f64;
        let compute = t.seconds - t.pack_a_seconds - t.pack_b_seconds;
        println!(
            "  {:<22} {:>5} {:>9.1} {:>9.1} {:>9.1} {:>8.0} {:>6} {:>8.0}",
            s.label(),
            t.calls as f64 / per_step,
            1e3 * t.seconds / per_step,
            1e3 * t.pack_a_seconds / per_step,
            1e3 * t.pack_b_seconds / per_step,
            flops / t.seconds / 1e9,
            pct(flops / t.seconds / 1e9),
            flops / compute / 1e9
        );
    }
    let total: f64 = products.iter().map(|p| p.1.seconds).sum::<f64>() / per_step;
    let pack: f64 = products.iter().map(|p| p.1.pack_a_seconds + p.1.pack_b_seconds).sum::<f64>() / per_step;
    let flops: f64 = products.iter().map(|p| p.0.flops() * p.1.calls as f64).sum::<f64>() / per_step;
    println!(
        "  all products: {:.1} ms/step, of which packing {:.1} ms; {:.0} GFLOP/s ({}), {:.0} without packing",
        1e3 * total,
        1e3 * pack,
        flops / total / 1e9,
        pct(flops / total / 1e9),
        flops / (total - pack) / 1e9
    );
}

fn matmul_rates(reps: usize) -> Result<()> {
    use transformer::kernels::cpu::matmul::{matmul, Op};
    // (m, n, k, op_a, op_b, what)
    let shapes = [
        (512, 512, 512, Op::N, Op::N, "square 512"),
        (1024, 1024, 1024, Op::N, Op::N, "square 1024"),
        (2048, 2048, 2048, Op::N, Op::N, "square 2048"),
        (2048, 1536, 512, Op::N, Op::T, "QKV fwd  X·Wᵀ"),
        (2048, 2048, 512, Op::N, Op::T, "FFN1 fwd X·W1ᵀ"),
        (2048, 512, 2048, Op::N, Op::T, "FFN2 fwd H·W2ᵀ"),
        (2048, 8000, 512, Op::N, Op::T, "logits   H·Eᵀ"),
        (2048, 512, 8000, Op::N, Op::N, "dlogits·E"),
        (8000, 512, 2048, Op::T, Op::N, "dE = dlogitsᵀ·H"),
        (2048, 512, 2048, Op::T, Op::N, "dW1 = dHᵀ·X"),
        (512, 2048, 2048, Op::T, Op::N, "dW2 = dYᵀ·H"),
    ];
    let mut rng = Rng::new(3);
    for (m, n, k, oa, ob, what) in shapes {
        let a: Vec<f32> = (0..m * k).map(|_| rng.uniform() as f32 - 0.5).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.uniform() as f32 - 0.5).collect();
        let mut c = vec![0f32; m * n];
        let mut times = Vec::new();
        for _ in 0..reps + 1 {
            let t0 = Instant::now();
            matmul(&mut c, &a, oa, &b, ob, m, n, k, true);
            times.push(t0.elapsed().as_secs_f64());
        }
        times.remove(0);
        times.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let med = times[times.len() / 2];
        println!(
            "{what:<18} {m:>5}x{n:>5}x{k:>5} {oa:?}{ob:?}  {:>7.2} ms  {:>6.1} GFLOP/s",
            med * 1e3,
            2.0 * (m * n * k) as f64 / med / 1e9
        );
    }
    Ok(())
}
