//! The HTTP side: axum routes on a tokio runtime of its own, start-up (bind, print the address,
//! load the model, then ready) and graceful shutdown on SIGTERM or Ctrl-C. Decoding never runs on
//! the runtime's threads: handlers queue their sentences and await a oneshot reply from the
//! batcher, which runs on the thread that called [`run`] (a worker of the rayon pool, where the
//! model's parallel kernels fork cheaply).

use super::args::ServeArgs;
use super::batcher::{self, Budget, Job, Output, Queue, Refused};
use super::conn::{self, Connections};
use super::metrics::{Gauges, Metrics};
use super::request::{self, Limits};
use anyhow::{Context, Result};
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Version};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, Notify};
use transformer::decode::translator::{SessionOptions, Translator};
use transformer::decode::{BeamConfig, Guide, SearchOverrides};
use transformer::Task;

const INDEX_HTML: &str = include_str!("page/index.html");
const PAGE_CSS: &str = include_str!("page/page.css");
const PAGE_JS: &str = include_str!("page/page.js");

/// What every handler shares.
struct App {
    /// Set once the model is loaded (`/health` is 503 until then).
    translator: OnceLock<Arc<Translator>>,
    queue: Queue,
    metrics: Arc<Metrics>,
    limits: Limits,
    /// The longest sentence in BPE tokens (resolved once the model is loaded).
    max_sentence_tokens: Option<usize>,
    /// The largest request body in bytes.
    body_limit: usize,
    /// How long a request body may take to arrive.
    body_timeout: Duration,
    /// The open connections (for `/metrics`).
    connections: Arc<Connections>,
    /// Most attention weights one request may ask for.
    max_attention_weights: u64,
}

/// An error answer: a status and `{"error": "…"}`.
struct ApiError {
    status: StatusCode,
    message: String,
    retry_after: Option<u32>,
    /// Close the connection after the answer (the request's body was not read to its end).
    close: bool,
    /// The request was abandoned by its client (see [`Abandoned`]).
    abandoned: bool,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), retry_after: None, close: false, abandoned: false }
    }

    fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            retry_after: Some(1),
            close: false,
            abandoned: false,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(json!({ "error": self.message }))).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.close {
            r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if self.abandoned {
            r.extensions_mut().insert(Abandoned);
        }
        r
    }
}

fn loading() -> ApiError {
    ApiError::unavailable("the model is still loading; retry when GET /health answers 200")
}

/// Marks the answer to a request whose body never arrived in full: `track` counts it apart.
#[derive(Clone, Copy)]
struct Abandoned;

/// Bytes read past `--max-body-bytes` before a 413 closes the connection (as nginx's lingering
/// close): a client that writes its whole body before reading then reads the 413, not a reset.
const DRAIN_BYTES: usize = 8 << 20;

/// Whether a body error is the client's malformed framing (a chunk size that is not hex, a chunk
/// without its line end), not a client that went away: hyper reports those as invalid input or data.
fn malformed_framing(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(err) = cause {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(io.kind(), std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData);
        }
        cause = err.source();
    }
    false
}

/// What the headers say about a request body before any of it is read: a transfer coding before
/// `chunked` is refused (501: the body would be read as something it is not; hyper itself answers
/// 400 to codings that do not end in `chunked`), and an HTTP/1.1 request that expects
/// `100 Continue` for a body of a known length over `limit` gets its 413 at once, before the client
/// is told to send it (`length` is hyper's own reading of Content-Length).
fn check_body_headers(
    headers: &HeaderMap,
    version: Version,
    length: Option<u64>,
    limit: usize,
) -> Result<(), ApiError> {
    for value in headers.get_all(header::TRANSFER_ENCODING) {
        let text = value.to_str().unwrap_or("?");
        if let Some(coding) = text.split(',').map(str::trim).find(|c| !c.eq_ignore_ascii_case("chunked")) {
            let mut e = ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                format!("Transfer-Encoding {coding:?} is not supported: send the body as it is, or chunked"),
            );
            e.close = true;
            return Err(e);
        }
    }
    // As hyper: the last Expect header counts, and HTTP/1.0 has none.
    let expects = version > Version::HTTP_10
        && headers
            .get_all(header::EXPECT)
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if let (true, Some(n)) = (expects, length) {
        if n > limit as u64 {
            let mut e = too_large(limit);
            e.message = format!("{} (Content-Length {n})", e.message);
            return Err(e);
        }
    }
    Ok(())
}

