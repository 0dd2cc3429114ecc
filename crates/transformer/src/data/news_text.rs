//! Unlabeled English for §6.3's semi-supervised setting: the two news-domain corpora of NLTK's
//! data that the public `nltk/nltk_data` repository carries, the ABC (Australian Broadcasting
//! Commission 2006 rural and science news, raw text) and the Brown corpus (1961 American English,
//! 500 samples, tokenized and tagged), as one Penn-Treebank-tokenized sentence a line, the input
//! a parser turns into silver trees. Each archive is checked against the SHA-256 recorded here
//! before anything is written; every output is written atomically.
//!
//! ABC's lines are paragraphs of raw text: [`split_sentences`] cuts them at sentence ends and
//! [`ptb_tokenize`] splits them as the treebank is; lines without a sentence-final mark
//! (headlines) are left out. Brown's sentences are one a line, `word/tag` tokens: the tags are
//! dropped and the words joined and tokenized again, so `Atlanta's` becomes `Atlanta 's` as in the
//! treebank. A sentence is kept once, the first time it is seen.

use crate::data::download::{fetch_url_with, sha256_hex};
use crate::data::trees::ptb_tokenize;
use crate::error::{Error, Result};
use crate::events::Events;
use crate::io::{io_err, write_atomically};
use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where `transformer data news-text` writes by default.
pub const NEWS_TEXT_DIR: &str = "data/news-text";

/// One NLTK corpus package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NltkCorpus {
    /// The package name (`abc`, `brown`), also the output file's stem.
    pub name: &'static str,
    /// SHA-256 of the package's zip as NLTK publishes it.
    pub sha256: &'static str,
    /// The corpus's terms, as its README states them.
    pub terms: &'static str,
}

/// The corpora, in the order they are written.
pub const NEWS_CORPORA: [NltkCorpus; 2] = [
    NltkCorpus {
        name: "abc",
        sha256: "129bb6001beb828049a90a59b7dd3c2f0594a47012e48fc5177dfae38e658565",
        terms: "ABC: Australian Broadcasting Commission 2006, rural and science news (http://www.abc.net.au/), as \
                distributed in NLTK's data",
    },
    NltkCorpus {
        name: "brown",
        sha256: "9b275f9b3b95d7bd66ccfb7cd259f445a13bbe5d1f4107aba09fd3e8364bafa6",
        terms: "Brown Corpus: W. N. Francis and H. Kucera (1964, revised 1971 and 1979), Brown University; \
                distributed with the permission of the copyright holder, redistribution permitted",
    },
];

/// NLTK's address of a corpus package.
pub fn nltk_url(name: &str) -> String {
    format!("https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/{name}.zip")
}

const MIRROR_HINT: &str = "--from-nltk-data DIR (an nltk_data directory holding corpora/abc.zip and corpora/brown.zip)";

/// The most a member of either archive may inflate to (the largest is 2.2 MB) and the most all of
/// an archive's members may inflate to together (4.1 MB and 10.6 MB as published).
const MAX_MEMBER_BYTES: u64 = 32 << 20;
const MAX_ARCHIVE_BYTES: u64 = 128 << 20;

/// Where the archives come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NewsSource {
    /// An `nltk_data` directory: `corpora/NAME.zip`.
    NltkData(PathBuf),
    /// NLTK's URLs ([`nltk_url`]).
    Nltk,
}

/// What [`fetch_news_text`] wrote: a file and its sentence count per corpus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewsText {
    pub files: Vec<(PathBuf, usize)>,
}

/// Splits a paragraph of raw English into sentences: after `.`, `?` or `!` (and any closing quotes
/// or brackets) followed by a space and an upper-case letter, a digit or an opening quote, unless
/// the word before the period is a title or common abbreviation (`Mr.`, `Dr.`, `Inc.`, `U.S.`) or a
/// single capital (an initial). Whitespace is kept as it was inside a sentence and trimmed at its
/// ends.
pub fn split_sentences(text: &str) -> Vec<String> {
    const ABBREVIATIONS: [&str; 38] = [
        "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "gen", "sen", "rep", "gov", "lt", "col", "sgt", "capt",
        "maj", "inc", "co", "corp", "ltd", "bros", "vs", "etc", "no", "mt", "ft", "jan", "feb", "aug", "sept", "oct",
        "nov", "dec", "u.s", "e.g", "i.e", "approx",
    ];
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let (_, c) = chars[i];
        if matches!(c, '.' | '?' | '!') {
            let mut j = i + 1;
            while j < chars.len() && matches!(chars[j].1, '.' | '?' | '!' | '"' | '\'' | ')' | ']') {
                j += 1;
            }
            let space = j < chars.len() && chars[j].1.is_whitespace();
            let mut k = j;
            while k < chars.len() && chars[k].1.is_whitespace() {
                k += 1;
            }
            let next_starts = k < chars.len()
                && (chars[k].1.is_uppercase() || chars[k].1.is_ascii_digit() || matches!(chars[k].1, '"' | '\'' | '('));
            let abbreviation = c == '.' && {
                let word_start = text[..chars[i].0]
                    .char_indices()
                    .rev()
                    .find(|(_, c)| c.is_whitespace())
                    .map_or(0, |(p, c)| p + c.len_utf8());
                let word = text[word_start..chars[i].0].trim_start_matches(['"', '\'', '(']);
                let lower = word.to_lowercase();
                ABBREVIATIONS.contains(&lower.as_str())
                    || (word.chars().count() == 1 && word.chars().all(|w| w.is_uppercase()))
            };
            if space && next_starts && !abbreviation {
                let end = chars.get(j).map_or(text.len(), |x| x.0);
                let s = text[start..end].trim();
                if !s.is_empty() {
                    out.push(s.to_string());
                }
                start = chars[k].0;
                i = k;
                continue;
            }
            i = j;
            continue;
        }
        i += 1;
    }
    let s = text[start..].trim();
    if !s.is_empty() {
        out.push(s.to_string());
    }
    out
}

