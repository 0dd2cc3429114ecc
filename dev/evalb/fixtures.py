#!/usr/bin/env python3
"""EVALB parity fixtures on the project's own trees (tests/evalb), scored by the real EVALB.

Builds EVALB from its public source (the 2006 revision by David Ellis, with COLLINS.prm; the copy
in nikitakit/self-attentive-parser), reads the project's treebank (tests/treebank, written by
dev/treebank/grammar.py), makes 28 cases of gold and test trees with scripted perturbations
(deleted, inserted and relabelled constituents, POS errors, ADVP/PRT, punctuation, unary chains,
root labels, word and length mismatches, empty and unbalanced lines, sentences over 40 tokens,
attachment errors, model-like output, an all-wrong test, more than 10 errors, a malformed line),
runs `evalb -p COLLINS.prm gold.txt test.txt` on each, and writes gold, test, EVALB's stdout
(evalb.out), its stderr (evalb.err, where it wrote any) and cases.tsv. EVALB's source is never
copied into the repository.

    python3 dev/evalb/fixtures.py --evalb https://github.com/nikitakit/self-attentive-parser
    python3 dev/evalb/fixtures.py --evalb ~/src/self-attentive-parser/EVALB   # a local copy

`--evalb` takes a directory holding evalb.c and COLLINS.prm (or an EVALB/ folder that does), or a
git repository to clone (a URL or a local path; depth 1). EVALB is compiled with gcc twice, at -O0 and -O2; the script stops if
the two builds disagree on any case. Deterministic: the same trees and seed give the same files.
Standard library only (and gcc, and git for a URL).
"""

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

# COLLINS.prm's DELETE_LABELs that are tags: their words are removed before spans are counted.
DELETED_TAGS = {",", ":", "``", "''", "."}
PUNCT_TAGS = DELETED_TAGS | {"-LRB-", "-RRB-", "$", "#"}
PHRASES = ["NP", "VP", "PP", "S", "SBAR", "ADJP", "ADVP", "QP", "WHNP", "PRN", "FRAG", "UCP", "SINV"]
POS = ["NN", "NNS", "NNP", "VB", "VBD", "VBZ", "VBN", "VBG", "JJ", "RB", "IN", "DT", "CD", "PRP", "CC", "MD", "TO", "RP"]
FUNCTION_TAGS = ["-SBJ", "-TMP", "-LOC", "-CLR", "-PRD", "-DIR", "-MNR", "-ADV", "-TPC", "-NOM", "-LGS"]


# ---------------------------------------------------------------------------------------------
# Trees: [label, [children]] for constituents, [tag, "word"] for preterminals.

def parse(text):
    """Every tree of a bracketed text (the treebank's multi-line layout or one tree a line)."""
    tokens = text.replace("(", " ( ").replace(")", " ) ").split()
    trees, stack, i = [], [], 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "(":
            label = ""
            if i + 1 < len(tokens) and tokens[i + 1] not in ("(", ")"):
                label = tokens[i + 1]
                i += 1
            stack.append([label, []])
        elif tok == ")":
            node = stack.pop()
            if stack:
                stack[-1][1].append(node)
            else:
                trees.append(node)
        else:  # a word: the node on top is a preterminal
            stack[-1][1] = tok
        i += 1
    assert not stack, "unbalanced treebank"
    return trees


def leaf(t):
    return isinstance(t[1], str)


def copy(t):
    return [t[0], t[1]] if leaf(t) else [t[0], [copy(c) for c in t[1]]]


def show(t):
    if leaf(t):
        return "(%s %s)" % (t[0], t[1])
    return "(%s %s)" % (t[0], " ".join(show(c) for c in t[1]))


def leaves(t):
    if leaf(t):
        return [t]
    out = []
    for c in t[1]:
        out += leaves(c)
    return out


def strip_label(label):
    if label.startswith("-"):
        return label
    for i, ch in enumerate(label):
        if i > 0 and ch in "-=":
            return label[:i]
    return label


def clean(t, root="TOP"):
    """The preprocessed tree: no -NONE-, no emptied constituent, no function tag, `root` on top."""
    def strip(n):
        if leaf(n):
            return None if n[0] == "-NONE-" else [strip_label(n[0]), n[1]]
        kids = [k for k in (strip(c) for c in n[1]) if k is not None]
        return [strip_label(n[0]), kids] if kids else None

    (top,) = t[1]
    return [root, [strip(top)]]


