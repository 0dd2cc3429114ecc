//! §5.1 A run's data: the vocabulary (our BPE, learned from the training text when missing, or an
//! imported model's tokenizer for fine-tuning it), the
//! training pairs (encoded and filtered, or memory-mapped from `transformer prepare`'s output),
//! their token-bucketed batches, and the validation pairs, all checked against the model's
//! positions before the first update.

use super::config::{DataSection, RunConfig};
use super::distributed::digest;
use crate::config::ModelConfig;
use crate::data::batching::{make_batches_in_rounds, BatchConfig};
use crate::data::binarized::{Binarized, Pairs};
use crate::data::parallel::{encode_and_filter_for, FilterConfig, FilterReport, TokenPairs};
use crate::data::tokenizer::Tokenizer;
use crate::error::{Error, Result};
use crate::events::Events;
use crate::model::Batch;

/// Prepared data: the tokenizer, the model configuration it implies, filtered training pairs,
/// their batches, validation pairs.
pub(super) struct Data {
    pub tokenizer: Tokenizer,
    pub model: ModelConfig,
    pub train: Box<dyn Pairs>,
    pub batches: Vec<Vec<usize>>,
    pub valid: TokenPairs,
    /// The validation text pairs (for parsing: sentence, linearised gold tree).
    pub valid_text: Vec<(String, String)>,
    /// With `train.word_dropout`: the training words' counts.
    pub word_counts: Option<WordCounts>,
    /// With `data.guided_alignment`: each training pair's aligned (source, target) token positions.
    pub alignments: Option<TokenLinks>,
}

/// Per training pair, its aligned (source, target) token positions.
pub(super) type TokenLinks = Vec<Vec<(u16, u16)>>;

/// Word dropout's counts (`train.word_dropout`): how often each word (a run of pieces, as the
/// vocabulary's pointer table splits a source) occurs in the training sources.
pub(super) struct WordCounts {
    table: crate::model::pointer::PointerTable,
    counts: std::collections::HashMap<Vec<u32>, u32>,
}

impl WordCounts {
    /// The counts over every training source.
    pub fn new(table: crate::model::pointer::PointerTable, train: &dyn Pairs) -> Self {
        let mut counts = std::collections::HashMap::new();
        for i in 0..train.count() {
            let src = train.get(i).0;
            for span in table.word_spans(&src) {
                *counts.entry(src[span].to_vec()).or_insert(0u32) += 1;
            }
        }
        WordCounts { table, counts }
    }

    /// Sets `batch.src_drop`: 1/(1 + c) at every piece of a word seen c times.
    pub fn set_probabilities(&self, batch: &mut Batch) {
        let s = batch.s;
        batch.src_drop = vec![0.0; batch.src.len()];
        for r in 0..batch.b {
            let src = &batch.src[r * s..][..batch.src_lens[r]];
            for span in self.table.word_spans(src) {
                let c = self.counts.get(&src[span.clone()]).copied().unwrap_or(0);
                batch.src_drop[r * s..][span].fill(1.0 / (1.0 + c as f32));
            }
        }
    }

    /// How many distinct words.
    pub fn len(&self) -> usize {
        self.counts.len()
    }
}

impl Data {
    /// A digest of what the workers of a data-parallel run must share: the vocabulary, the
    /// training pairs' lengths (hence the batches and their order) and the validation pairs.
    pub fn fingerprint(&self) -> [u64; 4] {
        let mut bytes = self.tokenizer.hash().as_bytes().to_vec();
        for i in 0..self.train.count() {
            let (s, t) = self.train.lengths_of(i);
            bytes.extend_from_slice(&(s as u32).to_le_bytes());
            bytes.extend_from_slice(&(t as u32).to_le_bytes());
        }
        for (s, t) in &self.valid {
            bytes.extend(s.iter().chain(t).flat_map(|x| x.to_le_bytes()));
            bytes.push(0xff);
        }
        digest(&bytes)
    }
}

