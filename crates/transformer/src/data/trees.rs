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
//! Linearisation ([`Tree::linearise`]): an opening token `(X` per constituent, each leaf as its POS
//! tag followed by its word, and a labelled closing token `)X`; `TOP` is implicit:
//! `(S (NP NNP Pierre NNP Vinken )NP (VP VBD joined )VP . . )S`. This text form, words included,
//! is what files and the library pass around. What a model writes is one of two [`TreeFormat`]s:
//! the same tokens (`tags+words`), or without the words (`tags`, tensor2tensor's `wsj_parsing`
//! target, which produced the paper's Table 4): [`with_words`] puts a sentence's words back after
//! the tags. Vinyals et al. replaced every leaf by `XX`; the tags give EVALB the tags it deletes
//! punctuation by. [`delinearise`] turns any token sequence, however malformed, back into a tree
//! over exactly the given words.

use crate::error::{Error, Result};
use std::path::Path;

/// What a parsing model writes for a tree (`data.tree_format`; docs/parsing.md, "The target
/// format"). Both are linearised as [`Tree::linearise`]; they differ in the leaves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TreeFormat {
    /// Each leaf as its tag followed by its word's BPE pieces, copied from the sentence (a named
    /// departure, `words-in-target`, docs/deviations.md).
    #[default]
    #[serde(rename = "tags+words")]
    TagsWords,
    /// Each leaf as its tag alone (tensor2tensor's `wsj_parsing`, the paper's): the words come
    /// from the sentence ([`with_words`]).
    #[serde(rename = "tags")]
    Tags,
}

impl TreeFormat {
    /// Every format.
    pub const ALL: [TreeFormat; 2] = [TreeFormat::TagsWords, TreeFormat::Tags];

    /// The name in configurations and checkpoint metadata.
    pub fn name(self) -> &'static str {
        match self {
            TreeFormat::TagsWords => "tags+words",
            TreeFormat::Tags => "tags",
        }
    }

    /// The format named `name`, or `None`.
    pub fn from_name(name: &str) -> Option<TreeFormat> {
        TreeFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether the words are written after their tags.
    pub fn words_in_target(self) -> bool {
        self == TreeFormat::TagsWords
    }
}

/// The linearised tree of a `tags`-format output (brackets and tags, no words) with `words` put
/// back: each tag followed by the next word, as [`Tree::linearise`] writes a tree. Tags past the
/// last word are kept without a word (so [`is_well_formed`] rejects the output and [`delinearise`]
/// drops them); words with no tag are left for [`delinearise`] to attach.
pub fn with_words(tokens: &[String], words: &[&str]) -> Vec<String> {
    let mut out = Vec::with_capacity(tokens.len() + words.len());
    let mut next = 0;
    for t in tokens {
        out.push(t.clone());
        let bracket = (t.starts_with('(') || t.starts_with(')')) && t.len() > 1;
        if !bracket {
            if let Some(w) = words.get(next) {
                out.push(w.to_string());
            }
            next += 1;
        }
    }
    out
}

/// A constituency tree: a constituent with children, or a preterminal (POS tag) over one word.
///
/// Nothing over trees recurses (traversals, `Clone`, `PartialEq`, `Drop`): a tree of any depth,
/// 300,000 nested brackets say, is read, written, compared and freed on an explicit stack.
pub struct Tree {
    /// The constituent label or POS tag (empty for the treebank's unlabelled outer bracket).
    pub label: String,
    /// The word, for a preterminal.
    pub word: Option<String>,
    /// The children, for a constituent.
    pub children: Vec<Tree>,
}

