//! Attention heatmaps like the paper's Figures 3–5: a (rows × columns) weight matrix drawn as a
//! grid of cells from white (0) to dark blue (1), with the query tokens labelling the rows (left),
//! the key tokens labelling the columns (top, written upwards) and a title, saved as PNG.
//!
//! Text is drawn with the public-domain 8×8 bitmap font of the `font8x8` crate (ASCII and
//! Latin-1, so German umlauts and ß show; other characters are drawn as '?'), scaled ×2.

use crate::error::{Error, Result};
use font8x8::UnicodeFonts;
use std::path::Path;

const SCALE: usize = 2;
const GLYPH: usize = 8 * SCALE;
const PAD: usize = 8;
const MAX_LABEL_CHARS: usize = 16;

/// An RGB image.
#[derive(Clone, Debug)]
pub struct Image {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Row-major RGB bytes.
    pub rgb: Vec<u8>,
}

impl Image {
    fn new(width: usize, height: usize) -> Image {
        Image { width, height, rgb: vec![255; width * height * 3] }
    }

    fn set(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < self.width && y < self.height {
            let i = (y * self.width + x) * 3;
            self.rgb[i..i + 3].copy_from_slice(&c);
        }
    }

    /// The colour at (x, y).
    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = (y * self.width + x) * 3;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }

    fn fill(&mut self, x0: usize, y0: usize, w: usize, h: usize, c: [u8; 3]) {
        for y in y0..y0 + h {
            for x in x0..x0 + w {
                self.set(x, y, c);
            }
        }
    }

    /// Draws `text` with its top-left corner at (x, y); `upwards` rotates it 90° anticlockwise
    /// (then (x, y) is the bottom-left corner and the text reads from bottom to top).
    fn text(&mut self, x: usize, y: usize, text: &str, upwards: bool) {
        for (k, ch) in text.chars().enumerate() {
            let g = glyph(ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) == 0 {
                        continue;
                    }
                    for dy in 0..SCALE {
                        for dx in 0..SCALE {
                            let (gx, gy) = (k * GLYPH + col * SCALE + dx, row * SCALE + dy);
                            if upwards {
                                // Glyph x runs up the image, glyph y runs right.
                                if let Some(py) = y.checked_sub(gx) {
                                    self.set(x + gy, py, [0, 0, 0]);
                                }
                            } else {
                                self.set(x + gx, y + gy, [0, 0, 0]);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Writes the image as an 8-bit RGB PNG.
    pub fn save_png(&self, path: &Path) -> Result<()> {
        let png = |e: png::EncodingError| Error::Io { path: path.to_path_buf(), source: std::io::Error::other(e) };
        let mut bytes = Vec::new();
        {
            let mut enc = png::Encoder::new(&mut bytes, self.width as u32, self.height as u32);
            enc.set_color(png::ColorType::Rgb);
            enc.set_depth(png::BitDepth::Eight);
            let mut w = enc.write_header().map_err(png)?;
            w.write_image_data(&self.rgb).map_err(png)?;
            w.finish().map_err(png)?;
        }
        crate::io::write_atomically(path, &bytes)
    }
}

fn glyph(ch: char) -> [u8; 8] {
    font8x8::BASIC_FONTS
        .get(ch)
        .or_else(|| font8x8::LATIN_FONTS.get(ch))
        .unwrap_or_else(|| font8x8::BASIC_FONTS.get('?').unwrap_or([0; 8]))
}

/// Shortens a label to the width the margins allow.
fn clip(label: &str) -> String {
    if label.chars().count() <= MAX_LABEL_CHARS {
        label.to_string()
    } else {
        let mut s: String = label.chars().take(MAX_LABEL_CHARS - 1).collect();
        s.push('~');
        s
    }
}

/// White (0) to dark blue (1).
fn colour(w: f32) -> [u8; 3] {
    let w = if w.is_finite() { w.clamp(0.0, 1.0) } else { 0.0 };
    let lerp = |a: f32, b: f32| (a + (b - a) * w).round() as u8;
    [lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0)]
}

/// Where the grid and its cells go.
struct Geometry {
    cell: usize,
    left: usize,
    top: usize,
}

fn geometry(row_labels: &[String], col_labels: &[String]) -> Geometry {
    // Cells are never smaller than a glyph, so labels line up with them.
    let cell = if row_labels.len().max(col_labels.len()) > 60 { GLYPH + 2 } else { GLYPH + 8 };
    let label_w = |ls: &[String]| ls.iter().map(|l| clip(l).chars().count()).max().unwrap_or(0) * GLYPH;
    let left = PAD + label_w(row_labels) + PAD;
    let top = PAD + GLYPH + PAD + label_w(col_labels) + PAD;
    Geometry { cell, left, top }
}

/// Renders `weights` (rows × cols, row-major) with labels and a title.
pub fn render(weights: &[f32], row_labels: &[String], col_labels: &[String], title: &str) -> Image {
    let (rows, cols) = (row_labels.len(), col_labels.len());
    assert_eq!(weights.len(), rows * cols, "heatmap: weights do not match the labels");
    let Geometry { cell, left, top } = geometry(row_labels, col_labels);
    let title_w = title.chars().count() * GLYPH;
    let width = (left + cols * cell + PAD).max(PAD + title_w + PAD);
    let height = top + rows * cell + PAD;
    let mut img = Image::new(width, height);
    img.text(PAD, PAD, title, false);
    for (j, l) in col_labels.iter().enumerate() {
        img.text(left + j * cell + (cell - GLYPH) / 2, top - PAD - 1, &clip(l), true);
    }
    for (i, l) in row_labels.iter().enumerate() {
        let l = clip(l);
        let x = left - PAD - l.chars().count() * GLYPH;
        img.text(x, top + i * cell + (cell - GLYPH) / 2, &l, false);
    }
    for i in 0..rows {
        for j in 0..cols {
            img.fill(left + j * cell, top + i * cell, cell, cell, colour(weights[i * cols + j]));
        }
    }
    // A thin grey frame around the grid.
    let grey = [160, 160, 160];
    img.fill(left - 1, top - 1, cols * cell + 2, 1, grey);
    img.fill(left - 1, top + rows * cell, cols * cell + 2, 1, grey);
    img.fill(left - 1, top - 1, 1, rows * cell + 2, grey);
    img.fill(left + cols * cell, top - 1, 1, rows * cell + 2, grey);
    img
}

/// The pixel at the centre of cell (i, j) of an image [`render`] made with these labels.
pub fn cell_centre(row_labels: &[String], col_labels: &[String], i: usize, j: usize) -> (usize, usize) {
    let g = geometry(row_labels, col_labels);
    (g.left + j * g.cell + g.cell / 2, g.top + i * g.cell + g.cell / 2)
}

/// The colour a weight is drawn in.
pub fn weight_colour(w: f32) -> [u8; 3] {
    colour(w)
}
