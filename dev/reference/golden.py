#!/usr/bin/env python3
"""Golden fixtures for the Rust Transformer, computed by an independent PyTorch twin.

Run from anywhere (paths are relative to this file):

    python dev/reference/golden.py

It writes two small safetensors files into crates/transformer/tests/fixtures/:

* golden_tiny.safetensors          -- sinusoidal positions
* golden_tiny_learned.safetensors  -- learned positions (extra parameter `embed.positions`)

Each file holds, for one fixed hand-written batch:

* every parameter under its Rust name (initial values, float32),
* the batch (`input.*`, int64),
* the forward results (`out.logits`, `out.loss`, `out.nll`),
* the gradient of the per-token label-smoothed loss (`grad.<name>`),
* a 5-step Adam run with the paper's learning-rate schedule (`adam.losses`, `after.<name>`),

plus string metadata (`config`, `warmup`, `lr_scale`, `generator`). Re-running the script
reproduces the files byte for byte.

All arithmetic is float64; tensors are rounded to float32 only when stored. The model is
written as plain functions over an ordered dict of parameters so that the names, shapes and
order match the Rust `ParamLayout` exactly. The math follows "Attention Is All You Need":
post-norm residual blocks, scaled dot-product attention, ReLU FFN, tied output embedding.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from pathlib import Path

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
FIXTURE_DIR = REPO_ROOT / "crates" / "transformer" / "tests" / "fixtures"

DTYPE = torch.float64

PAD, BOS, EOS, UNK = 0, 1, 2, 3

# Key order mirrors the Rust `ModelConfig` fields (serde JSON).
BASE_CONFIG = OrderedDict(
    n_layers=2,
    d_model=24,
    d_ff=40,
    n_heads=3,
    d_k=8,
    d_v=6,
    dropout=0.0,
    attention_dropout=0.0,
    label_smoothing=0.1,
    positions="sinusoidal",
    max_positions=16,
    vocab_size=37,
    layer_norm_eps=1e-6,
)

# Adam hyper-parameters (§5.3) and the Eq. 3 schedule.
ADAM_STEPS = 5
ADAM_BETAS = (0.9, 0.98)
ADAM_EPS = 1e-9
WARMUP = 3
LR_SCALE = 1.0

# The fixed batch: 3 sentence pairs, token ids in 4..36 (0..3 are PAD/BOS/EOS/UNK).
# The longest source (7) is longer than the decoder side (T = 5), so S != T and a mix-up of the
# two in the encoder-decoder attention cannot pass unnoticed.
SOURCES = [
    [5, 17, 9, 30, 12, 21, 16],
    [22, 4, 36],
    [8],
]
TARGETS = [
    [11, 27, 6, 33],
    [19, 7],
    [35, 14, 25],
]

# Standard deviations of the random fixture parameters. They are deliberately not the
# paper's initialisation: large-ish random values make every gradient path non-trivial.
STD_MATRIX = 0.3
STD_BIAS = 0.1
STD_GAMMA = 0.1  # gamma = 1 + N(0, STD_GAMMA^2)
STD_BETA = 0.1


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def attention_shapes(cfg) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, kind) of the 8 tensors of one multi-head attention block."""
    d, h, dk, dv = cfg["d_model"], cfg["n_heads"], cfg["d_k"], cfg["d_v"]
    return [
        ("w_q", (h * dk, d), "matrix"),
        ("w_k", (h * dk, d), "matrix"),
        ("w_v", (h * dv, d), "matrix"),
        ("b_q", (h * dk,), "bias"),
        ("b_k", (h * dk,), "bias"),
        ("b_v", (h * dv,), "bias"),
        ("w_o", (d, h * dv), "matrix"),
        ("b_o", (d,), "bias"),
    ]


def norm_shapes(cfg):
    d = cfg["d_model"]
    return [("gamma", (d,), "gamma"), ("beta", (d,), "beta")]


def ffn_shapes(cfg):
    d, f = cfg["d_model"], cfg["d_ff"]
    return [
        ("w_1", (f, d), "matrix"),
        ("b_1", (f,), "bias"),
        ("w_2", (d, f), "matrix"),
        ("b_2", (d,), "bias"),
    ]


