//! The `transformer` command-line tool: parse the arguments, build the thread pool, run the
//! command on a worker of the pool, and map its error to an exit code (0 success, 1 runtime error,
//! 2 usage error). The commands are thin layers over the library (`commands/`).

mod args;
mod commands;
mod progress;
mod serve;
mod usage;

use clap::Parser;
use std::process::ExitCode;
use usage::Usage;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    if let Some(n) = cli.threads {
        if let Err(e) = rayon::ThreadPoolBuilder::new().num_threads(n as usize).build_global() {
            eprintln!("error: cannot start {n} threads: {e}");
            return ExitCode::FAILURE;
        }
    }
    // The command runs on a worker of the thread pool, so its kernels' parallel loops start as
    // cheap in-pool forks rather than as jobs injected from outside the pool (which cost a wake-up
    // and a wait on every call: measured 10-20% of decoding time).
    let (tx, rx) = std::sync::mpsc::channel();
    let command = cli.command;
    rayon::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commands::run(command))));
    });
    let result = match rx.recv() {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => Err(anyhow::anyhow!("the command's thread ended without a result")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            if e.downcast_ref::<Usage>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The error and its causes, joined by ": ", leaving out a cause whose text the message already
/// holds (the library's errors name their cause in their own message).
fn error_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}
