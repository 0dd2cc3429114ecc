//! Parsing as a task (§6.3): treebank pairs and the shared vocabulary with whole tree tokens, the
//! run configuration's parsing rules, constrained decoding (always a tree over exactly the words),
//! a short parsing run with validation F1 and its best checkpoint, and the parse session's
//! handling of long and empty lines.

mod common;

use common::TestDir;
use std::path::{Path, PathBuf};
use transformer::data::trees::{self, delinearise, is_well_formed, ptb_tokenize, FileRange, TreeFormat};
use transformer::decode::beam::{beam_search_constrained, BeamConfig, Constraint, Scorer, StepScores};
use transformer::decode::translator::{DecodeOptions, SessionOptions, Translator};
use transformer::decode::tree_constraint::TreeConstraint;
use transformer::decode::ParseOptions;
use transformer::rng::Rng;
use transformer::train::run::{run, RunConfig};
use transformer::{Task, EOS};

/// The project's treebank (tests/treebank): own_0001..own_0030 train, own_0031..own_0035
/// validation, own_0036..own_0040 test.
fn treebank() -> PathBuf {
    transformer::test_support::treebank()
}

fn dir(name: &str) -> TestDir {
    TestDir::new(&format!("transformer-parsing-{name}"))
}

#[test]
fn file_ranges_select_treebank_files_by_name() {
    let r = FileRange::parse("own_0031..own_0035").unwrap();
    let files = trees::treebank_files(&treebank(), Some(&r)).unwrap();
    assert_eq!(files.len(), 5);
    assert!(files[0].ends_with("own_0031.mrg") && files[4].ends_with("own_0035.mrg"));
    assert_eq!(trees::treebank_files(&treebank(), None).unwrap().len(), 40);
    for bad in ["own_0035..own_0031", "own_0001", "..x", ""] {
        assert!(FileRange::parse(bad).is_err(), "{bad}");
    }
    let err = trees::treebank_files(&treebank(), Some(&FileRange::parse("x_1..x_2").unwrap())).unwrap_err();
    assert!(err.to_string().contains("no .mrg tree file named x_1..x_2"), "{err}");
}

#[test]
fn parsing_pairs_and_vocabulary_keep_tree_tokens_whole() {
    let pairs = Task::Parsing.read_pairs(&treebank(), Path::new(""), Some("own_0001..own_0010")).unwrap();
    // The first tree of own_0001.mrg: a quotation whose clause left a trace (*T*-1) behind.
    assert_eq!(pairs[0].0, "`` That recent tunnel reviewed Kelso Inc. rarely , '' Fenna Kestrel added .");
    assert_eq!(
        pairs[0].1,
        "(S `` `` (S (NP DT That JJ recent NN tunnel )NP (VP VBD reviewed (NP NNP Kelso NNP Inc. )NP \
         (ADVP RB rarely )ADVP )VP )S , , '' '' (NP NNP Fenna NNP Kestrel )NP (VP VBD added )VP . . )S"
    );
    let err = Task::Parsing.read_pairs(&treebank(), Path::new("x.de"), None).unwrap_err().to_string();
    assert!(err.contains("give no target file"), "{err}");
    let err = Task::Translation.read_pairs(Path::new("a"), Path::new("b"), Some("a..b")).unwrap_err().to_string();
    assert!(err.contains("parsing treebanks only"), "{err}");

    let bpe = Task::Parsing.learn_vocabulary(&pairs, 400).unwrap();
    let whole = bpe.whole_tokens();
    let has = |t: &str| whole.iter().any(|(_, w)| w == t);
    assert!(has("(NP") && has(")NP") && has("TAG=NNP") && has("TAG=,") && !has("NNP") && !has("Kelso"));
    // Whole entries never share an id with a BPE piece: every one was added past the learned pieces.
    assert!(whole.iter().all(|(id, _)| *id >= 400), "{whole:?}");
    assert_eq!(bpe.vocab_size(), 400 + whole.len());
    for (s, t) in &pairs {
        let ids = Task::Parsing.encode_target(TreeFormat::TagsWords, &bpe, t).unwrap();
        let tokens: Vec<String> = t.split_whitespace().map(str::to_string).collect();
        let structure = trees::items(&tokens).iter().filter(|i| !matches!(i, trees::Item::Word(_))).count();
        assert_eq!(ids.iter().filter(|&&id| id >= 400).count(), structure, "one id per bracket and tag");
        assert!(!ids.contains(&transformer::UNK));
        assert_eq!(&Task::Parsing.decode_target(TreeFormat::TagsWords, &bpe, &ids).unwrap(), t);
        // The source is BPE over the words, untouched by the tree tokens, after a leading space:
        // every word, the first included, has exactly the pieces it has inside the tree, which is
        // what the next-word pointer copies.
        let src = Task::Parsing.encode_source(&bpe, s).unwrap();
        assert!(src.iter().all(|&id| id < 400));
        assert_eq!(bpe.decode(&src).unwrap().trim_start(), *s);
        let pieces_in_tree: Vec<u32> = ids.iter().copied().filter(|&id| id < 400).collect();
        assert_eq!(src, pieces_in_tree, "{s}");
    }
    // A tag or bracket never seen in training is UNK.
    let ids = Task::Parsing.encode_target(TreeFormat::TagsWords, &bpe, "(NP NEWTAG word )NP").unwrap();
    assert_eq!(ids[1], transformer::UNK);
}