/// The run's tokenizer: the file `data.bpe` names (our BPE, or the `tokenizer.json` of an
/// imported model, told apart by content), or a BPE vocabulary learned from the training text
/// and written there when it is missing.
fn tokenizer(cfg: &RunConfig, events: &mut dyn Events) -> Result<Tokenizer> {
    let d = &cfg.data;
    if !d.bpe.exists() {
        events.log(&format!("learning a {}-entry BPE vocabulary from the training text", d.vocab_size));
        let text = training_text(d)?;
        let bpe = d.task.learn_vocabulary(&text, d.vocab_size)?;
        if let Some(w) = bpe.shortfall(d.vocab_size) {
            events.warn(&w.to_string());
        }
        bpe.save(&d.bpe)?;
        return Ok(Tokenizer::Bpe(bpe));
    }
    let tokenizer = Tokenizer::load(&d.bpe)?;
    if tokenizer.bpe().is_none() {
        if d.task != crate::task::Task::Translation {
            return Err(Error::Config(format!(
                "data.bpe: {} is an imported model's tokenizer, which serves translation only (data.task = \"{}\" needs \
                 a BPE vocabulary of ours)",
                d.bpe.display(),
                d.task.name()
            )));
        }
        events.log(&format!("tokenizer: {} (an imported model's SentencePiece vocabularies)", d.bpe.display()));
    }
    Ok(tokenizer)
}

/// The training text the vocabulary is learned from: the pairs of `train_src` (for parsing, its
/// `train_files`), then those of `data.silver_src`, each pair once.
fn training_text(d: &DataSection) -> Result<Vec<(String, String)>> {
    let mut text = d.task.read_pairs(&d.train_src, &d.train_tgt, d.train_files.as_deref())?;
    // Said once, when the training pairs are read (`training_pairs`).
    if let Some(silver) = silver_text(d, text.len(), 1, &mut ())? {
        text.extend(silver);
    }
    Ok(text)
}

/// The pairs of `data.silver_src`, if it is set, with a line saying how many beside how many gold.
fn silver_text(
    d: &DataSection,
    gold: usize,
    gold_repeat: usize,
    events: &mut dyn Events,
) -> Result<Option<Vec<(String, String)>>> {
    let Some(silver_src) = &d.silver_src else { return Ok(None) };
    let silver = d.task.read_pairs(silver_src, std::path::Path::new(""), None)?;
    events.log(&format!(
        "silver trees: {} from {}, beside {gold} gold trees seen {gold_repeat} time{} an epoch",
        silver.len(),
        silver_src.display(),
        if gold_repeat == 1 { "" } else { "s" }
    ));
    Ok(Some(silver))
}

/// The encoded training pairs (gold `gold_repeat` times, then silver) and the round each is
/// batched in: gold copy `k` is round `k`, silver pair `j` round `j mod gold_repeat`. Batching
/// each round apart keeps the copies of one gold pair out of one batch: sorted by length together,
/// the copies (of equal length) would sit side by side, and a batch of 30 pairs would hold about
/// 30 / `gold_repeat` distinct trees, each several times.
fn training_pairs(
    d: &DataSection,
    tokenizer: &Tokenizer,
    filter: &FilterConfig,
    events: &mut dyn Events,
) -> Result<(TokenPairs, FilterReport, Vec<usize>)> {
    let gold_text = d.task.read_pairs(&d.train_src, &d.train_tgt, d.train_files.as_deref())?;
    let r = d.gold_repeat.max(1);
    let (gold, gold_report) = encode(d, tokenizer, &gold_text, filter)?;
    let Some(silver_text) = silver_text(d, gold_text.len(), r, events)? else {
        let rounds = vec![0; gold.len()];
        return Ok((gold, gold_report, rounds));
    };
    let (silver, silver_report) = encode(d, tokenizer, &silver_text, filter)?;
    let report = FilterReport {
        read: r * gold_report.read + silver_report.read,
        kept: r * gold_report.kept + silver_report.kept,
        empty: r * gold_report.empty + silver_report.empty,
        too_long: r * gold_report.too_long + silver_report.too_long,
        bad_ratio: r * gold_report.bad_ratio + silver_report.bad_ratio,
    };
    let mut pairs = Vec::with_capacity(r * gold.len() + silver.len());
    let mut rounds = Vec::with_capacity(pairs.capacity());
    for k in 0..r {
        pairs.extend(gold.iter().cloned());
        rounds.extend(std::iter::repeat_n(k, gold.len()));
    }
    rounds.extend((0..silver.len()).map(|j| j % r));
    pairs.extend(silver);
    Ok((pairs, report, rounds))
}

