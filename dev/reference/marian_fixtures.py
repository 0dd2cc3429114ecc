"""Fixtures for `transformer import marian`: small random-weight Marian models, built with the
`transformers` package from a real OPUS-MT config's values (dimensions shrunk), saved as a Hugging
Face directory (model.safetensors and pytorch_model.bin) and as a native Marian model (model.npz,
decoder.yml, vocab.yml), with the reference outputs the Rust tests compare against.

    /work/venv/bin/python dev/reference/marian_fixtures.py [--out crates/transformer/tests/fixtures/marian]

Every variant gets its own directory:
- hf/       config.json, model.safetensors, pytorch_model.bin, source.spm, target.spm, vocab.json
            (and target_vocab.json with separate vocabularies), tokenizer_config.json
- native/   model.npz (with its special:model.yml), decoder.yml, vocab.yml (or vocab.src.yml and
            vocab.trg.yml), source.spm, target.spm
- reference.safetensors   encoder output and decoder logits of the first pairs (float32)
- reference.json          sources and targets, their ids (MarianTokenizer), each pair's mean NLL
                          (the `transformers` loss), greedy `generate` ids and text

The models start random and get a few hundred updates on Multi30k (so that their outputs vary and
stop); their translations are still poor. The numbers come from float64 runs of the same
model (so the comparison measures our float32 error alone).
"""

import argparse
import gzip
import io
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch
from safetensors.torch import save_file
from transformers import MarianConfig, MarianMTModel, MarianTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MULTI30K = os.path.join(ROOT, "data", "multi30k")

# The values of Helsinki-NLP/opus-mt-en-de's config.json, dimensions shrunk (d_model 512 → 32,
# d_ff 2048 → 64, 8 heads → 4, 6 layers → 2, 512 positions kept).
OPUS_MT = dict(
    activation_dropout=0.0,
    activation_function="swish",
    attention_dropout=0.0,
    dropout=0.1,
    init_std=0.02,
    max_position_embeddings=512,
    scale_embedding=True,
    static_position_embeddings=True,
    forced_eos_token_id=0,
    eos_token_id=0,
    num_beams=4,
    max_length=512,
)

VARIANTS = {
    # The OPUS-MT shape: shared vocabulary, swish, a final logits bias.
    "opus": dict(activation="swish", separate=False, bias=True, dims=(32, 64, 4, 2)),
    # Held-back shapes of the same family.
    "relu_nobias": dict(activation="relu", separate=False, bias=False, dims=(24, 48, 2, 3)),
    "gelu_separate": dict(activation="gelu", separate=True, bias=True, dims=(32, 64, 4, 2)),
}


def lines(name):
    with gzip.open(os.path.join(MULTI30K, name), "rt", encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def train_spm(path_prefix, text, vocab_size):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(text) + "\n")
        name = f.name
    spm.SentencePieceTrainer.train(
        input=name,
        model_prefix=path_prefix,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        bos_id=-1,
        eos_id=0,
        unk_id=1,
        pad_id=-1,
        num_threads=2,
        minloglevel=2,
    )
    os.unlink(name)
    return path_prefix + ".model"


def pieces_of(model_path):
    sp = spm.SentencePieceProcessor(model_file=model_path)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def marian_vocab(*piece_lists):
    """Marian's vocabulary order: </s> 0, <unk> 1, then the pieces in first-seen order."""
    vocab = {"</s>": 0, "<unk>": 1}
    for pieces in piece_lists:
        for p in pieces:
            if p not in vocab and p not in ("<s>",):
                vocab[p] = len(vocab)
    return vocab


def yml_vocab(vocab, path):
    # Marian's vocabulary YAML: one `piece: id` per line, the piece quoted as a JSON string.
    with open(path, "w", encoding="utf-8") as f:
        for piece, i in sorted(vocab.items(), key=lambda kv: kv[1]):
            f.write(f"{json.dumps(piece, ensure_ascii=False)}: {i}\n")