#[test]
fn well_formedness_is_exactly_a_linearised_tree_over_the_words() {
    let t = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let w = |s: &'static str| s.split(' ').collect::<Vec<&str>>();
    let good = t("(S (NP DT The NN board )NP (VP VBD met )VP . . )S");
    assert!(is_well_formed(&good, &w("The board met .")));
    assert!(is_well_formed(&t("NN yes"), &w("yes")));
    assert!(!is_well_formed(&good, &w("The board met . .")), "too few leaves");
    assert!(!is_well_formed(&good, &w("The board sat .")), "a word other than the input's");
    assert!(!is_well_formed(&t("(S (NP DT a NN b )VP )S"), &w("a b")), "wrong closing label");
    assert!(!is_well_formed(&t("(S (NP )NP NN a )S"), &w("a")), "empty constituent");
    assert!(!is_well_formed(&t("(S NN a"), &w("a")), "unclosed");
    assert!(!is_well_formed(&t("NN a )S"), &w("a")), "closes nothing");
    assert!(!is_well_formed(&t("(S NN )S"), &w("a")), "a tag without its word");
    assert!(!is_well_formed(&[], &w("a")));
    // Every treebank tree's linearisation is well-formed.
    for tree in trees::read_treebank(&treebank(), Some(&FileRange::parse("own_0001..own_0020").unwrap())).unwrap() {
        assert!(is_well_formed(&tree.linearise(), &tree.words()));
    }
}

/// Random scores over a vocabulary: the tree constraint must hold whatever the model says.
struct Noise {
    v: usize,
    rows: usize,
    rng: Rng,
    scores: Vec<f32>,
    norms: Vec<f32>,
}

impl Scorer for Noise {
    fn vocab(&self) -> usize {
        self.v
    }
    fn step(&mut self, tokens: &[u32]) -> transformer::Result<StepScores<'_>> {
        self.rows = tokens.len();
        self.scores = (0..self.rows * self.v).map(|_| 4.0 * self.rng.uniform() as f32).collect();
        self.norms = vec![0.0; self.rows];
        Ok(StepScores { scores: &self.scores, log_norms: &self.norms })
    }
    fn reorder(&mut self, _: &[usize]) -> transformer::Result<()> {
        Ok(())
    }
}

/// The vocabulary of ten treebank files and five sentences for the constrained-search tests.
fn constraint_setup() -> (transformer::data::bpe::Bpe, Vec<Vec<&'static str>>) {
    let pairs = Task::Parsing.read_pairs(&treebank(), Path::new(""), Some("own_0001..own_0010")).unwrap();
    let bpe = Task::Parsing.learn_vocabulary(&pairs, 400).unwrap();
    let sentences = ["board", "the board", "Mara Alder , 61", "a b c d e f g h", "unknownish words here ."]
        .iter()
        .map(|s| s.split(' ').collect())
        .collect();
    (bpe, sentences)
}