/// The 413 for a body over `limit` bytes; the connection closes after it.
fn too_large(limit: usize) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the request body is larger than the limit of {limit} bytes (--max-body-bytes): send fewer or shorter sentences per request"
        ),
    );
    e.close = true;
    e
}

/// Reads a request body of at most `limit` bytes within `timeout`. A larger one is read on (up to
/// [`DRAIN_BYTES`] more, in the same time) and refused with 413; malformed chunked framing is a 400;
/// a body that stops arriving, or whose client goes away, is abandoned (408). Each closes the
/// connection.
async fn read_body(mut body: Body, limit: usize, timeout: Duration) -> Result<Vec<u8>, ApiError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let too_large = || too_large(limit);
    let abandoned = |why: &str| {
        let mut e = ApiError::new(StatusCode::REQUEST_TIMEOUT, format!("the request body {why}"));
        e.close = true;
        e.abandoned = true;
        e
    };
    let mut buf = Vec::new();
    let mut over: Option<usize> = None;
    loop {
        let frame = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx));
        match tokio::time::timeout_at(deadline, frame).await {
            Err(_) if over.is_some() => return Err(too_large()),
            Err(_) => {
                return Err(abandoned(&format!(
                    "did not arrive in full within {} s (--body-timeout-seconds)",
                    timeout.as_secs()
                )))
            }
            Ok(None) => break,
            Ok(Some(Err(_))) if over.is_some() => return Err(too_large()),
            Ok(Some(Err(e))) if malformed_framing(&e) => {
                let mut bad = ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("the request body's chunked framing is malformed: {e}"),
                );
                bad.close = true;
                return Err(bad);
            }
            Ok(Some(Err(_))) => return Err(abandoned("stopped arriving (the client went away)")),
            Ok(Some(Ok(frame))) => {
                let Ok(data) = frame.into_data() else { continue };
                match over.as_mut() {
                    Some(read) => {
                        *read += data.len();
                        if *read > DRAIN_BYTES {
                            return Err(too_large());
                        }
                    }
                    None if buf.len() + data.len() > limit => {
                        over = Some(0);
                        buf = Vec::new();
                    }
                    None => buf.extend_from_slice(&data),
                }
            }
        }
    }
    match over {
        Some(_) => Err(too_large()),
        None => Ok(buf),
    }
}

async fn translate(
    State(app): State<Arc<App>>,
    version: Version,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    check_body_headers(&headers, version, body.size_hint().exact(), app.body_limit)?;
    let body = read_body(body, app.body_limit, app.body_timeout).await?;
    let req = request::parse(&body, &app.limits).map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, m))?;
    let t = app.translator.get().ok_or_else(loading)?;
    if req.attention && t.ensemble_size() > 1 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "field `attention`: this server decodes an ensemble of {} models, and attention weights are one \
                 model's: leave out `attention`, or serve one --checkpoint",
                t.ensemble_size()
            ),
        ));
    }
    let srcs = encode_sources(&app, t, &req.q)?;
    let search = search_of(t, &req)?;
    if req.attention {
        check_attention_size(&app, t, &srcs, &search)?;
    }
    let guides = guides_of(t, &req, &srcs, &search)?;
    // With a shortlist, requests use it unless they say not to.
    let use_shortlist = req.use_shortlist.unwrap_or(t.shortlist().is_some());
    if use_shortlist && t.shortlist().is_none() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "field `use_shortlist`: this server has no vocabulary shortlist (start it with --shortlist FILE)",
        ));
    }
    let outputs = match srcs.is_empty() {
        true => Vec::new(),
        false => {
            let (attention, alignment) = (req.attention, req.alignment);
            let job = Job { srcs, search, use_shortlist, guides, attention, alignment, reply: oneshot::channel().0 };
            decode(&app, job).await?
        }
    };
    Ok(answer(&req, outputs))
}

