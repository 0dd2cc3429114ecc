//! Model-level properties: padding changes nothing, backward twice doubles the gradients, ε_ls = 0
//! gives the NLL, a padded batch's loss is the sum of its sentences' losses, dropout is wired the
//! same way in the backward as in the forward, and runs are deterministic.

mod common;
use common::*;
use transformer::rng::Rng;
use transformer::synthetic::{pairs, SyntheticTask};
use transformer::{
    Batch, DropoutCtx, ImportOptions, ModelConfig, ParsingInputs, Positions, Transformer, Workspace, PAD,
};

fn tiny(dropout: f32, attention_dropout: f32, label_smoothing: f32, positions: Positions) -> ModelConfig {
    ModelConfig {
        n_layers: 2,
        d_model: 20,
        d_ff: 36,
        n_heads: 2,
        d_k: 6,
        d_v: 7,
        dropout,
        attention_dropout,
        label_smoothing,
        positions,
        max_positions: 32,
        vocab_size: 30,
        layer_norm_eps: 1e-6,
        ..transformer::ModelConfig::base()
    }
}

fn sample_pairs(seed: u64, n: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    pairs(SyntheticTask::Reverse, &mut Rng::new(seed), n, 26, 1, 9)
}

/// (loss sums, gradients) of one batch.
fn loss_and_grads(
    model: &Transformer,
    batch: &Batch,
    ctx: Option<DropoutCtx>,
) -> (transformer::model::LossSums, Vec<f32>) {
    let mut ws = Workspace::new();
    model.forward(batch, &mut ws, ctx).unwrap();
    let sums = model.loss(batch, &mut ws, model.config.label_smoothing, 1.0).unwrap();
    let mut g = vec![0f32; model.params.len()];
    model.backward(batch, &mut ws, ctx, &mut g).unwrap();
    (sums, g)
}

/// The same batch with `extra` more padding positions on both sides.
fn pad_more(b: &Batch, extra: usize) -> Batch {
    let (s2, t2) = (b.s + extra, b.t + extra);
    let mut out = Batch {
        b: b.b,
        s: s2,
        t: t2,
        src: vec![PAD; b.b * s2],
        src_lens: b.src_lens.clone(),
        tgt_in: vec![PAD; b.b * t2],
        tgt_out: vec![PAD; b.b * t2],
        tgt_lens: b.tgt_lens.clone(),
        src_drop: Vec::new(),
        guide: Vec::new(),
    };
    for i in 0..b.b {
        out.src[i * s2..i * s2 + b.s].copy_from_slice(&b.src[i * b.s..(i + 1) * b.s]);
        out.tgt_in[i * t2..i * t2 + b.t].copy_from_slice(&b.tgt_in[i * b.t..(i + 1) * b.t]);
        out.tgt_out[i * t2..i * t2 + b.t].copy_from_slice(&b.tgt_out[i * b.t..(i + 1) * b.t]);
    }
    out
}

#[test]
fn padding_changes_nothing() {
    for pos in [Positions::Sinusoidal, Positions::Learned] {
        let model = Transformer::new(tiny(0.0, 0.0, 0.1, pos), 3).unwrap();
        let batch = Batch::from_pairs(&sample_pairs(1, 5));
        let (a, ga) = loss_and_grads(&model, &batch, None);
        let (b, gb) = loss_and_grads(&model, &pad_more(&batch, 4), None);
        assert_eq!(a.tokens, b.tokens);
        assert_close("loss", &[b.loss], &[a.loss], 1e-5, 1e-6);
        assert_close("grads", &to_f64(&gb), &to_f64(&ga), 1e-6, 1e-5);
    }
}

