//! BLEU and chrF against the real sacreBLEU (fixtures written by dev/reference/sacrebleu_fixtures.py):
//! the score to 1e-9 and the printed line (signature and score) character for character.

use transformer::eval::bleu::{corpus_bleu, BleuConfig, Smooth};
use transformer::eval::chrf::{corpus_chrf, ChrfConfig};
use transformer::eval::tokenize::Tokenizer;

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

#[test]
fn matches_sacrebleu_on_every_fixture() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sacrebleu.json");
    let text = std::fs::read_to_string(path).expect("run dev/reference/sacrebleu_fixtures.py");
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["sacrebleu"], transformer::eval::SACREBLEU_VERSION);
    let cases = doc["cases"].as_array().unwrap();
    let (mut bleu, mut chrf) = (0, 0);
    let mut failures = Vec::new();
    for case in cases {
        let hyps = strings(&case["hyps"]);
        let refs: Vec<Vec<String>> = case["refs"].as_array().unwrap().iter().map(strings).collect();
        let o = &case["options"];
        let (score, line) = match case["metric"].as_str().unwrap() {
            "bleu" => {
                bleu += 1;
                let value = o.get("smooth_value").and_then(|v| v.as_f64());
                let cfg = BleuConfig {
                    tokenizer: Tokenizer::from_name(o.get("tokenize").and_then(|v| v.as_str()).unwrap_or("13a"))
                        .unwrap(),
                    lowercase: o.get("lowercase").and_then(|v| v.as_bool()).unwrap_or(false),
                    smooth: Smooth::from_name(o.get("smooth_method").and_then(|v| v.as_str()).unwrap_or("exp"), value)
                        .unwrap(),
                    effective_order: false,
                };
                let s = corpus_bleu(&hyps, &refs, &cfg).unwrap();
                (s.score, s.line())
            }
            "chrf" => {
                chrf += 1;
                let cfg = ChrfConfig {
                    lowercase: o.get("lowercase").and_then(|v| v.as_bool()).unwrap_or(false),
                    whitespace: o.get("whitespace").and_then(|v| v.as_bool()).unwrap_or(false),
                    word_order: o.get("word_order").and_then(|v| v.as_u64()).unwrap_or(0) as usize,
                    beta: o.get("beta").and_then(|v| v.as_u64()).unwrap_or(2) as u32,
                    eps_smoothing: o.get("eps_smoothing").and_then(|v| v.as_bool()).unwrap_or(false),
                    ..ChrfConfig::default()
                };
                let s = corpus_chrf(&hyps, &refs, &cfg).unwrap();
                (s.score, s.line())
            }
            other => panic!("unknown metric {other}"),
        };
        let want = case["score"].as_f64().unwrap();
        let want_line = case["line"].as_str().unwrap();
        if (score - want).abs() > 1e-9 || line != want_line {
            failures.push(format!(
                "{} {} {}:\n  got  {line} ({score})\n  want {want_line} ({want})",
                case["metric"], case["name"], o
            ));
        }
    }
    assert!(bleu >= 30 && chrf >= 20, "fixtures too few: {bleu} BLEU, {chrf} chrF");
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// The tokenized-BLEU mode: 13a tokens, optional lowercasing, no smoothing, its own name.
#[test]
fn tokenized_bleu_is_a_named_unsmoothed_13a_mode() {
    use transformer::eval::bleu::tokenized_bleu;
    let hyps = vec!["A Dog runs, fast.".to_string(), "two cats sleep on the mat".to_string()];
    let refs = vec![vec!["a dog runs , fast .".to_string(), "two cats sleep on the mat".to_string()]];
    let lc = tokenized_bleu(&hyps, &refs, true).unwrap();
    assert!((lc.score - 100.0).abs() < 1e-9, "{}", lc.line());
    assert!(lc.line().starts_with("tokenized-BLEU|nrefs:1|case:lc|tok:13a|smooth:none"), "{}", lc.line());
    // Cased, "A Dog" misses two unigrams: 10/12 unigrams, 8/10 bigrams, 6/8 trigrams, 4/6 4-grams.
    let cased = tokenized_bleu(&hyps, &refs, false).unwrap();
    let geo = ((10.0f64 / 12.0).ln() + (8.0f64 / 10.0).ln() + (6.0f64 / 8.0).ln() + (4.0f64 / 6.0).ln()) / 4.0;
    assert!((cased.score - 100.0 * geo.exp()).abs() < 1e-9, "{}", cased.line());
    // No smoothing: a missing 4-gram order gives 0, where sacreBLEU's exp smoothing does not.
    let short =
        tokenized_bleu(&["the cat sat".to_string()], &[vec!["the cat sat on the mat".to_string()]], false).unwrap();
    assert_eq!(short.score, 0.0);
}

