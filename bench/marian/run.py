#!/usr/bin/env python3
"""This project against the real Marian, side by side on one machine, in one command: training
throughput and BLEU at equal time, then decoding speed and memory on the model Marian trained.

    /work/venv/bin/pip install pymarian        # Marian 1.12.42, CPU
    cargo build --release
    python bench/marian/run.py [--minutes 10] [--threads 2] [--runs 2] [--train-runs N] [--no-decode]
                               [--finetune-minutes M] [--decode-model DIR] [--marian-mkl auto|plain|intel]

Training: both engines get the quick start's recipe (configs/multi30k-en-de.toml: Multi30k
en→de, 3+3 layers, d_model 256, FFN 1024, 4 heads, tied embeddings, ReLU, post-norm, dropout
0.2, label smoothing 0.1, a budget of 4,096 tokens an update, warmup 500, Eq. 3 at half scale) for
`--minutes` of wall time each on `--threads` threads, one after the other. Marian learns its own
8,000-piece SentencePiece vocabulary and stops on SIGTERM (saving); ours learns its 8,000-entry
BPE and stops at `train.time_limit_minutes`. Throughput is target tokens per second of training
(Marian: the labels of its log over the summed interval times; ours: the metrics' tokens over the
training seconds it reports less its epoch-end validations, which Marian here does not run); each
budget starts after its vocabulary is learned. Each engine counts the budget its own way (Marian's
`--mini-batch-words` the source words, ours source and target positions with padding), so their
updates differ in size: each run prints the mean target tokens of an update on both sides.
`--train-runs N` repeats the pair N times, alternating which engine goes first, and prints the medians and every
run's ratio (these VMs vary 10-20% from run to run). BLEU: each engine's last model, beam 4, on test_2016_flickr (cased
sacreBLEU).

Decoding: the model Marian trained, beam 4, Marian's search on both sides (`--normalize 0.6`; ours
`--length-norm marian --alpha 0.6 --max-len-a 3 --max-len-b 0 --suppress-unk`), test_2016_flickr
(1,000 sentences), wall time of
the whole process (load included) and its peak RSS (`/usr/bin/time`): Marian f32 and Marian
intgemm8 (`convert -g intgemm8`), each at 1 thread and at `--threads` (the faster kept, and
named), against ours at f32, bf16 (where the CPU has it) and int8 on the imported model, also each at 1
thread and at `--threads` (the faster kept, and named).
Medians of `--runs` interleaved runs, with each setup's BLEU. `--decode-model DIR` skips training
and decodes a Marian model already trained (DIR/model.npz, DIR/vocab.spm). Ten minutes leave
Marian with a model that does not translate yet (its outputs run to twice the references' length),
which is no test of decoding: `--finetune-minutes M` first trains that model further here for M
minutes (`train --init`, the quick start's batch and bf16 setting) and exports it back to Marian
(`export marian`), and both engines decode that. Ours decodes with its defaults: one batch per
thread at once (`--workers`), sharing the batch budget. Prints one summary block for BENCHMARKS.md.

Marian's CPU build links Intel MKL, which gives other vendors' CPUs its slow generic kernels. On
such a CPU (`--marian-mkl auto`, the default) Marian trains with MKL told the CPU is Intel's (a
two-function library built with `cc` and preloaded), and its decoding is timed both ways, keeping
the faster and naming it; `--marian-mkl plain` runs it as installed.
"""

import argparse
import gzip
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target" / "release" / "transformer"
MARIAN = [sys.executable, "-m", "pymarian"]
DATA = ROOT / "data" / "multi30k"


def unzip(name, dest):
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f, open(dest, "w", encoding="utf-8") as o:
        o.write(f.read())


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-2000:] + r.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}")
    return r


def timed(cmd, env=None):
    """(wall seconds, peak RSS MB, stdout) of one process."""
    t0 = time.perf_counter()
    r = run(["/usr/bin/time", "-f", "%M", *cmd], env=env)
    wall = time.perf_counter() - t0
    rss = int(r.stderr.strip().splitlines()[-1]) / 1024
    return wall, rss, r.stdout


# What MKL asks before it picks its kernels (see the docstring; the figures are in BENCHMARKS.md).
# Marian's wheel exports both and calls them through the PLT, so a preloaded library answers.
MKL_SHIM = "int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_intel_cpu(void) { return 1; }\n"


def marian_envs(work, mode):
    """{name: environment} for Marian's processes: "" (as installed) and/or "mkl-as-intel"."""
    intel = "GenuineIntel" in Path("/proc/cpuinfo").read_text()
    if mode == "plain" or (mode == "auto" and intel):
        return {"": None}
    (work / "mkl_shim.c").write_text(MKL_SHIM)
    run(["cc", "-shared", "-fPIC", "-O2", "-o", work / "libmkl_shim.so", work / "mkl_shim.c"])
    shim = {"mkl-as-intel": dict(os.environ, LD_PRELOAD=str(work / "libmkl_shim.so"))}
    return shim if mode == "intel" else {"": None, **shim}


