#!/usr/bin/env python3
"""A base-size Marian model for the decoding bench (`run.py --marian DIR`): the OPUS-MT shape
(Transformer-base, 6+6 layers, d_model 512, 8 heads, FFN 2048, swish, a final logits bias, one
shared SentencePiece vocabulary), started from random weights with `transformers` and trained for a
few minutes on the embedded Multi30k En→De data so that its outputs stop on their own (an untrained
model repeats one token to the length limit, which would time the limit, not the decoder). Saved as
a Hugging Face directory (config.json, model.safetensors, source.spm, target.spm, vocab.json,
tokenizer_config.json): what `transformer import marian` and CTranslate2's converter both read.

    /work/venv/bin/python bench/decode/make_marian.py --out /tmp/marian-base [--minutes 12] [--threads 2]
"""

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import sentencepiece as spm
import torch
from transformers import MarianConfig, MarianMTModel, MarianTokenizer

ROOT = Path(__file__).resolve().parents[2]


def lines(name):
    with gzip.open(ROOT / "data/multi30k" / name, "rt", encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=12)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--vocab", type=int, default=6000, help="pieces of each SentencePiece model")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    en, de = lines("train.en.gz"), lines("train.de.gz")
    for side, text in (("source", en), ("target", de)):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
            f.write("\n".join(text) + "\n")
        spm.SentencePieceTrainer.train(input=f.name, model_prefix=str(out / side), vocab_size=args.vocab,
                                       model_type="unigram", bos_id=-1, eos_id=0, unk_id=1, pad_id=-1,
                                       minloglevel=2)
        os.unlink(f.name)
        os.replace(out / f"{side}.model", out / f"{side}.spm")
        os.unlink(out / f"{side}.vocab")
    vocab = {"</s>": 0, "<unk>": 1}
    for side in ("source", "target"):
        sp = spm.SentencePieceProcessor(model_file=str(out / f"{side}.spm"))
        for i in range(sp.get_piece_size()):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    pad = vocab["<pad>"]
    # Helsinki-NLP/opus-mt-en-de's config.json values, at its size.
    cfg = MarianConfig(vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=512, encoder_layers=6,
                       decoder_layers=6, encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                       decoder_ffn_dim=2048, activation_function="swish", scale_embedding=True,
                       max_position_embeddings=512, pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
                       forced_eos_token_id=0, bad_words_ids=[[pad]], dropout=0.1, attention_dropout=0.0,
                       activation_dropout=0.0, share_encoder_decoder_embeddings=True, num_beams=4, max_length=512)
    model = MarianMTModel(cfg)
    tok = MarianTokenizer(str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"))
    opt = torch.optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9)
    pairs = list(zip(en, de))
    g = torch.Generator().manual_seed(1)
    model.train()
    t0, step = time.time(), 0
    while time.time() - t0 < args.minutes * 60:
        idx = torch.randint(0, len(pairs), (48,), generator=g).tolist()
        batch = tok([pairs[i][0] for i in idx], text_target=[pairs[i][1] for i in idx], padding=True,
                    truncation=True, max_length=64, return_tensors="pt")
        batch["labels"][batch["labels"] == pad] = -100
        loss = model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 20 == 0:
            print(f"step {step}, loss {loss.item():.3f}, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    model.eval()
    with torch.no_grad():
        model.model.shared.weight[pad].zero_()  # as the converter leaves Marian's (absent) pad row
        model.final_logits_bias.normal_(0.0, 0.1)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    print(f"{out}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {step} updates")


if __name__ == "__main__":
    main()
