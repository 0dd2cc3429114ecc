//! `quickstart`: the library's [`transformer::recipes::quickstart`] (translation) and
//! [`transformer::recipes::parsing`] with progress bars and the report; `ablate`: the library's
//! [`transformer::recipes::ablate`] with the same bars and its table.

use crate::args::QuickstartArgs;
use crate::progress::{CountBar, TrainBar};
use anyhow::Result;
use transformer::events::{Events, Update};
use transformer::recipes::quickstart::{self, QuickstartOptions};
use transformer::Task;

/// Renders the quick start's steps: a line per stage, the training bar, the test-set bar.
struct Bars {
    train: Option<TrainBar>,
    test: Option<CountBar>,
    start: std::time::Instant,
}

impl Bars {
    fn close(&mut self) {
        if let Some(b) = self.train.take() {
            b.finish();
        }
        if let Some(b) = self.test.take() {
            b.finish();
        }
    }
}

impl Events for Bars {
    fn stage(&mut self, name: &str) {
        self.close();
        eprintln!("== {name} ({:.0} s)", self.start.elapsed().as_secs_f64());
        if name.starts_with("training") {
            self.train = Some(TrainBar::new());
        }
    }

    fn log(&mut self, message: &str) {
        match (&self.train, &self.test) {
            (Some(b), _) => b.log(message),
            (_, Some(b)) => b.println(message),
            _ => eprintln!("{message}"),
        }
    }

    fn update(&mut self, p: &Update) {
        if let Some(b) = &mut self.train {
            b.update(p);
        }
    }

    fn progress(&mut self, done: usize, total: usize) {
        self.test.get_or_insert_with(|| CountBar::new("test sentences", total as u64)).update(done, total);
    }
}

pub fn quickstart(opts: QuickstartOptions) -> Result<()> {
    let mut bars = Bars { train: None, test: None, start: std::time::Instant::now() };
    let report = match opts.task {
        Task::Translation => quickstart::run(&opts, &mut bars).map(|r| r.text()),
        Task::Parsing => transformer::recipes::parsing::run(&opts, &mut bars).map(|r| r.text()),
    };
    bars.close();
    println!("{}", report?);
    Ok(())
}

pub fn ablate(args: crate::args::AblateArgs) -> Result<()> {
    use transformer::recipes::ablate::{self, AblateOptions, Budget};
    let budget = match (args.minutes, args.updates) {
        (_, Some(n)) => Budget::Updates(n),
        (Some(m), None) if !(m.is_finite() && m > 0.0) => {
            crate::usage!("--minutes {} must be a positive number", transformer::recipes::short_number(m))
        }
        (Some(m), None) => Budget::Minutes(m),
        (None, None) => AblateOptions::default().budget,
    };
    let rows = match ablate::parse_rows(&args.rows) {
        Ok(rows) => rows,
        Err(e) => crate::usage!("{e}"),
    };
    let opts = AblateOptions {
        output: args.output,
        rows,
        budget,
        seeds: args.seeds,
        dev_sentences: args.dev_sentences.map(|n| n as usize),
        average: args.average as usize,
        base_overrides: args.overrides,
    };
    let mut bars = Bars { train: None, test: None, start: std::time::Instant::now() };
    let report = ablate::run(&opts, &mut bars);
    bars.close();
    let report = report?;
    println!("{}", report.markdown);
    for f in ["table.md", "table.csv", "bleu.svg"] {
        println!("wrote {}", opts.output.join(f).display());
    }
    Ok(())
}

/// `transformer quickstart`: the options of one task (a flag of the other task is a usage error),
/// defaults filled in, then the run.
pub fn run(args: QuickstartArgs) -> Result<()> {
    let QuickstartArgs {
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
    } = args;
    let d = transformer::recipes::quickstart::QuickstartOptions::default();
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
        Task::Parsing => transformer::recipes::parsing::DEFAULT_OUTPUT.into(),
    };
    quickstart(transformer::recipes::quickstart::QuickstartOptions {
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
