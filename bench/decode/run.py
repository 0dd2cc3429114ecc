#!/usr/bin/env python3
"""Decoding speed, side by side: this project's `transformer translate` against CTranslate2 on the
same weights, the same token ids and the same cores, at each precision.

    python bench/decode/run.py --checkpoint CKPT --bpe BPE.json --precisions f32,bf16,int8
        [--threads 2] [--runs 3] [--latency-sentences 200] [--early-exit] [--torch-runs 0]
        [--src data/multi30k/test_2016_flickr.en.gz --ref ….de.gz]

With `--marian DIR` (a Hugging Face MarianMTModel directory, e.g. from make_marian.py) the model
is a Marian / OPUS-MT one: ours runs what `transformer import marian DIR` writes, CTranslate2 what
its own converter (`ct2-transformers-converter`) writes from the same directory, both fed the
pieces of `transformers`' MarianTokenizer (`--checkpoint`/`--bpe` are not given then).

For each precision, each engine decodes four ways: beam 4 (α 0.6) and greedy, each batched (2048
source tokens a batch) over the whole file and one sentence at a time over its first
`--latency-sentences` lines. Engines and precisions are interleaved run by run, each in its own
process; the script reports medians of `--runs` runs: sentences/s, mean latency per sentence at
batch 1, the peak RSS of the process, BLEU of the batched outputs, and how many output lines are
identical to ours at float32. It ends with one line a precision (beam 4, batched):

    precision P: ours X sent/s, CTranslate2 Y sent/s, R.RRx, peak RSS A MB vs B MB, BLEU a vs b

CTranslate2's compute types: float32 for f32, int8 for int8 (int8 weights per row and activations
quantised at run time, like ours). It has no bf16 on a CPU, so the bf16 line compares against its
float32 (said in the output). Its peak RSS is the Python process's peak minus the RSS right after
`import ctranslate2` (before the model loads), so the interpreter is not counted against it.
CTranslate2 is timed at 1 thread and at `--threads` (on some Xeon VMs its 2-thread runs were slower
than its 1-thread ones), and for batched search also with `--threads` batches at once on one thread
each (`inter_threads`, the counterpart of our `--workers`); each comparison takes its fastest figure
and names the setting (`2 thr`: one batch over 2 threads; `2x1`: 2 batches at once, 1 thread each).
`--early-exit` adds ours with CTranslate2's stopping rule (batched beam 4). `--torch-runs N` adds
the PyTorch decoder without a key/value cache (float32, batched beam 4), for reference.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def read(path: Path):
    op = gzip.open if path.suffix == ".gz" else open
    with op(path, "rt", encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def rss_now_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child_ct2(args):
    """Runs in a child process: decode with CTranslate2, print one JSON line."""
    import ctranslate2

    base = rss_now_mb()
    pieces = [l.split(" ") if l else [] for l in Path(args.pieces).read_text().split("\n")[:-1]]
    if args.batch_one:
        pieces = pieces[: args.batch_one]
    t0 = time.perf_counter()
    tr = ctranslate2.Translator(args.model, device="cpu", compute_type=args.compute_type, intra_threads=args.threads,
                                inter_threads=args.inter)
    load = time.perf_counter() - t0
    opts = dict(beam_size=args.beam, length_penalty=0.6, max_decoding_length=256, use_vmap=args.use_vmap)
    t0 = time.perf_counter()
    if args.batch_one:
        res = [tr.translate_batch([p], max_batch_size=1, **opts)[0] for p in pieces]
    else:
        res = tr.translate_batch(pieces, max_batch_size=args.max_tokens, batch_type="tokens", **opts)
    secs = time.perf_counter() - t0
    out = [" ".join(r.hypotheses[0]) for r in res]
    Path(args.output).write_text("".join(o + "\n" for o in out))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"secs": secs, "load": load, "tokens": sum(len(r.hypotheses[0]) for r in res),
                      "rss_mb": rss - base, "rss_total_mb": rss}))


def child_torch(args):
    """Runs in a child process: the same beam search (shrinking beam, GNMT penalty, exact early
    stop) written in PyTorch over the reference model of bench/multi30k/reference.py, without a
    key/value cache (the decoder reruns the prefix each step). Prints one JSON line."""
    import math

    import torch
    from safetensors import safe_open

    sys.path.insert(0, str(ROOT / "bench/multi30k"))
    import reference as R

    torch.set_num_threads(args.threads)
    vocab = json.loads(Path(args.bpe).read_text())
    ids = dict(vocab["model"]["vocab"])
    for a in vocab["added_tokens"]:
        ids[a["content"]] = a["id"]
    by_id = {i: t for t, i in ids.items()}
    srcs = [[ids[p] for p in l.split(" ")] if l else [] for l in Path(args.pieces).read_text().split("\n")[:-1]]
    t0 = time.perf_counter()
    with safe_open(str(args.checkpoint), "pt") as f:
        c = json.loads(f.metadata()["config"])
        model = R.Model(c, 1)
        with torch.no_grad():
            for name in model.names:
                model.w(name).copy_(f.get_tensor(name))
    model.eval()
    load = time.perf_counter() - t0
    k, alpha, PAD, BOS, EOS = 4, 0.6, 0, 1, 2
    lp = lambda n: ((5.0 + n) / 6.0) ** alpha  # noqa: E731
    cap = c["max_positions"] - 1
    out = [[] for _ in srcs]

    def search(batch):
        b = len(batch)
        s = max(len(srcs[i]) for i in batch)
        src = torch.zeros(b, s, dtype=torch.long)
        for r, i in enumerate(batch):
            src[r, : len(srcs[i])] = torch.tensor(srcs[i])
        slen = torch.tensor([len(srcs[i]) for i in batch])
        memory, mask = model.encode(src, slen)
        limit = [min(len(srcs[i]) + 50, cap) for i in batch]
        finished = [[] for _ in batch]
        live = [(j, [], 0.0) for j in range(b)]
        while live:
            tin = torch.tensor([[BOS] + toks for _, toks, _ in live])
            sel = torch.tensor([j for j, _, _ in live])
            logits = model.decode(memory[sel], mask[sel], tin, torch.full((len(live),), tin.shape[1]))[:, -1]
            logp = torch.log_softmax(logits.double(), dim=-1).float().double()
            logp[:, PAD] = logp[:, BOS] = -math.inf
            nxt, r0 = [], 0
            while r0 < len(live):
                j = live[r0][0]
                r1 = r0
                while r1 < len(live) and live[r1][0] == j:
                    r1 += 1
                slots = k - len(finished[j])
                cands = []
                for r in range(r0, r1):
                    _, toks, score = live[r]
                    if len(toks) >= limit[j]:
                        cands.append((score + logp[r, EOS].item(), r, EOS))
                    else:
                        v, t = torch.topk(logp[r], slots)
                        cands += [(score + x, r, y) for x, y in zip(v.tolist(), t.tolist())]
                cands.sort(key=lambda x: (-x[0], x[1], x[2]))
                first = len(nxt)
                for score, r, t in cands[:slots]:
                    toks = live[r][1]
                    if t == EOS:
                        finished[j].append((score / lp(len(toks) + 1), toks))
                    else:
                        nxt.append((j, toks + [t], score))
                mine = nxt[first:]
                done = not mine
                if not done and finished[j]:
                    best = max(f[0] for f in finished[j])
                    done = all(best >= sc / lp(limit[j] + 1) for _, _, sc in mine)
                if done:
                    del nxt[first:]
                r0 = r1
            live = nxt
        for r, i in enumerate(batch):
            out[i] = max(finished[r], key=lambda f: f[0])[1]

    t0 = time.perf_counter()
    order = sorted((i for i in range(len(srcs)) if srcs[i]), key=lambda i: -len(srcs[i]))
    start = 0
    with torch.no_grad():
        while start < len(order):
            n = max(1, min(args.max_tokens // len(srcs[order[start]]), 128))
            search(order[start : start + n])
            start += n
    secs = time.perf_counter() - t0
    Path(args.output).write_text("".join(" ".join(by_id[t] for t in o) + "\n" for o in out))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"secs": secs, "load": load, "tokens": sum(map(len, out)), "rss_mb": rss}))


def run_ours(binary, ckpt, bpe, src, threads, max_tokens, out_path, extra=()):
    cmd = [str(binary), "--threads", str(threads), "translate", "--checkpoint", str(ckpt), "--bpe", str(bpe),
           "--input", str(src), "--speed", "--max-tokens", str(max_tokens), *extra]
    cmd = ["/usr/bin/time", "-f", "MAXRSS %M"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    Path(out_path).write_text(r.stdout)
    # "translated N sentences in S s: …" (decoding only) and the peak RSS from /usr/bin/time.
    line = next(l for l in r.stderr.splitlines() if l.startswith("translated "))
    secs = float(line.split(" in ")[1].split(" s")[0])
    rss = int(next(l for l in r.stderr.splitlines() if l.startswith("MAXRSS")).split()[1]) / 1024
    return {"secs": secs, "rss_mb": rss, "stderr": line}


def marian_tokenizer(directory):
    from transformers import MarianTokenizer

    return MarianTokenizer.from_pretrained(str(directory))


def prepare_models(args, work):
    """The model both engines decode, in `work`: with `--marian DIR`, ours imported from it and
    CTranslate2's from its own converter (`args.checkpoint`/`args.bpe` set to the import); else
    CTranslate2's written by `transformer export ct2` from our checkpoint (the model.bin
    CTranslate2's own converter writes, byte for byte: tests/ct2.rs). Returns CTranslate2's
    directory."""
    ct2_dir = work / "ct2"
    if args.marian:
        subprocess.run([str(args.binary), "import", "marian", str(args.marian), "--output", str(work / "ours")],
                       check=True, capture_output=True)
        args.checkpoint, args.bpe = work / "ours/model.safetensors", work / "ours/tokenizer.json"
        ct2_conv = Path(sys.executable).parent / "ct2-transformers-converter"
        subprocess.run([str(ct2_conv), "--model", str(args.marian), "--output_dir", str(ct2_dir)], check=True,
                       capture_output=True)
    elif args.checkpoint is None or args.bpe is None:
        sys.exit("give --checkpoint and --bpe, or --marian DIR")
    else:
        subprocess.run([str(args.binary), "export", "ct2", str(args.checkpoint), "--tokenizer", str(args.bpe),
                        "--output", str(ct2_dir)], check=True, capture_output=True)
    return ct2_dir


def write_pieces(args, src_lines, src_plain, out):
    """The sources as CTranslate2 reads them (space-separated pieces a line), written to `out`:
    `transformers`' MarianTokenizer for `--marian`, else our `bpe apply`. Returns the text."""
    if args.marian:
        tok = marian_tokenizer(args.marian)
        pieces = "".join(" ".join(tok.convert_ids_to_tokens(tok(l)["input_ids"])) + "\n" for l in src_lines)
    else:
        pieces = subprocess.run([str(args.binary), "bpe", "apply", "--model", str(args.bpe), "--input",
                                 str(src_plain)], check=True, capture_output=True, text=True).stdout
    out.write_text(pieces)
    return pieces


