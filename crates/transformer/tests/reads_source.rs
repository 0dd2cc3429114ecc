//! The parser reads its sentence (issue 24's smallest case): a small model with the next-word
//! pointer, trained without dropout on 20 short treebank trees, reproduces every tree from its own
//! sentence, and its teacher-forced loss with each sentence swapped for another's is far worse.
//! A model that ignored its source could write at most one of 20 different trees from 20
//! different sentences, so this fails when the source path dies (docs/parsing.md).

use std::path::Path;
use transformer::data::trees::{delinearise, TreeFormat};
use transformer::decode::translator::{SessionOptions, Translator};
use transformer::decode::ParseOptions;
use transformer::eval::perplexity::score_and_reading;
use transformer::model::pointer::PointerTable;
use transformer::train::{Schedule, Trainer};
use transformer::{Batch, ModelConfig, ParsingInputs, Positions, Task, Transformer, Workspace};

#[test]
fn twenty_short_trees_are_reproduced_from_their_own_sentences() {
    reproduces_twenty_short_trees(&transformer::test_support::treebank(), "own_0001..own_0030", TreeFormat::TagsWords);
}

/// The same with the paper's target (tags, no words): the pointer alone tells the decoder which
/// word each leaf is at.
#[test]
fn twenty_short_trees_are_reproduced_from_their_own_sentences_in_the_tags_format() {
    reproduces_twenty_short_trees(&transformer::test_support::treebank(), "own_0001..own_0030", TreeFormat::Tags);
}

/// Extra check: the same on the Penn Treebank sample's first 30 files (../shared/data/ptb-sample).
#[test]
fn shared_twenty_short_penn_treebank_trees_are_reproduced_from_their_own_sentences() {
    let Some(sample) = transformer::test_support::shared("data/ptb-sample") else { return };
    reproduces_twenty_short_trees(&sample, "wsj_0001..wsj_0030", TreeFormat::TagsWords);
}

fn reproduces_twenty_short_trees(treebank: &Path, files: &str, format: TreeFormat) {
    let mut pairs = Task::Parsing.read_pairs(treebank, Path::new(""), Some(files)).unwrap();
    // The 20 shortest distinct sentences of 6 words or more.
    pairs.retain(|(s, _)| s.split_whitespace().count() >= 6);
    pairs.sort_by_key(|(s, t)| (t.split_whitespace().count(), s.clone()));
    pairs.dedup_by(|a, b| a.0 == b.0);
    pairs.truncate(20);
    assert_eq!(pairs.len(), 20);
    let bpe = Task::Parsing.learn_vocabulary(&pairs, 300).unwrap();
    let ids: Vec<(Vec<u32>, Vec<u32>)> = pairs
        .iter()
        .map(|(s, t)| {
            (Task::Parsing.encode_source(&bpe, s).unwrap(), Task::Parsing.encode_target(format, &bpe, t).unwrap())
        })
        .collect();
    let cfg = ModelConfig {
        n_layers: 2,
        d_model: 64,
        d_ff: 128,
        n_heads: 2,
        d_k: 32,
        d_v: 32,
        dropout: 0.0,
        attention_dropout: 0.0,
        label_smoothing: 0.0,
        positions: Positions::Sinusoidal,
        max_positions: 256,
        vocab_size: bpe.vocab_size(),
        layer_norm_eps: 1e-6,
        parsing: ParsingInputs {
            source_pointer: true,
            next_closer: true,
            next_closer_depth: true,
            next_closer_dropout: 0.0,
            ..ParsingInputs::default()
        },
        ..transformer::ModelConfig::base()
    };
    let model =
        Transformer::new(cfg.clone(), 1).unwrap().with_pointer_table(PointerTable::from_bpe(&bpe, format)).unwrap();
    let mut trainer = Trainer::new(model, Schedule { d_model: 64, warmup: 100, lr_scale: 0.5 }, 1).unwrap();
    let batch = Batch::from_pairs(&ids);
    for _ in 0..STEPS {
        trainer.train_step(std::slice::from_ref(&batch)).unwrap();
    }
    let model = trainer.model().clone();
    let budget = transformer::data::batching::BatchConfig { max_src_tokens: 4096, max_tgt_tokens: 4096 };
    let (_, reading) = score_and_reading(&model, &ids, &budget, 0.0, &mut Workspace::new()).unwrap();
    let gap = reading.gap.unwrap();
    eprintln!("shifted-sentence gap {gap:.3} nats/token, encoder spread {:.3}", reading.spread);

    let parser =
        Translator::new(model, bpe, SessionOptions { task: Task::Parsing, tree_format: format, ..Default::default() })
            .unwrap();
    let sentences: Vec<String> = pairs.iter().map(|(s, _)| s.clone()).collect();
    let mut opts = ParseOptions::default();
    opts.decode.search = transformer::decode::BeamConfig::greedy();
    let (parses, _) = parser.parse(&sentences, &opts, &mut ()).unwrap();
    let mut exact = 0;
    for ((s, t), p) in pairs.iter().zip(&parses) {
        let words: Vec<&str> = s.split_whitespace().collect();
        let gold = delinearise(&t.split_whitespace().map(str::to_string).collect::<Vec<_>>(), &words);
        if !p.malformed && p.tree == gold {
            exact += 1;
        } else {
            eprintln!("not reproduced: {s}\n  want {}\n  got  {}", gold.to_bracketed(), p.tree.to_bracketed());
        }
    }
    eprintln!("{}: {exact}/20 trees reproduced exactly (unconstrained, greedy) after {STEPS} updates", format.name());
    assert!(gap >= 1.0, "the decoder hardly reads its source: gap {gap:.3} nats/token");
    assert!(exact >= 19, "only {exact}/20 trees reproduced from their own sentences");
}

/// Updates of the whole 20-tree batch.
const STEPS: usize = 300;