/// The token ids of a request's sentences, each within the length limit.
fn encode_sources(app: &App, t: &Translator, q: &[String]) -> Result<Vec<Vec<u32>>, ApiError> {
    let max_len = app.max_sentence_tokens.unwrap_or(t.model().config.max_positions);
    let mut srcs = Vec::with_capacity(q.len());
    for (i, line) in q.iter().enumerate() {
        let ids = t.encode_source(line).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("q[{i}]: {e}")))?;
        if ids.len() > max_len {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "sentence q[{i}] has {} BPE tokens; the limit is {max_len} (--max-sentence-tokens, at most the model's max_positions): split it",
                    ids.len()
                ),
            ));
        }
        srcs.push(ids);
    }
    Ok(srcs)
}

/// The request's search: the model's task's settings with the request's beam, α and n-best.
fn search_of(t: &Translator, req: &request::TranslateRequest) -> Result<BeamConfig, ApiError> {
    let defaults = BeamConfig::for_task(t.task());
    let c = req.controls;
    // Sampling: `nbest` samples a sentence, each a row of the search.
    let beam = if req.sampling.is_some() { req.nbest.or(Some(1)) } else { req.beam };
    let overrides = SearchOverrides {
        beam,
        alpha: req.alpha,
        stop: req.stop,
        nbest: req.nbest.or(Some(1)),
        min_len: Some(c.min_len),
        repetition_penalty: Some(c.repetition_penalty),
        no_repeat_ngram: Some(c.no_repeat_ngram),
        sampling: req.sampling,
        end_at_limit: Some(req.end_at_limit),
        ..Default::default()
    };
    defaults.with(&overrides).map_err(|e| {
        let (nbest, beam) = (overrides.nbest.unwrap_or(1), overrides.beam.unwrap_or(defaults.beam));
        let message = match nbest > beam {
            true => format!("field `nbest` ({nbest}) is larger than the beam size {beam}"),
            false => e.to_string(),
        };
        ApiError::new(StatusCode::BAD_REQUEST, message)
    })
}

/// The answer to a request for attention holds layers × heads × output length × source length
/// weights per sentence: bounded before decoding, with the longest output the search allows.
fn check_attention_size(app: &App, t: &Translator, srcs: &[Vec<u32>], search: &BeamConfig) -> Result<(), ApiError> {
    let c = &t.model().config;
    let cells: u64 = srcs
        .iter()
        .map(|s| {
            let out = (search.max_len_a * s.len() as f64) as u64 + search.max_len_b as u64 + 1;
            (c.n_layers * c.n_heads) as u64 * out * s.len() as u64
        })
        .sum();
    if cells > app.max_attention_weights {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "field `attention`: these sentences could return up to {cells} attention weights, more than the limit of {} (--max-attention-weights): ask for attention on fewer or shorter sentences",
                app.max_attention_weights
            ),
        ));
    }
    Ok(())
}

