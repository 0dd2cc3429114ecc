//! No library function panics on its caller's input (issue 66, item 5): sequences that must
//! match in length (or belong to the same model or batch), empty inputs and bad options are
//! `Error`s that name what is wrong, one test per public function. The metrics, EVALB and the
//! heatmap have theirs beside their other tests (bleu_sacrebleu.rs, evalb.rs, attention_maps.rs),
//! and `Translator::parse_and_score` in parsing.rs.

mod common;

use common::TestDir;
use std::collections::BTreeMap;
use std::path::Path;
use transformer::checkpoint::{self, Checkpoint};
use transformer::data::bpe::Bpe;
use transformer::decode::beam::{beam_search_constrained, Constraint};
use transformer::decode::translator::{SessionOptions, Translator};
use transformer::decode::tree_constraint::TreeConstraint;
use transformer::decode::{
    beam_search, search_batch_ensemble, BeamConfig, EnsembleScorer, Hypothesis, Scorer, SentenceInputs, StepScores,
};
use transformer::eval::attention::{attention_weights, Kind};
use transformer::model::incremental::DecoderState;
use transformer::params::ParamLayout;
use transformer::train::distributed::{share_of, SingleProcess};
use transformer::train::{Schedule, Trainer};
use transformer::{Batch, Error, ModelConfig, Positions, Precision, Task, Transformer, Workspace, BOS};

/// A one- or two-layer model small enough to build in milliseconds.
fn config(n_layers: usize, vocab_size: usize) -> ModelConfig {
    ModelConfig {
        n_layers,
        d_model: 16,
        d_ff: 32,
        n_heads: 2,
        d_k: 8,
        d_v: 8,
        dropout: 0.0,
        attention_dropout: 0.0,
        label_smoothing: 0.1,
        positions: Positions::Sinusoidal,
        max_positions: 32,
        vocab_size,
        layer_norm_eps: 1e-6,
        ..ModelConfig::base()
    }
}

fn model(n_layers: usize, vocab_size: usize) -> Transformer {
    Transformer::new(config(n_layers, vocab_size), 3).unwrap()
}

/// A translator over a BPE vocabulary learned from a few lines.
fn translator() -> Translator {
    let lines = ["a small cat sat down", "the dog ran off home", "a dog and a cat"];
    let bpe = Bpe::learn(lines.iter(), 300, 1).unwrap();
    Translator::new(model(1, bpe.vocab_size()), bpe, SessionOptions::default()).unwrap()
}

fn strings(xs: &[&str]) -> Vec<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

/// Asserts that `e` is the variant `matches` accepts and that its message holds every `needle`.
#[track_caller]
fn assert_error(e: &Error, matches: impl Fn(&Error) -> bool, needles: &[&str]) {
    assert!(matches(e), "unexpected variant: {e:?}");
    let text = e.to_string();
    for n in needles {
        assert!(text.contains(n), "{n:?} not in: {text}");
    }
}

/// A scorer of uniform scores over `v` ids; with `short`, one score too few every step.
struct Flat {
    v: usize,
    short: bool,
    scores: Vec<f32>,
    norms: Vec<f32>,
}

impl Flat {
    fn new(v: usize) -> Self {
        Flat { v, short: false, scores: Vec::new(), norms: Vec::new() }
    }
}

impl Scorer for Flat {
    fn vocab(&self) -> usize {
        self.v
    }
    fn step(&mut self, tokens: &[u32]) -> transformer::Result<StepScores<'_>> {
        self.scores = vec![0.0; tokens.len() * self.v - usize::from(self.short)];
        self.norms = vec![0.0; tokens.len()];
        Ok(StepScores { scores: &self.scores, log_norms: &self.norms })
    }
    fn reorder(&mut self, _: &[usize]) -> transformer::Result<()> {
        Ok(())
    }
}

#[test]
fn beam_search_refuses_a_scorer_that_returns_the_wrong_number_of_scores() {
    let mut s = Flat { short: true, ..Flat::new(7) };
    let e = beam_search(&mut s, &[3, 2], &BeamConfig::greedy(), 10).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Decode(_)), &["13 scores", "2 rows", "vocabulary of 7", "expected 14"]);
    // A bad option is refused before the scorer is asked anything.
    let e = beam_search(&mut Flat::new(7), &[3], &BeamConfig { beam: 0, ..BeamConfig::greedy() }, 10).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Config(_)), &["beam size", "got 0"]);
    let e = beam_search(&mut Flat::new(7), &[3], &BeamConfig { nbest: 2, ..BeamConfig::greedy() }, 10).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Config(_)), &["nbest", "beam size 1", "got 2"]);
    // No sentences: no hypotheses, no error.
    assert!(beam_search(&mut Flat::new(7), &[], &BeamConfig::greedy(), 10).unwrap().is_empty());
}

