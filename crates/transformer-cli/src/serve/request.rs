//! The body of `POST /translate`, checked field by field so that every 400 names the field (or the
//! limit) at fault and says what to send instead.

use serde_json::Value;
use transformer::data::corpus::input_line;
use transformer::decode::Stop;

/// The fields a request may hold.
pub const FIELDS: &str =
    "q, beam, alpha, patience, stop, nbest, attention, min_length, repetition_penalty, no_repeat_ngram_size, \
                          sampling_topk, sampling_topp, sampling_temperature, seed, prefix, constraints, \
                          alignment, alignment_words, use_shortlist, end_at_limit";

/// A checked translation request.
#[derive(Debug, Clone, PartialEq)]
pub struct TranslateRequest {
    /// The sentences, in order (`q` as a string is one sentence).
    pub q: Vec<String>,
    /// Beam size (default: the server's).
    pub beam: Option<usize>,
    /// Length-penalty exponent α (default: the server's).
    pub alpha: Option<f64>,
    /// When a sentence's search ends (`stop`: a name of [`transformer::decode::Stop::NAMES`],
    /// and `patience`, CTranslate2's patience factor; default: the exact stop).
    pub stop: Option<transformer::decode::Stop>,
    /// Hypotheses per sentence, with scores; `None`: only the best, as text.
    pub nbest: Option<usize>,
    /// Return the encoder–decoder attention of each best hypothesis.
    pub attention: bool,
    /// The search's minimum length and repetition controls (CTranslate2's
    /// `min_decoding_length`, `repetition_penalty`, `no_repeat_ngram_size`; default: none).
    pub controls: transformer::decode::Controls,
    /// Sampling instead of search (CTranslate2's `sampling_topk` other than 1, with
    /// `sampling_topp`, `sampling_temperature`, and a `seed`); `nbest` samples a sentence.
    pub sampling: Option<transformer::decode::Sampling>,
    /// Each sentence's target prefix (`prefix`: a string for a `q` string, else an array of
    /// strings or nulls as long as `q`); empty: none asked.
    pub prefix: Vec<Option<String>>,
    /// Each sentence's phrases its output must contain (`constraints`: an array of strings for a
    /// `q` string, else an array of such arrays as long as `q`); empty: none asked.
    pub constraints: Vec<Vec<String>>,
    /// Each best output's word alignment in Marian's format (`alignment`: "hard", "soft" or a
    /// threshold in (0, 1); `alignment_words`: over words, not tokens); `None`: not asked.
    pub alignment: Option<transformer::decode::AlignmentOptions>,
    /// Decode over the server's vocabulary shortlist (`use_shortlist`; default: whether it has one).
    pub use_shortlist: Option<bool>,
    /// The length limit counted in steps, the last ending each hypothesis as it stands
    /// (`end_at_limit`, as `translate --end-at-limit`; default: off).
    pub end_at_limit: bool,
}

/// The request limits that do not need the model.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most sentences in one request.
    pub max_request_sentences: usize,
    /// Largest beam.
    pub max_beam: usize,
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn positive_int(v: &Value, field: &str, max: usize, what: &str) -> Result<usize, String> {
    match v.as_u64() {
        Some(n) if n >= 1 && n <= max as u64 => Ok(n as usize),
        _ => Err(format!("field `{field}` must be an integer between 1 and {max}{what} (got {v})")),
    }
}

/// A JSON object whose keys are all different (its values are not looked at).
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<UniqueKeys, A::Error> {
                let mut seen = std::collections::HashSet::new();
                while let Some(k) = m.next_key::<String>()? {
                    if !seen.insert(k.clone()) {
                        return Err(serde::de::Error::custom(format!(
                            "field `{k}` is given twice: give each field once"
                        )));
                    }
                    m.next_value::<serde::de::IgnoredAny>()?;
                }
                Ok(UniqueKeys)
            }
        }
        d.deserialize_map(Keys)
    }
}

