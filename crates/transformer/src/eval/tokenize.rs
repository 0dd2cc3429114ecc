//! sacreBLEU's tokenizers: `13a` (mteval-v13a, the WMT standard), `intl` (mteval-v14
//! international), `char` and `none`.

use super::python_split;
use regex::Regex;
use std::sync::OnceLock;

/// A BLEU tokenizer, named as in sacreBLEU's signature (`tok:13a`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tokenizer {
    /// mteval-v13a: unescape a few HTML entities, split off punctuation and symbols (but keep
    /// periods and commas inside numbers, and split a dash after a digit).
    Thirteen13a,
    /// mteval-v14 international: split off Unicode punctuation not inside numbers, and symbols.
    Intl,
    /// Every character is a token.
    Char,
    /// Whitespace only: for pre-tokenized text.
    None,
}

impl Tokenizer {
    /// Every tokenizer.
    pub const ALL: [Tokenizer; 4] = [Tokenizer::Thirteen13a, Tokenizer::Intl, Tokenizer::Char, Tokenizer::None];

    /// The name in the signature.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Thirteen13a => "13a",
            Tokenizer::Intl => "intl",
            Tokenizer::Char => "char",
            Tokenizer::None => "none",
        }
    }

    /// The tokenizer called `name` (13a, intl, char, none).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "13a" => Tokenizer::Thirteen13a,
            "intl" => Tokenizer::Intl,
            "char" => Tokenizer::Char,
            "none" => Tokenizer::None,
            _ => return None,
        })
    }

    /// Tokens of `line` joined by single spaces.
    pub fn tokenize(self, line: &str) -> String {
        match self {
            Tokenizer::Thirteen13a => tokenize_13a(line),
            Tokenizer::Intl => tokenize_intl(line),
            Tokenizer::Char => {
                let mut out = String::with_capacity(line.len() * 2);
                for (i, c) in line.chars().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push(c);
                }
                out
            }
            Tokenizer::None => line.to_string(),
        }
    }
}

fn join_tokens(s: &str) -> String {
    python_split(s).collect::<Vec<_>>().join(" ")
}

fn regexes_13a() -> &'static [(Regex, &'static str); 4] {
    static RE: OnceLock<[(Regex, &'static str); 4]> = OnceLock::new();
    RE.get_or_init(|| {
        [
            // Punctuation and symbols of ASCII: { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ /
            (Regex::new(r"([\x7B-\x7E\x5B-\x60\x20-\x26\x28-\x2B\x3A-\x40/])").unwrap(), " ${1} "),
            // Period and comma unless preceded by a digit…
            (Regex::new(r"([^0-9])([.,])").unwrap(), "${1} ${2} "),
            // …and unless followed by a digit.
            (Regex::new(r"([.,])([^0-9])").unwrap(), " ${1} ${2}"),
            // A dash after a digit.
            (Regex::new(r"([0-9])(-)").unwrap(), "${1} ${2} "),
        ]
    })
}

fn tokenize_13a(line: &str) -> String {
    let mut s = line.replace("<skipped>", "").replace("-\n", "").replace('\n', " ");
    if s.contains('&') {
        s = s.replace("&quot;", "\"").replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
    }
    let mut s = format!(" {s} ");
    for (re, rep) in regexes_13a() {
        s = re.replace_all(&s, *rep).into_owned();
    }
    join_tokens(&s)
}

fn regexes_intl() -> &'static [(Regex, &'static str); 3] {
    static RE: OnceLock<[(Regex, &'static str); 3]> = OnceLock::new();
    RE.get_or_init(|| {
        [
            // Punctuation not preceded by a digit, punctuation not followed by a digit, symbols.
            (Regex::new(r"(\P{N})(\p{P})").unwrap(), "${1} ${2} "),
            (Regex::new(r"(\p{P})(\P{N})").unwrap(), " ${1} ${2}"),
            (Regex::new(r"(\p{S})").unwrap(), " ${1} "),
        ]
    })
}

fn tokenize_intl(line: &str) -> String {
    let mut s = line.to_string();
    for (re, rep) in regexes_intl() {
        s = re.replace_all(&s, *rep).into_owned();
    }
    join_tokens(&s)
}
