#!/usr/bin/env python3
"""`transformer serve` under load, from a second process on loopback, beside `transformer translate`
on the same sentences in the same run (Python standard library only).

    python bench/serve/run.py --checkpoint CKPT --bpe BPE.json [--clients 64] [--duration 30]
        [--sentences 1000] [--threads 2] [--single 100] [--precision f32|bf16|int8] [--json out.json]

1. `transformer translate --speed` on the first --sentences lines of --src: sentences/s of the
   decoding itself (model loading excluded), the batch tool's figure.
2. `transformer serve --port 0` with the same checkpoint and threads; waits for GET /health.
3. Single client: --single requests, one sentence each, one after the other: latency p50/p90/p99.
4. Load: --clients threads, each with its own keep-alive connection, send one sentence per request
   (the sentences in turn) until --duration seconds have passed or --max-requests were sent;
   throughput (sentences/s answered), latency p50/p90/p99, failed requests (any status but 200,
   or no answer), and the batch sizes the server's batcher formed (from GET /metrics).
5. SIGTERM: the server must exit 0.

The goal of issue 18: no failed request, and at least 80% of translate's sentences/s under load.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def read(path: Path) -> list[str]:
    op = gzip.open if path.suffix == ".gz" else open
    with op(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def pct(xs: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of xs, in milliseconds."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return 1000 * s[min(len(s) - 1, max(0, round(p / 100 * len(s) + 0.5) - 1))]


def translate_speed(args, lines: list[str]) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".en", delete=False) as f:
        f.write("".join(l + "\n" for l in lines))
    cmd = [args.bin, "--threads", str(args.threads), "translate", "--checkpoint", args.checkpoint, "--bpe",
           args.bpe, "--input", f.name, "--speed", "--precision", args.precision]
    p = subprocess.run(cmd, capture_output=True, text=True)
    os.unlink(f.name)
    if p.returncode != 0:
        sys.exit(f"translate failed: {p.stderr}")
    m = re.search(r"translated (\d+) sentences in ([\d.]+) s: ([\d.]+) sentences/s", p.stderr)
    if not m:
        sys.exit(f"no speed line from translate: {p.stderr}")
    return float(m.group(3))


class Server:
    def __init__(self, args):
        cmd = [args.bin, "--threads", str(args.threads), "serve", "--checkpoint", args.checkpoint, "--bpe",
               args.bpe, "--port", "0", "--max-queue", str(args.max_queue), "--precision", args.precision]
        self.p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.log: list[str] = []
        first = self.p.stderr.readline()
        self.log.append(first)
        m = re.match(r"listening on http://([\d.]+):(\d+)", first)
        if not m:
            sys.exit(f"the server did not start: {first}{self.p.stderr.read()}")
        self.host, self.port = m.group(1), int(m.group(2))
        threading.Thread(target=self._drain, daemon=True).start()
        deadline = time.time() + 120
        while self.get("/health")[0] != 200:
            if time.time() > deadline or self.p.poll() is not None:
                sys.exit(f"the server never became ready: {''.join(self.log)}")
            time.sleep(0.05)

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)

    def get(self, path: str):
        try:
            c = http.client.HTTPConnection(self.host, self.port, timeout=30)
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        except OSError:
            return 0, ""

    def metrics(self) -> dict[str, float]:
        out = {}
        for line in self.get("/metrics")[1].splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self) -> int:
        self.p.send_signal(signal.SIGTERM)
        return self.p.wait(timeout=120)


def client(server: Server, lines: list[str], next_index, deadline: float, results: list, lock: threading.Lock):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    while time.time() < deadline:
        i = next_index()
        if i is None:
            return
        body = json.dumps({"q": lines[i % len(lines)]})
        t0 = time.perf_counter()
        try:
            conn.request("POST", "/translate", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            ok = r.status == 200 and len(json.loads(data)["translations"]) == 1
            status = r.status
        except Exception as e:  # a failed request, counted, then a fresh connection
            ok, status = False, repr(e)
            conn.close()
            conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
        with lock:
            results.append((ok, time.perf_counter() - t0, status))


def batch_sizes(before: dict, after: dict) -> tuple[float, dict]:
    """Mean sentences per batch during the load, and the count per histogram bucket."""
    d = lambda k: after.get(k, 0) - before.get(k, 0)
    batches = d("transformer_batch_sentences_count")
    mean = d("transformer_batch_sentences_sum") / batches if batches else float("nan")
    buckets, prev = {}, 0.0
    for k in sorted((k for k in after if k.startswith("transformer_batch_sentences_bucket")),
                    key=lambda k: float(re.search(r'le="([^"]+)"', k).group(1).replace("+Inf", "inf"))):
        le = re.search(r'le="([^"]+)"', k).group(1)
        cum = d(k)
        if cum - prev:
            buckets[f"<= {le}"] = int(cum - prev)
        prev = cum
    return mean, {"batches": int(batches), "mean_sentences": mean, "histogram": buckets}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--bpe", required=True)
    ap.add_argument("--bin", default=str(ROOT / "target/release/transformer"))
    ap.add_argument("--src", default=str(ROOT / "data/multi30k/test_2016_flickr.en.gz"))
    ap.add_argument("--sentences", type=int, default=1000, help="first N lines of --src (default: all 1000)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="decoding threads, both tools")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--precision", default="f32", help="f32, bf16 or int8, for both tools")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of load")
    ap.add_argument("--max-requests", type=int, default=100_000, help="stop the load after this many")
    ap.add_argument("--single", type=int, default=100, help="requests of the single-client run")
    ap.add_argument("--max-queue", type=int, default=1024)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if not Path(args.bin).exists():
        sys.exit(f"{args.bin} does not exist: run `cargo build --release` first")
    lines = [l for l in read(Path(args.src))[: args.sentences] if l.strip()]

    tr = translate_speed(args, lines)
    print(f"translate: {tr:.1f} sentences/s ({len(lines)} sentences, {args.threads} threads)", flush=True)

    server = Server(args)
    res: list = []
    it = iter(range(args.single))
    client(server, lines, lambda: next(it, None), time.time() + 3600, res, threading.Lock())
    if not all(r[0] for r in res):
        sys.exit(f"single-client requests failed: {[r[2] for r in res if not r[0]][:5]}")
    single = [r[1] for r in res]
    print(f"single client: {args.single} requests, latency p50 {pct(single, 50):.1f} ms, "
          f"p90 {pct(single, 90):.1f} ms, p99 {pct(single, 99):.1f} ms", flush=True)

    before = server.metrics()
    counter = iter(range(args.max_requests))
    lock = threading.Lock()
    nxt = lambda: next(counter, None)
    results: list = []
    t0 = time.perf_counter()
    deadline = time.time() + args.duration
    threads = [threading.Thread(target=client, args=(server, lines, nxt, deadline, results, lock))
               for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.perf_counter() - t0
    after = server.metrics()
    rc = server.stop()

    ok = [r[1] for r in results if r[0]]
    failed = [r for r in results if not r[0]]
    rate = len(ok) / secs
    _, batches = batch_sizes(before, after)
    report = {
        "translate_sentences_per_s": tr,
        "clients": args.clients,
        "seconds": secs,
        "requests": len(results),
        "failed": len(failed),
        "failed_examples": sorted({str(r[2]) for r in failed})[:5],
        "sentences_per_s": rate,
        "ratio_to_translate": rate / tr,
        "latency_ms": {"p50": pct(ok, 50), "p90": pct(ok, 90), "p99": pct(ok, 99)},
        "single_client_latency_ms": {"p50": pct(single, 50), "p90": pct(single, 90), "p99": pct(single, 99)},
        "batches": batches,
        "server_exit_code": rc,
        "threads": args.threads,
    }
    print(f"load: {args.clients} clients, {secs:.1f} s, {len(results)} requests, {len(failed)} failed"
          + (f" ({', '.join(report['failed_examples'])})" if failed else ""))
    print(f"      {rate:.1f} sentences/s = {100 * rate / tr:.0f}% of translate's {tr:.1f}; latency p50 "
          f"{pct(ok, 50):.1f} ms, p90 {pct(ok, 90):.1f} ms, p99 {pct(ok, 99):.1f} ms")
    print(f"      {batches['batches']} batches, {batches['mean_sentences']:.1f} sentences each on average; "
          f"sizes {batches['histogram']}")
    print(f"server exit code after SIGTERM: {rc}")
    goal = not failed and rate >= 0.8 * tr and rc == 0
    print(f"goal (0 failed, >= 80% of translate, exit 0): {'met' if goal else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    sys.exit(0 if not failed and rc == 0 else 1)


if __name__ == "__main__":
    main()
