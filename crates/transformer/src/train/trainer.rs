//! The training step (§5): forward, label-smoothed loss, backward, Adam with the Eq. 3 schedule, over
//! flat parameter, gradient and moment buffers.

use super::distributed::{Collective, SingleProcess};
use super::schedule::Schedule;
use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::kernels::cpu::adam::{adam_update, AdamConfig};
use crate::kernels::cpu::elementwise::all_finite;
use crate::model::{Batch, DropoutCtx, Transformer, Workspace};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// What one update reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepStats {
    /// The update's number (1-based).
    pub step: u64,
    /// Label-smoothed loss per target token.
    pub loss: f64,
    /// Negative log-likelihood per target token (ln of perplexity).
    pub nll: f64,
    /// Target tokens in the update.
    pub tokens: usize,
    /// Learning rate used.
    pub lr: f32,
}

/// A model with its gradient and Adam buffers, schedule and step counter. Its state changes only
/// through its methods (training steps, [`Trainer::resume`]); [`Trainer::to_checkpoint`] saves it.
pub struct Trainer {
    /// The model trained.
    model: Transformer,
    /// Gradients (same layout as the parameters).
    grads: Vec<f32>,
    /// Adam first moments.
    adam_m: Vec<f32>,
    /// Adam second moments.
    adam_v: Vec<f32>,
    /// Adam constants.
    adam: AdamConfig,
    /// Learning-rate schedule.
    schedule: Schedule,
    /// Updates done so far.
    step: u64,
    /// Seed of the dropout masks.
    seed: u64,
    /// Forward/backward passes done so far by every worker of the run (a batch's position among
    /// them keys its dropout masks).
    passes: u64,
    /// Activations and scratch.
    workspace: Workspace,
    /// Guided alignment training (`train.guided_alignment_weight`), on batches with a guide.
    guided: Option<Guided>,
}

/// Guided alignment (Marian's `--guided-alignment`): the loss `weight` · −Σ A ⊙ log P of one head
/// of one decoder layer's encoder–decoder attention (both counted from 0), added to the
/// cross-entropy of every batch that holds a guide ([`Batch::guide`]) and normalised as it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Guided {
    pub weight: f32,
    pub layer: usize,
    pub head: usize,
}

impl Trainer {
    /// A trainer at step 0 with the paper's Adam and the given schedule. A model prepared for
    /// inference ([`Transformer::prepare`]), which no longer holds its linear maps' weights as
    /// parameters, is an [`Error::Unsupported`].
    pub fn new(model: Transformer, schedule: Schedule, seed: u64) -> Result<Self> {
        if model.prepared().is_some() {
            return Err(Error::Unsupported(format!(
                "a model prepared for inference (at {}) cannot train: train the model as loaded, at f32 or bf16",
                model.precision()
            )));
        }
        let n = model.params.len();
        Ok(Trainer {
            model,
            grads: vec![0.0; n],
            adam_m: vec![0.0; n],
            adam_v: vec![0.0; n],
            adam: AdamConfig::paper(),
            schedule,
            step: 0,
            seed,
            passes: 0,
            workspace: Workspace::new(),
            guided: None,
        })
    }

    /// Trains one attention head towards each batch's guide from now on (`None`: not).
    pub fn set_guided(&mut self, guided: Option<Guided>) {
        self.guided = guided;
    }

    /// The model trained.
    pub fn model(&self) -> &Transformer {
        &self.model
    }

    /// Updates done so far.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Forward/backward passes done so far (keys the dropout masks).
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// The model, its Adam moments and the step as a checkpoint for the vocabulary `vocab_hash`
    /// ("" if none), with `extra` metadata (a run's position, say).
    pub fn to_checkpoint(&self, vocab_hash: &str, extra: BTreeMap<String, String>) -> Checkpoint {
        Checkpoint {
            config: self.model.config.clone(),
            step: self.step,
            vocab_hash: vocab_hash.to_string(),
            params: self.model.params.clone(),
            adam: Some((self.adam_m.clone(), self.adam_v.clone())),
            extra,
        }
    }

