#!/usr/bin/env python3
"""PyTorch reference for the Penn Treebank parsing run: the same model, recipe, data, vocabulary,
time budget and model selection as `transformer train --config configs/ptb-parse.toml`, trained
by PyTorch on the same cores.

The model, batching, loss and checkpoint layout are those of bench/multi30k/reference.py, imported
from it (not copied): a post-norm encoder-decoder with tied embeddings under the Rust layout's
parameter names, Adam (0.9, 0.98, 1e-9), the Eq. 3 schedule with warmup and lr_scale, label
smoothing, residual and attention dropout, token-budget batches, bf16 autocast where our trainer
would use bf16 products.

Same config: [model] and [train] of the run's TOML file (layers, widths, heads, dropout and
attention_dropout, label smoothing, warmup, lr_scale, token budgets, seed, bf16_matmul, time limit,
checkpoint interval, keep_last, valid_f1_epochs, valid_f1_beam, valid_f1_constrained).
Same data and vocabulary: the training pairs are the ids that `transformer prepare --task parsing`
writes from the treebank files of data.train_files with the run's vocabulary (data.bpe, learned by
our `transformer train`) and filters (data.max_tokens, data.max_ratio).
Same model selection: every valid_f1_epochs epochs and at the end, the model is saved and
`transformer evaluate --beam {valid_f1_beam} --skip-long` scores its EVALB F1 on the validation
trees (data.valid_files); the best is kept as best.safetensors. The time this takes counts
against the budget, as in our trainer.
Same decoding and scoring: checkpoints are in the project's safetensors format with
`task = parsing`, so the `transformer` binary parses and scores them exactly as it does its own.

Usage (from the repository root, after `cargo build --release` and a `transformer train` run that
learned the vocabulary):

    python bench/ptb-parse/reference.py --config configs/ptb-parse.toml \
        --out runs/ptb-parse-torch [--threads 2] [--minutes 30] [--binary target/release/transformer]

It prints the training summary and the `transformer evaluate` report of best.safetensors on the
test files (wsj_0175..wsj_0189; beam 21, α 0.3, max length input + 300), unconstrained and
with --constrained.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("multi30k_reference", ROOT / "bench/multi30k/reference.py")
m30k = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(m30k)
PAD = m30k.PAD
T0 = time.time()


def log(msg: str):
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def run(cmd):
    """Runs a command of the binary (echoed, output captured); a failure prints its output and stops."""
    print(f"[{time.time() - T0:7.1f}s] + " + " ".join(str(x) for x in cmd), flush=True)
    r = subprocess.run([str(x) for x in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------


def prepare(binary, src, files, bpe: Path, dest: Path, max_tokens, max_ratio):
    """`transformer prepare --task parsing` into dest, unless dest already holds these pairs (same
    command and the same vocabulary file bytes, recorded in dest/reference-stamp.json)."""
    cmd = [binary, "prepare", "--task", "parsing", "--src", src] + (["--files", files] if files else [])
    cmd += ["--bpe", bpe, "--out", dest, "--max-tokens", max_tokens, "--max-ratio", max_ratio]
    stamp = {"command": [str(x) for x in cmd], "vocab_sha256": hashlib.sha256(bpe.read_bytes()).hexdigest()}
    stamp_path = dest / "reference-stamp.json"
    if not ((dest / "meta.json").exists() and stamp_path.exists() and json.loads(stamp_path.read_text()) == stamp):
        r = run(cmd)
        log(r.stdout.strip())
        stamp_path.write_text(json.dumps(stamp))
    return m30k.load_prepared(dest)


def vocab_size_of(bpe: Path) -> int:
    """Entries of the vocabulary: max id + 1 over the BPE pieces and the added (special and tree)
    tokens, which is what `tokenizers` counts with added tokens (checked against the count)."""
    v = json.loads(bpe.read_text())
    ids = set(v["model"]["vocab"].values()) | {a["id"] for a in v.get("added_tokens", [])}
    n = max(ids) + 1
    if len(ids) != n:
        log(f"warning: {bpe} has {len(ids)} distinct ids but its largest is {n - 1}; using {n}")
    return n


# ------------------------------------------------------------------------------------------------
# Checkpoints and F1
# ------------------------------------------------------------------------------------------------


def save_checkpoint(model, c, step, vocab_hash, path: Path):
    """Our checkpoint format (as bench/multi30k/reference.py writes it) with the `task` metadata of a
    parsing model, written atomically."""
    tensors = {n: model.w(n).detach().float().contiguous() for n in model.names}
    meta = {"format": "transformer-checkpoint", "format_version": "1", "config": json.dumps(c, separators=(",", ":")),
            "step": str(step), "vocab_hash": vocab_hash, "task": "parsing",
            "trained_by": "bench/ptb-parse/reference.py (PyTorch)"}
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, path)
    return path


def save_rotating(model, c, step, vocab_hash, out: Path, keep_last: int):
    path = save_checkpoint(model, c, step, vocab_hash, out / f"ckpt-{step:08d}.safetensors")
    for old in sorted(out.glob("ckpt-*.safetensors"))[:-keep_last]:
        old.unlink()
    return path


def evalb_summary(text: str) -> dict:
    """The numbers of an EVALB report (its `-- All --` block), the repaired outputs and perplexity."""
    out = {}
    block = text.split("-- All --", 1)[-1].split("-- len<=", 1)[0]
    for key, name in (("f1", "Bracketing FMeasure"), ("recall", "Bracketing Recall"),
                      ("precision", "Bracketing Precision"), ("valid", "Number of Valid sentence"),
                      ("errors", "Number of Error sentence")):
        m = re.search(rf"^{name}\s*=\s*(\S+)", block, re.M)
        if m:
            try:
                out[key] = float(m.group(1))
            except ValueError:
                out[key] = float("nan")
    m = re.search(r"^Outputs repaired\s*=\s*(\d+) of (\d+)", text, re.M)
    if m:
        out["repaired"], out["sentences"] = int(m.group(1)), int(m.group(2))
    return out


def summary_lines(text: str) -> str:
    """The report from `=== Summary ===` on (the per-sentence table is left in the file)."""
    i = text.find("=== Summary ===")
    return text[i:] if i >= 0 else text


# ------------------------------------------------------------------------------------------------
# Main
# ------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs/ptb-parse.toml")
    ap.add_argument("--out", type=Path, default=ROOT / "runs/ptb-parse-torch")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--minutes", type=float, help="time budget (default: the config's time_limit_minutes)")
    ap.add_argument("--binary", type=Path, default=ROOT / "target/release/transformer")
    ap.add_argument("--bpe", type=Path, help="the vocabulary (default: the config's data.bpe)")
    ap.add_argument("--test-files", default="wsj_0175..wsj_0189", help="the test files of the treebank")
    ap.add_argument("--bf16-matmul", choices=["auto", "true", "false"],
                    help="override the config's train.bf16_matmul")
    args = ap.parse_args()
    # Paths given on the command line are the caller's; the config's are the repository root's
    # (where our binary is run from), as in bench/multi30k/reference.py.
    args.out, args.binary = args.out.resolve(), args.binary.resolve()
    if args.bpe is not None:
        args.bpe = args.bpe.resolve()
    cfg = tomllib.loads(args.config.read_text())
    os.chdir(ROOT)
    torch.set_num_threads(args.threads)
    d, t = cfg["data"], cfg["train"]
    if d.get("task") != "parsing":
        sys.exit(f"{args.config}: data.task must be \"parsing\" (bench/multi30k/reference.py is for translation)")
    if not args.binary.exists():
        sys.exit(f"{args.binary} does not exist: run `cargo build --release` first")
    bpe = args.bpe or Path(d["bpe"]).resolve()
    if not bpe.exists():
        sys.exit(f"{bpe} does not exist: run `transformer train --config {args.config}` first, which learns it")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    stale = sorted(out.glob("ckpt-*.safetensors")) + [p for p in [out / "best.safetensors"] if p.exists()]
    if stale:
        log(f"removing {len(stale)} checkpoints of an earlier run in {out} (this script does not resume)")
        for p in stale:
            p.unlink()

    # Data: the training pairs filtered as our trainer filters them; the validation pairs as our
    # trainer validates on (every pair whose sides fit model.max_positions).
    vocab_size = vocab_size_of(bpe)
    c = m30k.model_config(cfg, vocab_size)
    train, meta = prepare(args.binary, d["train_src"], d.get("train_files"), bpe, out / "prepared-train",
                          d.get("max_tokens", 250), d.get("max_ratio", 3.0))
    valid, _ = prepare(args.binary, d["valid_src"], d.get("valid_files"), bpe, out / "prepared-valid",
                       c["max_positions"] - 1, 1e9)
    vocab_hash = meta["vocab_hash"]
    dev_gold, test_gold = out / "dev.gold", out / "test.gold"
    run([args.binary, "treebank", "--input", d["valid_src"]] + (["--files", d["valid_files"]] if d.get("valid_files") else [])
        + ["--trees", dev_gold])
    run([args.binary, "treebank", "--input", d["valid_src"], "--files", args.test_files, "--trees", test_gold])

    # The recipe (bench/multi30k/reference.py's, whose training loop lives in its main()).
    seed = t.get("seed", 1)
    torch.manual_seed(seed)
    model = m30k.Model(c, seed)
    n_params = sum(p.numel() for p in model.parameters())
    warmup, lr_scale = t.get("warmup", 4000), t.get("lr_scale", 1.0)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_scale * c["d_model"] ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup ** -1.5))
    accumulate = t.get("accumulate", 1)
    bf16 = t.get("bf16_matmul", False)
    if args.bf16_matmul is not None:
        bf16 = {"auto": "auto", "true": True, "false": False}[args.bf16_matmul]
    if bf16 == "auto":
        bf16 = m30k.cpu_has_bf16_unit()
    elif not isinstance(bf16, bool):
        sys.exit(f"{args.config}: train.bf16_matmul must be true, false or \"auto\", not {bf16!r}")
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    batches = m30k.make_batches(train, t["max_src_tokens"], t["max_tgt_tokens"])
    vbatches = m30k.make_batches(valid, t["max_src_tokens"], t["max_tgt_tokens"])
    budget = 60.0 * (args.minutes if args.minutes is not None else t["time_limit_minutes"])
    ckpt_every = 60.0 * t.get("checkpoint_minutes", 10.0)
    keep = t.get("keep_last", 5)
    f1_epochs, f1_beam = t.get("valid_f1_epochs", 2), t.get("valid_f1_beam", 4)
    log(f"{n_params} parameters (vocabulary {vocab_size}), {len(train)} training pairs in {len(batches)} batches, "
        f"{len(valid)} validation pairs, {args.threads} threads, {budget / 60:g} min"
        f"{', bf16 autocast' if bf16 else ''}; F1 every {f1_epochs} epochs with beam {f1_beam}")

    best = {"f1": None, "step": None}
    (out / "metrics.jsonl").write_text("")

    def f1_checkpoint(step, epoch):
        """Our trainer's f1_checkpoint: decode the validation sentences with the current model
        (beam valid_f1_beam, §6.3's α and length, long sentences skipped, the training precision),
        score them with EVALB, keep the model as best.safetensors if it is the best so far."""
        t1 = time.time()
        cand = save_checkpoint(model, c, step, vocab_hash, out / "f1-candidate.safetensors")
        r = run([args.binary, "evaluate", "--checkpoint", cand, "--bpe", bpe, "--ref", dev_gold,
                 "--beam", f1_beam, "--skip-long", "--threads", args.threads, "--precision", "bf16" if bf16 else "f32"]
                + (["--constrained"] if t.get("valid_f1_constrained", False) else []))
        s = evalb_summary(r.stdout)
        f1 = s.get("f1", float("nan"))
        f1 = f1 if math.isfinite(f1) else 0.0
        is_best = best["f1"] is None or f1 > best["f1"]
        if is_best:
            best["f1"], best["step"] = f1, step
            os.replace(cand, out / "best.safetensors")
        else:
            cand.unlink()
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"kind": "valid_f1", "step": step, "epoch": epoch, "f1": f1,
                                "malformed": s.get("repaired"), "best": is_best}) + "\n")
        log(f"validation F1 {f1:.2f} at step {step} ({s.get('repaired', '?')} of {s.get('sentences', '?')} outputs "
            f"repaired, {time.time() - t1:.0f} s){'; best so far, saved as best.safetensors' if is_best else ''}")

    rng = random.Random(seed)
    start = last_ckpt = last_log = time.time()
    step, epoch, tokens = 0, 0, 0
    step_time = 0.0  # seconds in training steps only (no validation, F1 or checkpoint)
    stopped = None
    while stopped is None:
        order = list(range(len(batches)))
        rng.shuffle(order)
        for g in range(0, len(order), accumulate):
            if time.time() - start >= budget:
                stopped = f"time limit of {budget / 60:g} minutes"
                break
            t_step = time.time()
            group = [m30k.tensors(train, batches[b]) for b in order[g : g + accumulate]]
            ntok = sum(int((x[3] != PAD).sum()) for x in group)
            opt.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for src, slen, tin, tout, tlen in group:
                with amp():
                    logits = model(src, slen, tin, tlen)
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tout.reshape(-1),
                                       ignore_index=PAD, label_smoothing=c["label_smoothing"], reduction="sum") / ntok
                loss.backward()
                loss_sum += loss.item()
            opt.step()
            sched.step()
            step += 1
            tokens += ntok
            step_time += time.time() - t_step
            if time.time() - last_log >= 30:
                el = time.time() - start
                log(f"epoch {epoch + 1} step {step} loss {loss_sum:.4f} {tokens / el:.0f} tgt tok/s "
                    f"lr {sched.get_last_lr()[0]:.2e}")
                last_log = time.time()
            if time.time() - last_ckpt >= ckpt_every:
                save_rotating(model, c, step, vocab_hash, out, keep)
                last_ckpt = time.time()
        else:
            epoch += 1
            v = m30k.validate(model, valid, vbatches, amp)
            log(f"epoch {epoch} done at step {step}: valid perplexity {math.exp(v):.2f}")
            if f1_epochs > 0 and epoch % f1_epochs == 0:
                f1_checkpoint(step, epoch)
    # As our trainer: the final model is scored too (the budget is spent by then, so this runs
    # past it, as ours does), then saved as the last checkpoint.
    if f1_epochs > 0:
        f1_checkpoint(step, epoch)
    save_rotating(model, c, step, vocab_hash, out, keep)
    elapsed = time.time() - start
    v = m30k.validate(model, valid, vbatches, amp)
    log(f"PyTorch {torch.__version__}: {step} updates, {epoch} full epochs in {elapsed:.0f} s ({stopped}); "
        f"valid perplexity {math.exp(v):.2f}; {tokens} target tokens, {tokens / elapsed:.0f} target tokens/s over "
        f"the run (validation included), {tokens / max(step_time, 1e-9):.0f} in training steps alone; best validation F1 "
        + (f"{best['f1']:.2f} at step {best['step']}" if best["f1"] is not None else "never scored (valid_f1_epochs = 0)"))

    ckpt = out / "best.safetensors"
    if not ckpt.exists():
        ckpt = sorted(out.glob("ckpt-*.safetensors"))[-1]
    for label, extra in (("unconstrained", []), ("constrained", ["--constrained"])):
        trees = out / f"test-{label}.trees"
        r = run([args.binary, "evaluate", "--checkpoint", ckpt, "--bpe", bpe, "--ref", test_gold,
                 "--threads", args.threads, "--output", trees] + extra)
        (out / f"test-{label}.evalb").write_text(r.stdout + r.stderr)
        log(f"== {ckpt.name} on {args.test_files} ({label}; beam 21, α 0.3, max length input + 300; "
            f"full report in {out / f'test-{label}.evalb'})\n{summary_lines(r.stdout)}{r.stderr}")


if __name__ == "__main__":
    main()