/// A constraint that allows one token everywhere.
struct Allows(u32);

impl Constraint for Allows {
    fn allowed(&self, _: usize, _: &[u32], _: usize, out: &mut Vec<u32>) {
        out.push(self.0);
    }
}

#[test]
fn beam_search_constrained_refuses_a_constraint_over_other_sentences_or_tokens() {
    // The tree constraint of one sentence over a batch of two.
    let pairs = [("Pierre Vinken".to_string(), "(NP NNP Pierre NNP Vinken )NP".to_string())];
    let bpe = Task::Parsing.learn_vocabulary(&pairs, 300).unwrap();
    let words = vec![["Pierre", "Vinken"].iter().map(|w| bpe.encode(&format!(" {w}")).unwrap()).collect()];
    let tree = TreeConstraint::new(&bpe, words, transformer::data::trees::TreeFormat::TagsWords).unwrap();
    let mut s = Flat::new(bpe.vocab_size());
    let e = beam_search_constrained(&mut s, &[3, 3], &BeamConfig::greedy(), 20, Some(&tree)).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["covers 1 sentences", "the search has 2"]);
    // A token outside the vocabulary.
    let e = beam_search_constrained(&mut Flat::new(7), &[3], &BeamConfig::greedy(), 20, Some(&Allows(99))).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Decode(_)), &["token id 99", "sentence 1", "vocabulary of 7"]);
}

#[test]
fn ensemble_scorer_new_refuses_no_members_and_members_of_other_vocabularies() {
    let e = EnsembleScorer::<Flat>::new(Vec::new()).err().unwrap();
    assert_error(&e, |e| matches!(e, Error::Config(_)), &["at least one model"]);
    let e = EnsembleScorer::new(vec![Flat::new(7), Flat::new(8)]).err().unwrap();
    assert_error(&e, |e| matches!(e, Error::Mismatch(_)), &["7 and 8"]);
    // A member whose scores do not fit the rows is named.
    let mut ens = EnsembleScorer::new(vec![Flat::new(7), Flat { short: true, ..Flat::new(7) }]).unwrap();
    let e = beam_search(&mut ens, &[2], &BeamConfig::greedy(), 10).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::EnsembleMember { index: 1, .. }), &["model 2", "6 scores", "1 rows"]);
}

#[test]
fn search_batch_ensemble_refuses_models_of_other_vocabularies() {
    let (a, b) = (model(1, 20), model(1, 21));
    let (mut ws, mut st) = (Workspace::new(), DecoderState::default());
    let srcs: [&[u32]; 1] = [&[5, 6, 7]];
    let e = search_batch_ensemble(
        &a,
        &[&b],
        &srcs,
        &SentenceInputs::default(),
        &BeamConfig::greedy(),
        (&mut ws, &mut st),
        &mut Vec::new(),
        None,
        None,
    )
    .unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Mismatch(_)), &["20 and 21"]);
}

#[test]
fn decoder_state_reorder_refuses_rows_it_does_not_have() {
    let m = model(1, 20);
    let enc = m.encode(&[&[5, 6], &[7]], &mut Workspace::new()).unwrap();
    let mut st = m.start_decoding(&enc, 8).unwrap();
    m.decode_step(&enc, &mut st, &[BOS, BOS]).unwrap();
    let e = st.reorder(&[1, 5]).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["row 5", "2 rows"]);
    // The state is left as it was, and goes on.
    assert_eq!(st.rows(), 2);
    st.reorder(&[1, 1, 0]).unwrap();
    m.decode_step(&enc, &mut st, &[5, 6, 7]).unwrap();
}

