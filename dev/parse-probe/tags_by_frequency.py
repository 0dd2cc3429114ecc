#!/usr/bin/env python3
"""Tagging accuracy by how often each test word occurs in the training trees.

    python3 dev/parse-probe/tags_by_frequency.py TRAIN_TREES GOLD_TREES TEST_TREES

TRAIN_TREES: the training trees, bracketed, one a line (`transformer treebank --files
wsj_0001..wsj_0159 --trees FILE`); GOLD_TREES / TEST_TREES: the test files' gold trees and a
parser's output for them (`bench/ptb-parse/run.sh` writes test.gold and test-*.trees). The
parser's trees are over exactly the sentence's words, so leaves pair up in order. Prints, for
words unseen in training, seen 1-4 times and seen more often, how many leaves there are and the
share whose tag matches the gold tag (EVALB's tagging accuracy also counts punctuation, which
COLLINS.prm deletes from brackets but not from tags)."""
import re
import sys
from collections import Counter

LEAF = re.compile(r"\(([^\s()]+) ([^\s()]+)\)")


def leaves(line):
    return LEAF.findall(line)


def main(train, gold, test):
    counts = Counter(w for line in open(train) for _, w in leaves(line))
    buckets = {"unseen": [0, 0], "seen 1-4": [0, 0], "seen 5+": [0, 0]}
    for g_line, t_line in zip(open(gold), open(test)):
        g, t = leaves(g_line), leaves(t_line)
        if [w for _, w in g] != [w for _, w in t]:
            sys.exit(f"the words differ between the gold and test trees:\n{g_line}{t_line}")
        for (gt, w), (tt, _) in zip(g, t):
            n = counts[w]
            b = buckets["unseen" if n == 0 else "seen 1-4" if n < 5 else "seen 5+"]
            b[0] += 1
            b[1] += gt == tt
    for name, (n, ok) in buckets.items():
        print(f"{name:>9}: {n:5d} words, {100 * ok / max(n, 1):.1f}% tagged right")


if __name__ == "__main__":
    main(*sys.argv[1:4])
