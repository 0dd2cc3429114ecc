"""The real Marian decodes a model fine-tuned here and exported with `transformer export marian` as
we do: same 1-best text and n-best scores at beam 4, same per-sentence log-probabilities. With
`--model crates/transformer/tests/fixtures/marian/opus/native` (an OPUS-MT release's layout) the
export has `.yml` vocabularies, and Marian reads the text cut into pieces, as a release's users do.

    cargo build --release
    /work/venv/bin/python dev/reference/marian_export_check.py [--model crates/transformer/tests/fixtures/marian-real/tied_target_swish]

Steps: import the Marian-trained fixture, fine-tune it for --steps updates on Multi30k (train.init),
export the last checkpoint as a native Marian model, then decode test_2016_flickr's first --pairs
sentences with `pymarian decode` and with `transformer translate` (Marian's search in our options:
beam 4, n-best 4, --length-norm marian --alpha 0, --max-len-a 3 --max-len-b 0, --suppress-unk),
and score the references pair by pair with `pymarian score` and `transformer score`. Prints what differs and
exits 1 if anything does beyond 1e-3 (hypotheses at the length limit are set aside, as in
tests/marian_real.rs: Marian scores them without an EOS).
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "target", "release", "transformer")
MARIAN = [sys.executable, "-m", "pymarian"]


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-2000:] + r.stderr[-4000:])
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return r.stdout


def nbest(text):
    out = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|||")]
        out.setdefault(int(parts[0]), []).append((parts[1], float(parts[-1])))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "crates/transformer/tests/fixtures/marian-real/tied_target_swish"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--pairs", type=int, default=100)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="marian-export-check-")
    data = os.path.join(ROOT, "data", "multi30k")
    src, ref = os.path.join(tmp, "test.en"), os.path.join(tmp, "test.de")
    for name, path in (("test_2016_flickr.en.gz", src), ("test_2016_flickr.de.gz", ref)):
        with gzip.open(os.path.join(data, name), "rt", encoding="utf-8") as f:
            lines = [l.rstrip("\n") for l in f][: a.pairs]
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    ours = os.path.join(tmp, "ours")
    sh([BIN, "import", "marian", a.model, "--output", ours])
    cfg = os.path.join(tmp, "ft.toml")
    with open(cfg, "w") as f:
        f.write(f"""[model]
