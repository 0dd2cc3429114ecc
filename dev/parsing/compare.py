#!/usr/bin/env python3
"""Two or more parsers' test trees against the same gold trees, side by side: where one loses
brackets the other finds (issue 70's "why we are 10 behind").

    python3 dev/parsing/compare.py --gold test.gold --test ours=test.trees --test berkeley=b.trees \
        [--train data/ptb-sample --files wsj_0001..wsj_0159]

For each parser: recall, precision and F1 (counted as errors.py counts them, which reproduces
EVALB's COLLINS.prm on these files), missing (gold only) and extra (output only) brackets by label
and by span length, unary brackets (a constituent over the same words as its only child),
F1 by sentence length, tagging accuracy (by word count in the training trees when --train is
given), and how much of the bracket loss falls in sentences whose every tag is right
(attachment) or not (tagging). Sentences whose output has other words than the gold tree (a
failed parse) count every gold bracket as missing.
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from errors import brackets, leaves, parse_trees, read_treebank  # noqa: E402

SPANS = [(1, 1), (2, 2), (3, 5), (6, 10), (11, 20), (21, 10**9)]
LENGTHS = [(1, 10), (11, 20), (21, 30), (31, 40), (41, 10**9)]


def bucket(n, buckets):
    for lo, hi in buckets:
        if lo <= n <= hi:
            return f"{lo}-{hi}" if hi < 10**9 else f"{lo}+"
    raise ValueError(n)


def unaries(t):
    """Count of constituents (not TOP, not preterminals) whose only child is a constituent."""
    label, kids = t
    if isinstance(kids, str):
        return 0
    own = int(len(kids) == 1 and not isinstance(kids[0][1], str) and label not in ("", "TOP"))
    return own + sum(unaries(k) for k in kids)


def prf(match, gold, test):
    r = 100 * match / max(gold, 1)
    p = 100 * match / max(test, 1)
    return r, p, 2 * r * p / max(r + p, 1e-9)


def analyse(gold, test, counts):
    s = collections.defaultdict(lambda: collections.Counter())
    for g, t in zip(gold, test):
        gl, tl = leaves(g), leaves(t)
        gb = brackets(g)
        n_words = len(gl)
        same_words = [w for _, w in gl] == [w for _, w in tl]
        tb = brackets(t) if same_words else collections.Counter()
        s["sent"]["all"] += 1
        s["sent"]["failed"] += not same_words
        match = gb & tb
        miss, extra = gb - tb, tb - gb
        for key, c in (("gold", gb), ("test", tb), ("match", match), ("miss", miss), ("extra", extra)):
            s[key]["all"] += sum(c.values())
            for (lab, i, j), n in c.items():
                s[key + "_label"][lab] += n
                s[key + "_span"][bucket(j - i, SPANS)] += n
        lb = bucket(n_words, LENGTHS)
        for key, c in (("gold", gb), ("test", tb), ("match", match)):
            s[key + "_len"][lb] += sum(c.values())
        s["unary"]["gold"] += unaries(g)
        s["unary"]["test"] += unaries(t) if same_words else 0
        all_right = same_words
        for k, ((gt, w), tt) in enumerate(zip(gl, [x for x, _ in tl] if same_words else [None] * len(gl))):
            c = counts.get(w, 0) if counts is not None else None
            kind = "all" if c is None else "unseen" if c == 0 else "rare (1-2)" if c <= 2 else "seen (3+)"
            for key in {kind, "all"}:
                s["tag_n"][key] += 1
                s["tag_ok"][key] += gt == tt
            all_right &= gt == tt
        group = "tags right" if all_right else "a tag wrong"
        s["group_gold"][group] += sum(gb.values())
        s["group_miss"][group] += sum(miss.values())
        s["group_extra"][group] += sum(extra.values())
        s["group_sent"][group] += 1
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gold", required=True)
    ap.add_argument("--test", action="append", required=True, help="NAME=FILE, once a parser")
    ap.add_argument("--train", help="treebank directory of the training files (tagging by word count)")
    ap.add_argument("--files", default="wsj_0001..wsj_0159")
    a = ap.parse_args()
    counts = None
    if a.train:
        counts = collections.Counter(w for t in read_treebank(a.train, a.files) for _, w in leaves(t))
    gold = parse_trees(open(a.gold).read())
    runs = []
    for spec in a.test:
        name, path = spec.split("=", 1)
        test = parse_trees(open(path).read())
        assert len(test) == len(gold), f"{path}: {len(test)} trees, {len(gold)} gold trees"
        runs.append((name, analyse(gold, test, counts)))
    names = [n for n, _ in runs]
    w = max(24, *(len(n) + 2 for n in names))

    def row(title, cells):
        print(f"  {title:<26}" + "".join(f"{c:>{w}}" for c in cells))

    print(f"{len(gold)} sentences")
    row("", names)
    row("recall / precision / F1", [""] * len(runs))
    for i, t in enumerate(("recall", "precision", "F1")):
        row(f"  {t}", [f"{prf(s['match']['all'], s['gold']['all'], s['test']['all'])[i]:.2f}" for _, s in runs])
    row("failed parses", [s["sent"]["failed"] for _, s in runs])
    row("brackets gold / output", [f"{s['gold']['all']}/{s['test']['all']}" for _, s in runs])
    row("missing / extra", [f"{s['miss']['all']}/{s['extra']['all']}" for _, s in runs])
    row("unary gold / output", [f"{s['unary']['gold']}/{s['unary']['test']}" for _, s in runs])
    print("missing / extra brackets by label (labels with 20+ gold brackets):")
    labels = sorted(runs[0][1]["gold_label"], key=lambda lab: -runs[0][1]["gold_label"][lab])
    for lab in labels:
        if runs[0][1]["gold_label"][lab] >= 20:
            row(f"  {lab} ({runs[0][1]['gold_label'][lab]})",
                [f"{s['miss_label'][lab]}/{s['extra_label'][lab]}" for _, s in runs])
    print("recall / precision by span length in words (after punctuation):")
    for lo, hi in SPANS:
        b = bucket(lo, SPANS)
        cells = []
        for _, s in runs:
            r, p, _ = prf(s["match_span"][b], s["gold_span"][b], s["test_span"][b])
            cells.append(f"{r:.1f}/{p:.1f}")
        row(f"  {b} ({runs[0][1]['gold_span'][b]})", cells)
    print("F1 by sentence length in words:")
    for lo, hi in LENGTHS:
        b = bucket(lo, LENGTHS)
        row(f"  {b}", [f"{prf(s['match_len'][b], s['gold_len'][b], s['test_len'][b])[2]:.2f}" for _, s in runs])
    print("tagging accuracy:")
    for k in ("seen (3+)", "rare (1-2)", "unseen", "all"):
        if runs[0][1]["tag_n"][k]:
            row(f"  {k} ({runs[0][1]['tag_n'][k]})",
                [f"{100 * s['tag_ok'][k] / max(s['tag_n'][k], 1):.2f}%" for _, s in runs])
    print("bracket loss by tagging (sentences; gold brackets; missing / extra):")
    for g in ("tags right", "a tag wrong"):
        row(f"  {g}", [f" {s['group_sent'][g]}; {s['group_gold'][g]}; {s['group_miss'][g]}/{s['group_extra'][g]}"
                       for _, s in runs])


if __name__ == "__main__":
    main()