#[test]
fn backward_twice_doubles_gradients() {
    let model = Transformer::new(tiny(0.1, 0.1, 0.1, Positions::Learned), 4).unwrap();
    let batch = Batch::from_pairs(&sample_pairs(2, 4));
    let ctx = Some(DropoutCtx { seed: 5, counter: 9 });
    let mut ws = Workspace::new();
    let mut g = vec![0f32; model.params.len()];
    model.forward(&batch, &mut ws, ctx).unwrap();
    model.loss(&batch, &mut ws, 0.1, 1.0).unwrap();
    model.backward(&batch, &mut ws, ctx, &mut g).unwrap();
    let once = g.clone();
    model.forward(&batch, &mut ws, ctx).unwrap();
    model.loss(&batch, &mut ws, 0.1, 1.0).unwrap();
    model.backward(&batch, &mut ws, ctx, &mut g).unwrap();
    // Parameter gradients accumulate and activations are recomputed identically (no tensor differs
    // between two passes into zeroed buffers). What remains is accumulation order: the second pass
    // adds each row's contribution onto G, (G + r1) + r2 + ..., rather than G + (r1 + r2 + ...), so
    // rounding is relative to a tensor's largest entries, not to each (possibly cancelling) element.
    // The key biases' exact gradient is 0 (a softmax ignores a shift shared by all keys), so their
    // entries are pure rounding noise: a floor of 1e-7 of the model's largest gradient covers them.
    let global = once.iter().fold(0f64, |a, &b| a.max(2.0 * b.abs() as f64));
    for e in model.layout.entries() {
        let twice: Vec<f64> = once[e.range()].iter().map(|&x| 2.0 * x as f64).collect();
        let scale = twice.iter().fold(0f64, |a, b| a.max(b.abs()));
        assert_close(
            &format!("2x grads {}", e.name),
            &to_f64(&g[e.range()]),
            &twice,
            1e-6 * scale + 1e-7 * global,
            1e-6,
        );
    }
    assert!(once.iter().any(|&x| x != 0.0));
}

#[test]
fn label_smoothing_zero_equals_nll() {
    let model = Transformer::new(tiny(0.0, 0.0, 0.0, Positions::Sinusoidal), 5).unwrap();
    let batch = Batch::from_pairs(&sample_pairs(3, 6));
    let (s, _) = loss_and_grads(&model, &batch, None);
    assert_eq!(s.loss, s.nll);
    let smoothed = Transformer::new(tiny(0.0, 0.0, 0.1, Positions::Sinusoidal), 5).unwrap();
    let (s2, _) = loss_and_grads(&smoothed, &batch, None);
    assert_eq!(s2.nll, s.nll, "smoothing must not change the NLL");
    assert_ne!(s2.loss, s2.nll, "smoothing must change the loss");
}

#[test]
fn batch_loss_is_sum_of_sentence_losses() {
    let model = Transformer::new(tiny(0.0, 0.0, 0.1, Positions::Sinusoidal), 6).unwrap();
    let ps = sample_pairs(4, 7);
    let (all, g_all) = loss_and_grads(&model, &Batch::from_pairs(&ps), None);
    let mut loss = 0.0;
    let mut grads = vec![0f64; model.params.len()];
    for p in &ps {
        let (s, g) = loss_and_grads(&model, &Batch::from_pairs(std::slice::from_ref(p)), None);
        loss += s.loss;
        for (a, b) in grads.iter_mut().zip(&g) {
            *a += *b as f64;
        }
    }
    assert_close("loss", &[all.loss], &[loss], 1e-5, 1e-6);
    // Summed (unnormalised) gradients: rounding scales with the largest gradient, not per element.
    let scale = grads.iter().fold(0f64, |a, b| a.max(b.abs()));
    assert_close("grads", &to_f64(&g_all), &grads, 1e-5 * scale, 0.0);
}

/// A directional finite difference of the whole model with dropout on (same masks in both passes)
/// agrees with the backward: the masks are regenerated identically in the backward. (Kernel-level
/// gradient checks through explicit masks are in gradcheck.rs.)
#[test]
fn dropout_backward_matches_finite_difference() {
    let rates = [(0.0, 0.0), (0.3, 0.0), (0.0, 0.3), (0.2, 0.2)];
    slopes_match_finite_differences(&rates, 32, Positions::Learned, &sample_pairs(5, 4), (false, false));
}

/// The same on sequences of 100–180 tokens (parse trees are that long): every kernel's tiling and
/// the positions past the short ones are exercised.
#[test]
fn long_sequences_backward_matches_finite_difference() {
    let long = pairs(SyntheticTask::Reverse, &mut Rng::new(9), 2, 26, 100, 180);
    slopes_match_finite_differences(&[(0.1, 0.1)], 200, Positions::Sinusoidal, &long, (false, false));
}

