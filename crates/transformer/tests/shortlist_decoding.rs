//! Decoding over a vocabulary shortlist (Marian's `--shortlist`, CTranslate2's `use_vmap`): the
//! output layer over the batch's listed targets only. A list of every id decodes exactly as the
//! whole vocabulary; a small list writes its ids only, and greedy search over it is, step by step,
//! the argmax of the full logits restricted to the list.

mod common;

use common::TestDir;
use std::collections::BTreeMap;
use transformer::data::bpe::Bpe;
use transformer::decode::shortlist::{Shortlist, FORMAT};
use transformer::decode::translator::{DecodeOptions, SessionOptions, Translator};
use transformer::decode::{BeamConfig, Guide};
use transformer::model::Workspace;
use transformer::vocab::{BOS, EOS, PAD, SPECIAL_TOKENS};
use transformer::{ModelConfig, Positions, Precision, Transformer};

fn lines() -> Vec<String> {
    let path = transformer::test_support::multi30k("val.en.gz");
    transformer::data::corpus::read_lines(&path).unwrap().into_iter().take(300).collect()
}

fn bpe() -> Bpe {
    Bpe::learn(lines().iter(), 400, 2).unwrap()
}

fn config(vocab_size: usize) -> ModelConfig {
    ModelConfig {
        n_layers: 2,
        d_model: 32,
        d_ff: 64,
        n_heads: 2,
        d_k: 16,
        d_v: 16,
        positions: Positions::Sinusoidal,
        max_positions: 64,
        vocab_size,
        ..ModelConfig::base()
    }
}

fn translator(precision: Precision, seed: u64) -> Translator {
    let bpe = bpe();
    let model = Transformer::new(config(bpe.vocab_size()), seed).unwrap();
    Translator::new(model, bpe, SessionOptions { precision, ..Default::default() }).unwrap()
}

fn options(use_shortlist: bool) -> DecodeOptions {
    let mut search = BeamConfig::translation();
    search.max_len_b = 10;
    search.nbest = 2;
    DecodeOptions { search, max_tokens: 256, max_sentences: 8, workers: 1, use_shortlist }
}

/// A list for `t`'s tokenizer: `frequent` and, per source id, its targets.
fn list(t: &Translator, frequent: Vec<u32>, sources: &[(u32, Vec<u32>)]) -> Shortlist {
    Shortlist {
        format: FORMAT.into(),
        vocab_hash: t.tokenizer().hash().to_string(),
        vocab_size: t.tokenizer().vocab_size(),
        frequent,
        sources: sources.iter().map(|(s, l)| (s.to_string(), l.clone())).collect::<BTreeMap<_, _>>(),
    }
}

/// (tokens, log P, score) of every hypothesis, as bits.
fn run(t: &Translator, input: &[String], opts: &DecodeOptions) -> Vec<Vec<(Vec<u32>, u64, u64)>> {
    let (out, _) = t.translate(input, opts, &mut ()).unwrap();
    out.into_iter()
        .map(|l| {
            l.into_iter()
                .map(|x| (x.hypothesis.tokens, x.hypothesis.log_prob.to_bits(), x.hypothesis.score.to_bits()))
                .collect()
        })
        .collect()
}

#[test]
fn a_shortlist_of_every_id_decodes_bit_for_bit_as_the_whole_vocabulary() {
    let input: Vec<String> = lines().into_iter().take(24).collect();
    for precision in [Precision::F32, Precision::Bf16, Precision::Int8] {
        if let Err(why) = precision.available() {
            eprintln!("{precision:?} skipped: {why}");
            continue;
        }
        let mut t = translator(precision, 7);
        let v = t.tokenizer().vocab_size() as u32;
        let full = run(&t, &input, &options(false));
        t.set_shortlist(list(&t, (0..v).collect(), &[])).unwrap();
        assert_eq!(run(&t, &input, &options(true)), full, "{precision:?}");
        // The list given but not asked for: the whole vocabulary.
        assert_eq!(run(&t, &input, &options(false)), full, "{precision:?}");
    }
}

/// Every id the session may write for these sources: the list's union and the special tokens.
fn allowed(l: &Shortlist, srcs: &[Vec<u32>]) -> Vec<u32> {
    let mut ids = l.for_sources(srcs);
    ids.extend(0..SPECIAL_TOKENS as u32);
    ids
}