#[test]
fn constrained_search_always_gives_a_tree_over_exactly_the_words() {
    let (bpe, sentences) = constraint_setup();
    let pieces = |s: &[&str]| s.iter().map(|w| bpe.encode(&format!(" {w}")).unwrap()).collect::<Vec<_>>();
    let constraint =
        TreeConstraint::new(&bpe, sentences.iter().map(|s| pieces(s)).collect(), TreeFormat::TagsWords).unwrap();
    for seed in 0..6 {
        let mut scorer =
            Noise { v: bpe.vocab_size(), rows: 0, rng: Rng::new(seed), scores: Vec::new(), norms: Vec::new() };
        let cfg = BeamConfig { beam: 1 + seed as usize % 4, max_len_b: 600, ..BeamConfig::parsing() };
        let src: Vec<usize> = sentences.iter().map(|s| s.len()).collect();
        let hyps = beam_search_constrained(&mut scorer, &src, &cfg, 10_000, Some(&constraint)).unwrap();
        for (words, h) in sentences.iter().zip(hyps) {
            let text = Task::Parsing.decode_target(TreeFormat::TagsWords, &bpe, &h[0].tokens).unwrap();
            let tokens: Vec<String> = text.split_whitespace().map(str::to_string).collect();
            assert!(is_well_formed(&tokens, words), "seed {seed}, {words:?}: {text}");
        }
    }
    // What it allows: at the start a tag or an opening bracket, never a close or EOS; after a tag,
    // exactly the word's pieces; after the last word inside an open constituent, only its own
    // closing token; then EOS.
    let mut out = Vec::new();
    constraint.allowed(0, &[], 100, &mut out);
    assert!(!out.contains(&EOS) && !out.is_empty());
    let id = |t: &str| bpe.id_of(t).unwrap();
    let board = pieces(&["board"]).remove(0);
    let mut prefix = vec![id("(NP"), id("TAG=NN")];
    out.clear();
    constraint.allowed(0, &prefix, 100, &mut out);
    assert_eq!(out, vec![board[0]]);
    prefix.extend(&board);
    out.clear();
    constraint.allowed(0, &prefix, 100, &mut out);
    assert_eq!(out, vec![id(")NP")]);
    prefix.push(id(")NP"));
    out.clear();
    constraint.allowed(0, &prefix, 100, &mut out);
    assert_eq!(out, vec![EOS]);
    // No room left for another bracket: only the tag of the last word.
    out.clear();
    constraint.allowed(0, &[], 2, &mut out);
    assert!(!out.contains(&id("(NP")) && out.contains(&id("TAG=NN")));
    let plain = transformer::data::bpe::Bpe::learn(["a b c"].iter(), 300, 1).unwrap();
    assert!(TreeConstraint::new(&plain, vec![vec![vec![5]]], TreeFormat::TagsWords).is_err());
}

#[test]
fn constrained_search_in_the_tags_format_gives_a_leaf_a_word() {
    let (bpe, sentences) = constraint_setup();
    let pieces = |s: &[&str]| s.iter().map(|w| bpe.encode(&format!(" {w}")).unwrap()).collect::<Vec<_>>();
    let constraint =
        TreeConstraint::new(&bpe, sentences.iter().map(|s| pieces(s)).collect(), TreeFormat::Tags).unwrap();
    for seed in 0..6 {
        let mut scorer =
            Noise { v: bpe.vocab_size(), rows: 0, rng: Rng::new(seed), scores: Vec::new(), norms: Vec::new() };
        let cfg = BeamConfig { beam: 1 + seed as usize % 4, max_len_b: 600, ..BeamConfig::parsing() };
        let src: Vec<usize> = sentences.iter().map(|s| s.len()).collect();
        let hyps = beam_search_constrained(&mut scorer, &src, &cfg, 10_000, Some(&constraint)).unwrap();
        for (words, h) in sentences.iter().zip(hyps) {
            // No piece is ever allowed: the output is brackets and tags, one tag a word.
            assert!(h[0].tokens.iter().all(|&t| t >= 400 || t == EOS), "seed {seed}: {:?}", h[0].tokens);
            let text = Task::Parsing.decode_target(TreeFormat::Tags, &bpe, &h[0].tokens).unwrap();
            let tokens: Vec<String> = text.split_whitespace().map(str::to_string).collect();
            let full = trees::with_words(&tokens, words);
            assert!(is_well_formed(&full, words), "seed {seed}, {words:?}: {text}");
        }
    }
    // After a tag the leaf is done: inside (NP, its closer or another leaf or bracket; after the
    // last word only the closer, then EOS.
    let id = |t: &str| bpe.id_of(t).unwrap();
    let mut out = Vec::new();
    constraint.allowed(1, &[id("(NP"), id("TAG=DT")], 100, &mut out);
    assert!(out.contains(&id(")NP")) && out.contains(&id("TAG=NN")) && out.contains(&id("(NP")));
    assert!(out.iter().all(|&t| t >= 400), "{out:?}");
    out.clear();
    constraint.allowed(1, &[id("(NP"), id("TAG=DT"), id("TAG=NN")], 100, &mut out);
    assert_eq!(out, vec![id(")NP")]);
    out.clear();
    constraint.allowed(1, &[id("(NP"), id("TAG=DT"), id("TAG=NN"), id(")NP")], 100, &mut out);
    assert_eq!(out, vec![EOS]);
    // Oracle tags (`evaluate --oracle-tags`): each word may take only its gold tag; a word whose
    // gold tag the vocabulary lacks may take any.
    let tags_of = |out: &[u32]| {
        out.iter()
            .copied()
            .filter(|&t| bpe.whole_tokens().iter().any(|(i, w)| *i == t && w.starts_with("TAG=")))
            .collect::<Vec<_>>()
    };
    let gold = vec![vec![]; 5]
        .into_iter()
        .enumerate()
        .map(|(i, v): (usize, Vec<Option<u32>>)| if i == 1 { vec![Some(id("TAG=DT")), None] } else { v })
        .collect();
    let oracle = TreeConstraint::new(&bpe, sentences.iter().map(|s| pieces(s)).collect(), TreeFormat::Tags)
        .unwrap()
        .with_gold_tags(gold);
    out.clear();
    oracle.allowed(1, &[id("(NP")], 100, &mut out);
    assert_eq!(tags_of(&out), vec![id("TAG=DT")]);
    assert!(out.contains(&id("(NP")));
    out.clear();
    oracle.allowed(1, &[id("(NP"), id("TAG=DT")], 100, &mut out);
    assert!(tags_of(&out).len() > 10, "no gold tag: any tag");
    // Sentences without gold tags are not restricted.
    out.clear();
    oracle.allowed(0, &[], 100, &mut out);
    assert!(tags_of(&out).len() > 10);
}

