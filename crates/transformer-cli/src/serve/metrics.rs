//! The server's counters, written in the Prometheus text exposition format by `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A histogram with fixed upper bounds (cumulative buckets are computed when written).
pub struct Histogram {
    bounds: &'static [f64],
    state: Mutex<(Vec<u64>, f64, u64)>, // per-bucket counts (+Inf last), sum, count
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram { bounds, state: Mutex::new((vec![0; bounds.len() + 1], 0.0, 0)) }
    }

    /// Counts one observation.
    pub fn observe(&self, v: f64) {
        let i = self.bounds.iter().position(|&b| v <= b).unwrap_or(self.bounds.len());
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0[i] += 1;
        s.1 += v;
        s.2 += 1;
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (i, c) in s.0.iter().enumerate() {
            cumulative += c;
            let le = self.bounds.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", s.1, s.2);
    }
}

/// Everything `/metrics` reports.
pub struct Metrics {
    /// Answers by (route, status code).
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// Sentences translated.
    pub sentences: AtomicU64,
    /// Batches decoded.
    pub batches: AtomicU64,
    /// Requests dropped from the queue because their client went away.
    pub dropped: AtomicU64,
    /// Requests refused because the queue was full.
    pub rejected_full: AtomicU64,
    /// Requests whose body never arrived in full (too slow, or the client went away): counted
    /// here, not among the answers by status nor in the latency histogram.
    pub abandoned: AtomicU64,
    /// Connections answered 503 and closed because --max-connections were open.
    pub connections_refused: AtomicU64,
    /// Idle connections closed to make room for a new one while --max-connections were open.
    pub connections_shed: AtomicU64,
    /// Sentences in the batch being decoded now (0 when the batcher is idle).
    pub decoding: AtomicU64,
    /// Sentences per decoded batch.
    pub batch_sentences: Histogram,
    /// Source tokens per decoded batch (padding not counted).
    pub batch_tokens: Histogram,
    /// Seconds a batch took to decode.
    pub batch_seconds: Histogram,
    /// Seconds from a `/translate` request's arrival to its answer.
    pub latency: Histogram,
}

const SIZES: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
const TOKENS: &[f64] = &[16.0, 64.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0];
const SECONDS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::new(BTreeMap::new()),
            sentences: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            rejected_full: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            connections_refused: AtomicU64::new(0),
            connections_shed: AtomicU64::new(0),
            decoding: AtomicU64::new(0),
            batch_sentences: Histogram::new(SIZES),
            batch_tokens: Histogram::new(TOKENS),
            batch_seconds: Histogram::new(SECONDS),
            latency: Histogram::new(SECONDS),
        }
    }
}

/// The state read when `/metrics` is written, beside the counters.
pub struct Gauges {
    /// Sentences waiting in the queue.
    pub queue_sentences: usize,
    /// Requests waiting in the queue.
    pub queue_requests: usize,
    /// Whether the model is loaded.
    pub ready: bool,
    /// Connections open now.
    pub connections_open: usize,
}

impl Metrics {
    /// Counts one answer.
    pub fn request(&self, route: &'static str, code: u16) {
        *self.requests.lock().unwrap_or_else(|p| p.into_inner()).entry((route, code)).or_default() += 1;
    }

    /// The Prometheus text.
    pub fn render(&self, g: &Gauges) -> String {
        let mut out = String::new();
        out.push_str("# HELP transformer_requests_total HTTP requests answered, by route and status code.\n");
        out.push_str("# TYPE transformer_requests_total counter\n");
        for ((route, code), n) in self.requests.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "transformer_requests_total{{route=\"{route}\",code=\"{code}\"}} {n}");
        }
        let counter = |out: &mut String, name: &str, help: &str, v: &AtomicU64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
        };
        counter(&mut out, "transformer_sentences_total", "Sentences translated.", &self.sentences);
        counter(&mut out, "transformer_batches_total", "Batches decoded.", &self.batches);
        counter(
            &mut out,
            "transformer_dropped_requests_total",
            "Requests dropped from the queue because their client went away.",
            &self.dropped,
        );
        counter(
            &mut out,
            "transformer_queue_full_total",
            "Requests refused with 503 because the queue was full.",
            &self.rejected_full,
        );
        counter(
            &mut out,
            "transformer_abandoned_requests_total",
            "Requests whose body never arrived in full (timed out or the client went away); not among the answers.",
            &self.abandoned,
        );
        counter(
            &mut out,
            "transformer_connections_refused_total",
            "Connections answered 503 and closed because --max-connections were open.",
            &self.connections_refused,
        );
        counter(
            &mut out,
            "transformer_connections_shed_total",
            "Idle connections closed to make room for a new one while --max-connections were open.",
            &self.connections_shed,
        );
        let gauge = |out: &mut String, name: &str, help: &str, v: usize| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        gauge(&mut out, "transformer_queue_sentences", "Sentences waiting to be decoded.", g.queue_sentences);
        gauge(&mut out, "transformer_connections_open", "HTTP connections open now.", g.connections_open);
        gauge(&mut out, "transformer_queue_requests", "Requests waiting to be decoded.", g.queue_requests);
        gauge(
            &mut out,
            "transformer_decoding_sentences",
            "Sentences in the batch being decoded now.",
            self.decoding.load(Ordering::Relaxed) as usize,
        );
        gauge(&mut out, "transformer_ready", "1 once the model is loaded.", g.ready as usize);
        self.batch_sentences.write(&mut out, "transformer_batch_sentences", "Sentences per decoded batch.");
        self.batch_tokens.write(&mut out, "transformer_batch_tokens", "Source tokens per decoded batch.");
        self.batch_seconds.write(&mut out, "transformer_batch_duration_seconds", "Time to decode one batch.");
        self.latency.write(
            &mut out,
            "transformer_request_duration_seconds",
            "Time from a /translate request's arrival to its answer.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counters_labelled() {
        let m = Metrics::default();
        for v in [1.0, 3.0, 3.0, 1000.0] {
            m.batch_sentences.observe(v);
        }
        m.request("/translate", 200);
        m.request("/translate", 200);
        m.request("/translate", 400);
        let text = m.render(&Gauges { queue_sentences: 7, queue_requests: 2, ready: true, connections_open: 3 });
        for line in [
            "transformer_batch_sentences_bucket{le=\"1\"} 1",
            "transformer_batch_sentences_bucket{le=\"2\"} 1",
            "transformer_batch_sentences_bucket{le=\"4\"} 3",
            "transformer_batch_sentences_bucket{le=\"512\"} 3",
            "transformer_batch_sentences_bucket{le=\"+Inf\"} 4",
            "transformer_batch_sentences_sum 1007",
            "transformer_batch_sentences_count 4",
            "transformer_requests_total{route=\"/translate\",code=\"200\"} 2",
            "transformer_requests_total{route=\"/translate\",code=\"400\"} 1",
            "transformer_queue_sentences 7",
            "transformer_ready 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