/// BLEU by source length: each bucket is the corpus BLEU of its own sentences alone.
#[test]
fn buckets_score_their_own_sentences() {
    use transformer::eval::bleu::{bleu_by_source_length, corpus_bleu, BleuConfig};
    let srcs: Vec<String> = ["a b", "a b c d e f g h i j", "a"].iter().map(|s| s.to_string()).collect();
    let hyps: Vec<String> =
        ["the cat sat on the mat", "a dog runs in the park today", "x"].iter().map(|s| s.to_string()).collect();
    let refs = vec![vec!["the cat sat on the mat".to_string(), "a dog ran in a park".to_string(), "y".to_string()]];
    let cfg = BleuConfig::default();
    let b = bleu_by_source_length(&srcs, &hyps, &refs, &[2, 8], &cfg).unwrap();
    let shape: Vec<(usize, usize, usize)> = b.iter().map(|x| (x.lo, x.hi, x.sentences)).collect();
    assert_eq!(shape, vec![(1, 2, 2), (3, 8, 0), (9, usize::MAX, 1)]);
    let want = corpus_bleu(&[hyps[0].clone(), hyps[2].clone()], &[vec![refs[0][0].clone(), refs[0][2].clone()]], &cfg)
        .unwrap();
    assert_eq!(b[0].score.as_ref().unwrap().score, want.score);
    assert!(want.score > 0.0 && want.score < 100.0, "{}", want.score);
    assert!(b[1].score.is_none() && b[1].line().contains("3–8: no sentences"), "{}", b[1].line());
    let want = corpus_bleu(&hyps[1..2], &[refs[0][1..2].to_vec()], &cfg).unwrap();
    assert_eq!(b[2].score.as_ref().unwrap().score, want.score);
    assert!(b[2].line().starts_with("source words 9+ (1 sentences): BLEU|"), "{}", b[2].line());
    // An empty source is counted in the first bucket: every sentence is in one.
    let srcs2 = vec![String::new(), srcs[1].clone(), srcs[2].clone()];
    let b = bleu_by_source_length(&srcs2, &hyps, &refs, &[2, 8], &cfg).unwrap();
    assert_eq!(b.iter().map(|x| x.sentences).sum::<usize>(), 3);
    assert_eq!(b[0].sentences, 2);
}

/// Every corpus metric takes streams that must be line-aligned; one that is not (or no reference
/// stream at all) is the caller's input error, named with its counts, never a panic.
#[test]
fn streams_that_do_not_align_are_input_errors_not_panics() {
    use transformer::eval::bleu::{bleu_by_source_length, tokenized_bleu};
    use transformer::Error;
    let hyps = vec!["a small cat sat down".to_string(), "the dog ran off home".to_string()];
    let short = vec![vec!["a small cat sat down".to_string()]];
    let (bleu, chrf) = (BleuConfig::default(), ChrfConfig::default());
    let errors = [
        corpus_bleu(&hyps, &short, &bleu).unwrap_err(),
        tokenized_bleu(&hyps, &short, true).unwrap_err(),
        corpus_chrf(&hyps, &short, &chrf).unwrap_err(),
        bleu_by_source_length(&hyps, &hyps, &short, &[2], &bleu).unwrap_err(),
    ];
    for e in errors {
        assert!(matches!(e, Error::Input(_)), "{e:?}");
        assert!(e.to_string().contains("reference stream 1 has 1 lines and the hypotheses 2"), "{e}");
    }
    for e in [corpus_bleu(&hyps, &[], &bleu).unwrap_err(), corpus_chrf(&hyps, &[], &chrf).unwrap_err()] {
        assert!(matches!(e, Error::Input(_)) && e.to_string().contains("at least one reference stream"), "{e}");
    }
    let two = vec![hyps.clone()];
    let e = bleu_by_source_length(&hyps[..1], &hyps, &two, &[2], &bleu).unwrap_err();
    assert!(matches!(e, Error::Input(_)) && e.to_string().contains("1 sources and 2 hypotheses"), "{e}");
    // Aligned streams still score (the hypotheses as their own reference: BLEU 100).
    assert!((corpus_bleu(&hyps, &two, &bleu).unwrap().score - 100.0).abs() < 1e-9);
}
