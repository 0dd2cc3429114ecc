//! Models trained by other toolkits, imported into this engine: Marian / OPUS-MT
//! ([`marian`]), from a Hugging Face `MarianMTModel` directory (`model.safetensors` or
//! `pytorch_model.bin`) or from a native Marian model (`model.npz`, `decoder.yml`, vocabularies).
//!
//! An import writes an ordinary checkpoint (the paper's model with the options of
//! [`crate::config::ModelConfig`] that the imported architecture needs: its FFN activation, a
//! final logits bias, the sinusoid layout, separate vocabularies) and one tokenizer file
//! ([`crate::data::tokenizer::Tokenizer`]) that every verb accepts in place of a BPE model.

pub mod marian;
pub mod npz;
pub mod pickle;

/// How a foreign vocabulary's ids map onto this engine's, whose special tokens have fixed ids
/// (`<pad>` 0, `<s>` 1, `</s>` 2, `<unk>` 3, [`crate::vocab`]).
///
/// Our id 0 (padding) is a new row that the foreign model never reads or predicts. Our id 1 (the
/// decoder's first input) is the foreign model's decoder start token, its padding token for
/// Marian (absent in native Marian vocabularies, whose decoder starts from a zero vector: then a
/// new zero row). Our 2 and 3 are its `</s>` and `<unk>`; the foreign ids that remain follow in
/// their order from 4 on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMap {
    /// Foreign id → ours.
    to_ours: Vec<u32>,
    /// Our id → the foreign id, `None` for the rows the import adds.
    from_ours: Vec<Option<u32>>,
}

impl IdMap {
    /// The map for a foreign vocabulary of `size` ids with the given special ids.
    pub fn new(size: usize, start: Option<u32>, eos: u32, unk: u32) -> crate::Result<Self> {
        let specials = [start, Some(eos), Some(unk)];
        let bad = |m: String| Err(crate::Error::Import(m));
        for s in specials.iter().flatten() {
            if *s as usize >= size {
                return bad(format!("special id {s} outside the vocabulary of {size}"));
            }
        }
        if eos == unk || start == Some(eos) || start == Some(unk) {
            return bad(format!("the special ids must differ: start {start:?}, </s> {eos}, <unk> {unk}"));
        }
        let mut from_ours = vec![None, start, Some(eos), Some(unk)];
        from_ours.extend((0..size as u32).filter(|id| !specials.contains(&Some(*id))).map(Some));
        let mut to_ours = vec![0u32; size];
        for (ours, f) in from_ours.iter().enumerate() {
            if let Some(f) = f {
                to_ours[*f as usize] = ours as u32;
            }
        }
        Ok(IdMap { to_ours, from_ours })
    }

    /// Our vocabulary's size.
    pub fn len(&self) -> usize {
        self.from_ours.len()
    }

    /// Whether the map is empty (never: the specials are always there).
    pub fn is_empty(&self) -> bool {
        self.from_ours.is_empty()
    }

    /// Our id of a foreign id.
    pub fn ours(&self, foreign: u32) -> u32 {
        self.to_ours[foreign as usize]
    }

    /// The foreign id of ours, `None` for a row the import added.
    pub fn foreign(&self, ours: u32) -> Option<u32> {
        self.from_ours.get(ours as usize).copied().flatten()
    }

    /// Every foreign id in our order (`None` for added rows).
    pub fn order(&self) -> &[Option<u32>] {
        &self.from_ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specials_land_on_our_ids_and_the_rest_keep_their_order() {
        // Marian: </s> 0, <unk> 1, pieces 2..5, <pad> 6.
        let m = IdMap::new(7, Some(6), 0, 1).unwrap();
        assert_eq!(m.len(), 8);
        assert_eq!(m.order(), &[None, Some(6), Some(0), Some(1), Some(2), Some(3), Some(4), Some(5)]);
        assert_eq!((m.ours(6), m.ours(0), m.ours(1), m.ours(2), m.ours(5)), (1, 2, 3, 4, 7));
        for f in 0..7 {
            assert_eq!(m.foreign(m.ours(f)), Some(f));
        }
        // Native Marian: no padding token, the decoder starts from a new zero row.
        let n = IdMap::new(6, None, 0, 1).unwrap();
        assert_eq!(n.order()[..3], [None, None, Some(0)]);
        assert!(IdMap::new(6, None, 0, 0).is_err());
        assert!(IdMap::new(6, Some(9), 0, 1).is_err());
    }
}
