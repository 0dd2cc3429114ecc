//! How texts become ids and back, by task: BPE for translation; for parsing a linearised tree
//! whose brackets and POS tags are whole entries of the shared vocabulary and whose words, in the
//! `tags+words` format, are BPE pieces as inside a sentence (docs/parsing.md).

use crate::data::bpe::Bpe;
use crate::data::trees::{items, Item, TreeFormat};
use crate::error::Result;

/// How target text becomes ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetEncoding {
    /// BPE, as the source (translation).
    Bpe,
    /// A linearised tree ([`crate::data::trees::items`]; its text always holds the words): each
    /// bracket and tag one whole entry of the vocabulary (tags as `TAG=` + tag, a spelling no BPE
    /// piece can have), an unknown one as UNK; with [`TreeFormat::TagsWords`] each word follows
    /// its tag as the BPE pieces of the word after a space, as inside a sentence, and with
    /// [`TreeFormat::Tags`] the words are left out.
    Tree(TreeFormat),
}

/// The vocabulary entry of a POS tag in a parsing vocabulary: `TAG=` + the tag. It mixes letters
/// and punctuation, so no byte-level BPE piece is spelled like it (a tag such as `,` or `NN` would
/// otherwise share its id with a piece of a word).
pub fn tag_entry(tag: &str) -> String {
    format!("{TAG_PREFIX}{tag}")
}

/// The prefix of [`tag_entry`].
pub const TAG_PREFIX: &str = "TAG=";

impl TargetEncoding {
    /// The ids of a source line beside targets encoded this way: BPE as it is, except that with
    /// `Tree` the line's words are encoded each after one space, so that every word, the first
    /// included, is encoded as it is inside a tree (where each word follows its tag, ` {w}`):
    /// the next-word pointer then copies the same pieces the tree holds. A line with no word
    /// has no ids. (In the `tags` format no words are copied, and the same encoding serves.)
    pub fn encode_source(self, bpe: &Bpe, text: &str) -> Result<Vec<u32>> {
        match self {
            TargetEncoding::Bpe => bpe.encode(text),
            TargetEncoding::Tree(_) => {
                let words: Vec<&str> = text.split_whitespace().collect();
                if words.is_empty() {
                    return Ok(Vec::new());
                }
                bpe.encode(&format!(" {}", words.join(" ")))
            }
        }
    }

    /// The ids of `text`.
    pub fn encode(self, bpe: &Bpe, text: &str) -> Result<Vec<u32>> {
        match self {
            TargetEncoding::Bpe => bpe.encode(text),
            TargetEncoding::Tree(format) => {
                let tokens: Vec<String> = text.split_whitespace().map(str::to_string).collect();
                let mut ids = Vec::with_capacity(tokens.len() * 2);
                for (item, token) in items(&tokens).into_iter().zip(&tokens) {
                    match item {
                        Item::Open(_) | Item::Close(_) => ids.push(bpe.id_of(token).unwrap_or(crate::vocab::UNK)),
                        Item::Tag(t) => ids.push(bpe.id_of(&tag_entry(t)).unwrap_or(crate::vocab::UNK)),
                        Item::Word(w) if format.words_in_target() => ids.extend(bpe.encode(&format!(" {w}"))?),
                        Item::Word(_) => {}
                    }
                }
                Ok(ids)
            }
        }
    }
}

impl TargetEncoding {
    /// Learns the vocabulary from training pairs. `Bpe`: one BPE model over both sides (§5.1's
    /// shared vocabulary). `Tree`: BPE of `vocab_size` entries over the sentences (which also spell
    /// the words of the trees), and every bracket and POS tag of the training trees added as one
    /// whole entry of the same shared vocabulary, so each is one decoding step.
    pub fn learn_vocabulary(self, pairs: &[(String, String)], vocab_size: usize) -> Result<Bpe> {
        match self {
            TargetEncoding::Bpe => Bpe::learn(pairs.iter().flat_map(|(s, t)| [s, t]), vocab_size, 2),
            TargetEncoding::Tree(_) => {
                // Sentences as they are encoded (`encode_source`): every word after a space.
                let bpe = Bpe::learn(pairs.iter().map(|(s, _)| format!(" {}", s.trim_start())), vocab_size, 2)?;
                let mut entries: Vec<String> = Vec::new();
                for (_, t) in pairs {
                    let tokens: Vec<String> = t.split_whitespace().map(str::to_string).collect();
                    for (item, token) in items(&tokens).into_iter().zip(&tokens) {
                        match item {
                            Item::Open(_) | Item::Close(_) => entries.push(token.clone()),
                            Item::Tag(tag) => entries.push(tag_entry(tag)),
                            Item::Word(_) => {}
                        }
                    }
                }
                entries.sort_unstable();
                entries.dedup();
                bpe.with_whole_tokens(&entries.iter().map(String::as_str).collect::<Vec<_>>())
            }
        }
    }

    /// The text of output ids. `Tree`: the linearised tree, tokens joined by spaces: brackets and
    /// tags as written, and each run of BPE pieces between them as the word(s) it decodes to (with
    /// [`TreeFormat::Tags`], whose outputs hold no words, pieces a model wrote anyway are dropped:
    /// the words come from the sentence, [`crate::data::trees::with_words`]); BOS, EOS and PAD are
    /// dropped.
    pub fn decode(self, bpe: &Bpe, ids: &[u32]) -> Result<String> {
        match self {
            TargetEncoding::Bpe => bpe.decode(ids),
            TargetEncoding::Tree(format) => {
                let whole: std::collections::HashMap<u32, String> = bpe.whole_tokens().into_iter().collect();
                let mut out: Vec<String> = Vec::new();
                let mut run: Vec<u32> = Vec::new();
                let flush = |run: &mut Vec<u32>, out: &mut Vec<String>| -> Result<()> {
                    if !run.is_empty() && format.words_in_target() {
                        out.extend(bpe.decode(run)?.split_whitespace().map(str::to_string));
                    }
                    run.clear();
                    Ok(())
                };
                for &id in ids {
                    if (id as usize) < crate::vocab::SPECIAL_TOKENS && id != crate::vocab::UNK {
                        continue;
                    }
                    match whole.get(&id) {
                        Some(t) => {
                            flush(&mut run, &mut out)?;
                            out.push(t.strip_prefix(TAG_PREFIX).unwrap_or(t).to_string());
                        }
                        None if id == crate::vocab::UNK => {
                            flush(&mut run, &mut out)?;
                            out.push(crate::vocab::SPECIALS[crate::vocab::UNK as usize].to_string());
                        }
                        None => run.push(id),
                    }
                }
                flush(&mut run, &mut out)?;
                Ok(out.join(" "))
            }
        }
    }
}
