//! Beam search driven by scripted probability tables: exact hypotheses and scores for several beam
//! sizes and α, EOS handling, the length limit, n-best lists, batching, and agreement with an
//! exhaustive search when the beam holds every hypothesis.

#![allow(clippy::needless_range_loop)]

use std::collections::HashMap;
mod common;

use common::scripted::{exhaustive, lp, probs, random_table, search, Scripted, Table, A, B, V};
use common::translate_batch;
use transformer::decode::{
    beam_search, BeamConfig, Controls, EnsembleScorer, Hypothesis, LengthNorm, Sampling, SearchOverrides, SearchPreset,
    SentenceInputs, Stop,
};
use transformer::rng::Rng;
use transformer::{Batch, ModelConfig, Positions, Transformer, Workspace, EOS};

fn cfg(beam: usize, alpha: f64, nbest: usize) -> BeamConfig {
    BeamConfig {
        beam,
        alpha,
        max_len_a: 1.0,
        max_len_b: 50,
        nbest,
        stop: Stop::Exact,
        length_norm: LengthNorm::Gnmt,
        suppress_unk: false,
        controls: Controls::default(),
        sampling: None,
        end_at_limit: false,
    }
}

fn assert_hyp(h: &Hypothesis, tokens: &[u32], log_prob: f64, score: f64) {
    assert_eq!(h.tokens, tokens, "{h:?}");
    // Log-probabilities pass through f32.
    assert!((h.log_prob - log_prob).abs() < 1e-6, "log_prob {} vs {log_prob}", h.log_prob);
    assert!((h.score - score).abs() < 1e-6, "score {} vs {score}", h.score);
}

/// Greedy takes a (0.5) then a (0.4): P = 0.2. A beam of 2 also keeps b (0.4), whose EOS (0.9)
/// gives P = 0.36.
fn trap(_: usize, prefix: &[u32]) -> [f64; V] {
    match prefix {
        [] => probs(&[(A, 0.5), (B, 0.4), (EOS, 0.1)]),
        [A] => probs(&[(A, 0.4), (B, 0.3), (EOS, 0.3)]),
        [B] => probs(&[(EOS, 0.9), (A, 0.05), (B, 0.05)]),
        _ => probs(&[(EOS, 1.0)]),
    }
}

#[test]
fn greedy_falls_into_the_trap_and_beam_2_avoids_it() {
    let g = search(&trap, &[0], &[3], cfg(1, 0.6, 1));
    assert_hyp(&g[0][0], &[A, A], 0.2f64.ln(), 0.2f64.ln() / lp(3, 0.6));
    let b = search(&trap, &[0], &[3], cfg(2, 0.6, 2));
    assert_eq!(b[0].len(), 2);
    assert_hyp(&b[0][0], &[B], 0.36f64.ln(), 0.36f64.ln() / lp(2, 0.6));
    assert_hyp(&b[0][1], &[A, A], 0.2f64.ln(), 0.2f64.ln() / lp(3, 0.6));
    // Beam 3 also takes EOS at the first step (0.1) into its third slot; the best stays the same.
    let b3 = search(&trap, &[0], &[3], cfg(3, 0.0, 3));
    assert_eq!(b3[0].len(), 3);
    assert_hyp(&b3[0][0], &[B], 0.36f64.ln(), 0.36f64.ln());
    assert_hyp(&b3[0][1], &[A, A], 0.2f64.ln(), 0.2f64.ln());
    assert_hyp(&b3[0][2], &[], 0.1f64.ln(), 0.1f64.ln());
}

/// Stopping at once (P = 0.55) against three a's then EOS (P = 0.45 · 0.99²).
fn short_or_long(_: usize, prefix: &[u32]) -> [f64; V] {
    match prefix.len() {
        0 => probs(&[(EOS, 0.55), (A, 0.45)]),
        1 | 2 => probs(&[(A, 0.99), (EOS, 0.01)]),
        _ => probs(&[(EOS, 1.0)]),
    }
}

#[test]
fn length_penalty_decides_between_short_and_long() {
    let long = 0.45f64.ln() + 2.0 * 0.99f64.ln();
    // α = 0: the empty output wins, and the search stops early (a live hypothesis at log 0.45 can
    // never beat log 0.55).
    let h = search(&short_or_long, &[0], &[2], cfg(2, 0.0, 1));
    assert_hyp(&h[0][0], &[], 0.55f64.ln(), 0.55f64.ln());
    // α = 0.6: lp(4) = 1.2754 is not enough: −0.6098 vs −0.5978.
    let h = search(&short_or_long, &[0], &[2], cfg(2, 0.6, 2));
    assert_hyp(&h[0][0], &[], 0.55f64.ln(), 0.55f64.ln() / lp(1, 0.6));
    assert_hyp(&h[0][1], &[A, A, A], long, long / lp(4, 0.6));
    // α = 2: lp(4) = 2.25 makes the long output win.
    let h = search(&short_or_long, &[0], &[2], cfg(2, 2.0, 1));
    assert_hyp(&h[0][0], &[A, A, A], long, long / lp(4, 2.0));
    // Beam 1 is greedy: EOS first, whatever α.
    let h = search(&short_or_long, &[0], &[2], cfg(1, 2.0, 1));
    assert_hyp(&h[0][0], &[], 0.55f64.ln(), 0.55f64.ln());
}

