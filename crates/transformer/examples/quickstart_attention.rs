//! The quick start's `attention.png` for any translation model: the encoder–decoder attention of
//! the last layer, mean of the heads, for the first of the quick start's example sentences (or
//! the sentence given), translated with beam 4. How `docs/quickstart-attention.png` is drawn:
//!   cargo run --release --example quickstart_attention -- MODEL BPE OUT.png ["SENTENCE"]

use transformer::decode::translator::{DecodeOptions, SessionOptions, Translator};
use transformer::recipes::quickstart::{write_heatmap, EXAMPLES};

fn main() -> transformer::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: quickstart_attention MODEL BPE OUT.png [SENTENCE]");
        std::process::exit(2);
    }
    let translator = Translator::load(args[0].as_ref(), args[1].as_ref(), SessionOptions::default())?;
    let sentence = args.get(3).map_or(EXAMPLES[0], String::as_str).to_string();
    let (out, _) = translator.translate(std::slice::from_ref(&sentence), &DecodeOptions::default(), &mut ())?;
    let hyp = &out[0][0];
    write_heatmap(&translator, &translator.encode_source(&sentence)?, &hyp.hypothesis.tokens, args[2].as_ref())?;
    println!("{} -> {}", sentence, hyp.text);
    Ok(())
}
