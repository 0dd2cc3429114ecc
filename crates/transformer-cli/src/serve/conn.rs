//! Connections: our own accept loop over hyper's HTTP/1 connection (axum's `serve` offers none of
//! these), so that the server holds against clients that connect and never finish:
//! - a request's headers must arrive within `--header-timeout-seconds` of the connection opening
//!   or of its last answer (hyper's header-read timer, which also closes idle keep-alive
//!   connections);
//! - at most `--max-connections` are open (lowered to fit the open-file limit). One past it takes
//!   the place of the connection idle the longest (one with no request being answered, its
//!   answer written: a keep-alive connection between requests, or one whose headers have not all
//!   arrived), which is closed;
//!   only when every open connection is answering a request does it get one answer from
//!   `overflow` (the server's: `/health` and `/metrics` as usual, 503 to anything else) within a
//!   second, and is closed. So idle sockets, however many, never lock a health check out;
//! - one descriptor is held in reserve: when accepting fails for want of descriptors, it is given
//!   up for the one accept, so even then the next connection is answered;
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
use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};

/// The open connections: a permit each, out of `max`; and room for `overflow` more being answered
/// past the bound. Each open connection has a slot saying whether it is answering
/// a request and how to close it.
pub struct Connections {
    permits: Arc<Semaphore>,
    max: usize,
    overflow: usize,
    slots: Mutex<BTreeMap<u64, Slot>>,
    next: AtomicU64,
}

/// An open connection: busy while a request of it is being answered (its answer's body included);
/// `close` ends it.
struct Slot {
    state: Arc<ConnState>,
    close: Arc<Notify>,
}

/// Whether a connection is answering a request, and since when it has been idle (milliseconds
/// since the server's start).
struct ConnState {
    busy: AtomicBool,
    idle_since: AtomicU64,
}

fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_millis() as u64
}

/// Marks a connection idle again once its answer has been written (it lives in the answer's body,
/// which the connection drops when the last byte is out, or when the request is dropped).
struct Busy(Arc<ConnState>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.idle_since.store(now_ms(), Ordering::Relaxed);
        self.0.busy.store(false, Ordering::Relaxed);
    }
}

/// An answer's body carrying its connection's [`Busy`] mark.
struct Guarded<B> {
    inner: B,
    _busy: Busy,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Guarded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Connections {
    /// Room for `bound.connections` connections and `bound.overflow` answered past them.
    pub fn new(bound: &Bound) -> Self {
        Connections {
            permits: Arc::new(Semaphore::new(bound.connections)),
            max: bound.connections,
            overflow: bound.overflow,
            slots: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        }
    }

    /// How many are open now.
    pub fn open(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    /// A slot for a new connection: its id, its state, and how to close it.
    fn register(&self) -> (u64, Arc<ConnState>, Arc<Notify>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState { busy: AtomicBool::new(false), idle_since: AtomicU64::new(now_ms()) });
        let close = Arc::new(Notify::new());
        let slot = Slot { state: state.clone(), close: close.clone() };
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).insert(id, slot);
        (id, state, close)
    }

    fn unregister(&self, id: u64) {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    /// Closes the connection idle the longest (no request being answered; a keep-alive client
    /// that was just answered is idle the shortest); false when every one is answering.
    fn shed_longest_idle(&self) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let longest = slots
            .iter()
            .filter(|(_, s)| !s.state.busy.load(Ordering::Relaxed))
            .min_by_key(|(&id, s)| (s.state.idle_since.load(Ordering::Relaxed), id))
            .map(|(&id, _)| id);
        let Some(id) = longest else { return false };
        // Removed now, so the next accept picks another one even before this one has closed.
        let slot = slots.remove(&id).expect("found");
        slot.close.notify_one();
        true
    }
}

/// Most connections past the bound that are answered at once (each for at most a second or two);
/// one past these is closed without an answer.
pub const OVERFLOW: usize = 64;

/// Descriptors kept free beside the connections, on top of those open when the bound is set: for
/// the model's files while it loads, the runtime, and what the server opens as it runs.
pub const RESERVE: usize = 16;

/// How many connections the server holds open, and how many past them it answers at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Connections served.
    pub connections: usize,
    /// Connections past the bound answered at once (503, or /health).
    pub overflow: usize,
    /// Why `connections` is below what was asked, when it is.
    pub note: Option<String>,
}

/// `wanted` connections, or fewer so that they fit the soft open-file limit: each holds a file
/// descriptor, and the descriptors open now plus a fixed [`RESERVE`] are kept; of the rest an
/// eighth (at most [`OVERFLOW`]) answers connections past the bound.
pub fn bound_by_file_limit(wanted: usize) -> Bound {
    let soft = std::fs::read_to_string("/proc/self/limits").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("Max open files"))?;
        line.split_whitespace().nth(3)?.parse::<usize>().ok()
    });
    let open_now = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count());
    bound_for(wanted, soft, open_now)
}