/// The same with the next-word pointer (its W_p and the encoder gradient it scatters), on pairs
/// whose tokens play tags, brackets and word pieces of a made-up parsing vocabulary.
#[test]
fn pointer_backward_matches_finite_difference() {
    slopes_match_finite_differences(&[(0.1, 0.0)], 32, Positions::Sinusoidal, &sample_pairs(6, 4), (true, false));
}

/// The same with the character encoder (its byte embedding, filters and bias, under its own
/// dropout mask). Every word here is one piece spelled with one byte, so it has one window and
/// the max-pool no kink for a finite step to cross; the pooling's choice of window is checked
/// against the naive twin in tests/char_encoder.rs.
#[test]
fn char_encoder_backward_matches_finite_difference() {
    let chars =
        |c: ModelConfig| ModelConfig { parsing: ParsingInputs { char_dim: 4, next_closer: false, ..c.parsing }, ..c };
    slopes_match_finite_differences_refined(
        &[(0.1, 0.0), (0.0, 0.0)],
        32,
        Positions::Sinusoidal,
        &sample_pairs(6, 4),
        (true, false),
        &chars,
        0.0,
    );
}

/// The same with word dropout: half the source words read as UNK in the pass (the embedding's
/// gradient goes to the UNK row, not to the pieces' rows), with the character encoder beside it.
#[test]
fn word_dropout_backward_matches_finite_difference() {
    let chars =
        |c: ModelConfig| ModelConfig { parsing: ParsingInputs { char_dim: 4, next_closer: false, ..c.parsing }, ..c };
    slopes_match_finite_differences_refined(
        &[(0.1, 0.0)],
        32,
        Positions::Sinusoidal,
        &sample_pairs(6, 4),
        (true, false),
        &chars,
        0.5,
    );
}

/// The same for the architecture options of imported models, each smooth activation with an
/// output bias, Marian's sinusoids and LayerNorm ε: what fine-tuning a Marian model trains.
/// (The FFN's units are left where they start, across the bend, since these activations have no
/// kink for a step to cross.)
#[test]
fn imported_architectures_backward_matches_finite_difference() {
    use transformer::{Activation, SinusoidLayout};
    for act in [Activation::Swish, Activation::Gelu, Activation::GeluTanh, Activation::GeluSigmoid] {
        let marian = move |c: ModelConfig| ModelConfig {
            layer_norm_eps: 1e-6,
            parsing: ParsingInputs { next_closer: false, ..c.parsing },
            import: ImportOptions {
                activation: act,
                output_bias: true,
                sinusoid_layout: SinusoidLayout::Marian,
                ..c.import
            },
            ..c
        };
        slopes_match_finite_differences_refined(
            &[(0.1, 0.0)],
            32,
            Positions::Sinusoidal,
            &sample_pairs(5, 4),
            (false, false),
            &marian,
            0.0,
        );
    }
}

/// The same with the next-closer input as well (its closer and depth tables), on the same
/// made-up vocabulary, where some ids open constituents and one closes them.
#[test]
fn closer_backward_matches_finite_difference() {
    slopes_match_finite_differences(&[(0.1, 0.0)], 32, Positions::Sinusoidal, &sample_pairs(6, 4), (true, true));
}

/// The same with the next-closer input's refinements: without the depth rows, and with whole
/// positions losing the term in training (`next_closer_dropout`; the positions dropped are drawn
/// from the pass's dropout context, so the forward and the finite differences see the same ones).
#[test]
fn closer_refinements_backward_match_finite_difference() {
    let closer_only =
        |c: ModelConfig| ModelConfig { parsing: ParsingInputs { next_closer_depth: false, ..c.parsing }, ..c };
    slopes_match_finite_differences_with(&sample_pairs(6, 4), &closer_only);
    let dropped =
        |c: ModelConfig| ModelConfig { parsing: ParsingInputs { next_closer_dropout: 0.4, ..c.parsing }, ..c };
    slopes_match_finite_differences_with(&sample_pairs(6, 4), &dropped);
}