#[test]
fn the_tags_format_round_trips_every_training_tree() {
    // tensor2tensor's target: brackets and tags, no words; the words come back from the sentence.
    let pairs = Task::Parsing.read_pairs(&treebank(), Path::new(""), None).unwrap();
    assert!(pairs.len() > 500, "{}", pairs.len());
    let bpe = Task::Parsing.learn_vocabulary(&pairs, 400).unwrap();
    let mut fewer = (0, 0);
    for (s, t) in &pairs {
        let words: Vec<&str> = s.split_whitespace().collect();
        let ids = Task::Parsing.encode_target(TreeFormat::Tags, &bpe, t).unwrap();
        assert!(ids.iter().all(|&id| id >= 400), "no word pieces in the tags format: {t}");
        let text = Task::Parsing.decode_target(TreeFormat::Tags, &bpe, &ids).unwrap();
        let tokens: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        assert_eq!(tokens.len() + words.len(), t.split_whitespace().count(), "{t}");
        let back = trees::with_words(&tokens, &words);
        assert_eq!(back.join(" "), *t);
        assert!(is_well_formed(&back, &words));
        let gold = delinearise(&t.split_whitespace().map(str::to_string).collect::<Vec<_>>(), &words);
        assert_eq!(delinearise(&back, &words), gold);
        fewer.0 += ids.len();
        fewer.1 += Task::Parsing.encode_target(TreeFormat::TagsWords, &bpe, t).unwrap().len();
    }
    assert!(fewer.0 < fewer.1, "{fewer:?}");
    // Too many tags for the words: the output is not well-formed, and the tree keeps the words.
    let tokens: Vec<String> = ["(NP", "NN", "NN", ")NP"].iter().map(|s| s.to_string()).collect();
    let back = trees::with_words(&tokens, &["board"]);
    assert!(!is_well_formed(&back, &["board"]));
    assert_eq!(delinearise(&back, &["board"]).words(), vec!["board"]);
}

#[test]
fn the_penn_treebank_tokenizer_splits_as_the_treebank_does() {
    let cases = [
        (
            "Pierre Vinken, 61 years old, will join the board Nov. 29.",
            "Pierre Vinken , 61 years old , will join the board Nov. 29 .",
        ),
        ("He didn't say \"yes\" (really).", "He did n't say `` yes '' -LRB- really -RRB- ."),
        ("It's $1,000 -- or 5%; can't we?", "It 's $ 1,000 -- or 5 % ; ca n't we ?"),
        ("the investors' shares cost 3.5 yen...", "the investors ' shares cost 3.5 yen ..."),
        ("U.S. Inc. rose.", "U.S. Inc. rose ."),
        // Quotes already in the treebank's spelling, as Brown's text has them, stay as they are.
        ("said `` no evidence '' of it.", "said `` no evidence '' of it ."),
        ("''Yes,'' he said.", "'' Yes , '' he said ."),
        ("", ""),
    ];
    for (raw, want) in cases {
        assert_eq!(ptb_tokenize(raw).join(" "), want, "{raw}");
    }
}