def hf_to_marian(sd, cfg, separate, n_layers):
    """The state dict in Marian's npz names (the inverse of transformers' converter): matrices
    (in, out) so that y = x·W, biases (1, n), the pad row dropped from the embeddings."""
    out = {}

    def t(x):
        return x.detach().double().numpy().astype(np.float32)

    def lin(prefix, mod, wname, bname):
        out[f"{prefix}_{wname}"] = t(sd[f"{mod}.weight"]).T.copy()
        out[f"{prefix}_{bname}"] = t(sd[f"{mod}.bias"])[None, :]

    def ln(prefix, mod):
        out[f"{prefix}_ln_scale"] = t(sd[f"{mod}.weight"])[None, :]
        out[f"{prefix}_ln_bias"] = t(sd[f"{mod}.bias"])[None, :]

    for side, marian_side in (("encoder", "encoder"), ("decoder", "decoder")):
        for i in range(n_layers):
            hf = f"model.{side}.layers.{i}"
            mp = f"{marian_side}_l{i + 1}"
            attns = [("self_attn", "self")] + ([("encoder_attn", "context")] if side == "decoder" else [])
            for hfa, ma in attns:
                for proj, w in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "o")):
                    lin(f"{mp}_{ma}", f"{hf}.{hfa}.{proj}", f"W{w}", f"b{w}")
                ln(f"{mp}_{ma}_Wo", f"{hf}.{hfa}_layer_norm")
            lin(f"{mp}_ffn", f"{hf}.fc1", "W1", "b1")
            lin(f"{mp}_ffn", f"{hf}.fc2", "W2", "b2")
            ln(f"{mp}_ffn_ffn", f"{hf}.final_layer_norm")
    bias = t(sd["final_logits_bias"])
    if separate:
        out["encoder_Wemb"] = t(sd["model.encoder.embed_tokens.weight"])[:-1]
        out["decoder_Wemb"] = t(sd["model.decoder.embed_tokens.weight"])[:-1]
    else:
        out["Wemb"] = t(sd["model.shared.weight"])[:-1]
    out["decoder_ff_logit_out_b"] = bias[:, :-1]
    return out


def marian_model_yml(cfg, separate, v_src, v_tgt):
    d = {
        "type": "transformer",
        "dim-emb": cfg.d_model,
        "dim-vocabs": [v_src, v_tgt],
        "enc-depth": cfg.encoder_layers,
        "dec-depth": cfg.decoder_layers,
        "transformer-heads": cfg.encoder_attention_heads,
        "transformer-dim-ffn": cfg.encoder_ffn_dim,
        "transformer-ffn-activation": cfg.activation_function,
        "transformer-ffn-depth": 2,
        "transformer-postprocess": "dan",
        "transformer-postprocess-emb": "d",
        "transformer-preprocess": "",
        "transformer-decoder-autoreg": "self-attention",
        "tied-embeddings-all": not separate,
        "tied-embeddings-src": False,
        "tied-embeddings": True,
        "layer-normalization": False,
        "right-left": False,
        "max-length": cfg.max_position_embeddings,
        # What Marian writes; the version says which `gelu` it computes (the exact x·Φ(x) from
        # v1.12.3, as the `transformers` port does; x·σ(1.702x) before).
        "version": "v1.12.42",
    }
    lines_ = []
    for k, v in d.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, list):
            v = "\n" + "".join(f"  - {x}\n" for x in v)
            lines_.append(f"{k}:{v}".rstrip("\n"))
            continue
        elif v == "":
            v = '""'
        lines_.append(f"{k}: {v}")
    return "\n".join(lines_) + "\n"


