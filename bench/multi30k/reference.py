#!/usr/bin/env python3
"""PyTorch reference for the Multi30k En->De run: the same model, recipe, data and time budget as
`transformer train --config configs/multi30k-en-de.toml`, trained by PyTorch on the same cores.

Same config: the script reads the run's TOML file ([model] and [train] sections: layers, widths,
heads, dropout, label smoothing, warmup, lr_scale, token budgets, seed, time limit, checkpoint
interval, keep_last).
Same data and BPE: the training and validation pairs are the token ids that `transformer prepare`
writes with the run's BPE model and filters, read from its memory-mappable files.
Same decoding and scoring: checkpoints are written in the project's safetensors format, so the
`transformer` binary averages them and decodes and scores them exactly as it does its own.

Usage (from the repository root, after `cargo build --release` and one `transformer train` run
that created the BPE model):

    python bench/multi30k/reference.py --config configs/multi30k-en-de.toml \
        --out runs/multi30k-torch [--threads 2] [--minutes 30] [--average 3] [--bf16-matmul false]

It prints the training summary and the `transformer evaluate` report of the averaged checkpoint
on test_2016_flickr (beam 4, α 0.6).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

PAD, BOS, EOS = 0, 1, 2
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------
# Data: the binarised pairs of `transformer prepare`
# ------------------------------------------------------------------------------------------------


def load_prepared(path: Path):
    meta = json.loads((path / "meta.json").read_text())
    sides = []
    for side in ("src", "tgt"):
        ids = np.fromfile(path / f"{side}.bin", dtype="<u4").astype(np.int64)
        idx = np.fromfile(path / f"{side}.idx", dtype="<u8").astype(np.int64)
        sides.append([ids[idx[i] : idx[i + 1]] for i in range(len(idx) - 1)])
    return list(zip(*sides)), meta


def make_batches(pairs, max_src, max_tgt):
    """Length-sorted packing under source and target token budgets counted with padding (the
    decoder side is target + 1 positions): the algorithm of the Rust `make_batches`."""
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]), len(pairs[i][0]), i))
    batches, cur, ms, mt = [], [], 0, 0
    for i in order:
        s, t = len(pairs[i][0]), len(pairs[i][1]) + 1
        ns, nt, n = max(ms, s), max(mt, t), len(cur) + 1
        if cur and (n * ns > max_src or n * nt > max_tgt):
            batches.append(cur)
            cur, ms, mt = [], s, t
        else:
            ms, mt = ns, nt
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def tensors(pairs, batch):
    b = len(batch)
    s = max(len(pairs[i][0]) for i in batch)
    t = max(len(pairs[i][1]) for i in batch) + 1
    src = torch.zeros(b, s, dtype=torch.long)
    tin = torch.zeros(b, t, dtype=torch.long)
    tout = torch.zeros(b, t, dtype=torch.long)
    slen = torch.zeros(b, dtype=torch.long)
    tlen = torch.zeros(b, dtype=torch.long)
    for r, i in enumerate(batch):
        x, y = pairs[i]
        src[r, : len(x)] = torch.from_numpy(x)
        tin[r, 0] = BOS
        tin[r, 1 : len(y) + 1] = torch.from_numpy(y)
        tout[r, : len(y)] = torch.from_numpy(y)
        tout[r, len(y)] = EOS
        slen[r], tlen[r] = len(x), len(y) + 1
    return src, slen, tin, tout, tlen


# ------------------------------------------------------------------------------------------------
# Model: post-norm encoder-decoder, parameters under the Rust layout's names
# ------------------------------------------------------------------------------------------------


def layout(c):
    """(name, shape, init) in the order of the Rust ParamLayout."""
    d, f, h, dk, dv = c["d_model"], c["d_ff"], c["n_heads"], c["d_k"], c["d_v"]
    out = [("embed.weight", (c["vocab_size"], d), "embed")]
    attn = [("w_q", (h * dk, d), "xavier"), ("w_k", (h * dk, d), "xavier"), ("w_v", (h * dv, d), "xavier"),
            ("b_q", (h * dk,), "zeros"), ("b_k", (h * dk,), "zeros"), ("b_v", (h * dv,), "zeros"),
            ("w_o", (d, h * dv), "xavier"), ("b_o", (d,), "zeros")]
    norm = [("gamma", (d,), "ones"), ("beta", (d,), "zeros")]
    ffn = [("w_1", (f, d), "xavier"), ("b_1", (f,), "zeros"), ("w_2", (d, f), "xavier"), ("b_2", (d,), "zeros")]

    def block(prefix, shapes):
        return [(f"{prefix}.{n}", s, k) for n, s, k in shapes]

    for i in range(c["n_layers"]):
        p = f"encoder.layers.{i}"
        out += block(f"{p}.self_attn", attn) + block(f"{p}.self_attn_norm", norm)
        out += block(f"{p}.ffn", ffn) + block(f"{p}.ffn_norm", norm)
    for i in range(c["n_layers"]):
        p = f"decoder.layers.{i}"
        out += block(f"{p}.self_attn", attn) + block(f"{p}.self_attn_norm", norm)
        out += block(f"{p}.cross_attn", attn) + block(f"{p}.cross_attn_norm", norm)
        out += block(f"{p}.ffn", ffn) + block(f"{p}.ffn_norm", norm)
    return out


def sinusoids(n, d):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    inv = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * inv), torch.cos(pos * inv)
    return pe.float()


class Model(torch.nn.Module):
    def __init__(self, c, seed):
        super().__init__()
        self.c = c
        self.names = [n for n, _, _ in layout(c)]
        gen = torch.Generator().manual_seed(seed)
        self.p = torch.nn.ParameterDict()
        for name, shape, init in layout(c):
            t = torch.empty(shape)
            if init == "embed":
                t.normal_(0.0, c["d_model"] ** -0.5, generator=gen)
            elif init == "xavier":
                a = math.sqrt(6.0 / (shape[0] + shape[1]))
                t.uniform_(-a, a, generator=gen)
            elif init == "ones":
                t.fill_(1.0)
            else:
                t.zero_()
            self.p[name.replace(".", "__")] = torch.nn.Parameter(t)
        self.register_buffer("pe", sinusoids(c["max_positions"], c["d_model"]), persistent=False)

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def embed(self, tokens):
        x = F.embedding(tokens, self.w("embed.weight")) * math.sqrt(self.c["d_model"]) + self.pe[: tokens.shape[1]]
        return F.dropout(x, self.c["dropout"], self.training)

    def attention(self, pre, xq, xkv, mask):
        c, w = self.c, self.w
        b, tq, _ = xq.shape
        h, dk, dv = c["n_heads"], c["d_k"], c["d_v"]
        q = F.linear(xq, w(f"{pre}.w_q"), w(f"{pre}.b_q"))
        wkv = torch.cat([w(f"{pre}.w_k"), w(f"{pre}.w_v")])
        bkv = torch.cat([w(f"{pre}.b_k"), w(f"{pre}.b_v")])
        k, v = F.linear(xkv, wkv, bkv).split([h * dk, h * dv], dim=-1)
        q = q.view(b, tq, h, dk).transpose(1, 2)
        k = k.view(b, -1, h, dk).transpose(1, 2)
        v = v.view(b, -1, h, dv).transpose(1, 2)
        p = c["attention_dropout"] if self.training else 0.0
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return F.linear(ctx.transpose(1, 2).reshape(b, tq, h * dv), w(f"{pre}.w_o"), w(f"{pre}.b_o"))

    def residual(self, pre, x, y):
        y = F.dropout(y, self.c["dropout"], self.training)
        return F.layer_norm(x + y, (self.c["d_model"],), self.w(f"{pre}.gamma"), self.w(f"{pre}.beta"),
                            self.c["layer_norm_eps"])

    def ffn(self, pre, x):
        w = self.w
        return F.linear(F.relu(F.linear(x, w(f"{pre}.w_1"), w(f"{pre}.b_1"))), w(f"{pre}.w_2"), w(f"{pre}.b_2"))

    def encode(self, src, slen):
        """Encoder output (B, S, D) and the source key mask (B, 1, 1, S)."""
        src_mask = (torch.arange(src.shape[1]) < slen[:, None])[:, None, None, :]
        x = self.embed(src)
        for i in range(self.c["n_layers"]):
            p = f"encoder.layers.{i}"
            x = self.residual(f"{p}.self_attn_norm", x, self.attention(f"{p}.self_attn", x, x, src_mask))
            x = self.residual(f"{p}.ffn_norm", x, self.ffn(f"{p}.ffn", x))
        return x, src_mask

    def decode(self, memory, src_mask, tin, tlen):
        """Logits (B, T, V) of the decoder over inputs tin given the encoder output."""
        return self.decoder_stack(self.embed(tin), memory, src_mask, tlen)

    def decoder_stack(self, y, memory, src_mask, tlen):
        """Logits (B, T, V) of the decoder layers over the embedded decoder input y (B, T, D): the
        part of `decode` after the embedding, for a subclass that adds to its input
        (bench/ptb-parse/reference.py's next-word pointer)."""
        t = y.shape[1]
        tgt_mask = (torch.arange(t) < tlen[:, None])[:, None, None, :] & torch.ones(t, t, dtype=torch.bool).tril()
        for i in range(self.c["n_layers"]):
            p = f"decoder.layers.{i}"
            y = self.residual(f"{p}.self_attn_norm", y, self.attention(f"{p}.self_attn", y, y, tgt_mask))
            y = self.residual(f"{p}.cross_attn_norm", y, self.attention(f"{p}.cross_attn", y, memory, src_mask))
            y = self.residual(f"{p}.ffn_norm", y, self.ffn(f"{p}.ffn", y))
        return F.linear(y, self.w("embed.weight"))

    def forward(self, src, slen, tin, tlen):
        memory, src_mask = self.encode(src, slen)
        return self.decode(memory, src_mask, tin, tlen)


# ------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------


def model_config(cfg, vocab_size):
    m = cfg["model"]
    if m.get("preset", "base") != "base":
        sys.exit("this reference only knows the base preset with overrides; set every [model] field")
    c = {"n_layers": 6, "d_model": 512, "d_ff": 2048, "n_heads": 8, "d_k": 64, "d_v": 64, "dropout": 0.1,
         "attention_dropout": 0.0, "label_smoothing": 0.1, "positions": "sinusoidal", "max_positions": 1024,
         "vocab_size": vocab_size, "layer_norm_eps": 1e-6}
    for k in c:
        if k in m:
            c[k] = m[k]
    if c["positions"] != "sinusoidal":
        sys.exit("this reference implements sinusoidal positions only")
    return c


def save_checkpoint(model, c, step, vocab_hash, out: Path, keep_last: int):
    tensors = {n: model.w(n).detach().contiguous() for n in model.names}
    meta = {"format": "transformer-checkpoint", "format_version": "1", "config": json.dumps(c, separators=(",", ":")),
            "step": str(step), "vocab_hash": vocab_hash, "trained_by": "bench/multi30k/reference.py (PyTorch)"}
    path = out / f"ckpt-{step:08d}.safetensors"
    tmp = out / f".ckpt-{step:08d}.tmp"
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, path)
    for old in sorted(out.glob("ckpt-*.safetensors"))[:-keep_last]:
        old.unlink()
    return path


