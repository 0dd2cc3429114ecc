//! Penn Treebank bracketed text: any bytes give trees or an error naming the line, never a panic;
//! every tree that reads survives preprocessing, and linearising it and turning the tokens back
//! into a tree over its words gives the same tree (with punctuation words carrying their
//! punctuation tags, which `delinearise` enforces).
#![no_main]

use libfuzzer_sys::fuzz_target;
use transformer::data::trees::{delinearise, parse_trees, punctuation_tag, Tree};

fn retag(t: &Tree) -> Tree {
    match &t.word {
        Some(w) => Tree::leaf(punctuation_tag(w).unwrap_or(&t.label), w),
        None => Tree::node(&t.label, t.children.iter().map(retag).collect()),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(trees) = parse_trees(text, "fuzz.mrg") else { return };
    for raw in trees {
        if let Some(t) = raw.preprocess() {
            let back = delinearise(&t.linearise(), &t.words());
            assert_eq!(back, retag(&t));
        }
    }
});
