//! `transformer serve`: an HTTP translation server over one [`Translator`] (docs/serve.md).
//!
//! The layout: [`args`] (the command line, always built), `request` (the JSON body and its
//! limits), `batcher` (the queue and the one thread that decodes), `metrics` (Prometheus text) and
//! `conn` (the accept loop: header and idle timeouts, the connection bound, half-close) and `server`
//! (axum routes, the tokio runtime, start-up and graceful shutdown). Everything but the
//! arguments is behind the `serve` cargo feature, on by default.
//!
//! [`Translator`]: transformer::decode::translator::Translator

mod args;
#[cfg(feature = "serve")]
mod batcher;
#[cfg(feature = "serve")]
mod conn;
#[cfg(feature = "serve")]
mod metrics;
#[cfg(feature = "serve")]
mod request;
#[cfg(feature = "serve")]
mod server;

pub use args::ServeArgs;

/// Runs the server until SIGTERM or Ctrl-C.
#[cfg(feature = "serve")]
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    server::run(args)
}

/// Without the `serve` feature there is no server.
#[cfg(not(feature = "serve"))]
pub fn run(_: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!(
        "this binary was built without the server (the `serve` feature is off); rebuild with default features"
    )
}
