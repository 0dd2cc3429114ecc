//! §6.3 Constituency parsing F1: labeled bracketing scored exactly as EVALB (Sekine & Collins,
//! 1997; the 2006 revision by David Ellis) scores it with its standard `COLLINS.prm`, so the F1 we
//! print is the F1 the parsing literature prints. Tested against the real program's output on
//! every case of `tests/evalb` (the project's own trees, `dev/evalb/fixtures.py`) and, on the
//! project's CI machines, of `../shared/evalb-fixtures` (Penn Treebank trees): per-sentence lines,
//! summaries and error messages.
//!
//! What EVALB does, and so what [`score`] does, for each pair of lines (one tree each):
//! - Terminals whose tag is a `DELETE_LABEL` (COLLINS: `-NONE-`, `,`, `:`, ``` `` ```, `''`, `.`)
//!   are dropped before spans are computed; `Len.` counts every terminal but those tagged with a
//!   `DELETE_LABEL_FOR_LENGTH` (`-NONE-`), and the `len<=CUTOFF_LEN` summary uses that gold length.
//! - Constituent labels are cut at the first `-` or `=`; constituents labelled with a deleted label
//!   (`TOP`) or left without words are ignored; POS tags are compared exactly as written;
//!   `EQ_LABEL` pairs (`ADVP PRT`) are equal. Matching is one-to-one, greedy in gold order.
//! - Crossing brackets are counted per test bracket.
//! - A sentence is an error (status 1) on a length or word mismatch or a bracketing problem in
//!   either line, and skipped (status 2) when the test line has no words. Errors and skips count in
//!   "Number of sentence" and nowhere else.
//!
//! **Where we depart from EVALB: we never abort.** EVALB exits (status 1, no summary) once it has
//! written more than `MAX_ERROR` + 1 error messages (the 12th with COLLINS.prm), and it loops on
//! "Reading sentence" errors until that happens when a line has a word outside a preterminal
//! (`(JJS most (JJ practical) …`). We go on: such a sentence is an error sentence like any other, the
//! stray word is skipped, and [`Report::evalb_abort_line`] says where EVALB would have stopped. Also
//! beyond EVALB: lines past its fixed limits (a 5,000-byte line buffer, 200 words, 200 brackets,
//! 100-byte words, 30-byte labels) are scored whole where EVALB splits or overflows, and listed in
//! [`Report::evalb_limit_lines`] for a note; a `)` with no open bracket closes nothing (EVALB
//! reads before its stack); a line with one is an error sentence (skipped if the test line has no
//! words).

use crate::data::trees::Tree;
use crate::error::{Error, Result};
use std::io::Write;

/// The settings of an EVALB parameter file (`.prm`) that change scores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// `MAX_ERROR`: EVALB aborts at the error message after this many (we only report where).
    pub max_error: usize,
    /// `CUTOFF_LEN`: the second summary covers sentences whose gold `Len.` is at most this.
    pub cutoff_len: usize,
    /// `LABELED`: brackets must agree in label as well as span.
    pub labeled: bool,
    /// `DELETE_LABEL`: preterminals with these tags are dropped with their words; constituents
    /// with these labels (after cutting at `-`/`=`) are ignored.
    pub delete_labels: Vec<String>,
    /// `DELETE_LABEL_FOR_LENGTH`: terminals with these tags do not count in `Len.`.
    pub delete_labels_for_length: Vec<String>,
    /// `EQ_LABEL`: pairs of labels (and tags) that compare equal.
    pub eq_labels: Vec<(String, String)>,
    /// `EQ_WORD`: pairs of words that compare equal.
    pub eq_words: Vec<(String, String)>,
}

impl Params {
    /// EVALB's standard `COLLINS.prm`.
    pub fn collins() -> Params {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Params {
            max_error: 10,
            cutoff_len: 40,
            labeled: true,
            delete_labels: strings(&["TOP", "-NONE-", ",", ":", "``", "''", "."]),
            delete_labels_for_length: strings(&["-NONE-"]),
            eq_labels: vec![("ADVP".to_string(), "PRT".to_string())],
            eq_words: Vec::new(),
        }
    }

    fn label_eq(&self, a: &str, b: &str) -> bool {
        a == b || self.eq_labels.iter().any(|(x, y)| (a == x && b == y) || (a == y && b == x))
    }

