//! Word alignments from encoder–decoder attention, written as Marian writes them
//! (`--alignment hard|soft|THRESHOLD`): for each output token, its weights over the source tokens
//! (soft), or `s-t` pairs of 0-based source and target positions (hard: each target token's
//! strongest source token; a threshold: every pair whose weight passes it), sorted by source then
//! target position. The weights are one layer's, one head's or the mean of its heads, from a
//! teacher-forced pass over the source and the output ([`crate::eval::attention`]).
//!
//! Positions count the model's tokens (subword pieces), the source's `</s>` and the output's
//! `</s>` left out; [`Alignment::to_words`] maps them to space-separated words, a pair of words
//! aligned when any of their pieces are.

use super::beam::Hypothesis;
use super::translator::Translator;
use crate::data::tokenizer::{Side, Tokenizer};
use crate::error::{Error, Result};
use crate::eval::attention::{AttentionWeights, Kind};
use crate::vocab::EOS;
use std::fmt::Write as _;
use std::str::FromStr;

/// What `--alignment` writes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AlignmentKind {
    /// Each target token with its strongest source token (Marian's `hard`).
    Hard,
    /// Every weight: a target token's weights over the source, comma-separated (Marian's `soft`).
    Soft,
    /// Every pair whose weight is above the threshold, in (0, 1) (Marian's `0.x`).
    Threshold(f32),
}

impl FromStr for AlignmentKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "hard" => Ok(AlignmentKind::Hard),
            "soft" => Ok(AlignmentKind::Soft),
            _ => match s.parse::<f32>() {
                Ok(t) if t > 0.0 && t < 1.0 => Ok(AlignmentKind::Threshold(t)),
                _ => Err(Error::Input(format!(
                    "alignment {s:?}: give hard, soft or a threshold between 0 and 1 (exclusive), as Marian's --alignment"
                ))),
            },
        }
    }
}

/// Which attention the alignment reads, and in what units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlignmentOptions {
    /// What is written.
    pub kind: AlignmentKind,
    /// The decoder layer, counted from 1; `None`: the last.
    pub layer: Option<usize>,
    /// The head, counted from 1; `None`: the mean of the layer's heads.
    pub head: Option<usize>,
    /// White-space words instead of the model's tokens.
    pub words: bool,
}

impl AlignmentOptions {
    /// `kind` over the mean of the last layer's heads, in tokens.
    pub fn new(kind: AlignmentKind) -> Self {
        AlignmentOptions { kind, layer: None, head: None, words: false }
    }
}

/// A sentence pair's soft alignment: `weights[t·source + s]`, the weight of source position s
/// for target position t.
#[derive(Clone, Debug, PartialEq)]
pub struct Alignment {
    /// Source positions.
    pub source: usize,
    /// Target positions.
    pub target: usize,
    /// (target, source), row-major.
    pub weights: Vec<f32>,
}

impl Alignment {
    /// The encoder–decoder weights of `w` for the first `source` encoder positions and the first
    /// `target` decoder positions: one head of a layer, or the mean of the layer's heads
    /// (`layer` and `head` counted from 1, as [`AlignmentOptions`]). A layer or head the model
    /// does not have is an [`Error::Input`].
    pub fn from_attention(
        w: &AttentionWeights,
        layer: Option<usize>,
        head: Option<usize>,
        source: usize,
        target: usize,
    ) -> Result<Self> {
        let layers = w.encoder_decoder.len();
        let layer = layer.unwrap_or(layers);
        if layer == 0 || layer > layers {
            return Err(Error::Input(format!(
                "alignment layer {layer}: the model has {layers} decoder layers (counted from 1)"
            )));
        }
        if let Some(h) = head.filter(|&h| h == 0 || h > w.heads) {
            return Err(Error::Input(format!("alignment head {h}: the model has {} heads (counted from 1)", w.heads)));
        }
        if source > w.s || target > w.t {
            return Err(Error::Input(format!(
                "an alignment of {target}×{source} positions asked of attention over {}×{}",
                w.t, w.s
            )));
        }
        let heads: Vec<usize> = head.map_or((0..w.heads).collect(), |h| vec![h - 1]);
        let mut weights = vec![0f32; target * source];
        for &h in &heads {
            let (m, _, cols) = w.get(Kind::EncoderDecoder, layer - 1, h)?;
            for t in 0..target {
                for s in 0..source {
                    weights[t * source + s] += m[t * cols + s];
                }
            }
        }
        let n = heads.len() as f32;
        weights.iter_mut().for_each(|x| *x /= n);
        Ok(Alignment { source, target, weights })
    }