/// The training pairs that pass `filter`, with their word alignments from `path` (a line a
/// pair, `s-t` space-separated word positions) as pairs of token positions: every token of source
/// word s with every token of target word t. A missing line or a position past its sentence's
/// words is an error naming the file and line.
fn aligned_pairs(
    d: &DataSection,
    path: &std::path::Path,
    tokenizer: &Tokenizer,
    filter: &FilterConfig,
) -> Result<(TokenPairs, FilterReport, TokenLinks)> {
    use crate::data::tokenizer::Side;
    use crate::decode::alignment::{parse_points, token_words};
    let text = d.task.read_pairs(&d.train_src, &d.train_tgt, None)?;
    let lines = crate::data::corpus::read_lines(path)?;
    if lines.len() != text.len() {
        return Err(Error::Input(format!(
            "{} has {} lines but {} has {} pairs: the alignments must be line-aligned with the training text",
            path.display(),
            lines.len(),
            d.train_src.display(),
            text.len()
        )));
    }
    let mut report = FilterReport::default();
    let (mut pairs, mut aligned) = (Vec::new(), Vec::new());
    for (i, (pair, line)) in text.iter().zip(&lines).enumerate() {
        let at = |e: String| Error::Input(format!("{}:{}: {e}", path.display(), i + 1));
        let points = parse_points(line).map_err(|e| at(e.to_string()))?;
        let (kept, r) = encode(d, tokenizer, std::slice::from_ref(pair), filter)?;
        report = FilterReport {
            read: report.read + r.read,
            kept: report.kept + r.kept,
            empty: report.empty + r.empty,
            too_long: report.too_long + r.too_long,
            bad_ratio: report.bad_ratio + r.bad_ratio,
        };
        let Some((src, tgt)) = kept.into_iter().next() else { continue };
        // A Marian source's `</s>` is no word of the text.
        let n = src.len() - usize::from(src.last() == Some(&crate::vocab::EOS));
        let (sw, tw) = (token_words(tokenizer, Side::Source, &src[..n]), token_words(tokenizer, Side::Target, &tgt));
        let words = |w: &[Option<usize>]| w.iter().flatten().max().map_or(0, |&m| m + 1);
        let (ns, nt) = (words(&sw), words(&tw));
        let mut links = Vec::new();
        for (s, t) in points {
            if s >= ns || t >= nt {
                return Err(at(format!(
                    "pair {s}-{t} lies outside the sentence pair's {ns} source and {nt} target words (0-based)"
                )));
            }
            for (a, _) in sw.iter().enumerate().filter(|x| *x.1 == Some(s)) {
                for (b, _) in tw.iter().enumerate().filter(|x| *x.1 == Some(t)) {
                    links.push((a as u16, b as u16));
                }
            }
        }
        pairs.push((src, tgt));
        aligned.push(links);
    }
    Ok((pairs, report, aligned))
}

/// Each target token's row of a batch's guide: the distribution over the source tokens it is
/// aligned to ([`Batch::guide`]), from each pair's aligned token positions.
fn set_guide(batch: &mut Batch, idx: &[usize], alignments: &[Vec<(u16, u16)>]) {
    let (t, s) = (batch.t, batch.s);
    batch.guide = vec![0.0; batch.b * t * s];
    for (b, &i) in idx.iter().enumerate() {
        for &(a, c) in &alignments[i] {
            batch.guide[(b * t + c as usize) * s + a as usize] = 1.0;
        }
    }
    for row in batch.guide.chunks_exact_mut(s) {
        let n: f32 = row.iter().sum();
        if n > 0.0 {
            row.iter_mut().for_each(|x| *x /= n);
        }
    }
}

/// Encodes text pairs with the run's tokenizer ([`encode_and_filter_for`]).
fn encode(
    d: &DataSection,
    tokenizer: &Tokenizer,
    text: &[(String, String)],
    filter: &FilterConfig,
) -> Result<(TokenPairs, FilterReport)> {
    encode_and_filter_for(d.task.target_encoding(d.tree_format), text, tokenizer, filter)
}

