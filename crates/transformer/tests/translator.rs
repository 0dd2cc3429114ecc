//! The translator session: built once, shared by threads. Two threads calling it at once get what
//! one call after the other gets, and an f32 and a bf16 session run side by side in one process,
//! each giving exactly what it gives alone.

mod common;

use common::TestDir;
use transformer::data::bpe::Bpe;
use transformer::decode::translator::{DecodeOptions, SessionOptions, Translator};
use transformer::decode::BeamConfig;
use transformer::{ModelConfig, Positions, Precision, Transformer};

fn lines() -> Vec<String> {
    let path = transformer::test_support::multi30k("val.en.gz");
    transformer::data::corpus::read_lines(&path).unwrap().into_iter().take(300).collect()
}

/// The test model's configuration at a vocabulary of `vocab_size`.
fn config(vocab_size: usize) -> ModelConfig {
    ModelConfig {
        n_layers: 2,
        d_model: 32,
        d_ff: 64,
        n_heads: 2,
        d_k: 16,
        d_v: 16,
        dropout: 0.1,
        attention_dropout: 0.0,
        label_smoothing: 0.1,
        positions: Positions::Sinusoidal,
        max_positions: 64,
        vocab_size,
        layer_norm_eps: 1e-6,
        ..transformer::ModelConfig::base()
    }
}

fn translator(precision: Precision) -> Translator {
    let bpe = Bpe::learn(lines().iter(), 400, 2).unwrap();
    let model = Transformer::new(config(bpe.vocab_size()), 7).unwrap();
    Translator::new(model, bpe, SessionOptions { precision, ..Default::default() }).unwrap()
}

fn options() -> DecodeOptions {
    let mut search = BeamConfig::translation();
    search.max_len_b = 12;
    search.nbest = 2;
    DecodeOptions { search, max_tokens: 256, max_sentences: 16, workers: 1, use_shortlist: false }
}

/// (text, log P, score) of every hypothesis.
fn run(t: &Translator, input: &[String]) -> Vec<Vec<(String, f32, f32)>> {
    triples(t.translate(input, &options(), &mut ()).unwrap().0)
}

/// (text, log P, score) of every hypothesis of a translation.
fn triples(out: Vec<Vec<transformer::decode::translator::Translation>>) -> Vec<Vec<(String, f32, f32)>> {
    out.into_iter()
        .map(|l| l.into_iter().map(|x| (x.text, x.hypothesis.log_prob as f32, x.hypothesis.score as f32)).collect())
        .collect()
}

#[test]
fn a_translator_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Translator>();
}

#[test]
fn two_threads_at_once_get_what_one_after_the_other_gets() {
    let t = translator(Precision::F32);
    let text = lines();
    let (a, b) = (&text[..40], &text[40..100]);
    let alone = (run(&t, a), run(&t, b));
    assert!(alone.0.iter().any(|l| !l[0].0.is_empty()), "the model translated nothing");
    for _ in 0..3 {
        let together = std::thread::scope(|s| {
            let ha = s.spawn(|| run(&t, a));
            let hb = s.spawn(|| run(&t, b));
            (ha.join().unwrap(), hb.join().unwrap())
        });
        assert!(together == alone, "concurrent calls gave other translations than sequential ones");
    }
    // The pool's reused buffers change nothing either.
    assert!(run(&t, a) == alone.0);
}

/// Progress as a test sees it: every (done, total) reported.
#[derive(Default)]
struct Progress(Vec<(usize, usize)>);

impl transformer::events::Events for Progress {
    fn progress(&mut self, done: usize, total: usize) {
        self.0.push((done, total));
    }
}