fn slopes_match_finite_differences_with(pairs: &[(Vec<u32>, Vec<u32>)], refine: &dyn Fn(ModelConfig) -> ModelConfig) {
    slopes_match_finite_differences_refined(&[(0.1, 0.0)], 32, Positions::Sinusoidal, pairs, (true, true), refine, 0.0);
}

fn slopes_match_finite_differences(
    rates: &[(f32, f32)],
    max_positions: usize,
    positions: Positions,
    pairs: &[(Vec<u32>, Vec<u32>)],
    inputs: (bool, bool),
) {
    slopes_match_finite_differences_refined(rates, max_positions, positions, pairs, inputs, &|c| c, 0.0);
}

fn slopes_match_finite_differences_refined(
    rates: &[(f32, f32)],
    max_positions: usize,
    positions: Positions,
    pairs: &[(Vec<u32>, Vec<u32>)],
    (pointer, closer): (bool, bool),
    refine: &dyn Fn(ModelConfig) -> ModelConfig,
    word_drop: f32,
) {
    for &(p, pa) in rates {
        let cfg = ModelConfig { max_positions, ..tiny(p, pa, 0.1, positions) };
        let cfg = refine(ModelConfig {
            parsing: ParsingInputs { source_pointer: pointer, next_closer: closer, ..cfg.parsing },
            ..cfg
        });
        let with_chars = cfg.parsing.char_dim > 0;
        let mut model = Transformer::new(cfg, 7).unwrap();
        if pointer || closer || with_chars {
            use transformer::model::pointer::{PointerTable, TokenClass};
            // Ids 4 and 5 open constituents (closed by 6, and by 5 itself), 6 closes, 7–9 tags,
            // 10–17 word starts, the rest pieces inside a word.
            let classes = (0..30u32)
                .map(|id| match id {
                    0..=3 => TokenClass::Structure,
                    4 => TokenClass::Open { closer: 6 },
                    5 => TokenClass::Open { closer: 5 },
                    6 => TokenClass::Close,
                    7..=9 => TokenClass::Tag,
                    10..=17 => TokenClass::Piece { starts_word: true },
                    _ => TokenClass::Piece { starts_word: false },
                })
                .collect();
            // Word starts are spelled with one byte each, the other ids with none.
            let bytes =
                (0..30u8).map(|id| if (10..=17).contains(&id) { vec![b'a' + id] } else { Vec::new() }).collect();
            model = model.with_pointer_table(PointerTable::new(classes).with_bytes(bytes)).unwrap();
        }
        if with_chars {
            // The filters at their initial values (bias 0), so that about half the units pass the
            // ReLU: a finite step moves a unit's pre-activation by ~0.004, so the few units that
            // close to 0 add an error of a few thousandths of one unit's share of the slope. (A
            // bias that keeps every unit positive offsets every word's vector, saturates the
            // attention and makes the step measure curvature instead.)
            let r = model.layout.get("encoder.char_conv.bias").expect("the character encoder's bias").range();
            assert!(model.params[r].iter().all(|&b| b == 0.0));
        }
        if closer {
            // The next-closer tables start at zero; give them values so that they take part.
            let mut rng = Rng::new(23);
            for name in ["decoder.next_closer.weight", "decoder.open_depth.weight"] {
                let r = model.layout.get(name).expect("the next closer's tables").range();
                for x in &mut model.params[r] {
                    *x = (0.5 * rng.normal()) as f32;
                }
            }
        }
        // Keep every ReLU unit active: a finite step that moves a pre-activation across 0 measures
        // the kink, not the gradient (seen here as errors of several percent in the tiny FFN).
        // Smooth activations keep their units where they start, the bend included.
        let b1: Vec<_> =
            model.layout.entries().iter().filter(|e| e.name.ends_with("ffn.b_1")).map(|e| e.range()).collect();
        for r in b1.into_iter().filter(|_| model.config.import.activation == transformer::Activation::Relu) {
            model.params[r].fill(4.0);
        }
        if model.config.import.output_bias {
            // The output bias starts at zero; give it values so that a wrong gradient shows.
            let r = model.layout.get("output.bias").expect("the output bias").range();
            let mut rng = Rng::new(29);
            for x in &mut model.params[r] {
                *x = (0.5 * rng.normal()) as f32;
            }
        }
        let mut batch = Batch::from_pairs(pairs);
        if word_drop > 0.0 {
            batch.src_drop = vec![word_drop; batch.src.len()];
        }
        let ctx = Some(DropoutCtx { seed: 11, counter: 3 });
        let (_, g) = loss_and_grads(&model, &batch, ctx);
        if word_drop > 0.0 {
            let mut ws = Workspace::new();
            model.forward(&batch, &mut ws, ctx).unwrap();
            let dropped = ws.embed_ids.iter().zip(&batch.src).filter(|(a, b)| a != b).count();
            assert!(dropped > 2 && ws.embed_ids.iter().filter(|&&id| id != transformer::UNK).count() > 2, "{dropped}");
        }
        // Per tensor, along that tensor's unit gradient the directional derivative is |g_tensor|,
        // large enough to stand above f32 noise; a wrong backward points g elsewhere and the true
        // slope along it differs. (One direction for the whole model would be dominated by the
        // embedding and miss an error confined to attention.)
        let loss_at = |dir: &[(usize, f32)], h: f32| {
            let mut m = model.clone();
            for &(i, d) in dir {
                m.params[i] += h * d;
            }
            let mut ws = Workspace::new();
            m.forward(&batch, &mut ws, ctx).unwrap();
            m.loss(&batch, &mut ws, 0.1, 1.0).unwrap().loss
        };
        let mut checked = 0;
        let mut rng = Rng::new(17);
        for e in model.layout.entries() {
            let norm = g[e.range()].iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            // The character encoder's gradients are smaller (a few bytes a word), yet a slope of 0.01
            // still stands well above the quotient's f32 noise (~5e-4) against a missing term's O(1).
            let floor = if e.name.starts_with("encoder.char_") { 0.01 } else { 0.05 };
            if norm < floor {
                continue; // key biases (exactly 0) and unused position rows
            }
            // Direction: the unit gradient plus a random unit vector. The gradient part keeps the
            // slope well above f32 noise; the random part makes the check first-order sensitive to
            // an error orthogonal to the gradient (along ĝ alone it would be second-order).
            let r: Vec<f64> = e.range().map(|_| rng.normal()).collect();
            let rn = r.iter().map(|x| x * x).sum::<f64>().sqrt();
            let dir: Vec<(usize, f32)> =
                e.range().zip(&r).map(|(i, ri)| (i, (g[i] as f64 / norm + ri / rn) as f32)).collect();
            let analytic: f64 = dir.iter().map(|&(i, d)| g[i] as f64 * d as f64).sum();
            let h = 1e-2;
            let numeric = (loss_at(&dir, h) - loss_at(&dir, -h)) / (2.0 * h as f64);
            // f32 losses of ~80 carry ~1e-5 rounding (~1e-3 in the quotient) and curvature adds
            // O(h²); a backward that ignored a dropout mask is off by O(norm).
            assert_close(&format!("{} slope p={p} pa={pa}", e.name), &[numeric], &[analytic], 3e-3, 3e-3);
            checked += 1;
        }
        assert!(checked > 30, "only {checked} tensors checked");
        if pointer {
            let w = model.layout.get("decoder.source_pointer.weight").expect("the pointer's weight");
            let norm = g[w.range()].iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
            assert!(norm >= 0.05, "the pointer's gradient is too small to check: {norm}");
        }
        if with_chars {
            for name in ["encoder.char_embed.weight", "encoder.char_conv.weight", "encoder.char_conv.bias"] {
                let w = model.layout.get(name).expect("the character encoder's tensors");
                let norm = g[w.range()].iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
                assert!(norm >= 0.01, "{name}: gradient too small to check: {norm}");
            }
        }
        if closer {
            for name in ["decoder.next_closer.weight", "decoder.open_depth.weight"] {
                let w = model.layout.get(name).expect("the next closer's tables");
                let norm = g[w.range()].iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
                assert!(norm >= 0.05, "{name}: gradient too small to check: {norm}");
            }
        }
    }
}

