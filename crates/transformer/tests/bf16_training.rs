//! Training with bf16 matrix products (`train.bf16_matmul`, the `bf16-matmul` departure) learns the
//! reverse task as f32 training does; and the precision is a property of each model, not of the
//! process: an f32 and a bf16 model trained at the same time, on two threads, give exactly what
//! each gives alone.

use transformer::kernels::cpu::bf16;
use transformer::rng::Rng;
use transformer::synthetic::{model_config, pairs, token_accuracy, SyntheticTask};
use transformer::train::{Schedule, Trainer};
use transformer::{Batch, Precision, Transformer};

#[test]
fn bf16_products_train_the_reverse_task() {
    if let Err(why) = bf16::available() {
        eprintln!("no bf16 unit here ({why}); checking that a bf16 model cannot be built");
        assert!(Transformer::new(model_config(20), 1).unwrap().with_precision(Precision::Bf16).is_err());
        return;
    }
    eprintln!("bf16 products on {:?}", bf16::unit().unwrap());
    let symbols = 20;
    let cfg = model_config(symbols);
    let new_trainer = |p: Precision| {
        let model = Transformer::new(cfg.clone(), 1).unwrap().with_precision(p).unwrap();
        Trainer::new(model, Schedule { d_model: 64, warmup: 400, lr_scale: 0.5 }, 1).unwrap()
    };
    // One step from the same start: the two losses agree to bf16's precision, and differ (the
    // switch takes effect).
    let mut rng = Rng::new(2);
    let first = Batch::from_pairs(&pairs(SyntheticTask::Reverse, &mut rng, 64, symbols, 4, 12));
    let f32_loss = new_trainer(Precision::F32).train_step(std::slice::from_ref(&first)).unwrap().loss;
    let mut trainer = new_trainer(Precision::Bf16);
    assert_eq!(trainer.model().precision(), Precision::Bf16);
    let bf16_loss = trainer.train_step(std::slice::from_ref(&first)).unwrap().loss;
    eprintln!("first-step loss: f32 {f32_loss:.6}, bf16 {bf16_loss:.6}");
    assert!((bf16_loss - f32_loss).abs() <= 1e-2 * f32_loss.abs(), "f32 {f32_loss} vs bf16 {bf16_loss}");
    assert_ne!(bf16_loss, f32_loss, "bf16 products gave exactly the f32 loss: the precision did nothing");

    let mut last = 0.0;
    for _ in 1..2000 {
        let batch = Batch::from_pairs(&pairs(SyntheticTask::Reverse, &mut rng, 64, symbols, 4, 12));
        last = trainer.train_step(&[batch]).unwrap().loss;
    }
    let held_out = Batch::from_pairs(&pairs(SyntheticTask::Reverse, &mut Rng::new(99), 500, symbols, 4, 12));
    let (ok, total) = token_accuracy(trainer.logits(&held_out).unwrap(), &held_out, cfg.vocab_size).unwrap();
    let acc = ok as f64 / total as f64;
    eprintln!("bf16 products: held-out token accuracy {:.2}% ({ok}/{total}), final loss {last:.4}", acc * 100.0);
    assert!(acc >= 0.99, "held-out token accuracy {:.2}% (final training loss {last:.4})", acc * 100.0);
}

/// Losses of 30 updates of the reverse task at `p`, and the final parameters.
fn train_30(p: Precision) -> (Vec<f64>, Vec<f32>) {
    let cfg = model_config(20);
    let model = Transformer::new(cfg, 5).unwrap().with_precision(p).unwrap();
    let mut trainer = Trainer::new(model, Schedule { d_model: 64, warmup: 100, lr_scale: 0.5 }, 5).unwrap();
    let mut rng = Rng::new(6);
    let losses = (0..30)
        .map(|_| {
            let batch = Batch::from_pairs(&pairs(SyntheticTask::Reverse, &mut rng, 32, 20, 4, 12));
            trainer.train_step(&[batch]).unwrap().loss
        })
        .collect();
    (losses, trainer.model().params.clone())
}

#[test]
fn f32_and_bf16_models_train_side_by_side_as_alone() {
    let precisions: Vec<Precision> = Precision::TRAINING.into_iter().filter(|p| p.available().is_ok()).collect();
    if precisions.len() < 2 {
        eprintln!("no bf16 unit here: only f32 can run; checking two f32 models side by side");
    }
    let runs: Vec<Precision> = if precisions.len() < 2 { vec![Precision::F32; 2] } else { precisions };
    // Alone, one after the other.
    let alone: Vec<_> = runs.iter().map(|&p| train_30(p)).collect();
    // At the same time, on two threads.
    let together: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = runs.iter().map(|&p| s.spawn(move || train_30(p))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for ((p, a), t) in runs.iter().zip(&alone).zip(&together) {
        assert_eq!(a.0, t.0, "{p}: losses differ when trained beside another model");
        assert!(a.1 == t.1, "{p}: parameters differ when trained beside another model");
    }
    if runs[0] != runs[1] {
        assert_ne!(alone[0].0, alone[1].0, "f32 and bf16 gave the same losses: the precision did nothing");
    }
}