#[test]
fn a_small_shortlist_writes_its_ids_only() {
    let input: Vec<String> = lines().into_iter().skip(30).take(16).collect();
    for precision in [Precision::F32, Precision::Int8] {
        let mut t = translator(precision, 11);
        let srcs: Vec<Vec<u32>> = input.iter().map(|l| t.encode_source(l).unwrap()).collect();
        let full = run(&t, &input, &options(false));
        // 40 frequent ids, and 3 more for the first sentence's first token.
        let frequent: Vec<u32> = (SPECIAL_TOKENS as u32..).step_by(7).take(40).collect();
        let extra = vec![300, 301, 302];
        let l = list(&t, frequent, &[(srcs[0][0], extra.clone())]);
        let ok = allowed(&l, &srcs);
        let outside = full.iter().flatten().flat_map(|h| &h.0).filter(|id| !ok.contains(id)).count();
        assert!(outside > 0, "the whole vocabulary's output never left the list: the test would prove nothing");
        t.set_shortlist(l.clone()).unwrap();
        // One sentence a batch: each writes only its own sources' list.
        let one = DecodeOptions { max_sentences: 1, ..options(true) };
        let short = run(&t, &input, &one);
        for (i, nbest) in short.iter().enumerate() {
            let mine = allowed(&l, &srcs[i..=i]);
            for h in nbest {
                assert!(h.0.iter().all(|id| mine.contains(id)), "{precision:?} sentence {i} wrote {:?}", h.0);
                let extra_used = h.0.iter().any(|id| extra.contains(id));
                let key_in_source = srcs[i].contains(&srcs[0][0]);
                assert!(key_in_source || !extra_used, "sentence {i} wrote the extra ids of a token it lacks");
            }
        }
        // Batched, every sentence writes within the batch's union.
        for h in run(&t, &input, &options(true)).iter().flatten() {
            assert!(h.0.iter().all(|id| ok.contains(id)), "{precision:?}: {:?}", h.0);
        }
    }
}

/// Greedy search over the list, by hand: the full logits' argmax over the listed ids (never PAD or
/// BOS), fed back, until EOS or the length limit. Its log P is the sum of the chosen tokens'
/// log-softmax over the listed ids only.
fn greedy_by_hand(model: &Transformer, src: &[u32], ids: &[u32], max_len: usize) -> (Vec<u32>, f64) {
    let mut ws = Workspace::new();
    let enc = model.encode(&[src], &mut ws).unwrap();
    let mut st = model.start_decoding(&enc, max_len + 1).unwrap();
    let (mut out, mut log_p, mut last) = (Vec::new(), 0.0f64, BOS);
    loop {
        let logits = model.decode_step(&enc, &mut st, &[last]).unwrap().to_vec();
        let listed: Vec<(u32, f64)> = ids.iter().map(|&id| (id, logits[id as usize] as f64)).collect();
        let max = listed.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
        let log_z = max + listed.iter().map(|x| (x.1 - max).exp()).sum::<f64>().ln();
        let candidates = listed.iter().filter(|x| x.0 != PAD && x.0 != BOS);
        let &(best, logit) = if out.len() == max_len {
            listed.iter().find(|x| x.0 == EOS).unwrap()
        } else {
            candidates.max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0))).unwrap()
        };
        log_p += logit - log_z;
        if best == EOS {
            return (out, log_p);
        }
        out.push(best);
        last = best;
    }
}

#[test]
fn greedy_search_over_a_shortlist_is_the_argmax_over_its_ids() {
    let mut t = translator(Precision::F32, 5);
    let input: Vec<String> = lines().into_iter().skip(60).take(6).collect();
    let frequent: Vec<u32> = (SPECIAL_TOKENS as u32..).step_by(5).take(60).collect();
    let l = list(&t, frequent, &[]);
    let mut ids = allowed(&l, &[] as &[Vec<u32>]);
    ids.sort_unstable();
    ids.dedup();
    t.set_shortlist(l).unwrap();
    let mut opts = DecodeOptions { max_sentences: 1, ..options(true) };
    opts.search = BeamConfig { max_len_b: 10, ..BeamConfig::greedy() };
    let (out, _) = t.translate(&input, &opts, &mut ()).unwrap();
    for (line, nbest) in input.iter().zip(&out) {
        let src = t.encode_source(line).unwrap();
        let max_len = opts.search.max_len(src.len()).min(t.model().config.max_positions - 1);
        let (tokens, log_p) = greedy_by_hand(t.model(), &src, &ids, max_len);
        let h = &nbest[0].hypothesis;
        assert_eq!(h.tokens, tokens, "{line}");
        assert!((h.log_prob - log_p).abs() < 1e-4, "{line}: log P {} by the search, {log_p} by hand", h.log_prob);
    }
}