    /// Continues from `ckpt` (read from `path`, named in errors): its parameters, Adam moments and
    /// step, and `passes` forward/backward passes done (the dropout counter, kept by the caller in
    /// the checkpoint's metadata). The checkpoint must fit the model and hold Adam moments.
    pub fn resume(&mut self, ckpt: Checkpoint, passes: u64, path: &Path) -> Result<()> {
        self.check_fits(&ckpt, true, path)?;
        let (m, v) = ckpt.adam.ok_or_else(|| Error::CorruptCheckpoint {
            path: path.to_path_buf(),
            reason: "no Adam moments to resume from".into(),
        })?;
        self.model.params = ckpt.params;
        self.adam_m = m;
        self.adam_v = v;
        self.step = ckpt.step;
        self.passes = passes;
        Ok(())
    }

    /// `ckpt` (read from `path`) has as many parameters as this model, and with `moments`, as
    /// many Adam moments of each kind where it has them.
    fn check_fits(&self, ckpt: &Checkpoint, moments: bool, path: &Path) -> Result<()> {
        let n = self.model.params.len();
        let mismatch = |what: &str, found: usize| Error::CheckpointMismatch {
            path: path.to_path_buf(),
            what: what.into(),
            expected: n.to_string(),
            found: found.to_string(),
        };
        if ckpt.params.len() != n {
            return Err(mismatch("parameter count", ckpt.params.len()));
        }
        if let Some((m, v)) = ckpt.adam.as_ref().filter(|_| moments) {
            for (what, kept) in [("Adam first-moment count", m), ("Adam second-moment count", v)] {
                if kept.len() != n {
                    return Err(mismatch(what, kept.len()));
                }
            }
        }
        Ok(())
    }

    /// Starts from another run's weights (`ckpt`, read from `path`): step 0 (a fresh schedule), and
    /// fresh Adam moments unless `keep_optimizer`, which takes the checkpoint's.
    pub fn init_from(&mut self, ckpt: Checkpoint, keep_optimizer: bool, path: &Path) -> Result<()> {
        self.check_fits(&ckpt, keep_optimizer, path)?;
        if keep_optimizer {
            let (m, v) = ckpt.adam.ok_or_else(|| {
                Error::Config(format!(
                    "train.init_optimizer: {} has no Adam moments (an averaged or imported model); leave it false",
                    path.display()
                ))
            })?;
            (self.adam_m, self.adam_v) = (m, v);
        }
        self.model.params = ckpt.params;
        (self.step, self.passes) = (0, 0);
        Ok(())
    }

    /// Forward + backward of one (micro-)batch with dropout, accumulating gradients scaled by
    /// `grad_scale` (1 / target tokens of the whole update). Returns the loss sums.
    pub fn accumulate(&mut self, batch: &Batch, grad_scale: f32) -> Result<crate::model::LossSums> {
        let sums = self.accumulate_at(batch, grad_scale, self.passes)?;
        self.passes += 1;
        Ok(sums)
    }

    /// [`Trainer::accumulate`] with dropout masks keyed by `pass`, the batch's global position in
    /// the run (the batches before it, on every worker), which leaves the pass counter alone.
    fn accumulate_at(&mut self, batch: &Batch, grad_scale: f32, pass: u64) -> Result<crate::model::LossSums> {
        let ctx = DropoutCtx { seed: self.seed, counter: pass };
        self.model.forward(batch, &mut self.workspace, Some(ctx))?;
        let mut sums = self.model.loss(batch, &mut self.workspace, self.model.config.label_smoothing, grad_scale)?;
        if let Some(g) = self.guided.filter(|_| !batch.guide.is_empty()) {
            let ws = &mut self.workspace;
            sums.loss += self.model.guided_alignment_loss(batch, ws, g.weight, g.layer, g.head, grad_scale)?;
        }
        self.model.backward(batch, &mut self.workspace, Some(ctx), &mut self.grads)?;
        Ok(sums)
    }

    /// One update from `batches` (gradient accumulation over all of them), normalised per target
    /// token. A non-finite loss leaves parameters and moments untouched and returns an error.
    pub fn train_step(&mut self, batches: &[Batch]) -> Result<StepStats> {
        self.train_step_shared(batches, 0, batches.len(), &SingleProcess)
    }

