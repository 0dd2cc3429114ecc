//! `mpirun -np N transformer train`: data-parallel training over MPI (the `mpi` feature), and the
//! all-reduce benchmark. Without the feature, a run started by an MPI launcher with more than one
//! process is refused, so that N copies never train side by side on one directory.

use anyhow::Result;
use transformer::events::Events;
use transformer::train::run::{RunConfig, RunSummary};

/// The number of processes an MPI launcher started this one among, from its variables.
fn launcher_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"].iter().find_map(|v| std::env::var(v).ok()?.parse().ok())
}

/// Runs `cfg` (telling `events` its messages and updates) as one process, or as one worker of
/// `mpirun -np N` when built with the `mpi` feature and started by it. Returns the summary on rank 0 (`None` on the other workers, which
/// print nothing). An error on any worker of N > 1 ends them all (`MPI_Abort`), after this
/// worker has printed it with its rank.
pub fn train(cfg: &RunConfig, events: &mut dyn Events) -> Result<Option<RunSummary>> {
    #[cfg(feature = "mpi")]
    if transformer::train::distributed::Mpi::launched() {
        use transformer::train::distributed::Collective;
        let mpi = transformer::train::distributed::Mpi::init()?;
        return match transformer::train::run::run_distributed(cfg, &mpi, events) {
            Ok(summary) => Ok(mpi.is_root().then_some(summary)),
            Err(e) if mpi.size() > 1 => {
                eprintln!("error (worker {} of {}): {e}", mpi.rank(), mpi.size());
                mpi.abort(1)
            }
            Err(e) => Err(e.into()),
        };
    }
    if let Some(n) = launcher_size().filter(|&n| n > 1) {
        anyhow::bail!(
            "this `transformer` was built without the `mpi` feature but was started as one of {n} MPI processes, \
             which would train {n} separate copies: build it with `cargo build --release --features mpi` \
             (needs Open MPI and libclang), or run it without mpirun"
        );
    }
    Ok(Some(transformer::train::run::run(cfg, events)?))
}

/// `bench allreduce`: seconds per in-place all-reduce (sum) of `floats` f32 values over the
/// workers of `mpirun -np N`, the median of `reps` after one untimed call; rank 0 prints.
#[cfg(feature = "mpi")]
pub fn bench_allreduce(floats: usize, reps: usize, json: bool) -> Result<()> {
    use transformer::train::distributed::{Collective, Mpi};
    let mpi = Mpi::init()?;
    let mut buf = vec![1.0f32; floats];
    mpi.all_reduce_sum_f32(&mut buf);
    let n = mpi.size();
    anyhow::ensure!(buf[0] == n as f32, "all-reduce gave {} for a sum of {n} ones", buf[0]);
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        buf.fill(1.0);
        mpi.barrier();
        let t = std::time::Instant::now();
        mpi.all_reduce_sum_f32(&mut buf);
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    // A ring all-reduce moves 2 (N − 1) / N of the buffer through each worker's link.
    let bus_gbs = 2.0 * (n as f64 - 1.0) / n as f64 * 4.0 * floats as f64 / median / 1e9;
    if mpi.is_root() {
        if json {
            let v = serde_json::json!({"bench": "allreduce", "workers": n, "floats": floats, "reps": reps, "median_s": median, "min_s": times[0], "bus_gb_per_s": bus_gbs});
            println!("{v}");
        } else {
            println!(
                "all-reduce of {floats} f32 over {n} workers: median {:.4} s (min {:.4} s, {reps} reps), bus bandwidth {bus_gbs:.2} GB/s",
                median, times[0]
            );
        }
    }
    Ok(())
}
