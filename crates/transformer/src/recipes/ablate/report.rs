//! The ablation's table and chart: each row's mean and spread over its seeds, its difference from
//! base (marked when within the seeds' spread), beside the paper's figures; as `table.md`,
//! `table.csv` and `bleu.svg`.

use super::{Budget, Plan, Row, RowResult};
use crate::config::Preset;
use crate::recipes::short_number;

/// Per row: the results over its seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct RowSummary {
    /// The row.
    pub row: Row,
    /// One result per seed.
    pub results: Vec<RowResult>,
}

/// Mean and spread (max − min) of a statistic over seeds.
fn mean_spread(v: &[f64]) -> (f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
    (mean, max - min)
}

impl RowSummary {
    fn ppl(&self) -> (f64, f64) {
        mean_spread(&self.results.iter().map(|r| r.dev_perplexity).collect::<Vec<_>>())
    }
    fn bleu(&self) -> (f64, f64) {
        mean_spread(&self.results.iter().map(|r| r.dev_bleu).collect::<Vec<_>>())
    }
}

/// Whether a row's mean differs from base's by no more than their half-spreads together: the
/// ranges "mean ± half the spread" the table shows overlap, so the difference is not significant.
/// Never with one seed (no spread to judge by).
pub(super) fn within_spread(d: f64, spread_row: f64, spread_base: f64, seeds: u64) -> bool {
    seeds > 1 && d.abs() <= (spread_row + spread_base) / 2.0
}

/// A difference from base, signed, with `~` appended when [`within_spread`].
pub(super) fn delta(d: f64, spread_row: f64, spread_base: f64, seeds: u64, decimals: usize) -> String {
    let s = format!("{d:+.decimals$}");
    if within_spread(d, spread_row, spread_base, seeds) {
        format!("{s} ~")
    } else {
        s
    }
}

/// The table, as Markdown and as CSV: each row beside base and the paper's figures.
pub(super) fn render(plan: &Plan, rows: &[RowSummary]) -> (String, String) {
    let base = &rows[0];
    let (bp, bps) = base.ppl();
    let (bb, bbs) = base.bleu();
    let (pbp, pbb) = Preset::Base.paper_dev_scores().expect("base is in the paper");
    let budget = match plan.budget {
        Budget::Minutes(m) => format!("{} minutes of training per row", short_number(m)),
        Budget::Updates(n) => format!("{n} updates per row"),
    };
    // The checkpoints each row really averaged: fewer than --average when a row wrote fewer.
    let averaged: Vec<usize> = rows.iter().flat_map(|r| r.results.iter().map(|x| x.averaged)).collect();
    let (fewest, most) = (averaged.iter().copied().min().unwrap_or(0), averaged.iter().copied().max().unwrap_or(0));
    let last = match (fewest == most, most == plan.average) {
        (true, true) => format!("the last {most}"),
        (true, false) => format!("the last {most} (--average {}: the rows wrote only {most})", plan.average),
        (false, _) => format!("the last {fewest} to {most} (--average {}; some rows wrote fewer)", plan.average),
    };
    let mut md = format!(
        "Table 3 at small scale: dev = Multi30k val{}, perplexity per word-piece and BLEU (sacreBLEU, cased; beam 4, α 0.6) \
         of the average of {last} checkpoints; {budget}; {} seed(s){}.\n\n",
        plan.dev_sentences.map(|n| format!(" (first {n} sentences)")).unwrap_or_default(),
        plan.seeds,
        if plan.seeds > 1 {
            ", mean ± half the spread (max − min over seeds); `~`: the row's range and base's overlap, not significant"
        } else {
            ""
        }
    );
    md.push_str("| row | ours: changed | paper: changed | params | updates | minutes | dev PPL | Δ PPL | dev BLEU | Δ BLEU | paper PPL | paper Δ PPL | paper BLEU | paper Δ BLEU |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut csv = String::from(
        "row,ours_changed,paper_changed,params,updates,train_minutes,dev_ppl,dev_ppl_spread,delta_ppl,delta_ppl_within_spread,dev_bleu,dev_bleu_spread,delta_bleu,delta_bleu_within_spread,paper_ppl,paper_delta_ppl,paper_bleu,paper_delta_bleu\n",
    );
    for r in rows {
        let (p, ps) = r.ppl();
        let (b, bs) = r.bleu();
        let params = r.results[0].params;
        let updates = mean_spread(&r.results.iter().map(|x| x.updates as f64).collect::<Vec<_>>()).0;
        let minutes = mean_spread(&r.results.iter().map(|x| x.train_seconds / 60.0).collect::<Vec<_>>()).0;
        let ours = r.row.change.to_string();
        let (pp, pb) = r.row.paper_scores().unwrap_or((f64::NAN, f64::NAN));
        let is_base = r.row.name == "base";
        let with_spread = |x: f64, s: f64, d: usize| {
            if plan.seeds > 1 {
                format!("{x:.d$} ± {:.d$}", s / 2.0)
            } else {
                format!("{x:.d$}")
            }
        };
        let dash = |s: String| if is_base { "–".to_string() } else { s };
        md.push_str(&format!(
            "| {} | {} | {} | {:.2}M | {:.0} | {:.1} | {} | {} | {} | {} | {:.2} | {} | {:.1} | {} |\n",
            r.row.name,
            if ours.is_empty() { "–".into() } else { ours.clone() },
            if r.row.paper_change.is_empty() { "–".into() } else { r.row.paper_change.clone() },
            params as f64 / 1e6,
            updates,
            minutes,
            with_spread(p, ps, 2),
            dash(delta(p - bp, ps, bps, plan.seeds, 2)),
            with_spread(b, bs, 2),
            dash(delta(b - bb, bs, bbs, plan.seeds, 2)),
            pp,
            dash(format!("{:+.2}", pp - pbp)),
            pb,
            dash(format!("{:+.1}", pb - pbb)),
        ));
        csv.push_str(&format!(
            "{},\"{}\",\"{}\",{},{:.0},{:.2},{:.4},{:.4},{:.4},{},{:.4},{:.4},{:.4},{},{:.2},{:.2},{:.1},{:.1}\n",
            r.row.name,
            ours,
            r.row.paper_change,
            params,
            updates,
            minutes,
            p,
            ps,
            p - bp,
            within_spread(p - bp, ps, bps, plan.seeds),
            b,
            bs,
            b - bb,
            within_spread(b - bb, bs, bbs, plan.seeds),
            pp,
            pp - pbp,
            pb,
            pb - pbb
        ));
    }
    (md, csv)
}

