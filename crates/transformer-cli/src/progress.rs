//! Progress on long work: an `indicatif` bar when stderr is a terminal, plain lines otherwise (a
//! log file or a pipe gets one line every few seconds, never carriage returns).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use transformer::events::{Events, Update};

/// Seconds between plain progress lines.
const PLAIN_EVERY: f64 = 2.0;

/// Whether stderr is a terminal (and bars are wanted).
pub fn interactive() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("TRANSFORMER_NO_PROGRESS").is_none()
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).expect("a valid template").progress_chars("=> ")
}

/// Formats seconds as `M:SS`.
fn clock(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}

/// Training progress: a bar over the time budget (or the epoch's batches when there is none)
/// showing step, loss, tokens/s, validation perplexity and ETA.
pub struct TrainBar {
    bar: Option<ProgressBar>,
    start: Instant,
    last_line: Option<Instant>,
}

impl TrainBar {
    pub fn new() -> Self {
        let bar = interactive().then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(style("{spinner} train [{bar:30}] {msg}"));
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        TrainBar { bar, start: Instant::now(), last_line: None }
    }

    /// A message above the bar (or a plain line with the time since start).
    pub fn log(&self, msg: &str) {
        let line = format!("[{:>7.1}s] {msg}", self.start.elapsed().as_secs_f64());
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// After every update.
    pub fn update(&mut self, p: &Update) {
        match &self.bar {
            Some(b) => {
                let (pos, len) = match p.limit_s {
                    Some(limit) => (p.elapsed_s.min(limit) as u64, limit.max(1.0) as u64),
                    None => (p.cursor as u64, p.epoch_batches as u64),
                };
                b.set_length(len);
                b.set_position(pos);
                let ppl = p.valid_perplexity.map(|v| format!("  val ppl {v:.2}")).unwrap_or_default();
                let eta = p.eta_s.map(|s| format!("  ETA {}", clock(s))).unwrap_or_default();
                b.set_message(format!(
                    "{} elapsed  epoch {} step {}  loss {:.3}  {:.0} tok/s{ppl}{eta}",
                    clock(p.elapsed_s),
                    p.epoch,
                    p.step,
                    p.loss,
                    p.tokens_per_s
                ));
            }
            None => {
                if self.last_line.is_none_or(|t| t.elapsed().as_secs_f64() >= PLAIN_EVERY) {
                    self.log(&p.line());
                    self.last_line = Some(Instant::now());
                }
            }
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// A run's messages above the bar, and its updates on it.
impl Events for TrainBar {
    fn log(&mut self, message: &str) {
        TrainBar::log(self, message);
    }

    fn update(&mut self, update: &Update) {
        TrainBar::update(self, update);
    }
}

/// Progress over a count (sentences translated, lines read): a bar on a terminal, a line every
/// few seconds otherwise.
pub struct CountBar {
    bar: Option<ProgressBar>,
    what: String,
    last_line: Instant,
}

impl CountBar {
    /// `what` names the unit, e.g. "sentences".
    pub fn new(what: &str, total: u64) -> Self {
        let bar = interactive().then(|| {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            b.set_style(style(&format!(
                "{{spinner}} [{{bar:30}}] {{pos}}/{{len}} {what}  {{per_sec}}  elapsed {{elapsed}}  ETA {{eta}}"
            )));
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        CountBar { bar, what: what.to_string(), last_line: Instant::now() }
    }

    pub fn update(&mut self, done: usize, total: usize) {
        match &self.bar {
            Some(b) => {
                b.set_length(total as u64);
                b.set_position(done as u64);
            }
            None => {
                if self.last_line.elapsed().as_secs_f64() >= 5.0 && done < total {
                    eprintln!("{done}/{total} {}", self.what);
                    self.last_line = Instant::now();
                }
            }
        }
    }

    /// A message above the bar.
    pub fn println(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Warnings and messages above the bar, the count on it.
impl Events for CountBar {
    fn log(&mut self, message: &str) {
        self.println(message);
    }

    fn progress(&mut self, done: usize, total: usize) {
        self.update(done, total);
    }
}

/// A download: bytes received of the announced length (a spinner when none is announced) on a
/// terminal, nothing otherwise (the download's own lines say when it ends).
pub struct DownloadBar(Option<ProgressBar>);

impl DownloadBar {
    pub fn new() -> Self {
        DownloadBar(interactive().then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(style("{spinner} download [{bar:30}] {bytes}/{total_bytes}  {bytes_per_sec}  ETA {eta}"));
            b.enable_steady_tick(Duration::from_millis(200));
            b
        }))
    }

    pub fn update(&self, done: u64, total: Option<u64>) {
        if let Some(b) = &self.0 {
            match total {
                Some(t) => b.set_length(t),
                None => b.set_style(
                    ProgressStyle::with_template("{spinner} download {bytes}  {bytes_per_sec}")
                        .expect("a valid template"),
                ),
            }
            b.set_position(done);
        }
    }

    pub fn println(&self, msg: &str) {
        match &self.0 {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

/// A download's messages above its bar, and its bytes on the bar.
impl Events for DownloadBar {
    fn log(&mut self, message: &str) {
        DownloadBar::println(self, message);
    }

    fn download(&mut self, done: u64, total: Option<u64>) {
        DownloadBar::update(self, done, total);
    }
}

/// A spinner for work of unknown length (learning a BPE, binarising): a spinner with the elapsed
/// time on a terminal, nothing otherwise (the work's own lines say when it ends).
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    pub fn new(msg: &str) -> Self {
        Spinner(interactive().then(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("a valid template"));
            b.set_message(msg.to_string());
            b.enable_steady_tick(Duration::from_millis(120));
            b
        }))
    }

    pub fn println(&self, msg: &str) {
        match &self.0 {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
