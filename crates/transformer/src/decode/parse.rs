//! §6.3 Parsing with a [`Translator`] of a parsing model: sentences into trees over exactly their
//! words, repaired where the model's output is not one, optionally under the tree constraint
//! (`--constrained`), and scored against gold trees with EVALB.

use super::batches::{DecodeOptions, TranslateStats};
use super::beam::{BeamConfig, Constraint, Hypothesis};
use super::translator::{is_blank, Translator};
use super::tree_constraint::TreeConstraint;
use crate::data::trees::{delinearise, is_well_formed, retag_deleted_punctuation, with_words, Tree};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::task::Task;

/// How to parse.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParseOptions {
    /// Batching and search (§6.3: beam 21, α 0.3, input length + 300).
    pub decode: DecodeOptions,
    /// Restrict the search to sequences that can still become a valid tree (`--constrained`, a
    /// named deviation).
    pub constrained: bool,
    /// Give `(TOP)` with a warning for a sentence longer than the model's positions, instead of an
    /// error.
    pub skip_long: bool,
    /// With `constrained`, in [`Translator::parse_and_score`] only: every leaf's tag forced to the
    /// gold tree's (`--oracle-tags`). Not a parser: a measurement of the most better tagging can
    /// buy.
    pub oracle_tags: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            decode: DecodeOptions { search: BeamConfig::parsing(), ..Default::default() },
            constrained: false,
            skip_long: false,
            oracle_tags: false,
        }
    }
}

/// What [`Translator::parse_and_score`] gives: the parses, the decoding's statistics, and EVALB's
/// report against the gold trees.
#[derive(Clone, Debug)]
pub struct ScoredParses {
    /// One parse per sentence, in order.
    pub parses: Vec<Parse>,
    /// What the decoding did.
    pub stats: TranslateStats,
    /// EVALB (COLLINS.prm) of the parses against the gold trees.
    pub report: crate::eval::evalb::Report,
}

impl ScoredParses {
    /// How many outputs needed repair.
    pub fn malformed(&self) -> usize {
        self.parses.iter().filter(|p| p.malformed).count()
    }
}

/// One parsed sentence.
#[derive(Clone, Debug, PartialEq)]
pub struct Parse {
    /// The tree, over exactly the sentence's words (`(TOP)` for a skipped sentence).
    pub tree: Tree,
    /// Whether the model's output was not a well-formed linearised tree over the words (brackets
    /// that do not match, a leaf without its word, a word other than the input's, too many or too
    /// few leaves) and needed repair.
    pub malformed: bool,
    /// Whether the sentence was empty or too long and not parsed.
    pub skipped: bool,
    /// The model's output.
    pub hypothesis: Hypothesis,
}

impl Parse {
    fn skipped() -> Parse {
        Parse {
            tree: Tree::node("TOP", Vec::new()),
            malformed: false,
            skipped: true,
            hypothesis: Hypothesis::default(),
        }
    }
}

impl Translator {
    /// Parses sentences (words separated by spaces, already tokenised as the treebank's) into trees
    /// over exactly their words, in input order, with the counts for a speed report. A sentence
    /// longer than the model's positions is an error naming its line, or with
    /// `options.skip_long` gives the tree `(TOP)` and a warning; so does an empty line. `events`
    /// hears the warnings, and the sentences parsed after every batch.
    pub fn parse(
        &self,
        sentences: &[String],
        options: &ParseOptions,
        events: &mut dyn Events,
    ) -> Result<(Vec<Parse>, TranslateStats)> {
        if options.oracle_tags {
            return Err(Error::Config("oracle tags come from gold trees: they apply to scoring against them".into()));
        }
        self.parse_inner(sentences, options, None, events)
    }