/// Parses and checks a request body.
pub fn parse(body: &[u8], limits: &Limits) -> Result<TranslateRequest, String> {
    // A UTF-8 byte-order mark before the JSON (some Windows tools write one) is not an error.
    let body = body.strip_prefix(transformer::data::corpus::BOM.as_bytes()).unwrap_or(body);
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the body is not valid JSON ({e}); send an object such as {{\"q\": \"A dog runs.\"}}"))?;
    let Value::Object(map) = value else {
        return Err(format!("the body must be a JSON object such as {{\"q\": \"A dog runs.\"}}, not {}", kind(&value)));
    };
    // serde_json keeps the last of two equal keys without a word; a request that says a field
    // twice is as ambiguous as one with an unknown field.
    if let Err(e) = serde_json::from_slice::<UniqueKeys>(body) {
        return Err(e.to_string().split(" at line ").next().unwrap_or_default().to_string());
    }
    if let Some(k) = map.keys().find(|k| !FIELDS.split(", ").any(|f| f == k.as_str())) {
        return Err(format!("unknown field `{k}`: the fields are {FIELDS}"));
    }
    let q = match map.get("q") {
        None => return Err("field `q` is missing: give the text to translate, a string or an array of strings".into()),
        // Each sentence as the user means it (`corpus::input_line`, as the CLI reads lines): a
        // whitespace-only one is empty and gets an empty translation, never invented text.
        Some(Value::String(s)) => vec![input_line(s).to_string()],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(input_line(s).to_string()),
                other => Err(format!("field `q[{i}]` must be a string (got {})", kind(other))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(format!("field `q` must be a string or an array of strings (got {})", kind(other)));
        }
    };
    if q.len() > limits.max_request_sentences {
        return Err(format!(
            "field `q` has {} sentences; the limit is {} per request (--max-request-sentences): split the request",
            q.len(),
            limits.max_request_sentences
        ));
    }
    let beam = match map.get("beam") {
        None | Some(Value::Null) => None,
        Some(v) => Some(positive_int(v, "beam", limits.max_beam, " (--max-beam)")?),
    };
    let alpha = match map.get("alpha") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(a) if a.is_finite() && (0.0..=10.0).contains(&a) => Some(a),
            _ => return Err(format!("field `alpha` must be a number between 0 and 10 (got {v})")),
        },
    };
    let patience = match map.get("patience") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(p) if p.is_finite() && p > 0.0 && p <= 100.0 => Some(p as f32),
            _ => return Err(format!("field `patience` must be a number above 0, at most 100 (got {v})")),
        },
    };
    let stop = match map.get("stop") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(v) => {
            return Err(format!("field `stop` must be a string, one of {} (got {})", Stop::NAMES.join(", "), kind(v)))
        }
    };
    let stop = Stop::parse(stop, patience).map_err(|e| format!("field `stop`: {e}"))?;
    let nbest = match map.get("nbest") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let most = beam.unwrap_or(limits.max_beam);
            let what = if beam.is_some() { " (the beam size)" } else { " (--max-beam)" };
            Some(positive_int(v, "nbest", most, what)?)
        }
    };
    let attention = match map.get("attention") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(format!("field `attention` must be true or false (got {})", kind(v))),
    };
    let mut controls = transformer::decode::Controls::default();
    let count = |field: &str| match map.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => match v.as_u64() {
            Some(n) if n <= 1000 => Ok(n as usize),
            _ => Err(format!("field `{field}` must be an integer between 0 and 1000 (got {v})")),
        },
    };
    controls.min_len = count("min_length")?;
    controls.no_repeat_ngram = count("no_repeat_ngram_size")?;
    if let Some(v) = map.get("repetition_penalty").filter(|v| !v.is_null()) {
        controls.repetition_penalty = match v.as_f64() {
            Some(p) if p.is_finite() && p > 0.0 && p <= 100.0 => p as f32,
            _ => return Err(format!("field `repetition_penalty` must be a number above 0, at most 100 (got {v})")),
        };
    }
    let sampling = sampling(&map, beam.is_some())?;
    let single = matches!(map.get("q"), Some(Value::String(_)));
    let (prefix, constraints) = guides(&map, single, q.len())?;
    let alignment = alignment(&map)?;
    let end_at_limit = match map.get("end_at_limit") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(format!("field `end_at_limit` must be true or false (got {})", kind(v))),
    };
    let use_shortlist = match map.get("use_shortlist") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => return Err(format!("field `use_shortlist` must be true or false (got {})", kind(v))),
    };
    Ok(TranslateRequest {
        q,
        beam,
        alpha,
        stop,
        nbest,
        attention,
        controls,
        sampling,
        prefix,
        constraints,
        alignment,
        use_shortlist,
        end_at_limit,
    })
}