/// One step of a depth-first walk over a tree: a preterminal or the opening of a constituent
/// (`Enter`), or the closing of a constituent after all its children (`Leave`).
enum Step<'a> {
    Enter(&'a Tree),
    Leave(&'a Tree),
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

    /// Calls `f` on every step of a left-to-right depth-first walk, without recursion.
    fn walk<'a>(&'a self, mut f: impl FnMut(Step<'a>)) {
        let mut stack = vec![Step::Enter(self)];
        while let Some(step) = stack.pop() {
            if let Step::Enter(t) = step {
                if t.word.is_none() {
                    stack.push(Step::Leave(t));
                    stack.extend(t.children.iter().rev().map(Step::Enter));
                }
            }
            f(step);
        }
    }

    /// The words, left to right.
    pub fn words(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.walk(|step| {
            if let Step::Enter(Tree { word: Some(w), .. }) = step {
                out.push(w.as_str());
            }
        });
        out
    }

    /// The preterminals (a tag over a word each), left to right.
    pub fn leaves(&self) -> Vec<&Tree> {
        let mut out = Vec::new();
        self.walk(|step| {
            if let Step::Enter(t) = step {
                if t.word.is_some() {
                    out.push(t);
                }
            }
        });
        out
    }

    /// The tree in the treebank's bracketed notation on one line, `(TOP (S (NP (NNP Pierre)) …))`.
    pub fn to_bracketed(&self) -> String {
        let mut s = String::new();
        self.walk(|step| match step {
            Step::Enter(t) => {
                if !s.is_empty() {
                    s.push(' ');
                }
                s.push('(');
                s.push_str(&t.label);
                if let Some(w) = &t.word {
                    s.push(' ');
                    s.push_str(w);
                    s.push(')');
                }
            }
            Step::Leave(_) => s.push(')'),
        });
        s
    }

    /// The preprocessed tree (see the module docs), or `None` when nothing but empty elements is left.
    pub fn preprocess(&self) -> Option<Tree> {
        let t = self.strip()?;
        Some(if t.label == "TOP" { t } else { Tree::node("TOP", vec![t]) })
    }

    /// Steps 1–2 and the outer bracket of step 3, built bottom-up on an explicit stack.
    fn strip(&self) -> Option<Tree> {
        let leaf = |t: &Tree, w: &str| (t.label != "-NONE-").then(|| Tree::leaf(&strip_label(&t.label), w));
        if let Some(word) = &self.word {
            return leaf(self, word);
        }
        // (constituent, its next child to visit, its children kept so far)
        let mut stack: Vec<(&Tree, usize, Vec<Tree>)> = vec![(self, 0, Vec::new())];
        loop {
            let (node, next, kept) = stack.last_mut().expect("the root frame is popped last");
            let node = *node; // the &Tree itself, not a borrow of the stack
            if let Some(child) = node.children.get(*next) {
                *next += 1;
                match &child.word {
                    Some(w) => kept.extend(leaf(child, w)),
                    None => stack.push((child, 0, Vec::new())),
                }
                continue;
            }
            let (node, _, kept) = stack.pop().expect("a frame is on the stack");
            let built = (!kept.is_empty()).then(|| {
                let label = if node.label.is_empty() { "TOP".to_string() } else { strip_label(&node.label) };
                Tree::node(&label, kept)
            });
            match stack.last_mut() {
                Some((_, _, parent)) => parent.extend(built),
                None => return built,
            }
        }
    }

    /// Tokens of the linearised tree under `TOP` (see the module docs).
    pub fn linearise(&self) -> Vec<String> {
        let mut out = Vec::new();
        let top = if self.label == "TOP" { &self.children[..] } else { std::slice::from_ref(self) };
        for c in top {
            c.walk(|step| match step {
                Step::Enter(t) => match &t.word {
                    Some(w) => {
                        out.push(t.label.clone());
                        out.push(w.clone());
                    }
                    None => out.push(format!("({}", t.label)),
                },
                Step::Leave(t) => out.push(format!("){}", t.label)),
            });
        }
        out
    }
}

impl Clone for Tree {
    /// A deep copy, built bottom-up on an explicit stack.
    fn clone(&self) -> Tree {
        // (original, its next child to copy, its children copied so far)
        let mut stack: Vec<(&Tree, usize, Vec<Tree>)> = vec![(self, 0, Vec::with_capacity(self.children.len()))];
        loop {
            let (node, next, _) = stack.last_mut().expect("the root frame is popped last");
            let node = *node; // the &Tree itself, not a borrow of the stack
            if let Some(child) = node.children.get(*next) {
                *next += 1;
                stack.push((child, 0, Vec::with_capacity(child.children.len())));
                continue;
            }
            let (node, _, children) = stack.pop().expect("a frame is on the stack");
            let copy = Tree { label: node.label.clone(), word: node.word.clone(), children };
            match stack.last_mut() {
                Some((_, _, siblings)) => siblings.push(copy),
                None => return copy,
            }
        }
    }
}

impl PartialEq for Tree {
    fn eq(&self, other: &Tree) -> bool {
        let mut stack = vec![(self, other)];
        while let Some((a, b)) = stack.pop() {
            if a.label != b.label || a.word != b.word || a.children.len() != b.children.len() {
                return false;
            }
            stack.extend(a.children.iter().zip(&b.children));
        }
        true
    }
}

impl Eq for Tree {}

impl std::fmt::Debug for Tree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tree{}", self.to_bracketed())
    }
}

