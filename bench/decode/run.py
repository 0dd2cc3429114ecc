#!/usr/bin/env python3
"""Decoding speed, side by side: this project's `transformer translate` against CTranslate2
(float32) on the same weights, the same token ids and the same cores, with beam 4 and α 0.6.

    python bench/decode/run.py --checkpoint CKPT --bpe BPE.json [--threads 2] [--runs 3]
        [--src ../shared/data/multi30k/test_2016_flickr.en.gz --ref ….de.gz]

Ours runs twice: with the exact stopping rule (the default) and with `--early-exit`, the rule
CTranslate2 uses by default (stop a sentence once its best candidate ends in EOS), so the two
decoders can also be compared doing the same work.

Each engine runs in its own process, `--runs` times; the script prints the median sentences/s and
target tokens/s of the decoding itself (model loading excluded), the peak RSS of the process,
BLEU of the outputs and how many output lines the two engines agree on exactly. CTranslate2 gets
the model converted by to_ctranslate2.py and the BPE pieces of the source as its input tokens.
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


def child_ct2(args):
    """Runs in a child process: decode with CTranslate2, print one JSON line."""
    import ctranslate2

    pieces = [l.split(" ") if l else [] for l in Path(args.pieces).read_text().split("\n")[:-1]]
    t0 = time.perf_counter()
    tr = ctranslate2.Translator(args.model, device="cpu", compute_type="float32", intra_threads=args.threads,
                                inter_threads=1)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = tr.translate_batch(pieces, beam_size=4, length_penalty=0.6, max_batch_size=args.max_tokens,
                             batch_type="tokens", max_decoding_length=256)
    secs = time.perf_counter() - t0
    out = [" ".join(r.hypotheses[0]) for r in res]
    Path(args.output).write_text("".join(o + "\n" for o in out))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"secs": secs, "load": load, "tokens": sum(len(r.hypotheses[0]) for r in res), "rss_mb": rss}))


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
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    Path(out_path).write_text(r.stdout)
    # "translated N sentences in S s: …" (decoding only) and the peak RSS from /usr/bin/time.
    line = next(l for l in r.stderr.splitlines() if l.startswith("translated "))
    secs = float(line.split(" in ")[1].split(" s")[0])
    rss = int(next(l for l in r.stderr.splitlines() if l.startswith("MAXRSS")).split()[1]) / 1024
    return {"secs": secs, "rss_mb": rss, "stderr": line}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--bpe", type=Path, required=True)
    ap.add_argument("--src", type=Path, default=ROOT.parent / "shared/data/multi30k/test_2016_flickr.en.gz")
    ap.add_argument("--ref", type=Path, default=ROOT.parent / "shared/data/multi30k/test_2016_flickr.de.gz")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--torch-runs", type=int, default=1, help="runs of the (slow) PyTorch decoder")
    ap.add_argument("--binary", type=Path, default=ROOT / "target/release/transformer")
    ap.add_argument("--child", choices=["ct2", "torch"])
    ap.add_argument("--model")
    ap.add_argument("--pieces")
    ap.add_argument("--output")
    args = ap.parse_args()
    if args.child == "ct2":
        return child_ct2(args)
    if args.child == "torch":
        return child_torch(args)

    work = Path(tempfile.mkdtemp(prefix="decode-bench-"))
    ct2_dir = work / "ct2"
    subprocess.run([sys.executable, str(HERE / "to_ctranslate2.py"), "--checkpoint", str(args.checkpoint), "--bpe",
                    str(args.bpe), "--out", str(ct2_dir)], check=True, capture_output=True)
    src_plain = work / "src.txt"
    src_plain.write_text("".join(l + "\n" for l in read(args.src)))
    pieces = subprocess.run([str(args.binary), "bpe", "apply", "--model", str(args.bpe), "--input", str(src_plain)],
                            check=True, capture_output=True, text=True).stdout
    (work / "src.pieces").write_text(pieces)
    n = len(read(args.src))

    results = {"ours": [], "ours_ee": [], "ct2": [], "torch": []}
    for r in range(args.runs):
        o = run_ours(args.binary, args.checkpoint, args.bpe, src_plain, args.threads, args.max_tokens, work / "ours.txt")
        results["ours"].append(o)
        results["ours_ee"].append(run_ours(args.binary, args.checkpoint, args.bpe, src_plain, args.threads,
                                           args.max_tokens, work / "ours_ee.txt", ["--early-exit"]))
        c = subprocess.run([sys.executable, __file__, "--child", "ct2", "--checkpoint", str(args.checkpoint), "--bpe",
                            str(args.bpe), "--model", str(ct2_dir), "--pieces",
                            str(work / "src.pieces"), "--output", str(work / "ct2.pieces"), "--threads",
                            str(args.threads), "--max-tokens", str(args.max_tokens)],
                           check=True, capture_output=True, text=True)
        results["ct2"].append(json.loads(c.stdout.strip().splitlines()[-1]))
        if r < args.torch_runs:
            t = subprocess.run([sys.executable, __file__, "--child", "torch", "--checkpoint", str(args.checkpoint),
                                "--bpe", str(args.bpe), "--pieces", str(work / "src.pieces"), "--output",
                                str(work / "torch.pieces"), "--threads", str(args.threads), "--max-tokens",
                                str(args.max_tokens)], check=True, capture_output=True, text=True)
            results["torch"].append(json.loads(t.stdout.strip().splitlines()[-1]))
        print(f"run {r + 1}: ours {o['secs']:.2f} s, ours --early-exit {results['ours_ee'][-1]['secs']:.2f} s, "
              f"CTranslate2 {results['ct2'][-1]['secs']:.2f} s"
              + (f", PyTorch {results['torch'][-1]['secs']:.2f} s" if r < args.torch_runs else ""), flush=True)

    def text(name):
        t = subprocess.run([str(args.binary), "bpe", "decode", "--model", str(args.bpe), "--input",
                            str(work / f"{name}.pieces")], check=True, capture_output=True, text=True).stdout
        (work / f"{name}.txt").write_text(t)
        return t.split("\n")[:-1]

    ours_lines = (work / "ours.txt").read_text().split("\n")[:-1]
    ee_lines = (work / "ours_ee.txt").read_text().split("\n")[:-1]
    engines = [("ours", "transformer"), ("ours_ee", "ours --early-exit")] + [
        (k, name) for k, name in (("ct2", "CTranslate2"), ("torch", "PyTorch")) if results[k]]
    texts = {k: text(k) for k, _ in engines[2:]}
    same = {k: sum(a == b for a, b in zip(ours_lines, texts[k])) for k, _ in engines[2:]}
    same["ours_ee"] = sum(a == b for a, b in zip(ours_lines, ee_lines))
    out_tokens = sum(len(l.split(" ")) for l in pieces.split("\n")[:-1])  # source tokens, for reference

    def bleu(path):
        r = subprocess.run([str(args.binary), "bleu", "--ref", str(args.ref), "--hyp", str(path), "--score-only"],
                           check=True, capture_output=True, text=True)
        return float(r.stdout.strip())

    med = {k: statistics.median(x["secs"] for x in v) for k, v in results.items() if v}
    rss = {k: max(x["rss_mb"] for x in v) for k, v in results.items() if v}
    print(f"\n{n} sentences ({out_tokens} source tokens), beam 4, α 0.6, {args.threads} threads, "
          f"float32, median of {args.runs} runs (decoding only, model loading excluded)")
    print(f"{'engine':<14}{'seconds':>9}{'sent/s':>9}{'src tok/s':>11}{'peak RSS':>11}{'BLEU':>8}")
    for k, name in engines:
        print(f"{name:<14}{med[k]:>9.2f}{n / med[k]:>9.1f}{out_tokens / med[k]:>11.0f}{rss[k]:>9.0f} MB"
              f"{bleu(work / f'{k}.txt'):>8.2f}")
    for k, name in engines[1:]:
        print(f"ours vs {name}: {med[k] / med['ours']:.2f}x the speed; identical outputs {same[k]}/{n}")
    ee_ct2 = sum(a == b for a, b in zip(ee_lines, texts["ct2"]))
    print(f"ours --early-exit vs CTranslate2 (the same stopping rule): {med['ct2'] / med['ours_ee']:.2f}x the speed; "
          f"identical outputs {ee_ct2}/{n}")
    for k in ("ours", "ours_ee"):
        print(f"{k}: {results[k][-1]['stderr']}")
    print(f"(files in {work})")


if __name__ == "__main__":
    main()
