//! The learning curve: training loss (smoothed) and validation loss per step, from metrics.jsonl,
//! as a self-contained SVG next to the checkpoints.

use crate::error::Result;
use crate::io::{io_err, write_atomically};
use std::path::Path;

/// Reads `metrics` (JSON lines with kind, step, loss) and writes the curve to `svg`.
pub fn write_svg(metrics: &Path, svg: &Path) -> Result<()> {
    let text = std::fs::read_to_string(metrics).map_err(io_err(metrics))?;
    let (mut train, mut valid) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let (Some(step), Some(loss)) = (v["step"].as_f64(), v["loss"].as_f64()) else { continue };
        match v["kind"].as_str() {
            Some("train") => train.push((step, loss)),
            Some("valid") => valid.push((step, loss)),
            _ => {}
        }
    }
    // A resumed run repeats steps after its last checkpoint: keep the latest record of each step.
    let dedup = |v: &mut Vec<(f64, f64)>| {
        let mut seen = std::collections::BTreeMap::new();
        for (s, l) in v.drain(..) {
            seen.insert(s as u64, l);
        }
        *v = seen.into_iter().map(|(s, l)| (s as f64, l)).collect();
    };
    dedup(&mut train);
    dedup(&mut valid);
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
    let all: Vec<&(f64, f64)> = smooth.iter().chain(&valid).collect();
    let (w, h, pad) = (800.0, 480.0, 60.0);
    let max_step = all.iter().map(|p| p.0).fold(1.0, f64::max);
    let (lo, hi) = all.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.1), hi.max(p.1)));
    let (lo, hi) = if lo.is_finite() && hi > lo { (lo, hi) } else { (0.0, 1.0) };
    let x = |s: f64| pad + (w - 2.0 * pad) * s / max_step;
    let y = |l: f64| h - pad - (h - 2.0 * pad) * (l - lo) / (hi - lo);
    let line =
        |pts: &[(f64, f64)]| pts.iter().map(|&(s, l)| format!("{:.1},{:.1}", x(s), y(l))).collect::<Vec<_>>().join(" ");
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{pad}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/><line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{cx}\" y=\"{xl}\" text-anchor=\"middle\">update step (max {max_step:.0})</text>\n\
         <text x=\"15\" y=\"{cy}\" transform=\"rotate(-90 15 {cy})\" text-anchor=\"middle\">loss per target token</text>\n\
         <text x=\"{lx}\" y=\"{b}\" text-anchor=\"end\">{lo:.2}</text><text x=\"{lx}\" y=\"{pad}\" text-anchor=\"end\">{hi:.2}</text>\n",
        b = h - pad,
        r = w - pad,
        cx = w / 2.0,
        xl = h - 20.0,
        cy = h / 2.0,
        lx = pad - 5.0
    );
    out += &format!("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/>\n", line(&smooth));
    out += &format!("<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" points=\"{}\"/>\n", line(&valid));
    for &(s, l) in &valid {
        out += &format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#d62728\"/>\n", x(s), y(l));
    }
    out += &format!(
        "<text x=\"{0}\" y=\"20\" fill=\"#1f77b4\">training loss (EMA)</text><text x=\"{0}\" y=\"36\" fill=\"#d62728\">validation loss</text>\n</svg>\n",
        w - 220.0
    );
    write_atomically(svg, out.as_bytes())
}