fn parsing_config(out: &Path, extra: &[&str]) -> transformer::Result<RunConfig> {
    let text = format!(
        "{}[data]\ntask = \"parsing\"\ntrain_src = \"{s}\"\ntrain_files = \"own_0001..own_0012\"\nvalid_src = \"{s}\"\nvalid_files = \"own_0031..own_0032\"\n\
         bpe = \"{}\"\nvocab_size = 500\nmax_tokens = 400\nmax_ratio = 12.0\n\
         [train]\noutput_dir = \"{}\"\nseed = 3\nmax_src_tokens = 2048\nmax_tgt_tokens = 2048\nwarmup = 50\nmax_steps = 12\nvalid_f1_epochs = 1\nvalid_f1_beam = 2\n",
        transformer::test_support::tiny_model_toml(),
        out.join("vocab.json").display(),
        out.display(),
        s = treebank().display(),
    );
    // Linearised trees run to ~3.5 tokens a word: more positions than the tiny model's 256.
    let mut overrides = vec!["model.max_positions=512".to_string()];
    overrides.extend(extra.iter().map(|s| s.to_string()));
    RunConfig::from_toml(&text, "parse.toml", &overrides)
}

#[test]
fn the_configuration_checks_the_parsing_fields() {
    let d = dir("config");
    let err = |extra: &[&str]| {
        let cfg = parsing_config(&d, extra).unwrap();
        cfg.validate().unwrap_err().to_string()
    };
    let e = err(&["data.train_tgt=x.de"]);
    assert!(e.contains("data.train_tgt") && e.contains("remove it"), "{e}");
    let e = err(&["data.valid_files=b..a"]);
    assert!(e.contains("FIRST..LAST"), "{e}");
    let e = err(&["data.task=translation", "data.train_tgt=x", "data.valid_tgt=y"]);
    assert!(e.contains("apply to task = \"parsing\" only"), "{e}");
    let e = err(&["train.valid_f1_beam=0"]);
    assert!(e.contains("train.valid_f1_beam"), "{e}");
    let e = err(&["data.task=translation", "data.train_tgt=x", "data.valid_tgt=y", "data.tree_format=tags"]);
    assert!(e.contains("data.tree_format") && e.contains("parsing"), "{e}");
    let e = parsing_config(&d, &["data.tree_format=words"]).unwrap_err().to_string();
    assert!(e.contains("tree_format") || e.contains("unknown variant"), "{e}");
    // Translation still requires its target files.
    let e = parsing_config(&d, &["data.task=translation"]).unwrap_err().to_string();
    assert!(e.contains("missing field `train_tgt`"), "{e}");
}