/// Batches on worker threads give exactly what the same batches give one after the other (the
/// workers share the batch budget, so their batches are a worker's share of it), and, to float
/// rounding, what the larger batches of one worker give.
#[test]
fn batches_on_worker_threads_give_what_one_batch_at_a_time_gives() {
    let t = translator(Precision::F32);
    let input: Vec<String> = lines().into_iter().take(120).collect();
    let whole = run(&t, &input);
    assert!(whole.iter().any(|l| !l[0].0.is_empty()), "the model translated nothing");
    for workers in [2, 3] {
        let base = options();
        let opts = DecodeOptions { workers, ..base };
        let mut progress = Progress::default();
        let (out, stats) = t.translate(&input, &opts, &mut progress).unwrap();
        let out = triples(out);
        // The same batches one at a time: a worker's share of the budget (the balance cap, a
        // quarter of a worker's share of the pieces, does not bind here).
        assert!(base.max_sentences / workers < input.len().div_ceil(4 * workers));
        let shared = DecodeOptions {
            workers: 1,
            max_tokens: base.max_tokens / workers,
            max_sentences: base.max_sentences / workers,
            ..base
        };
        let (one, one_stats) = t.translate(&input, &shared, &mut ()).unwrap();
        assert!(out == triples(one), "{workers} workers gave other translations than their batches one at a time");
        assert_eq!(stats.batches, one_stats.batches);
        assert_eq!(stats.workers, workers);
        assert!(stats.batches >= 8, "{workers} workers: only {} batches", stats.batches);
        // Against the larger batches of one worker: the same texts, scores to float rounding
        // (seen: 1e-7 relative).
        for (a, b) in out.iter().zip(&whole) {
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(b) {
                assert_eq!(x.0, y.0, "{workers} workers changed a translation");
                assert!((x.1 - y.1).abs() <= 1e-5 * y.1.abs().max(1.0), "log P {} against {}", x.1, y.1);
                assert!((x.2 - y.2).abs() <= 1e-5 * y.2.abs().max(1.0), "score {} against {}", x.2, y.2);
            }
        }
        // Progress rises to every piece (a sentence, or a chunk of one too long for the model's
        // positions), one report per batch, whatever order the batches end in.
        assert_eq!(progress.0.len(), stats.batches);
        assert!(progress.0.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 == w[1].1));
        let pieces = input.len() + stats.chunked;
        let &(done, total) = progress.0.last().unwrap();
        assert!(done == total && total >= pieces, "progress ended at {done}/{total} for {pieces} pieces");
    }
}

/// Sentences too long for the model's positions are cut into chunks, and the chunks are what the
/// workers share: the joined outputs equal those of the same batches one at a time, and progress
/// counts every chunk, ending at exactly their number.
#[test]
fn chunks_of_long_sentences_on_worker_threads_give_what_one_batch_at_a_time_gives() {
    let text = lines();
    let bpe = Bpe::learn(text.iter(), 400, 2).unwrap();
    let model = Transformer::new(ModelConfig { max_positions: 12, ..config(bpe.vocab_size()) }, 7).unwrap();
    let t = Translator::new(model, bpe, SessionOptions::default()).unwrap();
    let input: Vec<String> = text.into_iter().take(60).collect();
    let base = DecodeOptions { max_tokens: 96, ..options() };
    let (one, one_stats) = t
        .translate(
            &input,
            &DecodeOptions { max_tokens: base.max_tokens / 2, max_sentences: base.max_sentences / 2, ..base },
            &mut (),
        )
        .unwrap();
    assert!(one_stats.chunked >= 20, "only {} of 60 sentences were chunked", one_stats.chunked);
    let mut progress = Progress::default();
    let (two, stats) = t.translate(&input, &DecodeOptions { workers: 2, ..base }, &mut progress).unwrap();
    assert_eq!(stats.workers, 2);
    assert_eq!((stats.chunked, stats.batches), (one_stats.chunked, one_stats.batches));
    assert!(
        triples(two.clone()) == triples(one.clone()),
        "2 workers gave other outputs than their batches one at a time"
    );
    // Every chunk after the first of a sentence starts a new span of the joined output.
    let starts = |o: &Vec<Vec<transformer::decode::translator::Translation>>| {
        o.iter().map(|l| l[0].hypothesis.chunk_starts.clone()).collect::<Vec<_>>()
    };
    assert_eq!(starts(&two), starts(&one));
    // The pieces: one per short sentence, one per chunk of a long one.
    let pieces: usize = input
        .iter()
        .map(|l| {
            // As the translator cuts: n chunks of ⌈len / n⌉ tokens.
            let len = t.encode_source(l).unwrap().len();
            len.div_ceil(len.div_ceil(len.div_ceil(12)))
        })
        .sum();
    assert!(pieces > input.len() + stats.chunked, "{pieces} pieces for {} chunked sentences", stats.chunked);
    assert_eq!(progress.0.len(), stats.batches);
    assert!(progress.0.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 == pieces));
    assert_eq!(progress.0.last(), Some(&(pieces, pieces)));
}

