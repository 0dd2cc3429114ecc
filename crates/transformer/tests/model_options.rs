//! The architecture options of imported models (`ModelConfig`: activation, output_bias,
//! source_vocab_size, sinusoid_layout, scale_embedding), each against a naive twin; the paper's
//! defaults stay the defaults. Together they are checked against `transformers` in tests/marian.rs.

mod common;

use common::{assert_close, packed_rows, to_f64};
use transformer::config::Preset;
use transformer::kernels::cpu::elementwise::{activation, bias_activation_forward};
use transformer::kernels::cpu::embedding::sinusoid_table;
use transformer::kernels::reference;
use transformer::rng::Rng;
use transformer::{Activation, Batch, ImportOptions, ModelConfig, SinusoidLayout, Transformer, Workspace};

const ACTIVATIONS: [Activation; 5] =
    [Activation::Relu, Activation::Swish, Activation::Gelu, Activation::GeluTanh, Activation::GeluSigmoid];

#[test]
fn the_papers_defaults_stay_the_defaults() {
    for p in Preset::ALL {
        let c = p.config();
        assert_eq!(c.import.activation, Activation::Relu);
        assert!(!c.import.output_bias && c.import.scale_embedding && c.import.source_vocab_size.is_none());
        assert_eq!(c.import.sinusoid_layout, SinusoidLayout::Interleaved);
        assert!(c.departures().is_empty(), "{}: {:?}", p.name(), c.departures());
    }
    // A configuration written before the options existed reads with the paper's values.
    let mut json = serde_json::to_value(ModelConfig::base()).unwrap();
    for k in ["activation", "output_bias", "source_vocab_size", "sinusoid_layout", "scale_embedding"] {
        json.as_object_mut().unwrap().remove(k);
    }
    assert_eq!(serde_json::from_value::<ModelConfig>(json).unwrap(), ModelConfig::base());
}

#[test]
fn activations_match_their_definitions() {
    // Both tails, the bend near zero, and exact zeros.
    let xs: Vec<f32> = (-400..=400).map(|i| i as f32 * 0.025).chain([-30.0, -12.5, 0.0, 12.5, 30.0]).collect();
    for act in ACTIVATIONS {
        let want = reference::activation_forward(&to_f64(&xs), act);
        let got: Vec<f64> = xs.iter().map(|&x| activation(x, act) as f64).collect();
        assert_close(&format!("{act:?}"), &got, &want, 1e-7, 1e-6);
        // The fused kernel adds the bias first, row by row.
        let bias = [0.5f32, -0.25, 1.0];
        let mut h: Vec<f32> = xs[..300].to_vec();
        bias_activation_forward(&mut h, &bias, act);
        let shifted: Vec<f64> = xs[..300].iter().enumerate().map(|(i, &x)| (x + bias[i % 3]) as f64).collect();
        assert_close(
            &format!("{act:?} + bias"),
            &to_f64(&h),
            &reference::activation_forward(&shifted, act),
            1e-7,
            1e-6,
        );
    }
    // GELU is not its tanh approximation, and swish is not ReLU: the options differ.
    assert!((activation(-1.0, Activation::Gelu) - activation(-1.0, Activation::GeluTanh)).abs() > 1e-5);
    assert!((activation(-1.0, Activation::Gelu) - activation(-1.0, Activation::GeluSigmoid)).abs() > 1e-3);
    assert!(activation(-1.0, Activation::Swish) < -0.26);
}

#[test]
fn sinusoid_layouts_match_their_definitions() {
    for layout in [SinusoidLayout::Interleaved, SinusoidLayout::Halves, SinusoidLayout::Marian] {
        let got = sinusoid_table(64, 16, layout);
        assert_close(&format!("{layout:?}"), &to_f64(&got), &reference::sinusoids(64, 16, layout), 1e-6, 0.0);
    }
    // The halves layout is the interleaved one with its columns regrouped.
    let (i, h) = (sinusoid_table(9, 8, SinusoidLayout::Interleaved), sinusoid_table(9, 8, SinusoidLayout::Halves));
    for pos in 0..9 {
        for k in 0..4 {
            assert_eq!((i[pos * 8 + 2 * k], i[pos * 8 + 2 * k + 1]), (h[pos * 8 + k], h[pos * 8 + 4 + k]));
        }
    }
    // Marian's frequencies are tensor2tensor's: the last sine has period 2π·10000.
    let m = reference::sinusoids(2, 8, SinusoidLayout::Marian);
    assert!((m[8 + 3] - (1.0f64 / 10000.0).sin()).abs() < 1e-15);
}

fn tiny(c: ModelConfig) -> ModelConfig {
    ModelConfig {
        n_layers: 2,
        d_model: 16,
        d_ff: 24,
        n_heads: 2,
        d_k: 8,
        d_v: 8,
        dropout: 0.0,
        attention_dropout: 0.0,
        max_positions: 32,
        vocab_size: 29,
        ..c
    }
}

fn random_model(c: ModelConfig, seed: u64) -> Transformer {
    let mut m = Transformer::new(c, seed).unwrap();
    let mut rng = Rng::new(seed);
    for p in &mut m.params {
        *p += ((rng.uniform() * 2.0 - 1.0) * 0.2) as f32;
    }
    m
}

fn batch() -> Batch {
    Batch::from_pairs(&[(vec![5, 9, 17, 4], vec![6, 7, 8]), (vec![12, 20], vec![9, 10, 11, 12, 13])])
}

