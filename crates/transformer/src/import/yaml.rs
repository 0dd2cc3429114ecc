//! The YAML that native Marian models are described in (`decoder.yml`, a model's `special:model.yml`,
//! `.yml` vocabularies): a flat mapping of `key: value` lines, lists either `[a, b]` or `- item` lines
//! under their key, scalars plain, `'single'` or `"double"` quoted. Nothing else of YAML is read:
//! nested mappings, anchors and multi-line scalars are not Marian's.

use std::collections::BTreeMap;

/// A flat YAML mapping as Marian writes it: `key: value` lines, lists as `  - item` lines under
/// their key. Values are unquoted; every key maps to its values (one for a scalar, none for an
/// empty value). Lines that are none of these (and `- item` lines before any key) are skipped.
pub(super) fn parse(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(item) = t.strip_prefix("- ") {
            if let Some(k) = &last {
                out.entry(k.clone()).or_default().push(unquote(item.trim()));
            }
            continue;
        }
        if let Some((k, v)) = t.split_once(':') {
            let (k, v) = (k.trim().to_string(), v.trim());
            if v.is_empty() {
                out.insert(k.clone(), Vec::new());
            } else if let Some(inner) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                out.insert(k.clone(), inner.split(',').map(|s| unquote(s.trim())).filter(|s| !s.is_empty()).collect());
            } else {
                out.insert(k.clone(), vec![unquote(v)]);
            }
            last = Some(k);
        }
    }
    out
}

/// A YAML scalar without its quotes: `"…"` with its escapes, `'…'` with `''` for a quote.
pub(super) fn unquote(s: &str) -> String {
    if let Some(inner) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        unescape_double(inner)
    } else if let Some(inner) = s.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
        inner.replace("''", "'")
    } else {
        s.to_string()
    }
}

/// `s` as a YAML double-quoted scalar that [`unquote`] (and yaml-cpp, Marian's reader) reads back
/// as `s`: `\\` and `\"` escaped, control characters and YAML's line breaks as `\xXX` / `\uXXXX`.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            // Outside YAML's printable set (C0, DEL, C1, the non-characters U+FFFE and U+FFFF),
            // its line breaks, and the byte-order mark: escaped, for strict readers (PyYAML) too.
            c if (c as u32) < 0x20 || ('\x7f'..='\u{9f}').contains(&c) => out.push_str(&format!("\\x{:02X}", c as u32)),
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}' => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// [`unquote`], refusing what it would read loosely: an escape YAML does not have, a bad or
/// short `\x`/`\u`/`\U`, a trailing backslash, text after the closing quote (a piece spelled two
/// ways must not become one piece by accident). The error says what, never the text.
pub(super) fn unquote_checked(s: &str) -> std::result::Result<String, &'static str> {
    if let Some(inner) = s.strip_prefix('"') {
        let inner = inner.strip_suffix('"').ok_or("an unclosed double-quoted string")?;
        let mut it = inner.chars();
        while let Some(c) = it.next() {
            match c {
                '"' => return Err("a double quote inside a double-quoted string"),
                '\\' => {
                    let n = match it.next() {
                        Some('x') => 2,
                        Some('u') => 4,
                        Some('U') => 8,
                        Some(
                            '0' | 'a' | 'b' | 't' | '\t' | 'n' | 'v' | 'f' | 'r' | 'e' | ' ' | 'N' | '_' | 'L' | 'P'
                            | '"' | '/' | '\\',
                        ) => 0,
                        Some(_) => return Err("an escape YAML does not have"),
                        None => return Err("a backslash at the end of the string"),
                    };
                    let h: String = it.by_ref().take(n).collect();
                    let hex = h.len() == n && h.bytes().all(|b| b.is_ascii_hexdigit());
                    if !hex || (n > 0 && u32::from_str_radix(&h, 16).ok().and_then(char::from_u32).is_none()) {
                        return Err("a bad \\x, \\u or \\U escape");
                    }
                }
                _ => {}
            }
        }
        Ok(unescape_double(inner))
    } else if let Some(inner) = s.strip_prefix('\'') {
        let inner = inner.strip_suffix('\'').ok_or("an unclosed single-quoted string")?;
        if inner.replace("''", "").contains('\'') {
            return Err("a lone single quote inside a single-quoted string");
        }
        Ok(inner.replace("''", "'"))
    } else {
        Ok(s.to_string())
    }
}

