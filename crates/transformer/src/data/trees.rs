//! §6.3 Penn Treebank trees for constituency parsing: reading bracketed `.mrg` files, the
//! preprocessing of the seq2seq parsing literature, and linearisation in the manner of Vinyals et
//! al. 2015 ("Grammar as a foreign language"), which the paper follows.
//!
//! Preprocessing, in order ([`Tree::preprocess`]):
//! 1. empty elements (`-NONE-` preterminals) are dropped, and so is every constituent they leave
//!    without children;
//! 2. function tags and indices are cut from labels at the first `-` or `=` (`NP-SBJ-1` → `NP`,
//!    `PP-LOC=2` → `PP`); labels that start with `-` (`-LRB-`, `-RRB-`, `-NONE-`) are kept whole;
//! 3. the root is `TOP`: the treebank's outer unlabelled bracket `( (S …) )` becomes `(TOP (S …))`,
//!    and a tree with a labelled root is put under a `TOP`.
//!
//! Linearisation ([`Tree::linearise`]): an opening token `(X` per constituent, the POS tag per word
//! (the words themselves are the source sentence; keeping the tags, unlike Vinyals et al.'s `XX`,
//! gives EVALB the tags it deletes punctuation by), and a labelled closing token `)X`. `TOP` is
//! implicit. [`delinearise`] turns any token sequence, however malformed, back into a tree over
//! exactly the given words.

use crate::error::{Error, Result};
use std::path::Path;

/// A constituency tree: a constituent with children, or a preterminal (POS tag) over one word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tree {
    /// The constituent label or POS tag (empty for the treebank's unlabelled outer bracket).
    pub label: String,
    /// The word, for a preterminal.
    pub word: Option<String>,
    /// The children, for a constituent.
    pub children: Vec<Tree>,
}

impl Tree {
    /// A preterminal: `tag` over `word`.
    pub fn leaf(tag: &str, word: &str) -> Tree {
        Tree { label: tag.to_string(), word: Some(word.to_string()), children: Vec::new() }
    }

    /// A constituent.
    pub fn node(label: &str, children: Vec<Tree>) -> Tree {
        Tree { label: label.to_string(), word: None, children }
    }

    /// The words, left to right.
    pub fn words(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.visit_words(&mut out);
        out
    }

    fn visit_words<'a>(&'a self, out: &mut Vec<&'a str>) {
        match &self.word {
            Some(w) => out.push(w),
            None => self.children.iter().for_each(|c| c.visit_words(out)),
        }
    }

    /// The tree in the treebank's bracketed notation on one line, `(TOP (S (NP (NNP Pierre)) …))`.
    pub fn to_bracketed(&self) -> String {
        let mut s = String::new();
        self.write(&mut s);
        s
    }

    fn write(&self, s: &mut String) {
        s.push('(');
        s.push_str(&self.label);
        match &self.word {
            Some(w) => {
                s.push(' ');
                s.push_str(w);
            }
            None => {
                for c in &self.children {
                    s.push(' ');
                    c.write(s);
                }
            }
        }
        s.push(')');
    }

    /// The preprocessed tree (see the module docs), or `None` when nothing but empty elements is left.
    pub fn preprocess(&self) -> Option<Tree> {
        let t = self.strip()?;
        Some(if t.label == "TOP" { t } else { Tree::node("TOP", vec![t]) })
    }

    /// Steps 1–2 and the outer bracket of step 3.
    fn strip(&self) -> Option<Tree> {
        if let Some(word) = &self.word {
            return (self.label != "-NONE-").then(|| Tree::leaf(&strip_label(&self.label), word));
        }
        let children: Vec<Tree> = self.children.iter().filter_map(Tree::strip).collect();
        if children.is_empty() {
            return None;
        }
        let label = if self.label.is_empty() { "TOP".to_string() } else { strip_label(&self.label) };
        Some(Tree::node(&label, children))
    }

    /// Tokens of the linearised tree under `TOP` (see the module docs).
    pub fn linearise(&self) -> Vec<String> {
        let mut out = Vec::new();
        let top = if self.label == "TOP" { &self.children[..] } else { std::slice::from_ref(self) };
        for c in top {
            c.linearise_into(&mut out);
        }
        out
    }

    fn linearise_into(&self, out: &mut Vec<String>) {
        if self.word.is_some() {
            out.push(self.label.clone());
            return;
        }
        out.push(format!("({}", self.label));
        for c in &self.children {
            c.linearise_into(out);
        }
        out.push(format!("){}", self.label));
    }
}

/// A label without its function tags and indices (`NP-SBJ-1` → `NP`, `PP-LOC=2` → `PP`); labels
/// that start with `-` (`-LRB-`, `-NONE-`) are kept whole, and so is one that starts with `=`.
pub fn strip_label(label: &str) -> String {
    // Cut at the first `-` or `=` after the first character: a label that starts with one is kept
    // whole, so no label becomes empty.
    match label.char_indices().skip(1).find(|&(_, c)| c == '-' || c == '=') {
        Some((i, _)) if !label.starts_with('-') => label[..i].to_string(),
        _ => label.to_string(),
    }
}

