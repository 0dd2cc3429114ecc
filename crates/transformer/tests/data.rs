//! Parallel corpora, filtering and token-budget batching.

mod common;

use common::TestDir;
use std::path::PathBuf;
use transformer::data::batching::{epoch_order, make_batches, make_batches_in_rounds, BatchConfig};
use transformer::data::bpe::Bpe;
use transformer::data::parallel::{encode_and_filter, read_parallel, FilterConfig};
use transformer::rng::Rng;

fn tmpdir(name: &str) -> TestDir {
    TestDir::new(&format!("transformer-data-{name}"))
}

fn multi30k(name: &str) -> PathBuf {
    transformer::test_support::multi30k(name)
}

#[test]
fn misaligned_corpora_name_both_files_and_the_line() {
    let d = tmpdir("misaligned");
    std::fs::write(d.join("a.en"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(d.join("a.de"), "eins\nzwei\n").unwrap();
    let err = read_parallel(&d.join("a.en"), &d.join("a.de")).unwrap_err().to_string();
    assert!(err.contains("a.en:3") && err.contains("a.de ends after 2 lines") && err.contains("3 vs 2"), "{err}");
    std::fs::write(d.join("b.de"), b"eins\nzw\xc3ei\ndrei\n").unwrap();
    let err = read_parallel(&d.join("a.en"), &d.join("b.de")).unwrap_err().to_string();
    assert!(err.contains("b.de:2: invalid UTF-8"), "{err}");
    let ok = read_parallel(&d.join("a.en"), &d.join("a.en")).unwrap();
    assert_eq!(ok.len(), 3);
}

#[test]
fn filtering_counts_every_removal() {
    let bpe = Bpe::learn(["a b c d e f g", "the cat sat on the mat"].iter(), 300, 1).unwrap();
    // Digits never occur in the BPE training text, so each is its own token (two with the space).
    let pairs: Vec<(String, String)> = vec![
        ("the cat".into(), "the mat".into()),
        ("".into(), "nonempty".into()),
        ("   ".into(), "x".into()),
        ("9 ".repeat(20), "8 ".repeat(20)),
        ("5".into(), "5 6 5 6".into()),
        ("4 4 4 4 4 4 4".into(), "4".into()),
    ];
    let filter = FilterConfig { max_tokens: 30, max_ratio: 3.0 };
    let (kept, r) = encode_and_filter(&pairs, &bpe, &filter).unwrap();
    assert_eq!((r.read, r.kept, r.empty, r.too_long, r.bad_ratio), (6, 1, 2, 1, 2), "{r}");
    assert_eq!(kept.len(), 1);
    assert!(r.to_string().contains("6 pairs read, 1 kept"));
}

#[test]
fn multi30k_train_reads_and_filters() {
    let pairs = read_parallel(&multi30k("train.en.gz"), &multi30k("train.de.gz")).unwrap();
    assert_eq!(pairs.len(), 29000);
    let bpe = Bpe::learn(pairs.iter().flat_map(|(s, t)| [s, t]), 8000, 2).unwrap();
    let (kept, r) = encode_and_filter(&pairs, &bpe, &FilterConfig::default()).unwrap();
    assert_eq!(r.read, r.kept + r.empty + r.too_long + r.bad_ratio);
    assert!(r.kept > 28_500, "{r}");
    assert_eq!(kept.len(), r.kept);
}

#[test]
fn batches_respect_budgets_cover_everything_and_group_lengths() {
    let mut rng = Rng::new(5);
    let lengths: Vec<(usize, usize)> = (0..5000)
        .map(|_| (1 + rng.below(60) as usize, 1 + rng.below(60) as usize))
        .chain([(1500, 3), (2, 1500)])
        .collect();
    let cfg = BatchConfig { max_src_tokens: 1000, max_tgt_tokens: 1200 };
    let batches = make_batches(&lengths, &cfg);
    let mut seen = vec![0; lengths.len()];
    for b in &batches {
        let ms = b.iter().map(|&i| lengths[i].0).max().unwrap();
        let mt = b.iter().map(|&i| lengths[i].1 + 1).max().unwrap();
        // Within budget, unless a single pair exceeds it on its own (never cut, so it stands alone).
        assert!(
            b.len() == 1 || (b.len() * ms <= cfg.max_src_tokens && b.len() * mt <= cfg.max_tgt_tokens),
            "{} x ({ms}, {mt})",
            b.len()
        );
        // Lengths within a batch are close: sorted by target length.
        let (lo, hi) = (b.iter().map(|&i| lengths[i].1).min().unwrap(), b.iter().map(|&i| lengths[i].1).max().unwrap());
        assert!(hi - lo <= 2 || b.len() <= 2, "target lengths {lo}..{hi} in one batch");
        for &i in b {
            seen[i] += 1;
        }
    }
    assert!(seen.iter().all(|&c| c == 1), "every pair in exactly one batch");
    assert!(
        batches.iter().any(|b| b == &vec![5000]) && batches.iter().any(|b| b == &vec![5001]),
        "over-budget pairs stand alone"
    );
    // Batches fill most of whichever budget binds them.
    let fill: f64 = batches
        .iter()
        .map(|b| {
            let ms = b.iter().map(|&i| lengths[i].0).max().unwrap();
            let mt = b.iter().map(|&i| lengths[i].1 + 1).max().unwrap();
            ((b.len() * ms) as f64 / 1000.0).max((b.len() * mt) as f64 / 1200.0)
        })
        .sum::<f64>()
        / batches.len() as f64;
    assert!(fill > 0.8, "binding budget only {:.0}% used", fill * 100.0);
    assert_eq!(make_batches(&lengths, &cfg), batches, "deterministic");
}

/// Oversampled gold pairs (each copied 4 times, of equal length) batched together sit side by side
/// after the length sort: most batches would hold each tree 4 times. Batched in rounds, one copy a
/// round, no batch holds two copies, and every pair is still in exactly one batch.
#[test]
fn copies_of_one_pair_batched_in_rounds_never_share_a_batch() {
    let mut rng = Rng::new(11);
    let gold: Vec<(usize, usize)> =
        (0..300).map(|_| (5 + rng.below(30) as usize, 20 + rng.below(80) as usize)).collect();
    let silver: Vec<(usize, usize)> =
        (0..101).map(|_| (5 + rng.below(30) as usize, 20 + rng.below(80) as usize)).collect();
    let r = 4;
    let lengths: Vec<(usize, usize)> =
        (0..r).flat_map(|_| gold.iter().copied()).chain(silver.iter().copied()).collect();
    let rounds: Vec<usize> =
        (0..r).flat_map(|k| std::iter::repeat_n(k, gold.len())).chain((0..silver.len()).map(|j| j % r)).collect();
    let cfg = BatchConfig { max_src_tokens: 2048, max_tgt_tokens: 2048 };
    let same_gold_twice = |batches: &[Vec<usize>]| {
        batches
            .iter()
            .filter(|b| {
                let mut g: Vec<usize> = b.iter().filter(|&&i| i < r * gold.len()).map(|&i| i % gold.len()).collect();
                let n = g.len();
                g.sort_unstable();
                g.dedup();
                g.len() < n
            })
            .count()
    };
    let together = make_batches(&lengths, &cfg);
    assert!(same_gold_twice(&together) * 2 > together.len(), "the length sort alone puts copies together");
    let apart = make_batches_in_rounds(&lengths, &rounds, &cfg).unwrap();
    assert_eq!(same_gold_twice(&apart), 0);
    let mut seen = vec![0; lengths.len()];
    for b in &apart {
        assert!(b.iter().all(|&i| rounds[i] == rounds[b[0]]), "one round a batch");
        for &i in b {
            seen[i] += 1;
        }
    }
    assert!(seen.iter().all(|&c| c == 1), "every pair in exactly one batch");
    // One round (or none given) is plain make_batches; a round count that does not match is an error.
    assert_eq!(make_batches_in_rounds(&lengths, &[], &cfg).unwrap(), together);
    assert_eq!(make_batches_in_rounds(&lengths, &vec![0; lengths.len()], &cfg).unwrap(), together);
    let err = make_batches_in_rounds(&lengths, &rounds[1..], &cfg).unwrap_err().to_string();
    assert!(err.contains("1300 rounds for 1301 pairs"), "{err}");
    let err = make_batches_in_rounds(&lengths, &[0, 0], &cfg).unwrap_err().to_string();
    assert!(err.contains("2 rounds for 1301 pairs"), "{err}");
    // Round ids need not be small or dense.
    let sparse: Vec<usize> = rounds.iter().map(|&r| if r == 3 { usize::MAX } else { r * 1000 }).collect();
    assert_eq!(make_batches_in_rounds(&lengths, &sparse, &cfg).unwrap(), apart);
}

#[test]
fn epoch_order_is_a_seeded_permutation() {
    let a = epoch_order(1000, 7, 0);
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
    assert_eq!(a, epoch_order(1000, 7, 0));
    assert_ne!(a, epoch_order(1000, 7, 1));
    assert_ne!(a, epoch_order(1000, 8, 0));
    assert!(epoch_order(0, 1, 1).is_empty());
}

#[test]
fn prepared_corpus_equals_in_memory_pairs_and_detects_truncation() {
    use transformer::data::binarized::{prepare, Binarized};
    let pairs = read_parallel(&multi30k("val.en.gz"), &multi30k("val.de.gz")).unwrap();
    let bpe = Bpe::learn(pairs.iter().flat_map(|(s, t)| [s, t]), 1000, 2).unwrap();
    let filter = FilterConfig { max_tokens: 40, max_ratio: 2.0 };
    let (want, want_report) = encode_and_filter(&pairs, &bpe, &filter).unwrap();
    let dir = tmpdir("prepared");
    let report =
        prepare(&multi30k("val.en.gz"), &multi30k("val.de.gz"), &bpe.clone().into(), &filter, &dir, &mut ()).unwrap();
    assert_eq!(report, want_report);
    assert!(report.kept < report.read, "the filter should remove something here: {report}");
    let b = Binarized::open(&dir).unwrap();
    assert_eq!(b.len(), want.len());
    assert_eq!(b.vocab_hash, bpe.hash());
    for (i, p) in want.iter().enumerate() {
        assert_eq!(&b.pair(i), p, "pair {i}");
        assert_eq!(b.lengths(i), (p.0.len(), p.1.len()));
    }
    drop(b);
    // A truncated token file is refused with advice, not read out of bounds.
    let bin = dir.join("tgt.bin");
    let len = std::fs::metadata(&bin).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&bin).unwrap().set_len(len - 8).unwrap();
    let err = Binarized::open(&dir).err().unwrap().to_string();
    assert!(err.contains("tgt.idx: the last offset") && err.contains("tgt.bin holds"), "{err}");
    assert!(err.contains("truncated") && err.contains("transformer prepare"), "{err}");
    // Misaligned inputs are an error naming both files.
    let d2 = tmpdir("prepared-misaligned");
    std::fs::write(d2.join("a"), "one\ntwo\n").unwrap();
    std::fs::write(d2.join("b"), "eins\n").unwrap();
    let err = prepare(&d2.join("a"), &d2.join("b"), &bpe.clone().into(), &filter, &d2.join("out"), &mut ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("not line-aligned") && err.contains("/b ends after 1 lines"), "{err}");
}

#[test]
fn prepared_corpus_with_a_corrupt_offset_or_flipped_bytes_is_refused_naming_the_file() {
    use transformer::data::binarized::{prepare, Binarized};
    let pairs = read_parallel(&multi30k("val.en.gz"), &multi30k("val.de.gz")).unwrap();
    let bpe = Bpe::learn(pairs.iter().take(200).flat_map(|(s, t)| [s, t]), 400, 2).unwrap();
    let filter = FilterConfig { max_tokens: 100, max_ratio: 9.0 };
    let dir = tmpdir("prepared-corrupt");
    prepare(&multi30k("val.en.gz"), &multi30k("val.de.gz"), &bpe.clone().into(), &filter, &dir, &mut ()).unwrap();
    Binarized::open(&dir).unwrap();
    let patch = |file: &str, at: usize, bytes: &[u8]| {
        let p = dir.join(file);
        let mut data = std::fs::read(&p).unwrap();
        let old = data[at..at + bytes.len()].to_vec();
        data[at..at + bytes.len()].copy_from_slice(bytes);
        std::fs::write(&p, data).unwrap();
        old
    };
    let refused = |want: &str| {
        let err = Binarized::open(&dir).err().expect("a corrupt directory is refused").to_string();
        assert!(err.contains(want) && err.contains("transformer prepare"), "{err}");
    };
    // An interior offset past the end of the token file (it used to panic on a slice index).
    let old = patch("src.idx", 8 * 5, &u64::MAX.to_le_bytes());
    refused("src.idx: offset 5 is 18446744073709551615");
    patch("src.idx", 8 * 5, &old);
    // An interior offset that is wrong but keeps the offsets increasing: the checksum catches it.
    let o4 = u64::from_le_bytes(std::fs::read(dir.join("tgt.idx")).unwrap()[32..40].try_into().unwrap());
    let old = patch("tgt.idx", 8 * 4, &(o4 + 1).to_le_bytes());
    refused("tgt.idx: SHA-256");
    patch("tgt.idx", 8 * 4, &old);
    // Flipped bytes in a token file.
    let old = patch("tgt.bin", 100, &[0xff, 0xff]);
    refused("tgt.bin: SHA-256");
    patch("tgt.bin", 100, &old);
    Binarized::open(&dir).unwrap();
    // A directory of the previous format (no checksums) is refused with the advice to prepare again.
    let meta = dir.join("meta.json");
    let text = std::fs::read_to_string(&meta).unwrap().replace("\"format_version\":2", "\"format_version\":1");
    std::fs::write(&meta, text).unwrap();
    refused("meta.json: format version 1");
}