def bleu(hyp_text, ref):
    import sacrebleu

    refs = ref.read_text(encoding="utf-8").split("\n")[:-1]
    return sacrebleu.corpus_bleu(hyp_text.split("\n")[: len(refs)], [refs]).score


def train_marian(work, minutes, threads, name="marian", env=None):
    model, vocab = work / name / "model.npz", work / name / "vocab.spm"
    model.parent.mkdir()
    cmd = MARIAN + [
        "train", "--type", "transformer", "--model", model, "--train-sets", work / "train.en", work / "train.de",
        "--vocabs", vocab, vocab, "--dim-vocabs", "8000", "8000", "--dim-emb", "256", "--transformer-dim-ffn", "1024",
        "--transformer-heads", "4", "--enc-depth", "3", "--dec-depth", "3", "--tied-embeddings-all",
        "--transformer-ffn-activation", "relu", "--transformer-dropout", "0.2", "--label-smoothing", "0.1",
        "--mini-batch-words", "4096", "--max-length", "100", "--learn-rate", "0.0014", "--lr-warmup", "500",
        "--lr-decay-inv-sqrt", "500", "--optimizer-params", "0.9", "0.98", "1e-09", "--cpu-threads", threads,
        "--sync-sgd", "--shuffle-in-ram", "--disp-freq", "50u", "--save-freq", "100000u", "--valid-freq", "100000u",
        "--overwrite", "--seed", "1",
    ]
    log_path = work / f"{name}-train.log"
    log = open(log_path, "w")
    p = subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT, env=env)
    # Marian has no time limit: SIGTERM once the budget has passed from "Training started" (its
    # vocabulary learned before, as ours is before our time limit counts), which it answers by
    # saving and exiting.
    while "Training started" not in log_path.read_text() and p.poll() is None:
        time.sleep(0.5)
    try:
        p.wait(timeout=minutes * 60)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        p.wait()
    text = log_path.read_text()
    rows = re.findall(r"Up\. (\d+) .* after ([\d,]+) : Time ([\d.]+)s", text)
    if not rows:
        raise SystemExit(f"Marian logged no 50-update interval in {minutes:g} minutes ({log_path}): train longer")
    updates = int(rows[-1][0])
    labels = int(rows[-1][1].replace(",", ""))
    seconds = sum(float(r[2]) for r in rows)
    return model, vocab, updates, labels / seconds, labels / updates


def train_ours(work, minutes, threads, name="ours"):
    out = work / name
    cfg = [
        "train", "--config", ROOT / "configs" / "multi30k-en-de.toml", "--threads", threads,
        "--set", f"train.output_dir=\"{out}\"", "--set", f"data.bpe=\"{work / 'bpe.json'}\"",
        "--set", f"train.time_limit_minutes={minutes}", "--set", "train.checkpoint_minutes=1000",
    ]
    r = run([BIN, *cfg], cwd=ROOT)
    seconds = float(re.findall(r"\(([\d.]+) s of training\)", r.stdout + r.stderr)[-1])
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in recs if r["kind"] == "train"]
    # The validations at each epoch's end count in our time budget; Marian (`--valid-freq` beyond
    # the run) validates nothing, so its time is training alone, and ours leaves them out too. The
    # validation at the last step comes after the reported seconds.
    valid = sum(r.get("seconds", 0.0) for r in recs if r["kind"] == "valid" and r["step"] < train[-1]["step"])
    ckpt = sorted(out.glob("ckpt-*.safetensors"))[-1]
    tokens = sum(r["tokens"] for r in train)
    return ckpt, work / "bpe.json", train[-1]["step"], tokens / (seconds - valid), tokens / len(train)


