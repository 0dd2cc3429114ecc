#!/usr/bin/env python3
"""Convert one of our checkpoints to a CTranslate2 model directory, through CTranslate2's Python
model-spec API (a post-norm TransformerSpec with our weights, our sinusoid table and our
vocabulary), so both decoders run the same weights.

    python bench/decode/to_ctranslate2.py --checkpoint CKPT --bpe BPE.json --out DIR

The vocabulary tokens are the BPE pieces by id ("<pad>", "<s>", "</s>", "<unk>", then the
byte-level pieces), so CTranslate2 consumes and produces our token ids one-to-one.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from safetensors import safe_open

import ctranslate2
from ctranslate2.specs import common_spec, transformer_spec


def sinusoids(n, d):
    """Our table: PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(…) (interleaved)."""
    pos = np.arange(n, dtype=np.float64)[:, None]
    inv = np.power(10000.0, -np.arange(0, d, 2, dtype=np.float64) / d)
    pe = np.zeros((n, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(pos * inv), np.cos(pos * inv)
    return pe.astype(np.float32)


def vocabulary(bpe_path: Path, size: int):
    tok = json.loads(bpe_path.read_text())
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    for a in tok["added_tokens"]:
        by_id[a["id"]] = a["content"]
    missing = [i for i in range(size) if i not in by_id]
    if missing:
        raise SystemExit(f"{bpe_path}: no token for ids {missing[:5]}…")
    return [by_id[i] for i in range(size)]


class OurConverter(ctranslate2.converters.Converter):
    def __init__(self, checkpoint: Path, bpe: Path):
        self.checkpoint, self.bpe = checkpoint, bpe

    def _load(self):
        with safe_open(str(self.checkpoint), "np") as f:
            meta = f.metadata()
            w = {k: f.get_tensor(k) for k in f.keys()}
        c = json.loads(meta["config"])
        if c["positions"] != "sinusoidal":
            raise SystemExit("only sinusoidal positions are converted")
        n = c["n_layers"]
        spec = transformer_spec.TransformerSpec.from_config(
            (n, n), c["n_heads"], pre_norm=False, activation=common_spec.Activation.RELU)
        spec.config.layer_norm_epsilon = c["layer_norm_eps"]
        emb = w["embed.weight"]
        pe = sinusoids(c["max_positions"], c["d_model"])

        def linear(spec_lin, prefix, names):
            spec_lin.weight = np.concatenate([w[f"{prefix}.w_{x}"] for x in names])
            spec_lin.bias = np.concatenate([w[f"{prefix}.b_{x}"] for x in names])

        def norm(spec_ln, prefix):
            spec_ln.gamma, spec_ln.beta = w[f"{prefix}.gamma"], w[f"{prefix}.beta"]

        def ffn(spec_ffn, prefix):
            spec_ffn.linear_0.weight, spec_ffn.linear_0.bias = w[f"{prefix}.ffn.w_1"], w[f"{prefix}.ffn.b_1"]
            spec_ffn.linear_1.weight, spec_ffn.linear_1.bias = w[f"{prefix}.ffn.w_2"], w[f"{prefix}.ffn.b_2"]
            norm(spec_ffn.layer_norm, f"{prefix}.ffn_norm")

        for side in (spec.encoder, spec.decoder):
            embs = side.embeddings if isinstance(side.embeddings, list) else [side.embeddings]
            for e in embs:
                e.weight = emb
            side.scale_embeddings = True  # ×√d_model
            side.position_encodings.encodings = pe
        for i, layer in enumerate(spec.encoder.layer):
            p = f"encoder.layers.{i}"
            linear(layer.self_attention.linear[0], f"{p}.self_attn", "qkv")
            linear(layer.self_attention.linear[1], f"{p}.self_attn", "o")
            norm(layer.self_attention.layer_norm, f"{p}.self_attn_norm")
            ffn(layer.ffn, p)
        for i, layer in enumerate(spec.decoder.layer):
            p = f"decoder.layers.{i}"
            linear(layer.self_attention.linear[0], f"{p}.self_attn", "qkv")
            linear(layer.self_attention.linear[1], f"{p}.self_attn", "o")
            norm(layer.self_attention.layer_norm, f"{p}.self_attn_norm")
            linear(layer.attention.linear[0], f"{p}.cross_attn", "q")
            linear(layer.attention.linear[1], f"{p}.cross_attn", "kv")
            linear(layer.attention.linear[2], f"{p}.cross_attn", "o")
            norm(layer.attention.layer_norm, f"{p}.cross_attn_norm")
            ffn(layer.ffn, p)
        spec.decoder.projection.weight = emb  # tied (§3.4)
        spec.decoder.projection.bias = np.zeros(emb.shape[0], dtype=np.float32)
        vocab = vocabulary(self.bpe, c["vocab_size"])
        spec.register_source_vocabulary(vocab)
        spec.register_target_vocabulary(vocab)
        spec.config.decoder_start_token = "<s>"
        spec.config.unk_token = "<unk>"
        spec.config.bos_token = "<s>"
        spec.config.eos_token = "</s>"
        return spec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--bpe", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quantization", default=None, help="CTranslate2's: int8, float16, ... (default: as stored)")
    a = ap.parse_args()
    OurConverter(a.checkpoint, a.bpe).convert(str(a.out), quantization=a.quantization, force=True)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