/// Whether a tokenized sentence ends as a sentence does: a final `.`, `?` or `!`, maybe followed
/// by closing quotes or brackets.
fn ends_a_sentence(tokens: &[String]) -> bool {
    tokens
        .iter()
        .rev()
        .find(|t| !matches!(t.as_str(), "''" | "'" | "-RRB-" | "-RCB-"))
        .is_some_and(|t| matches!(t.as_str(), "." | "?" | "!" | "..."))
}

/// The ABC's raw text, one line a paragraph, as tokenized sentences (headlines left out).
pub fn abc_sentences(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines() {
        for s in split_sentences(line) {
            let tokens = ptb_tokenize(&s);
            if tokens.len() >= 3 && ends_a_sentence(&tokens) {
                out.push(tokens);
            }
        }
    }
    out
}

/// A Brown sample (`word/tag` tokens, one sentence a line), as tokenized sentences.
pub fn brown_sentences(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line
            .split_whitespace()
            .map(|t| t.rsplit_once('/').map_or(t, |(w, _)| w))
            .filter(|w| !w.is_empty())
            .collect();
        if words.len() < 3 {
            continue;
        }
        let tokens = ptb_tokenize(&words.join(" "));
        if ends_a_sentence(&tokens) {
            out.push(tokens);
        }
    }
    out
}

/// The text members of a corpus zip, checked against its checksum first: ABC's `abc/*.txt`,
/// Brown's samples `brown/c??NN`, in name order (UTF-8, else Latin-1). Every member is bounded, and so is
/// their sum.
fn read_corpus_zip(corpus: &NltkCorpus, bytes: &[u8], origin: &str) -> Result<Vec<(String, String)>> {
    let found = sha256_hex(bytes);
    if found != corpus.sha256 {
        return Err(Error::Checksum { file: origin.to_string(), expected: corpus.sha256.into(), found });
    }
    let archive_err = |reason: String| Error::Archive { archive: origin.to_string(), reason };
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| archive_err(format!("not a readable zip archive ({e}); fetch it again")))?;
    let mut members = Vec::new();
    let mut total = 0u64;
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).map_err(|e| archive_err(format!("member {i}: {e}; fetch it again")))?;
        let Some(path) = member.enclosed_name() else { continue };
        let parts: Vec<String> = path.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        let [dir, name] = parts.as_slice() else { continue };
        let wanted = dir == corpus.name
            && match corpus.name {
                "abc" => name.ends_with(".txt"),
                _ => name.len() == 4 && name.starts_with('c') && name.bytes().skip(2).all(|b| b.is_ascii_digit()),
            };
        if member.is_dir() || !wanted {
            continue;
        }
        let mut data = Vec::new();
        member.by_ref().take(MAX_MEMBER_BYTES + 1).read_to_end(&mut data).map_err(|e| {
            archive_err(format!("{dir}/{name} cannot be unpacked ({e}): the archive is corrupt; fetch it again"))
        })?;
        total += data.len() as u64;
        if data.len() as u64 > MAX_MEMBER_BYTES || total > MAX_ARCHIVE_BYTES {
            return Err(archive_err(format!(
                "{dir}/{name} inflates past the bound: this is not NLTK's {}.zip",
                corpus.name
            )));
        }
        // ABC's science.txt is Latin-1 (31 bytes above 0x7f: `460\xb0C`, `Pe\xf1a`); what is not UTF-8 is read so.
        let text = String::from_utf8(data).unwrap_or_else(|e| e.into_bytes().iter().map(|&b| b as char).collect());
        members.push((format!("{dir}/{name}"), text));
    }
    if members.is_empty() {
        return Err(archive_err(format!("holds no text of the {} corpus", corpus.name)));
    }
    members.sort();
    Ok(members)
}

