"""Two of Marian's numerics, checked against Marian itself rather than against the Hugging Face port:
its LayerNorm ε and the GELU it computed before v1.12.3. Both are small effects on a trained model
(ε = 1e-5 instead of Marian's 1e-6 moves the fixtures' sentence scores by about 1e-4, under the
tests' 1e-3), so each is made large first, or read by a Marian that computes it.

    /work/venv/bin/python dev/reference/marian_checks.py [--old-marian DIR]

Writes crates/transformer/tests/fixtures/marian-real/checks.json (read by tests/marian_real.rs):
- `ln_eps`: the tied_all_relu fixture with its first encoder layer's attention LayerNorm gain and
  bias and its FFN biases multiplied by `factor` (1e-3). ReLU is positively homogeneous, so the FFN
  output shrinks by the same factor and the FFN's LayerNorm sees an input whose variance is ~1e-6 of
  the trained model's, where ε = 1e-6 and 1e-5 give far apart outputs. `scores`: Marian's `score`
  (`pymarian`, 1.12.42) of the scaled model on the fixture's pairs.
- `gelu_sigmoid` (with `--old-marian DIR`, a directory holding `marian-scorer` built from Marian
  v1.12.0, the last release before the exact GELU): that Marian's `score` of the unchanged
  tied_all_gelu fixture, which it reads with its own `gelu`, x·σ(1.702x).

Building that Marian (done 2026-11-29 on Debian 12, gcc 12, about 30 minutes on 2 cores): marian-dev
at 65bf82ff ("version 1.12.0") with its submodules sentencepiece at the pinned 8dc9172f and intgemm
at kpu/intgemm be305351 (the pinned 0eda93a9 is in no public mirror; this is upstream's last commit
before it); apt packages cmake, libopenblas-dev, zlib1g-dev, libsqlite3-dev; `-Werror` taken out of
the top CMakeLists.txt and intgemm's, SQLiteCpp linked against the system libsqlite3 (the bundled
sqlite3.c was not in the mirror), sentencepiece's normalization_rule.h taken from the PyPI
sentencepiece 0.1.99 source (also missing); then
    cmake .. -DCMAKE_BUILD_TYPE=Release -DCOMPILE_CUDA=off -DUSE_FBGEMM=off -DCOMPILE_SERVER=off \
             -DUSE_NCCL=off -DUSE_DOXYGEN=off -DUSE_MKL=off -DUSE_SENTENCEPIECE=on
    make -j2 marian_scorer
`marian-scorer --version`: v1.12.0 65bf82ff 2023-02-21 09:56:29 -0800.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "crates/transformer/tests/fixtures/marian-real")
MARIAN = [sys.executable, "-m", "pymarian"]
FACTOR = 1e-3
SCALED = ["encoder_l1_self_Wo_ln_scale", "encoder_l1_self_Wo_ln_bias", "encoder_l1_ffn_b1", "encoder_l1_ffn_b2"]


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return r.stdout, r.stderr


def pairs(work, variant):
    ref = json.load(open(os.path.join(FIXTURES, variant, "reference.json"), encoding="utf-8"))
    src, tgt = os.path.join(work, f"{variant}.en"), os.path.join(work, f"{variant}.de")
    for path, key in ((src, "sources"), (tgt, "targets")):
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(ref[key]) + "\n")
    return src, tgt


def version(marian):
    out, err = run(marian + ["--version"])
    return (out + err).strip().splitlines()[-1]


def score(marian, model, vocab, src, tgt):
    out, _ = run(marian + ["-m", model, "-v", vocab, vocab, "-t", src, tgt, "--cpu-threads", "1",
                           "--mini-batch", "8", "--quiet"])
    return [float(x) for x in out.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-marian", help="a directory with marian-scorer built from Marian v1.12.0")
    a = ap.parse_args()
    out_path = os.path.join(FIXTURES, "checks.json")
    checks = json.load(open(out_path, encoding="utf-8")) if os.path.exists(out_path) else {}
    work = tempfile.mkdtemp(prefix="marian-checks-")

    variant = "tied_all_relu"
    fixture = os.path.join(FIXTURES, variant)
    arrays = dict(np.load(os.path.join(fixture, "model.npz")))
    for name in SCALED:
        arrays[name] = (arrays[name] * np.float32(FACTOR)).astype(np.float32)
    model = os.path.join(work, "scaled.npz")
    np.savez(model, **arrays)
    src, tgt = pairs(work, variant)
    checks["ln_eps"] = dict(variant=variant, factor=FACTOR, scaled=SCALED, marian=version(MARIAN),
                            scores=score(MARIAN + ["score"], model, os.path.join(fixture, "vocab.spm"), src, tgt))

    if a.old_marian:
        variant = "tied_all_gelu"
        fixture = os.path.join(FIXTURES, variant)
        src, tgt = pairs(work, variant)
        scorer = [os.path.join(a.old_marian, "marian-scorer")]
        checks["gelu_sigmoid"] = dict(variant=variant, marian=version(scorer),
                                      scores=score(scorer, os.path.join(fixture, "model.npz"),
                                                   os.path.join(fixture, "vocab.spm"), src, tgt))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(checks, f, indent=1)
    print("written", out_path, "with", ", ".join(checks), file=sys.stderr)


if __name__ == "__main__":
    main()