/// The request's `alignment` and `alignment_words`.
fn alignment(map: &serde_json::Map<String, Value>) -> Result<Option<transformer::decode::AlignmentOptions>, String> {
    use transformer::decode::{AlignmentKind, AlignmentOptions};
    let form = "\"hard\", \"soft\" or a threshold between 0 and 1 (exclusive)";
    let which = match map.get("alignment") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "hard" || s == "soft" => s.parse::<AlignmentKind>().ok(),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(t) if t > 0.0 && t < 1.0 => Some(AlignmentKind::Threshold(t as f32)),
            _ => return Err(format!("field `alignment` must be {form} (got {n})")),
        },
        Some(v) => return Err(format!("field `alignment` must be {form} (got {})", kind(v))),
    };
    let words = match map.get("alignment_words") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) if which.is_some() => *b,
        Some(Value::Bool(_)) => return Err("field `alignment_words` needs `alignment`".into()),
        Some(v) => return Err(format!("field `alignment_words` must be true or false (got {})", kind(v))),
    };
    Ok(which.map(|k| AlignmentOptions { words, ..AlignmentOptions::new(k) }))
}

/// The request's `prefix` and `constraints`, one entry a sentence of `q` (`single`: `q` is one
/// string, and so each field holds one sentence's entry, not a list of them).
type Guides = (Vec<Option<String>>, Vec<Vec<String>>);

fn guides(map: &serde_json::Map<String, Value>, single: bool, n: usize) -> Result<Guides, String> {
    let prefix_of = |v: &Value, at: &str| match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(input_line(s).to_string())),
        other => Err(format!("field `{at}` must be a string or null (got {})", kind(other))),
    };
    let phrases_of = |v: &Value, at: &str| match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(j, p)| match p {
                Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
                other => Err(format!("field `{at}[{j}]` must be a phrase, a string that is not blank (got {other})")),
            })
            .collect::<Result<Vec<_>, _>>(),
        other => Err(format!("field `{at}` must be an array of phrases (strings), got {}", kind(other))),
    };
    // Each field: one entry (for a `q` string) or an array of them as long as `q`.
    fn each<T>(
        map: &serde_json::Map<String, Value>,
        field: &str,
        single: bool,
        n: usize,
        of: impl Fn(&Value, &str) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(v) if single => Ok(vec![of(v, field)?]),
            Some(Value::Array(items)) if items.len() == n => {
                items.iter().enumerate().map(|(i, v)| of(v, &format!("{field}[{i}]"))).collect()
            }
            Some(v) => Err(format!("field `{field}` must be an array of one entry per sentence of `q` ({n}), got {v}")),
        }
    }
    Ok((each(map, "prefix", single, n, prefix_of)?, each(map, "constraints", single, n, phrases_of)?))
}

