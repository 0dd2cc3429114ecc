#!/usr/bin/env python3
"""Convert a native Marian model with CTranslate2's own converter (`ct2-marian-converter`'s
MarianConverter), for the `import ct2` fixtures.

    python dev/ct2/convert_marian.py --model model.npz --vocab SRC.spm [TGT.spm] --out DIR \
        --quantization float32|int8|float16

Two things are done before the converter runs, each because the converter cannot read what the
real Marian (v1.12) writes: SentencePiece vocabularies (`*.spm`) become Marian's `.yml` piece lists
(the converter reads only those), and the `special:model.yml` entry loses the NUL padding after
its first NUL (PyYAML refuses a NUL; the converter strips one byte only). The weights go through
unchanged.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import sentencepiece as spm
from ctranslate2.converters import MarianConverter


def spm_to_yml(spm_path: Path, out: Path) -> Path:
    sp = spm.SentencePieceProcessor(model_file=str(spm_path))
    with out.open("w", encoding="utf-8") as f:
        for i in range(sp.get_piece_size()):
            f.write(f"{json.dumps(sp.id_to_piece(i), ensure_ascii=False)}: {i}\n")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--vocab", type=Path, nargs="+", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quantization", default="float32")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        arrays = dict(np.load(a.model))
        yml = arrays["special:model.yml"].tobytes()
        arrays["special:model.yml"] = np.frombuffer(yml.split(b"\0")[0] + b"\0", dtype=np.int8)
        npz = tmp / "model.npz"
        np.savez(npz, **arrays)
        vocabs = [spm_to_yml(v, tmp / f"vocab{i}.yml") if v.suffix == ".spm" else v for i, v in enumerate(a.vocab)]
        if len(vocabs) == 1:
            vocabs *= 2
        MarianConverter(str(npz), [str(v) for v in vocabs]).convert(
            str(a.out), quantization=a.quantization, force=True)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