    fn word_eq(&self, a: &str, b: &str) -> bool {
        a == b || self.eq_words.iter().any(|(x, y)| (a == x && b == y) || (a == y && b == x))
    }

    fn is_deleted(&self, tag: &str) -> bool {
        self.delete_labels.iter().any(|l| l == tag)
    }
}

/// EVALB's per-sentence status column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// 0: scored and counted in the totals.
    Ok,
    /// 1: an error (length or word mismatch, bad bracketing); left out of the totals.
    Error,
    /// 2: skipped (the test line has no words); left out of the totals.
    Skip,
}

impl Status {
    /// The number EVALB prints (0, 1, 2).
    pub fn code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Error => 1,
            Status::Skip => 2,
        }
    }
}

/// One line of EVALB's per-sentence table.
#[derive(Clone, Debug, PartialEq)]
pub struct Sentence {
    /// The 1-based line number (`ID`).
    pub id: usize,
    /// `Len.`: gold terminals other than `DELETE_LABEL_FOR_LENGTH` ones (punctuation counts).
    pub length: usize,
    /// `Stat.`.
    pub status: Status,
    /// `Recal`: 100 · matched / gold brackets (0 with no gold bracket).
    pub recall: f64,
    /// `Prec.`: 100 · matched / test brackets (0 with no test bracket).
    pub precision: f64,
    /// Matched brackets.
    pub matched: usize,
    /// Gold brackets (after deletions).
    pub gold_brackets: usize,
    /// Test brackets (after deletions).
    pub test_brackets: usize,
    /// Test brackets that cross a gold bracket.
    pub crossing: usize,
    /// `Words`: gold terminals left after deleting `DELETE_LABEL` tags.
    pub words: usize,
    /// Terminals whose test tag equals the gold tag.
    pub correct_tags: usize,
    /// 100 · correct tags / words (0 with no word).
    pub tag_accuracy: f64,
    /// EVALB's error messages for this line, in its wording (`Length unmatch (24|25)`), without the
    /// `ID : ` prefix it writes to stderr.
    pub errors: Vec<String>,
}

/// One block of EVALB's summary (`-- All --` or `-- len<=40 --`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Summary {
    /// Number of sentence (errors and skips included).
    pub sentences: usize,
    /// Number of Error sentence.
    pub error_sentences: usize,
    /// Number of Skip sentence.
    pub skip_sentences: usize,
    /// Number of Valid sentence: the others, which every figure below covers.
    pub valid_sentences: usize,
    /// Matched brackets.
    pub matched: usize,
    /// Gold brackets.
    pub gold_brackets: usize,
    /// Test brackets.
    pub test_brackets: usize,
    /// Crossing brackets.
    pub crossing: usize,
    /// Words.
    pub words: usize,
    /// Correct tags.
    pub correct_tags: usize,
    /// Sentences whose brackets all match (gold = test = matched).
    pub complete_sentences: usize,
    /// Sentences with no crossing bracket.
    pub no_crossing_sentences: usize,
    /// Sentences with at most two crossing brackets.
    pub two_or_less_crossing_sentences: usize,
    /// Bracketing Recall (0 with no gold bracket).
    pub recall: f64,
    /// Bracketing Precision (0 with no test bracket).
    pub precision: f64,
    /// Bracketing FMeasure, 2PR/(P+R): NaN when both are 0, where EVALB prints `-nan`.
    pub fmeasure: f64,
    /// Complete match, % of valid sentences.
    pub complete_match: f64,
    /// Average crossing per valid sentence.
    pub average_crossing: f64,
    /// No crossing, % of valid sentences.
    pub no_crossing: f64,
    /// 2 or less crossing, % of valid sentences.
    pub two_or_less_crossing: f64,
    /// Tagging accuracy, % of words.
    pub tagging_accuracy: f64,
}

impl Summary {
    fn add(&mut self, s: &Sentence) {
        self.sentences += 1;
        match s.status {
            Status::Error => self.error_sentences += 1,
            Status::Skip => self.skip_sentences += 1,
            Status::Ok => {
                self.matched += s.matched;
                self.gold_brackets += s.gold_brackets;
                self.test_brackets += s.test_brackets;
                self.complete_sentences +=
                    usize::from(s.gold_brackets == s.test_brackets && s.test_brackets == s.matched);
                self.words += s.words;
                self.crossing += s.crossing;
                self.no_crossing_sentences += usize::from(s.crossing == 0);
                self.two_or_less_crossing_sentences += usize::from(s.crossing <= 2);
                self.correct_tags += s.correct_tags;
            }
        }
    }