/// The request's `prefix` and `constraints` as guides, one a sentence (none when neither is
/// given), checked against the search: a 400 naming the field otherwise.
fn guides_of(
    t: &Translator,
    req: &request::TranslateRequest,
    srcs: &[Vec<u32>],
    search: &BeamConfig,
) -> Result<Vec<Guide>, ApiError> {
    if req.prefix.is_empty() && req.constraints.is_empty() {
        return Ok(Vec::new());
    }
    let bad =
        |what: &str, e: transformer::Error| ApiError::new(StatusCode::BAD_REQUEST, format!("field `{what}`: {e}"));
    let guides = (0..srcs.len())
        .map(|i| {
            let prefix = req.prefix.get(i).and_then(|p| p.as_deref());
            let g = t.encode_guide(prefix, &[]).map_err(|e| bad(&format!("prefix[{i}]"), e))?;
            let phrases = req.constraints.get(i).map_or(&[][..], |c| &c[..]);
            let phrases = t.encode_guide(None, phrases).map_err(|e| bad(&format!("constraints[{i}]"), e))?.phrases;
            Ok(Guide { phrases, ..g })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    t.check_guides(srcs, &guides, search).map_err(|e| bad("prefix` or `constraints", e))?;
    Ok(guides)
}

/// A job's sentences decoded by the batcher: queued, then awaited (its `reply` is replaced by the
/// channel awaited here).
async fn decode(app: &App, mut job: Job) -> Result<Vec<Output>, ApiError> {
    let (tx, rx) = oneshot::channel();
    job.reply = tx;
    match app.queue.push(job) {
        Ok(()) => {}
        Err(Refused::Full { waiting, limit }) => {
            app.metrics.rejected_full.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(ApiError::unavailable(format!(
                "the queue is full ({waiting} sentences waiting, the limit is {limit}, --max-queue); retry after 1 s"
            )));
        }
        Err(Refused::Closed) => return Err(ApiError::unavailable("the server is shutting down")),
    }
    match rx.await {
        Ok(Ok(outputs)) => Ok(outputs),
        Ok(Err(m)) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, m)),
        Err(_) => Err(ApiError::unavailable("the server stopped before decoding the request")),
    }
}

/// The JSON answer: the translations; the n-best lists when asked for; the sentences the model's
/// positions cut short, if any; the attention weights when asked for.
fn answer(req: &request::TranslateRequest, outputs: Vec<Output>) -> Response {
    let mut answer = serde_json::Map::new();
    answer.insert("translations".into(), outputs.iter().map(|o| json!(o.nbest[0].0)).collect());
    if req.nbest.is_some() {
        let lists = outputs
            .iter()
            .map(|o| {
                o.nbest.iter().map(|(text, lp, score)| json!({"text": text, "log_prob": lp, "score": score})).collect()
            })
            .collect();
        answer.insert("nbest".into(), serde_json::Value::Array(lists));
    }
    // The sentences whose output the model's positions stopped before the length limit (0-based),
    // only when there are any: their translations are cut where the model had to stop.
    let capped: Vec<usize> = outputs.iter().enumerate().filter(|(_, o)| o.capped).map(|(i, _)| i).collect();
    if !capped.is_empty() {
        answer.insert("capped".into(), json!(capped));
    }
    if req.alignment.is_some() {
        answer.insert(
            "alignments".into(),
            outputs.iter().map(|o| json!(o.alignment.clone().unwrap_or_default())).collect(),
        );
    }
    if req.attention {
        answer.insert("attention".into(), outputs.into_iter().map(|o| o.attention.unwrap_or_default()).collect());
    }
    Json(serde_json::Value::Object(answer)).into_response()
}

async fn health(State(app): State<Arc<App>>) -> Result<Response, ApiError> {
    let t = app.translator.get().ok_or_else(loading)?;
    let c = &t.model().config;
    Ok(Json(json!({
        "status": "ready",
        "model": {
            "layers": c.n_layers, "d_model": c.d_model, "heads": c.n_heads, "vocab": c.vocab_size,
            "max_positions": c.max_positions,
        },
    }))
    .into_response())
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let (queue_sentences, queue_requests) = app.queue.depth();
    let text = app.metrics.render(&Gauges {
        queue_sentences,
        queue_requests,
        ready: app.translator.get().is_some(),
        connections_open: app.connections.open(),
    });
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "no route {} {}: the routes are GET /, GET /health, GET /metrics and POST /translate",
            req.method(),
            req.uri().path()
        ),
    )
}

