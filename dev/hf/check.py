#!/usr/bin/env python3
"""`export hf` against the real `transformers`, on two models: the tests' small Multi30k model
(our BPE, loaded with PreTrainedTokenizerFast) and the OPUS-MT-shaped Hugging Face fixture
imported and fine-tuned here for --steps updates on Multi30k (its own SentencePiece vocabulary,
loaded with MarianTokenizer). Each is exported, loaded with MarianMTModel, and compared with ours on
the first N test sentences: the tokenizer's ids, greedy and beam-4 `generate` against our
`translate`, and each reference's log-probability (teacher-forced, EOS included) against our
`score`.

    python dev/hf/check.py [--bin target/release/transformer] [--sentences 100] [--steps 300] [--write]
                           [--model QUICKSTART_DIR]

--model takes the first model from a `transformer quickstart` output directory (its
model.safetensors and run/bpe.json) instead of the tests' fixture; with it, --write is refused
(the tests read the fixture's outputs).

--write stores what the tests compare with offline (crates/transformer/tests/fixtures/hf/:
checks.json, and the fine-tuned checkpoint with its tokenizer in finetuned/).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch
from transformers import MarianMTModel, MarianTokenizer, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "crates/transformer/tests/fixtures"
DATA = ROOT / "data/multi30k"


def run(*args, stdin=None):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, input=stdin).stdout


def compare(b, ckpt, tok_path, out, src, ref, work, marian):
    """Exports (ckpt, tok_path) to `out`, loads it with `transformers` and compares it with ours."""
    run(b, "export", "hf", ckpt, "--tokenizer", tok_path, "--output", out)
    model = MarianMTModel.from_pretrained(str(out)).eval()
    tok = (MarianTokenizer if marian else PreTrainedTokenizerFast).from_pretrained(str(out))
    n = len(src)
    report = {"sentences": n}
    if not marian:
        ours_pieces = run(b, "bpe", "apply", "--model", tok_path, "--input", work / "src.txt").splitlines()
        report["same_tokens"] = sum(tok.convert_ids_to_tokens(tok(s)["input_ids"]) == p.split()
                                    for s, p in zip(src, ours_pieces))
    # generate's max_length 257 counts the start token, and its forced EOS takes the last place: at
    # most 255 tokens before the EOS, ours --max-len-b 255. Its beam search is ours with
    # --stop transformers (the beam kept full, `early_stopping=False`'s heuristic).
    for mode, beam in [("greedy", 1), ("beam4", 4)]:
        ours = run(b, "translate", "--checkpoint", ckpt, "--tokenizer", tok_path, "--input", work / "src.txt",
                   "--beam", beam, "--alpha", "1", "--length-norm", "marian", "--max-len-a", "0", "--max-len-b",
                   "255", "--stop", "transformers", "--threads", "1").splitlines()
        hf = []
        for s in src:
            enc = tok([s], return_tensors="pt", return_token_type_ids=False)
            with torch.no_grad():
                g = model.generate(**enc, num_beams=beam, length_penalty=1.0, max_length=257, early_stopping=False,
                                   do_sample=False)
            hf.append(tok.decode(g[0], skip_special_tokens=True))
        same = sum(x == y for x, y in zip(hf, ours))
        for i, (x, y) in enumerate(zip(hf, ours)):
            if x != y:
                print(f"    {mode} sentence {i}: transformers {x!r}\n    {' ' * len(mode)} {' ' * len(str(i))}  ours         {y!r}")
        report[mode] = {"same_1best": same, "hf_1best": hf}
        print(f"  {mode}: same 1-best {same}/{n}")
    # Teacher-forced log-probabilities of the references.
    ours_scores = [float(x) for x in run(b, "score", "--checkpoint", ckpt, "--tokenizer", tok_path, "--src",
                                          work / "src.txt", "--ref", work / "ref.txt", "--threads", "1").split()]
    hf_scores, tokens = [], 0
    for s, r in zip(src, ref):
        enc = tok([s], return_tensors="pt", return_token_type_ids=False)
        if marian:
            labels = tok(text_target=[r], return_tensors="pt")["input_ids"]  # </s> added
        else:
            labels = tok([r], return_tensors="pt", return_token_type_ids=False)["input_ids"]
            labels = torch.cat([labels, torch.tensor([[tok.eos_token_id]])], dim=1)
        tokens += labels.shape[1]
        with torch.no_grad():
            logits = model(**enc, labels=labels).logits
        lp = torch.log_softmax(logits.double(), -1).gather(-1, labels[..., None]).sum().item()
        hf_scores.append(lp)
    diffs = [abs(x - y) for x, y in zip(ours_scores, hf_scores)]
    report["max_score_difference"] = max(diffs)
    report["mean_nll"] = {"ours": -sum(ours_scores) / tokens, "hf": -sum(hf_scores) / tokens}
    report["hf_scores"] = hf_scores
    print(f"  tokens equal {report.get('same_tokens', '-')}/{n}; largest |score difference| {max(diffs):.2e}; "
          f"mean NLL ours {report['mean_nll']['ours']:.6f}, transformers {report['mean_nll']['hf']:.6f}")
    return report


def finetune(b, work, steps):
    """The OPUS-MT-shaped fixture imported and fine-tuned for `steps` updates: (checkpoint, tokenizer)."""
    ours = work / "opus"
    run(b, "import", "marian", FIX / "marian/opus/hf", "--output", ours)
    cfg = work / "ft.toml"
    cfg.write_text(f"""[model]