    /// The weight of (source s, target t).
    pub fn weight(&self, s: usize, t: usize) -> f32 {
        self.weights[t * self.source + s]
    }

    /// Hard pairs (source, target), sorted: with `None`, each target position's strongest source
    /// position (the first of equals); with a threshold, every pair above it.
    pub fn points(&self, threshold: Option<f32>) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        if self.source == 0 {
            return out;
        }
        for t in 0..self.target {
            let row = &self.weights[t * self.source..(t + 1) * self.source];
            match threshold {
                None => {
                    let best = (1..row.len()).fold(0, |b, s| if row[s] > row[b] { s } else { b });
                    out.push((best, t));
                }
                Some(th) => out.extend((0..row.len()).filter(|&s| row[s] > th).map(|s| (s, t))),
            }
        }
        out.sort_unstable();
        out
    }

    /// The alignment over words: `src_words[i]` and `tgt_words[j]` are the word of source token i
    /// and of target token j, `None` for a token of no word (from [`token_words`]). A target
    /// word's weights are the mean over its tokens of the sum over each source word's tokens, so
    /// each row still sums as the tokens' rows do; hard pairs of words are then read from these
    /// weights.
    pub fn to_words(&self, src_words: &[Option<usize>], tgt_words: &[Option<usize>]) -> Result<Alignment> {
        if src_words.len() != self.source || tgt_words.len() != self.target {
            return Err(Error::Input(format!(
                "word indices for {}×{} tokens given to an alignment of {}×{}",
                tgt_words.len(),
                src_words.len(),
                self.target,
                self.source
            )));
        }
        let count = |w: &[Option<usize>]| w.iter().flatten().max().map_or(0, |&l| l + 1);
        let (sw, tw) = (count(src_words), count(tgt_words));
        let mut weights = vec![0f32; tw * sw];
        let mut pieces = vec![0usize; tw];
        for (t, wt) in tgt_words.iter().enumerate() {
            let Some(wt) = *wt else { continue };
            pieces[wt] += 1;
            for (s, ws) in src_words.iter().enumerate() {
                if let Some(ws) = *ws {
                    weights[wt * sw + ws] += self.weight(s, t);
                }
            }
        }
        for (wt, &n) in pieces.iter().enumerate() {
            weights[wt * sw..(wt + 1) * sw].iter_mut().for_each(|x| *x /= n.max(1) as f32);
        }
        Ok(Alignment { source: sw, target: tw, weights })
    }

    /// Marian's text for `kind`: `s-t` pairs separated by spaces, or (soft) each target position's
    /// weights, comma-separated, the positions separated by spaces.
    pub fn format(&self, kind: AlignmentKind) -> String {
        let mut out = String::new();
        match kind {
            AlignmentKind::Soft => {
                for t in 0..self.target {
                    if t > 0 {
                        out.push(' ');
                    }
                    for s in 0..self.source {
                        if s > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{}", short(self.weight(s, t)));
                    }
                }
            }
            AlignmentKind::Hard | AlignmentKind::Threshold(_) => {
                let th = match kind {
                    AlignmentKind::Threshold(t) => Some(t),
                    _ => None,
                };
                for (i, (s, t)) in self.points(th).into_iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    let _ = write!(out, "{s}-{t}");
                }
            }
        }
        out
    }
}

