//! Attention heatmaps like the paper's Figures 3–5: a (rows × columns) weight matrix drawn as a
//! grid of cells from white (0) to dark blue (1), with the query tokens labelling the rows (left),
//! the key tokens labelling the columns (top, written upwards) and a title, saved as PNG.
//!
//! Text is drawn antialiased in DejaVu Sans (`assets/DejaVuSans.ttf`, bundled with its licence),
//! rasterised by the `ab_glyph` crate: Latin with every accent, Greek and Cyrillic show as
//! written, and a character the font lacks as its missing-glyph box.

use crate::error::{Error, Result};
use ab_glyph::{Font, FontRef, PxScale, ScaleFont};
use std::path::Path;

/// The bundled font (see `assets/DejaVuSans-LICENSE.txt`).
const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
/// Text size in pixels (the font's em).
const TEXT_PX: f32 = 14.0;
/// A line of text's height in pixels: the font's ascent to descent at [`TEXT_PX`].
const GLYPH: usize = 17;
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

    /// Draws `text` in black with its top-left corner at (x, y); `upwards` rotates it 90°
    /// anticlockwise (then (x, y) is the bottom-left corner and the text reads from bottom to top).
    fn text(&mut self, x: usize, y: usize, text: &str, upwards: bool) {
        let line = Line::new(text);
        for gy in 0..GLYPH {
            for gx in 0..line.width {
                let c = line.coverage[gy * line.width + gx];
                if c <= 0.0 {
                    continue;
                }
                // Glyph x runs up the image when upwards, glyph y runs right.
                let (px, py) = match upwards {
                    true => match y.checked_sub(gx) {
                        Some(py) => (x + gy, py),
                        None => continue,
                    },
                    false => (x + gx, y + gy),
                };
                if px < self.width && py < self.height {
                    let i = (py * self.width + px) * 3;
                    for v in &mut self.rgb[i..i + 3] {
                        *v = (*v as f32 * (1.0 - c)).round() as u8;
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

fn font() -> FontRef<'static> {
    FontRef::try_from_slice(FONT).expect("the bundled font parses")
}

/// One line of text rasterised: how much of each pixel of a `width` × [`GLYPH`] box the glyphs
/// cover (0 to 1), the baseline at the font's ascent.
struct Line {
    width: usize,
    coverage: Vec<f32>,
}

impl Line {
    fn new(text: &str) -> Line {
        let font = font();
        let scaled = font.as_scaled(PxScale::from(TEXT_PX));
        let mut glyphs = Vec::new();
        let (mut x, mut previous) = (0.0f32, None);
        for ch in text.chars() {
            let id = scaled.glyph_id(ch);
            if let Some(p) = previous {
                x += scaled.kern(p, id);
            }
            glyphs.push(id.with_scale_and_position(TEXT_PX, ab_glyph::point(x, scaled.ascent())));
            x += scaled.h_advance(id);
            previous = Some(id);
        }
        let width = x.ceil() as usize;
        let mut coverage = vec![0f32; width * GLYPH];
        for g in glyphs {
            let Some(outline) = scaled.outline_glyph(g) else { continue };
            let min = outline.px_bounds().min;
            outline.draw(|gx, gy, c| {
                let (px, py) = (min.x as i64 + gx as i64, min.y as i64 + gy as i64);
                if (0..width as i64).contains(&px) && (0..GLYPH as i64).contains(&py) {
                    let cell = &mut coverage[py as usize * width + px as usize];
                    *cell = (*cell + c).min(1.0);
                }
            });
        }
        Line { width, coverage }
    }
}

/// The width in pixels `text` takes.
fn text_width(text: &str) -> usize {
    let font = font();
    let scaled = font.as_scaled(PxScale::from(TEXT_PX));
    let ids: Vec<_> = text.chars().map(|c| scaled.glyph_id(c)).collect();
    let kerning: f32 = ids.windows(2).map(|w| scaled.kern(w[0], w[1])).sum();
    (ids.iter().map(|&id| scaled.h_advance(id)).sum::<f32>() + kerning).ceil() as usize
}

/// Shortens a label to the width the margins allow.
fn clip(label: &str) -> String {
    if label.chars().count() <= MAX_LABEL_CHARS {
        label.to_string()
    } else {
        let mut s: String = label.chars().take(MAX_LABEL_CHARS - 1).collect();
        s.push('…');
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
    let label_w = |ls: &[String]| ls.iter().map(|l| text_width(&clip(l))).max().unwrap_or(0);
    let left = PAD + label_w(row_labels) + PAD;
    let top = PAD + GLYPH + PAD + label_w(col_labels) + PAD;
    Geometry { cell, left, top }
}

/// Renders `weights` (rows × cols, row-major) with labels and a title. Weights that are not one
/// per (row, column) label pair are an [`Error::Input`].
pub fn render(weights: &[f32], row_labels: &[String], col_labels: &[String], title: &str) -> Result<Image> {
    let (rows, cols) = (row_labels.len(), col_labels.len());
    if weights.len() != rows * cols {
        return Err(Error::Input(format!(
            "heatmap: {} weights for {rows} row and {cols} column labels: there must be one a pair ({})",
            weights.len(),
            rows * cols
        )));
    }
    let Geometry { cell, left, top } = geometry(row_labels, col_labels);
    let title_w = text_width(title);
    let width = (left + cols * cell + PAD).max(PAD + title_w + PAD);
    let height = top + rows * cell + PAD;
    let mut img = Image::new(width, height);
    img.text(PAD, PAD, title, false);
    for (j, l) in col_labels.iter().enumerate() {
        img.text(left + j * cell + (cell - GLYPH) / 2, top - PAD - 1, &clip(l), true);
    }
    for (i, l) in row_labels.iter().enumerate() {
        let l = clip(l);
        let x = left - PAD - text_width(&l);
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
    Ok(img)
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
