//! One file per command group; each command reads its inputs, calls the library and prints.

mod bench;
mod decode;
mod distributed;
mod evalb;
mod input;
mod parse;
mod quickstart;
mod text;
mod train;

use crate::args::{
    AttentionArgs, AverageArgs, BenchArgs, BpeArgs, Command, DataArgs, EvaluateArgs, ImportArgs, ImportCommand,
    ParamsArgs, ParseEvalArgs, QuantizeArgs, QuickstartArgs, SyntheticArgs, TrainArgs, TranslateArgs, TreebankArgs,
};
use anyhow::Result;
use transformer::task::Evaluation;
use transformer::Task;

/// Runs one command.
pub fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Ablate(args) => quickstart::ablate(args),
        Command::Quickstart(QuickstartArgs {
            task,
            minutes,
            output,
            src,
            tgt,
            data,
            treebank,
            train_files,
            valid_files,
            test_files,
            test_sentences,
            valid_steps,
        }) => {
            let d = transformer::quickstart::QuickstartOptions::default();
            let flags = [
                (src.is_some(), "--src", Task::Translation),
                (tgt.is_some(), "--tgt", Task::Translation),
                (data.is_some(), "--data", Task::Translation),
                (treebank.is_some(), "--treebank", Task::Parsing),
                (train_files.is_some(), "--train-files", Task::Parsing),
                (valid_files.is_some(), "--valid-files", Task::Parsing),
                (test_files.is_some(), "--test-files", Task::Parsing),
            ];
            if let Some((_, flag, owner)) = flags.iter().find(|(given, _, owner)| *given && *owner != task) {
                crate::usage!("{flag} is an option of --task {}, not of --task {}", owner.name(), task.name());
            }
            let default_output = match task {
                Task::Translation => d.output.clone(),
                Task::Parsing => transformer::quickstart::parsing::DEFAULT_OUTPUT.into(),
            };
            quickstart::quickstart(transformer::quickstart::QuickstartOptions {
                output: output.unwrap_or(default_output),
                minutes,
                src: src.unwrap_or(d.src),
                tgt: tgt.unwrap_or(d.tgt),
                data_dir: data.unwrap_or(d.data_dir),
                test_sentences: test_sentences.map(|n| n as usize),
                valid_steps,
                task,
                treebank: treebank.unwrap_or(d.treebank),
                train_files: train_files.unwrap_or(d.train_files),
                valid_files: valid_files.unwrap_or(d.valid_files),
                test_files: test_files.unwrap_or(d.test_files),
            })
        }
        Command::Params(ParamsArgs { preset, vocab, all, json, cost, src_len, tgt_len, tokens_per_step, steps }) => {
            let cost = cost.then_some(train::CostArgs { src_len, tgt_len, tokens_per_step, steps });
            train::params(preset, vocab, all, json, cost)
        }
        Command::Synthetic(SyntheticArgs { task, steps, seed, save }) => {
            train::synthetic(task, steps, seed, save.as_deref())
        }
        Command::Train(TrainArgs { config, overrides, time_limit }) => train::train(&config, overrides, time_limit),
        Command::Quantize(QuantizeArgs { checkpoint, output }) => {
            let (before, after) = transformer::checkpoint::quantize(&checkpoint, &output)?;
            let mb = |b: u64| b as f64 / (1 << 20) as f64;
            eprintln!(
                "wrote {} ({:.1} MB; the f32 checkpoint is {:.1} MB): decode it with --precision int8",
                output.display(),
                mb(after),
                mb(before)
            );
            Ok(())
        }
        Command::Import(ImportArgs { which: ImportCommand::Marian { dir, output } }) => {
            let imported = transformer::import::marian::import(&dir)?;
            let (ckpt, tok) = transformer::import::marian::write(&imported, &output)?;
            let c = &imported.checkpoint.config;
            eprintln!(
                "imported {} ({}): {} layers, d_model {}, {} heads, FFN {} ({}), vocabulary {}{}, {:.1}M parameters",
                dir.display(),
                imported.source,
                c.n_layers,
                c.d_model,
                c.n_heads,
                c.d_ff,
                c.activation.name(),
                c.vocab_size,
                c.source_vocab_size.map_or(String::new(), |v| format!(" (source {v})")),
                transformer::params::param_count(c) as f64 / 1e6
            );
            eprintln!("wrote {} and {}", ckpt.display(), tok.display());
            eprintln!(
                "translate with: transformer translate --checkpoint {} --tokenizer {}",
                ckpt.display(),
                tok.display()
            );
            Ok(())
        }
        Command::Average(AverageArgs { last, dir, inputs, output }) => {
            train::average(last.map(|k| k as usize), dir.as_deref(), inputs, &output)
        }
        Command::Prepare(args) => train::prepare(&args),
        Command::Translate(TranslateArgs { model, input, search, nbest, speed, profile }) => {
            decode::translate(&model, input.as_deref(), &search, nbest as usize, speed, profile)
        }
        Command::Evaluate(EvaluateArgs { model, src, refs, output, by_length, search, parsing }) => {
            search.options(1, model.task.unwrap_or_default())?; // bad flags: a usage error before loading
            let translator = model.load()?;
            let opts = search.options(1, translator.task())?;
            match translator.task().evaluation() {
                Evaluation::Evalb => {
                    if refs.len() != 1 {
                        crate::usage!("a parsing model is scored against one file of gold trees; give one --ref");
                    }
                    if by_length {
                        crate::usage!(
                            "--by-length reports BLEU of a translation model; a parsing model's report is EVALB's"
                        );
                    }
                    parse::evaluate(&translator, src.as_deref(), &refs[0], output.as_deref(), &opts, parsing)
                }
                Evaluation::BleuChrfPerplexity => {
                    decode::evaluate(&translator, src.as_deref(), &refs, output.as_deref(), by_length, &opts)
                }
            }
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
        Command::Bench(BenchArgs { which }) => bench::run(which),
        Command::Serve(args) => crate::serve::run(args),
    }
}

/// Peak resident set size of this process, from /proc (Linux), in bytes.
pub(crate) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
