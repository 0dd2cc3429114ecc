//! Incremental decoding (cached keys and values) gives the same next-token log-probabilities as the
//! teacher-forced full forward pass, on random models, with padding, both kinds of positions, and
//! rows reordered, duplicated and dropped between steps the way beam search does.

mod common;

use common::assert_close;
use transformer::model::incremental::DecoderState;
use transformer::rng::Rng;
use transformer::{
    Batch, DropoutCtx, ImportOptions, ModelConfig, ParsingInputs, Positions, Transformer, Workspace, BOS,
};

fn config(positions: Positions) -> ModelConfig {
    ModelConfig {
        n_layers: 2,
        d_model: 24,
        d_ff: 40,
        n_heads: 3,
        d_k: 5,
        d_v: 7,
        dropout: 0.1,
        attention_dropout: 0.1,
        label_smoothing: 0.1,
        positions,
        max_positions: 48,
        vocab_size: 37,
        layer_norm_eps: 1e-6,
        ..transformer::ModelConfig::base()
    }
}

/// A random model whose biases and LayerNorm parameters are not at their initial 0/1, so every
/// parameter takes part.
fn model(positions: Positions, seed: u64) -> Transformer {
    let mut m = Transformer::new(config(positions), seed).unwrap();
    let mut rng = Rng::new(seed ^ 0x5eed);
    for p in &mut m.params {
        *p += ((rng.uniform() * 2.0 - 1.0) * 0.2) as f32;
    }
    m
}

/// A random model with the next-word pointer over a made-up parsing vocabulary: ids 4–6 brackets
/// (4 and 5 open, closed by 6 and by 5 itself; 6 closes), 7–12 tags, 13–24 pieces that start a
/// word, 25–36 pieces inside a word.
fn pointer_model(seed: u64) -> Transformer {
    tree_model(seed, true, false, true)
}

/// [`pointer_model`] with or without each of the pointer and the next-closer input (with or
/// without its depth rows).
fn tree_model(seed: u64, source_pointer: bool, next_closer: bool, next_closer_depth: bool) -> Transformer {
    tree_model_of(
        seed,
        ModelConfig {
            parsing: ParsingInputs { source_pointer, next_closer, next_closer_depth, ..ParsingInputs::default() },
            ..config(Positions::Sinusoidal)
        },
    )
}

/// [`tree_model`] of any configuration.
fn tree_model_of(seed: u64, cfg: ModelConfig) -> Transformer {
    tree_model_with(seed, cfg, transformer::model::pointer::TokenClass::Tag)
}

/// [`tree_model_of`] with ids 7–12 of class `tag` (`Leaf`: the `tags` tree format, no words).
fn tree_model_with(seed: u64, cfg: ModelConfig, tag: transformer::model::pointer::TokenClass) -> Transformer {
    use transformer::model::pointer::{PointerTable, TokenClass};
    let mut m = Transformer::new(cfg, seed).unwrap();
    let mut rng = Rng::new(seed ^ 0x5eed);
    for p in &mut m.params {
        *p += ((rng.uniform() * 2.0 - 1.0) * 0.2) as f32;
    }
    let classes = (0..37u32)
        .map(|id| match id {
            4 => TokenClass::Open { closer: 6 },
            5 => TokenClass::Open { closer: 5 },
            6 => TokenClass::Close,
            0..=6 if id != transformer::UNK => TokenClass::Structure,
            7..=12 => tag,
            13..=24 => TokenClass::Piece { starts_word: true },
            _ => TokenClass::Piece { starts_word: false },
        })
        .collect();
    m.with_pointer_table(PointerTable::new(classes)).unwrap()
}

fn log_softmax(row: &[f32]) -> Vec<f64> {
    let mx = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let lse = mx + row.iter().map(|&x| (x as f64 - mx).exp()).sum::<f64>().ln();
    row.iter().map(|&x| x as f64 - lse).collect()
}

/// Full-forward log-probabilities of the token after `prefix` (which starts with BOS).
fn full_next(m: &Transformer, src: &[u32], prefix: &[u32]) -> Vec<f64> {
    assert_eq!(prefix[0], BOS);
    let batch = Batch::from_pairs(&[(src.to_vec(), prefix[1..].to_vec())]);
    let mut ws = Workspace::new();
    m.forward(&batch, &mut ws, None).unwrap();
    let v = m.config.vocab_size;
    let pos = prefix.len() - 1;
    log_softmax(&ws.logits[pos * v..(pos + 1) * v])
}

