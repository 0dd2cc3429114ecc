//! Target prefixes and lexically constrained search (decode/guide.rs) on scripted models: hand-
//! computed hypotheses, agreement with an exhaustive search over the outputs that start with the
//! prefix or contain every phrase, every phrase met on random models, batching, and the refusals.

mod common;

use common::scripted::{exhaustive, lp, probs, random_table, Scripted, Table, A, B};
use transformer::decode::{beam_search_with, BeamConfig, Guide, Hypothesis, Sampling, SentenceInputs};
use transformer::EOS;

const C: u32 = 6;

fn guided(
    table: &Table,
    src_lens: &[usize],
    guides: &[Guide],
    cfg: BeamConfig,
) -> transformer::Result<Vec<Vec<Hypothesis>>> {
    let mut s = Scripted::new(table, &(0..src_lens.len()).collect::<Vec<_>>());
    let refs: Vec<&Guide> = guides.iter().collect();
    beam_search_with(&mut s, src_lens, &SentenceInputs { keys: &[], guides: &refs }, &cfg, usize::MAX, None)
}

fn beam(k: usize, alpha: f64, max_len_b: usize) -> BeamConfig {
    BeamConfig { beam: k, alpha, max_len_a: 0.0, max_len_b, ..BeamConfig::translation() }
}

fn prefix(p: &[u32]) -> Guide {
    Guide { prefix: p.to_vec(), phrases: vec![] }
}

fn phrases(p: &[&[u32]]) -> Guide {
    Guide { prefix: vec![], phrases: p.iter().map(|x| x.to_vec()).collect() }
}

/// Greedy writes a then EOS (P 0.55 · 0.7). After b, a and EOS (0.5 · 0.9); c is rare everywhere.
fn chain(_: usize, prefix: &[u32]) -> [f64; 7] {
    match prefix {
        [] => probs(&[(A, 0.55), (B, 0.3), (C, 0.05), (EOS, 0.1)]),
        [A] => probs(&[(A, 0.1), (B, 0.2), (EOS, 0.7)]),
        [B] => probs(&[(A, 0.5), (C, 0.3), (EOS, 0.2)]),
        [B, A] => probs(&[(EOS, 0.9), (A, 0.05), (B, 0.05)]),
        [B, C] => probs(&[(EOS, 0.8), (C, 0.2)]),
        [A, B] => probs(&[(EOS, 0.6), (C, 0.4)]),
        _ => probs(&[(EOS, 0.9), (A, 0.05), (C, 0.05)]),
    }
}

fn ln(p: f64) -> f64 {
    p.ln() as f32 as f64
}

fn assert_hyp(h: &Hypothesis, tokens: &[u32], log_prob: f64) {
    assert_eq!(h.tokens, tokens, "{h:?}");
    assert!((h.log_prob - log_prob).abs() < 1e-6, "log P {} against {log_prob}", h.log_prob);
}

#[test]
fn a_prefix_is_forced_and_the_search_goes_on_from_it() {
    let free = guided(&chain, &[5], &[Guide::default()], beam(1, 0.0, 10)).unwrap();
    assert_hyp(&free[0][0], &[A], ln(0.55) + ln(0.7));
    // Forced b (0.3), then greedy: a (0.5), EOS (0.9); its log P counts the prefix.
    for k in [1, 2, 4] {
        let h = guided(&chain, &[5], &[prefix(&[B])], beam(k, 0.0, 10)).unwrap();
        assert_hyp(&h[0][0], &[B, A], ln(0.3) + ln(0.5) + ln(0.9));
    }
    // A prefix of probability below the best: still forced, two tokens of it.
    let h = guided(&chain, &[5], &[prefix(&[A, B])], beam(2, 0.0, 10)).unwrap();
    assert_hyp(&h[0][0], &[A, B], ln(0.55) + ln(0.2) + ln(0.6));
    // A prefix the length limit leaves no room after: it is the whole output.
    let h = guided(&chain, &[5], &[prefix(&[B, C])], beam(2, 0.0, 2)).unwrap();
    assert_hyp(&h[0][0], &[B, C], ln(0.3) + ln(0.3) + ln(0.8));
}

