#!/usr/bin/env python3
"""Side by side from Python: `ctranslate2.Translator` and `transformer.Translator` on the same
weights, driven by the same script through the same API.

    python bench/python/run.py --model DIR [--threads N] [--runs 3] [--compute-types float32,int8]

DIR is one of our model directories (a quick start's output, a training run, an `import marian`
output). Its checkpoint goes to CTranslate2 through `transformer export ct2` (the model.bin
CTranslate2's own converter writes, our weights and vocabulary; the binary is $TRANSFORMER_BIN or
target/release/transformer), so both engines read the same token strings: the
sources are cut once by our tokenizer, and both outputs are detokenised by it and scored by the
same BLEU. Each measurement runs in a child process of its own (peak RSS is that process's VmHWM:
the interpreter, the engine, the model and the decoding), the engines and settings interleaved run
by run:

- batched: every test sentence in one `translate_batch` call (`max_batch_size=2048`,
  `batch_type="tokens"`), beam 4, CTranslate2's length penalty 1 and 256 tokens: sentences/s;
- one at a time: the first `--latency-sentences` sentences, one call each: median latency.

Each engine at each of its thread settings (`intra_threads` 1 and N, and `inter_threads` N with one
thread each when batched); the faster setting is its figure. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEARCH = dict(beam_size=4, length_penalty=1.0, max_decoding_length=256)


def peak_rss_mb():
    """This process's peak resident memory (VmHWM). Not ru_maxrss: Linux carries that over exec
    from the parent's copy, so every child would read at least the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("no VmHWM in /proc/self/status")