fn random_ids(rng: &mut Rng, n: usize, vocab: usize) -> Vec<u32> {
    // Ids 4.. (not the special tokens).
    (0..n).map(|_| 4 + (rng.uniform() * (vocab - 4) as f64) as u32 % (vocab as u32 - 4)).collect()
}

#[test]
fn incremental_matches_teacher_forcing() {
    use transformer::model::pointer::TokenClass;
    for (positions, pointer, closer, depth, tag) in [
        (Positions::Sinusoidal, false, false, true, TokenClass::Tag),
        (Positions::Learned, false, false, true, TokenClass::Tag),
        (Positions::Sinusoidal, true, false, true, TokenClass::Tag),
        (Positions::Sinusoidal, false, true, true, TokenClass::Tag),
        (Positions::Sinusoidal, true, true, true, TokenClass::Tag),
        (Positions::Sinusoidal, true, true, false, TokenClass::Tag),
        // The `tags` tree format: each tag a whole leaf, the pointer a word a tag.
        (Positions::Sinusoidal, true, false, true, TokenClass::Leaf),
        (Positions::Sinusoidal, true, true, true, TokenClass::Leaf),
    ] {
        let m = if pointer || closer {
            let cfg = ModelConfig {
                parsing: ParsingInputs {
                    source_pointer: pointer,
                    next_closer: closer,
                    next_closer_depth: depth,
                    ..ParsingInputs::default()
                },
                ..config(positions)
            };
            tree_model_with(11, cfg, tag)
        } else {
            model(positions, 11)
        };
        let v = m.config.vocab_size;
        let mut rng = Rng::new(3);
        let srcs: Vec<Vec<u32>> = [5, 1, 9, 3].iter().map(|&n| random_ids(&mut rng, n, v)).collect();
        // 40 target positions: the cache grows past its initial 16 twice.
        let tgts: Vec<Vec<u32>> = [6, 2, 39, 4].iter().map(|&n| random_ids(&mut rng, n, v)).collect();
        let pairs: Vec<_> = srcs.iter().cloned().zip(tgts.iter().cloned()).collect();
        let batch = Batch::from_pairs(&pairs);
        let mut ws = Workspace::new();
        m.forward(&batch, &mut ws, None).unwrap();
        let full = ws.logits.clone();

        // Incremental decoding on the model prepared for inference (every linear map in its compute
        // layout, the embedding read from the output projection), teacher forcing on the model as
        // it trains.
        let m = m.prepare(transformer::Precision::F32).unwrap();
        let src_refs: Vec<&[u32]> = srcs.iter().map(|s| s.as_slice()).collect();
        let enc = m.encode(&src_refs, &mut ws).unwrap();
        let mut st = m.start_decoding(&enc, batch.t).unwrap();
        let mut compared = 0;
        for t in 0..batch.t {
            let tokens: Vec<u32> = (0..batch.b).map(|i| batch.tgt_in[i * batch.t + t].max(BOS)).collect();
            let logits = m.decode_step(&enc, &mut st, &tokens).unwrap().to_vec();
            for i in 0..batch.b {
                if t < batch.tgt_lens[i] {
                    let want = log_softmax(&full[(i * batch.t + t) * v..][..v]);
                    let got = log_softmax(&logits[i * v..(i + 1) * v]);
                    assert_close(
                        &format!("{positions:?} pointer {pointer} closer {closer} depth {depth} {tag:?} sentence {i} step {t}"),
                        &got,
                        &want,
                        2e-5,
                        1e-5,
                    );
                    compared += 1;
                }
            }
        }
        assert_eq!(compared, batch.tgt_lens.iter().sum::<usize>());
        assert_eq!(st.len(), batch.t);
    }
}

#[test]
fn reordered_rows_continue_their_own_prefixes() {
    reordered_rows(&model(Positions::Sinusoidal, 5));
}

/// The same with the next-word pointer: each row's place in its sentence moves with the row.
#[test]
fn reordered_rows_keep_their_pointer() {
    reordered_rows(&pointer_model(5));
}