async fn wrong_method(req: Request) -> ApiError {
    let allowed = if req.uri().path() == "/translate" { "POST" } else { "GET" };
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} does not take {}: use {allowed}", req.uri().path(), req.method()),
    )
}

/// Counts every answer by route and status, and times `/translate`.
async fn track(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let route = match req.uri().path() {
        "/" => "/",
        "/translate" => "/translate",
        "/health" => "/health",
        "/metrics" => "/metrics",
        "/page.js" | "/page.css" => "/page",
        _ => "other",
    };
    let start = Instant::now();
    let response = next.run(req).await;
    if response.extensions().get::<Abandoned>().is_some() {
        // Not an answer anyone waited for: neither a 4xx of the API nor a latency.
        app.metrics.abandoned.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return response;
    }
    if route == "/translate" {
        app.metrics.latency.observe(start.elapsed().as_secs_f64());
    }
    app.metrics.request(route, response.status().as_u16());
    response
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/page.css", get(|| async { asset("text/css; charset=utf-8", PAGE_CSS) }))
        .route("/page.js", get(|| async { asset("text/javascript; charset=utf-8", PAGE_JS) }))
        .route("/translate", post(translate))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn_with_state(app.clone(), track))
        .with_state(app)
}

/// What a connection past `--max-connections` is served: `/health` as usual (so a health check
/// keeps answering while the bound is full), 503 to anything else, counted as refused.
fn overflow_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(too_many_connections)
        .with_state(app)
}

async fn too_many_connections(State(app): State<Arc<App>>, req: Request) -> ApiError {
    app.metrics.connections_refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Read (a bounded amount of) the body first, so a client that writes before it reads gets
    // the answer rather than a reset.
    let _ = tokio::time::timeout(Duration::from_secs(1), axum::body::to_bytes(req.into_body(), 64 * 1024)).await;
    let mut e = ApiError::unavailable("too many open connections (--max-connections); retry in a moment");
    e.close = true;
    e
}

/// Resolves on SIGTERM, SIGINT (Ctrl-C) or `stop` (a model that did not load).
async fn shutdown_signal(stop: Arc<Notify>) {
    stop.notified().await;
}

/// Runs the server: binds, prints `listening on http://ADDR`, loads the model (`/health` turns
/// 200 and `ready` is printed), decodes on this thread until a signal, then drains and returns.
/// Installs the SIGTERM and SIGINT handlers (each tells `stop` and `drain`), checks `--host` and
/// binds the listening socket. The handlers go in before the address is printed, so a SIGTERM
/// sent as soon as the address is known is never missed.
async fn listen(args: &ServeArgs, stop: &Arc<Notify>, drain: &Arc<Notify>) -> Result<tokio::net::TcpListener> {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::interrupt()] {
        let mut s = signal(kind).context("cannot install a signal handler")?;
        let stop = Arc::clone(stop);
        let drain = Arc::clone(drain);
        tokio::spawn(async move {
            s.recv().await;
            eprintln!("shutting down: no new connections; finishing the requests in flight");
            stop.notify_one();
            drain.notify_one();
        });
    }
    if args.host.parse::<std::net::IpAddr>().is_err()
        && tokio::net::lookup_host((args.host.as_str(), args.port)).await.map_or(true, |mut a| a.next().is_none())
    {
        anyhow::bail!(
            "--host {:?} is not an address to listen on: give an IP address (127.0.0.1 for this machine only, \
             0.0.0.0 for every interface) or a host name this machine resolves",
            args.host
        );
    }
    tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await.with_context(|| {
        format!("cannot listen on {}:{} (is the port taken? --port 0 picks a free one)", args.host, args.port)
    })
}

