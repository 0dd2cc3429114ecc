//! It learns: a reverse task trained from scratch reaches ≥ 99% held-out token accuracy.

use transformer::decode::{translate_batch, BeamConfig};
use transformer::rng::Rng;
use transformer::synthetic::{model_config, pairs, token_accuracy, SyntheticTask};
use transformer::train::{Schedule, Trainer};
use transformer::{Batch, Transformer, Workspace};

#[test]
fn reverse_task_reaches_99_percent() {
    let symbols = 20;
    let cfg = model_config(symbols);
    let mut trainer = Trainer::new(
        Transformer::new(cfg.clone(), 1).unwrap(),
        Schedule { d_model: 64, warmup: 400, lr_scale: 0.5 },
        1,
    );
    let mut rng = Rng::new(2);
    let mut last = 0.0;
    for _ in 0..2000 {
        let batch = Batch::from_pairs(&pairs(SyntheticTask::Reverse, &mut rng, 64, symbols, 4, 12));
        last = trainer.train_step(&[batch]).unwrap().loss;
    }
    // Held-out sentences from a different seed.
    let held_out = Batch::from_pairs(&pairs(SyntheticTask::Reverse, &mut Rng::new(99), 500, symbols, 4, 12));
    let (ok, total) = token_accuracy(trainer.logits(&held_out).unwrap(), &held_out, cfg.vocab_size);
    let acc = ok as f64 / total as f64;
    eprintln!("held-out token accuracy {:.2}% ({ok}/{total}), final training loss {last:.4}", acc * 100.0);
    assert!(acc >= 0.99, "held-out token accuracy {:.2}% (final training loss {last:.4})", acc * 100.0);

    // Greedy decoding from scratch (no teacher forcing) reproduces whole reversed sequences.
    let tests = pairs(SyntheticTask::Reverse, &mut Rng::new(77), 200, symbols, 4, 12);
    let srcs: Vec<&[u32]> = tests.iter().map(|p| p.0.as_slice()).collect();
    for (name, cfg) in [("greedy", BeamConfig::greedy()), ("beam 4", BeamConfig::translation())] {
        let out = translate_batch(trainer.model(), &srcs, &cfg, &mut Workspace::new()).unwrap();
        let exact = out.iter().zip(&tests).filter(|(o, p)| o[0].tokens == p.1).count();
        eprintln!("{name} exact match {exact}/200");
        assert!(exact >= 180, "{name} decoding reproduced only {exact}/200 reversed sequences");
    }
}