#[test]
fn a_phrase_gets_its_own_bank_of_the_beam() {
    // Beam 2, phrase [c]: banks 0 and 1, a slot each. Step 1: a (0.55, bank 0) and c (0.05,
    // bank 1). Step 2: a b (0.11) and a a (0.055) in bank 0, c EOS (0.045) and c a in bank 1:
    // a b lives, c finishes. Step 3: a b c (0.044, bank 1) takes the one slot left (bank 0 has
    // none: two banks, one slot, the fuller first). Step 4: a b c EOS (0.0396) finishes.
    let h = guided(&chain, &[5], &[phrases(&[&[C]])], BeamConfig { nbest: 2, ..beam(2, 0.0, 10) }).unwrap();
    assert_hyp(&h[0][0], &[C], ln(0.05) + ln(0.9));
    assert_hyp(&h[0][1], &[A, B, C], ln(0.55) + ln(0.2) + ln(0.4) + ln(0.9));
    // Greedy with a phrase always takes what advances it furthest: c at once.
    let h = guided(&chain, &[5], &[phrases(&[&[C]])], beam(1, 0.0, 10)).unwrap();
    assert_hyp(&h[0][0], &[C], ln(0.05) + ln(0.9));
    // A prefix and a phrase: b forced, then c (bank 1) beside a (bank 0); b c EOS is met.
    let g = Guide { prefix: vec![B], phrases: vec![vec![C]] };
    let h = guided(&chain, &[5], &[g], beam(2, 0.0, 10)).unwrap();
    assert_hyp(&h[0][0], &[B, C], ln(0.3) + ln(0.3) + ln(0.8));
}