    /// Computes the percentages from the counts, with EVALB's operations in EVALB's order.
    fn finish(&mut self) {
        let pct = |num: usize, den: usize| if den > 0 { 100.0 * num as f64 / den as f64 } else { 0.0 };
        let n = self.sentences - self.error_sentences - self.skip_sentences;
        self.valid_sentences = n;
        self.recall = pct(self.matched, self.gold_brackets);
        self.precision = pct(self.matched, self.test_brackets);
        self.fmeasure = 2.0 * self.precision * self.recall / (self.precision + self.recall);
        self.complete_match = pct(self.complete_sentences, n);
        self.average_crossing = if n > 0 { self.crossing as f64 / n as f64 } else { 0.0 };
        self.no_crossing = pct(self.no_crossing_sentences, n);
        self.two_or_less_crossing = pct(self.two_or_less_crossing_sentences, n);
        self.tagging_accuracy = pct(self.correct_tags, self.words);
    }
}

/// Everything EVALB prints for a pair of files.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// One entry per line pair, in order.
    pub sentences: Vec<Sentence>,
    /// The `-- All --` summary.
    pub all: Summary,
    /// The `-- len<=CUTOFF_LEN --` summary.
    pub short: Summary,
    /// `CUTOFF_LEN`, for the summary heading.
    pub cutoff_len: usize,
    /// The line at which EVALB itself would have exited without a summary (more than `MAX_ERROR`
    /// errors, or a line it loops on); `None` when it would have run to the end.
    pub evalb_abort_line: Option<usize>,
    /// The lines (1-based) past one of EVALB's fixed limits (a 5,000-byte line buffer, 200 words,
    /// 200 brackets, 100-byte words, 30-byte labels), with the first limit each exceeds: EVALB
    /// itself would have split or overflowed there, where this scorer scores the line whole.
    pub evalb_limit_lines: Vec<(usize, String)>,
}

/// `%6.2f` as C's printf writes it (Rust rounds exact ties to even too; NaN is `-nan`, as glibc
/// prints x86's default NaN).
fn f62(x: f64) -> String {
    if x.is_nan() {
        format!("{:>6}", "-nan")
    } else {
        format!("{x:6.2}")
    }
}

impl Report {
    /// A note for the user when some lines are past EVALB's fixed limits (see
    /// [`Report::evalb_limit_lines`]): how many, the first and why, and that the scores here count
    /// them whole where EVALB itself would have failed on them.
    pub fn evalb_limit_note(&self) -> Option<String> {
        let (first, reason) = self.evalb_limit_lines.first()?;
        let n = self.evalb_limit_lines.len();
        Some(format!(
            "note: EVALB itself would have failed on {n} line{} past its fixed limits (first: line {first}, {reason}); \
             this scorer scores {} whole",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "them" }
        ))
    }

    /// The error messages as EVALB writes them to stderr, `ID : message`, in order.
    pub fn error_lines(&self) -> Vec<String> {
        self.sentences.iter().flat_map(|s| s.errors.iter().map(move |e| format!("{} : {e}", s.id))).collect()
    }

    /// Writes EVALB's standard output: the per-sentence table, the totals line and the summary;
    /// with `summary_only`, the summary alone (from `=== Summary ===`).
    pub fn write_evalb(&self, out: &mut impl Write, summary_only: bool) -> std::io::Result<()> {
        if !summary_only {
            writeln!(out, "  Sent.                        Matched  Bracket   Cross        Correct Tag")?;
            writeln!(out, " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy")?;
            writeln!(out, "{}", "=".repeat(76))?;
            for s in &self.sentences {
                writeln!(
                    out,
                    "{:4}  {:3}    {}  {} {}   {:3}    {:3}  {:3}    {:3}   {:4}  {:4}   {}",
                    s.id,
                    s.length,
                    s.status.code(),
                    f62(s.recall),
                    f62(s.precision),
                    s.matched,
                    s.gold_brackets,
                    s.test_brackets,
                    s.crossing,
                    s.words,
                    s.correct_tags,
                    f62(s.tag_accuracy)
                )?;
            }
            writeln!(out, "{}", "=".repeat(76))?;
            let a = &self.all;
            if a.gold_brackets > 0 && a.test_brackets > 0 {
                write!(
                    out,
                    "                {} {} {:6} {:5} {:5}  {:5}",
                    f62(a.recall),
                    f62(a.precision),
                    a.matched,
                    a.gold_brackets,
                    a.test_brackets,
                    a.crossing
                )?;
            }
            writeln!(out, "  {:5} {:5}   {}", a.words, a.correct_tags, f62(a.tagging_accuracy))?;
        }
        writeln!(out, "=== Summary ===")?;
        write_summary(out, "All", &self.all)?;
        write_summary(out, &format!("len<={}", self.cutoff_len), &self.short)
    }
}