/// The tag a word must carry if it is unambiguously punctuation (EVALB deletes punctuation by
/// its tag, so `,` tagged `NN` would make a sentence a length mismatch), or `None` for other words.
/// Words whose tag varies in the treebank (`'` is also a possessive `POS`, `$` and `#` are not
/// deleted) are left to the model.
pub fn punctuation_tag(word: &str) -> Option<&'static str> {
    Some(match word {
        "," => ",",
        "." | "?" | "!" => ".",
        ":" | ";" | "--" | "..." => ":",
        "``" => "``",
        "''" => "''",
        "-LRB-" | "-LCB-" => "-LRB-",
        "-RRB-" | "-RCB-" => "-RRB-",
        _ => return None,
    })
}

/// Parses every tree of a bracketed file's text (several trees, each over any number of lines).
/// `origin` names the file in errors, which give the line.
pub fn parse_trees(text: &str, origin: &str) -> Result<Vec<Tree>> {
    let bad = |line: usize, reason: String| Error::Corpus { path: origin.into(), line, reason };
    let mut trees = Vec::new();
    // (label, children, line where it opened)
    let mut stack: Vec<(String, Vec<Tree>, usize)> = Vec::new();
    let mut pending_word: Option<String> = None;
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if stack.is_empty() && (line.trim_start().starts_with('%') || line.trim_start().starts_with("*x*")) {
            continue; // a comment between trees
        }
        let mut chars = line.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '(' => {
                    let rest = &line[i + 1..];
                    let end = rest.find(|c: char| c.is_whitespace() || c == '(' || c == ')').unwrap_or(rest.len());
                    let label = &rest[..end];
                    for _ in 0..label.chars().count() {
                        chars.next();
                    }
                    if let Some(w) = pending_word.take() {
                        return Err(bad(line_no, format!("word '{w}' next to a bracket")));
                    }
                    stack.push((label.to_string(), Vec::new(), line_no));
                }
                ')' => {
                    let (label, children, _) =
                        stack.pop().ok_or_else(|| bad(line_no, "a ')' closes no bracket".into()))?;
                    let tree = match pending_word.take() {
                        Some(w) if children.is_empty() => Tree::leaf(&label, &w),
                        Some(w) => return Err(bad(line_no, format!("word '{w}' beside constituents in ({label} …)"))),
                        None if children.is_empty() => {
                            return Err(bad(line_no, format!("({label}) has neither a word nor children")))
                        }
                        None => Tree::node(&label, children),
                    };
                    match stack.last_mut() {
                        Some(parent) => parent.1.push(tree),
                        None => trees.push(tree),
                    }
                }
                c if c.is_whitespace() => {}
                _ => {
                    if stack.is_empty() {
                        return Err(bad(line_no, format!("text outside a tree at '{}'", &line[i..])));
                    }
                    let rest = &line[i..];
                    let end = rest.find(|c: char| c.is_whitespace() || c == '(' || c == ')').unwrap_or(rest.len());
                    if pending_word.is_some() {
                        return Err(bad(line_no, format!("two words in one preterminal at '{}'", &rest[..end])));
                    }
                    pending_word = Some(rest[..end].to_string());
                    for _ in 1..rest[..end].chars().count() {
                        chars.next();
                    }
                }
            }
        }
    }
    if let Some((label, _, line)) = stack.last() {
        return Err(bad(*line, format!("the bracket ({label} opened here is never closed")));
    }
    Ok(trees)
}

/// Reads the trees of a bracketed file (`.mrg`), naming the file and line in errors.
pub fn read_trees(path: &Path) -> Result<Vec<Tree>> {
    let bytes = std::fs::read(path).map_err(crate::io::io_err(path))?;
    let text = String::from_utf8(bytes).map_err(|e| Error::Corpus {
        path: path.to_path_buf(),
        line: 0,
        reason: format!("not UTF-8 ({e})"),
    })?;
    parse_trees(&text, &path.display().to_string())
}

/// A well-formed tree under `TOP` whose leaves are exactly `words` in order, built from `tokens` (a
/// linearised tree, or anything a model produced). Repairs, in this order: a closing token with no
/// open constituent is ignored; a closing token closes the innermost open constituent whatever its
/// label; leaf tokens past the last word are dropped; constituents still open at the end are
/// closed; constituents left with no children are dropped; words with no leaf token are attached
/// to `TOP`, tagged `XX`; a punctuation word always gets its punctuation tag.
pub fn delinearise(tokens: &[String], words: &[&str]) -> Tree {
    let tag_for = |tag: &str, word: &str| punctuation_tag(word).unwrap_or(tag).to_string();
    let mut stack: Vec<Tree> = vec![Tree::node("TOP", Vec::new())];
    let mut next = 0;
    let close = |stack: &mut Vec<Tree>| {
        let done = stack.pop().expect("an open constituent");
        if !done.children.is_empty() {
            stack.last_mut().expect("TOP stays open").children.push(done);
        }
    };
    for t in tokens {
        if let Some(label) = t.strip_prefix('(').filter(|l| !l.is_empty()) {
            stack.push(Tree::node(label, Vec::new()));
        } else if t.starts_with(')') && t.len() > 1 {
            if stack.len() > 1 {
                close(&mut stack);
            }
        } else if next < words.len() {
            let w = words[next];
            stack.last_mut().expect("TOP stays open").children.push(Tree::leaf(&tag_for(t, w), w));
            next += 1;
        }
    }
    while stack.len() > 1 {
        close(&mut stack);
    }
    let mut top = stack.pop().expect("TOP");
    for &w in &words[next..] {
        top.children.push(Tree::leaf(&tag_for("XX", w), w));
    }
    top
}
