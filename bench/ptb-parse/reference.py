#!/usr/bin/env python3
"""PyTorch reference for the Penn Treebank parsing run: the same model, recipe, data, vocabulary,
time budget and model selection as `transformer train --config configs/ptb-parse.toml`, trained
by PyTorch on the same cores.

The model, batching, loss and checkpoint layout are those of bench/multi30k/reference.py, imported
from it (not copied): a post-norm encoder-decoder with tied embeddings under the Rust layout's
parameter names, Adam (0.9, 0.98, 1e-9), the Eq. 3 schedule with warmup and lr_scale, label
smoothing, residual and attention dropout, token-budget batches, bf16 autocast where our trainer
would use bf16 products. With model.source_pointer, the decoder input also gets our next-word
pointer, W_p · enc_out[j] (crates/transformer/src/model/pointer.rs; its rule is re-implemented
here from the vocabulary file, and W_p is saved as `decoder.source_pointer.weight`). With
model.next_closer, it also gets our next-closer input, C[c] + H[depth], c the token that closes the
innermost open constituent (EOS when none is open) and depth how many are open, the zero-initialised
tables saved as `decoder.next_closer.weight` and `decoder.open_depth.weight`.

Same config: [model] and [train] of the run's TOML file (layers, widths, heads, dropout and
attention_dropout, label smoothing, warmup, lr_scale, token budgets, seed, bf16_matmul, time limit,
checkpoint interval, keep_last, valid_f1_epochs, valid_f1_beam, valid_f1_constrained,
source_pointer, next_closer).
Same data and vocabulary: the training pairs are the ids that `transformer prepare --task parsing`
writes from the treebank files of data.train_files with the run's vocabulary (data.bpe, learned by
our `transformer train`) and filters (data.max_tokens, data.max_ratio).
Same model selection: every valid_f1_epochs epochs and at the end, the model is saved and
`transformer evaluate --beam {valid_f1_beam} --skip-long` scores its EVALB F1 on the validation
trees (data.valid_files); the best is kept as best.safetensors. The time this takes counts
against the budget, as in our trainer.
Same validation: at every epoch's end and at the end, the label-smoothed loss and NLL per target
token of the validation pairs and how much the model reads its sentence: the shifted-sentence gap
and the encoder-output spread (crates/transformer/src/eval/perplexity.rs, `score_and_reading`),
logged and recorded in metrics.jsonl as `valid` records, as ours are.
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
# The next-word pointer (model.source_pointer): crates/transformer/src/model/pointer.rs
# ------------------------------------------------------------------------------------------------

TAG, STRUCTURE, PIECE, WORD_PIECE, OPEN, CLOSE = 0, 1, 2, 3, 4, 5  # WORD_PIECE: a piece that starts a word
EOS = 2
UNK, SPECIAL_TOKENS, TAG_PREFIX = 3, 4, "TAG="  # crates/transformer/src/vocab.rs, data/parallel.rs


class PointerTable:
    """What each vocabulary id is to the pointer and the next-closer input, as
    `PointerTable::from_bpe` decides: a whole (added) entry is a tag if it starts with `TAG=`, an
    opening bracket if it is `(X` (closed by the entry `)X`, or by itself where there is none), a
    closing bracket if it is `)X`, else structure; the special ids below SPECIAL_TOKENS other than
    UNK are structure; every other id is a piece, which starts a word if its token starts with 'Ġ'
    (or a space)."""

    def __init__(self, bpe: Path, vocab_size: int):
        v = json.loads(bpe.read_text())
        token = {i: t for t, i in v["model"]["vocab"].items()}
        added = {a["id"]: a["content"] for a in v.get("added_tokens", [])}
        token.update(added)  # id_to_token: an added entry's content first
        self.classes = [WORD_PIECE if token.get(i, "").startswith(("Ġ", " ")) else PIECE for i in range(vocab_size)]
        for i in range(min(SPECIAL_TOKENS, vocab_size)):
            if i != UNK:
                self.classes[i] = STRUCTURE
        ids = {content: i for i, content in added.items()}
        self.closer = {}  # an OPEN id -> the id of its `)X` (its own id where there is none)
        for i, content in added.items():
            if i >= SPECIAL_TOKENS and i < vocab_size:
                if content.startswith(TAG_PREFIX):
                    self.classes[i] = TAG
                elif content.startswith("(") and len(content) > 1:
                    self.classes[i] = OPEN
                    self.closer[i] = ids.get(")" + content[1:], i)
                elif content.startswith(")") and len(content) > 1:
                    self.classes[i] = CLOSE
                else:
                    self.classes[i] = STRUCTURE

    def word_starts(self, src):
        """Position 0 and every source piece that starts a word."""
        n = len(self.classes)
        return [i for i, x in enumerate(src) if i == 0 or (x < n and self.classes[x] == WORD_PIECE)]

    def positions(self, src, tin):
        """The source position each decoder input position reads (`PointerState::advance` over
        tin = BOS and the target tokens fed so far): inside an open leaf (after its tag, until its
        word's last piece) the next piece of its word to copy, else the next word's first piece
        (the count of tags so far); past the last word len(src), where the pointer adds nothing."""
        starts, n, nc = self.word_starts(src), len(src), len(self.classes)
        tags, remaining, out = 0, 0, []
        for x in tin:
            k = self.classes[x] if x < nc else PIECE
            if k == TAG:
                tags += 1
                w = tags - 1
                pieces = ((starts[w + 1] if w + 1 < len(starts) else n) - starts[w]) if w < len(starts) else 0
                remaining = max(pieces, 1)
            elif k in (STRUCTURE, OPEN, CLOSE):
                remaining = 0
            else:
                remaining = max(remaining - 1, 0)
            if remaining > 0:  # inside a leaf: the next piece of its word to copy
                w = tags - 1
                if w < len(starts):
                    end = starts[w + 1] if w + 1 < len(starts) else n
                    out.append(min(max(end - remaining, 0), n - 1))
                else:
                    out.append(n)
            else:  # the next word's first piece; n (nothing) past the last word
                out.append(starts[tags] if tags < len(starts) else n)
        return out

    def batch_positions(self, src, slen, tin, tlen):
        """`batch_positions`: (B, T) source positions of a padded batch; -1 (nothing) past the last
        word and on padding."""
        out = torch.full(tin.shape, -1, dtype=torch.long)
        src_l, tin_l = src.tolist(), tin.tolist()
        for b, (ns, nt) in enumerate(zip(slen.tolist(), tlen.tolist())):
            if ns > 0:
                pos = [j if j < ns else -1 for j in self.positions(src_l[b][:ns], tin_l[b][:nt])]
                out[b, :nt] = torch.tensor(pos, dtype=torch.long)
        return out


    def closers(self, tin):
        """The next-closer input's ids and depths (`CloserStacks` over tin): after each token fed,
        the id that closes the innermost open constituent (EOS when none is open) and how many are
        open (capped at MAX_OPEN_DEPTH - 1); a close with nothing open is ignored."""
        nc, stack, ids, depths = len(self.classes), [], [], []
        for x in tin:
            k = self.classes[x] if x < nc else PIECE
            if k == OPEN:
                stack.append(self.closer[x])
            elif k == CLOSE and stack:
                stack.pop()
            ids.append(stack[-1] if stack else EOS)
            depths.append(min(len(stack), MAX_OPEN_DEPTH - 1))
        return ids, depths

    def batch_closers(self, tin, tlen):
        """`batch_closers`: (B, T) next-closer ids and depths of a padded batch; (EOS, 0) on
        padding."""
        ids = torch.full(tin.shape, EOS, dtype=torch.long)
        depths = torch.zeros(tin.shape, dtype=torch.long)
        for b, (row, nt) in enumerate(zip(tin.tolist(), tlen.tolist())):
            i, h = self.closers(row[:nt])
            ids[b, :nt] = torch.tensor(i, dtype=torch.long)
            depths[b, :nt] = torch.tensor(h, dtype=torch.long)
        return ids, depths


POINTER = "decoder.source_pointer.weight"
CLOSER, DEPTH = "decoder.next_closer.weight", "decoder.open_depth.weight"
MAX_OPEN_DEPTH = 32  # model/pointer.rs


class Parser(m30k.Model):
    """bench/multi30k/reference.py's model, and with c["source_pointer"] our next-word pointer: the
    embedded decoder input (after its dropout) plus enc_out[b, j_t] W_pᵀ, W_p (D, D) Xavier-uniform,
    no bias, no dropout on the term. W_p comes last in the layout, as in our ParamLayout."""

    def __init__(self, c, seed, table: PointerTable | None):
        super().__init__(c, seed)
        if (c.get("source_pointer") or c.get("next_closer")) and table is None:
            raise ValueError("a model with source_pointer or next_closer needs the vocabulary's PointerTable")
        self.table = table if c.get("source_pointer") else None
        self.closer_table = table if c.get("next_closer") else None
        d = c["d_model"]
        a = math.sqrt(6.0 / (d + d))
        # Its own generator: the base model's is local to its constructor.
        gen = torch.Generator().manual_seed(seed + 1)
        if self.table is not None:
            self.p[POINTER.replace(".", "__")] = torch.nn.Parameter(torch.empty(d, d).uniform_(-a, a, generator=gen))
            self.names.append(POINTER)
        if self.closer_table is not None:  # zeros, as ours: at initialisation the paper's input
            for name, rows in ((CLOSER, c["vocab_size"]), (DEPTH, MAX_OPEN_DEPTH)):
                self.p[name.replace(".", "__")] = torch.nn.Parameter(torch.zeros(rows, d))
                self.names.append(name)

    def decode_pointed(self, memory, src_mask, src, slen, tin, tlen):
        """Logits (B, T, V) over decoder inputs tin given the encoder output memory (B, S, D)."""
        y = self.embed(tin)
        if self.table is not None:
            ptr = self.table.batch_positions(src, slen, tin, tlen)  # (B, T)
            picked = memory.gather(1, ptr.clamp(min=0)[:, :, None].expand(-1, -1, memory.shape[-1]))  # (B, T, D)
            picked = picked * (ptr >= 0)[:, :, None].to(picked.dtype)  # past the last word: nothing
            y = y + F.linear(picked, self.w(POINTER))
        if self.closer_table is not None:
            # The next-closer input: C[closer] + H[depth] (H[0] everywhere with
            # next_closer_depth = false); in training, with next_closer_dropout, whole positions
            # lose the term and kept ones are not rescaled (ours: model/mod.rs, `forward`).
            ids, depths = self.closer_table.batch_closers(tin, tlen)
            if not self.c.get("next_closer_depth", True):
                depths = torch.zeros_like(depths)
            term = F.embedding(ids, self.w(CLOSER)) + F.embedding(depths, self.w(DEPTH))
            p = self.c.get("next_closer_dropout", 0.0)
            if self.training and p > 0:
                term = term * (torch.rand(ids.shape) >= p)[:, :, None].to(term.dtype)
            y = y + term
        return self.decoder_stack(y, memory, src_mask, tlen)

    def forward(self, src, slen, tin, tlen):
        memory, src_mask = self.encode(src, slen)
        return self.decode_pointed(memory, src_mask, src, slen, tin, tlen)


# ------------------------------------------------------------------------------------------------
# Validation: loss, NLL and how much the model reads its sentence (eval/perplexity.rs)
# ------------------------------------------------------------------------------------------------

DEAD_SPREAD, DEAD_GAP = 0.3, 0.1  # eval/perplexity.rs: below these a run warns


def encoder_spread(h):
    """`encoder_spread` of one encoder output h (L, D): mean ‖hᵢ − h̄‖ / mean ‖hᵢ‖ (f64)."""
    h = h.double()
    if h.shape[0] == 0:
        return 0.0
    size = h.norm(dim=1).sum().item()
    return (h - h.mean(0)).norm(dim=1).sum().item() / size if size > 0 else 0.0


def score(model, pairs, batches, amp, label_smoothing, spread=False):
    """Σ label-smoothed loss, Σ NLL, target tokens (EOS included) and, with spread, Σ over the
    pairs of their encoder spread: teacher-forced, without dropout."""
    loss, nll, n, spread_sum = 0.0, 0.0, 0, 0.0
    for b in batches:
        src, slen, tin, tout, tlen = m30k.tensors(pairs, b)
        with amp():
            memory, src_mask = model.encode(src, slen)
            logits = model.decode_pointed(memory, src_mask, src, slen, tin, tlen).float()
        if spread:
            spread_sum += sum(encoder_spread(memory[i, :l].float()) for i, l in enumerate(slen.tolist()))
        flat, gold = logits.reshape(-1, logits.shape[-1]), tout.reshape(-1)
        nll += F.cross_entropy(flat, gold, ignore_index=PAD, reduction="sum").item()
        loss += F.cross_entropy(flat, gold, ignore_index=PAD, label_smoothing=label_smoothing, reduction="sum").item()
        n += int((tout != PAD).sum())
    return loss, nll, n, spread_sum


class Validation:
    """Our trainer's validation (`score_and_reading`): the pairs scored as given, and again with
    every source replaced by the next pair's (the last takes the first's), each set in its own
    token-budget batches."""

    def __init__(self, pairs, max_src, max_tgt, label_smoothing):
        self.pairs, self.ls = pairs, label_smoothing
        self.batches = m30k.make_batches(pairs, max_src, max_tgt)
        k = len(pairs)
        self.shifted = [(pairs[(i + 1) % k][0], pairs[i][1]) for i in range(k)] if k >= 2 else None
        self.shifted_batches = m30k.make_batches(self.shifted, max_src, max_tgt) if self.shifted else None

    def __call__(self, model, amp) -> dict:
        """{"loss", "nll"} per target token, "gap" (nats per target token; None under two pairs)
        and "spread" (mean over the sources)."""
        model.eval()
        with torch.no_grad():
            loss, nll, n, spread_sum = score(model, self.pairs, self.batches, amp, self.ls, spread=True)
            gap = None
            if self.shifted is not None:
                _, wrong, wn, _ = score(model, self.shifted, self.shifted_batches, amp, self.ls)
                gap = wrong / max(wn, 1) - nll / max(n, 1)
        model.train()
        return {"loss": loss / max(n, 1), "nll": nll / max(n, 1), "gap": gap,
                "spread": spread_sum / max(len(self.pairs), 1), "tokens": n}


def reading_text(v) -> str:
    """Our log's ", shifted-source gap G nats/token, encoder spread S"."""
    gap = "n/a" if v["gap"] is None else f"{v['gap']:.3f}"
    return f", shifted-source gap {gap} nats/token, encoder spread {v['spread']:.3f}"


