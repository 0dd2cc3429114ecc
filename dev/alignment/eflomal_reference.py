"""Reference word alignments for Multi30k en-de from a real aligner, eflomal (Östling & Tiedemann
2016; `pip install eflomal`), for guided alignment training and for the alignment error rate of
`transformer translate --alignment --alignment-words` (issue 68, item 5).

eflomal aligns the training pairs and the test pairs together (the test sentences borrow the
training data's statistics), in both directions; the two directions are joined by
grow-diag-final-and (Koehn et al. 2005), as Marian's documentation does with fast_align. Words are
the text's space-separated (U+0020) tokens, as our `--alignment-words` counts them. Writes
OUT/train.gdfa and OUT/test.gdfa (`s-t` pairs, a line a sentence).

    python dev/alignment/eflomal_reference.py --out /work/align
"""

import argparse
import gzip
import pathlib
import tempfile

import eflomal

ROOT = pathlib.Path(__file__).resolve().parents[2]


def lines(name):
    with gzip.open(ROOT / "data" / "multi30k" / name, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def read_links(path):
    out = []
    for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
        out.append({tuple(map(int, p.split("-"))) for p in line.split()})
    return out


def grow_diag_final_and(fwd, rev):
    """Koehn et al.'s symmetrisation of (source, target) link sets."""
    union, alignment = fwd | rev, set(fwd & rev)
    neighbours = [(-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)]

    def aligned_src(s):
        return any(a == s for a, _ in alignment)

    def aligned_tgt(t):
        return any(b == t for _, b in alignment)

    added = True
    while added:
        added = False
        for s, t in sorted(alignment):
            for ds, dt in neighbours:
                p = (s + ds, t + dt)
                if p in union and p not in alignment and (not aligned_src(p[0]) or not aligned_tgt(p[1])):
                    alignment.add(p)
                    added = True
    for direction in (fwd, rev):
        for s, t in sorted(direction):
            if not aligned_src(s) and not aligned_tgt(t):
                alignment.add((s, t))
    return alignment


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train_en, train_de = lines("train.en.gz"), lines("train.de.gz")
    test_en, test_de = lines("test_2016_flickr.en.gz"), lines("test_2016_flickr.de.gz")
    # Words are separated by spaces (U+0020) only, as our tokenizers mark word starts: a
    # no-break space inside "Nummer 28" joins, as it does for `--alignment-words`.
    src = [[w for w in s.split(" ") if w] for s in train_en + test_en]
    tgt = [[w for w in t.split(" ") if w] for t in train_de + test_de]
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = pathlib.Path(tmp) / "fwd", pathlib.Path(tmp) / "rev"
        with open(pathlib.Path(tmp) / "src", "w", encoding="utf-8") as s, \
                open(pathlib.Path(tmp) / "tgt", "w", encoding="utf-8") as t:
            # eflomal itself splits on any white space: the joined words hide their no-break spaces.
            s.write("".join(" ".join(w.replace("\u00a0", "_") for w in x) + "\n" for x in src))
            t.write("".join(" ".join(w.replace("\u00a0", "_") for w in x) + "\n" for x in tgt))
        aligner = eflomal.Aligner()
        with open(pathlib.Path(tmp) / "src", encoding="utf-8") as s, open(pathlib.Path(tmp) / "tgt", encoding="utf-8") as t:
            aligner.align(s, t, links_filename_fwd=str(fwd), links_filename_rev=str(rev), quiet=False)
        joined = [grow_diag_final_and(f, r) for f, r in zip(read_links(fwd), read_links(rev))]
    n = len(train_en)
    for name, part in [("train.gdfa", joined[:n]), ("test.gdfa", joined[n:])]:
        (out / name).write_text("".join(" ".join(f"{s}-{t}" for s, t in sorted(a)) + "\n" for a in part),
                                encoding="utf-8")
        print(f"{out / name}: {len(part)} lines, {sum(map(len, part))} links")


if __name__ == "__main__":
    main()
