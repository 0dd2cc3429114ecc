//! Attention weights for the heatmaps (rows are distributions over the visible keys; the decoder's
//! are causal) and the heatmap image itself (cells coloured by weight, written as a valid PNG).

mod common;

use transformer::eval::attention::{attention_weights, Kind};
#[cfg(feature = "heatmap")]
use transformer::eval::heatmap::{cell_centre, render, weight_colour};
use transformer::rng::Rng;
use transformer::{ModelConfig, Positions, Transformer, Workspace};

fn model() -> Transformer {
    let c = ModelConfig {
        n_layers: 2,
        d_model: 16,
        d_ff: 32,
        n_heads: 2,
        d_k: 8,
        d_v: 8,
        dropout: 0.3,
        attention_dropout: 0.3,
        label_smoothing: 0.1,
        positions: Positions::Sinusoidal,
        max_positions: 32,
        vocab_size: 20,
        layer_norm_eps: 1e-6,
        ..transformer::ModelConfig::base()
    };
    let mut m = Transformer::new(c, 3).unwrap();
    let mut rng = Rng::new(1);
    for p in &mut m.params {
        *p += ((rng.uniform() * 2.0 - 1.0) * 0.5) as f32;
    }
    m
}

#[test]
fn weights_are_distributions_over_visible_keys() {
    let m = model();
    let (src, tgt) = ([5u32, 6, 7, 8, 9], [10u32, 11, 12]);
    let w = attention_weights(&m, &src, &tgt, &mut Workspace::new()).unwrap();
    assert_eq!((w.s, w.t, w.heads), (5, 4, 2));
    for kind in Kind::ALL {
        for l in 0..2 {
            for h in 0..2 {
                let (x, rows, cols) = w.get(kind, l, h).unwrap();
                assert_eq!(x.len(), rows * cols);
                for i in 0..rows {
                    let row = &x[i * cols..(i + 1) * cols];
                    let sum: f32 = row.iter().sum();
                    assert!((sum - 1.0).abs() < 1e-5, "{kind:?} layer {l} head {h} row {i} sums to {sum}");
                    assert!(row.iter().all(|&p| (0.0..=1.0).contains(&p)));
                    if kind == Kind::DecoderSelf {
                        assert!(row[i + 1..].iter().all(|&p| p == 0.0), "decoder row {i} sees the future: {row:?}");
                    }
                }
            }
        }
    }
    // Without dropout (evaluation), the same input gives the same weights.
    let again = attention_weights(&m, &src, &tgt, &mut Workspace::new()).unwrap();
    assert_eq!(again.encoder_decoder, w.encoder_decoder);
}

#[cfg(feature = "heatmap")]
#[test]
fn heatmap_cells_show_the_weights_and_the_png_decodes() {
    let rows: Vec<String> = ["Die", "Katze", "</s>"].iter().map(|s| s.to_string()).collect();
    let cols: Vec<String> = ["The", "cat", "-s", "größer"].iter().map(|s| s.to_string()).collect();
    let weights: Vec<f32> = (0..12).map(|i| i as f32 / 11.0).collect();
    let img = render(&weights, &rows, &cols, "encoder-decoder attention, layer 1 of 1, head 1 of 1").unwrap();
    for i in 0..3 {
        for j in 0..4 {
            let (x, y) = cell_centre(&rows, &cols, i, j);
            assert_eq!(img.pixel(x, y), weight_colour(weights[i * 4 + j]), "cell ({i}, {j})");
        }
    }
    assert_eq!(weight_colour(0.0), [255, 255, 255]);
    assert_ne!(weight_colour(1.0), weight_colour(0.5));
    // Labels are drawn (antialiased black text): the left margin and the band above the grid have
    // pixels nearly black, which no cell colour is.
    let (gx, gy) = cell_centre(&rows, &cols, 0, 0);
    let near_black = |p: [u8; 3]| p.iter().all(|&c| c < 64);
    assert!(!near_black(weight_colour(1.0)));
    let dark =
        |x0: usize, x1: usize, y0: usize, y1: usize| (y0..y1).any(|y| (x0..x1).any(|x| near_black(img.pixel(x, y))));
    assert!(dark(0, gx - 12, gy - 12, gy + 12), "no row label");
    assert!(dark(gx - 12, gx + 12, 30, gy - 12), "no column label");

    let dir = common::TestDir::new("heatmap");
    let path = dir.join("heatmap.png");
    img.save_png(&path).unwrap();
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width as usize, info.height as usize), (img.width, img.height));
    assert_eq!(&buf[..info.buffer_size()], &img.rgb[..]);

    // A long sentence (smaller cells) with long labels.
    let labels: Vec<String> = (0..75).map(|i| format!("token{i}-with-a-long-name")).collect();
    let weights: Vec<f32> = (0..75 * 75).map(|i| (i % 7) as f32 / 6.0).collect();
    let img = render(&weights, &labels, &labels, "encoder self-attention").unwrap();
    for (i, j) in [(0, 0), (74, 74), (10, 63)] {
        let (x, y) = cell_centre(&labels, &labels, i, j);
        assert_eq!(img.pixel(x, y), weight_colour(weights[i * 75 + j]), "cell ({i}, {j})");
    }
}