def reading_warning(v):
    """`SourceReading::warning`: a line when the source path looks dead, else None."""
    dead_gap = v["gap"] is not None and v["gap"] < DEAD_GAP
    if v["spread"] < DEAD_SPREAD or dead_gap:
        gap = "n/a" if v["gap"] is None else f"{v['gap']:.3f}"
        return (f"the decoder hardly reads its source: encoder-output spread {v['spread']:.3f} (dead below "
                f"{DEAD_SPREAD}), shifted-sentence gap {gap} nats/token (dead below {DEAD_GAP}); see "
                f"docs/parsing.md, \"Reading the sentence\"")
    return None


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
    # model.source_pointer (ours: `#[serde(default)] source_pointer: bool`); the checkpoints carry it
    # in their config, so that our binary builds the same layout and computes the pointer itself.
    c["source_pointer"] = cfg["model"].get("source_pointer", False)
    if not isinstance(c["source_pointer"], bool):
        sys.exit(f"{args.config}: model.source_pointer must be true or false, not {c['source_pointer']!r}")
    c["next_closer"] = cfg["model"].get("next_closer", False)
    if not isinstance(c["next_closer"], bool):
        sys.exit(f"{args.config}: model.next_closer must be true or false, not {c['next_closer']!r}")
    c["next_closer_depth"] = cfg["model"].get("next_closer_depth", True)
    c["next_closer_dropout"] = float(cfg["model"].get("next_closer_dropout", 0.0))
    if not c["next_closer"] and (not c["next_closer_depth"] or c["next_closer_dropout"] > 0):
        sys.exit(f"{args.config}: model.next_closer_depth and next_closer_dropout need model.next_closer = true")
    table = PointerTable(bpe, vocab_size) if c["source_pointer"] or c["next_closer"] else None
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
    model = Parser(c, seed, table)
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
    validate = Validation(valid, t["max_src_tokens"], t["max_tgt_tokens"], c["label_smoothing"])
    budget = 60.0 * (args.minutes if args.minutes is not None else t["time_limit_minutes"])
    ckpt_every = 60.0 * t.get("checkpoint_minutes", 10.0)
    keep = t.get("keep_last", 5)
    f1_epochs, f1_beam = t.get("valid_f1_epochs", 2), t.get("valid_f1_beam", 4)
    log(f"{n_params} parameters (vocabulary {vocab_size}), {len(train)} training pairs in {len(batches)} batches, "
        f"{len(valid)} validation pairs, {args.threads} threads, {budget / 60:g} min"
        f"{', bf16 autocast' if bf16 else ''}{', next-word pointer' if model.table else ''}{', next-closer input' if model.closer_table else ''}; "
        f"F1 every {f1_epochs} epochs with beam {f1_beam}")

    best = {"f1": None, "step": None}
    (out / "metrics.jsonl").write_text("")

    def record_validation(step, epoch, v):
        """Our record_validation: the metrics record, and a warning once warmup is over when the
        source path looks dead."""
        w = reading_warning(v)
        if w is not None and step >= warmup:
            log(f"warning: step {step}: {w}")
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"kind": "valid", "step": step, "epoch": epoch, "loss": v["loss"], "nll": v["nll"],
                                "ppl": math.exp(v["nll"]), "gap": v["gap"], "spread": v["spread"]}) + "\n")

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
            v = validate(model, amp)
            log(f"epoch {epoch} done at step {step}: valid loss {v['loss']:.4f}, perplexity {math.exp(v['nll']):.2f}"
                + reading_text(v))
            record_validation(step, epoch, v)
            if f1_epochs > 0 and epoch % f1_epochs == 0:
                f1_checkpoint(step, epoch)
    # As our trainer: the final model is scored too (the budget is spent by then, so this runs
    # past it, as ours does), then saved as the last checkpoint.
    if f1_epochs > 0:
        f1_checkpoint(step, epoch)
    save_rotating(model, c, step, vocab_hash, out, keep)
    # As our trainer (train.valid_f1_average): the average of the newest checkpoints, the final one
    # included, is scored the same way and kept as best.safetensors when its F1 is higher.
    n_avg = t.get("valid_f1_average", 0)
    kept = sorted(out.glob("ckpt-*.safetensors"))[-n_avg:] if n_avg >= 2 else []
    if f1_epochs > 0 and len(kept) >= 2:
        t1 = time.time()
        avg = out / "f1-average.safetensors"
        run([args.binary, "average", "--inputs", *kept, "--output", avg, "--threads", args.threads])
        r = run([args.binary, "evaluate", "--checkpoint", avg, "--bpe", bpe, "--ref", dev_gold,
                 "--beam", f1_beam, "--skip-long", "--threads", args.threads, "--precision", "bf16" if bf16 else "f32"]
                + (["--constrained"] if t.get("valid_f1_constrained", False) else []))
        s = evalb_summary(r.stdout)
        f1 = s.get("f1", float("nan"))
        f1 = f1 if math.isfinite(f1) else 0.0
        is_best = best["f1"] is None or f1 > best["f1"]
        if is_best:
            best["f1"], best["step"] = f1, f"average of {len(kept)} to {step}"
            os.replace(avg, out / "best.safetensors")
        else:
            avg.unlink()
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"kind": "valid_f1_average", "step": step, "epoch": epoch, "f1": f1,
                                "malformed": s.get("repaired"), "best": is_best, "averaged": len(kept)}) + "\n")
        log(f"validation F1 {f1:.2f} of the average of the last {len(kept)} checkpoints ({s.get('repaired', '?')} of "
            f"{s.get('sentences', '?')} outputs repaired, {time.time() - t1:.0f} s)"
            f"{'; best, saved as best.safetensors' if is_best else '; the best stays'}")
    elapsed = time.time() - start
    v = validate(model, amp)
    record_validation(step, epoch + 1, v)
    log(f"PyTorch {torch.__version__}: {step} updates, {epoch} full epochs in {elapsed:.0f} s ({stopped}); "
        f"valid loss {v['loss']:.4f}, perplexity {math.exp(v['nll']):.2f} (NLL {v['nll']:.6f} nats over {v['tokens']} "
        f"target tokens){reading_text(v)}; {tokens} target tokens, {tokens / elapsed:.0f} target tokens/s over "
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