def with_root(t, root):
    """`t` (whose root holds one child) under another root: a label, '' or None (bare)."""
    (top,) = t[1]
    if root is None:
        return copy(top)
    if root == "TOP/S1":
        return ["TOP", [["S1", [copy(top)]]]]
    return [root, [copy(top)]]


def nodes(t, parent=None, out=None):
    """(node, parent) for every constituent (not the preterminals), root first."""
    out = [] if out is None else out
    if not leaf(t):
        out.append((t, parent))
        for c in t[1]:
            nodes(c, t, out)
    return out


def inner(t):
    """(node, parent) of the constituents below the root's child, preterminals excluded."""
    return [(n, p) for n, p in nodes(t) if p is not None and p is not t]


def tokens(t):
    """EVALB's Len.: words other than -NONE-."""
    return sum(1 for l in leaves(t) if l[0] != "-NONE-")


def words(t):
    """EVALB's Words: tokens less the deleted punctuation."""
    return sum(1 for l in leaves(t) if l[0] != "-NONE-" and l[0] not in DELETED_TAGS)


# ---------------------------------------------------------------------------------------------
# Perturbations (in place; each returns whether it changed anything).

class Perturb:
    def __init__(self, rng):
        self.r = rng

    def pick(self, items):
        return items[int(self.r.random() * len(items))]

    def delete(self, t):
        """A constituent removed, its children given to its parent."""
        cands = [(n, p) for n, p in inner(t) if not leaf(n)]
        if not cands:
            return False
        n, p = self.pick(cands)
        i = next(k for k, c in enumerate(p[1]) if c is n)
        p[1][i:i + 1] = n[1]
        return True

    def insert(self, t):
        """A new constituent over 2 or more (not all) adjacent children of one constituent."""
        cands = [n for n, _ in nodes(t)[1:] if len(n[1]) >= 3]
        if not cands:
            return False
        n = self.pick(cands)
        size = 2 + int(self.r.random() * (len(n[1]) - 2))
        start = int(self.r.random() * (len(n[1]) - size + 1))
        n[1][start:start + size] = [[self.pick(PHRASES), n[1][start:start + size]]]
        return True

    def relabel(self, t):
        cands = [n for n, _ in inner(t)]
        if not cands:
            return False
        n = self.pick(cands)
        old = strip_label(n[0])
        same = {old} | ({"ADVP", "PRT"} if old in ("ADVP", "PRT") else set())
        n[0] = self.pick([l for l in PHRASES if l not in same])
        return True

    def pos(self, t):
        cands = [l for l in leaves(t) if l[0] not in PUNCT_TAGS and l[0] != "-NONE-"]
        if not cands:
            return False
        l = self.pick(cands)
        l[0] = self.pick([p for p in POS if p != l[0]])
        return True

    def attach(self, t):
        """A phrase's last child raised out of it, or its right sibling lowered into it."""
        cands = []
        for n, p in inner(t):
            i = next(k for k, c in enumerate(p[1]) if c is n)
            if len(n[1]) >= 2:
                cands.append(("raise", n, p, i))
            if i + 1 < len(p[1]):
                cands.append(("lower", n, p, i))
        if not cands:
            return False
        how, n, p, i = self.pick(cands)
        if how == "raise":
            p[1].insert(i + 1, n[1].pop())
        else:
            n[1].append(p[1].pop(i + 1))
        return True

    def word(self, t, upper=True):
        """One word changed: upper-cased, or a letter added (a word mismatch for EVALB)."""
        cands = [l for l in leaves(t) if l[0] not in PUNCT_TAGS and l[0] != "-NONE-" and any(ch.islower() for ch in l[1])]
        l = self.pick(cands)
        l[1] = l[1].upper() if upper else l[1] + "s"
        return True


def errors(rng, t, rate, pos_rate):
    """Model-like output: about `rate` of the brackets wrong, `pos_rate` of the tags."""
    p = Perturb(rng)
    n = max(1, len(nodes(t)))
    k = sum(1 for _ in range(n) if rng.random() < rate)
    for _ in range(k):
        p.pick([p.delete, p.insert, p.relabel, p.attach, p.attach])(t)
    for l in leaves(t):
        if l[0] not in PUNCT_TAGS and rng.random() < pos_rate:
            l[0] = p.pick([x for x in POS if x != l[0]])
    return t


