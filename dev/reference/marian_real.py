"""Fixtures written by the real Marian (`pymarian`, the official binding, which holds the whole
`marian` binary): small models trained on Multi30k en→de with Marian's own trainer and its own
SentencePiece vocabularies, with what Marian's `score` and `decode` say of them.

    /work/venv/bin/pip install pymarian      # 604 MB; dev only, never the product or CI
    /work/venv/bin/python dev/reference/marian_real.py [--out crates/transformer/tests/fixtures/marian-real]

Every variant gets a directory holding what Marian wrote, as it wrote it (the model is trained in a
scratch directory, so `model.npz.decoder.yml` names paths of that machine, as real ones do):
- model.npz, model.npz.decoder.yml, and the SentencePiece vocabularies (`vocab.spm`, or
  `vocab.en.spm` and `vocab.de.spm`);
- reference.json:
  - `marian`: the version and every command line used;
  - `sources`, `targets`: the pairs scored and decoded (test_2016_flickr's first N);
  - `source_pieces`, `source_ids`: the sources as SentencePiece (the library Marian links) cuts them;
  - `scores`: Marian `score`'s sum of log-probabilities of each pair (natural log, `</s>` included);
  - `nbest`: Marian `decode --n-best --beam-size 4 --normalize 0` per source: [text, score] best first;
  - `nbest_normalize1`: the same at `--normalize 1` (score / length);
  - `pieces`: the 1-best output with `--no-spm-decode` (SentencePiece pieces, space separated).

Variants (2 layers each side, d_model 32, FFN 64, 4 heads, post-norm, Marian's defaults otherwise):
- tied_all_relu:     one shared vocabulary, --tied-embeddings-all, ReLU
- tied_target_swish: separate vocabularies, --tied-embeddings (target side only), swish
- tied_all_gelu:     one shared vocabulary, --tied-embeddings-all, Marian's `gelu`
- untied:            one shared vocabulary, no tying at all (the importer must refuse it)
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MULTI30K = os.path.join(ROOT, "data", "multi30k")
MARIAN = [sys.executable, "-m", "pymarian"]
THREADS = "2"

COMMON = [
    "--type", "transformer", "--dim-emb", "32", "--transformer-dim-ffn", "64",
    "--transformer-heads", "4", "--enc-depth", "2", "--dec-depth", "2",
    "--mini-batch", "64", "--maxi-batch", "100", "--max-length", "100",
    "--learn-rate", "0.003", "--lr-warmup", "200", "--lr-decay-inv-sqrt", "200",
    "--optimizer-params", "0.9", "0.98", "1e-09", "--label-smoothing", "0.1",
    "--transformer-dropout", "0.1", "--cpu-threads", THREADS, "--seed", "1234",
    "--disp-freq", "200", "--save-freq", "100000u", "--valid-freq", "100000u",
    "--overwrite", "--shuffle-in-ram", "--sync-sgd",
]

VARIANTS = {
    "tied_all_relu": dict(shared=True, tie=["--tied-embeddings-all"], act="relu", updates=1200),
    "tied_target_swish": dict(shared=False, tie=["--tied-embeddings"], act="swish", updates=1200),
    "tied_all_gelu": dict(shared=True, tie=["--tied-embeddings-all"], act="gelu", updates=1200),
    "untied": dict(shared=True, tie=[], act="relu", updates=20),
}


def lines(name, n=None):
    with gzip.open(os.path.join(MULTI30K, name), "rt", encoding="utf-8") as f:
        out = [l.rstrip("\n") for l in f]
    return out[:n] if n else out


def run(cmd, log, **kw):
    log.append(" ".join(cmd[2:]))
    print("+", " ".join(cmd[2:]), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        raise SystemExit(f"marian failed: {' '.join(cmd)}")
    return r.stdout


def version():
    r = subprocess.run(MARIAN + ["--version"], capture_output=True, text=True)
    return (r.stdout + r.stderr).strip().splitlines()[-1]


# Where the fixtures' decoder.yml says the model was trained (see the end of main).
TRAINED_AT = "/home/marian-trainer/run"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "crates/transformer/tests/fixtures/marian-real"))
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="marian-real-")
    data = os.path.join(scratch, "data")
    os.makedirs(data)
    for lang in ("en", "de"):
        with open(os.path.join(data, f"train.{lang}"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines(f"train.{lang}.gz")) + "\n")
    sources, targets = lines("test_2016_flickr.en.gz", a.pairs), lines("test_2016_flickr.de.gz", a.pairs)
    src_file, tgt_file = os.path.join(data, "test.en"), os.path.join(data, "test.de")
    for path, text in ((src_file, sources), (tgt_file, targets)):
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(text) + "\n")
    ver = version()
    shared_vocab = None
    for name, v in VARIANTS.items():
        if a.only and name not in a.only:
            continue
        log = []
        work = os.path.join(scratch, name)
        os.makedirs(work)
        model = os.path.join(work, "model.npz")
        if v["shared"]:
            vocabs = [os.path.join(work, "vocab.spm")] * 2
            if shared_vocab:  # one shared SentencePiece model for every shared-vocabulary variant
                shutil.copy(shared_vocab, vocabs[0])
        else:
            vocabs = [os.path.join(work, "vocab.en.spm"), os.path.join(work, "vocab.de.spm")]
        train = MARIAN + ["train", "--model", model, "--train-sets", os.path.join(data, "train.en"),
                          os.path.join(data, "train.de"), "--vocabs", *vocabs, "--dim-vocabs", "1000", "1000",
                          "--transformer-ffn-activation", v["act"], "--after", f"{v['updates']}u",
                          *v["tie"], *COMMON]
        run(train, log)
        if v["shared"] and not shared_vocab:
            shared_vocab = vocabs[0]
        ref = dict(marian=dict(version=ver, commands=log), sources=sources, targets=targets)
        sp = spm.SentencePieceProcessor(model_file=vocabs[0])
        ref["source_pieces"] = [sp.encode(s, out_type=str) for s in sources]
        ref["source_ids"] = [sp.encode(s) for s in sources]
        if name != "untied":
            vs = ["-v", *vocabs]
            score = run(MARIAN + ["score", "-m", model, *vs, "-t", src_file, tgt_file, "--cpu-threads", THREADS,
                                  "--mini-batch", "8", "--quiet"], log)
            ref["scores"] = [float(x) for x in score.split()]
            for key, norm in (("nbest", "0"), ("nbest_normalize1", "1")):
                out = run(MARIAN + ["decode", "-m", model, *vs, "-i", src_file, "--beam-size", "4", "--n-best",
                                    "--normalize", norm, "--cpu-threads", THREADS, "--mini-batch", "1",
                                    "--maxi-batch", "1", "--quiet"], log)
                nb = [[] for _ in sources]
                for line in out.splitlines():
                    i, text, _feats, total = [p.strip() for p in line.split("|||")]
                    nb[int(i)].append([text, float(total)])
                ref[key] = nb
            out = run(MARIAN + ["decode", "-m", model, *vs, "-i", src_file, "--beam-size", "4", "--normalize", "0",
                                "--no-spm-decode", "--cpu-threads", THREADS, "--quiet"], log)
            ref["pieces"] = out.splitlines()
        dest = os.path.join(a.out, name)
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        keep = ["model.npz", "model.npz.decoder.yml"] + sorted({os.path.basename(p) for p in vocabs})
        for f in keep:
            shutil.copy(os.path.join(work, f), os.path.join(dest, f))
        # Marian's paths, absolute as it writes them, but of a training machine no test machine
        # has: under the scratch directory a shared /tmp would let anyone decide what a test reads.
        def placed(text):
            return text.replace(scratch, TRAINED_AT)
        decoder = os.path.join(dest, "model.npz.decoder.yml")
        with open(decoder, encoding="utf-8") as f:
            text = placed(f.read())
        with open(decoder, "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.join(dest, "reference.json"), "w", encoding="utf-8") as f:
            f.write(placed(json.dumps(ref, ensure_ascii=False, indent=1)))
        print(name, "written:", ", ".join(keep), file=sys.stderr)
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