fn write_summary(out: &mut impl Write, title: &str, s: &Summary) -> std::io::Result<()> {
    writeln!(out, "\n-- {title} --")?;
    writeln!(out, "Number of sentence        = {:6}", s.sentences)?;
    writeln!(out, "Number of Error sentence  = {:6}", s.error_sentences)?;
    writeln!(out, "Number of Skip  sentence  = {:6}", s.skip_sentences)?;
    writeln!(out, "Number of Valid sentence  = {:6}", s.valid_sentences)?;
    writeln!(out, "Bracketing Recall         = {}", f62(s.recall))?;
    writeln!(out, "Bracketing Precision      = {}", f62(s.precision))?;
    writeln!(out, "Bracketing FMeasure       = {}", f62(s.fmeasure))?;
    writeln!(out, "Complete match            = {}", f62(s.complete_match))?;
    writeln!(out, "Average crossing          = {}", f62(s.average_crossing))?;
    writeln!(out, "No crossing               = {}", f62(s.no_crossing))?;
    writeln!(out, "2 or less crossing        = {}", f62(s.two_or_less_crossing))?;
    writeln!(out, "Tagging accuracy          = {}", f62(s.tagging_accuracy))
}

/// A terminal left after deletions: its word and tag.
struct Terminal<'a> {
    word: &'a str,
    tag: &'a str,
}

/// A constituent: `start..end` in terminals; `end` is -1 while (or if never) closed, as in EVALB.
struct Bracket {
    start: i64,
    end: i64,
    label: String,
    /// Ignored (no words, or a deleted label).
    deleted: bool,
}

/// One line as EVALB reads it.
struct Line<'a> {
    terminals: Vec<Terminal<'a>>,
    brackets: Vec<Bracket>,
    /// `Len.` (EVALB's `r_wn1`; used for the gold line only).
    length: usize,
    errors: Vec<String>,
    /// EVALB would loop forever on this line ("Reading sentence"), so abort the run.
    loops: bool,
}

/// C's `isspace` in the C locale.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// EVALB's `is_terminator`, with the end of the line as one too.
fn is_terminator(b: Option<&u8>) -> bool {
    b.is_none_or(|&b| is_space(b) || b == b'(' || b == b')')
}