/// Waits for the server to stop, or after `drain` for at most `drain_seconds` more, closing the
/// connections still open then; then closes the queue so the batcher returns.
async fn watch(
    mut server: tokio::task::JoinHandle<std::io::Result<()>>,
    app: Arc<App>,
    drain: Arc<Notify>,
    drain_seconds: u64,
    connections: Arc<Connections>,
) -> Result<()> {
    let r = tokio::select! {
        r = &mut server => r,
        _ = drain.notified() => {
            match tokio::time::timeout(std::time::Duration::from_secs(drain_seconds), &mut server).await {
                Ok(r) => r,
                Err(_) => {
                    eprintln!(
                        "shutting down: closing the {} connection(s) still open after {drain_seconds} s (--drain-seconds): \
                         clients that stopped sending mid-request or never read their answer",
                        connections.open()
                    );
                    server.abort();
                    Ok(Ok(()))
                }
            }
        }
    };
    app.queue.close();
    r.context("the HTTP server task failed")?.context("the HTTP server failed")
}

pub fn run(args: ServeArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.http_threads as usize)
        .thread_name("serve-http")
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    let stop = Arc::new(Notify::new());
    // Told with `stop`: starts the drain deadline.
    let drain = Arc::new(Notify::new());
    let listener = runtime.block_on(listen(&args, &stop, &drain))?;
    let addr = listener.local_addr()?;
    let limits =
        Limits { max_request_sentences: args.max_request_sentences as usize, max_beam: args.max_beam as usize };
    let bound = conn::bound_by_file_limit(args.max_connections as usize);
    if let Some(why) = &bound.note {
        eprintln!("note: {why}");
    }
    let connections = Arc::new(Connections::new(&bound));
    let app = Arc::new(App {
        translator: OnceLock::new(),
        queue: Queue::new(args.max_queue as usize),
        metrics: Arc::new(Metrics::default()),
        limits,
        max_sentence_tokens: args.max_sentence_tokens.map(|n| n as usize),
        body_limit: args.max_body_bytes as usize,
        body_timeout: Duration::from_secs(args.body_timeout_seconds),
        connections: connections.clone(),
        max_attention_weights: args.max_attention_weights,
    });
    let serving = conn::serve(
        listener,
        router(app.clone()),
        overflow_router(app.clone()),
        connections.clone(),
        Duration::from_secs(args.header_timeout_seconds),
        app.metrics.clone(),
        shutdown_signal(stop.clone()),
    );
    let server = runtime.spawn(serving);
    eprintln!("listening on http://{addr} (loading the model)");
    let options = SessionOptions { precision: args.precision, task: Task::Translation, ..Default::default() };
    let load = || -> transformer::Result<Translator> {
        let mut t = Translator::load_ensemble(&args.checkpoint, &args.tokenizer, options)?;
        if let Some(path) = &args.shortlist {
            t.load_shortlist(path)?;
        }
        Ok(t)
    };
    let translator = match load() {
        Ok(t) => Arc::new(t),
        Err(e) => {
            stop.notify_one();
            let _ = runtime.block_on(server);
            return Err(e.into());
        }
    };
    let c = &translator.model().config;
    if let Some(n) = args.max_sentence_tokens.filter(|&n| n as usize > c.max_positions) {
        stop.notify_one();
        let _ = runtime.block_on(server);
        crate::usage!("--max-sentence-tokens {n} is more than the model's max_positions = {}", c.max_positions);
    }
    let _ = app.translator.set(translator.clone());
    eprintln!(
        "ready: {} layers, d_model {}, vocabulary {}; POST /translate, GET / for the page",
        c.n_layers, c.d_model, c.vocab_size
    );
    // When the server has stopped (every in-flight request answered), close the queue so the
    // batcher below returns.
    let watcher = runtime.spawn(watch(server, app.clone(), drain, args.drain_seconds, connections));
    let budget = Budget { max_tokens: args.max_tokens as usize, max_sentences: args.max_sentences as usize };
    batcher::run(&translator, &app.queue, budget, &app.metrics);
    runtime.block_on(watcher).context("the HTTP server task failed")??;
    eprintln!(
        "stopped: {} sentences translated in {} batches",
        app.metrics.sentences.load(std::sync::atomic::Ordering::Relaxed),
        app.metrics.batches.load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}