impl Translator {
    /// The alignment of a source (token ids without BOS/EOS, as [`Translator::encode_source`]
    /// gives them) and an output of it (`tgt`, as a [`Hypothesis`] holds them), read from the
    /// attention of a teacher-forced pass of the (first) model at f32. A blank source or an empty
    /// output has an empty alignment.
    pub fn align(&self, src: &[u32], tgt: &[u32], options: &AlignmentOptions) -> Result<Alignment> {
        // A Marian model's source ends with `</s>`, which no word of the text is.
        let source = src.len() - usize::from(src.last() == Some(&EOS));
        let tokens = if source == 0 || tgt.is_empty() {
            Alignment { source, target: tgt.len(), weights: vec![0.0; source * tgt.len()] }
        } else {
            let w = self.attention(src, tgt)?;
            Alignment::from_attention(&w, options.layer, options.head, source, tgt.len())?
        };
        if !options.words {
            return Ok(tokens);
        }
        let tok = self.tokenizer();
        tokens.to_words(&token_words(tok, Side::Source, &src[..source]), &token_words(tok, Side::Target, tgt))
    }

    /// [`Translator::align`] of a hypothesis; one translated in chunks (its source longer than
    /// the model's positions) is refused, since no single pass reads the whole source.
    pub fn align_hypothesis(&self, src: &[u32], hyp: &Hypothesis, options: &AlignmentOptions) -> Result<Alignment> {
        if !hyp.chunk_starts.is_empty() {
            return Err(Error::Input(format!(
                "no alignment for a sentence of {} tokens translated in chunks: the model reads {} positions at most",
                src.len(),
                self.model().config.max_positions
            )));
        }
        self.align(src, &hyp.tokens, options)
    }
}

/// A weight with six significant digits at most (C++'s stream default, which Marian writes; in
/// decimal notation, never with an exponent).
fn short(x: f32) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let digits = 5 - x.abs().log10().floor() as i32;
    let s = format!("{:.*}", digits.clamp(0, 12) as usize, x);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The space-separated word of each token, from each token's (begins a word, is the space mark
/// alone) ([`Tokenizer::word_mark`]): the first token begins word 0 whatever it is, a token
/// that begins a word begins the next one, and a space mark alone that no word follows (an
/// extra space) belongs to none.
pub fn word_indices(marks: &[(bool, bool)]) -> Vec<Option<usize>> {
    let mut w: Option<usize> = None;
    (0..marks.len())
        .map(|i| {
            let (starts, bare) = marks[i];
            if bare && marks.get(i + 1).is_none_or(|next| next.0) {
                return None;
            }
            w = Some(match w {
                None => 0,
                Some(w) if starts => w + 1,
                Some(w) => w,
            });
            w
        })
        .collect()
}

/// [`word_indices`] of token ids on one side of `tok`.
pub fn token_words(tok: &Tokenizer, side: Side, ids: &[u32]) -> Vec<Option<usize>> {
    word_indices(&ids.iter().map(|&id| tok.word_mark(side, id)).collect::<Vec<_>>())
}

