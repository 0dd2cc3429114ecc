#!/usr/bin/env python3
"""`export ct2` and `import ct2` against the real CTranslate2 (the Python package), and the
fixtures the tests read offline (crates/transformer/tests/fixtures/ct2/).

    python dev/ct2/check.py [--bin target/release/transformer] [--sentences 100] [--model QUICKSTART_DIR]

--model runs the export half only, on a `transformer quickstart` output directory (its
model.safetensors and run/bpe.json) instead of the tests' fixture, and writes no fixtures.

Export: the tests' small Multi30k model (fixtures/m30k-small) goes out with `export ct2` at float32
and int8; CTranslate2's own converter (its model-spec API, bench/decode/to_ctranslate2.py) writes
the same model; the two `model.bin`s are compared byte for byte, and CTranslate2 decodes ours
beside our `translate` (beam 4, length_penalty 1, 256 tokens) on the first N test sentences.

Import: the real Marian's models (fixtures/marian-real) go through CTranslate2's own Marian
converter (dev/ct2/convert_marian.py) at float32, int8 and float16; `import ct2` reads each
directory, and CTranslate2 and ours decode and score (CTranslate2's 1-best, teacher-forced) the same
sentences. The same for the OPUS-MT-shaped Hugging Face fixture through `ct2-transformers-converter`.
The converted directories are copied into the fixtures with CTranslate2's outputs.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import ctranslate2
import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "crates/transformer/tests/fixtures"
HERE = Path(__file__).resolve().parent


def run(*args, stdin=None):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, input=stdin).stdout


def ours_translate(b, ckpt, tok, src: Path, precision, beam):
    out = run(b, "translate", "--checkpoint", ckpt, "--tokenizer", tok, "--input", src, "--beam", beam, "--alpha", 1,
              "--length-norm", "marian", "--patience", 1, "--max-len-a", 0, "--max-len-b", 256, "--min-len", 1, "--end-at-limit",
              "--precision", precision,
              "--threads", 1)
    return out.splitlines()


def ours_score(b, ckpt, tok, src: Path, hyps, precision):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("".join(h + "\n" for h in hyps))
    out = run(b, "score", "--checkpoint", ckpt, "--tokenizer", tok, "--src", src, "--ref", f.name,
              "--precision", precision, "--threads", 1)
    Path(f.name).unlink()
    return [float(x) for x in out.split()]


def ct2_decode(model_dir, pieces, compute_type, beam):
    t = ctranslate2.Translator(str(model_dir), device="cpu", compute_type=compute_type, intra_threads=1)
    res = t.translate_batch(pieces, beam_size=beam, length_penalty=1, max_decoding_length=256, max_batch_size=32)
    return [r.hypotheses[0] for r in res]


def ct2_score(model_dir, pieces, targets, compute_type):
    t = ctranslate2.Translator(str(model_dir), device="cpu", compute_type=compute_type, intra_threads=1)
    return [float(sum(s.log_probs)) for s in t.score_batch(pieces, targets, max_batch_size=32)]


MODES = [("greedy", 1), ("beam4", 4)]


def sha(p: Path):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release/transformer")
    ap.add_argument("--sentences", type=int, default=100)
    ap.add_argument("--model", type=Path, help="a quickstart output directory: the export half only, nothing written")
    a = ap.parse_args()
    b = a.bin
    n = a.sentences
    lines = gzip.open(ROOT / "data/multi30k/test_2016_flickr.en.gz", "rt").read().splitlines()[:n]
    work = Path(tempfile.mkdtemp(prefix="ct2-check-"))
    src = work / "src.txt"
    src.write_text("".join(l + "\n" for l in lines))
    out_fix = FIX / "ct2"
    out_fix.mkdir(exist_ok=True)
    report = {"ctranslate2": ctranslate2.__version__, "sentences": n, "export": {}, "import": {}}

    # Export: ours against CTranslate2's converter, then CTranslate2 decoding ours.
    if a.model:
        ckpt, bpe = a.model / "model.safetensors", a.model / "run/bpe.json"
    else:
        ckpt, bpe = FIX / "m30k-small/model.safetensors", FIX / "m30k-small/bpe.json"
    pieces = [l.split() for l in run(b, "bpe", "apply", "--model", bpe, "--input", src).splitlines()]
    for q, precision in [("float32", "f32"), ("int8", "int8")]:
        ours_dir, conv_dir = work / f"ours-{q}", work / f"conv-{q}"
        run(b, "export", "ct2", ckpt, "--tokenizer", bpe, "--quantization", q, "--output", ours_dir)
        run(sys.executable, ROOT / "bench/decode/to_ctranslate2.py", "--checkpoint", ckpt, "--bpe", bpe,
            "--out", conv_dir, "--quantization", q)
        entry = report["export"][q] = {
            "model_bin_sha256": sha(ours_dir / "model.bin"),
            "converter_model_bin_sha256": sha(conv_dir / "model.bin"),
            "identical_to_converter": (ours_dir / "model.bin").read_bytes() == (conv_dir / "model.bin").read_bytes(),
        }
        for mode, beam in MODES:
            hyps = ct2_decode(ours_dir, pieces, q, beam)
            text = run(b, "bpe", "decode", "--model", bpe, stdin="".join(" ".join(h) + "\n" for h in hyps)).splitlines()
            mine = ours_translate(b, ckpt, bpe, src, precision, beam)
            same = sum(x == y for x, y in zip(text, mine))
            entry[mode] = {"same_1best": same, "ct2_1best": text}
            print(f"export {q} {mode}: same 1-best as ours {same}/{n}")
            if q == "int8":
                # Ours on the same int8 codes: the export read back (CTranslate2 looks embeddings
                # up from int8 codes, our --precision int8 from float32).
                back = work / "ours-int8-back"
                if not back.exists():
                    run(b, "import", "ct2", ours_dir, "--output", back)
                again = ours_translate(b, back / "model.safetensors", back / "tokenizer.json", src, precision, beam)
                same_back = sum(x == y for x, y in zip(text, again))
                print(f"export {q} {mode}: same 1-best as ours on the int8 model.bin read back {same_back}/{n}")
        print(f"export {q}: model.bin identical to CTranslate2's converter: {entry['identical_to_converter']}")
    if a.model:
        shutil.rmtree(work)
        return

    # Import: CTranslate2's Marian converter, then `import ct2`.
    for variant, vocabs in [("tied_all_relu", ["vocab.spm"]), ("tied_target_swish", ["vocab.en.spm", "vocab.de.spm"])]:
        mdir = FIX / "marian-real" / variant
        sp_src = spm.SentencePieceProcessor(model_file=str(mdir / vocabs[0]))
        sp_tgt = spm.SentencePieceProcessor(model_file=str(mdir / vocabs[-1]))
        src_pieces = [sp_src.encode(l, out_type=str) for l in lines]
        for q, precision in [("float32", "f32"), ("int8", "int8"), ("float16", "f32")]:
            name = f"{variant}-{q}"
            cdir = work / name
            run(sys.executable, HERE / "convert_marian.py", "--model", mdir / "model.npz", "--vocab",
                *[mdir / v for v in vocabs], "--out", cdir, "--quantization", q)
            imp = work / f"imported-{name}"
            run(b, "import", "ct2", cdir, "--spm", *[mdir / v for v in vocabs], "--output", imp)
            ck, tk = imp / "model.safetensors", imp / "tokenizer.json"
            entry = report["import"][name] = {}
            for mode, beam in MODES:
                hyps = ct2_decode(cdir, src_pieces, "default", beam)
                text = [sp_tgt.decode_pieces(h) for h in hyps]
                mine = ours_translate(b, ck, tk, src, precision, beam)
                same = sum(x == y for x, y in zip(text, mine))
                entry[mode] = {"same_1best": same, "ct2_1best": text}
                print(f"import {name} {mode}: same 1-best {same}/{n}")
            # Scores of the greedy 1-best as both read it: its text cut into pieces again (a
            # search can emit a segmentation SentencePiece would not make).
            text = entry["greedy"]["ct2_1best"]
            scores = ct2_score(cdir, src_pieces, [sp_tgt.encode(t, out_type=str) for t in text], "default")
            mine_scores = ours_score(b, ck, tk, src, text, precision)
            worst = max(abs(x - y) for x, y in zip(scores, mine_scores))
            entry["ct2_scores"] = scores
            entry["max_score_difference"] = worst
            print(f"import {name}: largest |score difference| {worst:.2e}")
            keep = out_fix / name
            if keep.exists():
                shutil.rmtree(keep)
            shutil.copytree(cdir, keep)
    # Import: an OPUS-MT-shaped Hugging Face model through `ct2-transformers-converter --copy_files`
    # (its SentencePiece models in the directory, as CTranslate2's OPUS-MT instructions leave them;
    # the sources given with the </s> the Hugging Face tokenizer adds).
    hf = FIX / "marian/opus/hf"
    sp_src = spm.SentencePieceProcessor(model_file=str(hf / "source.spm"))
    sp_tgt = spm.SentencePieceProcessor(model_file=str(hf / "target.spm"))
    src_pieces = [sp_src.encode(l, out_type=str) + ["</s>"] for l in lines]
    for q, precision in [("float32", "f32"), ("int8", "int8")]:
        name = f"opus-hf-{q}"
        cdir = work / name
        run(Path(sys.executable).parent / "ct2-transformers-converter", "--model", hf, "--output_dir", cdir,
            "--copy_files", "source.spm", "target.spm", "--quantization", q)
        imp = work / f"imported-{name}"
        run(b, "import", "ct2", cdir, "--output", imp)
        ck, tk = imp / "model.safetensors", imp / "tokenizer.json"
        entry = report["import"][name] = {}
        for mode, beam in MODES:
            hyps = ct2_decode(cdir, src_pieces, "default", beam)
            text = [sp_tgt.decode_pieces(h) for h in hyps]
            mine = ours_translate(b, ck, tk, src, precision, beam)
            same = sum(x == y for x, y in zip(text, mine))
            entry[mode] = {"same_1best": same, "ct2_1best": text}
            print(f"import {name} {mode}: same 1-best {same}/{n}")
        text = entry["greedy"]["ct2_1best"]
        scores = ct2_score(cdir, src_pieces, [sp_tgt.encode(t, out_type=str) for t in text], "default")
        mine_scores = ours_score(b, ck, tk, src, text, precision)
        entry["ct2_scores"] = scores
        entry["max_score_difference"] = max(abs(x - y) for x, y in zip(scores, mine_scores))
        print(f"import {name}: largest |score difference| {entry['max_score_difference']:.2e}")
        keep = out_fix / name
        if keep.exists():
            shutil.rmtree(keep)
        # The SentencePiece models are the hf fixture's own: the test puts them back.
        shutil.copytree(cdir, keep, ignore=shutil.ignore_patterns("*.spm"))
    (out_fix / "checks.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    shutil.rmtree(work)
    print(f"wrote {out_fix / 'checks.json'}")


if __name__ == "__main__":
    main()