/// EVALB's `read_line`: terminals (deleted tags dropped) and brackets over terminal positions.
fn read_line<'a>(line: &'a str, params: &Params) -> Line<'a> {
    let b = line.as_bytes();
    let mut out = Line { terminals: Vec::new(), brackets: Vec::new(), length: 0, errors: Vec::new(), loops: false };
    let mut stack: Vec<usize> = Vec::new();
    // EVALB's stack pointer, which a `)` with nothing open takes below zero.
    let mut depth: i64 = 0;
    let mut underflow = false;
    let mut p = 0;
    while p < b.len() {
        let c = b[p];
        if is_space(c) {
            p += 1;
        } else if c == b'(' {
            p += 1;
            let label_start = p;
            while !is_terminator(b.get(p)) {
                p += 1;
            }
            let label = &line[label_start..p];
            if b.get(p).is_some_and(|&c| is_space(c)) {
                let mut q = p + 1;
                while b.get(q).is_some_and(|&c| is_space(c)) {
                    q += 1;
                }
                let word_start = q;
                while !is_terminator(b.get(q)) {
                    q += 1;
                }
                let word = &line[word_start..q];
                if b.get(q) == Some(&b')') {
                    if !params.delete_labels_for_length.iter().any(|l| l == label) {
                        out.length += 1;
                    }
                    if !params.is_deleted(label) {
                        out.terminals.push(Terminal { word, tag: label });
                    }
                    p = q + 1;
                    continue;
                } else if b.get(q) != Some(&b'(') {
                    // EVALB then takes the label as a constituent's and meets the word next.
                    out.errors.push("More than two elements in a bracket".to_string());
                }
            }
            let start = out.terminals.len() as i64;
            out.brackets.push(Bracket { start, end: -1, label: label.to_string(), deleted: false });
            if depth >= 0 {
                stack.push(out.brackets.len() - 1);
            }
            depth += 1;
        } else if c == b')' {
            if depth > 0 {
                let top = stack.pop().expect("depth > 0 means a bracket is open");
                out.brackets[top].end = out.terminals.len() as i64;
            } else {
                // EVALB reads the word before its stack here; it complains only from the second.
                if depth < 0 {
                    out.errors.push("Bracketing unbalance (too many close bracket)".to_string());
                }
                underflow = true;
            }
            depth -= 1;
            p += 1;
        } else {
            // EVALB does not move past the word and repeats this error until it aborts; we skip it.
            out.errors.push("Reading sentence".to_string());
            out.loops = true;
            while !is_terminator(b.get(p)) {
                p += 1;
            }
        }
    }
    if depth != 0 {
        out.errors.push("Bracketing is unbalanced (too many open bracket)".to_string());
    } else if underflow && out.errors.is_empty() {
        out.errors.push("Bracketing unbalance (too many close bracket)".to_string());
    }
    out
}

/// EVALB's `massage_data` for one side: ignore empty and deleted constituents, cut labels.
fn massage(brackets: &mut [Bracket], params: &Params) -> usize {
    for br in brackets.iter_mut() {
        if br.start == br.end {
            br.deleted = true;
            continue;
        }
        if let Some(cut) = br.label.find(['-', '=']) {
            br.label.truncate(cut);
        }
        br.deleted = params.delete_labels.iter().any(|d| params.label_eq(&br.label, d));
    }
    brackets.iter().filter(|b| !b.deleted).count()
}

/// The number of test brackets matched one-to-one with gold ones, greedily in gold order, each gold
/// bracket taking the first unmatched test bracket of its span and an equal label (EVALB's rule),
/// in time linear in the brackets: the test brackets are queued by (span, label), and a gold bracket
/// takes the earliest front of the queues of the labels equal to its own. Within a queue any gold
/// bracket that can take one element can take them all, so the queues are consumed in order.
fn match_brackets(gold: &[Bracket], test: &[Bracket], params: &Params) -> usize {
    use std::collections::HashMap;
    // (start, end, label: "" when unlabelled) -> test bracket indices in order, and a cursor.
    let mut queues: HashMap<(i64, i64, &str), (Vec<usize>, usize)> = HashMap::new();
    for (i, tb) in test.iter().enumerate().filter(|(_, b)| !b.deleted) {
        let label = if params.labeled { tb.label.as_str() } else { "" };
        queues.entry((tb.start, tb.end, label)).or_default().0.push(i);
    }
    let mut matched = 0;
    for gb in gold.iter().filter(|b| !b.deleted) {
        let mut labels = vec![if params.labeled { gb.label.as_str() } else { "" }];
        if params.labeled {
            for (x, y) in &params.eq_labels {
                for (a, b) in [(x, y), (y, x)] {
                    if gb.label == *a && !labels.contains(&b.as_str()) {
                        labels.push(b.as_str());
                    }
                }
            }
        }
        let best = labels
            .iter()
            .filter_map(|&l| {
                let (q, cursor) = queues.get(&(gb.start, gb.end, l))?;
                q.get(*cursor).map(|&i| (i, l))
            })
            .min();
        if let Some((_, l)) = best {
            queues.get_mut(&(gb.start, gb.end, l)).expect("the queue was found").1 += 1;
            matched += 1;
        }
    }
    matched
}