/// The same with the next-closer input: each row's open constituents move with the row.
#[test]
fn reordered_rows_keep_their_open_constituents() {
    reordered_rows(&tree_model(5, false, true, true));
}

/// The depth rows take part unless `next_closer_depth = false`, and `next_closer_dropout` leaves
/// out the term at some positions in training (a dropout context), never in inference.
#[test]
fn closer_refinements_change_what_they_should() {
    let mut rng = Rng::new(4);
    // 40 sentences: under causal attention a position's logits change exactly when the term was
    // left out there or before, so position 0 of each row shows whether it was dropped there.
    let pairs: Vec<_> = (0..40usize)
        .map(|k| {
            let n = 3 + k % 5;
            ((13..13 + n as u32).collect::<Vec<u32>>(), random_ids(&mut rng, 3 * n, 37))
        })
        .collect();
    let batch = Batch::from_pairs(&pairs);
    let logits = |m: &Transformer, ctx: Option<DropoutCtx>| {
        let mut ws = Workspace::new();
        m.forward(&batch, &mut ws, ctx).unwrap();
        ws.logits.clone()
    };
    // Dropout on the closer term alone: the model's other dropout is 0 here.
    let cfg = ModelConfig {
        dropout: 0.0,
        attention_dropout: 0.0,
        parsing: ParsingInputs { source_pointer: true, next_closer: true, ..ParsingInputs::default() },
        ..config(Positions::Sinusoidal)
    };
    let with_depth = tree_model_of(11, cfg.clone());
    let closer_only = tree_model_of(
        11,
        ModelConfig { parsing: ParsingInputs { next_closer_depth: false, ..cfg.parsing }, ..cfg.clone() },
    );
    assert_eq!(with_depth.params, closer_only.params, "the same weights");
    assert_ne!(logits(&with_depth, None), logits(&closer_only, None), "the depth rows changed nothing");
    let dropped =
        tree_model_of(11, ModelConfig { parsing: ParsingInputs { next_closer_dropout: 0.5, ..cfg.parsing }, ..cfg });
    let ctx = Some(DropoutCtx { seed: 3, counter: 9 });
    assert_eq!(logits(&dropped, None), logits(&with_depth, None), "no dropout in inference");
    assert_eq!(logits(&with_depth, ctx), logits(&with_depth, None));
    let (a, b) = (logits(&dropped, ctx), logits(&with_depth, None));
    let (v, t) = (37, batch.t);
    let first_changed = (0..batch.b).filter(|&r| a[r * t * v..][..v] != b[r * t * v..][..v]).count();
    assert!((12..=28).contains(&first_changed), "{first_changed} of 40 first positions lost the term at p = 0.5");
    assert_ne!(a, b);
}

#[test]
fn a_pointer_model_needs_its_table() {
    let m = Transformer::new(
        ModelConfig {
            parsing: ParsingInputs { source_pointer: true, ..ParsingInputs::default() },
            ..config(Positions::Sinusoidal)
        },
        1,
    )
    .unwrap();
    let batch = Batch::from_pairs(&[(vec![13, 14], vec![7, 13])]);
    let err = m.forward(&batch, &mut Workspace::new(), None).unwrap_err().to_string();
    assert!(err.contains("pointer table"), "{err}");
    let short = transformer::model::pointer::PointerTable::new(vec![]);
    assert!(m.with_pointer_table(short).unwrap_err().to_string().contains("covers 0 ids"));
    let m = Transformer::new(
        ModelConfig {
            parsing: ParsingInputs { next_closer: true, ..ParsingInputs::default() },
            ..config(Positions::Sinusoidal)
        },
        1,
    )
    .unwrap();
    let err = m.forward(&batch, &mut Workspace::new(), None).unwrap_err().to_string();
    assert!(err.contains("model.next_closer") && err.contains("pointer table"), "{err}");
}