/// The weights `attention` draws are the model's real attention: the first layer's encoder and
/// decoder self-attention recomputed in f64 from the parameters (embedding · √D + sinusoids, then
/// softmax(q kᵀ / √K) per head over the visible keys) equal what `attention_weights` returns.
/// Weights that are not one a (row, column) label pair are the caller's error, named, not a panic.
#[test]
fn weights_that_do_not_match_the_labels_are_an_input_error() {
    let labels: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
    let Err(e) = render(&[0.5; 3], &labels, &labels, "t") else { panic!("3 weights for 2 × 2 labels were drawn") };
    assert!(matches!(e, transformer::Error::Input(_)), "{e:?}");
    assert!(e.to_string().contains("3 weights for 2 row and 2 column labels"), "{e}");
    assert!(render(&[0.5; 4], &labels, &labels, "t").is_ok());
}

#[test]
fn drawn_weights_are_the_models_attention_recomputed_from_its_parameters() {
    use transformer::kernels::cpu::embedding::sinusoid_table;
    let m = model();
    let c = &m.config;
    let (src, tgt) = ([5u32, 6, 7, 8, 9], [10u32, 11, 12]);
    let w = attention_weights(&m, &src, &tgt, &mut Workspace::new()).unwrap();
    let (d, h, dk) = (c.d_model, c.n_heads, c.d_k);
    let tensor = |name: &str| -> Vec<f64> {
        let e = m.layout.get(name).unwrap_or_else(|| panic!("no tensor {name}"));
        m.params[e.range()].iter().map(|&x| x as f64).collect()
    };
    let emb = tensor("embed.weight");
    let pos = sinusoid_table(c.max_positions, d, c.import.sinusoid_layout);
    let inputs = |ids: &[u32]| -> Vec<f64> {
        let mut x = Vec::new();
        for (p, &id) in ids.iter().enumerate() {
            for j in 0..d {
                x.push(emb[id as usize * d + j] * (d as f64).sqrt() + pos[p * d + j] as f64);
            }
        }
        x
    };
    let mut dec_ids = vec![transformer::BOS];
    dec_ids.extend_from_slice(&tgt);
    for (kind, prefix, ids, causal) in [
        (Kind::EncoderSelf, "encoder.layers.0.self_attn", &src[..], false),
        (Kind::DecoderSelf, "decoder.layers.0.self_attn", &dec_ids[..], true),
    ] {
        let x = inputs(ids);
        let n = ids.len();
        let project = |w: &str, b: &str| {
            transformer::kernels::reference::linear_forward(&x, &tensor(w), &tensor(b), n, h * dk, d)
        };
        let q = project(&format!("{prefix}.w_q"), &format!("{prefix}.b_q"));
        let k = project(&format!("{prefix}.w_k"), &format!("{prefix}.b_k"));
        for head in 0..h {
            let (got, rows, cols) = w.get(kind, 0, head).unwrap();
            assert_eq!((rows, cols), (n, n));
            for i in 0..n {
                let visible = if causal { i + 1 } else { n };
                let scores: Vec<f64> = (0..visible)
                    .map(|j| {
                        (0..dk).map(|t| q[i * h * dk + head * dk + t] * k[j * h * dk + head * dk + t]).sum::<f64>()
                            / (dk as f64).sqrt()
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - mx).exp()).sum();
                for j in 0..n {
                    let want = if j < visible { (scores[j] - mx).exp() / z } else { 0.0 };
                    let g = got[i * cols + j] as f64;
                    assert!((g - want).abs() < 1e-5, "{kind:?} head {head} row {i} key {j}: drawn {g}, model {want}");
                }
            }
        }
    }
}
