#!/usr/bin/env python3
"""Decoding over a vocabulary shortlist, side by side: ours (`translate --shortlist`) against our
full vocabulary, and CTranslate2 with the same table as its vocabulary map (`use_vmap`, the
`vmap.txt` that `transformer shortlist --ct2-vmap` writes) against its own full vocabulary, on the
same weights, the same token ids and the same cores; f32 (float32), beam 4, batched.

    python bench/decode/shortlist.py --checkpoint CKPT --bpe BPE.json [--per-source 20,50,100]
        [--frequent 100] [--threads 2] [--runs 3]
    python bench/decode/shortlist.py --marian DIR ...   (a Hugging Face Marian directory)

The table is learned from Multi30k's training pairs (`--train-src/--train-tgt`), once per
`--per-source`. Runs are interleaved (every configuration once, then again), each in its own
process; medians of `--runs`. CTranslate2 is timed at 1 thread, at `--threads`, and with
`--threads` batches at once (inter_threads), its fastest kept for each configuration. It ends with
one line a configuration:

    shortlist K: ours X.XXx our full vocabulary (BLEU a vs b), CTranslate2 Y.YYx its own (BLEU c vs d)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import HERE, ROOT, marian_tokenizer, prepare_models, read, run_ours, write_pieces  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--bpe", type=Path)
    ap.add_argument("--marian", type=Path, help="a Hugging Face Marian directory (instead of --checkpoint/--bpe)")
    ap.add_argument("--src", type=Path, default=ROOT / "data/multi30k/test_2016_flickr.en.gz")
    ap.add_argument("--ref", type=Path, default=ROOT / "data/multi30k/test_2016_flickr.de.gz")
    ap.add_argument("--train-src", type=Path, default=ROOT / "data/multi30k/train.en.gz")
    ap.add_argument("--train-tgt", type=Path, default=ROOT / "data/multi30k/train.de.gz")
    ap.add_argument("--per-source", default="20,50,100", help="comma-separated: targets kept per source token")
    ap.add_argument("--frequent", type=int, default=100)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--binary", type=Path, default=ROOT / "target/release/transformer")
    ap.add_argument("--ct2-setting", default="all", help="CTranslate2's threads: all (1, --threads, and --threads "
                    "batches at once), or one of them: 1, N (one batch on N threads), Nx1 (N batches at once)")
    args = ap.parse_args()
    ks = [int(k) for k in args.per_source.split(",")]
    work = Path(tempfile.mkdtemp(prefix="shortlist-bench-"))
    ct2_dir = prepare_models(args, work)
    model = ["--checkpoint", str(args.checkpoint), "--bpe", str(args.bpe)]
    coverage = {}
    for k in ks:
        r = subprocess.run([str(args.binary), "shortlist", *model, "--src", str(args.train_src), "--tgt",
                            str(args.train_tgt), "--per-source", str(k), "--frequent", str(args.frequent), "--output",
                            str(work / f"list-{k}.json"), "--ct2-vmap", str(work / f"vmap-{k}.txt")],
                           check=True, capture_output=True, text=True)
        coverage[k] = r.stdout.strip().split(": ", 1)[1]
        d = work / f"ct2-vmap-{k}"
        d.mkdir()
        for f in ct2_dir.iterdir():
            (d / f.name).symlink_to(f)
        shutil.copy(work / f"vmap-{k}.txt", d / "vmap.txt")
    src_lines = read(args.src)
    src_plain = work / "src.txt"
    src_plain.write_text("".join(l + "\n" for l in src_lines))
    write_pieces(args, src_lines, src_plain, work / "src.pieces")
    n = len(src_lines)

    configs = [None] + ks
    results = {}
    settings = [(th, 1) for th in sorted({1, args.threads})] + ([(1, args.threads)] if args.threads > 1 else [])
    if args.ct2_setting != "all":
        inter, _, th = args.ct2_setting.partition("x")
        settings = [(int(th), int(inter))] if th else [(int(inter), 1)]
    for run in range(args.runs):
        for k in configs:
            extra = ["--precision", "f32", "--beam", "4"] + (["--shortlist", str(work / f"list-{k}.json")] if k else [])
            results.setdefault(("ours", k), []).append(
                run_ours(args.binary, args.checkpoint, args.bpe, src_plain, args.threads, args.max_tokens,
                         work / f"ours-{k}.txt", extra))
            for th, inter in settings:
                name = f"{th}" if inter == 1 else f"{inter}x{th}"
                c = subprocess.run([sys.executable, str(HERE / "run.py"), "--child", "ct2", "--model",
                                    str(work / f"ct2-vmap-{k}" if k else ct2_dir), "--pieces", str(work / "src.pieces"),
                                    "--output", str(work / f"ct2-{k}-{name}.pieces"), "--threads", str(th), "--inter",
                                    str(inter), "--max-tokens", str(args.max_tokens), "--compute-type", "float32",
                                    "--beam", "4"] + (["--use-vmap"] if k else []),
                                   check=True, capture_output=True, text=True)
                r = json.loads(c.stdout.strip().splitlines()[-1])
                r["setting"] = name
                results.setdefault((f"ct2@{name}", k), []).append(r)
        print(f"run {run + 1}: " + ", ".join(f"{e} {k or 'full'} {results[(e, k)][-1]['secs']:.2f} s"
                                             for e in sorted({e for e, _ in results}) for k in configs), flush=True)

    def text_of(path):
        if path.suffix != ".pieces":
            return path
        if args.marian:
            tok = marian_tokenizer(args.marian)
            t = "".join(tok.decode(tok.convert_tokens_to_ids(l.split(" ")) if l else [], skip_special_tokens=True)
                        + "\n" for l in path.read_text().split("\n")[:-1])
        else:
            t = subprocess.run([str(args.binary), "bpe", "decode", "--model", str(args.bpe), "--input", str(path)],
                               check=True, capture_output=True, text=True).stdout
        out = path.with_suffix(".txt")
        out.write_text(t)
        return out

    def bleu(path):
        r = subprocess.run([str(args.binary), "bleu", "--ref", str(args.ref), "--hyp", str(text_of(path)),
                            "--score-only"], check=True, capture_output=True, text=True)
        return float(r.stdout.strip())

    def lines(path):
        return text_of(path).read_text().split("\n")[:-1]

    summary = {}
    for (engine, k), runs in results.items():
        secs = statistics.median(r["secs"] for r in runs)
        path = work / (f"ours-{k}.txt" if engine == "ours" else f"ct2-{k}-{engine[4:]}.pieces")
        summary[(engine, k)] = (n / secs, bleu(path), lines(path))
    for k in configs:
        best = max((e for (e, kk) in summary if e.startswith("ct2@") and kk == k), key=lambda e: summary[(e, k)][0])
        summary[("ct2", k)] = summary[(best, k)]
        summary[("ct2_setting", k)] = best[4:]
    cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True)
                .stdout.splitlines() if l.startswith("Model name")), "?")
    print(f"\n{n} sentences, f32 beam 4 batched, {args.threads} threads, median of {args.runs} runs; {cpu}")
    for k in ks:
        print(f"shortlist {k}: {coverage[k]}")
    print(f"{'engine':<10}{'list':>6}{'sent/s':>9}{'vs full':>9}{'BLEU':>8}{'identical':>11}")
    for engine in ("ours", "ct2"):
        full = summary[(engine, None)]
        for k in configs:
            s = summary[(engine, k)]
            same = sum(a == b for a, b in zip(s[2], full[2]))
            name = "ours" if engine == "ours" else f"CT2 {summary[('ct2_setting', k)]}"
            print(f"{name:<10}{k or 'full':>6}{s[0]:>9.1f}{s[0] / full[0]:>8.2f}x{s[1]:>8.2f}{same:>6}/{n}")
    print()
    for k in ks:
        o, of, c, cf = summary[("ours", k)], summary[("ours", None)], summary[("ct2", k)], summary[("ct2", None)]
        print(f"shortlist {k}: ours {o[0] / of[0]:.2f}x our full vocabulary (BLEU {o[1]:.2f} vs {of[1]:.2f}), "
              f"CTranslate2 {c[0] / cf[0]:.2f}x its own (BLEU {c[1]:.2f} vs {cf[1]:.2f}); "
              f"ours {o[0] / c[0]:.2f}x CTranslate2 with the same table")
    print(f"(files in {work})")


if __name__ == "__main__":
    main()