fn contains(hay: &[u32], needle: &[u32]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_beam_holding_everything_finds_the_exhaustive_best_that_obeys() {
    // Up to 3 tokens: 85 outputs, all kept by a beam of 85.
    let cases: [(&[u32], &[&[u32]]); 6] =
        [(&[], &[&[B]]), (&[], &[&[A, C]]), (&[], &[&[C], &[3]]), (&[], &[&[B, B]]), (&[A], &[]), (&[C, A], &[&[B]])];
    for alpha in [0.0, 0.6, 2.0] {
        for sent in 0..4 {
            let all = exhaustive(sent, 3, alpha);
            for (pre, ph) in cases {
                let g = Guide { prefix: pre.to_vec(), phrases: ph.iter().map(|p| p.to_vec()).collect() };
                let obeys = |t: &[u32]| t.starts_with(pre) && ph.iter().all(|p| contains(t, p));
                let want: Vec<&(Vec<u32>, f64)> = all.iter().filter(|(t, _)| obeys(t)).take(3).collect();
                let mut s = Scripted::new(&random_table, &[sent]);
                let refs = [&g];
                let cfg = BeamConfig { nbest: 3, ..beam(85, alpha, 3) };
                let got = beam_search_with(
                    &mut s,
                    &[7],
                    &SentenceInputs { keys: &[], guides: &refs },
                    &cfg,
                    usize::MAX,
                    None,
                )
                .unwrap()
                .remove(0);
                // Fewer than 3 obey (c a b is the only output of 3 tokens with that prefix and
                // phrase): the rest of the list is what the length limit stopped short.
                assert_eq!(got.len(), 3);
                assert!(!want.is_empty());
                assert!(got[want.len()..].iter().all(|h| !obeys(&h.tokens)), "{got:?}");
                for (k, (h, (tokens, score))) in got.iter().zip(&want).enumerate() {
                    let what = format!("α {alpha}, sentence {sent}, {g:?}, rank {k}");
                    assert_eq!(&h.tokens, tokens, "{what}");
                    assert!((h.score - score).abs() < 1e-9, "{what}: {} against {score}", h.score);
                    assert!((h.score - h.log_prob / lp(h.tokens.len() + 1, alpha)).abs() < 1e-12);
                }
            }
        }
    }
}

#[test]
fn every_phrase_is_met_on_random_models_and_batches_change_nothing() {
    // 40 sentences of random models, phrases of 1–3 tokens, 1–3 of them, beams of 2 to 6.
    let mut guides = Vec::new();
    let mut rng = transformer::rng::Rng::new(5);
    for _ in 0..40 {
        let n = 1 + rng.below(3) as usize;
        let ph: Vec<Vec<u32>> =
            (0..n).map(|_| (0..1 + rng.below(3)).map(|_| 3 + rng.below(4) as u32).collect()).collect();
        let pre: Vec<u32> = (0..rng.below(3)).map(|_| 3 + rng.below(4) as u32).collect();
        guides.push(Guide { prefix: pre, phrases: ph });
    }
    for k in [2, 4, 6] {
        let cfg = beam(k, 0.6, 16);
        let together = guided(&random_table, &[9; 40], &guides, cfg).unwrap();
        for (g, h) in guides.iter().zip(&together) {
            let t = &h[0].tokens;
            assert!(t.starts_with(&g.prefix), "beam {k}: {t:?} does not start with {:?}", g.prefix);
            for p in &g.phrases {
                assert!(contains(t, p), "beam {k}: {t:?} lacks {p:?} ({g:?})");
            }
        }
        // Each sentence alone gives what it gave in the batch.
        for i in [0, 17, 39] {
            let mut s = Scripted::new(&random_table, &[i]);
            let refs = [&guides[i]];
            let alone =
                beam_search_with(&mut s, &[9], &SentenceInputs { keys: &[], guides: &refs }, &cfg, usize::MAX, None)
                    .unwrap();
            assert_eq!(alone[0], together[i], "beam {k}, sentence {i}");
        }
    }
    // Unguided sentences in a guided batch decode as without guides.
    let mixed = vec![Guide::default(), guides[3].clone(), Guide::default()];
    let free = guided(&random_table, &[9; 3], &[], beam(4, 0.6, 16)).unwrap();
    let with = guided(&random_table, &[9; 3], &mixed, beam(4, 0.6, 16)).unwrap();
    assert_eq!((&with[0], &with[2]), (&free[0], &free[2]));
}

#[test]
fn samples_start_with_the_prefix() {
    let s = Sampling { topk: 0, topp: 1.0, temperature: 1.0, seed: 3 };
    let cfg = BeamConfig { sampling: Some(s), nbest: 4, ..beam(4, 0.6, 8) };
    let h = guided(&random_table, &[5; 2], &[prefix(&[C, A]), Guide::default()], cfg).unwrap();
    assert!(h[0].iter().all(|x| x.tokens.starts_with(&[C, A])), "{:?}", h[0]);
    assert!(h[0].iter().any(|x| x.tokens != h[0][0].tokens), "four samples, all the same");
    // The unguided sentence samples what it samples alone.
    let alone = guided(&random_table, &[5; 2], &[], cfg).unwrap();
    assert_eq!(h[1], alone[1]);
}

#[test]
fn guides_that_cannot_be_met_are_refused_by_name() {
    let cfg = beam(4, 0.6, 3);
    let err = |g: &[Guide], c: BeamConfig| guided(&chain, &vec![5; g.len().max(1)], g, c).unwrap_err().to_string();
    let e = err(&[phrases(&[&[A, B], &[C, C]])], cfg);
    assert!(e.contains("sentence 1") && e.contains("take 4 tokens") && e.contains("at most 3"), "{e}");
    let e = err(&[phrases(&[&[A, EOS]])], cfg);
    assert!(e.contains("special token"), "{e}");
    let e = err(&[prefix(&[9])], cfg);
    assert!(e.contains("token id 9") && e.contains("vocabulary of 7"), "{e}");
    let sampling = BeamConfig { sampling: Some(Sampling { topk: 0, topp: 1.0, temperature: 1.0, seed: 0 }), ..cfg };
    let e = err(&[phrases(&[&[A]])], BeamConfig { nbest: 4, ..sampling });
    assert!(e.contains("not to sampling"), "{e}");
    // One guide for two sentences.
    let mut s = Scripted::new(&chain, &[0, 1]);
    let g = Guide::default();
    let e = beam_search_with(&mut s, &[5, 5], &SentenceInputs { keys: &[], guides: &[&g] }, &cfg, usize::MAX, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 prefixes and phrase lists for 2 sentences"), "{e}");
}

/// Under `end_at_limit` a phrase met by the token of the last step counts as met: at a limit of
/// one step, beam 2, phrase [c], the cut c (0.05) has its phrase and comes before a (0.55),
/// which has not.
#[test]
fn a_phrase_met_on_the_cut_step_is_met() {
    let cfg = BeamConfig { nbest: 2, end_at_limit: true, ..beam(2, 0.0, 1) };
    let h = guided(&chain, &[5], &[phrases(&[&[C]])], cfg).unwrap();
    assert_eq!(h[0].len(), 2);
    assert_hyp(&h[0][0], &[C], ln(0.05));
    assert_hyp(&h[0][1], &[A], ln(0.55));
}