fn reordered_rows(m: &Transformer) {
    let m = m.clone();
    let v = m.config.vocab_size;
    let mut rng = Rng::new(9);
    let srcs: Vec<Vec<u32>> = [4, 7].iter().map(|&n| random_ids(&mut rng, n, v)).collect();
    let src_refs: Vec<&[u32]> = srcs.iter().map(|s| s.as_slice()).collect();
    let mut ws = Workspace::new();
    let enc = m.encode(&src_refs, &mut ws).unwrap();
    let mut st = m.start_decoding(&enc, 24).unwrap();
    // Row r decodes `prefixes[r]` of sentence `sent[r]`.
    let mut prefixes: Vec<Vec<u32>> = vec![vec![BOS], vec![BOS]];
    let fixed: [&[usize]; 5] = [&[0, 0, 1, 1, 1], &[4, 3, 0, 1, 2], &[2, 2], &[1, 0, 1], &[0, 2, 1, 2]];
    // Then random keeps of 1–6 rows, up to 22 positions: past the cache's growth at 16.
    let mut keeps: Vec<Vec<usize>> = fixed.iter().map(|k| k.to_vec()).collect();
    let mut rows = 4;
    for _ in 0..17 {
        let n = 1 + (rng.next_u64() % 6) as usize;
        keeps.push((0..n).map(|_| (rng.next_u64() % rows as u64) as usize).collect());
        rows = n;
    }
    for keep in &keeps {
        let tokens: Vec<u32> = prefixes.iter().map(|p| *p.last().unwrap()).collect();
        let logits = m.decode_step(&enc, &mut st, &tokens).unwrap().to_vec();
        for (r, prefix) in prefixes.iter().enumerate() {
            let sent = st.sentences()[r];
            let want = full_next(&m, &srcs[sent], prefix);
            let got = log_softmax(&logits[r * v..(r + 1) * v]);
            assert_close(&format!("row {r} prefix {prefix:?}"), &got, &want, 2e-5, 1e-5);
        }
        // Extend every row by a different random token, then reorder.
        for p in prefixes.iter_mut() {
            p.push(random_ids(&mut rng, 1, v)[0]);
        }
        prefixes = keep.iter().map(|&r| prefixes[r].clone()).collect();
        st.reorder(keep).unwrap();
        assert_eq!(st.len(), prefixes[0].len() - 1);
        assert_eq!(st.rows(), keep.len());
    }
}

#[test]
fn decoder_state_errors_instead_of_overrunning() {
    let m = model(Positions::Sinusoidal, 1);
    let mut ws = Workspace::new();
    let enc = m.encode(&[&[5, 6]], &mut ws).unwrap();
    let too_long = m.start_decoding(&enc, 49).unwrap_err().to_string();
    assert!(too_long.contains("max_positions"), "{too_long}");
    let mut st = m.start_decoding(&enc, 2).unwrap();
    let wrong_rows = m.decode_step(&enc, &mut st, &[BOS, BOS]).unwrap_err().to_string();
    assert!(wrong_rows.contains("2 tokens given for 1 decoder rows"), "{wrong_rows}");
    let bad_id = m.decode_step(&enc, &mut st, &[99]).unwrap_err().to_string();
    assert!(bad_id.contains("token id 99"), "{bad_id}");
    m.decode_step(&enc, &mut st, &[BOS]).unwrap();
    m.decode_step(&enc, &mut st, &[7]).unwrap();
    let full = m.decode_step(&enc, &mut st, &[8]).unwrap_err().to_string();
    assert!(full.contains("full"), "{full}");
}

#[test]
fn empty_source_attends_to_nothing() {
    // An empty source row next to a non-empty one: both decode, and the empty one matches a model
    // run on it alone.
    let m = model(Positions::Sinusoidal, 2);
    let v = m.config.vocab_size;
    let mut ws = Workspace::new();
    let enc = m.encode(&[&[], &[9, 10, 11]], &mut ws).unwrap();
    let mut st = m.start_decoding(&enc, 3).unwrap();
    let both = m.decode_step(&enc, &mut st, &[BOS, BOS]).unwrap().to_vec();
    let enc1 = m.encode(&[&[]], &mut ws).unwrap();
    let mut st1 = m.start_decoding(&enc1, 3).unwrap();
    let alone = m.decode_step(&enc1, &mut st1, &[BOS]).unwrap().to_vec();
    assert_eq!(&both[..v], &alone[..]);
    assert!(both.iter().all(|x| x.is_finite()));
}

