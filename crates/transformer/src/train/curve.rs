//! The learning curve from metrics.jsonl, as a self-contained SVG next to the checkpoints: one
//! panel of training loss (smoothed) and validation loss per step; one of how much the model
//! reads its source (the shifted-sentence gap and the encoder-output spread of every
//! validation, docs/parsing.md); and, for parsing, one of validation F1.

use crate::error::Result;
use crate::io::{io_err, write_atomically};
use std::collections::BTreeMap;
use std::path::Path;

/// One named line of a panel.
struct Series {
    name: &'static str,
    color: &'static str,
    points: Vec<(f64, f64)>,
    dots: bool,
}

/// Points of `kind` records' `field` by step; a resumed run repeats steps after its last
/// checkpoint, so the latest record of each step is kept.
fn series(records: &[serde_json::Value], kind: &str, field: &str) -> Vec<(f64, f64)> {
    let mut seen = BTreeMap::new();
    for v in records.iter().filter(|v| v["kind"].as_str() == Some(kind)) {
        if let (Some(step), Some(y)) = (v["step"].as_u64(), v[field].as_f64()) {
            seen.insert(step, y);
        }
    }
    seen.into_iter().map(|(s, y)| (s as f64, y)).collect()
}

/// Reads `metrics` (JSON lines with kind, step and values) and writes the curve to `svg`.
pub fn write_svg(metrics: &Path, svg: &Path) -> Result<()> {
    // A damaged line (a bad byte, not JSON) is skipped, never an error.
    let bytes = std::fs::read(metrics).map_err(io_err(metrics))?;
    let text = String::from_utf8_lossy(&bytes);
    let records: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let train = series(&records, "train", "loss");
    // Exponential moving average of the training loss.
    let mut ema = None;
    let smooth: Vec<(f64, f64)> = train
        .iter()
        .map(|&(s, l)| {
            let e = ema.map_or(l, |e: f64| 0.95 * e + 0.05 * l);
            ema = Some(e);
            (s, e)
        })
        .collect();
    let max_step = records.iter().filter_map(|v| v["step"].as_f64()).fold(1.0, f64::max);
    let mut panels = vec![(
        "loss per target token",
        vec![
            Series { name: "training loss (EMA)", color: "#1f77b4", points: smooth, dots: false },
            Series { name: "validation loss", color: "#d62728", points: series(&records, "valid", "loss"), dots: true },
        ],
        None,
    )];
    let (gap, spread) = (series(&records, "valid", "gap"), series(&records, "valid", "spread"));
    if !gap.is_empty() || !spread.is_empty() {
        panels.push((
            "reads its source",
            vec![
                Series { name: "shifted-source gap (nats/token)", color: "#2ca02c", points: gap, dots: true },
                Series { name: "encoder-output spread", color: "#9467bd", points: spread, dots: true },
            ],
            Some(0.0),
        ));
    }
    let f1 = series(&records, "valid_f1", "f1");
    if !f1.is_empty() {
        panels.push((
            "validation F1",
            vec![Series { name: "validation F1 (EVALB)", color: "#ff7f0e", points: f1, dots: true }],
            Some(0.0),
        ));
    }
    let (w, ph) = (800.0, 480.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        ph * panels.len() as f64
    );
    for (i, (label, lines, floor)) in panels.iter().enumerate() {
        out += &panel(lines, label, *floor, max_step, w, ph, ph * i as f64);
    }
    out += "</svg>\n";
    write_atomically(svg, out.as_bytes())
}

/// One panel `h` high at vertical offset `top`: axes, the y range of its series (from `floor`
/// when given), each series as a line (with dots), and a legend.
fn panel(lines: &[Series], label: &str, floor: Option<f64>, max_step: f64, w: f64, h: f64, top: f64) -> String {
    let pad = 60.0;
    let ys = lines.iter().flat_map(|s| s.points.iter().map(|p| p.1)).filter(|y| y.is_finite());
    let (lo, hi) = ys.fold((floor.unwrap_or(f64::INFINITY), f64::NEG_INFINITY), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = match (lo.is_finite(), hi.is_finite()) {
        (true, true) if hi > lo => (lo, hi),
        (true, _) => (lo, lo + 1.0),
        _ => (0.0, 1.0),
    };
    let x = |s: f64| pad + (w - 2.0 * pad) * s / max_step;
    let y = |l: f64| top + h - pad - (h - 2.0 * pad) * (l - lo) / (hi - lo);
    let (b, r, cy) = (top + h - pad, w - pad, top + h / 2.0);
    let mut out = format!(
        "<line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/><line x1=\"{pad}\" y1=\"{t}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{cx}\" y=\"{xl}\" text-anchor=\"middle\">update step (max {max_step:.0})</text>\n\
         <text x=\"15\" y=\"{cy}\" transform=\"rotate(-90 15 {cy})\" text-anchor=\"middle\">{label}</text>\n\
         <text x=\"{lx}\" y=\"{b}\" text-anchor=\"end\">{lo:.2}</text><text x=\"{lx}\" y=\"{t}\" text-anchor=\"end\">{hi:.2}</text>\n",
        t = top + pad,
        cx = w / 2.0,
        xl = top + h - 20.0,
        lx = pad - 5.0
    );
    for (k, s) in lines.iter().enumerate() {
        let pts: Vec<String> =
            s.points.iter().filter(|p| p.1.is_finite()).map(|&(a, l)| format!("{:.1},{:.1}", x(a), y(l))).collect();
        out += &format!(
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n",
            s.color,
            pts.join(" ")
        );
        if s.dots {
            for &(a, l) in s.points.iter().filter(|p| p.1.is_finite()) {
                out += &format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{}\"/>\n", x(a), y(l), s.color);
            }
        }
        out += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n",
            w - 260.0,
            top + 20.0 + 16.0 * k as f64,
            s.color,
            s.name
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_follow_the_records() {
        let dir = tempfile::Builder::new().prefix("curve-test-").tempdir().unwrap();
        let m = dir.path().join("metrics.jsonl");
        let lines = [
            r#"{"kind":"train","step":1,"loss":5.0}"#,
            r#"{"kind":"train","step":2,"loss":4.0}"#,
            r#"{"kind":"valid","step":2,"loss":4.5,"gap":0.5,"spread":0.8}"#,
            r#"{"kind":"valid_f1","step":2,"f1":40.0}"#,
        ];
        std::fs::write(&m, lines.join("\n")).unwrap();
        let svg = dir.path().join("curve.svg");
        write_svg(&m, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        for want in
            ["height=\"1440\"", "validation loss", "shifted-source gap", "encoder-output spread", "validation F1"]
        {
            assert!(text.contains(want), "{want} missing");
        }
        // Translation before this change: loss only, one panel.
        std::fs::write(&m, lines[..2].join("\n")).unwrap();
        write_svg(&m, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("height=\"480\"") && !text.contains("spread"));
    }
}