#[test]
fn decode_step_refuses_a_state_or_encoding_of_another_batch_or_model() {
    let (m, other) = (model(1, 20), model(2, 20));
    let mut ws = Workspace::new();
    let two = m.encode(&[&[5, 6], &[7]], &mut ws).unwrap();
    let one = m.encode(&[&[5, 6]], &mut ws).unwrap();
    let mut st = m.start_decoding(&two, 8).unwrap();
    // One token for two rows.
    let e = m.decode_step(&two, &mut st, &[BOS]).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["1 tokens given for 2 decoder rows"]);
    // Rows of two sentences against an encoding of one.
    let e = m.decode_step(&one, &mut st, &[BOS, BOS]).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["sentence 2", "1 sentences"]);
    // A state another model started.
    let theirs = other.encode(&[&[5, 6], &[7]], &mut ws).unwrap();
    let mut their_state = other.start_decoding(&theirs, 8).unwrap();
    let e = m.decode_step(&two, &mut their_state, &[BOS, BOS]).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["started for another model", "2 layers"]);
    // An encoding by another model.
    let e = m.decode_step(&theirs, &mut st, &[BOS, BOS]).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["not encoded by this model", "2 layers of keys"]);
    // What fits still decodes.
    m.decode_step(&two, &mut st, &[BOS, BOS]).unwrap();
}

#[test]
fn translator_text_refuses_a_chunk_start_past_the_tokens() {
    let t = translator();
    let tokens = t.encode_target("a cat").unwrap();
    let n = tokens.len();
    let h = Hypothesis { tokens, chunk_starts: vec![n + 1], ..Default::default() };
    let e = t.text(&h).unwrap_err();
    let (start, past) = (format!("token {}", n + 1), format!("past its {n} tokens"));
    assert_error(&e, |e| matches!(e, Error::Input(_)), &[&start, &past]);
    // A start at the end is an empty last chunk.
    assert_eq!(t.text(&Hypothesis { chunk_starts: vec![n], ..h }).unwrap(), "a cat");
}

#[test]
fn translator_perplexity_refuses_sources_and_references_that_do_not_align() {
    let t = translator();
    let e = t.perplexity(&strings(&["a cat", "a dog"]), &strings(&["a cat"]), &mut ()).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["2 sources but 1 references"]);
    // Nothing to score is no error, and no perplexity.
    assert_eq!(t.perplexity(&[], &[], &mut ()).unwrap().perplexity(), None);
}

#[test]
fn translator_log_probs_refuse_sources_and_references_that_do_not_align() {
    let t = translator();
    let (srcs, refs) = (strings(&["a cat"]), strings(&["a cat", "a dog"]));
    let e = t.log_probs(&srcs, &refs).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["1 sources but 2 references"]);
    let (side, e) = t.log_probs_sided(&srcs, &refs).unwrap_err();
    assert_eq!(side, None, "no one side is at fault");
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["1 sources but 2 references"]);
    // An empty source cannot be scored: named by its line.
    let e = t.log_probs(&strings(&["a cat", ""]), &strings(&["a cat", "a dog"])).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["line 2", "source is empty"]);
}

#[test]
fn attention_weights_get_refuses_a_layer_or_head_the_model_lacks() {
    let m = model(2, 20);
    let w = attention_weights(&m, &[5, 6, 7], &[8, 9], &mut Workspace::new()).unwrap();
    let e = w.get(Kind::EncoderDecoder, 2, 0).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["layer 2", "2 layers"]);
    let e = w.get(Kind::DecoderSelf, 1, 2).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["head 2", "2 heads"]);
    let (x, rows, cols) = w.get(Kind::EncoderSelf, 1, 1).unwrap();
    assert_eq!((x.len(), rows, cols), (9, 3, 3));
}

#[test]
fn trainer_new_refuses_a_model_prepared_for_inference() {
    let prepared = model(1, 20).prepare(Precision::F32).unwrap();
    let e = Trainer::new(prepared, Schedule::paper(16), 1).err().unwrap();
    assert_error(&e, |e| matches!(e, Error::Unsupported(_)), &["prepared for inference", "cannot train"]);
}

fn batch(pairs: &[(Vec<u32>, Vec<u32>)]) -> Batch {
    Batch::from_pairs(pairs)
}

#[test]
fn trainer_train_step_shared_refuses_a_share_outside_the_update() {
    let mut t = Trainer::new(model(1, 20), Schedule::paper(16), 1).unwrap();
    let b = batch(&[(vec![5, 6], vec![7, 8])]);
    let e = t.train_step_shared(std::slice::from_ref(&b), 1, 1, &SingleProcess).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["batches 1..1+1", "1 batches"]);
    assert_eq!(t.step(), 0, "nothing was trained");
    // No batches: nothing to train on.
    let e = t.train_step(&[]).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["no target tokens"]);
    t.train_step(&[b]).unwrap();
}