/// A batch that fails on a worker thread fails the call with its error, as one batch at a time
/// does (the other workers stop); nothing hangs.
#[test]
fn an_error_on_a_worker_thread_is_returned() {
    let text = lines();
    let bpe = Bpe::learn(text.iter(), 400, 2).unwrap();
    let mut model = Transformer::new(config(bpe.vocab_size()), 7).unwrap();
    model.params.iter_mut().for_each(|x| *x = f32::NAN);
    let t = Translator::new(model, bpe, SessionOptions::default()).unwrap();
    let input: Vec<String> = text.into_iter().take(40).collect();
    for workers in [1, 2] {
        let opts = DecodeOptions { workers, ..options() };
        let err = t.translate(&input, &opts, &mut ()).unwrap_err().to_string();
        assert!(err.contains("non-finite logits"), "{workers} workers: {err}");
    }
}

#[test]
fn f32_and_bf16_translators_side_by_side_give_what_each_gives_alone() {
    if let Err(why) = Precision::Bf16.available() {
        eprintln!("no bf16 unit here ({why}); checking that a bf16 translator is refused");
        let bpe = Bpe::learn(lines().iter(), 400, 2).unwrap();
        let mut config = ModelConfig::base();
        (config.n_layers, config.vocab_size) = (1, bpe.vocab_size());
        let model = Transformer::new(config, 1).unwrap();
        let opts = SessionOptions { precision: Precision::Bf16, ..Default::default() };
        assert!(Translator::new(model, bpe, opts).is_err());
        return;
    }
    let (f, b) = (translator(Precision::F32), translator(Precision::Bf16));
    let text = lines();
    let input = &text[..60];
    let alone = (run(&f, input), run(&b, input));
    let together = std::thread::scope(|s| {
        let hf = s.spawn(|| run(&f, input));
        let hb = s.spawn(|| run(&b, input));
        (hf.join().unwrap(), hb.join().unwrap())
    });
    assert!(together.0 == alone.0, "f32 output changed beside a bf16 translator");
    assert!(together.1 == alone.1, "bf16 output changed beside an f32 translator");
    assert!(alone.0 != alone.1, "bf16 and f32 gave identical scores: the precision did nothing");
}

/// An output the model's positions stop before the search's length limit is reported, never cut
/// silently: a warning naming the sentence and a count in the stats, and nothing when the length
/// limit itself applies. (The untrained model rarely ends a sentence, so its outputs run long.)
#[test]
fn outputs_stopped_by_the_models_positions_are_reported() {
    let t = translator(Precision::F32);
    let input: Vec<String> = lines().into_iter().take(24).collect();
    let cap = t.model().config.max_positions - 1;
    let mut opts = options();
    opts.search.nbest = 1;
    opts.search.max_len_b = 100; // beyond the model's 63 positions for every source
    let mut warnings = Vec::new();
    let (out, stats) = t.translate(&input, &opts, &mut warnings).unwrap();
    let at_cap: Vec<usize> =
        out.iter().enumerate().filter(|(_, o)| o[0].hypothesis.tokens.len() >= cap).map(|(i, _)| i).collect();
    assert!(!at_cap.is_empty(), "the untrained model should reach the cap at least once");
    assert_eq!(stats.capped, at_cap.len());
    assert_eq!(warnings.len(), at_cap.len(), "{warnings:?}");
    for (w, i) in warnings.iter().zip(&at_cap) {
        assert!(
            w.starts_with(&format!("sentence {}: the output reached the model's limit of {cap} tokens", i + 1)),
            "{w}"
        );
    }
    // With a limit within the positions (source × 0.5 + 12 < 63 for these sources of at most 64
    // tokens): no report.
    opts.search.max_len_a = 0.5;
    opts.search.max_len_b = 12;
    let mut warnings = Vec::new();
    let (_, stats) = t.translate(&input, &opts, &mut warnings).unwrap();
    assert_eq!((stats.capped, warnings.len()), (0, 0), "{warnings:?}");
    let b = BeamConfig::translation();
    assert!(b.stopped_by_positions(220, 255, 256) && !b.stopped_by_positions(220, 254, 256));
    assert!(!b.stopped_by_positions(14, 255, 256), "source + 50 = 64 is the limit that applies");
    assert!(!b.stopped_by_positions(200, 255, 256 + 200));
}

