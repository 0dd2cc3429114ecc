//! The attention weights of one sentence pair, per layer and head, for the heatmaps of the
//! paper's Figures 3–5: encoder self-attention, decoder (causal) self-attention and
//! encoder–decoder attention, from a teacher-forced forward pass without dropout.

use crate::error::{Error, Result};
use crate::model::{Batch, Transformer, Workspace};

/// Which attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Encoder self-attention: source × source.
    EncoderSelf,
    /// Decoder self-attention: decoder input × decoder input (causal).
    DecoderSelf,
    /// Encoder–decoder attention: decoder position × source.
    EncoderDecoder,
}

impl Kind {
    /// All three.
    pub const ALL: [Kind; 3] = [Kind::EncoderSelf, Kind::DecoderSelf, Kind::EncoderDecoder];

    /// A short name for file names: `enc-self`, `dec-self`, `enc-dec`.
    pub fn slug(self) -> &'static str {
        match self {
            Kind::EncoderSelf => "enc-self",
            Kind::DecoderSelf => "dec-self",
            Kind::EncoderDecoder => "enc-dec",
        }
    }

    /// A title.
    pub fn title(self) -> &'static str {
        match self {
            Kind::EncoderSelf => "encoder self-attention",
            Kind::DecoderSelf => "decoder self-attention",
            Kind::EncoderDecoder => "encoder-decoder attention",
        }
    }
}

/// Attention weights of one sentence pair.
#[derive(Clone, Debug)]
pub struct AttentionWeights {
    /// Source tokens S.
    pub s: usize,
    /// Decoder positions T (BOS and the target tokens; position t predicts target token t, the
    /// last one EOS).
    pub t: usize,
    /// Heads.
    pub heads: usize,
    /// Per layer: (H, S, S).
    pub encoder_self: Vec<Vec<f32>>,
    /// Per layer: (H, T, T).
    pub decoder_self: Vec<Vec<f32>>,
    /// Per layer: (H, T, S).
    pub encoder_decoder: Vec<Vec<f32>>,
}

impl AttentionWeights {
    /// These weights with one more decoder position, all zeros: the EOS step of an output the
    /// length limit cut at the model's last position (`end_at_limit`), which the decoder never
    /// took. Its rows and columns are as [`attention_weights`] gives them for one token more.
    pub fn with_untaken_last_step(mut self) -> Self {
        let (t, s, h) = (self.t, self.s, self.heads);
        let grow = |maps: &mut Vec<f32>, cols: usize, new_cols: usize| {
            let mut out = vec![0f32; h * (t + 1) * new_cols];
            for (head, m) in maps.chunks(t * cols).enumerate() {
                for (r, row) in m.chunks(cols).enumerate() {
                    let at = (head * (t + 1) + r) * new_cols;
                    out[at..at + cols].copy_from_slice(row);
                }
            }
            *maps = out;
        };
        for m in &mut self.decoder_self {
            grow(m, t, t + 1);
        }
        for m in &mut self.encoder_decoder {
            grow(m, s, s);
        }
        self.t = t + 1;
        self
    }

    /// The (rows, cols) weights of one layer and head (both counted from 0), row-major, with the
    /// matrix's shape. A layer or head the model does not have is an [`Error::Input`].
    pub fn get(&self, kind: Kind, layer: usize, head: usize) -> Result<(&[f32], usize, usize)> {
        let (all, rows, cols) = match kind {
            Kind::EncoderSelf => (&self.encoder_self, self.s, self.s),
            Kind::DecoderSelf => (&self.decoder_self, self.t, self.t),
            Kind::EncoderDecoder => (&self.encoder_decoder, self.t, self.s),
        };
        let size = rows * cols;
        let Some(maps) = all.get(layer) else {
            return Err(Error::Input(format!(
                "{}: layer {layer} asked for, but the model has {} layers (counted from 0)",
                kind.title(),
                all.len()
            )));
        };
        match maps.get(head.min(self.heads) * size..).and_then(|m| m.get(..size)) {
            Some(m) if head < self.heads => Ok((m, rows, cols)),
            _ => Err(Error::Input(format!(
                "{}: head {head} asked for, but the model has {} heads (counted from 0)",
                kind.title(),
                self.heads
            ))),
        }
    }
}

use crate::data::tokenizer::{Side, Tokenizer};

/// Token labels for a heatmap: each piece as its text, decoded on its own (a piece that starts a
/// word without the space before it, so "." and "Hund" read as themselves).
pub fn piece_labels(vocab: &Tokenizer, side: Side, ids: &[u32]) -> Result<Vec<String>> {
    ids.iter().map(|&id| Ok(vocab.piece_text(side, id)?.trim_start_matches(' ').to_string())).collect()
}

/// The axes of a sentence pair's attention maps: the source pieces (encoder positions), what the
/// decoder reads (BOS, then the target pieces) and what it predicts at those positions (the
/// target pieces, then EOS).
#[derive(Clone, Debug, PartialEq)]
pub struct AxisLabels {
    /// Encoder positions: the columns of encoder self- and encoder–decoder attention.
    pub source: Vec<String>,
    /// Decoder inputs: the rows and columns of decoder self-attention.
    pub decoder_in: Vec<String>,
    /// Decoder outputs: the rows of encoder–decoder attention.
    pub decoder_out: Vec<String>,
}

impl AxisLabels {
    /// The labels of (src, tgt), token ids without BOS/EOS, as [`attention_weights`] takes them.
    pub fn new(vocab: &Tokenizer, src: &[u32], tgt: &[u32]) -> Result<Self> {
        use crate::vocab::{BOS, EOS, SPECIALS};
        let target = piece_labels(vocab, Side::Target, tgt)?;
        let mut decoder_in = vec![SPECIALS[BOS as usize].to_string()];
        decoder_in.extend(target.iter().cloned());
        let mut decoder_out = target;
        decoder_out.push(SPECIALS[EOS as usize].to_string());
        Ok(AxisLabels { source: piece_labels(vocab, Side::Source, src)?, decoder_in, decoder_out })
    }

    /// The (rows, columns) labels of one kind of map.
    pub fn of(&self, kind: Kind) -> (&[String], &[String]) {
        match kind {
            Kind::EncoderSelf => (&self.source, &self.source),
            Kind::DecoderSelf => (&self.decoder_in, &self.decoder_in),
            Kind::EncoderDecoder => (&self.decoder_out, &self.source),
        }
    }
}

/// Runs the model on (src, tgt) (token ids without BOS/EOS; tgt is what the decoder is fed after
/// BOS, typically the model's own translation) and returns every attention weight.
pub fn attention_weights(
    model: &Transformer,
    src: &[u32],
    tgt: &[u32],
    ws: &mut Workspace,
) -> Result<AttentionWeights> {
    let batch = Batch::from_pairs(&[(src.to_vec(), tgt.to_vec())]);
    model.forward(&batch, ws, None)?;
    let (s, t) = (batch.s, batch.t);
    Ok(AttentionWeights {
        s,
        t,
        heads: model.config.n_heads,
        encoder_self: ws.enc.iter().map(|l| l.self_attn.probs.clone()).collect(),
        decoder_self: ws.dec.iter().map(|l| l.self_attn.probs.clone()).collect(),
        encoder_decoder: ws.dec.iter().map(|l| l.cross_attn.probs.clone()).collect(),
    })
}