    /// One update of `update_len` batches shared among the workers of `comm`: this worker's share
    /// is `batches`, the update's batches `first..first + batches.len()`. The gradients of the
    /// shares are summed by an all-reduce and normalised by the update's target tokens over every
    /// worker; every worker then makes the same Adam update, so the parameters stay equal. Each
    /// batch's dropout masks are keyed by its position in the update, as in one process. Every
    /// worker must call this with the same `update_len` (it is collective).
    pub fn train_step_shared(
        &mut self,
        batches: &[Batch],
        first: usize,
        update_len: usize,
        comm: &dyn Collective,
    ) -> Result<StepStats> {
        if first.checked_add(batches.len()).is_none_or(|end| end > update_len) {
            return Err(Error::Input(format!(
                "this worker's share, batches {first}..{first}+{}, lies outside the update's {update_len} batches",
                batches.len()
            )));
        }
        let mut tokens = [batches.iter().map(|b| b.target_tokens() as u64).sum::<u64>()];
        comm.all_reduce_sum_u64(&mut tokens);
        let tokens = tokens[0] as usize;
        if tokens == 0 {
            return Err(Error::Batch("the update has no target tokens".into()));
        }
        {
            let _t = crate::kernels::cpu::profile::scope(crate::kernels::cpu::profile::Slot::Elementwise);
            self.grads.par_chunks_mut(1 << 16).for_each(|c| c.fill(0.0));
        }
        let mut sums = [0.0f64; 2]; // label-smoothed loss, NLL
        for (i, b) in batches.iter().enumerate() {
            let s = self.accumulate_at(b, 1.0 / tokens as f32, self.passes + (first + i) as u64)?;
            sums[0] += s.loss;
            sums[1] += s.nll;
        }
        self.passes += update_len as u64;
        if comm.size() > 1 {
            comm.all_reduce_sum_f32(&mut self.grads);
            comm.all_reduce_sum_f64(&mut sums);
        }
        let [loss, nll] = sums;
        let step = self.step + 1;
        if !loss.is_finite() || !all_finite(&self.grads) {
            return Err(Error::NonFiniteLoss { step, loss: loss as f32 });
        }
        let lr = self.schedule.lr(step);
        let finite =
            adam_update(&mut self.model.params, &self.grads, &mut self.adam_m, &mut self.adam_v, self.adam, lr, step);
        if !finite {
            // The parameters in memory are lost; nothing has been saved from them.
            return Err(Error::NonFiniteParameters { step, lr });
        }
        self.step = step;
        Ok(StepStats { step, loss: loss / tokens as f64, nll: nll / tokens as f64, tokens, lr })
    }

    /// Makes every worker's parameters rank 0's (at the start of a run: they are equal when every
    /// worker initialised from the same seed or resumed from the same checkpoint, and this makes
    /// sure).
    pub fn broadcast_params(&mut self, comm: &dyn Collective) {
        comm.broadcast_f32(&mut self.model.params);
    }

    /// Label-smoothed loss and NLL sums of `pairs` (token ids without BOS/EOS) without dropout,
    /// in batches under `budget`: the validation score ([`crate::eval::perplexity::score`], the
    /// routine `evaluate` also uses).
    pub fn score(
        &mut self,
        pairs: &[(Vec<u32>, Vec<u32>)],
        budget: &crate::data::batching::BatchConfig,
    ) -> Result<crate::eval::perplexity::Totals> {
        let ls = self.model.config.label_smoothing;
        crate::eval::perplexity::score(&self.model, pairs, budget, ls, &mut self.workspace)
    }

    /// [`Trainer::score`] and how much the model reads its sources
    /// ([`crate::eval::perplexity::score_and_reading`]).
    pub fn score_and_reading(
        &mut self,
        pairs: &[(Vec<u32>, Vec<u32>)],
        budget: &crate::data::batching::BatchConfig,
    ) -> Result<(crate::eval::perplexity::Totals, crate::eval::perplexity::SourceReading)> {
        let ls = self.model.config.label_smoothing;
        crate::eval::perplexity::score_and_reading(&self.model, pairs, budget, ls, &mut self.workspace)
    }