impl Drop for Tree {
    /// Frees the nodes from an explicit stack: the default drop recurses once per level.
    fn drop(&mut self) {
        let mut stack = std::mem::take(&mut self.children);
        while let Some(mut t) = stack.pop() {
            stack.append(&mut t.children);
        }
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
        ":" | ";" | "--" | "..." | "-" => ":",
        "``" | "`" => "``",
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
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let before = &e.as_bytes()[..valid];
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let column = valid - before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        Error::Corpus {
            path: path.to_path_buf(),
            line,
            reason: format!("invalid UTF-8 at byte {} of the line; convert the file to UTF-8", column),
        }
    })?;
    // A byte-order mark and CRLF or CR-only line ends read as the plain file would.
    parse_trees(&crate::data::corpus::normalise_line_ends(&text), &path.display().to_string())
}

/// A range of treebank file names, `FIRST..LAST` (inclusive, compared by file stem as strings):
/// `wsj_0001..wsj_0159` selects `wsj_0001.mrg` to `wsj_0159.mrg`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRange {
    /// The first stem kept.
    pub first: String,
    /// The last stem kept.
    pub last: String,
}

impl FileRange {
    /// Parses `FIRST..LAST`.
    pub fn parse(s: &str) -> Result<FileRange> {
        match s.split_once("..") {
            Some((a, b)) if !a.trim().is_empty() && !b.trim().is_empty() && a.trim() <= b.trim() => {
                Ok(FileRange { first: a.trim().to_string(), last: b.trim().to_string() })
            }
            _ => Err(Error::Config(format!(
                "file range {s:?}: expected FIRST..LAST with FIRST <= LAST, such as wsj_0001..wsj_0159"
            ))),
        }
    }

    /// Whether the file's stem lies in the range.
    pub fn contains(&self, path: &Path) -> bool {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        self.first.as_str() <= stem.as_str() && stem.as_str() <= self.last.as_str()
    }
}