/// The number of (not deleted) test brackets that cross some gold bracket (one starts strictly
/// inside the other and ends strictly outside it), in O((gold + test) · log words) with two sweeps
/// over a Fenwick tree of positions: for test brackets by start, the gold ones that start before
/// them, counted by end; for test brackets by end, the gold ones that end after them, counted by
/// start. Positions run from -1 (a bracket never closed, which crosses nothing) to `words`.
fn crossing_brackets(gold: &[Bracket], test: &[Bracket], words: usize) -> usize {
    struct Fenwick(Vec<u32>);
    impl Fenwick {
        fn add(&mut self, pos: i64) {
            let mut i = (pos + 2) as usize; // -1 → 1: the tree is 1-based
            while i < self.0.len() {
                self.0[i] += 1;
                i += i & i.wrapping_neg();
            }
        }
        /// How many positions were added at or below `pos`.
        fn upto(&self, pos: i64) -> u32 {
            let mut i = (pos + 2).clamp(0, self.0.len() as i64 - 1) as usize;
            let mut sum = 0;
            while i > 0 {
                sum += self.0[i];
                i -= i & i.wrapping_neg();
            }
            sum
        }
        /// How many lie strictly between `lo` and `hi`.
        fn between(&self, lo: i64, hi: i64) -> u32 {
            if hi - lo < 2 {
                0
            } else {
                self.upto(hi - 1) - self.upto(lo)
            }
        }
    }
    let max = words as i64;
    let valid = |b: &&Bracket| !b.deleted && b.start >= -1 && b.start <= max && b.end >= -1 && b.end <= max;
    let g: Vec<&Bracket> = gold.iter().filter(valid).collect();
    let t: Vec<(usize, &Bracket)> = test.iter().filter(valid).enumerate().collect();
    let mut crosses = vec![false; t.len()];
    let size = words + 3;
    // A gold bracket that starts before the test one and ends strictly inside it.
    let mut by_start = g.clone();
    by_start.sort_by_key(|b| b.start);
    let mut order = t.clone();
    order.sort_by_key(|(_, b)| b.start);
    let mut tree = Fenwick(vec![0; size]);
    let mut next = 0;
    for &(i, tb) in &order {
        while next < by_start.len() && by_start[next].start < tb.start {
            tree.add(by_start[next].end);
            next += 1;
        }
        if tree.between(tb.start, tb.end) > 0 {
            crosses[i] = true;
        }
    }
    // A gold bracket that ends after the test one and starts strictly inside it.
    let mut by_end = g;
    by_end.sort_by_key(|b| std::cmp::Reverse(b.end));
    order.sort_by_key(|(_, b)| std::cmp::Reverse(b.end));
    let mut tree = Fenwick(vec![0; size]);
    let mut next = 0;
    for &(i, tb) in &order {
        while next < by_end.len() && by_end[next].end > tb.end {
            tree.add(by_end[next].start);
            next += 1;
        }
        if tree.between(tb.start, tb.end) > 0 {
            crosses[i] = true;
        }
    }
    crosses.iter().filter(|&&c| c).count()
}

/// The first of EVALB's fixed limits that `line` (read as `parsed`) exceeds, said as a reason:
/// EVALB reads a line into 5,000 bytes (so one of 4,999 bytes or more is split in two), keeps at
/// most 200 words and 200 brackets, words under 100 bytes and labels under 30.
fn evalb_limit(line: &str, parsed: &Line) -> Option<String> {
    let line = line.trim_end_matches(['\n', '\r']);
    if line.len() >= 4999 {
        return Some(format!("{} bytes on the line (EVALB reads 4,998)", line.len()));
    }
    if parsed.terminals.len() > 200 {
        return Some(format!("{} words (EVALB keeps 200)", parsed.terminals.len()));
    }
    if parsed.brackets.len() > 200 {
        return Some(format!("{} brackets (EVALB keeps 200)", parsed.brackets.len()));
    }
    if let Some(w) = parsed.terminals.iter().find(|t| t.word.len() >= 100) {
        return Some(format!("a word of {} bytes (EVALB keeps 99)", w.word.len()));
    }
    let mut labels = parsed.terminals.iter().map(|t| t.tag).chain(parsed.brackets.iter().map(|b| b.label.as_str()));
    if let Some(l) = labels.find(|l| l.len() >= 30) {
        return Some(format!("a label of {} bytes (EVALB keeps 29)", l.len()));
    }
    None
}

