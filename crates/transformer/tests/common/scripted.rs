//! A scripted [`Scorer`] for search tests: next-token probabilities from a table of (sentence,
//! prefix), so that every hypothesis and score can be computed by hand.

use transformer::decode::{beam_search, BeamConfig, Hypothesis, Scorer, StepScores};
use transformer::rng::Rng;
use transformer::{BOS, EOS};

pub const V: usize = 7;
pub const A: u32 = 4;
pub const B: u32 = 5;

pub type Table = dyn Fn(usize, &[u32]) -> [f64; V];

/// Rows are (sentence, prefix); `table(sentence, prefix)` gives next-token probabilities. The
/// search tells the scorer which rows it keeps (`reorder`), and the next `step` feeds the token each
/// kept row was extended by, which is appended to that row's prefix.
pub struct Scripted<'t> {
    table: &'t Table,
    rows: Vec<(usize, Vec<u32>)>,
    pending: Option<Vec<usize>>,
    out: Vec<f32>,
    norms: Vec<f32>,
    /// Row r's scores are log p + shift·(r + 1), with that as its normaliser.
    pub shift: f32,
    /// Rows fed, summed over steps.
    pub rows_fed: usize,
}

impl<'t> Scripted<'t> {
    pub fn new(table: &'t Table, sentences: &[usize]) -> Self {
        Scripted {
            table,
            rows: sentences.iter().map(|&s| (s, Vec::new())).collect(),
            pending: None,
            out: Vec::new(),
            norms: Vec::new(),
            shift: 0.0,
            rows_fed: 0,
        }
    }
}

impl Scorer for Scripted<'_> {
    fn vocab(&self) -> usize {
        V
    }
    fn step(&mut self, tokens: &[u32]) -> transformer::Result<StepScores<'_>> {
        match self.pending.take() {
            None => assert!(tokens.iter().all(|&t| t == BOS), "the first step must feed BOS"),
            Some(keep) => {
                assert_eq!(keep.len(), tokens.len());
                self.rows = keep
                    .iter()
                    .zip(tokens)
                    .map(|(&r, &t)| {
                        assert!(t != EOS && t != BOS, "a finished or BOS token was fed back");
                        let (s, mut p) = self.rows[r].clone();
                        p.push(t);
                        (s, p)
                    })
                    .collect();
            }
        }
        self.rows_fed += tokens.len();
        self.out.clear();
        self.norms.clear();
        for (r, (sent, prefix)) in self.rows.iter().enumerate() {
            let c = self.shift * (r + 1) as f32;
            self.out.extend((self.table)(*sent, prefix).iter().map(|&x| x.ln() as f32 + c));
            self.norms.push(c);
        }
        Ok(StepScores { scores: &self.out, log_norms: &self.norms })
    }
    fn reorder(&mut self, keep: &[usize]) -> transformer::Result<()> {
        self.pending = Some(keep.to_vec());
        Ok(())
    }
}

pub fn search(table: &Table, sentences: &[usize], src_lens: &[usize], cfg: BeamConfig) -> Vec<Vec<Hypothesis>> {
    let mut s = Scripted::new(table, sentences);
    beam_search(&mut s, src_lens, &cfg, usize::MAX).unwrap()
}

pub fn probs(entries: &[(u32, f64)]) -> [f64; V] {
    let mut p = [0.0; V];
    for &(t, x) in entries {
        p[t as usize] = x;
    }
    p
}

/// Deterministic pseudo-random next-token distribution of (sentence, prefix), with some mass on
/// PAD and BOS, which the search must never choose.
pub fn random_table(sent: usize, prefix: &[u32]) -> [f64; V] {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ (sent as u64 * 1_000_003);
    for &t in prefix {
        h = (h ^ t as u64).wrapping_mul(0x0100_0000_01b3).rotate_left(17);
    }
    let mut rng = Rng::new(h);
    let mut p = [0.0; V];
    for x in p.iter_mut() {
        *x = 0.05 + rng.uniform();
    }
    let z: f64 = p.iter().sum();
    p.map(|x| x / z)
}

/// The GNMT length penalty ((5 + len) / 6)^α.
pub fn lp(len: usize, alpha: f64) -> f64 {
    ((5.0 + len as f64) / 6.0).powf(alpha)
}

/// Every output of up to `max_len` tokens (ids 3..V, never PAD, BOS or EOS inside), scored.
pub fn exhaustive(sent: usize, max_len: usize, alpha: f64) -> Vec<(Vec<u32>, f64)> {
    let mut out = Vec::new();
    let mut stack = vec![(Vec::<u32>::new(), 0.0f64)];
    while let Some((prefix, logp)) = stack.pop() {
        let p = random_table(sent, &prefix);
        let total = logp + p[EOS as usize].ln() as f32 as f64;
        out.push((prefix.clone(), total / lp(prefix.len() + 1, alpha)));
        if prefix.len() < max_len {
            for t in 3..V as u32 {
                if t != EOS {
                    let mut q = prefix.clone();
                    q.push(t);
                    stack.push((q, logp + p[t as usize].ln() as f32 as f64));
                }
            }
        }
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}