/// [`bound_by_file_limit`] for a given soft limit (`None`: unlimited or unknown) and count of open
/// descriptors.
pub fn bound_for(wanted: usize, limit: Option<usize>, open_now: usize) -> Bound {
    let Some(limit) = limit else { return Bound { connections: wanted, overflow: OVERFLOW, note: None } };
    let free = limit.saturating_sub(open_now + RESERVE);
    let overflow = (free / 8).min(OVERFLOW);
    let fit = free - overflow;
    if fit >= wanted {
        return Bound { connections: wanted, overflow, note: None };
    }
    let connections = fit.max(1);
    let note = format!(
        "--max-connections lowered to {connections}: the open-file limit is {limit} (ulimit -n), {open_now} are open \
         and {RESERVE} kept free"
    );
    Bound { connections, overflow, note: Some(note) }
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
    let refusals = Arc::new(Semaphore::new(connections.overflow));
    let graceful = GracefulShutdown::new();
    let mut stop = pin!(stop);
    let mut accept_error_logged = false;
    // The reserved descriptor, given up for one accept when there are none left.
    let mut spare = std::fs::File::open("/dev/null").ok();
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = &mut stop => break,
        };
        let stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                accept_failed(e, &mut spare, &mut accept_error_logged, &connections, &metrics).await;
                continue;
            }
        };
        accept_error_logged = false;
        if spare.is_none() {
            spare = std::fs::File::open("/dev/null").ok();
        }
        let _ = stream.set_nodelay(true);
        let mut permit = connections.permits.clone().try_acquire_owned().ok();
        if permit.is_none() && connections.shed_longest_idle() {
            // The closed connection's permit comes back as soon as its task sees the notice.
            metrics.connections_shed.fetch_add(1, Ordering::Relaxed);
            permit = tokio::time::timeout(Duration::from_millis(500), connections.permits.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok);
        }
        let Some(permit) = permit else {
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
        let (id, state, close) = connections.register();
        let inner = TowerToHyperService::new(router.clone());
        let service = hyper::service::service_fn(move |req| {
            state.busy.store(true, Ordering::Relaxed);
            let busy = Busy(state.clone());
            let answer = hyper::service::Service::call(&inner, req);
            async move {
                let r = answer.await;
                r.map(|resp| resp.map(|inner| Guarded { inner, _busy: busy }))
            }
        });
        let conn = http.serve_connection(TokioIo::new(stream), service);
        let watched = graceful.watch(conn);
        let connections = connections.clone();
        tokio::spawn(async move {
            // A header timeout, a client gone, or a newer connection taking this idle one's
            // place is the connection's end, not the server's.
            tokio::select! {
                _ = watched => {}
                _ = close.notified() => {}
            }
            connections.unregister(id);
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// After an accept that failed with `e`: a connection its client dropped is passed over; out of
/// file descriptors (EMFILE, ENFILE), the reserved descriptor `spare` makes room for the next
/// accept at once and the longest idle connection is closed to make room for the ones after it
/// (without a reserve, a short wait first); any other error waits a little. Each is logged once
/// until an accept succeeds (`logged`).
async fn accept_failed(
    e: io::Error,
    spare: &mut Option<std::fs::File>,
    logged: &mut bool,
    connections: &Connections,
    metrics: &Metrics,
) {
    match e {
        e if matches!(
            e.kind(),
            io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
        ) => {}
        e if matches!(e.raw_os_error(), Some(23 | 24)) => {
            if !*logged {
                eprintln!("warning: cannot accept a connection ({e}); closing an idle one to make room");
                *logged = true;
            }
            if spare.take().is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if connections.shed_longest_idle() {
                metrics.connections_shed.fetch_add(1, Ordering::Relaxed);
            }
        }
        e => {
            if !*logged {
                eprintln!("warning: cannot accept a connection ({e}); retrying");
                *logged = true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_keeps_a_fixed_reserve_not_half_the_descriptors() {
        // The audit's case: at `ulimit -n 64` with 11 descriptors open the bound was 1.
        let b = bound_for(256, Some(64), 11);
        assert_eq!((b.connections, b.overflow), (33, 4));
        assert!(b.note.as_deref().is_some_and(|n| n.contains("lowered to 33")), "{b:?}");
        // At 256 it held back 128; now the open ones, the reserve and the overflow's eighth.
        let b = bound_for(1000, Some(256), 11);
        assert_eq!((b.connections, b.overflow), (201, 28));
        // Enough room: what was asked, with the full overflow.
        assert_eq!(bound_for(256, Some(65536), 11), Bound { connections: 256, overflow: OVERFLOW, note: None });
        assert_eq!(bound_for(256, None, 11), Bound { connections: 256, overflow: OVERFLOW, note: None });
        // Nothing free: one connection, no overflow, and a note.
        let b = bound_for(256, Some(20), 11);
        assert_eq!((b.connections, b.overflow), (1, 0));
    }
}
