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

/// glibc raises its mmap threshold (up to 32 MB) each time a large block is freed, after which
/// large buffers come from the heap, which keeps freed memory resident: decoding the Multi30k test
/// set peaked about 50 MB higher for it (BENCHMARKS.md, "int8 and bf16 decoding"). A fixed 2 MiB
/// threshold gives the large buffers (key/value caches, logits, encoder outputs) back to the
/// system when freed, while the `gemm` crate's per-call packing buffers (up to 1 MiB) stay in the
/// heap for reuse: at 128 KiB each of those calls maps fresh pages, and f32 decoding ran ~10%
/// slower for 10 MB less.
fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 2 << 20);
    }
}

/// A reader that closes our stdout early (`transformer evaluate … | head -2`) ends the command
/// as it ends `cat`: quietly, by SIGPIPE, where Rust's default (the signal ignored) makes the next
/// `println!` panic. Not for `serve`, whose clients may close their sockets at any time.
fn quiet_on_closed_stdout(command: &args::Command) {
    if matches!(command, args::Command::Serve(_)) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: signal only sets this process's disposition of SIGPIPE, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    fix_mmap_threshold();
    let cli = args::Cli::parse();
    quiet_on_closed_stdout(&cli.command);
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
