//! Dynamic batching: one queue that every request joins, and one thread (the batcher) that owns
//! the decoding. The batcher sleeps on a condition variable until a request arrives (no timer),
//! then takes the oldest request and every later request with the same search settings that still
//! fits the token budget, decodes their sentences as one length-sorted batch through
//! [`Translator::translate_ids`], and hands each request its own results. A request whose client
//! has gone away (its reply channel is closed) is dropped before decoding.

use super::metrics::Metrics;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;
use transformer::decode::translator::{DecodeOptions, Translator};
use transformer::decode::{AlignmentOptions, BeamConfig, Guide};
use transformer::eval::attention::{AxisLabels, Kind};

/// One output sentence: the n-best list, best first, as (text, log P, score).
#[derive(Debug, Clone)]
pub struct Output {
    /// The hypotheses, best first.
    pub nbest: Vec<(String, f64, f64)>,
    /// The encoder–decoder attention of the best hypothesis, when asked for.
    pub attention: Option<serde_json::Value>,
    /// The best output was stopped by the model's positions before the search's length limit.
    pub capped: bool,
    /// The best hypothesis' alignment in Marian's format, when asked for.
    pub alignment: Option<String>,
}

/// A request waiting in the queue: its sentences as BPE ids, its search and its reply channel.
pub struct Job {
    /// Source token ids, without BOS/EOS.
    pub srcs: Vec<Vec<u32>>,
    /// Search settings (requests batch together only when these are equal).
    pub search: BeamConfig,
    /// Decode over the session's vocabulary shortlist (requests batch together only when this is
    /// equal too).
    pub use_shortlist: bool,
    /// Each sentence's prefix and phrases (empty: none asked), checked against the search
    /// ([`Translator::check_guides`]) before the job was queued.
    pub guides: Vec<Guide>,
    /// Return attention weights.
    pub attention: bool,
    /// Return each best output's alignment so.
    pub alignment: Option<AlignmentOptions>,
    /// Where the results go.
    pub reply: oneshot::Sender<Result<Vec<Output>, String>>,
}