    /// The logits of `batch` without dropout, (B·T, V).
    pub fn logits(&mut self, batch: &Batch) -> Result<&[f32]> {
        self.model.forward(batch, &mut self.workspace, None)?;
        Ok(&self.workspace.logits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{model_config, pairs, SyntheticTask};

    fn trained(steps: usize) -> Trainer {
        let cfg = model_config(6);
        let mut t = Trainer::new(Transformer::new(cfg.clone(), 1).unwrap(), Schedule::paper(cfg.d_model), 1).unwrap();
        let mut rng = crate::rng::Rng::new(2);
        for _ in 0..steps {
            t.train_step(&[Batch::from_pairs(&pairs(SyntheticTask::Copy, &mut rng, 4, 6, 2, 5))]).unwrap();
        }
        t
    }

    #[test]
    fn resume_restores_what_to_checkpoint_saved() {
        let done = trained(3);
        let extra: BTreeMap<String, String> = [("k".to_string(), "v".to_string())].into();
        let ckpt = done.to_checkpoint("sha256:x", extra.clone());
        assert_eq!((ckpt.step, ckpt.vocab_hash.as_str(), &ckpt.extra), (3, "sha256:x", &extra));
        assert_eq!(ckpt.config, done.model().config);
        let mut fresh = trained(0);
        fresh.resume(ckpt, done.passes(), Path::new("c.safetensors")).unwrap();
        assert_eq!((fresh.step(), fresh.passes()), (3, 3));
        assert_eq!(fresh.model().params, done.model().params);
        assert_eq!((&fresh.adam_m, &fresh.adam_v), (&done.adam_m, &done.adam_v));
    }

    /// Two workers as two threads of one process, meeting at a barrier to sum their buffers in
    /// f32 / f64 as an MPI all-reduce of two workers does (one addition per element).
    struct ThreadPair {
        rank: usize,
        meet: std::sync::Arc<(std::sync::Barrier, std::sync::Mutex<[Vec<f64>; 2]>)>,
    }

    impl ThreadPair {
        fn exchange(&self, mine: Vec<f64>) -> [Vec<f64>; 2] {
            let (barrier, slots) = &*self.meet;
            slots.lock().unwrap()[self.rank] = mine;
            barrier.wait();
            let both = slots.lock().unwrap().clone();
            barrier.wait();
            both
        }
    }

    impl Collective for ThreadPair {
        fn rank(&self) -> usize {
            self.rank
        }
        fn size(&self) -> usize {
            2
        }
        fn all_reduce_sum_f32(&self, buf: &mut [f32]) {
            let [a, b] = self.exchange(buf.iter().map(|&x| x as f64).collect());
            for (o, (x, y)) in buf.iter_mut().zip(a.iter().zip(&b)) {
                *o = *x as f32 + *y as f32;
            }
        }
        fn all_reduce_sum_f64(&self, buf: &mut [f64]) {
            let [a, b] = self.exchange(buf.to_vec());
            for (o, (x, y)) in buf.iter_mut().zip(a.iter().zip(&b)) {
                *o = x + y;
            }
        }
        fn all_reduce_sum_u64(&self, buf: &mut [u64]) {
            let [a, b] = self.exchange(buf.iter().map(|&x| x as f64).collect());
            for (o, (x, y)) in buf.iter_mut().zip(a.iter().zip(&b)) {
                *o = (x + y) as u64;
            }
        }
        fn broadcast_f32(&self, buf: &mut [f32]) {
            let [a, _] = self.exchange(buf.iter().map(|&x| x as f64).collect());
            buf.iter_mut().zip(a).for_each(|(o, x)| *o = x as f32);
        }
        fn broadcast_u64(&self, buf: &mut [u64]) {
            let [a, _] = self.exchange(buf.iter().map(|&x| x as f64).collect());
            buf.iter_mut().zip(a).for_each(|(o, x)| *o = x as u64);
        }
        fn barrier(&self) {
            self.meet.0.wait();
        }
    }

    /// Three updates of 4 batches with dropout by one trainer, and by two trainers taking 2
    /// batches each (the second keyed from batch `second_first` of each update).
    fn one_and_two_workers(second_first: usize) -> (Trainer, Trainer, Trainer) {
        let mut cfg = model_config(6);
        (cfg.dropout, cfg.attention_dropout) = (0.1, 0.1);
        // A learning rate of 2e-3 to 5e-3 (Eq. 3 with a short warmup), so that the updates move
        // the parameters by more than their rounding.
        let schedule = Schedule { d_model: cfg.d_model, warmup: 4, lr_scale: 0.1 };
        let new = || Trainer::new(Transformer::new(cfg.clone(), 1).unwrap(), schedule, 1).unwrap();
        let mut rng = crate::rng::Rng::new(2);
        let updates: Vec<Vec<Batch>> = (0..3)
            .map(|_| (0..4).map(|_| Batch::from_pairs(&pairs(SyntheticTask::Copy, &mut rng, 4, 6, 2, 5))).collect())
            .collect();
        let mut one = new();
        let mut losses = Vec::new();
        for u in &updates {
            losses.push(one.train_step(u).unwrap());
        }
        let meet = std::sync::Arc::new((std::sync::Barrier::new(2), std::sync::Mutex::new([vec![], vec![]])));
        let workers: Vec<Trainer> = std::thread::scope(|s| {
            let handles: Vec<_> = [(0, 0), (1, second_first)]
                .map(|(rank, first)| {
                    let (comm, updates, losses) = (ThreadPair { rank, meet: meet.clone() }, &updates, &losses);
                    s.spawn(move || {
                        let mut t = new();
                        t.broadcast_params(&comm);
                        for (u, want) in updates.iter().zip(losses) {
                            let got = t.train_step_shared(&u[2 * rank..2 * rank + 2], first, 4, &comm).unwrap();
                            assert_eq!((got.step, got.tokens, got.lr), (want.step, want.tokens, want.lr));
                        }
                        t
                    })
                })
                .into_iter()
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let [a, b]: [Trainer; 2] = workers.try_into().ok().unwrap();
        (one, a, b)
    }

    fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
    }

    #[test]
    fn two_workers_make_one_process_updates_up_to_the_order_of_the_sum() {
        let (one, a, b) = one_and_two_workers(2);
        assert!(a.model().params == b.model().params, "the workers' parameters must stay equal");
        assert!(a.adam_m == b.adam_m && a.adam_v == b.adam_v);
        assert_eq!((a.step(), a.passes()), (one.step(), one.passes()));
        // The key biases' gradient is 0 (the softmax ignores a shift shared by a query's scores):
        // computed, it is rounding noise, which Adam scales to full steps; leave them out.
        let layout = crate::params::ParamLayout::new(&one.model().config);
        let d = layout
            .entries()
            .iter()
            .filter(|e| !e.name.ends_with(".b_k"))
            .map(|e| max_abs_diff(&one.model().params[e.range()], &a.model().params[e.range()]))
            .fold(0.0, f32::max);
        eprintln!("one process against two workers: max |Δparam| {d:e}");
        assert!(d < 1e-5, "one process and two workers differ by {d}");
        // Keyed from the wrong batch, the second worker's dropout masks move the parameters far
        // more than the sum order does: the comparison above would see it.
        let (one, wrong, _) = one_and_two_workers(0);
        let d_wrong = max_abs_diff(&one.model().params, &wrong.model().params);
        eprintln!("with wrong dropout keys: {d_wrong:e}");
        assert!(d_wrong > 100.0 * d.max(1e-7), "wrong dropout keys moved the parameters by only {d_wrong}");
    }

    #[test]
    fn resume_needs_adam_moments_and_the_model_size() {
        let mut t = trained(0);
        let mut ckpt = trained(1).to_checkpoint("", BTreeMap::new());
        ckpt.adam = None;
        let err = t.resume(ckpt.clone(), 1, Path::new("c.safetensors")).unwrap_err().to_string();
        assert!(err.contains("c.safetensors") && err.contains("no Adam moments"), "{err}");
        ckpt.params.pop();
        let err = t.resume(ckpt, 1, Path::new("c.safetensors")).unwrap_err().to_string();
        assert!(err.contains("parameter count"), "{err}");
        assert_eq!(t.step(), 0, "a failed resume changes nothing");
    }
}
