//! Guided alignment training on a model (model/guided.rs): the backward pass's gradient of the
//! guided loss equals central differences of that loss through the whole model (f32, the
//! parameters it moves most and some at random), reaches only what feeds the supervised head,
//! and a few hundred updates make that head's attention follow the guide.

use transformer::model::{Batch, Transformer, Workspace};
use transformer::rng::Rng;
use transformer::synthetic::{model_config, pairs, SyntheticTask};

/// A guide that aligns target token t to source token (t + 1) mod |source| (not the copy's own
/// diagonal), the EOS row unaligned.
fn shifted_guide(batch: &Batch) -> Vec<f32> {
    let (t, s) = (batch.t, batch.s);
    let mut g = vec![0f32; batch.b * t * s];
    for b in 0..batch.b {
        let (n, m) = (batch.src_lens[b], batch.tgt_lens[b] - 1);
        for i in 0..m {
            g[(b * t + i) * s + (i + 1) % n] = 1.0;
        }
    }
    g
}

fn guided_loss(model: &Transformer, batch: &Batch, ws: &mut Workspace, layer: usize) -> f64 {
    model.forward(batch, ws, None).unwrap();
    model.guided_alignment_loss(batch, ws, 0.5, layer, 1, 1.0).unwrap()
}

#[test]
fn the_guided_gradient_equals_central_differences() {
    let mut rng = Rng::new(5);
    let mut c = model_config(12);
    c.d_model = 16;
    c.d_ff = 32;
    c.n_heads = 2;
    c.d_k = 8;
    c.d_v = 8;
    let mut model = Transformer::new(c, 3).unwrap();
    let mut batch = Batch::from_pairs(&pairs(SyntheticTask::Copy, &mut rng, 3, 12, 2, 6));
    batch.guide = shifted_guide(&batch);
    let mut ws = Workspace::new();
    let layer = 1;
    // The guided loss alone: the cross-entropy's gradient is the difference of two backward passes.
    let grads_of = |model: &Transformer, ws: &mut Workspace, guided: bool| {
        let mut g = vec![0f32; model.params.len()];
        model.forward(&batch, ws, None).unwrap();
        model.loss(&batch, ws, 0.0, 1.0).unwrap();
        if guided {
            model.guided_alignment_loss(&batch, ws, 0.5, layer, 1, 1.0).unwrap();
        }
        model.backward(&batch, ws, None, &mut g).unwrap();
        g
    };
    let (with, without) = (grads_of(&model, &mut ws, true), grads_of(&model, &mut ws, false));
    let analytic: Vec<f64> = with.iter().zip(&without).map(|(a, b)| (*a - *b) as f64).collect();
    let mut order: Vec<usize> = (0..analytic.len()).collect();
    order.sort_by(|&a, &b| analytic[b].abs().total_cmp(&analytic[a].abs()));
    let mut picks: Vec<usize> = order[..24].to_vec();
    picks.extend((0..16).map(|_| (rng.uniform() * analytic.len() as f64) as usize));
    let h = 3e-3f32;
    for &i in &picks {
        let x = model.params[i];
        model.params[i] = x + h;
        let up = guided_loss(&model, &batch, &mut ws, layer);
        model.params[i] = x - h;
        let down = guided_loss(&model, &batch, &mut ws, layer);
        model.params[i] = x;
        let numeric = (up - down) / (2.0 * h as f64);
        let err = (numeric - analytic[i]).abs();
        assert!(err < 1e-3 + 1e-2 * analytic[i].abs(), "parameter {i}: analytic {} numeric {numeric}", analytic[i]);
    }
    assert!(analytic[order[0]].abs() > 1e-2, "the guided loss moves nothing");
}

#[test]
fn training_makes_the_head_follow_the_guide() {
    let mut rng = Rng::new(9);
    let mut trainer = transformer::synthetic::trainer(4).unwrap();
    let layer = trainer.model().config.n_layers - 1;
    let share = |trainer: &mut transformer::train::trainer::Trainer, rng: &mut Rng| {
        let mut b = Batch::from_pairs(&pairs(SyntheticTask::Copy, rng, 16, 12, 3, 8));
        b.guide = shifted_guide(&b);
        let mut ws = Workspace::new();
        trainer.model().forward(&b, &mut ws, None).unwrap();
        let (t, s, heads) = (b.t, b.s, trainer.model().config.n_heads);
        let probs = &ws.dec[layer].cross_attn.probs;
        let (mut on, mut rows) = (0.0, 0.0);
        for bi in 0..b.b {
            for i in 0..b.tgt_lens[bi] - 1 {
                let j = (i + 1) % b.src_lens[bi];
                on += probs[((bi * heads) * t + i) * s + j] as f64;
                rows += 1.0;
            }
        }
        on / rows
    };
    let before = share(&mut trainer, &mut rng);
    trainer.set_guided(Some(transformer::train::trainer::Guided { weight: 1.0, layer, head: 0 }));
    for _ in 0..400 {
        let mut b = Batch::from_pairs(&pairs(SyntheticTask::Copy, &mut rng, 16, 12, 3, 8));
        b.guide = shifted_guide(&b);
        trainer.train_step(&[b]).unwrap();
    }
    let after = share(&mut trainer, &mut rng);
    assert!(after > 0.8 && after > before + 0.4, "head 1's weight on the guided source went {before:.3} → {after:.3}");
}
