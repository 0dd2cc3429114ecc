//! Data-parallel training (§5.2 trains on 8 GPUs; here N processes over MPI): one collective
//! interface, [`Collective`], with a single-process implementation that does nothing
//! ([`SingleProcess`]) and an MPI one behind the `mpi` feature ([`Mpi`]).
//!
//! The mathematics do not depend on N. An update sums the gradients of `train.accumulate = K`
//! batches taken in the seed's global order; with N workers, worker r takes a contiguous share of
//! them ([`share_of`]), accumulates its share's gradients, and the shares are summed by an
//! all-reduce over the flat gradient buffer. The loss is normalised by the all-reduced target-token
//! count, and each batch's dropout masks are keyed by its global position (the number of batches
//! before it in the run), so every worker applies the same masks a single process would.
//! What differs is only the f32 order of the gradient sum (N partial sums added, instead of one
//! sequential accumulation): see docs/distributed.md for the measured effect.

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::ops::Range;

/// The collective operations data-parallel training needs. Every call is collective: every worker
/// makes the same calls in the same order, or the run deadlocks (MPI's rule).
pub trait Collective {
    /// This worker's index, 0 ≤ rank < size; rank 0 writes the run directory.
    fn rank(&self) -> usize;
    /// The number of workers.
    fn size(&self) -> usize;
    /// In place: `buf` becomes the element-wise sum of every worker's `buf` (the gradients).
    fn all_reduce_sum_f32(&self, buf: &mut [f32]);
    /// In place: the element-wise sum of every worker's `buf` (loss sums).
    fn all_reduce_sum_f64(&self, buf: &mut [f64]);
    /// In place: the element-wise sum of every worker's `buf` (token counts, flags).
    fn all_reduce_sum_u64(&self, buf: &mut [u64]);
    /// `buf` becomes rank 0's `buf` (the parameters at the start).
    fn broadcast_f32(&self, buf: &mut [f32]);
    /// `buf` becomes rank 0's `buf` (hashes, flags).
    fn broadcast_u64(&self, buf: &mut [u64]);
    /// Waits until every worker has called it.
    fn barrier(&self);
    /// Whether this worker is rank 0.
    fn is_root(&self) -> bool {
        self.rank() == 0
    }
}

/// One process: every collective is the identity.
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleProcess;

impl Collective for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_reduce_sum_f32(&self, _: &mut [f32]) {}
    fn all_reduce_sum_f64(&self, _: &mut [f64]) {}
    fn all_reduce_sum_u64(&self, _: &mut [u64]) {}
    fn broadcast_f32(&self, _: &mut [f32]) {}
    fn broadcast_u64(&self, _: &mut [u64]) {}
    fn barrier(&self) {}
}

/// The batches of an update of `m` batches that worker `rank` of `size` takes: a contiguous range,
/// the shares as equal as they can be (with `m` divisible by `size`, exactly `m / size` each; the
/// last update of an epoch may be shorter, and a share may then be empty). A rank that is not
/// one of the `size` workers' is an [`Error::Input`].
pub fn share_of(m: usize, rank: usize, size: usize) -> Result<Range<usize>> {
    if rank >= size {
        return Err(Error::Input(format!("worker rank {rank} of a run of {size} workers (ranks 0..{size})")));
    }
    let at = |r: usize| (r as u128 * m as u128 / size as u128) as usize;
    Ok(at(rank)..at(rank + 1))
}

/// `train.accumulate` must split evenly over the workers, so that every worker does the same work
/// and the update is the same at any worker count.
pub fn check_accumulate(accumulate: usize, workers: usize) -> Result<()> {
    if workers > 1 && !accumulate.is_multiple_of(workers) {
        return Err(Error::Config(format!(
            "train.accumulate = {accumulate} is not divisible by the {workers} workers of this run: each worker \
             takes train.accumulate / N batches of an update; set train.accumulate to a multiple of {workers} \
             (--set train.accumulate={}) or run another number of processes",
            accumulate.div_ceil(workers) * workers
        )));
    }
    Ok(())
}