/// The model configuration of a run: the preset with the `[model]` overrides, or with
/// `train.init` the initial checkpoint's configuration with them (fine-tuning keeps the
/// checkpoint's architecture, an imported model's options included; fields `[model]` leaves out,
/// dropout and label smoothing among them, are the checkpoint's, 0 for an import), at the
/// tokenizer's sizes.
fn model_config(cfg: &RunConfig, tokenizer: &Tokenizer) -> Result<ModelConfig> {
    let base = match &cfg.train.init {
        // A run that has begun resumes with its own checkpoints' configuration (readable ones,
        // newest first), so the initial file need not be there any more.
        Some(path) => match own_config(&cfg.train.output_dir) {
            Some(own) => own,
            None => crate::checkpoint::read_config(path)?,
        },
        None => ModelConfig::preset(cfg.model.preset.as_deref().unwrap_or("base"))?,
    };
    cfg.model_config_on(&base, tokenizer.vocab_size(), tokenizer.source_vocab_size())
}

/// The configuration stored in the newest readable checkpoint of a run directory, if any.
fn own_config(dir: &std::path::Path) -> Option<ModelConfig> {
    let mut found = super::run_dir::list_checkpoints(dir).ok()?;
    found.sort_by_key(|(step, _)| std::cmp::Reverse(*step));
    found.iter().find_map(|(_, p)| crate::checkpoint::read_config(p).ok())
}

pub(super) fn prepare(cfg: &RunConfig, events: &mut dyn Events) -> Result<Data> {
    let d = &cfg.data;
    let tokenizer = tokenizer(cfg, events)?;
    // The round each training pair is batched in (empty: all in one).
    let mut rounds = Vec::new();
    let mut alignments = None;
    let train: Box<dyn Pairs> = match &d.train_bin {
        Some(dir) => {
            let b = Binarized::open(dir)?;
            if b.vocab_hash != tokenizer.hash() {
                return Err(Error::Mismatch(format!(
                    "{} was prepared with vocabulary {} but {} is {}; run `transformer prepare` again",
                    dir.display(),
                    b.vocab_hash,
                    d.bpe.display(),
                    tokenizer.hash()
                )));
            }
            let prepared = b.tree_format.unwrap_or_default();
            if d.task == crate::task::Task::Parsing && prepared != d.tree_format {
                return Err(Error::Mismatch(format!(
                    "{} holds trees in the {:?} format but data.tree_format = {:?}; run `transformer prepare --tree-format {}` again",
                    dir.display(),
                    prepared.name(),
                    d.tree_format.name(),
                    d.tree_format.name()
                )));
            }
            events.log(&format!("train: {} prepared pairs, memory-mapped from {}", b.len(), dir.display()));
            Box::new(b)
        }
        None => {
            let filter = FilterConfig { max_tokens: d.max_tokens, max_ratio: d.max_ratio };
            let (pairs, report, r) = match &d.guided_alignment {
                Some(path) => {
                    let (pairs, report, aligned) = aligned_pairs(d, path, &tokenizer, &filter)?;
                    let links: usize = aligned.iter().map(Vec::len).sum();
                    events.log(&format!(
                        "guided alignment: {links} aligned token pairs over {} training pairs, from {}",
                        aligned.len(),
                        path.display()
                    ));
                    alignments = Some(aligned);
                    (pairs, report, Vec::new())
                }
                None => training_pairs(d, &tokenizer, &filter, events)?,
            };
            events.log(&format!("train: {report}"));
            rounds = r;
            Box::new(pairs)
        }
    };
    let model = model_config(cfg, &tokenizer)?;
    cfg.validate_for(&model, super::config::machine_memory_bytes())?;
    let valid_text = d.task.read_pairs(&d.valid_src, &d.valid_tgt, d.valid_files.as_deref())?;
    let valid = validation_pairs(&valid_text, &tokenizer, &model, d, events)?;
    if train.count() == 0 {
        return Err(Error::Input(
            "no training pairs left after filtering; check data.max_tokens and data.max_ratio".into(),
        ));
    }
    let lengths: Vec<(usize, usize)> = (0..train.count()).map(|i| train.lengths_of(i)).collect();
    // Checked up front, not hours in: every training pair fits the model's positions.
    if let Some(i) = lengths.iter().position(|&(s, t)| s > model.max_positions || t + 1 > model.max_positions) {
        let from = d.train_bin.as_ref().map_or_else(
            || format!("{} / {}", d.train_src.display(), d.train_tgt.display()),
            |dir| dir.display().to_string(),
        );
        return Err(Error::Input(format!(
            "training pair {} of {from} has {} source and {} target tokens, more than model.max_positions = {} \
             allows (the target also takes an EOS): prepare the data with a lower max_tokens or raise \
             model.max_positions",
            i + 1,
            lengths[i].0,
            lengths[i].1,
            model.max_positions
        )));
    }
    let bc = BatchConfig { max_src_tokens: cfg.train.max_src_tokens, max_tgt_tokens: cfg.train.max_tgt_tokens };
    check_budget(&lengths, &bc, events)?;
    let batches = make_batches_in_rounds(&lengths, &rounds, &bc)?;
    let word_counts = match (cfg.train.word_dropout, tokenizer.bpe()) {
        (false, _) => None,
        (true, None) => return Err(Error::Config("train.word_dropout needs a BPE vocabulary of ours".into())),
        (true, Some(bpe)) => Some(bpe),
    }
    .map(|bpe| {
        let table = crate::model::pointer::PointerTable::from_bpe(bpe, d.tree_format);
        let counts = WordCounts::new(table, train.as_ref());
        events.log(&format!(
            "word dropout: {} distinct training words, each read as UNK with probability 1/(1 + count)",
            counts.len()
        ));
        counts
    });
    Ok(Data { tokenizer, model, train, batches, valid, valid_text, word_counts, alignments })
}

