//! Alignment error rate (Och & Ney 2003): AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|) of
//! hypothesis links A against reference links, sure S (`s-t`) and possible P (`s?t`, P ⊇ S),
//! summed over the corpus; with precision |A ∩ P| / |A| and recall |A ∩ S| / |S|.

use crate::error::{Error, Result};
use std::collections::HashSet;

/// A corpus's link counts, and the rates they give.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aer {
    /// |A|: hypothesis links.
    pub hypothesis: usize,
    /// |S|: sure reference links.
    pub sure: usize,
    /// |A ∩ S|.
    pub sure_hits: usize,
    /// |A ∩ P|.
    pub possible_hits: usize,
}

impl Aer {
    /// The alignment error rate, in [0, 1]; `None` with no link on either side.
    pub fn rate(&self) -> Option<f64> {
        let n = self.hypothesis + self.sure;
        (n > 0).then(|| 1.0 - (self.sure_hits + self.possible_hits) as f64 / n as f64)
    }

    /// |A ∩ P| / |A|.
    pub fn precision(&self) -> Option<f64> {
        (self.hypothesis > 0).then(|| self.possible_hits as f64 / self.hypothesis as f64)
    }

    /// |A ∩ S| / |S|.
    pub fn recall(&self) -> Option<f64> {
        (self.sure > 0).then(|| self.sure_hits as f64 / self.sure as f64)
    }

    /// The report line: `AER = 23.45 (precision 80.12, recall 73.00; 1234 links against 1300 sure)`.
    pub fn line(&self) -> String {
        let pct = |x: Option<f64>| x.map_or("n/a".to_string(), |v| format!("{:.2}", 100.0 * v));
        format!(
            "AER = {} (precision {}, recall {}; {} links against {} sure)",
            pct(self.rate()),
            pct(self.precision()),
            pct(self.recall()),
            self.hypothesis,
            self.sure
        )
    }
}

/// A line's links, (source, target) positions.
type Links = HashSet<(usize, usize)>;

/// One line's (sure, possible) links: `s-t` sure, `s?t` possible (`possible` false: `?` is an
/// error).
fn links(line: &str, possible: bool) -> std::result::Result<(Links, Links), String> {
    let (mut sure, mut maybe) = (HashSet::new(), HashSet::new());
    for p in line.split_whitespace() {
        let bad = || format!("link {p:?}: write source-target (sure) or source?target (possible), as 0-1");
        let (sep, (s, t)) = match (p.split_once('-'), p.split_once('?')) {
            (Some(x), None) => ('-', x),
            (None, Some(x)) if possible => ('?', x),
            (None, Some(_)) => return Err(format!("link {p:?}: a hypothesis has no possible links; write 0-1")),
            _ => return Err(bad()),
        };
        let link = (s.parse().map_err(|_| bad())?, t.parse().map_err(|_| bad())?);
        maybe.insert(link);
        if sep == '-' {
            sure.insert(link);
        }
    }
    Ok((sure, maybe))
}

/// The AER counts of hypothesis lines against reference lines, line by line (line-aligned; a
/// hypothesis line `text ||| links`, as `translate --alignment` writes it, is read after its
/// last ` ||| `). A malformed link is an error naming the side and line.
pub fn corpus_aer(references: &[String], hypotheses: &[String]) -> Result<Aer> {
    if references.len() != hypotheses.len() {
        return Err(Error::Input(format!(
            "{} reference alignments but {} hypothesis alignments: they must be line-aligned",
            references.len(),
            hypotheses.len()
        )));
    }
    let mut out = Aer::default();
    for (i, (r, h)) in references.iter().zip(hypotheses).enumerate() {
        let h = h.rsplit_once(" ||| ").map_or(h.as_str(), |x| x.1);
        let at = |side: &'static str| move |e: String| Error::Input(format!("{side} line {}: {e}", i + 1));
        let (sure, possible) = links(r, true).map_err(at("reference"))?;
        let (hyp, _) = links(h, false).map_err(at("hypothesis"))?;
        out.hypothesis += hyp.len();
        out.sure += sure.len();
        out.sure_hits += hyp.intersection(&sure).count();
        out.possible_hits += hyp.intersection(&possible).count();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn hand_counted_corpus() {
        // Line 1: S = {0-0, 1-1}, P adds 2?1; A = {0-0, 2-1, 1-2}: A∩S 1, A∩P 2.
        // Line 2: S = {0-0}; A = {0-0}: 1 and 1.
        let a = corpus_aer(&s(&["0-0 1-1 2?1", "0-0"]), &s(&["0-0 2-1 1-2", "Ein Hund. ||| 0-0"])).unwrap();
        assert_eq!(a, Aer { hypothesis: 4, sure: 3, sure_hits: 2, possible_hits: 3 });
        // 1 − (2 + 3) / (4 + 3).
        assert!((a.rate().unwrap() - 2.0 / 7.0).abs() < 1e-12);
        assert_eq!((a.precision(), a.recall()), (Some(0.75), Some(2.0 / 3.0)));
        assert_eq!(a.line(), "AER = 28.57 (precision 75.00, recall 66.67; 4 links against 3 sure)");
        let perfect = corpus_aer(&s(&["0-0 1-1"]), &s(&["1-1 0-0"])).unwrap();
        assert_eq!(perfect.rate(), Some(0.0));
        assert_eq!(corpus_aer(&s(&[""]), &s(&[""])).unwrap().rate(), None);
    }

    #[test]
    fn bad_lines_are_named() {
        let e = corpus_aer(&s(&["0-0", "0-x"]), &s(&["0-0", "0-0"])).unwrap_err().to_string();
        assert!(e.contains("reference line 2") && e.contains("\"0-x\""), "{e}");
        let e = corpus_aer(&s(&["0-0"]), &s(&["0?0"])).unwrap_err().to_string();
        assert!(e.contains("hypothesis line 1") && e.contains("no possible links"), "{e}");
        assert!(corpus_aer(&s(&["0-0"]), &s(&[])).is_err());
    }
}