/// Early exit stops at the first step whose best candidate is EOS: with α = 2 the exact search
/// finds the long output, early exit returns the empty one, and decodes fewer rows.
#[test]
fn early_exit_stops_when_the_best_candidate_finishes() {
    let long = 0.45f64.ln() + 2.0 * 0.99f64.ln();
    let exact = cfg(2, 2.0, 1);
    let quick = BeamConfig { stop: Stop::BestEnds, ..exact };
    let mut s = Scripted::new(&short_or_long, &[0]);
    let h = beam_search(&mut s, &[2], &exact, usize::MAX).unwrap();
    assert_hyp(&h[0][0], &[A, A, A], long, long / lp(4, 2.0));
    let exact_rows = s.rows_fed;
    let mut s = Scripted::new(&short_or_long, &[0]);
    let h = beam_search(&mut s, &[2], &quick, usize::MAX).unwrap();
    assert_hyp(&h[0][0], &[], 0.55f64.ln(), 0.55f64.ln());
    assert_eq!(s.rows_fed, 1, "one step of one row");
    assert_eq!(exact_rows, 1 + 1 + 1 + 1, "the exact search follows the long hypothesis to its EOS");
    // When the best candidate is not EOS, early exit keeps going like the exact search; with nbest 2
    // it needs two finished hypotheses before it may stop.
    let h = search(&trap, &[0], &[3], BeamConfig { stop: Stop::BestEnds, ..cfg(2, 0.6, 2) });
    assert_hyp(&h[0][0], &[B], 0.36f64.ln(), 0.36f64.ln() / lp(2, 0.6));
    assert_hyp(&h[0][1], &[A, A], 0.2f64.ln(), 0.2f64.ln() / lp(3, 0.6));
}

/// CTranslate2's beam search keeps its beam full: [A] ends at step 1 (P 0.3) and its slot goes to
/// [B A] (0.15, the third candidate), which the shrinking beam never sees.
fn refilled(_: usize, prefix: &[u32]) -> [f64; V] {
    const C: u32 = 6;
    match prefix {
        [] => probs(&[(A, 0.6), (B, 0.3), (EOS, 0.05), (C, 0.05)]),
        [A] => probs(&[(EOS, 0.5), (A, 0.3), (B, 0.1), (C, 0.1)]),
        [B] => probs(&[(A, 0.5), (EOS, 0.3), (B, 0.1), (C, 0.1)]),
        [A, A] => probs(&[(A, 0.6), (EOS, 0.2), (B, 0.1), (C, 0.1)]),
        _ => probs(&[(EOS, 0.97), (A, 0.01), (B, 0.01), (C, 0.01)]),
    }
}