/// The tree files of a treebank path: the file itself, or every `.mrg` file under a directory
/// (searched recursively, sorted by path), in `range` if given. Finding no file is an error.
pub fn treebank_files(path: &Path, range: Option<&FileRange>) -> Result<Vec<std::path::PathBuf>> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<()> {
        for e in std::fs::read_dir(dir).map_err(crate::io::io_err(dir))? {
            let p = e.map_err(crate::io::io_err(dir))?.path();
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("mrg")) {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    if path.is_dir() {
        walk(path, &mut files)?;
        files.sort();
        if let Some(r) = range {
            files.retain(|p| r.contains(p));
        }
    } else {
        std::fs::metadata(path).map_err(crate::io::io_err(path))?;
        files.push(path.to_path_buf());
    }
    if files.is_empty() {
        let within = range.map(|r| format!(" named {}..{}", r.first, r.last)).unwrap_or_default();
        return Err(Error::Input(format!("{}: no .mrg tree file{within} found", path.display())));
    }
    Ok(files)
}

/// Reads and preprocesses every tree of a treebank path (see [`treebank_files`]); trees left with no
/// words by preprocessing are skipped.
pub fn read_treebank(path: &Path, range: Option<&FileRange>) -> Result<Vec<Tree>> {
    let mut trees = Vec::new();
    for f in treebank_files(path, range)? {
        trees.extend(read_trees(&f)?.iter().filter_map(Tree::preprocess));
    }
    Ok(trees)
}

/// A (sentence, linearised tree) training pair of a preprocessed tree: the words joined by spaces,
/// and the tokens of [`Tree::linearise`] joined by spaces.
pub fn training_pair(tree: &Tree) -> (String, String) {
    // Words hold no whitespace (the reader splits on it), so the target splits back into its tokens.
    (tree.words().join(" "), tree.linearise().join(" "))
}

/// Retags as `XX` every word that is not punctuation but carries one of the punctuation tags EVALB
/// deletes (`,` `:` `` `` `` `''` `.`): a word [`punctuation_tag`] does not know, other than the
/// single quote `'` (a closing quote `''` or a possessive `POS`). In the treebank such words (those
/// with a letter or digit, and `$` `%` `&` `#` `@`) never carry those tags (one annotation slip
/// aside), and a deleted tag on one would make EVALB reject the sentence as a length mismatch.
/// Applied to a model's trees, not to gold ones. Returns how many were retagged.
pub fn retag_deleted_punctuation(tree: &mut Tree) -> usize {
    let mut retagged = 0;
    let mut stack = vec![tree];
    while let Some(t) = stack.pop() {
        match &t.word {
            Some(w) => {
                let deleted = matches!(t.label.as_str(), "," | ":" | "``" | "''" | ".");
                if deleted && punctuation_tag(w).is_none() && w != "'" {
                    t.label = "XX".into();
                    retagged += 1;
                }
            }
            None => stack.extend(t.children.iter_mut()),
        }
    }
    retagged
}

/// Whether `tokens` is a well-formed linearised tree (what [`Tree::linearise`] produces) over
/// `words`: every closing token closes the innermost open constituent with its own label, no
/// constituent is empty, everything opened is closed, and the leaves are one tag and word for each
/// of `words`, in order.
pub fn is_well_formed(tokens: &[String], words: &[&str]) -> bool {
    let mut stack: Vec<(&str, bool)> = Vec::new();
    let mut next = 0;
    let all = items(tokens);
    for (k, item) in all.iter().enumerate() {
        match *item {
            Item::Open(label) => stack.push((label, false)),
            Item::Close(label) => {
                match stack.pop() {
                    Some((open, true)) if open == label => {}
                    _ => return false,
                }
                if let Some(top) = stack.last_mut() {
                    top.1 = true;
                }
            }
            Item::Tag(_) => {
                if all.get(k + 1) != Some(&Item::Word(words.get(next).copied().unwrap_or("\0"))) {
                    return false;
                }
                next += 1;
                if let Some(top) = stack.last_mut() {
                    top.1 = true;
                }
            }
            Item::Word(_) => {}
        }
    }
    stack.is_empty() && next == words.len()
}

/// One token of a linearised tree, by its role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item<'a> {
    /// `(X`: opens a constituent labelled `X`.
    Open(&'a str),
    /// `)X`: closes one.
    Close(&'a str),
    /// A POS tag: starts a leaf.
    Tag(&'a str),
    /// The word after a tag.
    Word(&'a str),
}

/// The roles of a linearised tree's tokens: `(X` and `)X` are brackets; any other token is a tag,
/// except the one right after a tag, which is that tag's word.
pub fn items(tokens: &[String]) -> Vec<Item<'_>> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut after_tag = false;
    for t in tokens {
        let item = if let Some(label) = t.strip_prefix('(').filter(|l| !l.is_empty()) {
            Item::Open(label)
        } else if let Some(label) = t.strip_prefix(')').filter(|l| !l.is_empty()) {
            Item::Close(label)
        } else if after_tag {
            Item::Word(t)
        } else {
            Item::Tag(t)
        };
        after_tag = matches!(item, Item::Tag(_));
        out.push(item);
    }
    out
}

/// A well-formed tree under `TOP` whose leaves are exactly `words` in order, built from `tokens` (a
/// linearised tree, or anything a model produced; roles as [`items`] gives them). Each tag takes the
/// next input word, whatever word the model wrote after it. Repairs, in this order: a closing token
/// with no open constituent is ignored; a closing token closes the innermost open constituent
/// whatever its label; tags past the last word are dropped; constituents still open at the end are
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
    for item in items(tokens) {
        match item {
            Item::Open(label) => stack.push(Tree::node(label, Vec::new())),
            Item::Close(_) => {
                if stack.len() > 1 {
                    close(&mut stack);
                }
            }
            Item::Tag(tag) if next < words.len() => {
                let w = words[next];
                stack.last_mut().expect("TOP stays open").children.push(Tree::leaf(&tag_for(tag, w), w));
                next += 1;
            }
            Item::Tag(_) | Item::Word(_) => {}
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

/// Splits raw English text into Penn Treebank tokens, after the treebank's own tokenisation
/// conventions (as the Treebank tokenizer sed script does): punctuation split off words (a comma
/// or colon inside a number stays), the sentence-final period split but abbreviations' periods
/// kept, `n't` and the clitics `'s 'm 'd 'll 're 've` split, double quotes as `` `` `` and `''`,
/// brackets as `-LRB-`/`-RRB-` (`-LCB-`/`-RCB-` for braces), and `--` as its own token.
pub fn ptb_tokenize(text: &str) -> Vec<String> {
    let chunks: Vec<&str> = text.split_whitespace().collect();
    let mut out = Vec::new();
    for (i, chunk) in chunks.iter().enumerate() {
        for piece in split_dashes(chunk) {
            tokenize_chunk(piece, i + 1 == chunks.len(), &mut out);
        }
    }
    out
}

fn split_dashes(chunk: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = chunk;
    while let Some(i) = rest.find("--") {
        if i > 0 {
            parts.push(&rest[..i]);
        }
        parts.push("--");
        rest = &rest[i + 2..];
    }
    if !rest.is_empty() {
        parts.push(rest);
    }
    parts
}

fn bracket(c: char) -> Option<&'static str> {
    Some(match c {
        '(' | '[' => "-LRB-",
        ')' | ']' => "-RRB-",
        '{' => "-LCB-",
        '}' => "-RCB-",
        _ => return None,
    })
}

fn tokenize_chunk(chunk: &str, last: bool, out: &mut Vec<String>) {
    if chunk == "--" {
        out.push(chunk.to_string());
        return;
    }
    let mut s = chunk;
    // Prefixes.
    loop {
        let c = match s.chars().next() {
            Some(c) => c,
            None => return,
        };
        if s.starts_with("``") {
            out.push("``".into());
            s = &s[2..];
        } else if s.starts_with("''") {
            // A closing quote already written as the treebank writes it (Brown's text, a
            // tokenized line), not an opening single quote and a stray one.
            out.push("''".into());
            s = &s[2..];
        } else if c == '"' {
            out.push("``".into());
            s = &s[1..];
        } else if let Some(b) = bracket(c) {
            out.push(b.into());
            s = &s[1..];
        } else if matches!(c, '$' | '#') && s.len() > 1 {
            out.push(c.to_string());
            s = &s[1..];
        } else if c == '\'' && s.len() > 1 && !is_clitic(s) {
            out.push("`".into());
            s = &s[1..];
        } else {
            break;
        }
    }
    // Suffixes, innermost last.
    let mut tail: Vec<String> = Vec::new();
    while let Some(c) = s.chars().last() {
        let n = s.len();
        if s.ends_with("''") && n > 2 {
            tail.push("''".into());
            s = &s[..n - 2];
        } else if c == '"' && n > 1 {
            tail.push("''".into());
            s = &s[..n - 1];
        } else if let Some(b) = bracket(c).filter(|_| n > 1) {
            tail.push(b.into());
            s = &s[..n - 1];
        } else if s.ends_with("...") && n > 3 {
            tail.push("...".into());
            s = &s[..n - 3];
        } else if matches!(c, ',' | ';' | ':' | '?' | '!' | '%') && n > 1 {
            tail.push(c.to_string());
            s = &s[..n - 1];
        } else if c == '.' && n > 1 && last && tail.iter().all(|t| t != ".") {
            tail.push(".".into());
            s = &s[..n - 1];
        } else if c == '\'' && n > 1 && !s.ends_with("''") {
            tail.push("'".into());
            s = &s[..n - 1];
        } else {
            break;
        }
    }
    // Clitics.
    let lower = s.to_lowercase();
    let clitic = ["n't", "'s", "'m", "'d", "'ll", "'re", "'ve"]
        .iter()
        .find(|c| lower.ends_with(*c) && lower.len() > c.len())
        .map(|c| c.len());
    match clitic {
        Some(k) => {
            out.push(s[..s.len() - k].to_string());
            out.push(s[s.len() - k..].to_string());
        }
        None if !s.is_empty() => out.push(s.to_string()),
        None => {}
    }
    out.extend(tail.into_iter().rev());
}

fn is_clitic(s: &str) -> bool {
    let l = s.to_lowercase();
    ["'s", "'m", "'d", "'ll", "'re", "'ve"].contains(&l.as_str())
}