dropout = 0.1
[data]
train_src = "{data}/train.en.gz"
train_tgt = "{data}/train.de.gz"
valid_src = "{data}/val.en.gz"
valid_tgt = "{data}/val.de.gz"
bpe = "{ours}/tokenizer.json"
[train]
output_dir = "{tmp}/run"
init = "{ours}/model.safetensors"
max_src_tokens = 2048
max_tgt_tokens = 2048
warmup = 100
lr_scale = 0.3
max_steps = {a.steps}
checkpoint_steps = {a.steps}
""")
    sh([BIN, "train", "--config", cfg])
    ckpt = os.path.join(tmp, "run", f"ckpt-{a.steps:08d}.safetensors")
    exported = os.path.join(tmp, "exported")
    sh([BIN, "export", "marian", ckpt, "--tokenizer", f"{ours}/tokenizer.json", "--output", exported])
    m = os.path.join(exported, "model.npz")
    import sentencepiece as spm

    # The vocabularies decoder.yml names: .spm files (Marian cuts the text itself) or .yml lists
    # (an OPUS-MT release: Marian reads pieces, cut here with source.spm and target.spm).
    with open(os.path.join(exported, "decoder.yml"), encoding="utf-8") as f:
        listed = f.read().split("vocabs:\n")[1].splitlines()[:2]
    vocabs = [os.path.join(exported, l.strip()[2:]) for l in listed]
    yml = vocabs[0].endswith(".yml")
    sp_src = spm.SentencePieceProcessor(model_file=os.path.join(exported, "source.spm") if yml else vocabs[0])
    sp_tgt = spm.SentencePieceProcessor(model_file=os.path.join(exported, "target.spm") if yml else vocabs[1])
    m_src, m_ref = src, ref
    if yml:
        m_src, m_ref = os.path.join(tmp, "test.en.pieces"), os.path.join(tmp, "test.de.pieces")
        for text, pieces, sp in ((src, m_src, sp_src), (ref, m_ref, sp_tgt)):
            with open(text, encoding="utf-8") as f, open(pieces, "w", encoding="utf-8") as o:
                for l in f:
                    o.write(" ".join(sp.encode(l.rstrip("\n"), out_type=str)) + "\n")
    decode = MARIAN + ["decode", "-m", m, "-v", *vocabs, "-i", m_src, "--beam-size", "4", "--n-best", "--normalize", "0",
                       "--cpu-threads", "2", "--mini-batch", "1", "--maxi-batch", "1", "--quiet"]
    if yml:
        marian_pieces = nbest(sh(decode))
        marian_nb = {i: [(sp_tgt.decode(t.split()), s) for t, s in hyps] for i, hyps in marian_pieces.items()}
    else:
        marian_nb = nbest(sh(decode))
        marian_pieces = nbest(sh(decode + ["--no-spm-decode"]))
    our_nb = nbest(sh([BIN, "translate", "--checkpoint", ckpt, "--tokenizer", f"{ours}/tokenizer.json", "--input", src,
                       "--beam", "4", "--nbest", "4", "--alpha", "0", "--length-norm", "marian", "--max-len-a", "3",
                       "--max-len-b", "0", "--suppress-unk"]))
    marian_scores = [float(x) for x in sh(MARIAN + ["score", "-m", m, "-v", *vocabs, "-t", m_src, m_ref,
                                                      "--cpu-threads", "2", "--quiet"]).split()]
    with open(src, encoding="utf-8") as f:
        limits = [3 * (len(sp_src.encode(l.rstrip("\n"))) + 1) for l in f]
    bad, compared, best_same, best_limit, at_limit = 0, 0, 0, 0, 0
    for i in range(a.pairs):
        mb, ob = marian_nb.get(i, []), our_nb.get(i, [])
        if mb and ob and mb[0][0] == ob[0][0]:
            best_same += 1
        elif (marian_pieces.get(i) and len(marian_pieces[i][0][0].split()) >= limits[i]) or (
            ob and len(sp_tgt.encode(ob[0][0])) >= limits[i]
        ):
            # A 1-best at the length limit scores without EOS in Marian, with it here, and ranks
            # differently: named, not counted against.
            best_limit += 1
        else:
            print(f"sentence {i}: 1-best {ob[:1]} vs Marian {mb[:1]}")
        for (mt, ms), (ot, os_), (pieces, _) in zip(mb, ob, marian_pieces.get(i, [])):
            if len(pieces.split()) >= limits[i]:
                at_limit += 1  # Marian scores these without an EOS, we with one
            elif mt == ot:
                compared += 1
                if abs(ms - os_) > 1e-3:
                    bad += 1
                    print(f"sentence {i}: score {os_} vs Marian {ms}: {ot}")
    print(
        f"1-best equal on {best_same}/{a.pairs} sentences ({best_limit} others whose 1-best, Marian's or ours, is at the length limit); {compared} equal hypotheses, {bad} with scores apart "
        f"(and {at_limit} at the length limit, set aside)"
    )
    # The references' log-probability, pair by pair: `transformer score` against Marian's `score`.
    ours_scores = [float(x) for x in sh([BIN, "score", "--checkpoint", ckpt, "--tokenizer", f"{ours}/tokenizer.json",
                                         "--src", src, "--ref", ref]).split()]
    apart = [i for i, (o, m) in enumerate(zip(ours_scores, marian_scores)) if abs(o - m) > 1e-3]
    worst = max(abs(o - m) for o, m in zip(ours_scores, marian_scores))
    print(f"references' log P, pair by pair: {len(ours_scores)} scored, {len(apart)} apart by more than 1e-3 "
          f"(largest difference {worst:.2e}); sums: ours {sum(ours_scores):.3f}, Marian {sum(marian_scores):.3f}")
    ok = (best_same + best_limit == a.pairs and bad == 0 and len(ours_scores) == len(marian_scores) == a.pairs
          and not apart)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