#[test]
fn a_parsing_run_validates_f1_keeps_its_best_checkpoint_and_parses() {
    let d = dir("run");
    let cfg = parsing_config(&d, &[]).unwrap();
    let mut log = Vec::new();
    let summary = run(&cfg, &mut log).unwrap();
    assert_eq!(summary.state.step, 12);
    let metrics = std::fs::read_to_string(d.join("metrics.jsonl")).unwrap();
    let f1s: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "valid_f1")
        .collect();
    assert!(!f1s.is_empty(), "{log:?}");
    for r in &f1s {
        let f1 = r["f1"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&f1), "{r}");
    }
    assert!(log.iter().any(|l| l.contains("validation F1")), "{log:?}");
    let best = d.join("best.safetensors");
    assert!(best.exists());
    let best_f1 = f1s.iter().map(|r| r["f1"].as_f64().unwrap()).fold(f64::MIN, f64::max);
    assert!(f1s.iter().filter(|r| r["best"] == true).any(|r| r["f1"].as_f64() == Some(best_f1)));

    // The checkpoint says it is a parsing model: loading it as a translator is refused.
    let bpe = d.join("vocab.json");
    let err = Translator::load(&best, &bpe, SessionOptions::default()).err().unwrap().to_string();
    assert!(err.contains("is a parsing model") && err.contains("transformer parse"), "{err}");
    assert_eq!(transformer::checkpoint::read_header(&best).unwrap().task().unwrap(), Task::Parsing);
    let parser = Translator::load(&best, &bpe, SessionOptions { task: Task::Parsing, ..Default::default() }).unwrap();

    // Constrained: every output is a well-formed tree over exactly the words, never repaired.
    let sentences: Vec<String> = vec![
        "The board met .".into(),
        "Mara Alder , the new mayor of Ashford , will open the bridge near the harbor on Monday .".into(),
        "Yes".into(),
    ];
    let mut opts = ParseOptions { constrained: true, ..Default::default() };
    opts.decode.search.beam = 3;
    let (parses, _) = parser.parse(&sentences, &opts, &mut ()).unwrap();
    for (s, p) in sentences.iter().zip(&parses) {
        let words: Vec<&str> = s.split_whitespace().collect();
        assert_eq!(p.tree.words(), words);
        assert!(!p.malformed, "{}", p.tree.to_bracketed());
        let tokens = p.tree.linearise();
        assert!(is_well_formed(&tokens, &words));
        assert_eq!(delinearise(&tokens, &words), p.tree);
    }
    // On worker threads, the constraint follows each sentence into its worker's batch: the same
    // trees and scores as those batches (a sentence each here) one at a time.
    let at_once = ParseOptions { decode: DecodeOptions { workers: 2, ..opts.decode }, ..opts };
    let one_by_one = ParseOptions { decode: DecodeOptions { workers: 1, max_sentences: 1, ..opts.decode }, ..opts };
    let (a, a_stats) = parser.parse(&sentences, &at_once, &mut ()).unwrap();
    let (b, _) = parser.parse(&sentences, &one_by_one, &mut ()).unwrap();
    assert_eq!(a_stats.workers, 2);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.tree, y.tree);
        assert!(!x.malformed);
        assert_eq!(x.hypothesis.score.to_bits(), y.hypothesis.score.to_bits());
    }
    // Unconstrained: trees over exactly the words too (repaired where needed).
    opts.constrained = false;
    let (parses, _) = parser.parse(&sentences, &opts, &mut ()).unwrap();
    for (s, p) in sentences.iter().zip(&parses) {
        assert_eq!(p.tree.words(), s.split_whitespace().collect::<Vec<_>>());
    }

    // Parse-then-EVALB in one call: the same parses, scored as EVALB scores them; against
    // themselves as gold every bracket matches; gold trees that do not align are refused.
    let own: Vec<trees::Tree> = parses.iter().map(|p| p.tree.clone()).collect();
    let scored = parser.parse_and_score(&sentences, &own, &opts, &mut ()).unwrap();
    let trees_of = |ps: &[transformer::decode::Parse]| ps.iter().map(|p| p.tree.clone()).collect::<Vec<_>>();
    assert_eq!(trees_of(&scored.parses), own);
    // (Compared as text: a tree set without brackets has an F-measure of NaN, which no NaN equals.)
    let want = transformer::eval::evalb::score_trees(&own, &own).unwrap();
    assert_eq!(format!("{:?}", scored.report), format!("{want:?}"));
    assert_eq!(scored.malformed(), parses.iter().filter(|p| p.malformed).count());
    assert!(scored.report.all.fmeasure == 100.0 || scored.report.all.fmeasure.is_nan(), "{:?}", scored.report.all);
    let err = parser.parse_and_score(&sentences, &own[..2], &opts, &mut ()).unwrap_err();
    assert!(err.to_string().contains("3 sentences but 2 gold trees"), "{err}");

    // A line longer than the model's positions is refused naming it, never split; with
    // skip_long it gives (TOP) and a warning. An empty line gives (TOP) too.
    let long = ["word ".repeat(600)];
    let lines = vec!["The board met .".to_string(), long[0].clone(), String::new()];
    let err = parser.parse(&lines, &opts, &mut ()).err().unwrap().to_string();
    assert!(err.contains("line 2") && err.contains("never split"), "{err}");
    opts.skip_long = true;
    let mut warnings = Vec::new();
    let (parses, _) = parser.parse(&lines, &opts, &mut warnings).unwrap();
    assert_eq!(parses[1].tree.to_bracketed(), "(TOP)");
    assert!(parses[1].skipped && parses[2].skipped && !parses[0].skipped);
    assert!(warnings.iter().any(|w| w.contains("line 2")) && warnings.iter().any(|w| w.contains("line 3")));

    // Resuming keeps the best F1 (a later, worse F1 does not replace best.safetensors).
    let before = std::fs::read(&best).unwrap();
    let cfg2 = parsing_config(&d, &["train.max_steps=13", "train.lr_scale=0.000001"]).unwrap();
    run(&cfg2, &mut ()).unwrap();
    let state = transformer::checkpoint::load(&d.join("ckpt-00000013.safetensors")).unwrap();
    let rs: serde_json::Value = serde_json::from_str(&state.extra["run_state"]).unwrap();
    assert!(rs["best_f1"].as_f64().unwrap() >= best_f1);
    if rs["best_f1"].as_f64().unwrap() == best_f1 {
        assert_eq!(std::fs::read(&best).unwrap(), before);
    }
    // The checkpoints record their tree format; resuming them in the other format is refused.
    assert_eq!(
        transformer::checkpoint::tree_format_of(&best, &transformer::checkpoint::load(&best).unwrap()).unwrap(),
        TreeFormat::TagsWords
    );
    assert_eq!(parser.tree_format(), TreeFormat::TagsWords);
    let cfg3 = parsing_config(&d, &["train.max_steps=14", "data.tree_format=tags"]).unwrap();
    let err = run(&cfg3, &mut ()).err().unwrap().to_string();
    assert!(err.contains("tree format") && err.contains("tags+words"), "{err}");
}