def param_layout(cfg) -> list[tuple[str, tuple[int, ...], str]]:
    """Every parameter as (name, shape, kind), in the exact order of the Rust layout."""
    d = cfg["d_model"]
    layout = [("embed.weight", (cfg["vocab_size"], d), "embed")]
    if cfg["positions"] == "learned":
        layout.append(("embed.positions", (cfg["max_positions"], d), "embed"))

    def block(prefix, shapes):
        return [(f"{prefix}.{n}", s, k) for n, s, k in shapes]

    for i in range(cfg["n_layers"]):
        p = f"encoder.layers.{i}"
        layout += block(f"{p}.self_attn", attention_shapes(cfg))
        layout += block(f"{p}.self_attn_norm", norm_shapes(cfg))
        layout += block(f"{p}.ffn", ffn_shapes(cfg))
        layout += block(f"{p}.ffn_norm", norm_shapes(cfg))
    for i in range(cfg["n_layers"]):
        p = f"decoder.layers.{i}"
        layout += block(f"{p}.self_attn", attention_shapes(cfg))
        layout += block(f"{p}.self_attn_norm", norm_shapes(cfg))
        layout += block(f"{p}.cross_attn", attention_shapes(cfg))
        layout += block(f"{p}.cross_attn_norm", norm_shapes(cfg))
        layout += block(f"{p}.ffn", ffn_shapes(cfg))
        layout += block(f"{p}.ffn_norm", norm_shapes(cfg))
    return layout


def random_tensor(shape, kind: str, d_model: int, gen: torch.Generator) -> torch.Tensor:
    """One random fixture parameter of the given kind."""
    z = torch.randn(shape, generator=gen, dtype=DTYPE)
    if kind == "matrix":
        return z * STD_MATRIX
    if kind == "embed":
        return z * d_model**-0.5
    if kind == "bias":
        return z * STD_BIAS
    if kind == "gamma":
        return 1.0 + z * STD_GAMMA
    if kind == "beta":
        return z * STD_BETA
    raise ValueError(kind)


def init_params(cfg) -> "OrderedDict[str, torch.Tensor]":
    """Random parameters in layout order.

    All parameters shared by both fixtures come from one generator seeded with 0, drawn in
    the sinusoidal layout order, so the sinusoidal and learned fixtures agree on every shared
    tensor. `embed.positions` (learned only) is drawn from its own generator afterwards.
    """
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    d = cfg["d_model"]
    values = {}
    for name, shape, kind in param_layout(dict(cfg, positions="sinusoidal")):
        values[name] = random_tensor(shape, kind, d, gen)
    if cfg["positions"] == "learned":
        pos_gen = torch.Generator().manual_seed(1)
        values["embed.positions"] = random_tensor((cfg["max_positions"], d), "embed", d, pos_gen)

    params = OrderedDict()
    for name, shape, _ in param_layout(cfg):
        assert tuple(values[name].shape) == shape, name
        # Round to float32 first: the fixture stores float32, and the reference must compute from
        # exactly the values the Rust side loads.
        params[name] = values[name].to(torch.float32).to(DTYPE).clone().requires_grad_(True)
    return params


# --------------------------------------------------------------------------------------------
# Model (pure functions over the parameter dict)
# --------------------------------------------------------------------------------------------


def sinusoid_table(n_pos: int, d: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same), interleaved (§3.5)."""
    pos = torch.arange(n_pos, dtype=DTYPE).unsqueeze(1)  # (P, 1)
    two_i = torch.arange(0, d, 2, dtype=DTYPE)  # (d/2,)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=DTYPE), two_i / d)  # (P, d/2)
    table = torch.zeros(n_pos, d, dtype=DTYPE)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table


def embed(params, cfg, tokens: torch.Tensor) -> torch.Tensor:
    """(B, L) ids -> (B, L, D): E[tok] * sqrt(D) + positions[0..L)."""
    d = cfg["d_model"]
    length = tokens.shape[1]
    if cfg["positions"] == "learned":
        pos = params["embed.positions"][:length]
    else:
        pos = sinusoid_table(length, d)
    return params["embed.weight"][tokens] * math.sqrt(d) + pos.unsqueeze(0)


def linear(x, w, b=None):
    """y = x W^T + b with W stored (out, in)."""
    y = x @ w.t()
    return y if b is None else y + b


def layer_norm(params, prefix, x, eps):
    """Biased-variance LayerNorm over the last axis, with gamma/beta."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * params[f"{prefix}.gamma"] + params[f"{prefix}.beta"]