#[test]
fn trainer_resume_and_init_from_refuse_adam_moments_that_do_not_fit() {
    let mut t = Trainer::new(model(1, 20), Schedule::paper(16), 1).unwrap();
    let mut ckpt = t.to_checkpoint("", BTreeMap::new());
    let n = ckpt.params.len();
    if let Some((m, _)) = &mut ckpt.adam {
        m.pop();
    }
    let path = Path::new("short-moments.safetensors");
    let e = t.resume(ckpt.clone(), 0, path).unwrap_err();
    let found = (n - 1).to_string();
    assert_error(&e, |e| matches!(e, Error::CheckpointMismatch { .. }), &["Adam first-moment count", &found]);
    let e = t.init_from(ckpt.clone(), true, path).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::CheckpointMismatch { .. }), &["Adam first-moment count"]);
    // Without the optimizer's state the moments are not read.
    t.init_from(ckpt, false, path).unwrap();
}

#[test]
fn share_of_refuses_a_rank_outside_the_run() {
    let e = share_of(4, 2, 2).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["rank 2", "2 workers"]);
    let e = share_of(4, 0, 0).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["0 workers"]);
    assert_eq!(share_of(4, 1, 2).unwrap(), 2..4);
    assert_eq!(share_of(usize::MAX, 1, 2).unwrap().end, usize::MAX, "no overflow");
}

#[test]
fn transformer_loss_refuses_a_workspace_without_this_batchs_forward_pass() {
    let m = model(1, 20);
    let (one, two) = (batch(&[(vec![5, 6], vec![7])]), batch(&[(vec![5], vec![7, 8, 9]), (vec![6], vec![8])]));
    let mut ws = Workspace::new();
    let e = m.loss(&one, &mut ws, 0.0, 1.0).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["holds none"]);
    m.forward(&one, &mut ws, None).unwrap();
    let e = m.loss(&two, &mut ws, 0.0, 1.0).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["B=1 S=2 T=2", "this batch: B=2 S=1 T=4"]);
    // Another model of other sizes over the same batch.
    let e = model(2, 20).loss(&one, &mut ws, 0.0, 1.0).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["another model"]);
    let e = m.loss(&one, &mut ws, 1.5, 1.0).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Config(_)), &["label smoothing 1.5"]);
    assert!(m.loss(&one, &mut ws, 0.1, 1.0).unwrap().loss.is_finite());
}

#[test]
fn transformer_backward_refuses_wrong_gradients_workspaces_and_prepared_models() {
    let m = model(1, 20);
    let (one, two) = (batch(&[(vec![5, 6], vec![7])]), batch(&[(vec![5], vec![7, 8])]));
    let mut ws = Workspace::new();
    m.forward(&one, &mut ws, None).unwrap();
    m.loss(&one, &mut ws, 0.1, 1.0).unwrap();
    let mut short = vec![0.0; m.params.len() - 1];
    let e = m.backward(&one, &mut ws, None, &mut short).unwrap_err();
    let counts = format!("{} gradients given for the model's {} parameters", m.params.len() - 1, m.params.len());
    assert_error(&e, |e| matches!(e, Error::Mismatch(_)), &[&counts]);
    let mut grads = vec![0.0; m.params.len()];
    let e = m.backward(&two, &mut ws, None, &mut grads).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["the backward pass", "B=1 S=1 T=3"]);
    // Encoding in the workspace replaces the forward pass.
    m.encode(&[&[5, 6]], &mut ws).unwrap();
    let e = m.backward(&one, &mut ws, None, &mut grads).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Batch(_)), &["holds none"]);
    m.forward(&one, &mut ws, None).unwrap();
    m.loss(&one, &mut ws, 0.1, 1.0).unwrap();
    m.backward(&one, &mut ws, None, &mut grads).unwrap();
    assert!(grads.iter().any(|&g| g != 0.0));
    let prepared = m.prepare(Precision::F32).unwrap();
    let mut grads = vec![0.0; prepared.params.len()];
    let e = prepared.backward(&one, &mut ws, None, &mut grads).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Unsupported(_)), &["prepared for inference", "no backward pass"]);
}