/// The request's sampling fields: `sampling_topk` other than 1 samples (0: all tokens), with
/// `sampling_topp`, `sampling_temperature` and `seed`, which alone are an error.
fn sampling(
    map: &serde_json::Map<String, Value>,
    has_beam: bool,
) -> Result<Option<transformer::decode::Sampling>, String> {
    let number = |field: &str, default: f32, ok: &dyn Fn(f64) -> bool, range: &str| match map.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => match v.as_f64() {
            Some(x) if ok(x) => Ok(x as f32),
            _ => Err(format!("field `{field}` must be a number {range} (got {v})")),
        },
    };
    let topk = match map.get("sampling_topk") {
        None | Some(Value::Null) => 1,
        Some(v) => match v.as_u64() {
            Some(k) if k <= 1_000_000 => k as usize,
            _ => return Err(format!("field `sampling_topk` must be an integer, 0 (all tokens) or more (got {v})")),
        },
    };
    let topp = number("sampling_topp", 1.0, &|x| x > 0.0 && x <= 1.0, "above 0, at most 1")?;
    let temperature = number("sampling_temperature", 1.0, &|x| x > 0.0 && x <= 100.0, "above 0, at most 100")?;
    let seed = match map.get("seed") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_u64().ok_or_else(|| format!("field `seed` must be an integer, 0 or more (got {v})"))?,
    };
    let given = |f: &&str| map.get(*f).is_some_and(|v| !v.is_null());
    match topk {
        1 if ["sampling_topp", "sampling_temperature", "seed"].iter().any(given) => {
            Err("fields `sampling_topp`, `sampling_temperature` and `seed` apply to sampling: give `sampling_topk` 0 \
             (all tokens) or above 1"
                .into())
        }
        1 => Ok(None),
        _ if has_beam => Err("field `beam` does not apply to sampling: `nbest` gives the samples a sentence".into()),
        topk => Ok(Some(transformer::decode::Sampling { topk, topp, temperature, seed })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_request_sentences: 3, max_beam: 8 };

    fn err(body: &str) -> String {
        parse(body.as_bytes(), &LIMITS).unwrap_err()
    }

    #[test]
    fn accepts_a_string_or_a_list_and_the_options() {
        let r = parse(br#"{"q": "A dog."}"#, &LIMITS).unwrap();
        assert_eq!(
            r,
            TranslateRequest {
                q: vec!["A dog.".into()],
                beam: None,
                alpha: None,
                stop: None,
                nbest: None,
                attention: false,
                controls: Default::default(),
                sampling: None,
                prefix: vec![],
                constraints: vec![],
                alignment: None,
                use_shortlist: None,
                end_at_limit: false,
            }
        );
        let r = parse(br#"{"q": "a", "use_shortlist": false}"#, &LIMITS).unwrap();
        assert_eq!(r.use_shortlist, Some(false));
        assert_eq!(
            err(r#"{"q": "a", "use_shortlist": "yes"}"#),
            "field `use_shortlist` must be true or false (got a string)"
        );
        use transformer::decode::{AlignmentKind, AlignmentOptions};
        let r = parse(br#"{"q": "a", "alignment": "hard"}"#, &LIMITS).unwrap();
        assert_eq!(r.alignment, Some(AlignmentOptions::new(AlignmentKind::Hard)));
        let r = parse(br#"{"q": "a", "alignment": 0.25, "alignment_words": true}"#, &LIMITS).unwrap();
        assert_eq!(
            r.alignment,
            Some(AlignmentOptions { words: true, ..AlignmentOptions::new(AlignmentKind::Threshold(0.25)) })
        );
        for bad in [r#""Hard""#, "1", "0", "true", "[]"] {
            let e = err(&format!(r#"{{"q": "a", "alignment": {bad}}}"#));
            assert!(e.starts_with("field `alignment` must be \"hard\", \"soft\" or a threshold"), "{bad}: {e}");
        }
        assert_eq!(err(r#"{"q": "a", "alignment_words": true}"#), "field `alignment_words` needs `alignment`");
        assert!(err(r#"{"q": "a", "alignment": "soft", "alignment_words": 1}"#).contains("must be true or false"));
        let r = parse(br#"{"q": "A dog.", "prefix": "Ein", "constraints": ["Hund", " rennt "]}"#, &LIMITS).unwrap();
        assert_eq!((r.prefix, r.constraints), (vec![Some("Ein".into())], vec![vec!["Hund".into(), "rennt".into()]]));
        let r = parse(br#"{"q": ["a", "b"], "prefix": [null, "Ein"], "constraints": [[], ["x"]]}"#, &LIMITS).unwrap();
        assert_eq!((r.prefix, r.constraints), (vec![None, Some("Ein".into())], vec![vec![], vec!["x".into()]]));
        let e = err(r#"{"q": ["a", "b"], "prefix": ["Ein"]}"#);
        assert!(e.starts_with("field `prefix` must be an array of one entry per sentence of `q` (2)"), "{e}");
        let e = err(r#"{"q": ["a"], "constraints": [["x", " "]]}"#);
        assert!(e.starts_with("field `constraints[0][1]` must be a phrase"), "{e}");
        assert!(err(r#"{"q": "a", "constraints": "x"}"#).contains("field `constraints` must be an array of phrases"));
        assert!(err(r#"{"q": "a", "prefix": 3}"#).contains("field `prefix` must be a string or null"));
        let r = parse(br#"{"q": ["a", ""], "beam": 5, "alpha": 0, "nbest": 5, "attention": true}"#, &LIMITS).unwrap();
        assert_eq!(r.stop, None);
        assert_eq!(parse(br#"{"q": "a", "patience": 1.5}"#, &LIMITS).unwrap().stop, Some(Stop::Patience(1.5)));
        let stop = |body: &str| parse(body.as_bytes(), &LIMITS).unwrap().stop;
        assert_eq!(stop(r#"{"q": "a", "stop": "patience"}"#), Some(Stop::Patience(1.0)));
        assert_eq!(stop(r#"{"q": "a", "stop": "patience", "patience": 2}"#), Some(Stop::Patience(2.0)));
        assert_eq!(stop(r#"{"q": "a", "stop": "transformers"}"#), Some(Stop::Transformers));
        assert_eq!(stop(r#"{"q": "a", "stop": "early-exit"}"#), Some(Stop::BestEnds));
        assert_eq!(stop(r#"{"q": "a", "stop": "exact"}"#), Some(Stop::Exact));
        let e = err(r#"{"q": "a", "stop": "soon"}"#);
        assert_eq!(e, "field `stop`: no stop \"soon\": one of exact, early-exit, patience, transformers");
        let e = err(r#"{"q": "a", "stop": "exact", "patience": 2}"#);
        assert_eq!(e, "field `stop`: a patience applies to the patience stop, not to the exact stop");
        assert!(parse(br#"{"q": "a", "end_at_limit": true}"#, &LIMITS).unwrap().end_at_limit);
        assert_eq!(
            err(r#"{"q": "a", "end_at_limit": 1}"#),
            "field `end_at_limit` must be true or false (got a number)"
        );
        let e = err(r#"{"q": "a", "stop": 3}"#);
        assert!(e.starts_with("field `stop` must be a string, one of exact, early-exit"), "{e}");
        let e = err(r#"{"q": "a", "patience": 0}"#);
        assert_eq!(e, "field `patience` must be a number above 0, at most 100 (got 0)");
        assert_eq!(r.q, ["a", ""]);
        assert_eq!((r.beam, r.alpha, r.nbest, r.attention), (Some(5), Some(0.0), Some(5), true));
        let body = br#"{"q": "a", "min_length": 2, "repetition_penalty": 1.25, "no_repeat_ngram_size": 3}"#;
        let c = parse(body, &LIMITS).unwrap().controls;
        assert_eq!((c.min_len, c.repetition_penalty, c.no_repeat_ngram), (2, 1.25, 3));
        let e = err(r#"{"q": "a", "repetition_penalty": 0}"#);
        assert_eq!(e, "field `repetition_penalty` must be a number above 0, at most 100 (got 0)");
        let e = err(r#"{"q": "a", "min_length": -1}"#);
        assert_eq!(e, "field `min_length` must be an integer between 0 and 1000 (got -1)");
        assert!(err(r#"{"q": "a", "no_repeat_ngram_size": "2"}"#)
            .contains("field `no_repeat_ngram_size` must be an integer"));
        let body =
            br#"{"q": "a", "nbest": 3, "sampling_topk": 0, "sampling_topp": 0.9, "sampling_temperature": 0.7, "seed": 4}"#;
        let s = parse(body, &LIMITS).unwrap().sampling.unwrap();
        assert_eq!((s.topk, s.topp, s.temperature, s.seed), (0, 0.9, 0.7, 4));
        assert!(err(r#"{"q": "a", "seed": 4}"#).contains("apply to sampling: give `sampling_topk` 0"));
        assert!(err(r#"{"q": "a", "beam": 2, "sampling_topk": 5}"#).contains("`beam` does not apply to sampling"));
        assert!(
            err(r#"{"q": "a", "sampling_topk": 0, "sampling_topp": 1.5}"#).contains("`sampling_topp` must be a number")
        );
    }

    #[test]
    fn a_field_given_twice_is_an_error_naming_it() {
        let e = err(r#"{"q": "a", "beam": 2, "beam": 5}"#);
        assert_eq!(e, "field `beam` is given twice: give each field once");
        assert!(err(r#"{"q": "a", "q": "b"}"#).contains("field `q` is given twice"));
        assert!(parse(br#"{"q": ["a", "a"], "beam": 2}"#, &LIMITS).is_ok(), "equal values are not keys");
    }

    #[test]
    fn sentences_are_read_as_meant() {
        let body = "\u{feff}{\"q\": [\"   \", \"\\t\", \"\\ufeffA dog.\", \"A cat.\\r\\n\", \" a  b \"]}";
        let r = parse(body.as_bytes(), &Limits { max_request_sentences: 5, ..LIMITS }).unwrap();
        assert_eq!(r.q, ["", "", "A dog.", "A cat.", " a  b "]);
        let r = parse(br#"{"q": " \n "}"#, &LIMITS).unwrap();
        assert_eq!(r.q, [""]);
    }

    #[test]
    fn every_error_names_its_field_or_limit() {
        assert!(err("{").contains("not valid JSON"));
        assert!(err("[1]").contains("must be a JSON object") && err("[1]").contains("an array"));
        assert!(err("{}").contains("field `q` is missing"));
        assert!(err(r#"{"q": 3}"#).contains("field `q` must be a string or an array of strings (got a number)"));
        assert!(err(r#"{"q": ["a", null]}"#).contains("field `q[1]` must be a string (got null)"));
        assert!(err(r#"{"q": ["a","b","c","d"]}"#).contains("has 4 sentences; the limit is 3"));
        assert!(err(r#"{"q": "a", "beam": 0}"#).contains("field `beam` must be an integer between 1 and 8"));
        assert!(err(r#"{"q": "a", "beam": "4"}"#).contains("field `beam`"));
        assert!(err(r#"{"q": "a", "beam": 2.5}"#).contains("field `beam`"));
        assert!(err(r#"{"q": "a", "alpha": -1}"#).contains("field `alpha`"));
        assert!(
            err(r#"{"q": "a", "beam": 2, "nbest": 3}"#).contains("field `nbest` must be an integer between 1 and 2")
        );
        assert!(err(r#"{"q": "a", "attention": 1}"#).contains("field `attention` must be true or false"));
        assert!(err(r#"{"q": "a", "text": 1}"#).contains("unknown field `text`: the fields are q, beam"));
    }
}