def multi_head_attention(params, prefix, cfg, xq, xkv, key_lens, causal: bool):
    """Multi-head scaled dot-product attention (§3.2.2).

    xq: (B, Tq, D) queries, xkv: (B, Tk, D) keys/values, key_lens: (B,) valid key counts
    (right padding). With `causal`, query i only sees keys j <= i.
    """
    h, dk, dv = cfg["n_heads"], cfg["d_k"], cfg["d_v"]
    p = lambda n: params[f"{prefix}.{n}"]  # noqa: E731
    bsz, tq, _ = xq.shape
    tk = xkv.shape[1]

    q = linear(xq, p("w_q"), p("b_q")).view(bsz, tq, h, dk).transpose(1, 2)  # (B, H, Tq, dk)
    k = linear(xkv, p("w_k"), p("b_k")).view(bsz, tk, h, dk).transpose(1, 2)  # (B, H, Tk, dk)
    v = linear(xkv, p("w_v"), p("b_v")).view(bsz, tk, h, dv).transpose(1, 2)  # (B, H, Tk, dv)

    scores = q @ k.transpose(-1, -2) / math.sqrt(dk)  # (B, H, Tq, Tk)

    # allowed[b, i, j]: key j is a real token of sentence b and (if causal) j <= i.
    key_idx = torch.arange(tk)
    allowed = (key_idx.view(1, 1, tk) < key_lens.view(bsz, 1, 1)).expand(bsz, tq, tk)
    if causal:
        allowed = allowed & (key_idx.view(1, 1, tk) <= torch.arange(tq).view(1, tq, 1))
    scores = scores.masked_fill(~allowed.unsqueeze(1), float("-inf"))

    probs = torch.softmax(scores, dim=-1)
    ctx = (probs @ v).transpose(1, 2).reshape(bsz, tq, h * dv)  # heads concatenated in order
    return linear(ctx, p("w_o"), p("b_o"))


def feed_forward(params, prefix, x):
    """FFN(x) = relu(x W_1^T + b_1) W_2^T + b_2 (Eq. 2)."""
    hidden = torch.relu(linear(x, params[f"{prefix}.w_1"], params[f"{prefix}.b_1"]))
    return linear(hidden, params[f"{prefix}.w_2"], params[f"{prefix}.b_2"])


def forward(params, cfg, src, src_lens, tgt_in, tgt_lens) -> torch.Tensor:
    """Full encoder-decoder forward pass; returns logits (B, T, V)."""
    eps = cfg["layer_norm_eps"]

    # Encoder: post-norm residual blocks, no final LayerNorm.
    x = embed(params, cfg, src)
    for i in range(cfg["n_layers"]):
        p = f"encoder.layers.{i}"
        x = layer_norm(params, f"{p}.self_attn_norm",
                       x + multi_head_attention(params, f"{p}.self_attn", cfg, x, x, src_lens, False), eps)
        x = layer_norm(params, f"{p}.ffn_norm", x + feed_forward(params, f"{p}.ffn", x), eps)
    memory = x

    # Decoder: causal self-attention, cross-attention over the encoder output, FFN.
    y = embed(params, cfg, tgt_in)
    for i in range(cfg["n_layers"]):
        p = f"decoder.layers.{i}"
        y = layer_norm(params, f"{p}.self_attn_norm",
                       y + multi_head_attention(params, f"{p}.self_attn", cfg, y, y, tgt_lens, True), eps)
        y = layer_norm(params, f"{p}.cross_attn_norm",
                       y + multi_head_attention(params, f"{p}.cross_attn", cfg, y, memory, src_lens, False), eps)
        y = layer_norm(params, f"{p}.ffn_norm", y + feed_forward(params, f"{p}.ffn", y), eps)

    # Tied output projection: no bias, no scaling.
    return y @ params["embed.weight"].t()


def losses(logits, tgt_out, label_smoothing):
    """(label-smoothed loss, NLL), both summed over non-PAD targets and divided by their count."""
    v = logits.shape[-1]
    flat_logits, flat_tgt = logits.reshape(-1, v), tgt_out.reshape(-1)
    n_tokens = (flat_tgt != PAD).sum()
    loss = F.cross_entropy(flat_logits, flat_tgt, ignore_index=PAD,
                           label_smoothing=label_smoothing, reduction="sum") / n_tokens
    nll = F.cross_entropy(flat_logits, flat_tgt, ignore_index=PAD, reduction="sum") / n_tokens
    return loss, nll


# --------------------------------------------------------------------------------------------
# Batch, schedule, fixture
# --------------------------------------------------------------------------------------------


def make_batch():
    """Right-padded int64 tensors for the fixed batch."""
    s = max(len(x) for x in SOURCES)
    t = max(len(y) for y in TARGETS) + 1

    def pad(rows, width):
        return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=torch.int64)

    src = pad(SOURCES, s)
    src_lens = torch.tensor([len(x) for x in SOURCES], dtype=torch.int64)
    tgt_in = pad([[BOS] + y for y in TARGETS], t)
    tgt_out = pad([y + [EOS] for y in TARGETS], t)
    tgt_lens = torch.tensor([len(y) + 1 for y in TARGETS], dtype=torch.int64)
    return src, src_lens, tgt_in, tgt_out, tgt_lens


