//! The character-level word encoder (`model.char_dim`, `kernels/cpu/char_cnn.rs`): its naive
//! twin's gradient against central differences, the kernel against the twin, the words and bytes
//! the vocabulary gives it, and its place in the model against the naive embedding plus the naive
//! CNN; word dropout (`train.word_dropout`), which reads whole words as UNK in training. (The
//! whole model's gradient with each is in tests/properties.rs.)

mod common;

use common::*;
use transformer::data::bpe::Bpe;
use transformer::kernels::cpu::char_cnn::{self, word_chars, CHAR_BOW, CHAR_EOW, CHAR_PAD, CHAR_VOCAB, CHAR_WIDTH};
use transformer::kernels::reference as r;
use transformer::model::pointer::{PointerTable, TokenClass};
use transformer::rng::Rng;
use transformer::{Batch, ModelConfig, ParsingInputs, Transformer, Workspace};

/// Words of 1 to 9 bytes (3 to 11 characters with the markers, so 1 to 9 windows), the short
/// ones padded.
fn words(rng: &mut Rng, n: usize) -> (Vec<u32>, Vec<usize>) {
    let (mut chars, mut offsets) = (Vec::new(), vec![0]);
    for i in 0..n {
        let len = if i == 0 { 0 } else { 1 + rng.below(9) as usize };
        word_chars(&mut chars, (0..len).map(|_| rng.below(256) as u8));
        offsets.push(chars.len());
    }
    (chars, offsets)
}

#[test]
fn word_chars_marks_and_pads() {
    let mut c = Vec::new();
    word_chars(&mut c, *b"ab");
    word_chars(&mut c, []);
    assert_eq!(c, vec![CHAR_BOW, 3 + b'a' as u32, 3 + b'b' as u32, CHAR_EOW, CHAR_BOW, CHAR_EOW, CHAR_PAD]);
    assert_eq!(CHAR_VOCAB, 259);
}

#[test]
fn reference_gradients_match_central_differences() {
    let mut rng = Rng::new(31);
    let (dc, d) = (3, 5);
    let (chars, offsets) = words(&mut rng, 6);
    let emb = rand_vec(&mut rng, CHAR_VOCAB * dc, 1.0);
    let w = rand_vec(&mut rng, CHAR_WIDTH * dc * d, 0.5);
    // A bias that leaves some filters below 0 in every window (no gradient) and most above.
    let b = rand_vec(&mut rng, d, 1.0);
    let g = rand_vec(&mut rng, 6 * d, 1.0);
    let f = |e: &[f64], w: &[f64], b: &[f64]| r::char_cnn_forward(&chars, &offsets, e, w, b, dc, CHAR_WIDTH, d);
    let (de, dw, db) = r::char_cnn_backward(&g, &chars, &offsets, &emb, &w, &b, dc, CHAR_WIDTH, d);
    let h = 1e-6;
    assert_close("demb", &de, &numeric_grad(&emb, h, |e| weighted_sum(&f(e, &w, &b), &g)), 1e-7, 1e-6);
    assert_close("dw", &dw, &numeric_grad(&w, h, |w| weighted_sum(&f(&emb, w, &b), &g)), 1e-7, 1e-6);
    assert_close("db", &db, &numeric_grad(&b, h, |b| weighted_sum(&f(&emb, &w, b), &g)), 1e-7, 1e-6);
    assert!(db.iter().any(|&x| x != 0.0) && de.iter().filter(|&&x| x != 0.0).count() > dc);
    let out = f(&emb, &w, &b);
    assert!(out.contains(&0.0) && out.iter().any(|&x| x > 0.0), "both sides of the ReLU");
}

#[test]
fn kernel_matches_its_naive_twin() {
    let mut rng = Rng::new(32);
    // d = 40 is past one filter block of the backward (16), and not a multiple of it.
    for (n, dc, d) in [(1, 1, 1), (7, 4, 40), (50, 8, 33)] {
        let (chars, offsets) = words(&mut rng, n);
        let emb = rand_vec(&mut rng, CHAR_VOCAB * dc, 1.0);
        let w = rand_vec(&mut rng, CHAR_WIDTH * dc * d, 0.5);
        let b = rand_vec(&mut rng, d, 0.5);
        let g = rand_vec(&mut rng, n * d, 1.0);
        let want = r::char_cnn_forward(&chars, &offsets, &emb, &w, &b, dc, CHAR_WIDTH, d);
        let (mut out, mut arg) = (vec![0f32; n * d], vec![0u32; n * d]);
        let (e32, w32, b32) = (to_f32(&emb), to_f32(&w), to_f32(&b));
        char_cnn::char_cnn_forward(&mut out, &mut arg, &chars, &offsets, &e32, &w32, &b32, dc, d);
        assert_close(&format!("out n={n} dc={dc} d={d}"), &to_f64(&out), &want, 1e-5, 1e-5);
        let (de, dw, db) = r::char_cnn_backward(&g, &chars, &offsets, &emb, &w, &b, dc, CHAR_WIDTH, d);
        // The kernel adds to what is there.
        let (mut ke, mut kw, mut kb) = (vec![1f32; emb.len()], vec![1f32; w.len()], vec![1f32; d]);
        char_cnn::char_cnn_backward(&mut ke, &mut kw, &mut kb, &to_f32(&g), &arg, &chars, &offsets, &e32, &w32, dc, d);
        let plus1 = |v: &[f64]| v.iter().map(|x| x + 1.0).collect::<Vec<_>>();
        assert_close("demb", &to_f64(&ke), &plus1(&de), 1e-4, 1e-5);
        assert_close("dw", &to_f64(&kw), &plus1(&dw), 1e-4, 1e-5);
        assert_close("db", &to_f64(&kb), &plus1(&db), 1e-4, 1e-5);
    }
}