/// Scores one pair of lines (EVALB's `calc_result`). `id` is the 1-based line number.
fn score_sentence(id: usize, gold: &str, test: &str, params: &Params) -> (Sentence, bool, Option<String>) {
    let mut g = read_line(gold, params);
    let mut t = read_line(test, params);
    let loops = g.loops || t.loops;
    let limit = evalb_limit(gold, &g)
        .map(|r| format!("gold: {r}"))
        .or_else(|| evalb_limit(test, &t).map(|r| format!("test: {r}")));
    let mut errors = std::mem::take(&mut g.errors);
    errors.append(&mut t.errors);
    let mut s = Sentence {
        id,
        length: g.length,
        status: if errors.is_empty() { Status::Ok } else { Status::Error },
        recall: 0.0,
        precision: 0.0,
        matched: 0,
        gold_brackets: 0,
        test_brackets: 0,
        crossing: 0,
        words: 0,
        correct_tags: 0,
        tag_accuracy: 0.0,
        errors,
    };
    if t.terminals.is_empty() {
        s.status = Status::Skip;
        return (s, loops, limit);
    }
    let (wn1, wn2) = (g.terminals.len(), t.terminals.len());
    if wn1 != wn2 {
        s.errors.push(format!("Length unmatch ({wn1}|{wn2})"));
        s.status = Status::Error;
        return (s, loops, limit);
    }
    if let Some((a, b)) = g.terminals.iter().zip(&t.terminals).find(|(a, b)| !params.word_eq(a.word, b.word)) {
        s.errors.push(format!("Words unmatch ({}|{})", a.word, b.word));
        s.status = Status::Error;
        return (s, loops, limit);
    }
    let gold_n = massage(&mut g.brackets, params);
    let test_n = massage(&mut t.brackets, params);
    let matched = match_brackets(&g.brackets, &t.brackets, params);
    let crossing = crossing_brackets(&g.brackets, &t.brackets, g.terminals.len());
    let correct_tags = g.terminals.iter().zip(&t.terminals).filter(|(a, b)| params.label_eq(a.tag, b.tag)).count();
    let pct = |num: usize, den: usize| if den == 0 { 0.0 } else { 100.0 * num as f64 / den as f64 };
    s.recall = pct(matched, gold_n);
    s.precision = pct(matched, test_n);
    s.matched = matched;
    s.gold_brackets = gold_n;
    s.test_brackets = test_n;
    s.crossing = crossing;
    s.words = wn1;
    s.correct_tags = correct_tags;
    s.tag_accuracy = pct(correct_tags, wn1);
    (s, loops, limit)
}

/// Scores test trees against gold trees, one tree a line in EVALB's bracketed notation, as EVALB
/// does with `params` (see the module docs for where we go on where EVALB stops). Line `i` of
/// `test` is scored against line `i` of `gold`; counts that differ are an [`Error::Input`] (nothing
/// is scored). Never panics, whatever the lines hold.
pub fn score(gold: &[String], test: &[String], params: &Params) -> Result<Report> {
    if gold.len() != test.len() {
        return Err(Error::Input(format!(
            "{} gold trees and {} test trees: they must be line-aligned, one test tree per gold tree",
            gold.len(),
            test.len()
        )));
    }
    let mut report = Report {
        sentences: Vec::with_capacity(gold.len().min(test.len())),
        all: Summary::default(),
        short: Summary::default(),
        cutoff_len: params.cutoff_len,
        evalb_abort_line: None,
        evalb_limit_lines: Vec::new(),
    };
    let mut messages = 0;
    for (i, (g, t)) in gold.iter().zip(test).enumerate() {
        let (s, loops, limit) = score_sentence(i + 1, g, t, params);
        if let Some(reason) = limit {
            report.evalb_limit_lines.push((s.id, reason));
        }
        if report.evalb_abort_line.is_none() {
            // EVALB exits at the message written after more than MAX_ERROR before it.
            if loops || messages + s.errors.len() > params.max_error + 1 {
                report.evalb_abort_line = Some(s.id);
            }
            messages += s.errors.len();
        }
        report.all.add(&s);
        if s.length <= params.cutoff_len {
            report.short.add(&s);
        }
        report.sentences.push(s);
    }
    report.all.finish();
    report.short.finish();
    Ok(report)
}

/// Scores trees with [`Params::collins`] through their bracketed form ([`Tree::to_bracketed`]);
/// `report.all.fmeasure` is the F1 parsers report. Counts that differ are an [`Error::Input`].
pub fn score_trees(gold: &[Tree], test: &[Tree]) -> Result<Report> {
    let lines = |trees: &[Tree]| trees.iter().map(Tree::to_bracketed).collect::<Vec<_>>();
    score(&lines(gold), &lines(test), &Params::collins())
}