/// `Stop::Patience` (CTranslate2's rule), worked by hand on `refilled` at beam 2, α 1, log P
/// divided by the length with the EOS (CTranslate2's `length_penalty`, our `marian` form):
/// - step 1 ranks [A EOS] 0.30, [A A] 0.18, [B A] 0.15, [B EOS] 0.09: [A] finishes (ln 0.3 / 2 =
///   −0.602) and [B A] takes its slot;
/// - step 2 ranks [B A EOS] 0.1455, [A A A] 0.108, [A A EOS] 0.036, [A A B] 0.018: [B A] finishes
///   (ln 0.1455 / 3 = −0.642), the EOS in third place is not taken, [A A A] and [A A B] go on. At
///   patience 1 two have finished: the search ends, [A] best.
/// - At patience 2 step 3 finishes [A A A] (ln 0.10476 / 4 = −0.564) and [A A B] (0.01746): four.
///
/// The exact search (shrinking beam) follows [A A] alone to [A A A], never seeing [B A].
#[test]
fn patience_is_ctranslate2s_full_beam_and_its_count_of_finished_hypotheses() {
    let c2 = |stop, nbest| BeamConfig { stop, length_norm: LengthNorm::Marian, ..cfg(2, 1.0, nbest) };
    let (a, ba) = (0.3f64.ln(), (0.15f64 * 0.97).ln());
    let (aaa, aab) = ((0.108f64 * 0.97).ln(), (0.018f64 * 0.97).ln());
    let h = search(&refilled, &[0], &[3], c2(Stop::Patience(1.0), 2));
    assert_eq!(h[0].len(), 2);
    assert_hyp(&h[0][0], &[A], a, a / 2.0);
    assert_hyp(&h[0][1], &[B, A], ba, ba / 3.0);
    let h = search(&refilled, &[0], &[3], c2(Stop::Patience(2.0), 4));
    assert_eq!(h[0].len(), 4, "nbest may exceed the beam: round(2 · 2) finish");
    assert_hyp(&h[0][0], &[A, A, A], aaa, aaa / 4.0);
    assert_hyp(&h[0][1], &[A], a, a / 2.0);
    assert_hyp(&h[0][2], &[B, A], ba, ba / 3.0);
    assert_hyp(&h[0][3], &[A, A, B], aab, aab / 4.0);
    let h = search(&refilled, &[0], &[3], c2(Stop::Exact, 2));
    assert_eq!(h[0].len(), 2);
    assert_hyp(&h[0][0], &[A, A, A], aaa, aaa / 4.0);
    assert_hyp(&h[0][1], &[A], a, a / 2.0);
    // At α 0 CTranslate2 ends once a step's best candidate has ended ([A] at step 1): two steps,
    // one row then two.
    let mut s = Scripted::new(&refilled, &[0]);
    let h = beam_search(&mut s, &[3], &BeamConfig { alpha: 0.0, ..c2(Stop::Patience(1.0), 1) }, usize::MAX).unwrap();
    assert_eq!((h[0].len(), s.rows_fed), (1, 3));
    assert_hyp(&h[0][0], &[A], a, a);
    for (bad, why) in [
        (c2(Stop::Patience(1.0), 3), "nbest must be between 1 and round(beam · patience) = 2"),
        (c2(Stop::Patience(0.0), 1), "the patience factor must be finite"),
        (c2(Stop::Patience(f32::NAN), 1), "the patience factor must be finite"),
    ] {
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
}

/// `Stop::Transformers` (`generate`'s rule) on `refilled` at beam 2, α 2 (scores ln P / |Y|², the
/// EOS counted), worked by hand. Step 2 finishes [B A] (−1.928 / 9 = −0.214) beside [A] (−1.204 / 4
/// = −0.301): two, so patience 1 stops there with [B A]. `generate` goes on while the best live
/// hypothesis divided by its length so far could still win: [A A A] at ln 0.108 / 3² = −0.247
/// beats −0.301. Step 3 finishes [A A A] (ln 0.10476 / 16 = −0.141) and [A A B] (−0.253); the two
/// best kept are [A A A] and [B A], and the best live one, [A A A A] at ln 0.00108 / 4² = −0.427,
/// cannot beat −0.214: it stops.
#[test]
fn transformers_stop_keeps_the_beam_best_finished_and_its_length_heuristic() {
    let hf = |stop| BeamConfig { stop, length_norm: LengthNorm::Marian, ..cfg(2, 2.0, 2) };
    let (a, ba, aaa) = (0.3f64.ln(), (0.15f64 * 0.97).ln(), (0.108f64 * 0.97).ln());
    let mut s = Scripted::new(&refilled, &[0]);
    let h = beam_search(&mut s, &[3], &hf(Stop::Transformers), usize::MAX).unwrap();
    assert_eq!(h[0].len(), 2);
    assert_hyp(&h[0][0], &[A, A, A], aaa, aaa / 16.0);
    assert_hyp(&h[0][1], &[B, A], ba, ba / 9.0);
    assert_eq!(s.rows_fed, 1 + 2 + 2 + 2, "four steps, the beam full after the first");
    let h = search(&refilled, &[0], &[3], hf(Stop::Patience(1.0)));
    assert_hyp(&h[0][0], &[B, A], ba, ba / 9.0);
    assert_hyp(&h[0][1], &[A], a, a / 4.0);
    let e = BeamConfig { nbest: 3, ..hf(Stop::Transformers) }.validate().unwrap_err().to_string();
    assert!(e.contains("nbest must be between 1 and the beam size 2"), "{e}");
}

/// A model that hardly ever wants to stop.
fn chatty(_: usize, _: &[u32]) -> [f64; V] {
    probs(&[(A, 0.9), (B, 0.0999), (EOS, 0.0001)])
}

#[test]
fn the_length_limit_forces_eos() {
    // max_len = 1.0 · 2 + 3 = 5 output tokens, then EOS is forced.
    let c = BeamConfig {
        beam: 2,
        alpha: 0.6,
        max_len_a: 1.0,
        max_len_b: 3,
        nbest: 2,
        stop: Stop::Exact,
        length_norm: LengthNorm::Gnmt,
        suppress_unk: false,
        controls: Controls::default(),
        sampling: None,
        end_at_limit: false,
    };
    let h = search(&chatty, &[0], &[2], c);
    let lpa = 5.0 * 0.9f64.ln() + 0.0001f64.ln();
    assert_hyp(&h[0][0], &[A; 5], lpa, lpa / lp(6, 0.6));
    let lpb = 4.0 * 0.9f64.ln() + 0.0999f64.ln() + 0.0001f64.ln();
    assert_eq!(h[0][1].tokens.len(), 5);
    assert!((h[0][1].log_prob - lpb).abs() < 1e-6);
    // max_len_a scales the source length; the caller's cap wins over the config.
    let c = BeamConfig {
        beam: 1,
        alpha: 0.6,
        max_len_a: 0.5,
        max_len_b: 1,
        nbest: 1,
        stop: Stop::Exact,
        length_norm: LengthNorm::Gnmt,
        suppress_unk: false,
        controls: Controls::default(),
        sampling: None,
        end_at_limit: false,
    };
    assert_eq!(search(&chatty, &[0], &[5], c)[0][0].tokens, vec![A; 3]);
    let mut s = Scripted::new(&chatty, &[0]);
    assert_eq!(beam_search(&mut s, &[5], &BeamConfig::translation(), 2).unwrap()[0][0].tokens, vec![A; 2]);
    // A limit of zero: only EOS.
    let c = BeamConfig {
        beam: 3,
        alpha: 0.6,
        max_len_a: 0.0,
        max_len_b: 0,
        nbest: 1,
        stop: Stop::Exact,
        length_norm: LengthNorm::Gnmt,
        suppress_unk: false,
        controls: Controls::default(),
        sampling: None,
        end_at_limit: false,
    };
    assert_hyp(&search(&chatty, &[0], &[5], c)[0][0], &[], 0.0001f64.ln(), 0.0001f64.ln());
}

#[test]
fn a_beam_holding_everything_finds_the_exhaustive_best() {
    // 4 continuing tokens, up to 3 of them: 1 + 4 + 16 + 64 = 85 outputs.
    for alpha in [0.0, 0.3, 0.6, 1.0, 2.0] {
        for sent in 0..4 {
            let want = exhaustive(sent, 3, alpha);
            assert_eq!(want.len(), 85);
            let c = BeamConfig {
                beam: 85,
                alpha,
                max_len_a: 0.0,
                max_len_b: 3,
                nbest: 5,
                stop: Stop::Exact,
                length_norm: LengthNorm::Gnmt,
                suppress_unk: false,
                controls: Controls::default(),
                sampling: None,
                end_at_limit: false,
            };
            let got = search(&random_table, &[sent], &[7], c);
            for (k, (h, (tokens, score))) in got[0].iter().zip(&want).enumerate() {
                assert_eq!(&h.tokens, tokens, "α {alpha} sentence {sent} rank {k}");
                assert!((h.score - score).abs() < 1e-9, "α {alpha} rank {k}: {} vs {score}", h.score);
            }
            assert_eq!(got[0].len(), 5);
            // Smaller beams never score above the exhaustive best.
            for beam in [1, 2, 4] {
                let c = BeamConfig {
                    beam,
                    alpha,
                    max_len_a: 0.0,
                    max_len_b: 3,
                    nbest: 1,
                    stop: Stop::Exact,
                    length_norm: LengthNorm::Gnmt,
                    suppress_unk: false,
                    controls: Controls::default(),
                    sampling: None,
                    end_at_limit: false,
                };
                let h = &search(&random_table, &[sent], &[7], c)[0][0];
                assert!(h.score <= want[0].1 + 1e-12);
                assert!(!h.tokens.iter().any(|&t| t < 3 || t == EOS));
            }
        }
    }
}

#[test]
fn batched_sentences_decode_as_they_would_alone() {
    let sents = [0, 1, 2, 3, 4];
    let lens = [3, 0, 1, 6, 2];
    for (beam, alpha) in [(1, 0.6), (3, 0.6), (5, 1.0)] {
        let c = BeamConfig { max_len_b: 2, ..cfg(beam, alpha, beam.min(2)) };
        let together = search(&random_table, &sents, &lens, c);
        for (i, (&s, &l)) in sents.iter().zip(&lens).enumerate() {
            let alone = search(&random_table, &[s], &[l], c);
            assert_eq!(together[i], alone[0], "beam {beam} sentence {s}");
        }
    }
}

/// Scores handed over unnormalised, each row shifted by its own constant with that constant as its
/// normaliser: the search must subtract each row's own normaliser and find the same hypotheses.
#[test]
fn per_row_normalisers_are_subtracted() {
    let sents = [0, 1, 2, 3, 4];
    let lens = [3, 5, 2, 4, 6];
    for beam in [1, 3, 4] {
        let c = BeamConfig { max_len_b: 2, ..cfg(beam, 0.6, beam.min(2)) };
        let plain = search(&random_table, &sents, &lens, c);
        let mut s = Scripted::new(&random_table, &sents);
        s.shift = 3.0;
        let shifted = beam_search(&mut s, &lens, &c, usize::MAX).unwrap();
        for (a, b) in plain.iter().zip(&shifted) {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                assert_eq!(x.tokens, y.tokens, "beam {beam}");
                assert!((x.log_prob - y.log_prob).abs() < 1e-5, "{} vs {}", x.log_prob, y.log_prob);
            }
        }
    }
}