/// A bar chart of dev BLEU by row (whiskers: the seeds' min and max), base's level as a line.
pub(super) fn bleu_svg(rows: &[RowSummary]) -> String {
    let (w, h, left, bottom, top) = (80.0 + 56.0 * rows.len() as f64, 320.0, 56.0, 40.0, 30.0);
    // The axis top: a multiple of 4 above every score, so the five ticks are whole numbers.
    let top_score =
        rows.iter().flat_map(|r| r.results.iter().map(|x| x.dev_bleu)).filter(|x| x.is_finite()).fold(1.0f64, f64::max);
    let max = ((top_score * 1.1) / 4.0).ceil() * 4.0;
    let y = |v: f64| top + (h - top - bottom) * (1.0 - v / max);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"18\">dev BLEU by row (Table 3 at small scale)</text>\n"
    );
    for t in 0..=4 {
        let v = max * t as f64 / 4.0;
        s += &format!(
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>\n",
            w - 10.0,
            left - 6.0,
            y(v) + 4.0,
            y = y(v)
        );
    }
    let base = rows[0].bleu().0;
    for (i, r) in rows.iter().enumerate() {
        let (mean, _) = r.bleu();
        let lo = r.results.iter().map(|x| x.dev_bleu).fold(f64::INFINITY, f64::min);
        let hi = r.results.iter().map(|x| x.dev_bleu).fold(f64::NEG_INFINITY, f64::max);
        let x = left + 12.0 + 56.0 * i as f64;
        let color = if i == 0 {
            "#555"
        } else if mean >= base {
            "#2a7"
        } else {
            "#c54"
        };
        s += &format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"36\" height=\"{:.1}\" fill=\"{color}\"><title>{} {mean:.2}</title></rect>\n",
            y(mean),
            y(0.0) - y(mean),
            r.row.name
        );
        if r.results.len() > 1 {
            s += &format!(
                "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1:.1}\" y2=\"{2:.1}\" stroke=\"black\"/>\n",
                x + 18.0,
                y(lo),
                y(hi)
            );
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{mean:.1}</text>\n",
            x + 18.0,
            h - bottom + 16.0,
            r.row.name,
            x + 18.0,
            y(mean) - 4.0
        );
    }
    s += &format!(
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{1:.1}\" y2=\"{1:.1}\" stroke=\"#555\" stroke-dasharray=\"4 3\"/>\n</svg>\n",
        w - 10.0,
        y(base)
    );
    s
}
