//! Connections: our own accept loop over hyper's HTTP/1 connection (axum's `serve` offers none of
//! these), so that the server holds against clients that connect and never finish:
//! - a request's headers must arrive within `--header-timeout-seconds` of the connection opening
//!   or of its last answer (hyper's header-read timer, which also closes idle keep-alive
//!   connections);
//! - at most `--max-connections` are open (lowered to fit the open-file limit); one past it gets
//!   one answer from `overflow` (the server's: `/health` as usual, 503 to anything else) within
//!   a second, and is closed, so a health check keeps answering while the bound is full;
//! - a client that half-closes after a complete request (`shutdown(SHUT_WR)`, `nc -N`) gets its
//!   answer;
//! - on shutdown no connection is accepted, idle ones close at once and the others finish their
//!   request (the caller bounds that with `--drain-seconds`).

use super::metrics::Metrics;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The open connections: a permit each, out of `max`.
pub struct Connections {
    permits: Arc<Semaphore>,
    max: usize,
}

impl Connections {
    /// Room for `max` connections.
    pub fn new(max: usize) -> Self {
        Connections { permits: Arc::new(Semaphore::new(max)), max }
    }

    /// How many are open now.
    pub fn open(&self) -> usize {
        self.max - self.permits.available_permits()
    }
}

/// Connections past the bound that are being answered at once (each for at most a second or two);
/// one past these is closed without an answer.
pub const OVERFLOW: usize = 64;

/// `wanted` connections, or fewer so that they fit the soft open-file limit (each holds a file
/// descriptor; 64 are kept for the model, the listener and the runtime, and [`OVERFLOW`] for the
/// answers past the bound). Returns the bound and, when it was lowered, why.
pub fn bound_by_file_limit(wanted: usize) -> (usize, Option<String>) {
    let soft = std::fs::read_to_string("/proc/self/limits").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("Max open files"))?;
        line.split_whitespace().nth(3)?.parse::<usize>().ok()
    });
    match soft {
        Some(limit) if limit.saturating_sub(64 + OVERFLOW) < wanted => {
            let fit = limit.saturating_sub(64 + OVERFLOW).max(1);
            (fit, Some(format!("--max-connections lowered to {fit}: the open-file limit is {limit} (ulimit -n)")))
        }
        _ => (wanted, None),
    }
}

/// Serves `router` on `listener` until `stop` resolves, then lets open connections finish. A
/// connection past the bound is served one request by `overflow` (within a second) and closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    overflow: Router,
    connections: Arc<Connections>,
    header_timeout: Duration,
    metrics: Arc<Metrics>,
    stop: impl Future<Output = ()>,
) -> io::Result<()> {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(header_timeout).keep_alive(true).half_close(true);
    // Past the bound: one request, read within a second, then closed (a bounded number at once).
    let mut quick = http1::Builder::new();
    quick.timer(TokioTimer::new()).header_read_timeout(Duration::from_secs(1)).keep_alive(false).half_close(true);
    let refusals = Arc::new(Semaphore::new(OVERFLOW));
    let graceful = GracefulShutdown::new();
    let mut stop = pin!(stop);
    let mut accept_error_logged = false;
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
                ) => continue,
                Err(e) => {
                    // Out of file descriptors (EMFILE, ENFILE) or the like: wait a little, so the
                    // connections open now can finish and free some.
                    if !accept_error_logged {
                        eprintln!("warning: cannot accept a connection ({e}); retrying");
                        accept_error_logged = true;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        accept_error_logged = false;
        let _ = stream.set_nodelay(true);
        let Ok(permit) = connections.permits.clone().try_acquire_owned() else {
            if let Ok(p) = refusals.clone().try_acquire_owned() {
                let conn = quick.serve_connection(TokioIo::new(stream), TowerToHyperService::new(overflow.clone()));
                tokio::spawn(async move {
                    let _p = p;
                    let _ = tokio::time::timeout(Duration::from_secs(2), conn).await;
                });
            } else {
                // Past the overflow's room as well: closed without an answer.
                metrics.connections_refused.fetch_add(1, Ordering::Relaxed);
            }
            continue;
        };
        let conn = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router.clone()));
        let watched = graceful.watch(conn);
        tokio::spawn(async move {
            // A header timeout or a client gone is the connection's end, not the server's.
            let _ = watched.await;
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