/// Decodes `steps` positions of `srcs` in `st` (already started), every row fed a random token and
/// the rows reordered by a random keep list of 1..=`max_rows` rows after each step; returns every
/// step's logits.
fn drive(
    m: &Transformer,
    enc: &transformer::model::incremental::Encoded,
    st: &mut DecoderState,
    steps: usize,
    max_rows: u64,
    seed: u64,
) -> Vec<Vec<f32>> {
    let v = m.config.vocab_size;
    let mut rng = Rng::new(seed);
    let mut tokens = vec![BOS; st.rows()];
    let mut out = Vec::new();
    for _ in 0..steps {
        out.push(m.decode_step(enc, st, &tokens).unwrap().to_vec());
        let rows = st.rows();
        let n = 1 + (rng.next_u64() % max_rows) as usize;
        let keep: Vec<usize> = (0..n).map(|_| (rng.next_u64() % rows as u64) as usize).collect();
        st.reorder(&keep).unwrap();
        tokens = random_ids(&mut rng, n, v);
    }
    out
}

#[test]
fn a_reused_state_decodes_exactly_like_a_fresh_one() {
    let m = model(Positions::Sinusoidal, 11).prepare(transformer::Precision::F32).unwrap();
    let v = m.config.vocab_size;
    let mut rng = Rng::new(12);
    let mut ws = Workspace::new();
    // A first batch of 3 sentences grows the buffers past 16 positions.
    let a: Vec<Vec<u32>> = [6, 3, 9].iter().map(|&n| random_ids(&mut rng, n, v)).collect();
    let a_refs: Vec<&[u32]> = a.iter().map(|s| s.as_slice()).collect();
    let enc_a = m.encode(&a_refs, &mut ws).unwrap();
    let mut st = transformer::model::incremental::DecoderState::default();
    m.restart_decoding(&enc_a, 40, &mut st).unwrap();
    drive(&m, &enc_a, &mut st, 30, 6, 1);
    // Then a smaller batch in the same state, against a fresh state: bit for bit the same.
    let b: Vec<Vec<u32>> = [4, 8].iter().map(|&n| random_ids(&mut rng, n, v)).collect();
    let b_refs: Vec<&[u32]> = b.iter().map(|s| s.as_slice()).collect();
    let enc_b = m.encode(&b_refs, &mut ws).unwrap();
    m.restart_decoding(&enc_b, 24, &mut st).unwrap();
    assert_eq!((st.rows(), st.len()), (2, 0));
    let reused = drive(&m, &enc_b, &mut st, 22, 6, 2);
    let mut fresh_st = m.start_decoding(&enc_b, 24).unwrap();
    let fresh = drive(&m, &enc_b, &mut fresh_st, 22, 6, 2);
    assert_eq!(reused, fresh);
    // Then a larger batch with up to 200 rows (products past the packed path's 160 rows, several
    // row blocks): again the same as a fresh state.
    let c: Vec<Vec<u32>> = [5, 2, 7, 3, 6].iter().map(|&n| random_ids(&mut rng, n, v)).collect();
    let c_refs: Vec<&[u32]> = c.iter().map(|s| s.as_slice()).collect();
    let enc_c = m.encode(&c_refs, &mut ws).unwrap();
    m.restart_decoding(&enc_c, 24, &mut st).unwrap();
    let reused = drive(&m, &enc_c, &mut st, 20, 200, 3);
    let mut fresh_st = m.start_decoding(&enc_c, 24).unwrap();
    assert_eq!(reused, drive(&m, &enc_c, &mut fresh_st, 20, 200, 3));
}