/// With `end_at_limit` an output may use the model's last position: the untrained model runs to
/// 64 tokens (not 63) without an EOS, counted as stopped by the positions, and its attention and
/// alignment still come out, the EOS step it never took as zeros.
#[test]
fn with_end_at_limit_an_output_takes_the_last_position_and_still_aligns() {
    use transformer::decode::{AlignmentKind, AlignmentOptions};
    use transformer::eval::attention::Kind;
    let t = translator(Precision::F32);
    let input: Vec<String> = lines().into_iter().take(24).collect();
    let positions = t.model().config.max_positions;
    let mut opts = options();
    opts.search.nbest = 1;
    opts.search.max_len_b = 100;
    opts.search.end_at_limit = true;
    let mut warnings = Vec::new();
    let (out, stats) = t.translate(&input, &opts, &mut warnings).unwrap();
    let full: Vec<usize> = (0..out.len()).filter(|&i| out[i][0].hypothesis.tokens.len() == positions).collect();
    assert!(!full.is_empty(), "the untrained model should run to the last position at least once");
    assert!(out.iter().all(|o| o[0].hypothesis.tokens.len() <= positions));
    assert_eq!(stats.capped, full.len(), "{warnings:?}");
    let i = full[0];
    let (src, tgt) = (t.encode_source(&input[i]).unwrap(), &out[i][0].hypothesis.tokens);
    let w = t.attention(&src, tgt).unwrap();
    assert_eq!(w.t, positions + 1);
    for layer in 0..t.model().config.n_layers {
        let (m, rows, cols) = w.get(Kind::EncoderDecoder, layer, 0).unwrap();
        assert_eq!(rows, positions + 1);
        assert!(m[(rows - 1) * cols..].iter().all(|&x| x == 0.0), "the untaken EOS step is zeros");
        for r in 0..rows - 1 {
            let sum: f32 = m[r * cols..(r + 1) * cols].iter().sum();
            assert!((sum - 1.0).abs() < 1e-4, "layer {layer}, row {r}: a taken step's weights sum to {sum}");
        }
        // The same rows as a pass over the output's first 63 tokens gives (the decoder is causal).
        let shorter = t.attention(&src, &tgt[..positions - 1]).unwrap();
        let (m2, rows2, _) = shorter.get(Kind::EncoderDecoder, layer, 0).unwrap();
        assert_eq!(rows2, positions);
        assert_eq!(&m[..rows2 * cols], m2);
    }
    let a = t.align_hypothesis(&src, &out[i][0].hypothesis, &AlignmentOptions::new(AlignmentKind::Hard)).unwrap();
    assert_eq!(a.target, positions);
}