#[test]
fn deterministic_for_seed() {
    let cfg = tiny(0.1, 0.1, 0.1, Positions::Sinusoidal);
    let batch = Batch::from_pairs(&sample_pairs(6, 5));
    let run = || {
        let model = Transformer::new(cfg.clone(), 9).unwrap();
        loss_and_grads(&model, &batch, Some(DropoutCtx { seed: 1, counter: 2 }))
    };
    let (a, ga) = run();
    let (b, gb) = run();
    assert_eq!(a, b);
    assert!(ga == gb, "gradients differ between identical runs");
    // A different dropout counter gives different masks.
    let model = Transformer::new(cfg, 9).unwrap();
    let (c, _) = loss_and_grads(&model, &batch, Some(DropoutCtx { seed: 1, counter: 3 }));
    assert_ne!(a.loss, c.loss);
}

#[test]
fn dropout_rate_and_scale() {
    let m = transformer::rng::DropoutMask::new(0.1, 1, 2, 3);
    let n = 200_000;
    let kept = (0..n).filter(|&i| m.factor(i) != 0.0).count();
    let rate = 1.0 - kept as f64 / n as f64;
    // Binomial standard deviation at n = 2e5 is 6.7e-4; 4σ.
    assert!((rate - 0.1).abs() < 2.7e-3, "drop rate {rate}");
    assert!((0..100).all(|i| m.factor(i) == 0.0 || (m.factor(i) - 1.0 / 0.9).abs() < 1e-7));
}