#[test]
fn a_parsing_run_scores_the_average_of_its_last_checkpoints_and_keeps_it_when_better() {
    let d = dir("average");
    let e = parsing_config(&d, &["train.valid_f1_average=6"]).unwrap().validate().unwrap_err().to_string();
    assert!(e.contains("train.valid_f1_average = 6 exceeds train.keep_last = 5"), "{e}");
    // At this seed the average of the last 5 checkpoints (steps 142..150) wins on the 2-core Intel
    // Xeon this was written on (validation F1 7.79 against 6.67 at best, on the project's
    // treebank), so the branch that saves it runs there; the assertions hold whichever branch a
    // machine's rounding takes.
    let settings = [
        "train.max_steps=150",
        "train.warmup=20",
        "train.seed=1",
        "train.checkpoint_steps=2",
        "train.valid_f1_epochs=4",
        "train.valid_f1_average=5",
    ];
    let cfg = parsing_config(&d, &settings).unwrap();
    let mut log = Vec::new();
    let summary = run(&cfg, &mut log).unwrap();
    assert_eq!(summary.state.step, 150);
    let records: Vec<serde_json::Value> = std::fs::read_to_string(d.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let averages: Vec<&serde_json::Value> = records.iter().filter(|r| r["kind"] == "valid_f1_average").collect();
    assert_eq!(averages.len(), 1, "{records:?}");
    let a = averages[0];
    assert_eq!((a["averaged"].as_u64(), a["from_step"].as_u64(), a["step"].as_u64()), (Some(5), Some(142), Some(150)));
    let f1 = a["f1"].as_f64().unwrap();
    let best_single =
        records.iter().filter(|r| r["kind"] == "valid_f1").map(|r| r["f1"].as_f64().unwrap()).fold(f64::MIN, f64::max);
    assert_eq!(a["best"] == true, f1 > best_single, "{a} against {best_single}");
    assert!(log.iter().any(|l| l.contains("of the average of the last 5 checkpoints (steps 142..150")), "{log:?}");
    // best.safetensors is the average exactly when it won, and the last checkpoint records its F1.
    let ck = |n: u64| transformer::checkpoint::load(&d.join(format!("ckpt-{n:08}.safetensors"))).unwrap();
    let last5: Vec<_> = (142..=150).step_by(2).map(ck).collect();
    let best = transformer::checkpoint::load(&d.join("best.safetensors")).unwrap();
    let rs: serde_json::Value = serde_json::from_str(&last5[4].extra["run_state"]).unwrap();
    assert_eq!(rs["best_f1"].as_f64().unwrap(), f1.max(best_single));
    if a["best"] == true {
        assert!(best.extra["averaged_from"].contains("ckpt-00000142.safetensors"), "{:?}", best.extra);
        let n = best.params.len();
        for i in [0, n / 3, n / 2, n - 1] {
            let mean = (last5.iter().map(|c| c.params[i] as f64).sum::<f64>() / 5.0) as f32;
            assert_eq!(best.params[i], mean);
        }
    } else {
        assert!(!best.extra.contains_key("averaged_from"));
    }
}

/// The records of `metrics.jsonl` as (kind, step, epoch), each of which must appear once.
fn records_once_each(path: &Path) -> Vec<(String, u64, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let keys: Vec<(String, u64, u64)> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|r| (r["kind"].as_str().unwrap().to_string(), r["step"].as_u64().unwrap(), r["epoch"].as_u64().unwrap()))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for k in &keys {
        assert!(seen.insert(k.clone()), "{k:?} recorded twice in {}:\n{text}", path.display());
    }
    keys
}