/// A blank line (white space, zero-width marks, a byte-order mark) is translated as an empty line,
/// never into text the model invents, and its n-best list has as many entries as asked for.
#[test]
fn blank_lines_give_empty_outputs_with_the_full_nbest_list() {
    let t = translator(Precision::F32);
    let input: Vec<String> =
        ["", "   ", "\u{200B}", "\u{200B}\u{FEFF}", "\t\u{2060} \u{200C}\u{200D}"].map(String::from).to_vec();
    let (out, _) = t.translate(&input, &options(), &mut ()).unwrap();
    for (line, nbest) in input.iter().zip(&out) {
        assert_eq!(nbest.len(), options().search.nbest, "{line:?}: {nbest:?}");
        assert!(nbest.iter().all(|x| x.text.is_empty() && x.hypothesis.tokens.is_empty()), "{line:?}: {nbest:?}");
    }
    assert!(!transformer::decode::translator::is_blank("a\u{200B}b"));
    assert!(t.encode_source("a\u{200B}b").unwrap().len() > 1);
}

/// A sentence longer than the model's positions is translated in chunks whose texts are joined by
/// a space: no word of one chunk runs into the first word of the next.
#[test]
fn chunks_of_a_long_sentence_are_joined_with_a_space() {
    let t = translator(Precision::F32);
    let long = lines()[..12].join(" ");
    assert!(t.encode_source(&long).unwrap().len() > t.model().config.max_positions);
    let mut opts = options();
    opts.search.nbest = 1;
    let (out, stats) = t.translate(&[long], &opts, &mut ()).unwrap();
    assert_eq!(stats.chunked, 1);
    let h = &out[0][0].hypothesis;
    assert!(!h.chunk_starts.is_empty(), "no chunk boundaries recorded");
    let bounds: Vec<usize> = std::iter::once(0).chain(h.chunk_starts.iter().copied()).chain([h.tokens.len()]).collect();
    let mut words = Vec::new();
    for w in bounds.windows(2) {
        let part = t.decode_target(&h.tokens[w[0]..w[1]]).unwrap();
        words.extend(part.split_whitespace().map(String::from));
    }
    assert_eq!(out[0][0].text.split_whitespace().collect::<Vec<_>>(), words);
    // The join itself, on chunks whose texts are known: the second chunk's first word must not
    // run into the first chunk's last.
    let (a, b) = (t.encode_target("im Schnee.").unwrap(), t.encode_target("Ein Mann").unwrap());
    let h = transformer::decode::Hypothesis {
        tokens: [a.clone(), b].concat(),
        chunk_starts: vec![a.len()],
        ..Default::default()
    };
    assert_eq!(t.text(&h).unwrap(), "im Schnee. Ein Mann");
}

/// Saves a random model of `translator`'s shape (seed `seed`) trained "with" `bpe` as a checkpoint.
fn save_model(dir: &std::path::Path, name: &str, bpe: &Bpe, seed: u64) -> std::path::PathBuf {
    let model = Transformer::new(translator(Precision::F32).model().config.clone(), seed).unwrap();
    let path = dir.join(name);
    common::save_checkpoint(&path, &model, bpe.hash());
    path
}

/// A member whose logits are not finite (its weights overflow): the error names its checkpoint
/// file, not only "the model" (the audit's probe).
#[test]
fn an_ensemble_member_with_non_finite_logits_is_named_by_its_file() {
    let dir = TestDir::new("transformer-ensemble-nan");
    let bpe = Bpe::learn(lines().iter(), 400, 2).unwrap();
    let bpe_path = dir.join("bpe.json");
    bpe.save(&bpe_path).unwrap();
    let a = save_model(&dir, "a.safetensors", &bpe, 7);
    let b = save_model(&dir, "b.safetensors", &bpe, 8);
    let mut ck = transformer::checkpoint::load(&b).unwrap();
    let embed = transformer::params::ParamLayout::new(&ck.config).get("embed.weight").unwrap().range();
    ck.params[embed].iter_mut().for_each(|x| *x = 1e38);
    let overflowing = dir.join("overflowing.safetensors");
    transformer::checkpoint::save(&overflowing, &ck).unwrap();
    let input: Vec<String> = lines().into_iter().take(2).collect();
    let t = Translator::load_ensemble(&[a.clone(), overflowing.clone()], &bpe_path, SessionOptions::default()).unwrap();
    let Err(err) = t.translate(&input, &options(), &mut ()) else { panic!("non-finite logits were decoded") };
    let err = err.to_string();
    assert!(err.contains("overflowing.safetensors") && err.contains("non-finite logits"), "{err}");
    assert!(!err.contains("a.safetensors"), "{err}");
}