def finetune_ours(work, m_model, minutes, threads):
    """Marian's model trained further here (`train --init`, the quick start's batch, schedule and
    bf16 setting, its own SentencePiece vocabulary) and written back as a Marian model: what the
    decoding compares when Marian's own budget leaves a model that does not translate yet."""
    imported, out, back = work / "ft-imported", work / "ft", work / "ft-marian"
    run([BIN, "import", "marian", m_model.parent, "--output", imported])
    run([BIN, "train", "--config", ROOT / "configs" / "finetune-opus-mt.toml", "--threads", threads,
         "--set", f"data.bpe=\"{imported / 'tokenizer.json'}\"", "--set", f"train.init=\"{imported / 'model.safetensors'}\"",
         "--set", f"train.output_dir=\"{out}\"", "--set", f"train.time_limit_minutes={minutes}",
         "--set", "train.checkpoint_minutes=1000", "--set", "model.dropout=0.2", "--set", "train.max_src_tokens=4096",
         "--set", "train.max_tgt_tokens=4096", "--set", "train.lr_scale=0.5", "--set", "train.warmup=100",
         "--set", "train.bf16_matmul=\"auto\""], cwd=ROOT)
    ckpt = sorted(out.glob("ckpt-*.safetensors"))[-1]
    run([BIN, "export", "marian", "--checkpoint", ckpt, "--tokenizer", imported / "tokenizer.json", "--output", back])
    recs = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    updates = max(r["step"] for r in recs if r["kind"] == "train")
    return back / "model.npz", back / "vocab.spm", updates


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--finetune-minutes", type=float, default=0.0,
                    help="before decoding, train Marian's model further here for this long and export it back "
                    "to Marian, so that both engines decode a model that translates (0: decode Marian's own)")
    ap.add_argument("--train-runs", type=int, default=1,
                    help="training runs of each engine, interleaved (Marian first in odd runs, ours first in even "
                    "ones); prints each run and the medians")
    ap.add_argument("--no-decode", action="store_true", help="training only")
    ap.add_argument("--marian-mkl", choices=["auto", "plain", "intel"], default="auto",
                    help="Marian's MKL on a CPU that is not Intel's: auto (the default) trains Marian with MKL told "
                    "the CPU is Intel's and decodes both ways, keeping the faster; plain: as installed; intel: "
                    "always told. On an Intel CPU auto is plain")
    ap.add_argument("--decode-model", help="a Marian model directory with model.npz and one shared vocab.spm "
                    "(what this bench's Marian training writes) to decode; no training")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-marian-"))
    for n, dest in (("train.en.gz", "train.en"), ("train.de.gz", "train.de"),
                    ("test_2016_flickr.en.gz", "test.en"), ("test_2016_flickr.de.gz", "test.de")):
        unzip(n, work / dest)
    src, ref = work / "test.en", work / "test.de"
    cpu = next(l.split(":", 1)[1].strip() for l in run(["lscpu"]).stdout.splitlines() if l.startswith("Model name"))
    version = run(MARIAN + ["--version"]).stderr.strip().splitlines()[-1]
    print(f"# {time.strftime('%Y-%m-%d')}, `lscpu` \"{cpu}\", {os.cpu_count()} cores, Marian {version}", flush=True)
    envs = marian_envs(work, a.marian_mkl)
    train_env_name = "mkl-as-intel" if "mkl-as-intel" in envs else ""
    train_env = envs[train_env_name]
    if train_env_name:
        print(f"Marian's MKL is told the CPU is Intel's (LD_PRELOAD {work / 'libmkl_shim.so'}) for training; "
              f"decoding times it {'both ways' if '' in envs else 'that way'}", flush=True)

    if a.decode_model:
        m_model, m_vocab = Path(a.decode_model) / "model.npz", Path(a.decode_model) / "vocab.spm"
        print(f"decoding only: the Marian model {m_model}")
    else:
        print(f"training, {a.minutes:g} min each, {a.threads} threads:")
        rows = []
        for i in range(a.train_runs):
            suffix = "" if i == 0 else f"-{i + 1}"
            order = ["marian", "ours"] if i % 2 == 0 else ["ours", "marian"]
            for who in order:
                if who == "marian":
                    m_model, m_vocab, m_updates, m_tps, m_batch = train_marian(work, a.minutes, a.threads,
                                                                               "marian" + suffix, env=train_env)
                else:
                    o_ckpt, o_bpe, o_updates, o_tps, o_batch = train_ours(work, a.minutes, a.threads, "ours" + suffix)
            m_out = run(MARIAN + ["decode", "-m", m_model, "-v", m_vocab, m_vocab, "-i", src, "--beam-size", "4",
                                  "--normalize", "0.6", "--cpu-threads", a.threads, "--quiet"], env=train_env).stdout
            o_out = run([BIN, "translate", "--checkpoint", o_ckpt, "--bpe", o_bpe, "--input", src]).stdout
            m_bleu, o_bleu = bleu(m_out, ref), bleu(o_out, ref)
            rows.append((m_tps, o_tps, m_bleu, o_bleu))
            run_name = f"run {i + 1} ({' then '.join(order)})" if a.train_runs > 1 else ""
            if run_name:
                print(f"  {run_name}:")
            print(f"  Marian {m_tps:,.0f} target tokens/s, {m_updates} updates of {m_batch:,.0f} target tokens, "
                  f"BLEU {m_bleu:.2f} (last model)")
            print(f"  ours   {o_tps:,.0f} target tokens/s, {o_updates} updates of {o_batch:,.0f} target tokens, "
                  f"BLEU {o_bleu:.2f} (last checkpoint)")
            print(f"  ratio  {o_tps / m_tps:.2f}x the throughput, {o_bleu - m_bleu:+.2f} BLEU", flush=True)
        if a.train_runs > 1:
            med = [statistics.median(r[j] for r in rows) for j in range(4)]
            ratios = sorted(r[1] / r[0] for r in rows)
            print(f"  medians of {a.train_runs} runs: Marian {med[0]:,.0f} and ours {med[1]:,.0f} target tokens/s, "
                  f"{med[1] / med[0]:.2f}x (runs {', '.join(f'{x:.2f}' for x in ratios)}); "
                  f"BLEU {med[2]:.2f} and {med[3]:.2f}", flush=True)
        if a.no_decode:
            return

    if a.finetune_minutes > 0:
        m_model, m_vocab, ft_updates = finetune_ours(work, m_model, a.finetune_minutes, a.threads)
        print(f"decoding Marian's model after {a.finetune_minutes:g} min of training here ({ft_updates} updates), "
              f"exported back to Marian", flush=True)

    # Decoding the model Marian trained (or the one given, or the one fine-tuned here).
    imported = work / "imported"
    run([BIN, "import", "marian", m_model.parent, "--output", imported])
    m_int8 = work / "model.intgemm8.bin"
    run(MARIAN + ["convert", "-f", m_model, "-t", m_int8, "-g", "intgemm8"], env=train_env)
    marian_decode = lambda model, t: MARIAN + ["decode", "-m", model, "-v", m_vocab, m_vocab, "-i", src,
                                               "--beam-size", "4", "--normalize", "0.6", "--cpu-threads", t,
                                               "--mini-batch", "32", "--maxi-batch", "100", "--quiet"]
    # Ours with Marian's search (its length normalisation, its length limit 3·source, no UNK), so
    # both engines do the same work even where an undertrained model runs to the limit.
    ours_decode = lambda p, t: [BIN, "translate", "--checkpoint", imported / "model.safetensors", "--tokenizer",
                                imported / "tokenizer.json", "--input", src, "--precision", p, "--threads", t,
                                "--alpha", "0.6", "--length-norm", "marian", "--max-len-a", "3", "--max-len-b", "0",
                                "--suppress-unk"]
    # (name, command, environment): Marian at 1 thread and at --threads, and with its MKL as
    # installed and told the CPU is Intel's where --marian-mkl asks for both.
    setups = {}
    for prec, model in (("f32", m_model), ("intgemm8", m_int8)):
        for t in sorted({"1", a.threads}):
            for e, env in envs.items():
                setups[f"marian {prec} {t}t{' ' + e if e else ''}"] = (marian_decode(model, t), env)
    precisions = ["f32", "int8"]
    if os.system("grep -q -E 'amx_bf16|avx512_bf16' /proc/cpuinfo") == 0:
        precisions.insert(1, "bf16")
    setups.update({f"ours {p} {t}t": (ours_decode(p, t), None) for p in precisions for t in sorted({"1", a.threads})})
    times = {k: [] for k in setups}
    rss, scores = {}, {}
    for _ in range(a.runs):
        for k, (cmd, env) in setups.items():
            wall, peak, out = timed(cmd, env)
            times[k].append(wall)
            rss[k] = max(rss.get(k, 0), peak)
            if k not in scores:
                scores[k] = bleu(out, ref)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = lambda prefix: min((k for k in med if k.startswith(prefix)), key=med.get)
    mf, mi = best("marian f32"), best("marian intgemm8")
    print(f"decoding test_2016_flickr (1,000 sentences, beam 4, load included), medians of {a.runs}:")
    for k in med:
        print(f"  {k:35s} {med[k]:6.2f} s  peak RSS {rss[k]:5.0f} MB  BLEU {scores[k]:5.2f}")
    for p in precisions:
        k = best(f"ours {p} ")
        print(f"  {k}: {med[mf] / med[k]:.2f}x Marian f32 ({mf}), {med[mi] / med[k]:.2f}x Marian intgemm8 ({mi}); "
              f"{rss[k]:.0f} MB vs {rss[mf]:.0f} / {rss[mi]:.0f} MB")
    # Where our time goes at each precision (one `--profile` run at --threads, after the timings):
    # the products' share and rate, at f32 and bf16 against the unit's peak measured then, which
    # says how far a product-bound figure could still move on this CPU.
    print(f"our profile at {a.threads} threads (translate --profile):")
    for p in precisions:
        err = run(ours_decode(p, a.threads) + ["--profile"]).stderr.splitlines()
        for line in err:
            if line.strip().split(":")[0] in ("matmul", "attention fwd", "beam search (normalise + top-k)", "other"):
                print(f"  {p:5s} {line.strip()}")


if __name__ == "__main__":
    main()
