//! §5.1 Batching: "sentence pairs were batched together by approximate sequence length". Pairs are
//! sorted by length and packed into batches under a source and a target token budget, both counted
//! with padding (sentences × longest), like fairseq's `--max-tokens`. The order of batches is
//! shuffled every epoch from the seed.

use crate::rng::Rng;

/// Token budgets of one batch (the paper: about 25,000 source and 25,000 target tokens per update,
/// reached on small machines by accumulating several batches).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BatchConfig {
    /// Source tokens per batch, padding included.
    pub max_src_tokens: usize,
    /// Target tokens per batch (decoder positions: tokens + 1), padding included.
    pub max_tgt_tokens: usize,
}

/// Packs pairs with lengths `(src, tgt)` into batches of indices. Within a batch sentences have
/// similar lengths; a pair that alone exceeds a budget gets a batch of its own (it is never cut).
/// Deterministic: ties are broken by index.
pub fn make_batches(lengths: &[(usize, usize)], cfg: &BatchConfig) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| (lengths[i].1, lengths[i].0, i));
    let mut batches = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let (mut max_s, mut max_t) = (0, 0);
    for i in order {
        let (s, t) = (lengths[i].0, lengths[i].1 + 1);
        let (ns, nt) = (max_s.max(s), max_t.max(t));
        let n = cur.len() + 1;
        if !cur.is_empty() && (n * ns > cfg.max_src_tokens || n * nt > cfg.max_tgt_tokens) {
            batches.push(std::mem::take(&mut cur));
            max_s = s;
            max_t = t;
        } else {
            max_s = ns;
            max_t = nt;
        }
        cur.push(i);
    }
    if !cur.is_empty() {
        batches.push(cur);
    }
    batches
}

/// [`make_batches`] over each round apart: `round[i]` is pair `i`'s round (an empty `round` puts
/// every pair in one). No batch mixes two rounds, so pairs set in different rounds (the copies of
/// an oversampled gold pair) never share one. The batches come round by round, in the rounds'
/// order; the epoch's shuffle mixes them.
pub fn make_batches_in_rounds(
    lengths: &[(usize, usize)],
    round: &[usize],
    cfg: &BatchConfig,
) -> crate::Result<Vec<Vec<usize>>> {
    if round.is_empty() {
        return Ok(make_batches(lengths, cfg));
    }
    if round.len() != lengths.len() {
        return Err(crate::Error::Input(format!(
            "{} rounds for {} pairs: give one round per pair",
            round.len(),
            lengths.len()
        )));
    }
    let mut members: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
    for (i, &r) in round.iter().enumerate() {
        members.entry(r).or_default().push(i);
    }
    if members.len() == 1 {
        return Ok(make_batches(lengths, cfg));
    }
    let mut batches = Vec::new();
    for members in members.values() {
        let sub: Vec<(usize, usize)> = members.iter().map(|&i| lengths[i]).collect();
        batches.extend(make_batches(&sub, cfg).into_iter().map(|b| b.into_iter().map(|j| members[j]).collect()));
    }
    Ok(batches)
}

/// The order in which epoch `epoch` visits `n` batches: a Fisher–Yates shuffle seeded by
/// (seed, epoch), the same on every run and every thread count.
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut rng = Rng::new(crate::rng::mix64(seed ^ 0xba7c_4e5d_0000_0000 ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}