def validate(model, pairs, batches, amp):
    model.eval()
    nll, n = 0.0, 0
    with torch.no_grad(), amp():
        for b in batches:
            src, slen, tin, tout, tlen = tensors(pairs, b)
            logits = model(src, slen, tin, tlen).float()
            nll += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tout.reshape(-1), ignore_index=PAD,
                                   reduction="sum").item()
            n += int((tout != PAD).sum())
    model.train()
    return nll / n


def run(cmd):
    print("+", " ".join(str(x) for x in cmd), flush=True)
    return subprocess.run([str(x) for x in cmd], check=True, capture_output=True, text=True)


def cpu_has_bf16_unit():
    """Whether this CPU has Intel AMX (bf16 tiles) or AVX512-BF16, as /proc/cpuinfo reports."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return "amx_bf16" in flags or {"avx512f", "avx512bw", "avx512_bf16"} <= set(flags)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs/multi30k-en-de.toml")
    ap.add_argument("--out", type=Path, default=ROOT / "runs/multi30k-torch")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--minutes", type=float, help="time budget (default: the config's time_limit_minutes)")
    ap.add_argument("--average", type=int, default=3, help="average the last K checkpoints before decoding")
    ap.add_argument("--binary", type=Path, default=ROOT / "target/release/transformer")
    ap.add_argument("--bf16-matmul", choices=["auto", "true", "false"],
                    help="override the config's train.bf16_matmul (e.g. false: PyTorch f32, which is faster "
                         "than bf16 autocast at d_model 256 on some CPUs)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = tomllib.loads(args.config.read_text())
    os.chdir(ROOT)
    d, t = cfg["data"], cfg["train"]
    bpe = Path(d["bpe"])
    if not bpe.exists():
        sys.exit(f"{bpe} does not exist: run `transformer train --config {args.config}` first, which learns it")
    args.out.mkdir(parents=True, exist_ok=True)
    prepared = {}
    for split in ("train", "valid"):
        dest = args.out / f"prepared-{split}"
        if not (dest / "meta.json").exists():
            run([args.binary, "prepare", "--src", d[f"{split}_src"], "--tgt", d[f"{split}_tgt"], "--bpe", bpe,
                 "--out", dest, "--max-tokens", d.get("max_tokens", 250), "--max-ratio", d.get("max_ratio", 3.0)])
        prepared[split] = load_prepared(dest)
    (train, meta), (valid, _) = prepared["train"], prepared["valid"]
    vocab_hash = meta["vocab_hash"]
    vocab = json.loads(bpe.read_text())
    vocab_size = len(vocab["model"]["vocab"]) + sum(1 for a in vocab["added_tokens"] if a["content"] not in vocab["model"]["vocab"])
    c = model_config(cfg, vocab_size)
    seed = t.get("seed", 1)
    torch.manual_seed(seed)
    model = Model(c, seed)
    n_params = sum(p.numel() for p in model.parameters())
    warmup, lr_scale = t.get("warmup", 4000), t.get("lr_scale", 1.0)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_scale * c["d_model"] ** -0.5 * min((s + 1) ** -0.5, (s + 1) * warmup ** -1.5))
    accumulate = t.get("accumulate", 1)
    # train.bf16_matmul: our products take bf16 operands and sum in f32; autocast does the same to
    # PyTorch's linear layers and matmuls. "auto" follows our rule: bf16 where the CPU has AMX or
    # AVX512-BF16 (where autocast's bf16 products are native too), f32 elsewhere.
    bf16 = t.get("bf16_matmul", False)
    if args.bf16_matmul is not None:
        bf16 = {"auto": "auto", "true": True, "false": False}[args.bf16_matmul]
    if bf16 == "auto":
        bf16 = cpu_has_bf16_unit()
    elif not isinstance(bf16, bool):
        sys.exit(f"{args.config}: train.bf16_matmul must be true, false or \"auto\", not {bf16!r}")
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    batches = make_batches(train, t["max_src_tokens"], t["max_tgt_tokens"])
    vbatches = make_batches(valid, t["max_src_tokens"], t["max_tgt_tokens"])
    budget = 60.0 * (args.minutes if args.minutes is not None else t["time_limit_minutes"])
    ckpt_every = 60.0 * t.get("checkpoint_minutes", 10.0)
    keep = t.get("keep_last", 5)
    print(f"{n_params} parameters, {len(train)} training pairs in {len(batches)} batches, "
          f"{args.threads} threads, {budget / 60:.0f} min{', bf16 autocast' if bf16 else ''}", flush=True)
    rng = random.Random(seed)
    start = last_ckpt = last_log = time.time()
    step, epoch, tokens = 0, 0, 0
    stopped = None
    while stopped is None:
        order = list(range(len(batches)))
        rng.shuffle(order)
        for g in range(0, len(order), accumulate):
            if time.time() - start >= budget:
                stopped = f"time limit of {budget / 60:.0f} minutes"
                break
            group = [tensors(train, batches[b]) for b in order[g : g + accumulate]]
            ntok = sum(int((x[3] != PAD).sum()) for x in group)
            opt.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for src, slen, tin, tout, tlen in group:
                with amp():
                    logits = model(src, slen, tin, tlen)
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tout.reshape(-1), ignore_index=PAD,
                                       label_smoothing=c["label_smoothing"], reduction="sum") / ntok
                loss.backward()
                loss_sum += loss.item()
            opt.step()
            sched.step()
            step += 1
            tokens += ntok
            if time.time() - last_log >= 30:
                el = time.time() - start
                print(f"[{el:7.1f}s] epoch {epoch + 1} step {step} loss {loss_sum:.4f} "
                      f"{tokens / el:.0f} tgt tok/s lr {sched.get_last_lr()[0]:.2e}", flush=True)
                last_log = time.time()
            if time.time() - last_ckpt >= ckpt_every:
                save_checkpoint(model, c, step, vocab_hash, args.out, keep)
                last_ckpt = time.time()
        else:
            epoch += 1
            v = validate(model, valid, vbatches, amp)
            print(f"[{time.time() - start:7.1f}s] epoch {epoch} done at step {step}: valid perplexity {math.exp(v):.2f}",
                  flush=True)
    save_checkpoint(model, c, step, vocab_hash, args.out, keep)
    elapsed = time.time() - start
    v = validate(model, valid, vbatches, amp)
    print(f"PyTorch {torch.__version__}: {step} steps, {epoch} full epochs in {elapsed:.0f} s ({stopped}); "
          f"valid perplexity {math.exp(v):.2f}; {tokens / elapsed:.0f} target tokens/s", flush=True)

    avg = args.out / f"avg{args.average}.safetensors"
    run([args.binary, "average", args.out, "--last", args.average, "--output", avg])
    for name, ckpt in (("last", sorted(args.out.glob("ckpt-*.safetensors"))[-1]), (f"average of {args.average}", avg)):
        r = run([args.binary, "evaluate", "--checkpoint", ckpt, "--bpe", bpe,
                 "--src", d["valid_src"].replace("val.", "test_2016_flickr."),
                 "--ref", d["valid_tgt"].replace("val.", "test_2016_flickr.")])
        print(f"== {name}: test_2016_flickr, beam 4, α 0.6\n{r.stdout}{r.stderr}", flush=True)


if __name__ == "__main__":
    main()