#[test]
fn a_shortlist_keeps_prefixes_and_phrases_and_serves_ensembles() {
    let mut t = translator(Precision::F32, 3);
    let input: Vec<String> = lines().into_iter().skip(90).take(4).collect();
    let frequent: Vec<u32> = (SPECIAL_TOKENS as u32..).step_by(9).take(30).collect();
    let l = list(&t, frequent.clone(), &[]);
    t.set_shortlist(l).unwrap();
    // A prefix and a phrase of ids outside the list: the output holds them anyway.
    let (prefix, phrase) = (vec![301, 302], vec![303]);
    assert!(prefix.iter().chain(&phrase).all(|id| !frequent.contains(id)));
    let guides: Vec<Guide> =
        input.iter().map(|_| Guide { prefix: prefix.clone(), phrases: vec![phrase.clone()] }).collect();
    let mut opts = options(true);
    opts.search.max_len_b = 16;
    let srcs: Vec<Vec<u32>> = input.iter().map(|l| t.encode_source(l).unwrap()).collect();
    let (out, _) = t.translate_ids_guided(&srcs, &guides, &opts, &mut ()).unwrap();
    for h in out.iter().flatten() {
        assert_eq!(h.tokens[..2], prefix[..], "{:?}", h.tokens);
        assert!(h.tokens[2..].contains(&303), "{:?}", h.tokens);
        let ok = |id: &u32| frequent.contains(id) || prefix.contains(id) || phrase.contains(id) || *id < 4;
        assert!(h.tokens.iter().all(ok), "{:?}", h.tokens);
    }

    // An ensemble of two copies over an every-id list decodes as the pair over the whole vocabulary.
    let dir = TestDir::new("transformer-shortlist-ensemble");
    let bpe = bpe();
    let bpe_path = dir.join("bpe.json");
    bpe.save(&bpe_path).unwrap();
    let mut paths = Vec::new();
    for seed in [7, 8] {
        let model = Transformer::new(config(bpe.vocab_size()), seed).unwrap();
        let path = dir.join(format!("m{seed}.safetensors"));
        common::save_checkpoint(&path, &model, bpe.hash());
        paths.push(path);
    }
    let mut pair = Translator::load_ensemble(&paths, &bpe_path, SessionOptions::default()).unwrap();
    let full = run(&pair, &input, &options(false));
    let v = bpe.vocab_size() as u32;
    pair.set_shortlist(list(&pair, (0..v).collect(), &[])).unwrap();
    assert_eq!(run(&pair, &input, &options(true)), full);
    // And over a small list, each member's output layer is cut alike: only listed ids.
    pair.set_shortlist(list(&pair, frequent.clone(), &[])).unwrap();
    for h in run(&pair, &input, &options(true)).iter().flatten() {
        assert!(h.0.iter().all(|id| frequent.contains(id) || *id < 4), "{:?}", h.0);
    }
}

#[test]
fn shortlist_errors_name_the_fix() {
    let mut t = translator(Precision::F32, 7);
    let input: Vec<String> = lines().into_iter().take(2).collect();
    // Asked for without one.
    let err = t.translate(&input, &options(true), &mut ()).unwrap_err().to_string();
    assert!(err.contains("--shortlist FILE") && err.contains("transformer shortlist"), "{err}");
    // Made for another tokenizer.
    let mut other = list(&t, vec![5], &[]);
    other.vocab_hash = "0123".into();
    let err = t.set_shortlist(other.clone()).unwrap_err().to_string();
    assert!(err.contains("0123") && err.contains("make it again"), "{err}");
    // A file made for another tokenizer, read: the error names the file.
    let dir = TestDir::new("transformer-shortlist-errors");
    let path = dir.join("list.json");
    other.save(&path).unwrap();
    let err = t.load_shortlist(&path).unwrap_err().to_string();
    assert!(err.contains("list.json") && err.contains("make it again"), "{err}");
    // A file that is not a shortlist.
    std::fs::write(&path, "{\"format\": 3}").unwrap();
    let err = t.load_shortlist(&path).unwrap_err().to_string();
    assert!(err.contains("list.json") && err.contains("not a shortlist"), "{err}");
    assert!(t.shortlist().is_none(), "a refused list was kept");
    // The output layer over ids outside the vocabulary, or given twice.
    let v = t.tokenizer().vocab_size() as u32;
    let err = t.model().output_columns(&[4, v]).unwrap_err().to_string();
    assert!(err.contains(&format!("id {v} outside the vocabulary")), "{err}");
    let err = t.model().output_columns(&[4, 9, 4]).unwrap_err().to_string();
    assert!(err.contains("id 4 given twice"), "{err}");
}
