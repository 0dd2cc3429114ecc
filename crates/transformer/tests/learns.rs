//! It learns: a reverse task trained from scratch reaches ≥ 99% held-out token accuracy.

mod common;

use common::translate_batch;
use transformer::decode::BeamConfig;
use transformer::rng::Rng;
use transformer::synthetic::{self, pairs, SyntheticTask};
use transformer::Workspace;

#[test]
fn reverse_task_reaches_99_percent() {
    let mut trainer = synthetic::trainer(1).unwrap();
    let mut rng = Rng::new(2);
    let mut last = 0.0;
    for _ in 0..2000 {
        let batch = synthetic::batch(SyntheticTask::Reverse, &mut rng, synthetic::BATCH);
        last = trainer.train_step(&[batch]).unwrap().loss;
    }
    // Held-out sentences from a different seed.
    let held_out = synthetic::batch(SyntheticTask::Reverse, &mut Rng::new(99), synthetic::HELD_OUT);
    let vocab = trainer.model().config.vocab_size;
    let (ok, total) = synthetic::token_accuracy(trainer.logits(&held_out).unwrap(), &held_out, vocab).unwrap();
    let acc = ok as f64 / total as f64;
    eprintln!("held-out token accuracy {:.2}% ({ok}/{total}), final training loss {last:.4}", acc * 100.0);
    assert!(acc >= 0.99, "held-out token accuracy {:.2}% (final training loss {last:.4})", acc * 100.0);

    // Greedy decoding from scratch (no teacher forcing) reproduces whole reversed sequences.
    let tests = pairs(
        SyntheticTask::Reverse,
        &mut Rng::new(77),
        200,
        synthetic::SYMBOLS,
        synthetic::MIN_LEN,
        synthetic::MAX_LEN,
    );
    let srcs: Vec<&[u32]> = tests.iter().map(|p| p.0.as_slice()).collect();
    for (name, cfg) in [("greedy", BeamConfig::greedy()), ("beam 4", BeamConfig::translation())] {
        let out = translate_batch(trainer.model(), &srcs, &cfg, &mut Workspace::new()).unwrap();
        let exact = out.iter().zip(&tests).filter(|(o, p)| o[0].tokens == p.1).count();
        eprintln!("{name} exact match {exact}/200");
        assert!(exact >= 180, "{name} decoding reproduced only {exact}/200 reversed sequences");
    }
}