#[test]
fn bad_settings_are_refused() {
    let mut s = Scripted::new(&chatty, &[0]);
    for (c, msg) in [
        (BeamConfig { beam: 0, ..BeamConfig::translation() }, "beam size"),
        (BeamConfig { nbest: 5, ..BeamConfig::translation() }, "nbest"),
        (BeamConfig { alpha: -1.0, ..BeamConfig::translation() }, "α"),
        (BeamConfig { max_len_a: f64::NAN, ..BeamConfig::translation() }, "max_len_a"),
    ] {
        let e = beam_search(&mut s, &[1], &c, 10).unwrap_err().to_string();
        assert!(e.contains(msg), "{e}");
    }
    assert_eq!(SearchPreset::Parsing.config(), BeamConfig::parsing());
    assert_eq!(BeamConfig::for_task(transformer::Task::Parsing), BeamConfig::parsing());
    assert_eq!(BeamConfig::for_task(transformer::Task::Translation), BeamConfig::translation());
    assert_eq!(
        (BeamConfig::parsing().beam, BeamConfig::parsing().alpha, BeamConfig::parsing().max_len_b),
        (21, 0.3, 300)
    );
    let names: Vec<&str> = SearchPreset::ALL.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["translation", "parsing", "greedy"]);
    // Overrides replace what they name, keep the rest, and are checked.
    let o = SearchOverrides { beam: Some(6), nbest: Some(2), ..Default::default() };
    assert_eq!(
        BeamConfig::translation().with(&o).unwrap(),
        BeamConfig { beam: 6, nbest: 2, ..BeamConfig::translation() }
    );
    let bad = SearchOverrides { nbest: Some(9), ..Default::default() };
    assert!(BeamConfig::translation().with(&bad).unwrap_err().to_string().contains("nbest"));
}