#[test]
fn ensembles_of_one_and_of_two_copies_decode_as_the_model() {
    let dir = TestDir::new("transformer-ensemble");
    let bpe = Bpe::learn(lines().iter(), 400, 2).unwrap();
    let bpe_path = dir.join("bpe.json");
    bpe.save(&bpe_path).unwrap();
    let a = save_model(&dir, "a.safetensors", &bpe, 7);
    let b = save_model(&dir, "b.safetensors", &bpe, 8);
    let input: Vec<String> = lines().into_iter().take(12).collect();
    let opts = SessionOptions::default();
    let alone = run(&Translator::load(&a, &bpe_path, opts).unwrap(), &input);
    let one = Translator::load_ensemble(std::slice::from_ref(&a), &bpe_path, opts).unwrap();
    assert_eq!(one.ensemble_size(), 1);
    assert_eq!(run(&one, &input), alone);
    // Two copies: each step averages two equal log-probabilities, so the same beam, and the same
    // log P up to f32 rounding.
    let two = Translator::load_ensemble(&[a.clone(), a.clone()], &bpe_path, opts).unwrap();
    assert_eq!(two.ensemble_size(), 2);
    let copies = run(&two, &input);
    for (x, y) in copies.iter().flatten().zip(alone.iter().flatten()) {
        assert_eq!(x.0, y.0);
        assert!((x.1 - y.1).abs() < 1e-4 && (x.2 - y.2).abs() < 1e-4, "{x:?} vs {y:?}");
    }
    assert_eq!(copies.iter().flatten().count(), alone.iter().flatten().count());
    // Two different models: some sentence differs from what A alone gives (random models disagree).
    let mixed = run(&Translator::load_ensemble(&[a.clone(), b.clone()], &bpe_path, opts).unwrap(), &input);
    assert_ne!(mixed, alone);
    // A model of another vocabulary is refused, naming both files.
    let other = Bpe::learn(lines().iter().skip(100), 400, 2).unwrap();
    assert_ne!(other.hash(), bpe.hash());
    let c = save_model(&dir, "c.safetensors", &other, 9);
    let err = Translator::load_ensemble(&[a.clone(), c.clone()], &bpe_path, opts).err().unwrap().to_string();
    assert!(err.contains("a.safetensors") && err.contains("c.safetensors") && err.contains("vocabular"), "{err}");
}

/// Asks to stop once `after` items are reported done.
struct StopAfter {
    after: usize,
    stopped: bool,
}

impl transformer::events::Events for StopAfter {
    fn progress(&mut self, done: usize, _total: usize) {
        self.stopped |= done >= self.after;
    }

    fn interrupted(&mut self) -> bool {
        self.stopped
    }
}

/// A caller that asks to stop (Ctrl-C in the Python package) gets `Error::Interrupted` after the
/// batch under way, with one worker or several, and the session translates as before afterwards.
#[test]
fn a_translation_stops_after_the_batch_when_the_caller_asks() {
    let t = translator(Precision::F32);
    let input: Vec<String> = lines().into_iter().take(120).collect();
    let want = run(&t, &input);
    for workers in [1, 2] {
        let opts = DecodeOptions { workers, ..options() };
        let err = t.translate(&input, &opts, &mut StopAfter { after: 20, stopped: false }).unwrap_err();
        // The first report at 20 or more stops it: less than a batch (16 sentences) later.
        let &transformer::Error::Interrupted { done, total } = &err else { panic!("{workers} workers: {err}") };
        // Items are the pieces decoded: a sentence past the model's 64 positions is two.
        assert!(total >= input.len(), "{total} items for {} sentences", input.len());
        assert!((20..20 + 16).contains(&done), "{workers} workers: stopped at {done} of {total}");
        assert!(err.to_string().starts_with("interrupted after"), "{err}");
    }
    assert!(run(&t, &input) == want, "an interrupted call changed the next one");
}