/// A 256-bit digest of `bytes` as four words, for [`agree`].
pub fn digest(bytes: &[u8]) -> [u64; 4] {
    let d = Sha256::digest(bytes);
    let word = |i: usize| u64::from_le_bytes(d[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    [word(0), word(1), word(2), word(3)]
}

/// Checks that every worker holds the same `what` (its [`digest`]): rank 0's digest is broadcast,
/// every worker compares its own, and the count of those that differ is summed, so that every
/// worker fails together with an error naming `what` (and, on a worker that differs, its rank).
/// `fix` says what to do about it.
pub fn agree(comm: &dyn Collective, what: &str, mine: [u64; 4], fix: &str) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let mut root = mine;
    comm.broadcast_u64(&mut root);
    let differs = root != mine;
    let mut count = [differs as u64];
    comm.all_reduce_sum_u64(&mut count);
    if count[0] == 0 {
        return Ok(());
    }
    let who = if differs {
        format!("this worker (rank {} of {})", comm.rank(), comm.size())
    } else {
        format!("{} of the {} workers", count[0], comm.size())
    };
    Err(Error::Mismatch(format!(
        "{who} {} a different {what} than rank 0: {fix}",
        if count[0] == 1 { "has" } else { "have" }
    )))
}

#[cfg(feature = "mpi")]
pub use self::mpi_impl::Mpi;

#[cfg(feature = "mpi")]
mod mpi_impl {
    use super::Collective;
    use crate::error::{Error, Result};
    use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
    use mpi::topology::{Communicator, SimpleCommunicator};

    /// The workers of `mpirun -np N`: `MPI_COMM_WORLD`. MPI is finalised when this is dropped.
    /// Errors inside MPI abort the whole job (MPI's default error handler), so the collectives
    /// return nothing; a worker that dies makes `mpirun` end the others.
    pub struct Mpi {
        world: SimpleCommunicator,
        _universe: mpi::environment::Universe,
    }

    /// Elements per MPI call (counts are C ints; the all-reduce copies one chunk).
    const CHUNK: usize = 1 << 22;

    impl Mpi {
        /// Whether this process was started by an MPI launcher (`mpirun`, `srun` …), by the
        /// variables they set.
        pub fn launched() -> bool {
            ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"]
                .iter()
                .any(|v| std::env::var_os(v).is_some())
        }

        /// Initialises MPI (once per process). Only the thread that calls this may call MPI.
        pub fn init() -> Result<Mpi> {
            let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled).ok_or_else(|| {
                Error::Config("MPI is already initialised in this process (Mpi::init is called once)".into())
            })?;
            let world = universe.world();
            Ok(Mpi { world, _universe: universe })
        }

        /// Ends every worker of the job with `code` (`MPI_Abort`): the way out after an error on
        /// one worker, where the others would wait forever in the next collective.
        pub fn abort(&self, code: i32) -> ! {
            self.world.abort(code)
        }

        /// In place, through a copy of each chunk (MPI_IN_PLACE is not in the `mpi` crate's
        /// safe interface): 16 MB at a time, so the copy costs little memory and, next to a
        /// training step, little time.
        fn all_reduce_in_place<T: mpi::traits::Equivalence + Copy + Default>(&self, buf: &mut [T]) {
            let mut send = vec![T::default(); buf.len().min(CHUNK)];
            for chunk in buf.chunks_mut(CHUNK) {
                let send = &mut send[..chunk.len()];
                send.copy_from_slice(chunk);
                self.world.all_reduce_into(&send[..], chunk, SystemOperation::sum());
            }
        }
    }

    impl Collective for Mpi {
        fn rank(&self) -> usize {
            self.world.rank() as usize
        }
        fn size(&self) -> usize {
            self.world.size() as usize
        }
        fn all_reduce_sum_f32(&self, buf: &mut [f32]) {
            self.all_reduce_in_place(buf)
        }
        fn all_reduce_sum_f64(&self, buf: &mut [f64]) {
            self.all_reduce_in_place(buf)
        }
        fn all_reduce_sum_u64(&self, buf: &mut [u64]) {
            self.all_reduce_in_place(buf)
        }
        fn broadcast_f32(&self, buf: &mut [f32]) {
            for chunk in buf.chunks_mut(CHUNK) {
                self.world.process_at_rank(0).broadcast_into(chunk);
            }
        }
        fn broadcast_u64(&self, buf: &mut [u64]) {
            for chunk in buf.chunks_mut(CHUNK) {
                self.world.process_at_rank(0).broadcast_into(chunk);
            }
        }
        fn barrier(&self) {
            self.world.barrier()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_an_update_in_order_without_overlap() {
        for m in 0..9 {
            for size in 1..5 {
                let ranges: Vec<Range<usize>> = (0..size).map(|r| share_of(m, r, size).unwrap()).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[size - 1].end, m);
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start), "{m} {size}: {ranges:?}");
                if m % size == 0 {
                    assert!(ranges.iter().all(|r| r.len() == m / size), "{m} {size}: {ranges:?}");
                }
            }
        }
    }

    #[test]
    fn accumulate_must_divide_among_the_workers() {
        assert!(check_accumulate(4, 2).is_ok() && check_accumulate(3, 1).is_ok());
        let err = check_accumulate(3, 2).unwrap_err().to_string();
        assert!(
            err.contains("train.accumulate = 3") && err.contains("2 workers") && err.contains("accumulate=4"),
            "{err}"
        );
    }

    #[test]
    fn one_process_agrees_with_itself_and_its_collectives_change_nothing() {
        let c = SingleProcess;
        agree(&c, "configuration", digest(b"a"), "").unwrap();
        let mut v = [1.5f32, -2.0];
        c.all_reduce_sum_f32(&mut v);
        c.broadcast_f32(&mut v);
        assert_eq!(v, [1.5, -2.0]);
        assert_ne!(digest(b"a"), digest(b"b"));
    }
}