/// A batch budget no training pair fits is refused (every batch would be one pair over it); pairs
/// over it while others fit get a batch of their own, and the log says how many.
fn check_budget(lengths: &[(usize, usize)], bc: &BatchConfig, events: &mut dyn Events) -> Result<()> {
    let over = |&(s, t): &(usize, usize)| s > bc.max_src_tokens || t + 1 > bc.max_tgt_tokens;
    let n_over = lengths.iter().filter(|p| over(p)).count();
    if n_over == 0 {
        return Ok(());
    }
    let shortest_src = lengths.iter().map(|p| p.0).min().unwrap_or(0);
    let shortest_tgt = lengths.iter().map(|p| p.1 + 1).min().unwrap_or(0);
    if n_over == lengths.len() {
        return Err(Error::Config(format!(
            "train.max_src_tokens = {} and train.max_tgt_tokens = {} fit none of the {} training pairs (the shortest \
             source has {shortest_src} positions and the shortest target {shortest_tgt}, its EOS included): raise them, to several \
             thousand tokens for a useful batch",
            bc.max_src_tokens,
            bc.max_tgt_tokens,
            lengths.len()
        )));
    }
    events.warn(&format!(
        "{n_over} of {} training pairs exceed train.max_src_tokens = {} or train.max_tgt_tokens = {} alone; \
         each gets a batch of its own",
        lengths.len(),
        bc.max_src_tokens,
        bc.max_tgt_tokens
    ));
    Ok(())
}

/// The validation pairs: every pair with two non-empty sides, encoded; a pair too long for the
/// model's positions is left out with a warning naming its file and line (it cannot be scored).
/// No pair at all is an error: a run must have something to validate on.
fn validation_pairs(
    text: &[(String, String)],
    tokenizer: &Tokenizer,
    model: &ModelConfig,
    d: &DataSection,
    events: &mut dyn Events,
) -> Result<TokenPairs> {
    let keep_all = FilterConfig { max_tokens: usize::MAX, max_ratio: f64::INFINITY };
    let (encoded, mut report) = encode(d, tokenizer, text, &keep_all)?;
    let max = model.max_positions;
    let mut valid = Vec::with_capacity(encoded.len());
    let non_empty = text.iter().enumerate().filter(|(_, (s, t))| !s.trim().is_empty() && !t.trim().is_empty());
    for ((line, _), (s, t)) in non_empty.zip(encoded) {
        if s.len() > max || t.len() + 1 > max {
            events.warn(&format!("{}:{}: a validation pair of {} source and {} target tokens does not fit model.max_positions = {max}; left out of validation",
                d.valid_src.display(),
                line + 1,
                s.len(),
                t.len()
            ));
            report.too_long += 1;
            report.kept -= 1;
        } else {
            valid.push((s, t));
        }
    }
    events.log(&format!("valid: {report}"));
    if valid.is_empty() {
        return Err(Error::Config(format!(
            "{} / {}: no validation pair to score ({} read, {} with an empty side, {} too long): give a validation set",
            d.valid_src.display(),
            d.valid_tgt.display(),
            report.read,
            report.empty,
            report.too_long
        )));
    }
    Ok(valid)
}

