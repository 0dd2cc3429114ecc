//! `quickstart`: the library's [`transformer::quickstart`] (translation) and
//! [`transformer::quickstart::parsing`] with progress bars and the report; `ablate`: the library's
//! [`transformer::ablate`] with the same bars and its table.

use crate::progress::{CountBar, TrainBar};
use anyhow::Result;
use transformer::quickstart::{self, Observer, QuickstartOptions};
use transformer::train::run::Progress;
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

impl Observer for Bars {
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

    fn train(&mut self, p: &Progress) {
        if let Some(b) = &mut self.train {
            b.update(p);
        }
    }

    fn translate(&mut self, done: usize, total: usize) {
        self.test.get_or_insert_with(|| CountBar::new("test sentences", total as u64)).update(done, total);
    }
}

pub fn quickstart(opts: QuickstartOptions) -> Result<()> {
    let mut bars = Bars { train: None, test: None, start: std::time::Instant::now() };
    let report = match opts.task {
        Task::Translation => quickstart::run(&opts, &mut bars).map(|r| r.text()),
        Task::Parsing => quickstart::parsing::run(&opts, &mut bars).map(|r| r.text()),
    };
    bars.close();
    println!("{}", report?);
    Ok(())
}

pub fn ablate(args: crate::args::AblateArgs) -> Result<()> {
    use transformer::ablate::{self, AblateOptions, Budget};
    let budget = match (args.minutes, args.updates) {
        (_, Some(n)) => Budget::Updates(n),
        (Some(m), None) if !(m.is_finite() && m > 0.0) => {
            crate::usage!("--minutes {} must be a positive number", transformer::quickstart::short_number(m))
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