#[test]
fn the_kernel_refuses_a_word_shorter_than_its_filter() {
    let (dc, d) = (2, 3);
    let run = || {
        let (mut out, mut arg) = (vec![0f32; d], vec![0u32; d]);
        let (e, w, b) = (vec![0f32; CHAR_VOCAB * dc], vec![0f32; CHAR_WIDTH * dc * d], vec![0f32; d]);
        char_cnn::char_cnn_forward(&mut out, &mut arg, &[CHAR_BOW, CHAR_EOW], &[0, 2], &e, &w, &b, dc, d);
    };
    assert!(std::panic::catch_unwind(run).is_err());
}

/// The vocabulary gives every piece its bytes (the byte-level alphabet undone, the word-starting
/// space left out), and its words are the runs of pieces that start with a space.
#[test]
fn a_vocabulary_spells_its_words() {
    let text = "the héllo wörld, 1,234 naïve café Zürich-based ™ tab\there";
    let bpe = Bpe::learn([text, "the hello world"].iter(), 300, 1).unwrap();
    let table = PointerTable::from_bpe(&bpe, transformer::data::trees::TreeFormat::TagsWords);
    for line in ["héllo wörld", "naïve Zürich-based café", "unseen ™ words 1,234"] {
        let ids = bpe.encode(line).unwrap();
        let spans = table.word_spans(&ids);
        let spelled: Vec<String> = spans
            .iter()
            .map(|s| String::from_utf8(s.clone().flat_map(|i| table.bytes(ids[i]).to_vec()).collect()).unwrap())
            .collect();
        // The GPT-2 pre-tokenizer splits at spaces and between letters and punctuation; the pointer's
        // words start at a space only, so "Zürich-based" is one word of several pieces.
        let want: Vec<&str> = line.split(' ').collect();
        assert_eq!(spelled, want, "{line}: {ids:?}");
    }
}

#[test]
fn word_spans_follow_the_pieces() {
    let s = |b| TokenClass::Piece { starts_word: b };
    let table = PointerTable::new(vec![TokenClass::Structure, s(true), s(false), TokenClass::Tag]);
    assert_eq!(table.word_spans(&[2, 2, 1, 2, 1, 0, 2, 3, 1]), vec![0..2, 2..4, 4..5, 6..7, 8..9]);
    assert!(table.word_spans(&[]).is_empty());
}

/// A tiny model over 29 ids: 4–15 start words, 16–28 continue them; id k is spelled "k" in
/// decimal.
fn spelled_model(char_dim: usize) -> (ModelConfig, Transformer) {
    let c = ModelConfig {
        n_layers: 1,
        d_model: 16,
        d_ff: 24,
        n_heads: 2,
        d_k: 8,
        d_v: 8,
        dropout: 0.0,
        attention_dropout: 0.0,
        max_positions: 32,
        vocab_size: 29,
        parsing: ParsingInputs { source_pointer: true, char_dim, ..ParsingInputs::default() },
        ..ModelConfig::base()
    };
    let classes = (0..29u32)
        .map(|id| match id {
            0..=3 => TokenClass::Structure,
            4..=15 => TokenClass::Piece { starts_word: true },
            _ => TokenClass::Piece { starts_word: false },
        })
        .collect();
    let bytes = (0..29u32).map(|id| if id < 4 { Vec::new() } else { id.to_string().into_bytes() }).collect();
    let table = PointerTable::new(classes).with_bytes(bytes);
    let mut m = Transformer::new(c.clone(), 3).unwrap();
    assert!(m.forward(&Batch::from_pairs(&[(vec![5], vec![6])]), &mut Workspace::new(), None).is_err());
    m = m.with_pointer_table(table).unwrap();
    let mut rng = Rng::new(3);
    for p in &mut m.params {
        *p += ((rng.uniform() * 2.0 - 1.0) * 0.2) as f32;
    }
    (c, m)
}

