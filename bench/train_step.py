#!/usr/bin/env python3
"""PyTorch twin of the Rust training-step benchmark.

One training step of a small encoder-decoder Transformer ("Attention Is All You Need"),
timed on the CPU:

    zero_grad -> forward -> label-smoothed loss -> backward -> Adam step

Model: d_model 512, 8 heads (d_k = d_v = 64), d_ff 2048, 2 encoder + 2 decoder layers,
shared 8000-token vocabulary with tied output projection, sinusoidal positions, post-norm
residual blocks, dropout 0.1 on embeddings and sub-layer outputs, no attention dropout.
Batch: 64 sentence pairs, source and target both exactly 32 tokens (no padding, but the
key-padding masks are still built from the lengths, as a real data pipeline would).

Usage:

    python bench/train_step.py                     # human-readable summary
    python bench/train_step.py --json              # one JSON line
    python bench/train_step.py --steps 10 --warmup 3 --threads 8 --bf16
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS, UNK = 0, 1, 2, 3

# Benchmark configuration.
N_LAYERS = 2
D_MODEL = 512
N_HEADS = 8
D_HEAD = 64  # d_k = d_v
D_FF = 2048
VOCAB = 8000
DROPOUT = 0.1
LABEL_SMOOTHING = 0.1
MAX_POSITIONS = 1024
BATCH = 64
SRC_LEN = 32
TGT_LEN = 32

# Optimiser (§5.3): Adam(0.9, 0.98, 1e-9), lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).
ADAM_BETAS = (0.9, 0.98)
ADAM_EPS = 1e-9
LR_WARMUP_STEPS = 4000


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def sinusoid_table(n_pos: int, d: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same) (§3.5)."""
    pos = torch.arange(n_pos, dtype=torch.float64).unsqueeze(1)
    inv_freq = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.zeros(n_pos, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table.float()


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention with a fused Q/K/V projection."""

    def __init__(self, d_model: int, n_heads: int, d_head: int):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        self.qkv = nn.Linear(d_model, 3 * n_heads * d_head)
        self.out = nn.Linear(n_heads * d_head, d_model)

    def forward(self, xq: torch.Tensor, xkv: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
        """xq: (B, Tq, D); xkv: (B, Tk, D) or None for self-attention;
        mask: bool (B, 1, Tq, Tk), True where attending is allowed."""
        b, tq, _ = xq.shape
        h, dh = self.n_heads, self.d_head
        inner = h * dh
        if xkv is None:
            # Self-attention: one fused matmul for Q, K and V.
            q, k, v = self.qkv(xq).split(inner, dim=-1)
        else:
            # Cross-attention: Q from the decoder, K/V from the encoder output.
            w_q, w_kv = self.qkv.weight.split([inner, 2 * inner], dim=0)
            b_q, b_kv = self.qkv.bias.split([inner, 2 * inner], dim=0)
            q = F.linear(xq, w_q, b_q)
            k, v = F.linear(xkv, w_kv, b_kv).split(inner, dim=-1)
        heads = lambda t: t.view(b, -1, h, dh).transpose(1, 2)  # noqa: E731  (B, H, T, dh)
        ctx = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=mask)
        return self.out(ctx.transpose(1, 2).reshape(b, tq, inner))


class FeedForward(nn.Module):
    """FFN(x) = relu(x W_1 + b_1) W_2 + b_2 (Eq. 2)."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(F.relu(self.w_1(x)))


class Residual(nn.Module):
    """Post-norm residual wrapper: LayerNorm(x + Dropout(sublayer_out))."""

    def __init__(self, d_model: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=1e-6)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, sublayer_out):
        return self.norm(x + self.drop(sublayer_out))


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = MultiHeadAttention(D_MODEL, N_HEADS, D_HEAD)
        self.self_attn_res = Residual(D_MODEL, DROPOUT)
        self.ffn = FeedForward(D_MODEL, D_FF)
        self.ffn_res = Residual(D_MODEL, DROPOUT)

    def forward(self, x, src_mask):
        x = self.self_attn_res(x, self.self_attn(x, None, src_mask))
        return self.ffn_res(x, self.ffn(x))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = MultiHeadAttention(D_MODEL, N_HEADS, D_HEAD)
        self.self_attn_res = Residual(D_MODEL, DROPOUT)
        self.cross_attn = MultiHeadAttention(D_MODEL, N_HEADS, D_HEAD)
        self.cross_attn_res = Residual(D_MODEL, DROPOUT)
        self.ffn = FeedForward(D_MODEL, D_FF)
        self.ffn_res = Residual(D_MODEL, DROPOUT)

    def forward(self, y, memory, tgt_mask, cross_mask):
        y = self.self_attn_res(y, self.self_attn(y, None, tgt_mask))
        y = self.cross_attn_res(y, self.cross_attn(y, memory, cross_mask))
        return self.ffn_res(y, self.ffn(y))