# ---------------------------------------------------------------------------------------------
# The cases: each returns (covers, gold lines, test lines).

def case_list(trees, rng):
    raw = [t for t in trees]
    clean_top = [clean(t) for t in trees]
    p = Perturb(rng)

    def sample(n, pool=None):
        pool = list(range(len(trees))) if pool is None else pool
        return [pool[i] for i in sorted(rng.sample(range(len(pool)), n))]

    def some(lines_gold, tests, fn, share=0.7):
        out = []
        for g in tests:
            t = copy(g)
            if rng.random() < share:
                fn(t)
            out.append(show(t))
        return [show(g) for g in lines_gold], out

    def perturbed(k_lo, k_hi, op):
        def fn(t):
            for _ in range(k_lo + int(rng.random() * (k_hi - k_lo + 1))):
                op(t)
        return fn

    cases = []

    ids = sample(40)
    cases.append(("01-identical-raw", "identical trees, raw treebank on both sides ('( (S ...) )' root, function tags, -NONE-): F1 100",
                  [show(raw[i]) for i in ids], [show(raw[i]) for i in ids]))
    ids = sample(40)
    cases.append(("02-identical-clean-top", "identical trees, '(TOP ...)' root, no function tags, no -NONE-: F1 100",
                  [show(clean_top[i]) for i in ids], [show(clean_top[i]) for i in ids]))
    ids = sample(40)
    cases.append(("03-raw-gold-clean-test", "gold raw (function tags, -NONE-, empty root label); test the same tree without -NONE- and function tags, empty root label: F1 100",
                  [show(raw[i]) for i in ids], [show(clean(raw[i], "")) for i in ids]))

    ids = sample(36)
    gold, test = [], []
    for k, i in enumerate(ids):
        g, t = copy(clean_top[i]), copy(clean_top[i])
        tagged = g if k % 2 == 0 else t
        for n, _ in nodes(tagged)[1:]:
            if rng.random() < 0.5:
                tag = p.pick(FUNCTION_TAGS)
                n[0] += tag + p.pick(["", "", "-%d" % (1 + int(rng.random() * 9)), "=%d" % (1 + int(rng.random() * 9))])
        gold.append(show(g))
        test.append(show(t))
    cases.append(("04-functags-one-side", "function tags and indices (NP-SBJ-1, PP-LOC=2, random added tags) on gold only or test only: stripped at the first '-' or '=', F1 100", gold, test))

    ids = sample(30)
    cases.append(("05-none-test-only", "-NONE- elements and function tags in the test file only, gold clean with empty root label: F1 100",
                  [show(clean(raw[i], "")) for i in ids], [show(raw[i]) for i in ids]))

    for name, covers, op, lo, hi in [
        ("06-delete-constituents", "test misses 1-3 random constituents on ~70% of lines (recall < precision)", p.delete, 1, 3),
        ("07-insert-constituents", "test has 1-3 extra constituents over random spans on ~70% of lines (precision < recall)", p.insert, 1, 3),
        ("08-relabel-constituents", "1-3 constituent labels changed on ~70% of lines (same spans, wrong labels)", p.relabel, 1, 3),
        ("09-pos-tags", "1-4 POS tags changed (never to or from punctuation tags) on ~70% of lines: brackets 100, tagging accuracy < 100", p.pos, 1, 4),
    ]:
        ids = sample(40)
        g = [clean_top[i] for i in ids]
        gold, test = some(g, g, perturbed(lo, hi, op))
        cases.append((name, covers, gold, test))

    # ADVP <-> PRT, on trees that have one.
    pool = [i for i, t in enumerate(raw) if any(strip_label(n[0]) in ("ADVP", "PRT") for n, _ in nodes(t))]
    ids = sample(30, pool)
    gold, test = [], []
    for k, i in enumerate(ids):
        # Raw gold against a raw or clean test with the empty root label; clean gold under TOP
        # against a clean test under TOP (the empty label is a bracket of its own to EVALB).
        g = raw[i] if k % 2 == 0 else clean_top[i]
        t = (copy(raw[i]) if k % 4 == 0 else clean(raw[i], "")) if k % 2 == 0 else clean(raw[i], "TOP")
        for n, _ in nodes(t):
            base = strip_label(n[0])
            if base in ("ADVP", "PRT"):
                n[0] = ("PRT" if base == "ADVP" else "ADVP") + n[0][len(base):]
        gold.append(show(g))
        test.append(show(t))
    cases.append(("10-advp-prt", "ADVP <-> PRT swaps (with and without function tags; raw or clean gold): equivalent under EQ_LABEL, F1 100", gold, test))

    # Punctuation-only constituents, and boundary punctuation moved out of its phrase.
    ids = sample(30)
    gold, test = [], []
    for i in ids:
        g = clean_top[i]
        t = copy(g)
        done = 0
        for n, _ in nodes(t):
            for k, c in enumerate(n[1]):
                if leaf(c) and c[0] in DELETED_TAGS and rng.random() < 0.4:
                    n[1][k] = [p.pick(["ADVP", "NP", "S"]), [c]]
                    done += 1
        for n, par in inner(t):
            if len(n[1]) >= 2 and leaf(n[1][-1]) and n[1][-1][0] in DELETED_TAGS:
                i_n = next(k for k, c in enumerate(par[1]) if c is n)
                par[1].insert(i_n + 1, n[1].pop())
                done += 1
                break
        gold.append(show(g))
        test.append(show(t))
    cases.append(("11-punct-constituents", "punctuation-only constituents added in test, and boundary punctuation moved outside its phrase: F1 100", gold, test))

    # Unary chains, on trees with a few constituents.
    ids = sample(40, [i for i, t in enumerate(clean_top) if len(inner(t)) >= 3])
    gold, test = [], []
    for k, i in enumerate(ids):
        g, t = copy(clean_top[i]), copy(clean_top[i])
        kind = k % 4
        if kind == 0:  # same-label duplicate in test
            n, par = p.pick(inner(t))
            j = next(x for x, c in enumerate(par[1]) if c is n)
            par[1][j] = [n[0], [n]]
        elif kind == 1:  # the same duplicates on both sides
            for side in (g, t):
                n, par = inner(side)[len(inner(side)) // 2]
                j = next(x for x, c in enumerate(par[1]) if c is n)
                par[1][j] = [n[0], [n]]
        elif kind == 2:  # another label's unary added
            n, par = p.pick(inner(t))
            j = next(x for x, c in enumerate(par[1]) if c is n)
            par[1][j] = [p.pick([l for l in ["UCP", "S", "NP", "VP"] if l != n[0]]), [n]]
        else:  # a unary over a preterminal removed
            cands = [(n, par) for n, par in inner(t) if len(n[1]) == 1 and leaf(n[1][0])]
            if cands:
                n, par = p.pick(cands)
                j = next(x for x, c in enumerate(par[1]) if c is n)
                par[1][j] = n[1][0]
        gold.append(show(g))
        test.append(show(t))
    cases.append(("12-unary-chains", "unary chains: same-label duplicates (NP over NP) in test or both, other-label unaries added, unaries removed", gold, test))

    for name, covers, groot, troots, n in [
        ("13-root-gold-top", "gold '(TOP ...)'; test root cycles through TOP, ROOT, empty label '( ...)', bare '(S ...)', '(TOP (S1 ...))'", "TOP", ["TOP", "ROOT", "", None, "TOP/S1"], 15),
        ("14-root-gold-empty", "gold raw '( (S ...) )'; test root cycles through empty label, TOP, ROOT, bare", "raw", ["", "TOP", "ROOT", None], 16),
        ("15-root-gold-root", "gold '(ROOT ...)'; test root cycles through ROOT, TOP, empty label, bare", "ROOT", ["ROOT", "TOP", "", None], 16),
    ]:
        ids = sample(n)
        gold = [show(raw[i]) if groot == "raw" else show(with_root(clean_top[i], groot)) for i in ids]
        test = [show(with_root(clean_top[i], troots[k % len(troots)])) for k, i in enumerate(ids)]
        cases.append((name, covers, gold, test))

    ids = sample(30)
    g = [clean_top[i] for i in ids]
    test = [copy(t) for t in g]
    for k in sorted(rng.sample(range(30), 5)):
        p.word(test[k], upper=k % 3 != 0)
    cases.append(("16-word-mismatch", "5 test lines with one word changed (case change or extra letter): error sentences, excluded from totals",
                  [show(t) for t in g], [show(t) for t in test]))

    ids = sample(30)
    g = [clean_top[i] for i in ids]
    test = [copy(t) for t in g]
    for k, kind in zip(sorted(rng.sample(range(30), 6)), ["drop", "add", "punct-as-word", "word-as-punct", "drop", "add"]):
        t = test[k]
        if kind == "drop":
            n, par = p.pick([(n, par) for n, par in nodes(t) if not leaf(n) and len(n[1]) >= 2 and any(leaf(c) and c[0] not in PUNCT_TAGS for c in n[1])])
            j = p.pick([x for x, c in enumerate(n[1]) if leaf(c) and c[0] not in PUNCT_TAGS])
            del n[1][j]
        elif kind == "add":
            n, _ = p.pick(nodes(t)[1:])
            n[1].insert(int(rng.random() * (len(n[1]) + 1)), ["NN", "extra"])
        elif kind == "punct-as-word":
            l = p.pick([l for l in leaves(t) if l[0] in DELETED_TAGS])
            l[0] = "NN"
        else:
            l = p.pick([l for l in leaves(t) if l[0] not in PUNCT_TAGS])
            l[0] = p.pick([",", "."])
    cases.append(("17-length-mismatch", "6 test lines of different length: word dropped, word added, punctuation re-tagged as a word (NN), word re-tagged as punctuation: error sentences",
                  [show(t) for t in g], [show(t) for t in test]))

    ids = sample(25)
    gold = [show(clean_top[i]) for i in ids]
    test = list(gold)
    for k, blank in zip(sorted(rng.sample(range(25), 4)), ["", "", "   ", ""]):
        test[k] = blank
    cases.append(("18-empty-test-lines", "3 empty test lines and 1 whitespace-only test line: skipped sentences", gold, test))

    ids = sample(25)
    g = [clean_top[i] for i in ids]
    gold, test = some(g, g, perturbed(1, 2, p.attach), share=0.5)
    for k, kind in zip(sorted(rng.sample(range(25), 4)), ["final", "middle", "final", "extra"]):
        line = test[k]
        if kind == "final":
            test[k] = line[:-1]
        elif kind == "middle":
            closes = [x for x, ch in enumerate(line) if ch == ")"]
            x = closes[len(closes) // 2]
            test[k] = line[:x] + line[x + 1:]
        else:
            test[k] = line + ")"
    cases.append(("19-unbalanced-test", "unbalanced test trees: final ')' missing (x2), a middle ')' missing, one ')' too many at the end: error sentences whose per-line figures are still printed", gold, test))

    long_ids = [i for i, t in enumerate(clean_top) if tokens(t) > 40]
    by_punct = [i for i in long_ids if words(clean_top[i]) <= 40]
    short_ids = [i for i, t in enumerate(clean_top) if tokens(t) <= 40]
    ids = sorted(set(sample(min(30, len(long_ids)), long_ids) + by_punct[:6] + sample(30, short_ids)))
    g = [clean_top[i] for i in ids]
    gold, test = some(g, g, perturbed(1, 3, p.delete), share=0.6)
    cases.append(("20-long-sentences", "mix of sentences over and under 40 tokens (some with 41+ tokens only because of punctuation): the len<=40 summary differs from All", gold, test))

    ids = sample(12, long_ids)
    g = [clean_top[i] for i in ids]
    gold, test = some(g, g, perturbed(1, 2, p.relabel))
    cases.append(("21-long-only", "only sentences over 40 tokens: the len<=40 block has 0 sentences and prints -nan for F", gold, test))

    ids = sample(40)
    g = [clean_top[i] for i in ids]
    gold, test = some(g, g, perturbed(1, 2, p.attach))
    cases.append(("22-attachment-crossing", "attachment errors (a phrase's last child raised out of it, or its right sibling lowered into it): crossing brackets", gold, test))

    ids = sample(400)
    g = [clean_top[i] for i in ids]
    cases.append(("23-model-10pct-clean", "model-output flavour: 400 sentences, ~10% of brackets wrong (delete/insert/relabel/attachment), ~3% POS errors; gold and test '(TOP ...)', clean",
                  [show(t) for t in g], [show(errors(rng, copy(t), 0.10, 0.03)) for t in g]))

    ids = sample(300)
    cases.append(("24-model-10pct-rawgold", "model-output flavour on raw gold ('( (S ...) )', function tags, -NONE-) with clean test and empty root label, 300 sentences",
                  [show(raw[i]) for i in ids], [show(errors(rng, clean(raw[i], ""), 0.10, 0.03)) for i in ids]))

    ids = sample(150)
    g = [clean_top[i] for i in ids]
    test = [show(errors(rng, copy(t), 0.15, 0.04)) for t in g]
    special = sorted(rng.sample(range(150), 6))
    for k, kind in zip(special, ["empty", "length", "word", "empty", "length", "unclosed"]):
        t = copy(g[k])
        if kind == "empty":
            test[k] = ""
        elif kind == "length":
            n, _ = p.pick(nodes(t)[1:])
            n[1].insert(0, ["NN", "extra"])
            test[k] = show(t)
        elif kind == "word":
            p.word(t)
            test[k] = show(t)
        else:
            test[k] = show(t)[:-1]
    cases.append(("25-model-with-errors", "model-output flavour (~15% wrong) with 2 empty lines, 2 length mismatches, 1 word mismatch, 1 unclosed tree among 150 sentences",
                  [show(t) for t in g], test))

    ids = sample(8)
    g = [clean_top[i] for i in ids]
    cases.append(("26-no-match-nan", "every test bracket wrong (flat X under TOP): recall = precision = 0 and F printed as -nan",
                  [show(t) for t in g], [show(["TOP", [["X", [copy(l) for l in leaves(t)]]]]) for t in g]))

    ids = sample(14)
    g = [clean_top[i] for i in ids]
    test = [copy(t) for t in g]
    for k in range(14):
        if k not in (3, 7):
            p.word(test[k], upper=k != 4)
    cases.append(("27-max-error-abort", "12 word-mismatch lines out of 14: with MAX_ERROR 10 EVALB exits (status 1) at the 12th error, after 11 per-sentence lines and with no summary",
                  [show(t) for t in g], [show(t) for t in test]))

    # A preterminal followed by a preterminal sibling loses its ')' on line 8.
    pool = [i for i, t in enumerate(clean_top) if any(leaf(a) and leaf(b) and a[0] not in PUNCT_TAGS for n, _ in nodes(t) for a, b in zip(n[1], n[1][1:]))]
    ids = sample(10, pool)
    g = [clean_top[i] for i in ids]
    test = [show(t) for t in g]
    t = copy(g[7])
    pairs = [(n, a) for n, _ in nodes(t) for a, b in zip(n[1], n[1][1:]) if leaf(a) and leaf(b) and a[0] not in PUNCT_TAGS]
    n, a = pairs[len(pairs) // 2]
    marker = ["MARK", "MARK"]
    j = next(x for x, c in enumerate(n[1]) if c is a)
    n[1][j] = marker
    test[7] = show(t).replace("(MARK MARK)", "(%s %s" % (a[0], a[1]))
    cases.append(("28-malformed-line-abort", "one test line where a preterminal lost its ')' ('(%s %s (%s ...'): EVALB loops on 'Reading sentence' errors until MAX_ERROR and exits (status 1) with no summary" % (a[0], a[1], n[1][j + 1][0]),
                  [show(t) for t in g], test))
    return cases


# ---------------------------------------------------------------------------------------------
# EVALB: its source, two builds, a run.

def evalb_source(arg, work, cloned=False):
    """The folder holding evalb.c and COLLINS.prm: `arg` or its EVALB/, or those of a clone of `arg`."""
    for d in (arg, os.path.join(arg, "EVALB")):
        if os.path.isfile(os.path.join(d, "evalb.c")) and os.path.isfile(os.path.join(d, "COLLINS.prm")):
            return d
    if cloned:
        sys.exit("%s holds no evalb.c and COLLINS.prm (nor an EVALB/ folder that does)" % arg)
    clone = os.path.join(work, "src")
    # Only EVALB/ is checked out (self-attentive-parser also holds large data files).
    subprocess.run(["git", "clone", "--depth", "1", "--no-checkout", "--quiet", arg, clone], check=True)
    subprocess.run(["git", "-C", clone, "checkout", "--quiet", "HEAD", "--", "EVALB"], check=True)
    return evalb_source(clone, work, cloned=True)


def build(src, work):
    code = open(os.path.join(src, "evalb.c"), encoding="latin-1").read()
    code = code.replace("#include <malloc.h>", "")  # as in the copy we use; absent on macOS
    c = os.path.join(work, "evalb.c")
    with open(c, "w", encoding="latin-1") as f:
        f.write(code)
    shutil.copy(os.path.join(src, "COLLINS.prm"), os.path.join(work, "COLLINS.prm"))
    exes = []
    for opt in ("-O0", "-O2"):
        exe = os.path.join(work, "evalb" + opt)
        subprocess.run(["gcc", opt, "-w", "-o", exe, c], check=True)
        exes.append(exe)
    return exes, os.path.join(work, "COLLINS.prm")


def run(exe, prm, case_dir):
    r = subprocess.run([exe, "-p", prm, "gold.txt", "test.txt"], cwd=case_dir, capture_output=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def summary(out):
    """cases.tsv's figures from EVALB's stdout: All then len<=40, or NA where it printed none."""
    names = ["Number of sentence", "Number of Error sentence", "Number of Skip sentence", "Bracketing Recall",
             "Bracketing Precision", "Bracketing FMeasure", "Complete match", "Tagging accuracy"]
    text = out.decode()
    if "=== Summary ===" not in text:
        return ["NA"] * 16
    blocks = text.split("=== Summary ===")[1].split("-- len<=40 --")
    row = []
    for block in blocks:
        values = {}
        for line in block.splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                values[" ".join(k.split())] = v.strip()
        row += [values[n] for n in names]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evalb", required=True, help="a directory with evalb.c and COLLINS.prm, or a git URL to clone")
    ap.add_argument("--treebank", default=os.path.join(ROOT, "tests", "treebank"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "evalb"))
    ap.add_argument("--seed", type=int, default=46)
    args = ap.parse_args()

    files = sorted(f for f in os.listdir(args.treebank) if f.endswith(".mrg"))
    trees = []
    for f in files:
        trees += parse(open(os.path.join(args.treebank, f), encoding="utf-8").read())
    rng = random.Random(args.seed)
    cases = case_list(trees, rng)

    header = ["case", "covers", "exit_status"] + [
        "%s_%s" % (b, n) for b in ("all", "le40")
        for n in ("sentences", "error_sent", "skip_sent", "recall", "precision", "fmeasure", "complete_match", "tagging_acc")]
    rows = ["\t".join(header)]
    with tempfile.TemporaryDirectory() as work:
        src = evalb_source(args.evalb, work)
        exes, prm = build(src, work)
        gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        for name, covers, gold, test in cases:
            assert len(gold) == len(test), name
            d = os.path.join(args.out, name)
            if os.path.isdir(d):
                shutil.rmtree(d)
            os.makedirs(d)
            for fname, lines in (("gold.txt", gold), ("test.txt", test)):
                with open(os.path.join(d, fname), "w", encoding="utf-8", newline="\n") as f:
                    f.write("".join(l + "\n" for l in lines))
            results = [run(exe, prm, d) for exe in exes]
            if results[0] != results[1]:
                sys.exit("%s: EVALB built at -O0 and at -O2 disagree" % name)
            status, out, err = results[0]
            with open(os.path.join(d, "evalb.out"), "wb") as f:
                f.write(out)
            if err:
                with open(os.path.join(d, "evalb.err"), "wb") as f:
                    f.write(err)
            rows.append("\t".join([name, covers, str(status)] + summary(out)))
            print("%-26s exit %d, %s" % (name, status, " ".join(summary(out)[:6])), file=sys.stderr)
    with open(os.path.join(args.out, "cases.tsv"), "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(r + "\n" for r in rows))
    print("%d cases from %d trees of %d files; EVALB built with %s (-O0 and -O2 agree)" % (len(cases), len(trees), len(files), gcc), file=sys.stderr)


if __name__ == "__main__":
    main()