    /// [`Translator::parse`], with the gold trees' tags forced on every leaf when
    /// `gold` is given (`options.oracle_tags`).
    fn parse_inner(
        &self,
        sentences: &[String],
        options: &ParseOptions,
        gold: Option<&[Tree]>,
        events: &mut dyn Events,
    ) -> Result<(Vec<Parse>, TranslateStats)> {
        if options.oracle_tags && !options.constrained {
            return Err(Error::Config("oracle tags are forced by constrained decoding: add --constrained".into()));
        }
        if self.task != Task::Parsing {
            return Err(Error::Mismatch(format!("parsing needs a parsing model, not a {} one", self.task.name())));
        }
        let max = self.model.config.max_positions;
        let mut out: Vec<Parse> = Vec::with_capacity(sentences.len());
        let (mut idx, mut srcs, mut pieces, mut gold_tags) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, line) in sentences.iter().enumerate() {
            let w: Vec<&str> = line.split_whitespace().collect();
            out.push(Parse::skipped());
            if w.is_empty() || is_blank(line) {
                events.warn(&format!("line {}: empty; its tree is (TOP)", i + 1));
                continue;
            }
            let ids = self.encode_source(&w.join(" "))?;
            if ids.len() > max {
                let what = format!(
                    "line {}: {} words make {} tokens, more than the model's max_positions = {max}",
                    i + 1,
                    w.len(),
                    ids.len()
                );
                if !options.skip_long {
                    return Err(Error::Decode(format!(
                        "{what}; a sentence is never split for parsing (give --skip-long to output (TOP) for it)"
                    )));
                }
                events.warn(&format!("{what}; skipped, its tree is (TOP)"));
                continue;
            }
            idx.push(i);
            srcs.push(ids);
            if options.constrained {
                pieces.push(w.iter().map(|w| self.bpe()?.encode(&format!(" {w}"))).collect::<Result<Vec<_>>>()?);
            }
            if let Some(gold) = gold.filter(|_| options.oracle_tags) {
                let bpe = self.bpe()?;
                let leaves = gold[i].leaves();
                if leaves.len() != w.len() {
                    return Err(Error::Input(format!(
                        "line {}: {} words but its gold tree has {} leaves: oracle tags need the gold trees' own words",
                        i + 1,
                        w.len(),
                        leaves.len()
                    )));
                }
                gold_tags.push(leaves.iter().map(|l| bpe.id_of(&crate::data::encoding::tag_entry(&l.label))).collect());
            }
        }
        let constraint = match options.constrained {
            true => Some(TreeConstraint::new(self.bpe()?, pieces, self.tree_format)?.with_gold_tags(gold_tags)),
            false => None,
        };
        let c = constraint.as_ref().map(|c| c as &dyn Constraint);
        let (hyps, stats) = self.search(&srcs, &[], &options.decode, c, events)?;
        for (&i, nbest) in idx.iter().zip(hyps) {
            let h = nbest.into_iter().next().unwrap_or_default();
            let text = self.decode_target(&h.tokens)?;
            let mut tokens: Vec<String> = text.split_whitespace().map(str::to_string).collect();
            let w: Vec<&str> = sentences[i].split_whitespace().collect();
            if !self.tree_format.words_in_target() {
                tokens = with_words(&tokens, &w);
            }
            let malformed = !is_well_formed(&tokens, &w);
            let mut tree = delinearise(&tokens, &w);
            retag_deleted_punctuation(&mut tree);
            out[i] = Parse { tree, malformed, skipped: false, hypothesis: h };
        }
        Ok((out, stats))
    }

    /// Parses `sentences` like [`Translator::parse`] and scores the trees against
    /// `gold` (one tree per sentence, in order) with EVALB's COLLINS.prm: what validation, the
    /// `evaluate` command and the parsing quick start all report.
    pub fn parse_and_score(
        &self,
        sentences: &[String],
        gold: &[Tree],
        options: &ParseOptions,
        events: &mut dyn Events,
    ) -> Result<ScoredParses> {
        if sentences.len() != gold.len() {
            return Err(Error::Input(format!(
                "{} sentences but {} gold trees: they must be aligned, one tree per sentence",
                sentences.len(),
                gold.len()
            )));
        }
        let (parses, stats) = self.parse_inner(sentences, options, Some(gold), events)?;
        let test: Vec<Tree> = parses.iter().map(|p| p.tree.clone()).collect();
        let report = crate::eval::evalb::score_trees(gold, &test)?;
        Ok(ScoredParses { parses, stats, report })
    }
}