dropout = 0.1
[data]
train_src = "{DATA}/train.en.gz"
train_tgt = "{DATA}/train.de.gz"
valid_src = "{DATA}/val.en.gz"
valid_tgt = "{DATA}/val.de.gz"
bpe = "{ours}/tokenizer.json"
[train]
output_dir = "{work}/run"
init = "{ours}/model.safetensors"
max_src_tokens = 2048
max_tgt_tokens = 2048
warmup = 100
lr_scale = 0.3
seed = 1
max_steps = {steps}
checkpoint_steps = {steps}
""")
    run(b, "train", "--config", cfg)
    return work / "run" / f"ckpt-{steps:08d}.safetensors", ours / "tokenizer.json"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/transformer")
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--model", type=Path, help="a quickstart output directory instead of fixtures/m30k-small")
    a = ap.parse_args()
    if a.model and a.write:
        ap.error("--write stores the fixture's outputs: leave out --model")
    torch.set_num_threads(1)
    n = a.sentences
    src = gzip.open(DATA / "test_2016_flickr.en.gz", "rt").read().splitlines()[:n]
    ref = gzip.open(DATA / "test_2016_flickr.de.gz", "rt").read().splitlines()[:n]
    work = Path(tempfile.mkdtemp(prefix="hf-check-"))
    (work / "src.txt").write_text("".join(s + "\n" for s in src))
    (work / "ref.txt").write_text("".join(s + "\n" for s in ref))
    if a.model:
        ckpt, bpe = a.model / "model.safetensors", a.model / "run/bpe.json"
    else:
        ckpt, bpe = FIX / "m30k-small/model.safetensors", FIX / "m30k-small/bpe.json"
    print(f"{ckpt} (our BPE):")
    report = compare(a.bin, ckpt, bpe, work / "hf", src, ref, work, False)
    ckpt, tok = finetune(a.bin, work, a.steps)
    print(f"the OPUS-MT-shaped fixture, imported and fine-tuned for {a.steps} updates (MarianTokenizer):")
    report["finetuned"] = compare(a.bin, ckpt, tok, work / "hf-finetuned", src, ref, work, True)
    report["finetuned"]["steps"] = a.steps
    if a.write:
        (FIX / "hf").mkdir(exist_ok=True)
        (FIX / "hf/checks.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        keep = FIX / "hf/finetuned"
        keep.mkdir(exist_ok=True)
        shutil.copy(ckpt, keep / "model.safetensors")
        shutil.copy(tok, keep / "tokenizer.json")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