/// On a real (random) model, beam 1 equals greedy decoding by repeated full forward passes, and a
/// beam holding every hypothesis finds the exhaustive best under the model's own probabilities.
#[test]
fn model_beam_search_agrees_with_full_forward_search() {
    let config = ModelConfig {
        n_layers: 2,
        d_model: 16,
        d_ff: 24,
        n_heads: 2,
        d_k: 8,
        d_v: 8,
        dropout: 0.0,
        attention_dropout: 0.0,
        label_smoothing: 0.0,
        positions: Positions::Sinusoidal,
        max_positions: 16,
        vocab_size: V,
        layer_norm_eps: 1e-6,
        ..transformer::ModelConfig::base()
    };
    let mut m = Transformer::new(config, 4).unwrap();
    let mut rng = Rng::new(8);
    for p in &mut m.params {
        *p += ((rng.uniform() * 2.0 - 1.0) * 0.5) as f32;
    }
    let srcs: Vec<Vec<u32>> = vec![vec![4, 5, 6], vec![6], vec![5, 5, 4, 6, 3]];
    let refs: Vec<&[u32]> = srcs.iter().map(|s| s.as_slice()).collect();
    let mut ws = Workspace::new();
    let mut memo: HashMap<(usize, Vec<u32>), Vec<f64>> = HashMap::new();
    let mut next = |ws: &mut Workspace, i: usize, prefix: &[u32]| -> Vec<f64> {
        memo.entry((i, prefix.to_vec()))
            .or_insert_with(|| {
                let batch = Batch::from_pairs(&[(srcs[i].clone(), prefix.to_vec())]);
                m.forward(&batch, ws, None).unwrap();
                let row = &ws.logits[prefix.len() * V..(prefix.len() + 1) * V];
                let mx = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x as f64));
                let lse = mx + row.iter().map(|&x| (x as f64 - mx).exp()).sum::<f64>().ln();
                row.iter().map(|&x| x as f64 - lse).collect()
            })
            .clone()
    };
    let c = BeamConfig {
        beam: 1,
        alpha: 0.6,
        max_len_a: 0.0,
        max_len_b: 4,
        nbest: 1,
        stop: Stop::Exact,
        length_norm: LengthNorm::Gnmt,
        suppress_unk: false,
        controls: Controls::default(),
        sampling: None,
        end_at_limit: false,
    };
    let got = translate_batch(&m, &refs, &c, &mut ws).unwrap();
    for i in 0..srcs.len() {
        let mut prefix = Vec::new();
        let mut logp = 0.0;
        loop {
            let lp_row = next(&mut ws, i, &prefix);
            let best = if prefix.len() == 4 {
                EOS as usize
            } else {
                (2..V).max_by(|&a, &b| lp_row[a].total_cmp(&lp_row[b]).then(b.cmp(&a))).unwrap()
            };
            logp += lp_row[best];
            if best == EOS as usize {
                break;
            }
            prefix.push(best as u32);
        }
        assert_eq!(got[i][0].tokens, prefix, "sentence {i}");
        assert!((got[i][0].log_prob - logp).abs() < 1e-4, "{} vs {logp}", got[i][0].log_prob);
    }
    // Exhaustive over 4 continuing tokens (UNK, 4, 5, 6) and up to 3 of them.
    let alpha = 0.6;
    let c = BeamConfig {
        beam: 85,
        alpha,
        max_len_a: 0.0,
        max_len_b: 3,
        nbest: 3,
        stop: Stop::Exact,
        length_norm: LengthNorm::Gnmt,
        suppress_unk: false,
        controls: Controls::default(),
        sampling: None,
        end_at_limit: false,
    };
    let got = translate_batch(&m, &refs, &c, &mut ws).unwrap();
    for i in 0..srcs.len() {
        let mut all = Vec::new();
        let mut stack = vec![(Vec::<u32>::new(), 0.0f64)];
        while let Some((prefix, logp)) = stack.pop() {
            let row = next(&mut ws, i, &prefix);
            all.push((prefix.clone(), (logp + row[EOS as usize]) / lp(prefix.len() + 1, alpha)));
            if prefix.len() < 3 {
                for t in 3..V as u32 {
                    let mut q = prefix.clone();
                    q.push(t);
                    stack.push((q, logp + row[t as usize]));
                }
            }
        }
        all.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (k, h) in got[i].iter().enumerate() {
            assert_eq!(h.tokens, all[k].0, "sentence {i} rank {k}");
            assert!((h.score - all[k].1).abs() < 1e-4, "sentence {i} rank {k}: {} vs {}", h.score, all[k].1);
        }
    }
}

/// Search settings out of range are refused (a huge beam would allocate without bound), and the
/// length limit saturates instead of wrapping (which would truncate every output silently).
#[test]
fn out_of_range_search_settings_are_refused_and_the_length_limit_never_wraps() {
    let ok = BeamConfig::translation();
    for (what, cfg) in [
        ("beam", BeamConfig { beam: 4_294_967_295, ..ok }),
        ("beam", BeamConfig { beam: 0, ..ok }),
        ("max_len_a", BeamConfig { max_len_a: 1e300, ..ok }),
        ("max_len_a", BeamConfig { max_len_a: f64::NAN, ..ok }),
        ("max_len_b", BeamConfig { max_len_b: usize::MAX, ..ok }),
        ("nbest", BeamConfig { nbest: 5, ..ok }),
    ] {
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains(what), "{what}: {err}");
    }
    let wide = BeamConfig { max_len_a: 1000.0, max_len_b: 1 << 20, ..ok };
    wide.validate().unwrap();
    assert_eq!(wide.max_len(1000), 1_000_000 + (1 << 20));
    assert_eq!(BeamConfig { max_len_a: 0.0, max_len_b: usize::MAX, ..ok }.max_len(3), usize::MAX);
}

/// A second model for the ensemble tests: it prefers b at the first step.
fn trap_b(_: usize, prefix: &[u32]) -> [f64; V] {
    match prefix {
        [] => probs(&[(A, 0.2), (B, 0.7), (EOS, 0.1)]),
        [A] => probs(&[(A, 0.5), (B, 0.3), (EOS, 0.2)]),
        [B] => probs(&[(EOS, 0.8), (A, 0.1), (B, 0.1)]),
        _ => probs(&[(EOS, 1.0)]),
    }
}