#[test]
fn dropout_fill_agrees_with_factor() {
    let m = transformer::rng::DropoutMask::new(0.3, 4, 5, 6);
    for (i0, n) in [(0, 64), (3, 70), (1, 1), (8, 3), (5, 130), (1024, 512)] {
        let mut out = vec![f32::NAN; n];
        m.fill(i0, &mut out);
        let want: Vec<f32> = (i0..i0 + n).map(|i| m.factor(i)).collect();
        assert_eq!(out, want, "fill({i0}, {n})");
        let mut chunks = vec![f32::NAN; n];
        m.for_chunks(i0, n, |j, f| chunks[j..j + f.len()].copy_from_slice(f));
        assert_eq!(chunks, want, "for_chunks({i0}, {n})");
    }
    assert!((m.effective_p() - 0.3).abs() < 1e-5);
}

#[test]
fn workspace_reuse_across_shapes_matches_fresh() {
    let model = Transformer::new(tiny(0.1, 0.1, 0.1, Positions::Learned), 12).unwrap();
    let mut shared = Workspace::new();
    let shapes = [(5, 1, 9), (1, 1, 1), (7, 3, 4), (2, 8, 8), (6, 2, 9)];
    for (k, &(n, lo, hi)) in shapes.iter().enumerate() {
        let batch = Batch::from_pairs(&pairs(SyntheticTask::Reverse, &mut Rng::new(k as u64), n, 26, lo, hi));
        let ctx = Some(DropoutCtx { seed: 3, counter: k as u64 });
        let run = |ws: &mut Workspace| {
            let mut g = vec![0f32; model.params.len()];
            model.forward(&batch, ws, ctx).unwrap();
            let s = model.loss(&batch, ws, 0.1, 1.0).unwrap();
            model.backward(&batch, ws, ctx, &mut g).unwrap();
            (s, g)
        };
        let (a, ga) = run(&mut shared);
        let (b, gb) = run(&mut Workspace::new());
        assert_eq!(a, b, "shape {k}");
        assert!(ga == gb, "gradients differ for shape {k} with a reused workspace");
    }
}

#[test]
fn batch_errors_are_clear() {
    let model = Transformer::new(tiny(0.0, 0.0, 0.1, Positions::Sinusoidal), 1).unwrap();
    let mut ws = Workspace::new();
    let long = Batch::from_pairs(&[(vec![5; 40], vec![6; 3])]);
    let err = model.forward(&long, &mut ws, None).unwrap_err().to_string();
    assert!(err.contains("exceeds max_positions = 32"), "{err}");
    let bad_id = Batch::from_pairs(&[(vec![99], vec![6])]);
    let err = model.forward(&bad_id, &mut ws, None).unwrap_err().to_string();
    assert!(err.contains("token id 99 outside the vocabulary of 30"), "{err}");
}