def build(name, spec, out_root, src_spm, tgt_spm, pairs, train_pairs, seed):
    torch.manual_seed(seed)
    d_model, d_ff, heads, layers = spec["dims"]
    vdir = os.path.join(out_root, name)
    hf = os.path.join(vdir, "hf")
    native = os.path.join(vdir, "native")
    for d in (hf, native):
        os.makedirs(d, exist_ok=True)
    shutil.copy(src_spm, os.path.join(hf, "source.spm"))
    shutil.copy(tgt_spm, os.path.join(hf, "target.spm"))
    shutil.copy(src_spm, os.path.join(native, "source.spm"))
    shutil.copy(tgt_spm, os.path.join(native, "target.spm"))
    src_pieces, tgt_pieces = pieces_of(src_spm), pieces_of(tgt_spm)
    if spec["separate"]:
        vs, vt = marian_vocab(src_pieces), marian_vocab(tgt_pieces)
        assert len(vs) == len(vt), (len(vs), len(vt))
        vs["<pad>"], vt["<pad>"] = len(vs), len(vt)
        json.dump(vs, open(os.path.join(hf, "vocab.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
        json.dump(vt, open(os.path.join(hf, "target_vocab.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
        yml_vocab({k: v for k, v in vs.items() if k != "<pad>"}, os.path.join(native, "vocab.src.yml"))
        yml_vocab({k: v for k, v in vt.items() if k != "<pad>"}, os.path.join(native, "vocab.trg.yml"))
    else:
        vs = marian_vocab(src_pieces, tgt_pieces)
        vs["<pad>"] = len(vs)
        vt = vs
        json.dump(vs, open(os.path.join(hf, "vocab.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
        yml_vocab({k: v for k, v in vs.items() if k != "<pad>"}, os.path.join(native, "vocab.yml"))
    pad = vt["<pad>"]
    cfg = MarianConfig(
        vocab_size=len(vs),
        decoder_vocab_size=len(vt),
        share_encoder_decoder_embeddings=not spec["separate"],
        d_model=d_model,
        encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_layers=layers,
        decoder_layers=layers,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        bad_words_ids=[[pad]],
        **{**OPUS_MT, "activation_function": spec["activation"]},
    )
    model = MarianMTModel(cfg)
    tok = MarianTokenizer(
        src_spm,
        tgt_spm,
        os.path.join(hf, "vocab.json"),
        target_vocab_file=os.path.join(hf, "target_vocab.json") if spec["separate"] else None,
        separate_vocabs=spec["separate"],
    )
    # A few hundred updates on Multi30k, so that outputs vary and stop (an untrained model repeats
    # one token until the length limit): still a small random-start model, not a translator.
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    for step in range(spec.get("steps", 600)):
        idx = torch.randint(0, len(train_pairs), (32,), generator=g).tolist()
        batch = tok([train_pairs[i][0] for i in idx], text_target=[train_pairs[i][1] for i in idx],
                    padding=True, truncation=True, max_length=64, return_tensors="pt")
        batch["labels"][batch["labels"] == pad] = -100
        loss = model(**batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        # The converter appends a zero row for <pad> (Marian has none): the decoder starts from it.
        for emb in {id(e): e for e in (model.model.encoder.embed_tokens, model.model.decoder.embed_tokens)}.values():
            emb.weight[-1].zero_()
        if spec["bias"]:
            model.final_logits_bias.normal_(0.0, 0.1)
        else:
            model.final_logits_bias.zero_()
    model.save_pretrained(hf, safe_serialization=True)
    torch.save(model.state_dict(), os.path.join(hf, "pytorch_model.bin"))
    tok.save_pretrained(hf)

    # Native Marian: npz with its model.yml, decoder.yml, vocabularies.
    sd = model.state_dict()
    npz = hf_to_marian(sd, cfg, spec["separate"], layers)
    yml = marian_model_yml(cfg, spec["separate"], len(vs) - 1, len(vt) - 1)
    npz["special:model.yml"] = np.frombuffer(yml.encode() + b"\0", dtype=np.int8)
    np.savez(os.path.join(native, "model.npz"), **npz)
    vocabs = ["vocab.src.yml", "vocab.trg.yml"] if spec["separate"] else ["vocab.yml", "vocab.yml"]
    with open(os.path.join(native, "decoder.yml"), "w") as f:
        f.write("models:\n  - model.npz\nvocabs:\n" + "".join(f"  - {v}\n" for v in vocabs))
        f.write("beam-size: 4\nnormalize: 0.6\nword-penalty: 0\nmini-batch: 16\nmaxi-batch: 100\n")

    # References, in float64.
    model64 = MarianMTModel.from_pretrained(hf).double().eval()
    srcs = [p[0] for p in pairs]
    tgts = [p[1] for p in pairs]
    src_ids = [tok(s)["input_ids"] for s in srcs]
    tgt_ids = [tok(text_target=t)["input_ids"] for t in tgts]
    tensors = {}
    nll = []
    with torch.no_grad():
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids)):
            inp = torch.tensor([s])
            lab = torch.tensor([t])
            out = model64(input_ids=inp, labels=lab)
            nll.append(float(out.loss))
            if i < 4:
                enc = model64.get_encoder()(input_ids=inp).last_hidden_state
                tensors[f"encoder_output.{i}"] = enc[0].float().contiguous()
                tensors[f"logits.{i}"] = out.logits[0].float().contiguous()
        greedy = []
        for s in src_ids:
            limit = len(s) + 50
            g = model64.generate(
                torch.tensor([s]), num_beams=1, do_sample=False, max_new_tokens=limit + 1, min_length=0
            )[0].tolist()
            assert g[0] == pad, g
            g = g[1:]
            # Our search allows `limit` tokens, then only </s>: a longer output ends there.
            end = g.index(0) if 0 in g[:limit] else limit
            greedy.append(g[:end] + [0])
    save_file(tensors, os.path.join(vdir, "reference.safetensors"))
    tokens = sum(len(t) for t in tgt_ids)
    ref = {
        "variant": name,
        "config": {k: getattr(cfg, k) for k in ("d_model", "encoder_layers", "activation_function", "vocab_size", "decoder_vocab_size", "share_encoder_decoder_embeddings", "pad_token_id")},
        "sources": srcs,
        "targets": tgts,
        "source_ids": src_ids,
        "target_ids": tgt_ids,
        "nll": nll,
        "mean_nll": sum(n * len(t) for n, t in zip(nll, tgt_ids)) / tokens,
        "greedy_ids": greedy,
        "greedy_text": [tok.decode(g, skip_special_tokens=True) for g in greedy],
    }
    json.dump(ref, open(os.path.join(vdir, "reference.json"), "w", encoding="utf-8"), ensure_ascii=False, indent=1)
    print(f"{name}: V={len(vs)}/{len(vt)}, {sum(p.numel() for p in model.parameters())} parameters, "
          f"mean NLL {ref['mean_nll']:.4f}, greedy lengths {[len(g) for g in greedy]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "crates/transformer/tests/fixtures/marian"))
    args = ap.parse_args()
    en = lines("train.en.gz")
    de = lines("train.de.gz")
    val = list(zip(lines("val.en.gz"), lines("val.de.gz")))
    train_pairs = list(zip(en, de))[:5000]
    pairs = val[:12] + [("A   man  with ﬁve Ｈats, 3 €, and émigré café.", "Ein Mann."), ("", "")]
    work = tempfile.mkdtemp()
    src_spm = train_spm(os.path.join(work, "source"), en, 600)
    tgt_spm = train_spm(os.path.join(work, "target"), de, 700)
    # Separate vocabularies of equal size: `transformers` has one pad id for both sides.
    tgt_spm_600 = train_spm(os.path.join(work, "target600"), de, 600)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    for i, (name, spec) in enumerate(VARIANTS.items()):
        target = tgt_spm_600 if spec["separate"] else tgt_spm
        build(name, spec, args.out, src_spm, target, pairs, train_pairs, seed=1 + i)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