def call(cmd):
    """Runs a command; its stderr shown when it fails."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(str(c) for c in cmd)} failed:\n{r.stderr}")
    return r.stdout


def read(path: Path):
    op = gzip.open if path.suffix == ".gz" else open
    with op(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def child(args):
    """In a child process: load one engine, decode, print one JSON line."""
    pieces = json.loads(Path(args.pieces).read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    if args.child == "ct2":
        import ctranslate2 as engine

        model = args.ct2
    else:
        import transformer as engine

        model = args.model
    tr = engine.Translator(str(model), device="cpu", compute_type=args.compute_type, inter_threads=args.inter,
                           intra_threads=args.intra)
    load = time.perf_counter() - t0
    latencies = []
    t0 = time.perf_counter()
    if args.mode == "one":
        res = []
        for p in pieces[: args.latency_sentences]:
            s = time.perf_counter()
            res.append(tr.translate_batch([p], **SEARCH)[0])
            latencies.append(time.perf_counter() - s)
    else:
        res = tr.translate_batch(pieces, max_batch_size=2048, batch_type="tokens", **SEARCH)
    secs = time.perf_counter() - t0
    Path(args.output).write_text(json.dumps([r.hypotheses[0] for r in res]), encoding="utf-8")
    print(json.dumps({"secs": secs, "load": load, "sentences": len(res),
                      "latency_ms": 1000 * statistics.median(latencies) if latencies else None,
                      "rss_mb": peak_rss_mb()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, help="our model directory")
    ap.add_argument("--ct2", type=Path, help="its CTranslate2 conversion (made from --model when not given)")
    ap.add_argument("--src", type=Path, default=ROOT / "data/multi30k/test_2016_flickr.en.gz")
    ap.add_argument("--ref", type=Path, default=ROOT / "data/multi30k/test_2016_flickr.de.gz")
    ap.add_argument("--compute-types", default="float32,int8")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--latency-sentences", type=int, default=200)
    ap.add_argument("--child", choices=["ct2", "ours"])
    ap.add_argument("--mode", choices=["batch", "one"])
    ap.add_argument("--compute-type")
    ap.add_argument("--inter", type=int, default=1)
    ap.add_argument("--intra", type=int, default=1)
    ap.add_argument("--pieces")
    ap.add_argument("--output")
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.model is None:
        sys.exit("give --model DIR (one of our model directories)")
    import transformer

    work = Path(tempfile.mkdtemp(prefix="python-bench-"))
    checkpoint, tokenizer = transformer.model_files(str(args.model))
    if args.ct2 is None:
        args.ct2 = work / "ct2"
        binary = os.environ.get("TRANSFORMER_BIN", str(ROOT / "target/release/transformer"))
        call([binary, "export", "ct2", checkpoint, "--tokenizer", tokenizer, "--output", args.ct2])
    ours = transformer.Translator(str(args.model))
    src, ref = read(args.src), read(args.ref)
    pieces = [ours.tokenize(s) for s in src]
    (work / "pieces.json").write_text(json.dumps(pieces), encoding="utf-8")
    n = args.threads
    settings = {"batch": sorted({(1, 1), (1, n), (n, 1)}), "one": sorted({(1, 1), (1, n)})}
    results = {}
    for run in range(args.runs):
        for ct in args.compute_types.split(","):
            for mode, grid in settings.items():
                for engine in ("ct2", "ours"):
                    for inter, intra in grid:
                        out = work / f"{engine}-{ct}-{mode}-{inter}x{intra}.json"
                        c = call([sys.executable, __file__, "--child", engine, "--mode", mode, "--model", args.model,
                                  "--ct2", args.ct2, "--compute-type", ct, "--inter", inter, "--intra", intra,
                                  "--pieces", work / "pieces.json", "--output", out, "--latency-sentences",
                                  args.latency_sentences])
                        r = json.loads(c.strip().splitlines()[-1])
                        r["output"] = str(out)
                        results.setdefault((engine, ct, mode, inter, intra), []).append(r)
        print(f"run {run + 1} of {args.runs} done", flush=True)

    def bleu(path):
        hyps = [ours.detokenize(h) for h in json.loads(Path(path).read_text(encoding="utf-8"))]
        return transformer.bleu(hyps, [ref[: len(hyps)]]).score

    report = []
    print(f"\n{len(src)} sentences, beam 4; one at a time: the first {args.latency_sentences}; "
          f"medians of {args.runs} interleaved runs; {n} threads")
    print("| compute type | mode | engine | best setting (inter x intra) | sentences/s | median latency | peak RSS | BLEU |")
    print("|---|---|---|---|---|---|---|---|")
    for ct in args.compute_types.split(","):
        for mode in settings:
            best = {}
            for engine in ("ct2", "ours"):
                rows = [(k, v) for k, v in results.items() if k[0] == engine and k[1] == ct and k[2] == mode]
                med = {k: statistics.median(r["secs"] for r in v) for k, v in rows}
                k = min(med, key=med.get)
                v = results[k]
                best[engine] = {
                    "setting": f"{k[3]}x{k[4]}",
                    "secs": med[k],
                    "sentences_per_s": v[0]["sentences"] / med[k],
                    "latency_ms": statistics.median(r["latency_ms"] for r in v) if mode == "one" else None,
                    "rss_mb": statistics.median(r["rss_mb"] for r in v),
                    "bleu": bleu(v[-1]["output"]),
                }
                b = best[engine]
                lat = f"{b['latency_ms']:.1f} ms" if b["latency_ms"] is not None else "-"
                print(f"| {ct} | {mode} | {engine} | {b['setting']} | {b['sentences_per_s']:.1f} | {lat} | "
                      f"{b['rss_mb']:.0f} MB | {b['bleu']:.2f} |")
            ratio = best["ct2"]["secs"] / best["ours"]["secs"]
            report.append({"compute_type": ct, "mode": mode, "speed_ratio": ratio, **{
                f"{e}_{k}": v for e, b in best.items() for k, v in b.items()}})
            print(f"| {ct} | {mode} | ours / ct2 | | **{ratio:.2f}x** | | "
                  f"{best['ours']['rss_mb'] / best['ct2']['rss_mb']:.2f}x | |")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