def learning_rate(step: int, d_model: int) -> float:
    """Eq. 3: lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step 1-based."""
    return LR_SCALE * d_model**-0.5 * min(step**-0.5, step * WARMUP**-1.5)


def write_safetensors(path: Path, tensors, metadata) -> None:
    """Write a safetensors file with a deterministic byte layout.

    `safetensors.torch.save_file` emits the metadata in hash-map order, so two runs give
    different bytes for identical content. The format is simple enough to write directly:
    an 8-byte little-endian header length, a JSON header (space-padded to a multiple of 8)
    mapping each name to dtype/shape/byte range, then the raw little-endian data.
    Tensors are laid out in insertion order.
    """
    dtype_names = {torch.float32: "F32", torch.int64: "I64"}
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, offset = [], 0
    for name, t in tensors.items():
        arr = t.contiguous().numpy()
        data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()  # little-endian
        header[name] = {"dtype": dtype_names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    head += b" " * (-len(head) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for data in blobs:
            f.write(data)


def build_fixture(cfg, path: Path) -> None:
    batch = make_batch()
    src, src_lens, tgt_in, tgt_out, tgt_lens = batch
    eps_ls = cfg["label_smoothing"]

    params = init_params(cfg)
    initial = OrderedDict((n, p.detach().clone()) for n, p in params.items())

    # Forward + backward at the initial parameters.
    logits = forward(params, cfg, src, src_lens, tgt_in, tgt_lens)
    loss, nll = losses(logits, tgt_out, eps_ls)
    loss.backward()
    grads = OrderedDict((n, p.grad.detach().clone()) for n, p in params.items())
    assert torch.isfinite(logits).all() and all(torch.isfinite(g).all() for g in grads.values())

    # Adam with the Eq. 3 schedule, restarting from the same initial values.
    for p in params.values():
        p.grad = None
    opt = torch.optim.Adam(params.values(), lr=0.0, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=0.0)
    adam_losses = []
    for step in range(1, ADAM_STEPS + 1):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, cfg["d_model"])
        opt.zero_grad(set_to_none=True)
        step_loss, _ = losses(forward(params, cfg, src, src_lens, tgt_in, tgt_lens), tgt_out, eps_ls)
        step_loss.backward()
        adam_losses.append(step_loss.item())
        opt.step()
    assert abs(adam_losses[0] - loss.item()) < 1e-12

    # Assemble: parameters, inputs, outputs, gradients, Adam results.
    f32 = lambda t: t.detach().to(torch.float32).contiguous()  # noqa: E731
    tensors = OrderedDict()
    for name, value in initial.items():
        tensors[name] = f32(value)
    tensors["input.src"] = src
    tensors["input.src_lens"] = src_lens
    tensors["input.tgt_in"] = tgt_in
    tensors["input.tgt_out"] = tgt_out
    tensors["input.tgt_lens"] = tgt_lens
    tensors["out.logits"] = f32(logits.reshape(-1, cfg["vocab_size"]))
    tensors["out.loss"] = f32(loss.reshape(1))
    tensors["out.nll"] = f32(nll.reshape(1))
    for name, g in grads.items():
        tensors[f"grad.{name}"] = f32(g)
    tensors["adam.losses"] = f32(torch.tensor(adam_losses, dtype=DTYPE))
    for name, p in params.items():
        tensors[f"after.{name}"] = f32(p)

    metadata = {
        "config": json.dumps(cfg, separators=(",", ":")),
        "warmup": str(WARMUP),
        "lr_scale": str(LR_SCALE),
        "generator": "dev/reference/golden.py",
    }
    write_safetensors(path, tensors, metadata)

    print(f"{path.relative_to(REPO_ROOT)}  ({path.stat().st_size} bytes, "
          f"{sum(v.numel() for v in initial.values())} parameters)")
    print(f"  loss {loss.item():.10f}  nll {nll.item():.10f}")
    print(f"  adam losses " + " ".join(f"{x:.10f}" for x in adam_losses))


def main() -> None:
    for positions, filename in [("sinusoidal", "golden_tiny.safetensors"),
                                ("learned", "golden_tiny_learned.safetensors")]:
        cfg = OrderedDict(BASE_CONFIG, positions=positions)
        build_fixture(cfg, FIXTURE_DIR / filename)


if __name__ == "__main__":
    main()