impl Job {
    fn longest(&self) -> usize {
        self.srcs.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// Why a job was not queued.
#[derive(Debug, PartialEq)]
pub enum Refused {
    /// The queue holds too many sentences.
    Full { waiting: usize, limit: usize },
    /// The server is shutting down.
    Closed,
}

struct State {
    jobs: VecDeque<Job>,
    sentences: usize,
    closed: bool,
}

/// The queue between the HTTP handlers and the batcher.
pub struct Queue {
    state: Mutex<State>,
    wake: Condvar,
    /// Most sentences waiting.
    limit: usize,
}

/// The batcher's budget for one batch.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Source tokens, padding included (sentences × the longest).
    pub max_tokens: usize,
    /// Sentences.
    pub max_sentences: usize,
}

impl Queue {
    /// An empty queue holding at most `limit` sentences.
    pub fn new(limit: usize) -> Self {
        Queue {
            state: Mutex::new(State { jobs: VecDeque::new(), sentences: 0, closed: false }),
            wake: Condvar::new(),
            limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a job and wakes the batcher. A job larger than the whole limit is still taken when the
    /// queue is empty (the per-request limit bounds it).
    pub fn push(&self, job: Job) -> Result<(), Refused> {
        let mut s = self.lock();
        if s.closed {
            return Err(Refused::Closed);
        }
        if s.sentences + job.srcs.len() > self.limit && !s.jobs.is_empty() {
            return Err(Refused::Full { waiting: s.sentences, limit: self.limit });
        }
        s.sentences += job.srcs.len();
        s.jobs.push_back(job);
        drop(s);
        self.wake.notify_one();
        Ok(())
    }

    /// (sentences, requests) waiting.
    pub fn depth(&self) -> (usize, usize) {
        let s = self.lock();
        (s.sentences, s.jobs.len())
    }

    /// Refuses new jobs; the batcher stops once the queue is empty.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }

    /// Blocks until there is work, then takes the next batch: the oldest live job and every later
    /// one with the same search settings while the batch fits `budget` (the first job always goes,
    /// so no job waits for ever). `None` once the queue is closed and empty.
    pub fn next_batch(&self, budget: Budget, metrics: &Metrics) -> Option<Vec<Job>> {
        let mut s = self.lock();
        loop {
            // Clients that went away: their jobs leave the queue undecoded.
            let before = s.jobs.len();
            let mut freed = 0;
            s.jobs.retain(|j| {
                let gone = j.reply.is_closed();
                if gone {
                    freed += j.srcs.len();
                }
                !gone
            });
            s.sentences -= freed;
            metrics.dropped.fetch_add((before - s.jobs.len()) as u64, Ordering::Relaxed);
            if !s.jobs.is_empty() {
                break;
            }
            if s.closed {
                return None;
            }
            s = self.wake.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        let (search, use_shortlist) = (s.jobs[0].search, s.jobs[0].use_shortlist);
        let (mut n, mut longest) = (0usize, 0usize);
        let mut taken = Vec::new();
        let mut i = 0;
        while i < s.jobs.len() {
            let j = &s.jobs[i];
            if j.search != search || j.use_shortlist != use_shortlist {
                i += 1;
                continue;
            }
            let (n2, longest2) = (n + j.srcs.len(), longest.max(j.longest()));
            if !taken.is_empty() && (n2 > budget.max_sentences || n2 * longest2.max(1) > budget.max_tokens) {
                break;
            }
            (n, longest) = (n2, longest2);
            let job = s.jobs.remove(i).expect("index checked");
            s.sentences -= job.srcs.len();
            taken.push(job);
        }
        Some(taken)
    }
}

/// The encoder–decoder attention of (src, best output): every layer and head, (T, S) row-major,
/// rows the tokens the decoder predicts (the output, then `</s>`), columns the source tokens;
/// rounded to 3 decimals.
fn attention_json(t: &Translator, src: &[u32], tgt: &[u32]) -> Result<serde_json::Value, String> {
    if src.is_empty() {
        return Ok(serde_json::Value::Null);
    }
    if t.ensemble_size() > 1 {
        return Err(format!(
            "this server decodes an ensemble of {} models; attention weights are one model's",
            t.ensemble_size()
        ));
    }
    let w = t.attention(src, tgt).map_err(|e| e.to_string())?;
    let layers = t.model().config.n_layers;
    let mut all = Vec::with_capacity(layers);
    for l in 0..layers {
        let mut heads = Vec::with_capacity(w.heads);
        for h in 0..w.heads {
            let (m, _, _) = w.get(Kind::EncoderDecoder, l, h).map_err(|e| e.to_string())?;
            heads.push(m.iter().map(|&x| ((x as f64) * 1000.0).round() / 1000.0).collect::<Vec<f64>>());
        }
        all.push(heads);
    }
    let labels = AxisLabels::new(t.tokenizer(), src, tgt).map_err(|e| e.to_string())?;
    let (rows, columns) = labels.of(Kind::EncoderDecoder);
    Ok(serde_json::json!({
        "source": columns,
        "target": rows,
        "layers": layers,
        "heads": w.heads,
        "weights": all,
    }))
}

/// Decodes one batch and answers its jobs.
fn decode(t: &Translator, jobs: Vec<Job>, budget: Budget, metrics: &Metrics) {
    let srcs: Vec<Vec<u32>> = jobs.iter().flat_map(|j| j.srcs.iter().cloned()).collect();
    // Guides for every sentence when any job has some (the others ask nothing).
    let guides: Vec<Guide> = match jobs.iter().any(|j| !j.guides.is_empty()) {
        true => jobs
            .iter()
            .flat_map(|j| match j.guides.is_empty() {
                true => vec![Guide::default(); j.srcs.len()],
                false => j.guides.clone(),
            })
            .collect(),
        false => Vec::new(),
    };
    let opts = DecodeOptions {
        search: jobs[0].search,
        max_tokens: budget.max_tokens,
        max_sentences: budget.max_sentences,
        // The batcher's batch is decoded as one, its products split over the threads: what
        // bench/serve measured (the CLI's worker threads, one batch each, were measured on files).
        workers: 1,
        use_shortlist: jobs[0].use_shortlist,
    };
    let start = Instant::now();
    metrics.decoding.store(srcs.len() as u64, Ordering::Relaxed);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        t.translate_ids_guided(&srcs, &guides, &opts, &mut ())
    }));
    metrics.batch_seconds.observe(start.elapsed().as_secs_f64());
    metrics.decoding.store(0, Ordering::Relaxed);
    metrics.batches.fetch_add(1, Ordering::Relaxed);
    metrics.batch_sentences.observe(srcs.len() as f64);
    metrics.batch_tokens.observe(srcs.iter().map(Vec::len).sum::<usize>() as f64);
    let mut hyps = match result {
        Ok(Ok((hyps, _))) => hyps.into_iter(),
        Ok(Err(e)) => return fail(jobs, &format!("decoding failed: {e}")),
        Err(_) => return fail(jobs, "decoding failed (a panic in the batcher; see the server's log)"),
    };
    metrics.sentences.fetch_add(srcs.len() as u64, Ordering::Relaxed);
    for job in jobs {
        // This job's n-best lists, taken first, so that a panic below cannot shift the next
        // job's results.
        let mine: Vec<_> = hyps.by_ref().take(job.srcs.len()).collect();
        let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut outs = Vec::with_capacity(job.srcs.len());
            let mut error = None;
            for (src, nbest) in job.srcs.iter().zip(&mine) {
                let mut list = Vec::with_capacity(nbest.len());
                for h in nbest {
                    match t.text(h) {
                        Ok(text) => list.push((text, h.log_prob, h.score)),
                        Err(e) => error = Some(format!("cannot turn the output into text: {e}")),
                    }
                }
                let attention = match job.attention {
                    true => match attention_json(t, src, &nbest[0].tokens) {
                        Ok(a) => Some(a),
                        Err(e) => {
                            error = Some(format!("attention failed: {e}"));
                            None
                        }
                    },
                    false => None,
                };
                let alignment = job.alignment.and_then(|a| match t.align_hypothesis(src, &nbest[0], &a) {
                    Ok(al) => Some(al.format(a.kind)),
                    Err(e) => {
                        error = Some(format!("alignment failed: {e}"));
                        None
                    }
                });
                let capped =
                    job.search.stopped_by_positions(src.len(), nbest[0].tokens.len(), t.model().config.max_positions);
                outs.push(Output { nbest: list, attention, capped, alignment });
            }
            match error {
                Some(e) => Err(e),
                None => Ok(outs),
            }
        }))
        .unwrap_or_else(|_| Err("preparing the answer failed (a panic in the batcher; see the server's log)".into()));
        // A client that went away meanwhile is not an error.
        let _ = job.reply.send(answer);
    }
}