/// YAML double-quoted escapes (a superset of JSON's): \\ \" \/ \0 \a \b \t \n \v \f \r \e \  \N
/// \_ \L \P \xXX \uXXXX \UXXXXXXXX.
fn unescape_double(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let hex = |it: &mut std::str::Chars, n: usize| -> Option<char> {
            let h: String = it.by_ref().take(n).collect();
            u32::from_str_radix(&h, 16).ok().and_then(char::from_u32)
        };
        let e = match it.next() {
            Some('0') => Some('\0'),
            Some('a') => Some('\x07'),
            Some('b') => Some('\x08'),
            Some('t') | Some('\t') => Some('\t'),
            Some('n') => Some('\n'),
            Some('v') => Some('\x0b'),
            Some('f') => Some('\x0c'),
            Some('r') => Some('\r'),
            Some('e') => Some('\x1b'),
            Some(' ') => Some(' '),
            Some('N') => Some('\u{85}'),
            Some('_') => Some('\u{a0}'),
            Some('L') => Some('\u{2028}'),
            Some('P') => Some('\u{2029}'),
            Some('x') => hex(&mut it, 2),
            Some('u') => hex(&mut it, 4),
            Some('U') => hex(&mut it, 8),
            Some(other) => Some(other),
            None => None,
        };
        out.extend(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_scalars_and_lists() {
        let y = parse("models:\n  - model.npz\nvocabs: [a.yml, 'b''s.yml']\nbeam-size: 4\nx: \"\\u2581a\\\"\"\n");
        assert_eq!(y["models"], vec!["model.npz"]);
        assert_eq!(y["vocabs"], vec!["a.yml", "b's.yml"]);
        assert_eq!(y["beam-size"], vec!["4"]);
        assert_eq!(y["x"], vec!["▁a\""]);
    }

    #[test]
    fn comments_blank_lines_and_empty_values() {
        let y = parse("# a comment\n\n  \ntransformer-preprocess:\ntype: transformer # not a comment\nempty: []\n");
        assert_eq!(y["transformer-preprocess"], Vec::<String>::new());
        // A `#` after a value is part of it: Marian writes no trailing comments.
        assert_eq!(y["type"], vec!["transformer # not a comment"]);
        assert_eq!(y["empty"], Vec::<String>::new());
        assert_eq!(y.len(), 3);
    }

    #[test]
    fn a_later_key_replaces_an_earlier_one_and_items_follow_the_last_key() {
        let y = parse("a: 1\na: 2\nlist:\n- x\n-   y\nb: [ p , , q ]\n");
        assert_eq!(y["a"], vec!["2"]);
        assert_eq!(y["list"], vec!["x", "y"]);
        assert_eq!(y["b"], vec!["p", "q"]);
    }

    #[test]
    fn what_is_not_a_flat_mapping_is_skipped() {
        // Items before any key, and lines without a colon, are not read.
        let y = parse("- orphan\njust text\nk: v\n");
        assert_eq!(y.len(), 1);
        assert_eq!(y["k"], vec!["v"]);
        // A nested mapping is read flat: its keys become top-level keys.
        let y = parse("outer:\n  inner: 1\n");
        assert_eq!(y["outer"], Vec::<String>::new());
        assert_eq!(y["inner"], vec!["1"]);
    }

    #[test]
    fn quoting_reads_back_as_written() {
        for s in [
            "▁a",
            "\"",
            "\\",
            "it's",
            "a: b",
            "#x",
            "- y",
            "\t\n\r\0\x7f",
            "\u{85}\u{2028}\u{2029}\u{feff}",
            "\u{80}\u{9f}\u{fffe}\u{ffff}",
            "😀",
            " ",
            "",
        ] {
            let q = quote(s);
            assert_eq!(unquote(&q), s, "{q}");
            // One line, so that a `piece: id` list stays one entry a line.
            assert!(!q.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}', '\u{9f}', '\u{ffff}']), "{q}");
        }
        assert_eq!(quote("▁a\"b"), "\"▁a\\\"b\"");
    }

    #[test]
    fn quotes_and_escapes() {
        assert_eq!(unquote("plain"), "plain");
        assert_eq!(unquote("'it''s'"), "it's");
        assert_eq!(unquote("\"tab\\tnl\\n\\x41\\u00e9\\U0001F600\""), "tab\tnl\nAé😀");
        assert_eq!(unquote("\"\\N\\_\\L\\P\\e\\0\""), "\u{85}\u{a0}\u{2028}\u{2029}\u{1b}\0");
        // An unknown escape keeps its character; a bad hex escape is dropped.
        assert_eq!(unquote("\"\\q\\xZZ!\""), "q!");
        // Unbalanced quotes are not quotes.
        assert_eq!(unquote("\"open"), "\"open");
        assert_eq!(unquote("'"), "'");
    }
}
