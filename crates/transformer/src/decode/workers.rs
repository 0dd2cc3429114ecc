//! The worker pool of a session's decoding: independent jobs (batches) run one after the other on
//! the calling thread, or several at once, each on a scoped thread of its own, with the results
//! handed back on the calling thread and the errors as one job at a time would give them.

use crate::error::{Error, Result};
use crate::kernels::cpu::profile::Profile;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

/// Runs `job` on every one of `jobs`, each in a state `with_state` lends it (a session's buffers
/// from its pool), and hands each result to `done` on the calling thread, with the job it is of;
/// an error from `done` (the caller's interruption) stops the jobs not yet begun and is returned.
///
/// With `workers` ≤ 1 the jobs run in order on the calling thread, in one state, their products
/// split over rayon's pool; the first error stops them. With more, that many threads run at once,
/// each in a state of its own and a one-thread rayon pool (a step's products are too small to
/// split well over threads, every one would wait for the slowest, while whole jobs need no
/// synchronisation at all), each taking the next job when it is done; `done` hears the results as
/// they arrive. The calling thread's kernel [`Profile`] is installed on every worker. A failing
/// job stops the workers, and the error returned is the earliest job's that failed, as one job at
/// a time would give; a panic in a job is caught on its worker and raised again here.
pub(super) fn run<J: Sync, S, T: Send>(
    jobs: &[J],
    workers: usize,
    with_state: impl Fn(&mut dyn FnMut(&mut S)) + Sync,
    job: impl Fn(&J, &mut S) -> Result<T> + Sync,
    mut done: impl FnMut(&J, T) -> Result<()>,
) -> Result<()> {
    if workers <= 1 {
        let mut out = Ok(());
        with_state(&mut |state| out = jobs.iter().try_for_each(|j| job(j, state).and_then(|t| done(j, t))));
        return out;
    }
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let profile = Profile::current();
    std::thread::scope(|s| -> Result<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..workers {
            let (tx, next, stop, with_state, job, profile) = (tx.clone(), &next, &stop, &with_state, &job, &profile);
            s.spawn(move || {
                let work = || {
                    with_state(&mut |state| {
                        while !stop.load(Relaxed) {
                            let i = next.fetch_add(1, Relaxed);
                            let Some(j) = jobs.get(i) else { break };
                            // A panic is caught here and carried to the calling thread (which
                            // raises it again), stopping the other workers.
                            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(j, state)));
                            if !matches!(r, Ok(Ok(_))) {
                                stop.store(true, Relaxed);
                            }
                            if tx.send((i, r)).is_err() {
                                break;
                            }
                        }
                    })
                };
                let one = match rayon::ThreadPoolBuilder::new().num_threads(1).build() {
                    Ok(pool) => pool,
                    Err(e) => {
                        stop.store(true, Relaxed);
                        let e = Error::Decode(format!("starting a decoding thread: {e}"));
                        let _ = tx.send((usize::MAX, Ok(Err(e))));
                        return;
                    }
                };
                one.install(|| match profile {
                    Some(p) => p.install(work),
                    None => work(),
                })
            });
        }
        drop(tx);
        // The error of the earliest job that failed, as one job at a time would give.
        let mut first_error: Option<(usize, Error)> = None;
        let mut stopped: Option<Error> = None;
        let mut panic = None;
        for (i, r) in rx {
            match r {
                Ok(Ok(t)) => {
                    if stopped.is_none() {
                        if let Err(e) = done(&jobs[i], t) {
                            stop.store(true, Relaxed);
                            stopped = Some(e);
                        }
                    }
                }
                Ok(Err(e)) => {
                    if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                        first_error = Some((i, e));
                    }
                }
                Err(payload) => {
                    panic.get_or_insert(payload);
                }
            }
        }
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
        match (first_error, stopped) {
            (Some((_, e)), _) | (None, Some(e)) => Err(e),
            (None, None) => Ok(()),
        }
    })
}