fn fail(jobs: Vec<Job>, message: &str) {
    eprintln!("error: {message}");
    for job in jobs {
        let _ = job.reply.send(Err(message.to_string()));
    }
}

/// The batcher's loop: runs on the calling thread until the queue is closed and empty.
pub fn run(t: &Translator, queue: &Queue, budget: Budget, metrics: &Metrics) {
    while let Some(jobs) = queue.next_batch(budget, metrics) {
        decode(t, jobs, budget, metrics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(lens: &[usize], beam: usize) -> (Job, oneshot::Receiver<Result<Vec<Output>, String>>) {
        let (tx, rx) = oneshot::channel();
        let search = BeamConfig { beam, ..BeamConfig::translation() };
        (
            Job {
                srcs: lens.iter().map(|&n| vec![5; n]).collect(),
                search,
                use_shortlist: false,
                guides: vec![],
                attention: false,
                alignment: None,
                reply: tx,
            },
            rx,
        )
    }

    #[test]
    fn batches_group_by_search_fit_the_budget_and_drop_gone_clients() {
        let q = Queue::new(100);
        let m = Metrics::default();
        let (a, _ra) = job(&[10, 20], 4);
        let (b, _rb) = job(&[5], 4);
        let (c, _rc) = job(&[5], 2);
        let (d, _rd) = job(&[30, 30], 4);
        let (e, _re) = job(&[1], 4);
        for j in [a, b, c, d, e] {
            q.push(j).unwrap();
        }
        assert_eq!(q.depth(), (7, 5));
        let budget = Budget { max_tokens: 100, max_sentences: 8 };
        // a and b (3 × 20 = 60 ≤ 100); c has another beam; d would make 5 × 30 = 150.
        let batch = q.next_batch(budget, &m).unwrap();
        assert_eq!(batch.iter().map(|j| j.srcs.len()).collect::<Vec<_>>(), [2, 1]);
        // c is now the oldest: it goes alone (nothing else has beam 2).
        let batch = q.next_batch(budget, &m).unwrap();
        assert_eq!((batch.len(), batch[0].search.beam), (1, 2));
        let batch = q.next_batch(budget, &m).unwrap();
        assert_eq!(batch.iter().map(|j| j.srcs.len()).collect::<Vec<_>>(), [2, 1]);
        assert_eq!(q.depth(), (0, 0));
        // A gone client's job is dropped, counted, and not returned.
        let (f, rf) = job(&[3], 4);
        q.push(f).unwrap();
        drop(rf);
        q.close();
        assert!(q.next_batch(budget, &m).is_none());
        assert_eq!(m.dropped.load(Ordering::Relaxed), 1);
        let (g, _rg) = job(&[3], 4);
        assert_eq!(q.push(g).unwrap_err(), Refused::Closed);
    }

    #[test]
    fn jobs_over_a_shortlist_and_over_the_whole_vocabulary_batch_apart() {
        let (q, m) = (Queue::new(100), Metrics::default());
        let budget = Budget { max_tokens: 100, max_sentences: 8 };
        let (a, _ra) = job(&[3], 4);
        let (mut b, _rb) = job(&[3], 4);
        b.use_shortlist = true;
        let (c, _rc) = job(&[3], 4);
        for j in [a, b, c] {
            q.push(j).unwrap();
        }
        let batch = q.next_batch(budget, &m).unwrap();
        assert_eq!(batch.iter().map(|j| j.use_shortlist).collect::<Vec<_>>(), [false, false]);
        let batch = q.next_batch(budget, &m).unwrap();
        assert_eq!(batch.iter().map(|j| j.use_shortlist).collect::<Vec<_>>(), [true]);
    }

    #[test]
    fn a_full_queue_refuses() {
        let q = Queue::new(3);
        let (a, _ra) = job(&[1, 1], 4);
        let (b, _rb) = job(&[1, 1], 4);
        q.push(a).unwrap();
        assert_eq!(q.push(b).unwrap_err(), Refused::Full { waiting: 2, limit: 3 });
    }
}
