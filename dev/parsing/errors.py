#!/usr/bin/env python3
"""Where a parser's test errors are: tagging accuracy of seen, rare (count <= 2) and unseen words,
and bracket errors by label (missing: in the gold tree only; extra: in the output only).

    python3 dev/parsing/errors.py --gold test.gold --test test.trees \
        --train data/ptb-sample --files wsj_0001..wsj_0159

Brackets are counted as EVALB's COLLINS.prm counts them, closely enough for a breakdown (the F1
itself comes from `transformer evaluate` / `parse-eval`, which match EVALB exactly): the root and
preterminals are not brackets, punctuation words (tags , : `` '' .) are deleted before spans are
taken, ADVP and PRT are one label, and a bracket left empty by the deletion is dropped.
"""
import argparse
import collections
import glob
import os
import re

PUNCT = {",", ":", "``", "''", "."}


def parse_trees(text):
    """Bracketed trees -> nested (label, children) / (tag, word) tuples, one per top bracket."""
    tokens = re.findall(r"\(|\)|[^\s()]+", text)
    pos = 0

    def node():
        nonlocal pos
        assert tokens[pos] == "("
        pos += 1
        label = ""
        if tokens[pos] not in "()":
            label = tokens[pos]
            pos += 1
        children = []
        while tokens[pos] != ")":
            if tokens[pos] == "(":
                children.append(node())
            else:
                children.append(tokens[pos])
                pos += 1
        pos += 1
        if len(children) == 1 and isinstance(children[0], str):
            return (label, children[0])
        return (label, children)

    out = []
    while pos < len(tokens):
        out.append(node())
    return out


def strip_label(label):
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label)[0] or label


def leaves(t):
    label, kids = t
    if isinstance(kids, str):
        return [(strip_label(label), kids)]
    return [l for k in kids for l in leaves(k) if not (isinstance(k, tuple) and k[0] == "-NONE-")]


def brackets(t):
    """Labelled spans over the words left after deleting punctuation (a multiset)."""
    out = collections.Counter()

    def walk(t, i):
        label, kids = t
        if isinstance(kids, str):
            return i + (0 if strip_label(label) in PUNCT or label == "-NONE-" else 1)
        j = i
        for k in kids:
            j = walk(k, j)
        lab = strip_label(label)
        if lab in ("", "TOP") or j == i:
            return j
        out[("ADVP" if lab == "PRT" else lab, i, j)] += 1
        return j

    walk(t, 0)
    return out


def read_treebank(path, files):
    first, last = files.split("..") if files else ("", "\uffff")
    trees = []
    for f in sorted(glob.glob(os.path.join(path, "**", "*.mrg"), recursive=True)):
        name = os.path.splitext(os.path.basename(f))[0]
        if first <= name <= last:
            trees.extend(parse_trees(open(f).read()))
    return trees


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gold", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--train", required=True, help="treebank directory of the training files")
    ap.add_argument("--files", default="wsj_0001..wsj_0159")
    a = ap.parse_args()
    counts = collections.Counter(w for t in read_treebank(a.train, a.files) for _, w in leaves(t))
    gold = parse_trees(open(a.gold).read())
    test = parse_trees(open(a.test).read())
    assert len(gold) == len(test), f"{len(gold)} gold trees but {len(test)} test trees"
    tag = collections.defaultdict(lambda: [0, 0])
    by_label = collections.defaultdict(lambda: [0, 0, 0])  # gold, missing, extra
    perfect_tags = [0, 0, 0, 0]  # sentences with all tags right: gold brackets, missed; others: gold, missed
    for g, t in zip(gold, test):
        gl, tl = leaves(g), leaves(t)
        if [w for _, w in gl] != [w for _, w in tl]:
            print(f"skipped (words differ): {' '.join(w for _, w in gl)[:60]}")
            continue
        all_right = True
        for (gt, w), (tt, _) in zip(gl, tl):
            c = counts.get(w, 0)
            kind = "unseen" if c == 0 else "rare (1-2)" if c <= 2 else "seen (3+)"
            for k in (kind, "all"):
                tag[k][0] += 1
                tag[k][1] += gt == tt
            all_right &= gt == tt
        gb, tb = brackets(g), brackets(t)
        missed = gb - tb
        for (lab, _, _), n in gb.items():
            by_label[lab][0] += n
        for (lab, _, _), n in missed.items():
            by_label[lab][1] += n
        for (lab, _, _), n in (tb - gb).items():
            by_label[lab][2] += n
        k = 0 if all_right else 2
        perfect_tags[k] += sum(gb.values())
        perfect_tags[k + 1] += sum(missed.values())
    print("tagging accuracy (words of the test trees by their count in the training trees):")
    for k in ("seen (3+)", "rare (1-2)", "unseen", "all"):
        n, ok = tag[k]
        print(f"  {k:<11} {ok:5d}/{n:5d} = {100 * ok / max(n, 1):5.1f}%  ({100 * n / max(tag['all'][0], 1):4.1f}% of words)")
    print("brackets by label (gold count, missing = in the gold tree only, extra = in the output only):")
    tot = [0, 0, 0]
    for lab, (n, miss, extra) in sorted(by_label.items(), key=lambda x: -x[1][1] - x[1][2]):
        tot = [x + y for x, y in zip(tot, (n, miss, extra))]
        if n + extra >= 10:
            print(f"  {lab:<7} gold {n:5d}  missing {miss:4d} ({100 * miss / max(n, 1):4.1f}%)  extra {extra:4d}")
    n, miss, extra = tot
    print(f"  all     gold {n:5d}  missing {miss:4d} ({100 * miss / max(n, 1):4.1f}%)  extra {extra:4d}"
          f"  -> recall {100 * (n - miss) / n:.2f}, precision {100 * (n - miss) / (n - miss + extra):.2f}")
    for name, k in (("every tag right", 0), ("some tag wrong", 2)):
        g, m = perfect_tags[k], perfect_tags[k + 1]
        print(f"  sentences with {name}: {g} gold brackets, {100 * m / max(g, 1):.1f}% missed")


if __name__ == "__main__":
    main()