/// A run killed after a checkpoint, one killed before its first, and one run again after it ended
/// never record a step's training, validation or F1 twice. (Here the first epoch ends at step 10,
/// where a validation of `valid_steps = 5` is due too: it is recorded once.)
#[test]
fn interrupted_and_repeated_runs_record_each_validation_once() {
    let d = dir("records");
    let settings = ["train.checkpoint_steps=4", "train.valid_f1_average=2", "train.valid_steps=5"];
    let cfg = parsing_config(&d, &settings).unwrap();
    run(&cfg, &mut ()).unwrap();
    let whole = records_once_each(&d.join("metrics.jsonl"));
    let count = |keys: &[(String, u64, u64)], kind: &str| keys.iter().filter(|k| k.0 == kind).count();
    assert_eq!(count(&whole, "train"), 12);
    assert!(count(&whole, "valid_f1") >= 2 && count(&whole, "valid_f1_average") == 1, "{whole:?}");

    // Killed after step 8's checkpoint: the records of steps 9..12 and of the end were written,
    // the checkpoint of step 12 was not. The run resumes at 8 and writes them again, once.
    std::fs::remove_file(d.join("ckpt-00000012.safetensors")).unwrap();
    let mut log = Vec::new();
    run(&cfg, &mut log).unwrap();
    assert!(log.iter().any(|l| l.contains("resuming from") && l.contains("step 8")), "{log:?}");
    let again = records_once_each(&d.join("metrics.jsonl"));
    assert_eq!(count(&again, "train"), 12);
    let kinds = |keys: &[(String, u64, u64)]| {
        let mut k: Vec<(String, u64)> = keys.iter().map(|(a, b, _)| (a.clone(), *b)).collect();
        k.sort();
        k
    };
    assert_eq!(kinds(&again), kinds(&whole));

    // Run again once it has ended: nothing left to train, the end's F1 is not scored again, and
    // the final validation is recorded once.
    let mut log = Vec::new();
    run(&cfg, &mut log).unwrap();
    assert!(!log.iter().any(|l| l.contains("validation F1")), "{log:?}");
    assert_eq!(kinds(&records_once_each(&d.join("metrics.jsonl"))), kinds(&whole));

    // Killed before its first checkpoint: it starts over, and the old records go.
    for e in std::fs::read_dir(&d).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with("ckpt-") {
            std::fs::remove_file(p).unwrap();
        }
    }
    run(&cfg, &mut ()).unwrap();
    assert_eq!(kinds(&records_once_each(&d.join("metrics.jsonl"))), kinds(&whole));
}

/// A checkpoint whose tensor data was damaged after it was written (one flipped byte, caught by
/// its CRC-32) is passed over on resume, like a truncated one: the run resumes from the one before.
#[test]
fn a_resume_passes_over_a_checkpoint_that_fails_its_checksum() {
    let d = dir("crc-resume");
    let cfg = parsing_config(&d, &["train.checkpoint_steps=4", "train.valid_f1_epochs=0"]).unwrap();
    run(&cfg, &mut ()).unwrap();
    let newest = d.join("ckpt-00000012.safetensors");
    let mut bytes = std::fs::read(&newest).unwrap();
    let at = bytes.len() - 5; // inside the last tensor's data
    bytes[at] ^= 0x01;
    std::fs::write(&newest, &bytes).unwrap();
    let mut log = Vec::new();
    let summary = run(&cfg, &mut log).unwrap();
    assert_eq!(summary.state.step, 12);
    assert!(log.iter().any(|l| l.contains("ckpt-00000012.safetensors") && l.contains("CRC-32")), "{log:?}");
    assert!(log.iter().any(|l| l.contains("resuming from") && l.contains("step 8")), "{log:?}");
    records_once_each(&d.join("metrics.jsonl"));
}
