#!/usr/bin/env python3
"""Search errors or model errors? Scores each gold tree and each decoded tree under the model
(`transformer score --task parsing`: Σ log p, teacher-forced, EOS included) and compares them as
the beam ranks finished hypotheses, Σ log p / ((5 + |Y|) / 6)^α with |Y| counting EOS (α 0.3 for
parsing, decode/beam.rs). Where the output is wrong and the model scores the gold tree higher, the
search lost a tree the model prefers (a search error); where it scores its own output at least as
high, the model is wrong (a model error).

    python3 dev/parsing/search_errors.py --binary target/release/transformer \
        --checkpoint best.safetensors --bpe vocab.json --words test.words --gold test.gold \
        --test test.trees [--alpha 0.3] [--out DIR]

It also writes DIR/exact-search.trees, the output with every search error replaced by its gold
tree, and scores it with `parse-eval`: the F1 an exact search (under this model and penalty) would
reach at most, against the F1 of the output as decoded.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from errors import brackets, parse_trees  # noqa: E402


def score(a, ref, per_token):
    cmd = [a.binary, "score", "--checkpoint", a.checkpoint, "--bpe", a.bpe, "--task", "parsing",
           "--src", a.words, "--ref", ref]
    if per_token:
        cmd.append("--per-token")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    return [float(x) for x in out]


def f1_of(binary, gold, test):
    out = subprocess.run([binary, "parse-eval", "--gold", gold, "--test", test], capture_output=True, text=True).stdout
    all_ = out.split("-- All --", 1)[1]
    return next(line.split("=")[1].strip() for line in all_.splitlines() if "FMeasure" in line)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for k in ("binary", "checkpoint", "bpe", "words", "gold", "test"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--alpha", type=float, default=0.3)
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    # Trees one a line, as `score` reads them.
    gold_lines = open(a.gold).read().splitlines()
    test_lines = open(a.test).read().splitlines()
    assert len(gold_lines) == len(test_lines), "gold and test differ in length"
    sums = {}
    for name, path in (("gold", a.gold), ("test", a.test)):
        total, mean = score(a, path, False), score(a, path, True)
        lens = [round(t / m) if m != 0 else 1 for t, m in zip(total, mean)]
        sums[name] = [t / ((5 + n) / 6) ** a.alpha for t, n in zip(total, lens)]
    right = search = model = 0
    exact = []
    for i, (g, t) in enumerate(zip(gold_lines, test_lines)):
        if brackets(parse_trees(g)[0]) == brackets(parse_trees(t)[0]):
            right += 1
            exact.append(t)
        elif sums["gold"][i] > sums["test"][i]:
            search += 1
            exact.append(g)
        else:
            model += 1
            exact.append(t)
    path = os.path.join(a.out, "exact-search.trees")
    open(path, "w").write("\n".join(exact) + "\n")
    n = len(gold_lines)
    print(f"{n} sentences: {right} output with the gold brackets; of the {n - right} others, "
          f"{search} search errors (the model scores the gold tree higher) and {model} model errors "
          f"(it scores its own output at least as high)")
    print(f"F1 as decoded {f1_of(a.binary, a.gold, a.test)}; with every search error fixed "
          f"{f1_of(a.binary, a.gold, path)} ({path})")


if __name__ == "__main__":
    main()
