//! Training with bf16 matrix products (`train.bf16_matmul`, the `bf16-matmul` departure) learns the
//! reverse task as f32 training does. A test binary of its own: the switch is process-wide.

use transformer::kernels::cpu::{bf16, matmul};
use transformer::rng::Rng;
use transformer::synthetic::{model_config, pairs, token_accuracy, Task};
use transformer::train::{Schedule, Trainer};
use transformer::{Batch, Transformer};

#[test]
fn bf16_products_train_the_reverse_task() {
    if let Err(why) = bf16::available() {
        eprintln!("no bf16 unit here ({why}); checking that bf16 cannot be switched on");
        assert!(matmul::set_bf16(true).is_err());
        assert!(!matmul::bf16_enabled());
        return;
    }
    eprintln!("bf16 products on {:?}", bf16::unit().unwrap());
    let symbols = 20;
    let cfg = model_config(symbols);
    let new_trainer = || {
        Trainer::new(Transformer::new(cfg.clone(), 1).unwrap(), Schedule { d_model: 64, warmup: 400, lr_scale: 0.5 }, 1)
    };
    // One step from the same start: the two losses agree to bf16's precision, and differ (the
    // switch takes effect).
    let mut rng = Rng::new(2);
    let first = Batch::from_pairs(&pairs(Task::Reverse, &mut rng, 64, symbols, 4, 12));
    let f32_loss = new_trainer().train_step(std::slice::from_ref(&first)).unwrap().loss;
    matmul::set_bf16(true).unwrap();
    assert!(matmul::bf16_enabled());
    let mut trainer = new_trainer();
    let bf16_loss = trainer.train_step(std::slice::from_ref(&first)).unwrap().loss;
    eprintln!("first-step loss: f32 {f32_loss:.6}, bf16 {bf16_loss:.6}");
    assert!((bf16_loss - f32_loss).abs() <= 1e-2 * f32_loss.abs(), "f32 {f32_loss} vs bf16 {bf16_loss}");
    assert_ne!(bf16_loss, f32_loss, "bf16 products gave exactly the f32 loss: the switch did nothing");

    let mut last = 0.0;
    for _ in 1..2000 {
        let batch = Batch::from_pairs(&pairs(Task::Reverse, &mut rng, 64, symbols, 4, 12));
        last = trainer.train_step(&[batch]).unwrap().loss;
    }
    let held_out = Batch::from_pairs(&pairs(Task::Reverse, &mut Rng::new(99), 500, symbols, 4, 12));
    let (ok, total) = token_accuracy(trainer.logits(&held_out).unwrap(), &held_out, cfg.vocab_size);
    let acc = ok as f64 / total as f64;
    eprintln!("bf16 products: held-out token accuracy {:.2}% ({ok}/{total}), final loss {last:.4}", acc * 100.0);
    assert!(acc >= 0.99, "held-out token accuracy {:.2}% (final training loss {last:.4})", acc * 100.0);
    matmul::set_bf16(false).unwrap();
    assert!(!matmul::bf16_enabled());
}