/// The encoder's input against the naive embedding with the model's table, scale and position
/// layout, at the valid positions.
fn check_encoder_input(m: &Transformer, table: &[f32], scale: f64) {
    let c = &m.config;
    let b = Batch::from_pairs(&[(vec![12, 20], vec![9, 10, 11, 12, 13]), (vec![5, 9, 17, 4], vec![6, 7, 8])]);
    let mut ws = Workspace::new();
    m.forward(&b, &mut ws, None).unwrap();
    let pos = reference::sinusoids(c.max_positions, c.d_model, c.import.sinusoid_layout);
    let want = reference::embedding_forward(&b.src, &to_f64(table), &pos, b.s, c.d_model, scale, None);
    // After the forward pass `enc_in` holds the valid positions packed (the short sentence
    // first, so its rows have moved): compare those.
    let want = packed_rows(&want, &b.src_lens, b.s, c.d_model);
    assert_eq!(ws.src_rows.last(), Some(&(want.len() / c.d_model)));
    assert_close(&format!("{:?}", c.departures()), &to_f64(&ws.enc_in[..want.len()]), &want, 1e-5, 1e-5);
}

#[test]
fn embedding_options_match_the_naive_embedding() {
    let base = tiny(ModelConfig::base());
    for c in [
        base.clone(),
        ModelConfig { import: ImportOptions { scale_embedding: false, ..base.import }, ..base.clone() },
        ModelConfig {
            import: ImportOptions { sinusoid_layout: SinusoidLayout::Halves, ..base.import },
            ..base.clone()
        },
        ModelConfig {
            import: ImportOptions { sinusoid_layout: SinusoidLayout::Marian, ..base.import },
            ..base.clone()
        },
        ModelConfig { import: ImportOptions { source_vocab_size: Some(41), ..base.import }, ..base.clone() },
    ] {
        let m = random_model(c.clone(), 3);
        let name = if c.import.source_vocab_size.is_some() { "encoder.embed.weight" } else { "embed.weight" };
        let table = &m.params[m.layout.get(name).unwrap().range()];
        let scale = if c.import.scale_embedding { (c.d_model as f64).sqrt() } else { 1.0 };
        check_encoder_input(&m, table, scale);
    }
}

#[test]
fn a_separate_source_vocabulary_has_its_own_ids_and_rows() {
    let c = ModelConfig {
        import: ImportOptions { source_vocab_size: Some(41), ..ImportOptions::default() },
        ..tiny(ModelConfig::base())
    };
    let m = random_model(c.clone(), 4);
    // Source ids up to 40 are valid, target ids stay below 29.
    let ok = Batch::from_pairs(&[(vec![40, 30], vec![28])]);
    m.forward(&ok, &mut Workspace::new(), None).unwrap();
    let bad = Batch::from_pairs(&[(vec![41], vec![5])]);
    assert!(m.forward(&bad, &mut Workspace::new(), None).unwrap_err().to_string().contains("source vocabulary of 41"));
    let bad = Batch::from_pairs(&[(vec![5], vec![30])]);
    assert!(m.forward(&bad, &mut Workspace::new(), None).is_err());
    // The target embedding does not reach the encoder.
    let mut other = m.clone();
    for v in &mut other.params[m.layout.get("embed.weight").unwrap().range()] {
        *v += 1.0;
    }
    let (mut a, mut b) = (Workspace::new(), Workspace::new());
    m.forward(&batch(), &mut a, None).unwrap();
    other.forward(&batch(), &mut b, None).unwrap();
    assert_eq!(m.encoder_output(&a), other.encoder_output(&b));
}

#[test]
fn the_output_bias_is_added_to_every_row() {
    let c = ModelConfig {
        import: ImportOptions { output_bias: true, ..ImportOptions::default() },
        ..tiny(ModelConfig::base())
    };
    let m = random_model(c.clone(), 5);
    let mut zero = m.clone();
    let range = m.layout.get("output.bias").unwrap().range();
    zero.params[range.clone()].fill(0.0);
    let (mut a, mut b) = (Workspace::new(), Workspace::new());
    m.forward(&batch(), &mut a, None).unwrap();
    zero.forward(&batch(), &mut b, None).unwrap();
    let bias = &m.params[range];
    let want: Vec<f64> =
        b.logits.chunks(c.vocab_size).flat_map(|r| r.iter().zip(bias).map(|(x, y)| (x + y) as f64)).collect();
    assert_close("logits + bias", &to_f64(&a.logits), &want, 1e-5, 1e-6);
}

/// Every imported architecture option trains (their gradients: tests/gradcheck.rs and
/// tests/properties.rs): a trainer takes a model with each activation, an output bias, a source
/// vocabulary of its own and Marian's sinusoids, and 30 updates on one batch lower its loss.
#[test]
fn every_imported_option_trains() {
    use transformer::train::schedule::Schedule;
    use transformer::train::trainer::Trainer;
    for act in ACTIVATIONS {
        let c = tiny(ModelConfig {
            import: ImportOptions {
                activation: act,
                output_bias: true,
                source_vocab_size: Some(23),
                sinusoid_layout: SinusoidLayout::Marian,
                ..ImportOptions::default()
            },
            ..ModelConfig::base()
        });
        let model = Transformer::new(c, 5).unwrap();
        let mut t = Trainer::new(model, Schedule { d_model: 16, warmup: 10, lr_scale: 0.5 }, 5).unwrap();
        let first = t.train_step(&[batch()]).unwrap().loss;
        let last = (0..29).map(|_| t.train_step(&[batch()]).unwrap().loss).last().unwrap();
        assert!(last < 0.5 * first, "{act:?}: loss {first} → {last}");
    }
}