class Transformer(nn.Module):
    """Encoder-decoder Transformer with a shared, tied embedding/output matrix."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        nn.init.normal_(self.embed.weight, std=D_MODEL**-0.5)
        self.register_buffer("pe", sinusoid_table(MAX_POSITIONS, D_MODEL), persistent=False)
        self.embed_drop = nn.Dropout(DROPOUT)
        self.encoder = nn.ModuleList(EncoderLayer() for _ in range(N_LAYERS))
        self.decoder = nn.ModuleList(DecoderLayer() for _ in range(N_LAYERS))
        for name, p in self.named_parameters():
            if p.dim() == 2 and not name.startswith("embed"):
                nn.init.xavier_uniform_(p)

    def embed_tokens(self, tokens):
        x = self.embed(tokens) * math.sqrt(D_MODEL) + self.pe[: tokens.shape[1]]
        return self.embed_drop(x)

    def forward(self, src, src_lens, tgt_in, tgt_lens):
        s, t = src.shape[1], tgt_in.shape[1]
        # Boolean masks (True = may attend), shaped (B, 1, Tq, Tk) to broadcast over heads.
        src_keys = torch.arange(s, device=src.device) < src_lens[:, None]  # (B, S)
        tgt_keys = torch.arange(t, device=src.device) < tgt_lens[:, None]  # (B, T)
        causal = torch.ones(t, t, dtype=torch.bool, device=src.device).tril()
        src_mask = src_keys[:, None, None, :]  # (B, 1, 1, S)
        tgt_mask = tgt_keys[:, None, None, :] & causal  # (B, 1, T, T)
        cross_mask = src_mask  # (B, 1, 1, S)

        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x, src_mask)
        y = self.embed_tokens(tgt_in)
        for layer in self.decoder:
            y = layer(y, x, tgt_mask, cross_mask)
        return F.linear(y, self.embed.weight)  # tied output projection


# --------------------------------------------------------------------------------------------
# Benchmark
# --------------------------------------------------------------------------------------------


def learning_rate(step: int) -> float:
    """Eq. 3 of the paper, step 1-based."""
    return D_MODEL**-0.5 * min(step**-0.5, step * LR_WARMUP_STEPS**-1.5)


def make_batch(gen: torch.Generator):
    """Random full-length batch: ids in 4..VOCAB-1, no padding."""
    src = torch.randint(4, VOCAB, (BATCH, SRC_LEN), generator=gen)
    tgt = torch.randint(4, VOCAB, (BATCH, TGT_LEN), generator=gen)
    tgt_in, tgt_out = tgt, torch.roll(tgt, -1, dims=1)  # any full-length pair will do
    src_lens = torch.full((BATCH,), SRC_LEN, dtype=torch.int64)
    tgt_lens = torch.full((BATCH,), TGT_LEN, dtype=torch.int64)
    return src, src_lens, tgt_in, tgt_out, tgt_lens


def train_step(model, opt, batch, step: int, bf16: bool) -> float:
    """One full optimisation step; returns the loss."""
    src, src_lens, tgt_in, tgt_out, tgt_lens = batch
    for group in opt.param_groups:
        group["lr"] = learning_rate(step)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(src, src_lens, tgt_in, tgt_lens)
        n_tokens = (tgt_out != PAD).sum()
        loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), tgt_out.reshape(-1), ignore_index=PAD,
                               label_smoothing=LABEL_SMOOTHING, reduction="sum") / n_tokens
    loss.backward()
    opt.step()
    return loss.item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps run first")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch intra-op threads")
    ap.add_argument("--bf16", action="store_true", help="autocast forward/loss to bfloat16")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    model = Transformer().train()
    opt = torch.optim.Adam(model.parameters(), lr=0.0, betas=ADAM_BETAS, eps=ADAM_EPS)
    batch = make_batch(torch.Generator().manual_seed(0))

    times, losses = [], []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        losses.append(train_step(model, opt, batch, step=i + 1, bf16=args.bf16))
        elapsed = time.perf_counter() - start
        if i >= args.warmup:
            times.append(elapsed)

    median = statistics.median(times) if times else float("nan")
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB -> bytes
    if args.json:
        print(json.dumps({
            "impl": "pytorch",
            "torch": torch.__version__,
            "threads": args.threads,
            "step_times_s": times,
            "median_s": median,
            "peak_rss_bytes": peak_rss,
        }))
    else:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"PyTorch {torch.__version__}, {args.threads} threads, "
              f"{'bf16 autocast' if args.bf16 else 'float32'}, {n_params / 1e6:.1f}M parameters")
        print(f"batch {BATCH} x (src {SRC_LEN}, tgt {TGT_LEN}); "
              f"{args.warmup} warm-up + {args.steps} timed steps")
        print("step times (s): " + " ".join(f"{t:.3f}" for t in times))
        print(f"median {median:.3f} s/step, {BATCH * TGT_LEN / median:.0f} target tokens/s")
        print(f"losses: first {losses[0]:.4f}, last {losses[-1]:.4f}")
        print(f"peak RSS {peak_rss / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