#[test]
fn param_layout_gather_refuses_a_buffer_of_another_layout() {
    let layout = ParamLayout::new(&config(1, 20));
    let params = layout.init(1);
    let e = layout.gather(&layout, &params[1..]).unwrap_err();
    let counts = format!("{} parameters given for a layout of {}", params.len() - 1, params.len());
    assert_error(&e, |e| matches!(e, Error::Mismatch(_)), &[&counts]);
    // A layout with tensors the source lacks.
    let bigger = ParamLayout::new(&config(2, 20));
    let e = bigger.gather(&layout, &params).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Mismatch(_)), &["has no tensor"]);
    assert_eq!(layout.gather(&layout, &params).unwrap(), params);
}

#[test]
fn checkpoint_save_refuses_moments_or_a_config_that_do_not_fit() {
    let dir = TestDir::new("no-panics-save");
    let m = model(1, 20);
    let n = m.params.len();
    let ckpt = Checkpoint {
        config: m.config.clone(),
        step: 1,
        vocab_hash: String::new(),
        params: m.params.clone(),
        adam: Some((vec![0.0; n], vec![0.0; n - 2])),
        extra: BTreeMap::new(),
    };
    let e = checkpoint::save(&dir.join("a.safetensors"), &ckpt).unwrap_err();
    let counts = format!("{n} and {} Adam moments for its {n} parameters", n - 2);
    assert_error(&e, |e| matches!(e, Error::Mismatch(_)), &[&counts]);
    let bad = Checkpoint { config: ModelConfig { n_heads: 0, ..m.config.clone() }, adam: None, ..ckpt.clone() };
    let e = checkpoint::save(&dir.join("b.safetensors"), &bad).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Config(_)), &["n_heads must be at least 1"]);
    assert!(!dir.join("a.safetensors").exists() && !dir.join("b.safetensors").exists());
    checkpoint::save(&dir.join("c.safetensors"), &Checkpoint { adam: None, ..ckpt }).unwrap();
}

#[test]
fn marian_export_refuses_parameters_that_do_not_fit_the_config() {
    use transformer::data::tokenizer::Tokenizer;
    use transformer::import::marian::{export, import, write};
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/marian-real/tied_all_relu");
    let dir = TestDir::new("no-panics-export");
    let (ckpt, tok) = write(&import(&fixture).unwrap(), &dir.join("ours")).unwrap();
    let (mut ck, tok) = (checkpoint::load(&ckpt).unwrap(), Tokenizer::load(&tok).unwrap());
    let n = ck.params.len();
    ck.params.truncate(n - 3);
    let e = export(&ck, &tok, &dir.join("marian")).unwrap_err();
    let counts = format!("{} parameters, its configuration needs {n}", n - 3);
    assert_error(&e, |e| matches!(e, Error::Mismatch(_)), &[&counts]);
    assert!(!dir.join("marian").join("model.npz").exists());
}

#[test]
fn token_accuracy_refuses_logits_that_are_not_one_row_a_target_position() {
    let b = batch(&[(vec![5, 6], vec![7, 8])]);
    let e = transformer::synthetic::token_accuracy(&[0.0; 59], &b, 20).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["59 logits for 3 target positions", "there must be 60"]);
    let e = transformer::synthetic::token_accuracy(&[], &b, 0).unwrap_err();
    assert_error(&e, |e| matches!(e, Error::Input(_)), &["vocabulary of 0"]);
    let mut logits = vec![0.0; 60];
    logits[7] = 1.0; // position 0 predicts 7, its target
    assert_eq!(transformer::synthetic::token_accuracy(&logits, &b, 20).unwrap(), (1, 3));
}

#[test]
fn bleu_by_source_length_takes_any_bucket_bounds() {
    use transformer::eval::bleu::{bleu_by_source_length, BleuConfig};
    let hyps = strings(&["a small cat", "the dog ran off home"]);
    let refs = vec![hyps.clone()];
    for upper in [&[usize::MAX][..], &[]] {
        let b = bleu_by_source_length(&hyps, &hyps, &refs, upper, &BleuConfig::default()).unwrap();
        assert_eq!(b.iter().map(|b| b.sentences).sum::<usize>(), 2, "{upper:?}");
    }
    // Bounds that are not ascending put a sentence in two buckets, but never panic.
    bleu_by_source_length(&hyps, &hyps, &refs, &[9, 3], &BleuConfig::default()).unwrap();
}