#[test]
fn an_ensemble_averages_log_probabilities_at_every_step() {
    // One member (with normalisers that are not zero) gives exactly what the member gives.
    for beam in [1, 2, 3] {
        let alone = search(&trap, &[0], &[3], cfg(beam, 0.6, beam));
        let mut member = Scripted::new(&trap, &[0]);
        member.shift = 0.7;
        let mut one = EnsembleScorer::new(vec![member]).unwrap();
        let got = beam_search(&mut one, &[3], &cfg(beam, 0.6, beam), usize::MAX).unwrap();
        assert_eq!(got.len(), alone.len());
        for (g, a) in got[0].iter().zip(&alone[0]) {
            assert_hyp(g, &a.tokens, a.log_prob, a.score);
        }
    }
    // The pair, by hand: log p(x) = ½ (log p₁(x) + log p₂(x)) at each step. Greedy: a scores
    // ½ ln(0.5 · 0.2) = ln 0.316, b ½ ln(0.4 · 0.7) = ln 0.529, so b (trap alone takes a); then
    // EOS, ½ ln(0.9 · 0.8). Beam 2 also keeps a, whose best finish is a a EOS: ½ ln(0.4 · 0.5)
    // then ½ ln(1 · 1).
    let pair = |shift: f32| {
        let mut x = Scripted::new(&trap, &[0]);
        let mut y = Scripted::new(&trap_b, &[0]);
        (x.shift, y.shift) = (shift, 2.0 * shift);
        EnsembleScorer::new(vec![x, y]).unwrap()
    };
    let b_eos = 0.5 * (0.4f64 * 0.7).ln() + 0.5 * (0.9f64 * 0.8).ln();
    let a_a = 0.5 * (0.5f64 * 0.2).ln() + 0.5 * (0.4f64 * 0.5).ln();
    let g = beam_search(&mut pair(0.0), &[3], &cfg(1, 0.6, 1), usize::MAX).unwrap();
    assert_hyp(&g[0][0], &[B], b_eos, b_eos / lp(2, 0.6));
    let b2 = beam_search(&mut pair(0.3), &[3], &cfg(2, 0.6, 2), usize::MAX).unwrap();
    assert_eq!(b2[0].len(), 2);
    assert_hyp(&b2[0][0], &[B], b_eos, b_eos / lp(2, 0.6));
    assert_hyp(&b2[0][1], &[A, A], a_a, a_a / lp(3, 0.6));
    // Members of different vocabulary sizes, or none, are refused.
    assert!(EnsembleScorer::<Scripted>::new(Vec::new()).is_err());
}

/// A model that repeats itself: a (0.5) over b (0.3) over EOS (0.2), whatever came before.
fn repeater(_: usize, _: &[u32]) -> [f64; V] {
    probs(&[(A, 0.5), (B, 0.3), (EOS, 0.2)])
}

/// CTranslate2's controls, naively and in f64: the next-token log-probabilities of `table` after
/// `prefix`, the controls applied to its logits (ln p) and normalised again; `None` for a token
/// they disable. At the length limit EOS is never disabled.
fn controlled(table: &Table, prefix: &[u32], c: &Controls, at_limit: bool) -> Vec<Option<f64>> {
    let mut logits: Vec<Option<f64>> = table(0, prefix).iter().map(|&p| (p > 0.0).then(|| p.ln())).collect();
    for (t, x) in logits.iter_mut().enumerate() {
        let t = t as u32;
        if let Some(l) = x {
            if prefix.contains(&t) {
                let p = f64::from(c.repetition_penalty);
                *l = if *l < 0.0 { *l * p } else { *l / p };
            }
        }
        if t == EOS && prefix.len() < c.min_len && !at_limit {
            *x = None;
        }
        let n = c.no_repeat_ngram;
        if n > 0 && prefix.len() >= n {
            let mut gram = prefix[prefix.len() + 1 - n..].to_vec();
            gram.push(t);
            if prefix.windows(n).any(|w| w == gram.as_slice()) {
                *x = None;
            }
        }
    }
    let z = logits.iter().flatten().map(|l| l.exp()).sum::<f64>().ln();
    logits.into_iter().map(|l| l.map(|l| l - z)).collect()
}

