//! Dev tool: parses sentences and prints each raw model output with what is wrong with it, the
//! classes docs/parsing.md ("Closing what was opened") counts.
//!
//! cargo run --release -p transformer --example parse_raw -- CHECKPOINT VOCAB WORDS [c]
//!
//! WORDS: one sentence a line (`transformer treebank --words`); `c` decodes with --constrained.
//! Per sentence: OK or BAD (needed repair), whether the leaves' words are the input's
//! (`words=ok`, `words=diff`, or `words=count` for too many or too few leaves), the bracket depth
//! at the end, whether a close came with nothing open, how many closes name another label than
//! the innermost open one, and the leaves written against the words.
use transformer::data::trees::{items, with_words, Item};
use transformer::decode::translator::{SessionOptions, Translator};
use transformer::decode::ParseOptions;
use transformer::Task;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 4 {
        eprintln!("usage: parse_raw CHECKPOINT VOCAB WORDS [c]");
        std::process::exit(2);
    }
    let options = SessionOptions { task: Task::Parsing, ..Default::default() };
    let t = Translator::load(a[1].as_ref(), a[2].as_ref(), options).expect("a parsing checkpoint and its vocabulary");
    let text = std::fs::read_to_string(&a[3]).expect("the sentences");
    let sents: Vec<String> = text.lines().map(String::from).collect();
    let opt = ParseOptions { constrained: a.get(4).is_some_and(|s| s == "c"), ..Default::default() };
    let (parses, _) =
        t.parse(&sents, &opt, &mut transformer::events::Lines::new(|m| eprintln!("{m}"))).expect("parsing");
    for (s, p) in sents.iter().zip(&parses) {
        let text = t.decode_target(&p.hypothesis.tokens).expect("decodable ids");
        let mut toks: Vec<String> = text.split_whitespace().map(String::from).collect();
        let words: Vec<&str> = s.split_whitespace().collect();
        if !t.tree_format().words_in_target() {
            // A `tags` model writes no words: put the sentence's back, one a tag.
            toks = with_words(&toks, &words);
        }
        let it = items(&toks);
        let out: Vec<&str> = it.iter().filter_map(|i| if let Item::Word(w) = i { Some(*w) } else { None }).collect();
        let (mut depth, mut underflow, mut mismatched, mut stack) = (0i64, false, 0, Vec::new());
        for i in &it {
            match i {
                Item::Open(l) => {
                    depth += 1;
                    stack.push(*l)
                }
                Item::Close(l) => {
                    depth -= 1;
                    underflow |= depth < 0;
                    if stack.pop() != Some(*l) {
                        mismatched += 1
                    }
                }
                _ => {}
            }
        }
        let wc = match (out.len() == words.len(), out == words) {
            (true, true) => "words=ok",
            (true, false) => "words=diff",
            _ => "words=count",
        };
        let ok = if p.malformed { "BAD" } else { "OK" };
        println!(
            "{ok}\t{wc}\tdepth_end={depth}\tunderflow={underflow}\tlabel_mismatch={mismatched}\tn={}/{}",
            out.len(),
            words.len()
        );
        println!("  SRC {s}\n  OUT {text}");
    }
}