/// Reads both corpora from `source`, verifies them, and writes `DIR/abc.txt` and `DIR/brown.txt`
/// (one tokenized sentence a line, each sentence once across both) and `DIR/README` (their terms).
/// Nothing is written unless both archives verify.
pub fn fetch_news_text(source: &NewsSource, dir: &Path, events: &mut dyn Events) -> Result<NewsText> {
    let mut texts = Vec::new();
    for corpus in &NEWS_CORPORA {
        let (bytes, origin) = match source {
            NewsSource::NltkData(d) => {
                let p = d.join("corpora").join(format!("{}.zip", corpus.name));
                if !p.is_file() {
                    return Err(Error::Input(format!(
                        "{}: no such file; install it with `python -m nltk.downloader -d {} {}`, or leave out \
                         --from-nltk-data to download it",
                        p.display(),
                        d.display(),
                        corpus.name
                    )));
                }
                (std::fs::read(&p).map_err(io_err(&p))?, p.display().to_string())
            }
            NewsSource::Nltk => {
                let url = nltk_url(corpus.name);
                events.log(&format!("reading {url}"));
                (fetch_url_with(&url, MIRROR_HINT, &mut |done, total| events.download(done, total))?, url)
            }
        };
        texts.push((corpus, read_corpus_zip(corpus, &bytes, &origin)?));
    }
    let mut seen = HashSet::new();
    let mut outputs = Vec::new();
    for (corpus, members) in &texts {
        let mut lines = String::new();
        let mut n = 0;
        for (_, text) in members {
            let sentences = if corpus.name == "abc" { abc_sentences(text) } else { brown_sentences(text) };
            for s in sentences {
                let line = s.join(" ");
                if seen.insert(line.clone()) {
                    lines.push_str(&line);
                    lines.push('\n');
                    n += 1;
                }
            }
        }
        events.log(&format!("{}: {n} sentences from {} files", corpus.name, members.len()));
        outputs.push((dir.join(format!("{}.txt", corpus.name)), lines, n));
    }
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mut files = Vec::new();
    for (path, lines, n) in outputs {
        write_atomically(&path, lines.as_bytes())?;
        files.push((path, n));
    }
    let readme: String = NEWS_CORPORA.iter().map(|c| format!("{}.txt: {}.\n", c.name, c.terms)).collect();
    write_atomically(&dir.join("README"), readme.as_bytes())?;
    Ok(NewsText { files })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_split_at_ends_not_at_abbreviations_or_initials() {
        let s = split_sentences(
            "Mr. Howard said the U.S. Government agreed. \"It is done,\" he said! Dr. J. Smith came at 5 p.m. today? Yes.",
        );
        assert_eq!(
            s,
            [
                "Mr. Howard said the U.S. Government agreed.",
                "\"It is done,\" he said!",
                "Dr. J. Smith came at 5 p.m. today?",
                "Yes."
            ]
        );
        assert_eq!(split_sentences("  one line without an end  "), ["one line without an end"]);
        // White space of several bytes (Latin-1's no-break space and NEL read as characters).
        assert_eq!(split_sentences("a\u{a0}b. C d.\u{85}E\u{3000}f. G"), ["a\u{a0}b.", "C d.", "E\u{3000}f.", "G"]);
        assert!(split_sentences("   ").is_empty());
    }

    #[test]
    fn abc_lines_become_tokenized_sentences_and_headlines_go() {
        let text = "PM denies knowledge of AWB kickbacks\nThe Prime Minister's office said it didn't know. \
                    Mr. Vaile (the deputy) agreed.\n";
        let got: Vec<String> = abc_sentences(text).iter().map(|s| s.join(" ")).collect();
        assert_eq!(
            got,
            ["The Prime Minister 's office said it did n't know .", "Mr. Vaile -LRB- the deputy -RRB- agreed ."]
        );
    }

    #[test]
    fn brown_tags_are_dropped_and_words_tokenized_as_the_treebank() {
        let text = "\n\n\tThe/at Fulton/np-tl County/nn-tl jury/nn said/vbd ``/`` no/at evidence/nn ''/'' of/in \
                    Atlanta's/np$ election/nn ./.\n\n\n\tNo/rb ./.\n";
        let got: Vec<String> = brown_sentences(text).iter().map(|s| s.join(" ")).collect();
        assert_eq!(got, ["The Fulton County jury said `` no evidence '' of Atlanta 's election ."]);
    }

    #[test]
    fn an_archive_that_is_not_the_published_one_is_refused_before_it_is_read() {
        let e = read_corpus_zip(&NEWS_CORPORA[0], b"not a zip", "x.zip").unwrap_err().to_string();
        assert!(e.contains("x.zip") && e.contains(NEWS_CORPORA[0].sha256), "{e}");
    }

    #[test]
    fn a_missing_package_names_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let e = fetch_news_text(&NewsSource::NltkData(dir.path().into()), &out, &mut ()).unwrap_err().to_string();
        assert!(e.contains("corpora/abc.zip") && e.contains("nltk.downloader"), "{e}");
        assert!(!out.exists());
    }
}
