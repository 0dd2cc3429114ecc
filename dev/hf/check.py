#!/usr/bin/env python3
"""`export hf` against the real `transformers`: the tests' small Multi30k model exported, loaded
with MarianMTModel and PreTrainedTokenizerFast, and compared with ours on the first N test
sentences: the tokenizer's ids, greedy and beam-4 `generate` against our `translate`, and each
reference's log-probability (teacher-forced, EOS included) against our `score`.

    python dev/hf/check.py [--bin target/release/transformer] [--sentences 100] [--write]

--write stores what the tests compare with offline (crates/transformer/tests/fixtures/hf/checks.json).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import tempfile
from pathlib import Path

import torch
from transformers import MarianMTModel, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "crates/transformer/tests/fixtures"


def run(*args, stdin=None):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, input=stdin).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/transformer")
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    n = a.sentences
    src = gzip.open(ROOT / "data/multi30k/test_2016_flickr.en.gz", "rt").read().splitlines()[:n]
    ref = gzip.open(ROOT / "data/multi30k/test_2016_flickr.de.gz", "rt").read().splitlines()[:n]
    small = FIX / "m30k-small"
    ckpt, bpe = small / "model.safetensors", small / "bpe.json"
    work = Path(tempfile.mkdtemp(prefix="hf-check-"))
    out = work / "hf"
    run(a.bin, "export", "hf", ckpt, "--bpe", bpe, "--output", out)
    model = MarianMTModel.from_pretrained(str(out)).eval()
    tok = PreTrainedTokenizerFast.from_pretrained(str(out))
    (work / "src.txt").write_text("".join(s + "\n" for s in src))
    (work / "ref.txt").write_text("".join(s + "\n" for s in ref))
    ours_pieces = run(a.bin, "bpe", "apply", "--model", bpe, "--input", work / "src.txt").splitlines()
    same_ids = sum(tok.convert_ids_to_tokens(tok(s)["input_ids"]) == p.split() for s, p in zip(src, ours_pieces))
    report = {"sentences": n, "same_tokens": same_ids}
    for mode, beam in [("greedy", 1), ("beam4", 4)]:
        ours = run(a.bin, "translate", "--checkpoint", ckpt, "--bpe", bpe, "--input", work / "src.txt", "--beam", beam,
                   "--alpha", "1", "--length-norm", "marian", "--max-len-a", "0", "--max-len-b", "256",
                   "--threads", "1").splitlines()
        hf = []
        for s in src:
            enc = tok([s], return_tensors="pt", return_token_type_ids=False)
            with torch.no_grad():
                g = model.generate(**enc, num_beams=beam, length_penalty=1.0, max_length=257, early_stopping=False,
                                   do_sample=False)
            hf.append(tok.decode(g[0], skip_special_tokens=True))
        same = sum(x == y for x, y in zip(hf, ours))
        report[mode] = {"same_1best": same, "hf_1best": hf}
        print(f"{mode}: same 1-best {same}/{n}")
    # Teacher-forced log-probabilities of the references.
    ours_scores = [float(x) for x in run(a.bin, "score", "--checkpoint", ckpt, "--bpe", bpe, "--src", work / "src.txt",
                                          "--ref", work / "ref.txt", "--threads", "1").split()]
    hf_scores = []
    for s, r in zip(src, ref):
        enc = tok([s], return_tensors="pt", return_token_type_ids=False)
        labels = tok([r], return_tensors="pt", return_token_type_ids=False)["input_ids"]
        labels = torch.cat([labels, torch.tensor([[tok.eos_token_id]])], dim=1)
        with torch.no_grad():
            logits = model(**enc, labels=labels).logits
        lp = torch.log_softmax(logits.double(), -1).gather(-1, labels[..., None]).sum().item()
        hf_scores.append(lp)
    diffs = [abs(x - y) for x, y in zip(ours_scores, hf_scores)]
    tokens = sum(len(tok(r)["input_ids"]) + 1 for r in ref)
    report["max_score_difference"] = max(diffs)
    report["mean_nll"] = {"ours": -sum(ours_scores) / tokens, "hf": -sum(hf_scores) / tokens}
    report["hf_scores"] = hf_scores
    print(f"tokens equal {same_ids}/{n}; largest |score difference| {max(diffs):.2e}; mean NLL ours "
          f"{report['mean_nll']['ours']:.6f}, transformers {report['mean_nll']['hf']:.6f}")
    if a.write:
        (FIX / "hf").mkdir(exist_ok=True)
        (FIX / "hf/checks.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
