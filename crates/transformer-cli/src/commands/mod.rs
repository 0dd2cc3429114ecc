//! One file per command group; each command reads its inputs, calls the library and prints.

mod bench;
mod convert;
mod decode;
mod distributed;
mod evalb;
mod input;
mod parse;
mod quickstart;
mod rss;
mod text;
mod train;

use crate::args::{
    AerArgs, AttentionArgs, AverageArgs, BenchArgs, BpeArgs, Command, DataArgs, EvaluateArgs, ExportArgs,
    ExportCommand, ImportArgs, ImportCommand, ParamsArgs, ParseEvalArgs, QuantizeArgs, ScoreArgs, SyntheticArgs,
    TrainArgs, TreebankArgs,
};
use anyhow::Result;
use transformer::task::Evaluation;

/// Runs one command.
pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Ablate(args) => quickstart::ablate(args),
        Command::Quickstart(args) => quickstart::run(args),
        Command::Params(ParamsArgs { preset, vocab, all, json, cost, src_len, tgt_len, tokens_per_step, steps }) => {
            let cost = cost.then_some(train::CostArgs { src_len, tgt_len, tokens_per_step, steps });
            train::params(preset, vocab, all, json, cost)
        }
        Command::Synthetic(SyntheticArgs { task, steps, seed, save }) => {
            train::synthetic(task, steps, seed, save.as_deref())
        }
        Command::Train(TrainArgs { config, overrides, time_limit, init }) => {
            train::train(&config, overrides, time_limit, init.as_deref())
        }
        Command::Quantize(QuantizeArgs { checkpoint, output }) => convert::quantize(&checkpoint, &output),
        Command::Import(ImportArgs { which: ImportCommand::Marian { dir, output } }) => {
            convert::import_marian(&dir, &output)
        }
        Command::Export(ExportArgs {
            which: ExportCommand::Marian { model, checkpoint, tokenizer, output, tool_defaults },
        }) => {
            let (checkpoint, tokenizer) = convert::export_inputs(model, checkpoint, tokenizer)?;
            convert::export_marian(&checkpoint, &tokenizer, &output, tool_defaults)
        }
        Command::Export(ExportArgs {
            which: ExportCommand::Hf { model, checkpoint, tokenizer, output, tool_defaults },
        }) => {
            let (checkpoint, tokenizer) = convert::export_inputs(model, checkpoint, tokenizer)?;
            convert::export_hf(&checkpoint, &tokenizer, &output, tool_defaults)
        }
        Command::Import(ImportArgs { which: ImportCommand::Ct2 { dir, spm, output } }) => {
            convert::import_ct2(&dir, &spm, &output)
        }
        Command::Export(ExportArgs {
            which: ExportCommand::Ct2 { model, checkpoint, tokenizer, quantization, output },
        }) => {
            let (checkpoint, tokenizer) = convert::export_inputs(model, checkpoint, tokenizer)?;
            convert::export_ct2(&checkpoint, &tokenizer, &quantization, &output)
        }
        Command::Average(AverageArgs { last, dir, inputs, output }) => {
            train::average(last.map(|k| k as usize), dir.as_deref(), inputs, &output)
        }
        Command::Prepare(args) => train::prepare(&args),
        Command::Translate(args) => decode::translate(&args),
        Command::Evaluate(args) => evaluate(args),
        Command::Score(ScoreArgs { model, src, refs, per_token, align }) => {
            decode::score(&model, &src, &refs, per_token, &align)
        }
        Command::Parse(args) => parse::parse(&args),
        Command::Treebank(TreebankArgs { input, files, words, trees }) => {
            parse::treebank(&input, files.as_deref(), words.as_deref(), trees.as_deref())
        }
        Command::Attention(AttentionArgs { model, src, tgt, layer, head, out }) => {
            decode::attention(&model, &src, tgt.as_deref(), layer.map(|l| l as usize), head.map(|h| h as usize), &out)
        }
        Command::Data(DataArgs { which }) => text::data(which),
        Command::Bpe(BpeArgs { which }) => text::bpe(which),
        Command::Bleu(args) => text::bleu(&args),
        Command::ParseEval(ParseEvalArgs { gold, test, summary_only }) => evalb::parse_eval(&gold, &test, summary_only),
        Command::Shortlist(args) => decode::shortlist(&args),
        Command::Aer(AerArgs { reference, hyp }) => {
            let (r, h) = (input::read_input_lines(&reference)?, input::read_input_lines(&hyp)?);
            let aer = transformer::eval::aer::corpus_aer(&r, &h)
                .map_err(|e| anyhow::anyhow!("{} / {}: {e}", reference.display(), hyp.display()))?;
            println!("{}", aer.line());
            Ok(())
        }
        Command::Bench(BenchArgs { which }) => bench::run(which),
        Command::Serve(args) => crate::serve::run(args),
    }
}

/// `transformer evaluate`: EVALB for a parsing model, BLEU, chrF and perplexity for a translation
/// model.
fn evaluate(args: EvaluateArgs) -> Result<()> {
    let EvaluateArgs { model, src, refs, output, by_length, search, guide, parsing } = args;
    let (translator, opts) = model.load_with(&search, 1)?;
    match translator.task().evaluation() {
        Evaluation::Evalb => {
            if refs.len() != 1 {
                crate::usage!("a parsing model is scored against one file of gold trees; give one --ref");
            }
            if by_length {
                crate::usage!("--by-length reports BLEU of a translation model; a parsing model's report is EVALB's");
            }
            if guide.prefix.is_some() || guide.constraints.is_some() {
                crate::usage!("--prefix and --constraints guide a translation model; a parser's output is its tree");
            }
            parse::evaluate(&translator, src.as_deref(), &refs[0], output.as_deref(), &opts, parsing)
        }
        Evaluation::BleuChrfPerplexity => {
            decode::evaluate(&translator, src.as_deref(), &refs, output.as_deref(), by_length, &guide, &opts)
        }
    }
}