/// Pairs `s-t` read from Marian's hard format (`0-0 1-2 ...`); a malformed pair is an error
/// naming it.
pub fn parse_points(line: &str) -> Result<Vec<(usize, usize)>> {
    line.split_whitespace()
        .map(|p| {
            let bad = || Error::Input(format!("alignment pair {p:?}: write source-target, as 0-1"));
            let (s, t) = p.split_once('-').ok_or_else(bad)?;
            Ok((s.parse().map_err(|_| bad())?, t.parse().map_err(|_| bad())?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_by_three() -> Alignment {
        // Target 0 reads source 1; target 1 splits between 0 and 2.
        Alignment { source: 3, target: 2, weights: vec![0.1, 0.7, 0.2, 0.45, 0.1, 0.45] }
    }

    #[test]
    fn hard_is_each_rows_argmax_sorted_by_source() {
        let a = two_by_three();
        // Row 1 ties 0 and 2: the first wins.
        assert_eq!(a.points(None), vec![(0, 1), (1, 0)]);
        assert_eq!(a.format(AlignmentKind::Hard), "0-1 1-0");
    }

    #[test]
    fn a_threshold_keeps_every_pair_above_it() {
        let a = two_by_three();
        assert_eq!(a.format(AlignmentKind::Threshold(0.4)), "0-1 1-0 2-1");
        assert_eq!(a.format(AlignmentKind::Threshold(0.5)), "1-0");
        assert_eq!(a.format(AlignmentKind::Threshold(0.9)), "");
    }

    #[test]
    fn soft_writes_rows_of_weights() {
        assert_eq!(two_by_three().format(AlignmentKind::Soft), "0.1,0.7,0.2 0.45,0.1,0.45");
        assert_eq!(short(0.1234567), "0.123457");
        assert_eq!(short(1.0), "1");
        assert_eq!(short(0.000012345678), "0.0000123457");
    }

    #[test]
    fn kinds_parse_as_marian_spells_them() {
        assert_eq!("hard".parse::<AlignmentKind>().unwrap(), AlignmentKind::Hard);
        assert_eq!("soft".parse::<AlignmentKind>().unwrap(), AlignmentKind::Soft);
        assert_eq!("0.3".parse::<AlignmentKind>().unwrap(), AlignmentKind::Threshold(0.3));
        for bad in ["1", "0", "1.5", "-0.2", "Hard", ""] {
            assert!(bad.parse::<AlignmentKind>().is_err(), "{bad}");
        }
    }

    #[test]
    fn words_sum_sources_and_average_targets() {
        // Source tokens: [a b][c]; target tokens: [x][y z].
        let a = Alignment {
            source: 3,
            target: 3,
            weights: vec![
                0.5, 0.3, 0.2, // x
                0.1, 0.1, 0.8, // y
                0.3, 0.3, 0.4, // z
            ],
        };
        let marks = |s: &[bool]| word_indices(&s.iter().map(|&b| (b, false)).collect::<Vec<_>>());
        let w = a.to_words(&marks(&[true, false, true]), &marks(&[true, true, false])).unwrap();
        assert_eq!((w.source, w.target), (2, 2));
        let want = [0.8, 0.2, 0.4, 0.6];
        for (got, want) in w.weights.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{:?}", w.weights);
        }
        assert_eq!(w.format(AlignmentKind::Hard), "0-0 1-1");
        assert!(a.to_words(&[Some(0), Some(0)], &[Some(0), Some(1), Some(1)]).is_err());
    }

    #[test]
    fn word_indices_count_starts_after_the_first_token() {
        let plain = |s: &[bool]| word_indices(&s.iter().map(|&b| (b, false)).collect::<Vec<_>>());
        assert_eq!(plain(&[true, false, true, true, false]), [Some(0), Some(0), Some(1), Some(2), Some(2)]);
        assert_eq!(plain(&[false, false, true]), [Some(0), Some(0), Some(1)]);
        assert!(plain(&[]).is_empty());
        // "a  b" in byte-level BPE: a, Ġ (the extra space), Ġb; SentencePiece's "▁ (" keeps the
        // bare mark as its word's start.
        assert_eq!(word_indices(&[(false, false), (true, true), (true, false)]), [Some(0), None, Some(1)]);
        assert_eq!(word_indices(&[(true, false), (true, true), (false, false)]), [Some(0), Some(1), Some(1)]);
        assert_eq!(word_indices(&[(true, false), (true, true)]), [Some(0), None]);
    }

    #[test]
    fn points_parse_and_refuse_by_name() {
        assert_eq!(parse_points("0-0 2-1  1-3").unwrap(), vec![(0, 0), (2, 1), (1, 3)]);
        assert!(parse_points("").unwrap().is_empty());
        for bad in ["0-", "a-1", "1:2", "0-0 3"] {
            let e = parse_points(bad).unwrap_err().to_string();
            assert!(e.contains("source-target"), "{e}");
        }
    }
}
