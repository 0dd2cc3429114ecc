//! Greedy decoding: at each step the most probable next token, until EOS or the length limit
//! (source length + `max_len_b`, §6.1: input length + 50).

use crate::error::Result;
use crate::model::{Batch, Transformer, Workspace};
use crate::{BOS, EOS, PAD, UNK};

/// A batch whose decoder input is `prefixes` (each starting with BOS). The targets are unused by
/// decoding; they are filled with a non-padding id so the batch is well-formed.
fn decoding_batch(srcs: &[&[u32]], prefixes: &[Vec<u32>]) -> Batch {
    let b = srcs.len();
    let s = srcs.iter().map(|x| x.len()).max().unwrap_or(0).max(1);
    let t = prefixes.iter().map(|x| x.len()).max().unwrap_or(1);
    let mut batch = Batch {
        b,
        s,
        t,
        src: vec![PAD; b * s],
        src_lens: srcs.iter().map(|x| x.len()).collect(),
        tgt_in: vec![PAD; b * t],
        tgt_out: vec![PAD; b * t],
        tgt_lens: prefixes.iter().map(|x| x.len()).collect(),
    };
    for i in 0..b {
        batch.src[i * s..i * s + srcs[i].len()].copy_from_slice(srcs[i]);
        batch.tgt_in[i * t..i * t + prefixes[i].len()].copy_from_slice(&prefixes[i]);
        batch.tgt_out[i * t..i * t + prefixes[i].len()].fill(UNK);
    }
    batch
}

/// Greedy translations of `srcs` (token ids without BOS/EOS), decoded together as one batch.
/// Outputs exclude BOS and EOS. A sentence stops at EOS or after `src_len + max_len_b` tokens,
/// or when the model's `max_positions` is reached.
pub fn greedy(model: &Transformer, srcs: &[&[u32]], max_len_b: usize, ws: &mut Workspace) -> Result<Vec<Vec<u32>>> {
    let v = model.config.vocab_size;
    let mut prefixes: Vec<Vec<u32>> = vec![vec![BOS]; srcs.len()];
    let mut done = vec![false; srcs.len()];
    let limit: Vec<usize> = srcs.iter().map(|s| (s.len() + max_len_b).min(model.config.max_positions - 1)).collect();
    while done.iter().any(|d| !d) {
        let batch = decoding_batch(srcs, &prefixes);
        model.forward(&batch, ws, None)?;
        for i in 0..srcs.len() {
            if done[i] {
                continue;
            }
            let pos = prefixes[i].len() - 1;
            let row = &ws.logits[(i * batch.t + pos) * v..(i * batch.t + pos + 1) * v];
            // Never emit padding or BOS.
            let next = row
                .iter()
                .enumerate()
                .skip(2)
                .fold((EOS as usize, f32::NEG_INFINITY), |b, (j, &x)| if x > b.1 { (j, x) } else { b })
                .0 as u32;
            if next == EOS || prefixes[i].len() > limit[i] {
                done[i] = true;
            } else {
                prefixes[i].push(next);
            }
        }
    }
    Ok(prefixes.into_iter().map(|p| p[1..].to_vec()).collect())
}