/// The batch of training pairs `idx`.
pub(super) fn batch_of(data: &Data, idx: &[usize]) -> Batch {
    let sel: Vec<(Vec<u32>, Vec<u32>)> = idx.iter().map(|&i| data.train.get(i)).collect();
    let mut batch = Batch::from_pairs(&sel);
    if let Some(w) = &data.word_counts {
        w.set_probabilities(&mut batch);
    }
    if let Some(a) = &data.alignments {
        set_guide(&mut batch, idx, a);
    }
    batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pointer::{PointerTable, TokenClass};

    #[test]
    fn silver_trees_follow_the_gold_ones_repeated() {
        let tb = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/treebank");
        let silver = tempfile::tempdir().unwrap();
        let silver_file = silver.path().join("silver.mrg");
        std::fs::write(&silver_file, "( (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)) )\n(TOP (NP (NN dog)))\n")
            .unwrap();
        let mut d = DataSection {
            task: crate::task::Task::Parsing,
            train_src: tb,
            train_files: Some("own_0001..own_0002".into()),
            ..DataSection::default()
        };
        let gold = training_text(&d).unwrap();
        assert!(gold.len() > 5, "{}", gold.len());
        d.silver_src = Some(silver_file);
        d.gold_repeat = 3;
        // For the vocabulary, each tree once.
        let once = training_text(&d).unwrap();
        assert_eq!(once.len(), gold.len() + 2);
        assert_eq!(&once[..gold.len()], &gold[..]);
        assert_eq!(once[gold.len()].0, "The cat sat .");
        assert_eq!(once[gold.len() + 1].0, "dog");
        // For training, the gold trees 3 times, then the silver ones.
        let text: Vec<(String, String)> =
            gold.iter().chain(&gold).chain(&gold).cloned().chain(once[gold.len()..].iter().cloned()).collect();
        // Encoded: the same pairs in the same order, each gold copy its own round, silver dealt out.
        let bpe = d.task.learn_vocabulary(&text, 300).unwrap();
        let tokenizer = Tokenizer::Bpe(bpe);
        let filter = FilterConfig { max_tokens: 400, max_ratio: 12.0 };
        let mut said = String::new();
        let (pairs, report, rounds) =
            training_pairs(&d, &tokenizer, &filter, &mut crate::events::Lines::new(|m: &str| said.push_str(m)))
                .unwrap();
        assert!(said.contains("silver trees: 2 from") && said.contains("seen 3 times an epoch"), "{said}");
        let (whole, whole_report) = encode(&d, &tokenizer, &text, &filter).unwrap();
        assert_eq!(pairs, whole);
        assert_eq!(report.to_string(), whole_report.to_string());
        let g = gold.len();
        assert_eq!(rounds.len(), 3 * g + 2);
        for k in 0..3 {
            assert!(rounds[k * g..(k + 1) * g].iter().all(|&r| r == k), "gold copy {k} is round {k}");
        }
        assert_eq!(&rounds[3 * g..], &[0, 1]);
        d.silver_src = None;
        let (_, _, rounds) = training_pairs(&d, &tokenizer, &filter, &mut ()).unwrap();
        assert!(rounds.iter().all(|&r| r == 0));
    }

    #[test]
    fn word_dropout_counts_whole_words() {
        // Id 4 starts a word, 5 continues one.
        let s = |b| TokenClass::Piece { starts_word: b };
        let classes =
            vec![TokenClass::Structure, TokenClass::Structure, TokenClass::Structure, s(false), s(true), s(false)];
        let train: crate::data::parallel::TokenPairs =
            vec![(vec![4, 4, 5], vec![1]), (vec![4, 5, 4], vec![1]), (vec![5, 4], vec![1])];
        // Words: [4] three times, [4 5] twice, and [5] once (position 0 starts a word whatever its piece).
        let counts = WordCounts::new(PointerTable::new(classes), &train);
        assert_eq!(counts.len(), 3);
        let mut batch = Batch::from_pairs(&[(vec![4, 5, 4, 4, 4], vec![1]), (vec![5, 5], vec![1])]);
        counts.set_probabilities(&mut batch);
        let (q, h) = (1.0 / 4.0, 1.0 / 3.0);
        // Row 1: [5 5] is unseen (probability 1), then padding.
        assert_eq!(batch.src_drop, vec![h, h, q, q, q, 1.0, 1.0, 0.0, 0.0, 0.0]);
    }
}