CT2_TYPE = {"f32": "float32", "bf16": "float32", "int8": "int8"}
# (name, beam, batch one): the four ways each engine decodes.
MODES = [("beam4", 4, False), ("greedy", 1, False), ("beam4-b1", 4, True), ("greedy-b1", 1, True)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--bpe", type=Path)
    ap.add_argument("--marian", type=Path, help="a Hugging Face Marian directory (instead of --checkpoint/--bpe)")
    ap.add_argument("--src", type=Path, default=ROOT / "data/multi30k/test_2016_flickr.en.gz")
    ap.add_argument("--ref", type=Path, default=ROOT / "data/multi30k/test_2016_flickr.de.gz")
    ap.add_argument("--precisions", default="f32", help="comma-separated: f32, bf16, int8")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--latency-sentences", type=int, default=200, help="sentences decoded one at a time")
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--early-exit", action="store_true", help="also run ours with CTranslate2's stopping rule")
    ap.add_argument("--torch-runs", type=int, default=0, help="runs of the (slow) PyTorch decoder")
    ap.add_argument("--binary", type=Path, default=ROOT / "target/release/transformer")
    ap.add_argument("--child", choices=["ct2", "torch"])
    ap.add_argument("--model")
    ap.add_argument("--pieces")
    ap.add_argument("--output")
    ap.add_argument("--compute-type", default="float32")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--batch-one", type=int, default=0)
    ap.add_argument("--ct2-isa", help="CT2_FORCE_CPU_ISA for CTranslate2 (e.g. AVX512: on an AMD EPYC with AVX-512 "
                    "it picks AVX2 by itself; default: its own choice)")
    ap.add_argument("--inter", type=int, default=1, help="CTranslate2's inter_threads (batches at once)")
    ap.add_argument("--use-vmap", action="store_true", help="CTranslate2's use_vmap (the vmap.txt of --model)")
    args = ap.parse_args()
    if args.child == "ct2":
        return child_ct2(args)
    if args.child == "torch":
        return child_torch(args)
    precisions = args.precisions.split(",")
    for p in precisions:
        if p not in CT2_TYPE:
            sys.exit(f"--precisions: unknown precision {p!r} (f32, bf16, int8)")

    ct2_env = dict(os.environ, **({"CT2_FORCE_CPU_ISA": args.ct2_isa} if args.ct2_isa else {}))
    work = Path(tempfile.mkdtemp(prefix="decode-bench-"))
    ct2_dir = prepare_models(args, work)
    src_lines = read(args.src)
    src_plain = work / "src.txt"
    src_plain.write_text("".join(l + "\n" for l in src_lines))
    src_b1 = work / "src-b1.txt"
    src_b1.write_text("".join(l + "\n" for l in src_lines[: args.latency_sentences]))
    pieces = write_pieces(args, src_lines, src_plain, work / "src.pieces")
    n = len(src_lines)
    n1 = min(n, args.latency_sentences)
    src_tokens = sum(len(l.split(" ")) for l in pieces.split("\n")[:-1])

    # results[(engine, precision, mode)] = list of runs
    results = {}

    def add(key, r):
        results.setdefault(key, []).append(r)

    for run in range(args.runs):
        for p in precisions:
            for mode, beam, one in MODES:
                tag = f"{p}-{mode}"
                extra = ["--precision", p, "--beam", str(beam)] + (["--max-sentences", "1"] if one else [])
                add(("ours", p, mode), run_ours(args.binary, args.checkpoint, args.bpe, src_b1 if one else src_plain,
                                                args.threads, args.max_tokens, work / f"ours-{tag}.txt", extra))
                # CTranslate2 at 1 thread and at --threads: on some Xeon VMs its runs on 2 threads
                # were slower than on 1, so both are timed and the faster is its figure. Batched, it
                # also runs --threads batches at once, one thread each (as our --workers do).
                settings = [(th, 1) for th in sorted({1, args.threads})]
                if not one and args.threads > 1:
                    settings.append((1, args.threads))
                for th, inter in settings:
                    name = f"{th}" if inter == 1 else f"{inter}x{th}"
                    c = subprocess.run([sys.executable, __file__, "--child", "ct2", "--model", str(ct2_dir), "--pieces",
                                        str(work / "src.pieces"), "--output", str(work / f"ct2-{tag}-t{name}.pieces"),
                                        "--threads", str(th), "--inter", str(inter), "--max-tokens", str(args.max_tokens),
                                        "--compute-type", CT2_TYPE[p], "--beam", str(beam),
                                        "--batch-one", str(n1 if one else 0), "--checkpoint", str(args.checkpoint),
                                        "--bpe", str(args.bpe)], check=True, capture_output=True, text=True,
                                       env=ct2_env)
                    add((f"ct2@{name}", p, mode), json.loads(c.stdout.strip().splitlines()[-1]))
            if args.early_exit:
                add(("ours_ee", p, "beam4"), run_ours(args.binary, args.checkpoint, args.bpe, src_plain, args.threads,
                                                      args.max_tokens, work / f"ours_ee-{p}-beam4.txt",
                                                      ["--precision", p, "--early-exit"]))
            print(f"run {run + 1}, {p}: " + ", ".join(
                f"{e} {m} {results[(e, p, m)][-1]['secs']:.2f} s" for e in ("ours", f"ct2@{args.threads}")
                for m, _, _ in MODES), flush=True)
        if run < args.torch_runs:
            t = subprocess.run([sys.executable, __file__, "--child", "torch", "--checkpoint", str(args.checkpoint),
                                "--bpe", str(args.bpe), "--pieces", str(work / "src.pieces"), "--output",
                                str(work / "torch.pieces"), "--threads", str(args.threads), "--max-tokens",
                                str(args.max_tokens)], check=True, capture_output=True, text=True)
            add(("torch", "f32", "beam4"), json.loads(t.stdout.strip().splitlines()[-1]))

    def lines(path):
        if path.suffix == ".pieces" and args.marian:
            tok = marian_tokenizer(args.marian)
            t = "".join(tok.decode(tok.convert_tokens_to_ids(l.split(" ")) if l else [], skip_special_tokens=True)
                        + "\n" for l in path.read_text().split("\n")[:-1])
            path = path.with_suffix(".txt")
            path.write_text(t)
        elif path.suffix == ".pieces":
            t = subprocess.run([str(args.binary), "bpe", "decode", "--model", str(args.bpe), "--input", str(path)],
                               check=True, capture_output=True, text=True).stdout
            path = path.with_suffix(".txt")
            path.write_text(t)
        return path, path.read_text().split("\n")[:-1]

    def bleu(path):
        r = subprocess.run([str(args.binary), "bleu", "--ref", str(args.ref), "--hyp", str(path), "--score-only"],
                           check=True, capture_output=True, text=True)
        return float(r.stdout.strip())

    def out_file(engine, p, mode):
        if engine == "torch":
            return work / "torch.pieces"
        tag = f"{p}-{mode}"
        if engine.startswith("ct2@"):
            return work / f"ct2-{tag}-t{engine[4:]}.pieces"
        return work / f"{engine}-{tag}.txt"

    ref_lines = {}
    for mode, _, _ in MODES:
        if ("ours", "f32", mode) in results:
            ref_lines[mode] = lines(out_file("ours", "f32", mode))[1]
    print(f"\n{n} sentences ({src_tokens} source tokens; batch 1: the first {n1}), {args.threads} threads, "
          f"median of {args.runs} runs (decoding only, model loading excluded)")
    print("identical: output lines equal to ours at f32 with the same search")
    print(f"{'engine':<13}{'prec':>5}{'search':>11}{'seconds':>9}{'sent/s':>9}{'ms/sent':>9}{'peak RSS':>11}"
          f"{'BLEU':>8}{'identical':>11}")
    summary = {}
    for key in results:
        engine, p, mode = key
        runs = results[key]
        secs = statistics.median(r["secs"] for r in runs)
        rss = max(r["rss_mb"] for r in runs)
        count = n1 if mode.endswith("-b1") else n
        path, out = lines(out_file(engine, p, mode))
        b = bleu(path) if count == n else float("nan")
        ref = ref_lines.get(mode)
        same = f"{sum(a == c for a, c in zip(out, ref))}/{count}" if ref is not None else "-"
        name = {"ours": "ours", "ours_ee": "ours --e-exit", "torch": "PyTorch"}.get(engine)
        if engine.startswith("ct2@"):
            name = f"CT2 {engine[4:]}" + ("" if "x" in engine else " thr")
        ct2_p = f"{CT2_TYPE[p]}" if engine.startswith("ct2") else p
        print(f"{name:<13}{ct2_p:>8}{mode:>11}{secs:>9.2f}{count / secs:>9.1f}{1000 * secs / count:>9.1f}"
              f"{rss:>8.0f} MB{b:>8.2f}{same:>11}")
        summary[key] = (count / secs, rss, b, 1000 * secs / count)
    # CTranslate2 at its best thread count, per precision and search.
    for p in precisions:
        for mode, _, _ in MODES:
            best = max((k for k in summary if k[0].startswith("ct2@") and k[1:] == (p, mode)),
                       key=lambda k: summary[k][0])
            summary[("ct2", p, mode)] = summary[best]
            th = best[0][4:]
            summary[("ct2_threads", p, mode)] = (f"{th.split('x')[0]} batches at once, 1 thread each" if "x" in th
                                                 else f"{th} thread(s)")
    print()
    for p in precisions:
        for mode, _, _ in MODES:
            o, c = summary[("ours", p, mode)], summary[("ct2", p, mode)]
            th = summary[("ct2_threads", p, mode)]
            print(f"{p} {mode}: ours {o[0] / c[0]:.2f}x CTranslate2's sentences/s (its best: {th}), "
                  f"latency {o[3]:.1f} vs {c[3]:.1f} ms/sentence, peak RSS {o[1]:.0f} vs {c[1]:.0f} MB")
    if "bf16" in precisions:
        print("(CTranslate2 has no bf16 on a CPU: its bf16 figures are its float32)")
    for p in precisions:
        o, c = summary[("ours", p, "beam4")], summary[("ct2", p, "beam4")]
        th = summary[("ct2_threads", p, "beam4")]
        print(f"precision {p}: ours {o[0]:.1f} sent/s, CTranslate2 {c[0]:.1f} sent/s ({th}), {o[0] / c[0]:.2f}x, "
              f"peak RSS {o[1]:.0f} MB vs {c[1]:.0f} MB, BLEU {o[2]:.2f} vs {c[2]:.2f}")
    print(f"(files in {work})")


if __name__ == "__main__":
    main()