/// Greedy search under the controls, naively: the best token each step (EOS ends it, as does the
/// length `limit`), with its log-probability.
fn naive_greedy(table: &Table, c: &Controls, limit: usize) -> (Vec<u32>, f64) {
    let (mut out, mut log_prob) = (Vec::new(), 0.0);
    loop {
        let lp = controlled(table, &out, c, out.len() == limit);
        if out.len() == limit {
            return (out, log_prob + lp[EOS as usize].expect("EOS at the limit"));
        }
        let (t, x) = (3..V as u32) // PAD and BOS are never written; EOS is 2
            .chain([EOS])
            .filter_map(|t| lp[t as usize].map(|x| (t, x)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .unwrap();
        log_prob += x;
        if t == EOS {
            return (out, log_prob);
        }
        out.push(t);
    }
}

/// The minimum length, the repetition penalty and the n-gram block, as CTranslate2 defines them, on
/// a model that repeats: greedy search gives what the naive f64 reading of each definition gives,
/// token for token and log-probability to f32 rounding; a beam's every hypothesis obeys them.
#[test]
fn the_repetition_and_length_controls_do_what_ctranslate2_defines() {
    let plain = Controls::default();
    let cases = [
        Controls { no_repeat_ngram: 2, ..plain },
        Controls { no_repeat_ngram: 3, ..plain },
        Controls { repetition_penalty: 1.8, ..plain },
        Controls { repetition_penalty: 3.0, ..plain },
        Controls { min_len: 4, ..plain },
        Controls { min_len: 3, repetition_penalty: 2.0, no_repeat_ngram: 2 },
    ];
    let limit = 8;
    let base = BeamConfig { max_len_a: 0.0, max_len_b: limit, ..cfg(1, 0.0, 1) };
    // Without controls the model repeats `a` up to the limit.
    let free = search(&repeater, &[0], &[1], base)[0][0].clone();
    assert_eq!(free.tokens, vec![A; limit]);
    for c in cases {
        let greedy = BeamConfig { controls: c, ..base };
        let h = &search(&repeater, &[0], &[1], greedy)[0][0];
        let (tokens, log_prob) = naive_greedy(&repeater, &c, limit);
        assert_hyp(h, &tokens, log_prob, log_prob);
        // Each control changes the output, or (a minimum length below it) its probability.
        assert!(h.tokens != free.tokens || (h.log_prob - free.log_prob).abs() > 1e-3, "{c:?} changed nothing");
        let beam = BeamConfig { controls: c, ..cfg(4, 0.6, 4) };
        for h in &search(&repeater, &[0], &[1], BeamConfig { max_len_b: limit, max_len_a: 0.0, ..beam })[0] {
            assert!(h.tokens.len() >= c.min_len, "{c:?}: {:?}", h.tokens);
            let n = c.no_repeat_ngram;
            if n > 0 {
                let grams: Vec<&[u32]> = h.tokens.windows(n).collect();
                let distinct: std::collections::HashSet<&[u32]> = grams.iter().copied().collect();
                assert_eq!(distinct.len(), grams.len(), "{c:?}: a repeated {n}-gram in {:?}", h.tokens);
            }
        }
    }
    // min_len 4 on a model that wants to stop at once: EOS waits, the length limit still wins.
    let quits = |_: usize, _: &[u32]| probs(&[(EOS, 0.9), (A, 0.1)]);
    let c = BeamConfig { controls: Controls { min_len: 4, ..plain }, max_len_a: 0.0, max_len_b: 2, ..cfg(1, 0.0, 1) };
    assert_eq!(search(&quits, &[0], &[1], c)[0][0].tokens, vec![A; 2]);
    // Bad settings are errors naming the control.
    for p in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let bad = BeamConfig { controls: Controls { repetition_penalty: p, ..plain }, ..base };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("repetition penalty must be finite and > 0"), "{e}");
    }
    let shown = BeamConfig { controls: Controls { min_len: 3, repetition_penalty: 1.2, no_repeat_ngram: 2 }, ..base };
    assert!(shown.to_string().ends_with(", min length 3, repetition penalty 1.2, no repeated 2-gram"), "{shown}");
}

/// a 0.5, b 0.3, c 0.15, EOS 0.05 (c is token 6).
fn spread(_: usize, _: &[u32]) -> [f64; V] {
    probs(&[(A, 0.5), (B, 0.3), (6, 0.15), (EOS, 0.05)])
}

/// The first tokens of `n` one-token samples, one sentence each, counted by token.
fn first_tokens(s: Sampling, n: usize) -> HashMap<u32, usize> {
    let c = BeamConfig { sampling: Some(s), max_len_a: 0.0, max_len_b: 1, ..cfg(1, 0.0, 1) };
    let sents: Vec<usize> = vec![0; n];
    let mut counts = HashMap::new();
    for h in &search(&spread, &sents, &vec![1; n], c) {
        *counts.entry(h[0].tokens.first().copied().unwrap_or(EOS)).or_insert(0) += 1;
    }
    counts
}

/// Pearson's χ² of `counts` against the probabilities `want` (token, p), and that every drawn
/// token is one of them.
fn chi_squared(counts: &HashMap<u32, usize>, want: &[(u32, f64)]) -> f64 {
    let n: usize = counts.values().sum();
    for t in counts.keys() {
        assert!(want.iter().any(|w| w.0 == *t), "token {t} drawn outside {want:?}");
    }
    want.iter()
        .map(|&(t, p)| (counts.get(&t).copied().unwrap_or(0) as f64 - n as f64 * p).powi(2) / (n as f64 * p))
        .sum()
}