#[test]
fn a_prepared_model_keeps_each_weight_once() {
    use transformer::Precision;
    let m = model(Positions::Sinusoidal, 11);
    let total = m.params.len();
    let linear: usize =
        m.layout.entries().iter().filter(|e| e.name.contains(".w_") || e.name == "embed.weight").map(|e| e.len()).sum();
    for p in Precision::ALL.into_iter().filter(|p| p.available().is_ok()) {
        let prepared = m.clone().prepare(p).unwrap();
        let names: Vec<&str> = prepared.layout.entries().iter().map(|e| e.name.as_str()).collect();
        assert!(!names.iter().any(|n| n.contains(".w_")), "{p}: a linear map's weights stayed in the parameters");
        // At f32 the embedding's rows are read from the prepared output projection; bf16 tiles and
        // int8 codes hold rounded values, so the lookups keep E.
        let keeps_embedding = p != Precision::F32;
        assert_eq!(names.contains(&"embed.weight"), keeps_embedding, "{p}");
        let kept =
            if keeps_embedding { total - linear + m.config.vocab_size * m.config.d_model } else { total - linear };
        assert_eq!(prepared.params.len(), kept, "{p}");
        assert_eq!(prepared.precision(), p);
        // Prepared once: the same precision again is a no-op, another one or training is refused.
        assert!(prepared.clone().prepare(p).is_ok());
        let other = if p == Precision::F32 { Precision::Int8 } else { Precision::F32 };
        assert!(prepared.clone().prepare(other).is_err(), "{p} → {other}");
        let e = prepared.with_precision(Precision::F32).unwrap_err().to_string();
        assert!(e.contains("prepared for inference"), "{e}");
    }
    let e = m.with_precision(Precision::Int8).unwrap_err().to_string();
    assert!(e.contains("prepared for inference"), "{e}");
}

#[test]
fn closer_refinements_need_the_closer() {
    for cfg in [
        ModelConfig {
            parsing: ParsingInputs { next_closer_dropout: 0.3, ..ParsingInputs::default() },
            ..config(Positions::Sinusoidal)
        },
        ModelConfig {
            parsing: ParsingInputs { next_closer_depth: false, ..ParsingInputs::default() },
            ..config(Positions::Sinusoidal)
        },
    ] {
        let err = Transformer::new(cfg, 1).unwrap_err().to_string();
        assert!(err.contains("they need next_closer = true"), "{err}");
    }
}

/// Largest |a − b| over the next-token log-probabilities of every target position, incremental
/// decoding of `m` against the teacher-forced pass of `reference`.
fn incremental_vs_forward(m: &Transformer, reference: &Transformer) -> f64 {
    let v = m.config.vocab_size;
    let mut rng = Rng::new(3);
    let srcs: Vec<Vec<u32>> = [5, 1, 9, 3].iter().map(|&n| random_ids(&mut rng, n, v)).collect();
    let tgts: Vec<Vec<u32>> = [6, 2, 39, 4].iter().map(|&n| random_ids(&mut rng, n, v)).collect();
    let pairs: Vec<_> = srcs.iter().cloned().zip(tgts.iter().cloned()).collect();
    let batch = Batch::from_pairs(&pairs);
    let mut ws = Workspace::new();
    reference.forward(&batch, &mut ws, None).unwrap();
    let full = ws.logits.clone();
    let src_refs: Vec<&[u32]> = srcs.iter().map(|s| s.as_slice()).collect();
    let enc = m.encode(&src_refs, &mut ws).unwrap();
    let mut st = DecoderState::default();
    m.restart_decoding(&enc, batch.t, &mut st).unwrap();
    let mut worst = 0f64;
    for t in 0..batch.t {
        let tokens: Vec<u32> = (0..batch.b).map(|i| batch.tgt_in[i * batch.t + t].max(BOS)).collect();
        let logits = m.decode_step(&enc, &mut st, &tokens).unwrap().to_vec();
        for i in (0..batch.b).filter(|&i| t < batch.tgt_lens[i]) {
            let want = log_softmax(&full[(i * batch.t + t) * v..][..v]);
            let got = log_softmax(&logits[i * v..(i + 1) * v]);
            worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(worst, f64::max);
        }
    }
    worst
}