/// The model's encoder input with the character encoder: the naive embedding plus, at every
/// piece of a word, the naive CNN of that word's bytes (compared at the valid positions, which the
/// forward pass leaves packed in `enc_in`; the short sentence first, so its rows have moved).
#[test]
fn the_encoder_input_adds_each_words_spelling_to_its_pieces() {
    let (c, m) = spelled_model(5);
    // Row 0: [12 20], then padding; row 1: words [5], [9 17], [4].
    let batch = Batch::from_pairs(&[(vec![12, 20], vec![9, 10]), (vec![5, 9, 17, 4], vec![6, 7])]);
    let mut ws = Workspace::new();
    m.forward(&batch, &mut ws, None).unwrap();
    let get = |name: &str| to_f64(&m.params[m.layout.get(name).unwrap().range()]);
    let (emb, w, b) =
        (get("encoder.char_embed.weight"), get("encoder.char_conv.weight"), get("encoder.char_conv.bias"));
    let pos = r::sinusoids(c.max_positions, c.d_model, c.import.sinusoid_layout);
    let d = c.d_model;
    let mut want = r::embedding_forward(&batch.src, &get("embed.weight"), &pos, batch.s, d, (d as f64).sqrt(), None);
    let spelled: [(usize, &[usize], &str); 4] =
        [(1, &[0], "5"), (1, &[1, 2], "917"), (1, &[3], "4"), (0, &[0, 1], "1220")];
    for (row, at, word) in spelled {
        let mut chars = Vec::new();
        word_chars(&mut chars, word.bytes());
        let v = r::char_cnn_forward(&chars, &[0, chars.len()], &emb, &w, &b, c.parsing.char_dim, CHAR_WIDTH, d);
        assert!(v.iter().any(|&x| x > 0.0));
        for &i in at {
            for j in 0..d {
                want[(row * batch.s + i) * d + j] += v[j];
            }
        }
    }
    let want = packed_rows(&want, &batch.src_lens, batch.s, d);
    assert_eq!(ws.src_rows.last(), Some(&6));
    assert_close("encoder input", &to_f64(&ws.enc_in[..want.len()]), &want, 1e-5, 1e-5);
}

/// Word dropout: in training, a word drawn for the pass is read as UNK at every one of its
/// pieces (probability 1 always, 0 never); outside training nothing is dropped.
#[test]
fn word_dropout_reads_whole_words_as_unk_in_training_only() {
    use transformer::model::DropoutCtx;
    use transformer::{PAD, UNK};
    let (_, m) = spelled_model(0);
    let mut batch = Batch::from_pairs(&[(vec![5, 9, 17, 4], vec![6, 7]), (vec![12, 20], vec![9, 10])]);
    batch.src_drop = vec![1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
    let mut ws = Workspace::new();
    let ctx = Some(DropoutCtx { seed: 1, counter: 2 });
    m.forward(&batch, &mut ws, ctx).unwrap();
    assert_eq!(ws.embed_ids, vec![UNK, 9, 17, UNK, 12, 20, PAD, PAD]);
    // The encoder input is then the same as that of the source with UNK written in.
    let mut unk = Batch::from_pairs(&[(vec![UNK, 9, 17, UNK], vec![6, 7]), (vec![12, 20], vec![9, 10])]);
    unk.src_drop.clear();
    let mut ws2 = Workspace::new();
    m.forward(&unk, &mut ws2, ctx).unwrap();
    assert_eq!(ws.enc_in, ws2.enc_in);
    m.forward(&batch, &mut ws, None).unwrap();
    assert!(ws.embed_ids.is_empty(), "no word dropout outside training");
    // At 1/2, over many words (10 sentences of 15 two-piece words): whole words go, about half.
    let rows: Vec<(Vec<u32>, Vec<u32>)> =
        (0..10u32).map(|r| ((0..15u32).flat_map(|i| [4 + (r + i) % 12, 16 + i % 13]).collect(), vec![6])).collect();
    let mut many = Batch::from_pairs(&rows);
    many.src_drop = vec![0.5; many.src.len()];
    m.forward(&many, &mut ws, ctx).unwrap();
    let pairs: Vec<&[u32]> = ws.embed_ids.chunks(2).collect();
    assert!(pairs.iter().all(|p| (p[0] == UNK) == (p[1] == UNK)), "a word is dropped whole");
    let dropped = pairs.iter().filter(|p| p[0] == UNK).count();
    assert!((50..=100).contains(&dropped), "{dropped} of 150 words dropped at 1/2");
    // Another pass draws other words.
    let first = ws.embed_ids.clone();
    m.forward(&many, &mut ws, Some(DropoutCtx { seed: 1, counter: 3 })).unwrap();
    assert_ne!(first, ws.embed_ids);
}