/// Sampling draws from the model's distribution (χ² on 10⁴ draws under the 0.1% critical value),
/// under a temperature, within top-k and top-p; near temperature 0 it is greedy search; the same
/// seed gives the same samples whatever the batch, another seed others.
#[test]
fn sampling_draws_from_the_distribution_it_is_asked_for() {
    let s = Sampling { topk: 0, topp: 1.0, temperature: 1.0, seed: 11 };
    let n = 10_000;
    // χ² critical values at p = 0.001: 3 degrees of freedom 16.27, 1 degree 10.83.
    let x = chi_squared(&first_tokens(s, n), &[(A, 0.5), (B, 0.3), (6, 0.15), (EOS, 0.05)]);
    assert!(x < 16.27, "χ² {x}");
    // Temperature 2: p^(1/2), normalised.
    let z: f64 = [0.5f64, 0.3, 0.15, 0.05].iter().map(|p| p.sqrt()).sum();
    let hot: Vec<(u32, f64)> =
        [(A, 0.5f64), (B, 0.3), (6, 0.15), (EOS, 0.05)].iter().map(|&(t, p)| (t, p.sqrt() / z)).collect();
    let x = chi_squared(&first_tokens(Sampling { temperature: 2.0, ..s }, n), &hot);
    assert!(x < 16.27, "χ² at temperature 2: {x}");
    // Top-k 2 and top-p 0.7 both keep a and b only, renormalised.
    for cut in [Sampling { topk: 2, ..s }, Sampling { topp: 0.7, ..s }, Sampling { topk: 3, topp: 0.8, ..s }] {
        let x = chi_squared(&first_tokens(cut, n), &[(A, 0.5 / 0.8), (B, 0.3 / 0.8)]);
        assert!(x < 10.83, "χ² {x} for {cut:?}");
    }
    // Near temperature 0: greedy search, token for token and log-probability.
    for table in [&trap as &Table, &repeater, &spread] {
        let greedy = search(table, &[0, 1], &[3, 3], cfg(1, 0.6, 1));
        let cold = Sampling { temperature: 1e-4, ..s };
        let sampled = search(table, &[0, 1], &[3, 3], BeamConfig { sampling: Some(cold), ..cfg(1, 0.6, 1) });
        assert_eq!(sampled, greedy);
    }
    // Four samples a sentence, each its own; the same seed and key, the same samples in any batch.
    let four = BeamConfig { sampling: Some(s), max_len_b: 6, ..cfg(4, 0.6, 4) };
    let run = |sents: &[usize], keys: &[u64], c: BeamConfig| {
        let mut sc = Scripted::new(&spread, sents);
        let inputs = SentenceInputs { keys, guides: &[] };
        transformer::decode::beam_search_with(&mut sc, &vec![2; sents.len()], &inputs, &c, usize::MAX, None).unwrap()
    };
    let together = run(&[0; 6], &[10, 11, 12, 13, 14, 15], four);
    assert!(together.iter().all(|h| h.len() == 4));
    assert!(together.iter().any(|h| h.iter().any(|x| x.tokens != h[0].tokens)), "four samples, all the same");
    let apart = [run(&[0; 2], &[14, 12], four), run(&[0; 1], &[15], four)].concat();
    assert_eq!(apart, vec![together[4].clone(), together[2].clone(), together[5].clone()]);
    let other_seed =
        run(&[0; 6], &[10, 11, 12, 13, 14, 15], BeamConfig { sampling: Some(Sampling { seed: 12, ..s }), ..four });
    assert_ne!(other_seed, together);
    // Settings that cannot be are errors naming themselves.
    for (bad, why) in [
        (BeamConfig { sampling: Some(s), ..cfg(4, 0.6, 1) }, "nbest (1) must equal the beam size (4)"),
        (
            BeamConfig { sampling: Some(Sampling { temperature: 0.0, ..s }), ..cfg(1, 0.6, 1) },
            "temperature must be finite and > 0",
        ),
        (BeamConfig { sampling: Some(Sampling { topp: 0.0, ..s }), ..cfg(1, 0.6, 1) }, "top-p must lie in (0, 1]"),
        (
            BeamConfig { sampling: Some(s), stop: Stop::BestEnds, ..cfg(1, 0.6, 1) },
            "a stop other than the exact one (early exit, patience, transformers) does not apply",
        ),
        (
            BeamConfig { sampling: Some(s), stop: Stop::Patience(1.0), ..cfg(1, 0.6, 1) },
            "a stop other than the exact one (early exit, patience, transformers) does not apply",
        ),
        (
            BeamConfig { sampling: Some(s), stop: Stop::Transformers, ..cfg(1, 0.6, 1) },
            "a stop other than the exact one (early exit, patience, transformers) does not apply",
        ),
    ] {
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
}

/// A model that never wants to stop: a (0.7), b (0.2), EOS (0.1) after every prefix but b's
/// (a 0.5, b 0.3, EOS 0.2).
fn never_stops(_: usize, prefix: &[u32]) -> [f64; V] {
    match prefix.last() {
        Some(&B) => probs(&[(A, 0.5), (B, 0.3), (EOS, 0.2)]),
        _ => probs(&[(A, 0.7), (B, 0.2), (EOS, 0.1)]),
    }
}

/// At a limit of 2: by default two a's and a forced EOS, scored (0.7 · 0.7 · 0.1, three tokens
/// for the penalty); with `end_at_limit` (CTranslate2's and Marian's limit) two steps and no
/// EOS: 0.7 · 0.7 over two. At beam 2 the last step ends the beam's two best as they stand: a a
/// (0.49) and a b (0.14), not b a (0.2 · 0.5 = 0.10).
#[test]
fn end_at_limit_ends_the_last_step_as_it_stands() {
    let limited = |beam: usize, nbest: usize, end_at_limit: bool| BeamConfig {
        max_len_a: 0.0,
        max_len_b: 2,
        end_at_limit,
        ..cfg(beam, 0.6, nbest)
    };
    let forced = search(&never_stops, &[0], &[3], limited(1, 1, false));
    let p = 0.7f64.ln() * 2.0 + 0.1f64.ln();
    assert_hyp(&forced[0][0], &[A, A], p, p / lp(3, 0.6));
    let cut = search(&never_stops, &[0], &[3], limited(1, 1, true));
    let p = 0.7f64.ln() * 2.0;
    assert_hyp(&cut[0][0], &[A, A], p, p / lp(2, 0.6));
    let b = search(&never_stops, &[0], &[3], limited(2, 2, true));
    assert_eq!(b[0].len(), 2);
    assert_hyp(&b[0][0], &[A, A], 0.49f64.ln(), 0.49f64.ln() / lp(2, 0.6));
    assert_hyp(&b[0][1], &[A, B], 0.14f64.ln(), 0.14f64.ln() / lp(2, 0.6));
    // CTranslate2's full beam ends the same two.
    let p = search(&never_stops, &[0], &[3], BeamConfig { stop: Stop::Patience(1.0), ..limited(2, 2, true) });
    assert_eq!(p[0].iter().map(|h| h.tokens.clone()).collect::<Vec<_>>(), vec![vec![A, A], vec![A, B]]);
    // An EOS at the last step ends as usual: a then EOS, one token.
    let eos_last = |_: usize, prefix: &[u32]| match prefix {
        [] => probs(&[(A, 0.9), (EOS, 0.1)]),
        _ => probs(&[(EOS, 0.8), (A, 0.2)]),
    };
    let e = search(&eos_last, &[0], &[3], limited(1, 1, true));
    assert_hyp(&e[0][0], &[A], 0.72f64.ln(), 0.72f64.ln() / lp(2, 0.6));
}