#[test]
fn int8_and_bf16_decoding_match_their_own_teacher_forcing_and_stay_near_f32() {
    use transformer::Precision;
    for (pointer, closer) in [(false, false), (true, true)] {
        let base =
            || if pointer || closer { tree_model(12, pointer, closer, true) } else { model(Positions::Sinusoidal, 12) };
        let f32_model = base();
        for p in [Precision::Int8, Precision::Bf16].into_iter().filter(|p| p.available().is_ok()) {
            let m = base().prepare(p).unwrap();
            // Against its own teacher-forced pass: the same quantised weights; rows that differ by
            // float rounding may round one code apart.
            let own = incremental_vs_forward(&m, &m);
            // Against f32: the quantisation error itself.
            let to_f32 = incremental_vs_forward(&m, &f32_model);
            eprintln!("{p} pointer {pointer} closer {closer}: own {own:.2e}, against f32 {to_f32:.2e}");
            assert!(own < 2e-3, "{p}: incremental vs teacher-forced differ by {own}");
            // A d_model of 24 gives int8 few terms to average its rounding over: the largest
            // error over every vocabulary entry of every position measured 0.11–0.13 nats (bf16:
            // 0.06–0.07).
            let bound = if p == Precision::Int8 { 0.25 } else { 0.12 };
            assert!(to_f32 < bound, "{p}: {to_f32} nats from f32");
            assert!(to_f32 > 1e-6, "{p}: identical to f32, so the precision was not applied");
        }
    }
}

#[test]
fn a_batch_encoded_in_groups_decodes_like_each_sentence_alone() {
    // 60 sentences of up to 20 tokens: more than ENCODE_TOKENS padded tokens, so `encode` runs the
    // encoder on several groups and places each group's keys and values in the batch's layout.
    let m = model(Positions::Sinusoidal, 13);
    let v = m.config.vocab_size;
    let mut rng = Rng::new(5);
    let srcs: Vec<Vec<u32>> = (0..60).map(|i| random_ids(&mut rng, 1 + (i * 7) % 20, v)).collect();
    let total: usize = 60 * srcs.iter().map(|s| s.len()).max().unwrap();
    assert!(total > transformer::model::incremental::ENCODE_TOKENS);
    let refs: Vec<&[u32]> = srcs.iter().map(|s| s.as_slice()).collect();
    let mut ws = Workspace::new();
    let enc = m.encode(&refs, &mut ws).unwrap();
    let mut st = m.start_decoding(&enc, 3).unwrap();
    let tokens = vec![BOS; 60];
    let batch = m.decode_step(&enc, &mut st, &tokens).unwrap().to_vec();
    for (i, src) in srcs.iter().enumerate() {
        let one = m.encode(&[src.as_slice()], &mut ws).unwrap();
        let mut st1 = m.start_decoding(&one, 3).unwrap();
        let alone = m.decode_step(&one, &mut st1, &[BOS]).unwrap().to_vec();
        let got: Vec<f64> = batch[i * v..(i + 1) * v].iter().map(|&x| x as f64).collect();
        let want: Vec<f64> = alone.iter().map(|&x| x as f64).collect();
        assert_close(&format!("sentence {i}"), &got, &want, 1e-5, 1e-5);
    }
}

#[test]
fn imported_architecture_options_decode_like_teacher_forcing() {
    use transformer::{Activation, SinusoidLayout};
    let base = config(Positions::Sinusoidal);
    for c in [
        ModelConfig {
            import: ImportOptions { activation: Activation::Swish, output_bias: true, ..base.import },
            ..base.clone()
        },
        ModelConfig {
            import: ImportOptions {
                activation: Activation::Gelu,
                sinusoid_layout: SinusoidLayout::Halves,
                ..base.import
            },
            ..base.clone()
        },
        ModelConfig {
            import: ImportOptions {
                activation: Activation::GeluTanh,
                sinusoid_layout: SinusoidLayout::Marian,
                ..base.import
            },
            ..base.clone()
        },
        ModelConfig {
            import: ImportOptions {
                source_vocab_size: Some(53),
                scale_embedding: false,
                output_bias: true,
                ..base.import
            },
            ..base.clone()
        },
    ] {
        let mut m = Transformer::new(c.clone(), 7).unwrap();
        let mut rng = Rng::new(9);
        for p in &mut m.params {
            *p += ((rng.uniform() * 2.0 - 1.0) * 0.2) as f32;
        }
        let worst = incremental_vs_forward(&m, &m);
        assert!(worst < 2e-5, "{:?}: incremental log-probabilities off by {worst:e}", c.departures());
        // Prepared for inference (a separate source embedding stays in the parameters; the target
        // one is read from the output projection).
        let worst = incremental_vs_forward(&m.clone().prepare(transformer::Precision::F32).unwrap(), &m);
        assert!(worst < 2e-5, "{:?} prepared: incremental log-probabilities off by {worst:e}", c.departures());
    }
}
