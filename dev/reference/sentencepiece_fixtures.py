"""Writes crates/transformer/tests/fixtures/sentencepiece/: small SentencePiece models trained on the
embedded Multi30k text, Marian-style tokenizer directories built on them, and what the real
`sentencepiece` and `transformers.MarianTokenizer` make of every corpus line and of a Unicode
torture list. The Rust parity test (tests/sentencepiece.rs) replays them offline.

    /work/venv/bin/python dev/reference/sentencepiece_fixtures.py   # sentencepiece 0.2.x, transformers 5.x

Layout of the output directory:
  <model>.model                 the trained models (and edited variants, see VARIANTS)
  marian_shared/, marian_separate/   HF Marian tokenizer directories without their models
                                (vocab.json [, target_vocab.json], tokenizer_config.json); source.spm
                                is unigram_en.model, target.spm unigram_de.model
  <model>.<split>.<lang>.jsonl.gz    one JSON object per corpus line, in corpus order:
                                {"ids": [...]} plus "pieces" when some piece is not the id's own
                                piece (merged unknown pieces) and "dec_ids" / "dec_pieces" when
                                `decode(ids)` / `decode_pieces(pieces)` differ from the line
  marian_<kind>.<split>.jsonl.gz     (val and test) {"src": ids of the English line, "tgt": ids of the German line
                                as text_target} plus "dec" when decode(tgt ids,
                                skip_special_tokens=True) differs from the German line
  torture.json                  the torture strings and, per model and Marian directory, every
                                result spelled out
"""
import gzip
import io
import json
import shutil
import tempfile
from pathlib import Path

import sentencepiece as spm
from transformers import MarianTokenizer

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data/multi30k"
OUT = ROOT / "crates/transformer/tests/fixtures/sentencepiece"
SPLITS = ["train", "val", "test_2016_flickr"]

TORTURE = [
    "",
    " ",
    "   ",
    "\t",
    "Hello world.",
    "  leading and trailing spaces  ",
    "multiple    inner     spaces",
    "tabs\tand\nnewlines\r\nhere",
    "ﬁ ﬂ ﬀ ﬃ ligatures: œuvre Æsop ĳssel",
    "ＡＢＣ１２３ full-width ｶﾀｶﾅ half-width",
    "① ② ⑩ ⅷ ½ ² ³ ™ ℃ ㎏",
    "Åström vs Åström (composed vs decomposed)",
    "e\u0301 a\u0308 o\u0302\u0323 combining marks",
    "Zürich Straße GROẞ Übermäßig",
    "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️",
    "中文字符测试 日本語のテキスト 한국어",
    "مرحبا بالعالم עברית שלום",
    "control \x00 nul \x1b esc \x07 bell \x7f del",
    "zero\u200bwidth\u200cjoin\u200dx\ufeffbom",
    "no\u00a0break\u202fspace\u3000ideographic",
    "<unk> </s> <pad> written literally",
    "a<unk>b</s>c<pad>d",
    "<s> and </s> control",
    ">>de<< Ein Mann fährt Fahrrad.",
    ">>fr<<Un homme",
    ">>xx<< unknown code",
    ">>de<<",
    ">> not a code << here",
    "text >>de<< in the middle",
    "Donaudampfschifffahrtsgesellschaftskapitänsmützenabzeichenherstellerinnung" * 3,
    "weird code points \uffff \ufffe \U0010ffff \ue000 \U0001f9ff",
    "replacement \ufffd char",
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt Fenster.",
    "numbers 1234567890 3.14159 1,000,000",
    "punctuation!!! ??? ... --- «quotes» „Anführung“ ‚single‘",
    "ALL CAPS SENTENCE WITH QQQ XYZZY",
    "x",
    "▁ already escaped ▁▁ spaces",
    "mixed ▁▁ and  spaces ▁",
    "\u2581",
    "ｈｅｌｌｏ\u3000ｗｏｒｌｄ",
    "¡¿ÀÉÎÕÜ ñ ç ø ß ð þ",
    "Ελληνικά Кириллица Русский",
    "\u0000",
    "a\u0000b",
    "dog[SEP]cat [SEP] <sep> <mask>tokens",
    "user ☃ symbols ☃☃ and ★",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝔸𝕋ℍ",
    "A fisherman with a fish, ﬁve ﬁsh... abab a b\tc\u3000d",
    "the man and the woman",
    "aab abb ab",
]

USER_SYMBOLS = ["[SEP]", "<sep>", "☃", "★★"]


def read_lines(split, lang):
    # newline="": no universal-newline translation, so a stray \r stays in its line as in Rust.
    with gzip.open(DATA / f"{split}.{lang}.gz", "rt", encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    # A final newline ends the last line; it does not start an empty one.
    return lines[:-1] if lines and lines[-1] == "" else lines


def corpus(lang):
    return {split: read_lines(split, lang) for split in SPLITS}


def train(name, langs, **kwargs):
    lines = []
    for lang in langs:
        lines += read_lines("train", lang)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "train.txt"
        text.write_text("\n".join(lines) + "\n", encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(text), model_prefix=str(Path(tmp) / name), num_threads=2, minloglevel=2, **kwargs
        )
        data = (Path(tmp) / f"{name}.model").read_bytes()
    (OUT / f"{name}.model").write_bytes(data)
    return data


# A minimal protobuf reader/writer (the `protobuf` package is not needed): a message is a list of
# [field number, wire type, value] with bytes for length-delimited fields and ints otherwise.
def pb_parse(data):
    out, i = [], 0

    def varint():
        nonlocal i
        v, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v

    while i < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            out.append([field, wire, varint()])
        elif wire == 1:
            out.append([field, wire, data[i : i + 8]])
            i += 8
        elif wire == 2:
            n = varint()
            out.append([field, wire, data[i : i + n]])
            i += n
        elif wire == 5:
            out.append([field, wire, data[i : i + 4]])
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    return out


def pb_varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_write(msg):
    out = bytearray()
    for field, wire, value in msg:
        out += pb_varint(field << 3 | wire)
        if wire == 0:
            out += pb_varint(value)
        elif wire == 2:
            out += pb_varint(len(value)) + value
        else:
            out += value
    return bytes(out)


def pb_set(msg, field, wire, value):
    """Sets a singular field (replacing any earlier occurrence)."""
    msg[:] = [f for f in msg if f[0] != field] + [[field, wire, value]]


def pb_submsg(msg, field, fn):
    """Applies fn to the parsed singular sub-message `field` (created when absent)."""
    subs = [f for f in msg if f[0] == field]
    sub = pb_parse(subs[-1][2]) if subs else []
    fn(sub)
    pb_set(msg, field, 2, pb_write(sub))


def edit(name, base, fn):
    """Writes a variant of model `base` with its protobuf edited (normaliser flags, unused pieces)."""
    m = pb_parse((OUT / f"{base}.model").read_bytes())
    fn(m)
    data = pb_write(m)
    (OUT / f"{name}.model").write_bytes(data)
    return data


def processor(name):
    return spm.SentencePieceProcessor(model_file=str(OUT / f"{name}.model"))


def spm_record(sp, text, with_text):
    pieces = sp.encode(text, out_type=str)
    ids = sp.encode(text)
    rec = {"text": text} if with_text else {}
    rec["ids"] = ids
    if with_text or any(p != sp.id_to_piece(i) for p, i in zip(pieces, ids)):
        rec["pieces"] = pieces
    dec_ids = sp.decode(ids)
    dec_pieces = sp.decode_pieces(pieces)
    if with_text or dec_ids != text:
        rec["dec_ids"] = dec_ids
    if with_text or dec_pieces != text:
        rec["dec_pieces"] = dec_pieces
    return rec


def write_jsonl_gz(path, records):
    raw = io.BytesIO()
    # mtime=0: the same input gives the same bytes, so re-running the script does not churn git.
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as f:
        for r in records:
            f.write((json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
    path.write_bytes(raw.getvalue())


def marian_dir(kind, src_name, tgt_name, tmp):
    """A Marian tokenizer directory as the Marian→HF converter lays it out: `</s>` 0, `<unk>` 1, the
    pieces, `<pad>` last (shared: source pieces then the target's new ones, plus two language codes).
    The fixture keeps only its JSON files (the test copies the two models in); the full directory,
    with source.spm and target.spm, is built under `tmp` for MarianTokenizer."""
    d = OUT / f"marian_{kind}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir()

    def pieces(name):
        sp = processor(name)
        return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]

    def vocab(lists, codes):
        v = {"</s>": 0, "<unk>": 1}
        for p in codes:
            v.setdefault(p, len(v))
        for lst in lists:
            for p in lst:
                v.setdefault(p, len(v))
        v["<pad>"] = len(v)
        return v

    config = {
        "source_lang": "en",
        "target_lang": "de",
        "unk_token": "<unk>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "model_max_length": 512,
        "separate_vocabs": kind == "separate",
        "tokenizer_class": "MarianTokenizer",
    }
    if kind == "shared":
        v = vocab([pieces(src_name), pieces(tgt_name)], [">>de<<", ">>fr<<"])
        (d / "vocab.json").write_text(json.dumps(v, ensure_ascii=False, indent=1), encoding="utf-8")
    else:
        (d / "vocab.json").write_text(
            json.dumps(vocab([pieces(src_name)], []), ensure_ascii=False, indent=1), encoding="utf-8"
        )
        (d / "target_vocab.json").write_text(
            json.dumps(vocab([pieces(tgt_name)], []), ensure_ascii=False, indent=1), encoding="utf-8"
        )
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    full = Path(tmp) / f"marian_{kind}"
    shutil.copytree(d, full)
    shutil.copy(OUT / f"{src_name}.model", full / "source.spm")
    shutil.copy(OUT / f"{tgt_name}.model", full / "target.spm")
    return MarianTokenizer.from_pretrained(str(full))


def marian_record(tok, src, tgt, with_text):
    s = tok(src)["input_ids"]
    t = tok(text_target=tgt)["input_ids"]
    rec = {"src_text": src, "tgt_text": tgt} if with_text else {}
    rec["src"] = s
    rec["tgt"] = t
    dec = tok.decode(t, skip_special_tokens=True)
    if with_text or dec != tgt:
        rec["dec"] = dec
    return rec


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for old in list(OUT.glob("*.jsonl.gz")) + list(OUT.glob("*.model")):
        old.unlink()
    common = dict(character_coverage=1.0)
    train("unigram_en", ["en"], vocab_size=2000, model_type="unigram", **common)
    train("unigram_de", ["de"], vocab_size=2000, model_type="unigram", **common)
    # BPE and the small variants use the identity normaliser: the nmt_nfkc character map alone
    # weighs ~240 kB per model file, and the models above already exercise it.
    train(
        "bpe_en",
        ["en"],
        vocab_size=1500,
        model_type="bpe",
        user_defined_symbols=USER_SYMBOLS,
        normalization_rule_name="identity",
        **common,
    )
    train("unigram_en_identity", ["en"], vocab_size=2000, model_type="unigram", normalization_rule_name="identity", **common)
    # Coverage below 1 leaves rare characters out of the vocabulary, so byte fallback is exercised.
    train(
        "udbf_de",
        ["de"],
        vocab_size=1500,
        model_type="unigram",
        user_defined_symbols=USER_SYMBOLS,
        byte_fallback=True,
        character_coverage=0.995,
    )

    def unused(ids):
        def fn(m):
            pieces = [f for f in m if f[0] == 1]
            for i in ids:
                sub = pb_parse(pieces[i][2])
                pb_set(sub, 3, 0, 5)  # type = UNUSED
                pieces[i][2] = pb_write(sub)

        return fn

    # NormalizerSpec field numbers and wire types.
    spec_fields = {
        "name": (1, 2),
        "precompiled_charsmap": (2, 2),
        "add_dummy_prefix": (3, 0),
        "remove_extra_whitespaces": (4, 0),
        "escape_whitespaces": (5, 0),
    }

    def flags(**kw):
        def fn(m):
            def set_all(spec):
                for k, v in kw.items():
                    field, wire = spec_fields[k]
                    value = v.encode() if isinstance(v, str) else (int(v) if wire == 0 else v)
                    pb_set(spec, field, wire, value)

            pb_submsg(m, 3, set_all)

        return fn

    def chain(*fns):
        def fn(m):
            for f in fns:
                f(m)

        return fn

    # Custom normalisation rules give a small character map with multi-character keys (the longest
    # match wins), rules whose output holds spaces, and a denormaliser (applied by decode).
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.tsv"
        rules.write_text(
            "41\t61\n"  # A → a
            "66 69\t46 49\n"  # fi → FI
            "66 69 73 68\t66 69 73 63 68\n"  # fish → fisch (longer than fi)
            "FB01\t66 69\n"  # ﬁ → fi
            "3000\t20\n"  # ideographic space → space
            "9\t20 20\n"  # tab → two spaces
            "61 62\t20 61 62 20\n"  # ab → " ab "
            "2E 2E 2E\t2026\n",  # ... → …
            encoding="utf-8",
        )
        train("unigram_en_rules", ["en"], vocab_size=1000, model_type="unigram", normalization_rule_tsv=str(rules), **common)
        denorm = Path(tmp) / "denorm.tsv"
        denorm.write_text("6D 61 6E\t4D 41 4E\n2581\t5F\n20 20\t20\n", encoding="utf-8")  # man → MAN, ▁ → _
        train("denorm_source", ["en"], vocab_size=300, model_type="unigram", normalization_rule_tsv=str(denorm), **common)
    denorm_spec = [f for f in pb_parse((OUT / "denorm_source.model").read_bytes()) if f[0] == 3][-1][2]
    (OUT / "denorm_source.model").unlink()

    def with_denormalizer(m):
        spec = pb_parse(denorm_spec)
        for field in (3, 4, 5):  # add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces off
            pb_set(spec, field, 0, 0)
        pb_set(m, 5, 2, pb_write(spec))

    edit("unigram_en_rules_denorm", "unigram_en_rules", with_denormalizer)

    # Variants: the rarer rules (unused pieces, normaliser flags) on the validation/test lines only.
    bpe = processor("bpe_en")
    uni = processor("unigram_en_identity")
    frequent = lambda sp: [sp.piece_to_id(p) for p in ["▁the", "▁a", "ing", "▁man", "er", "▁in", "an", "▁wearing"]]
    edit("bpe_en_unused", "bpe_en", unused(frequent(bpe)))
    edit("unigram_en_unused", "unigram_en_identity", unused(frequent(uni)))
    edit("unigram_en_raw", "unigram_en_identity", flags(add_dummy_prefix=False, remove_extra_whitespaces=False))
    edit("unigram_en_noescape", "unigram_en_identity", flags(escape_whitespaces=False))
    edit("unigram_en_suffix", "unigram_en_identity", lambda m: pb_submsg(m, 2, lambda t: pb_set(t, 24, 0, 1)))

    en, de = corpus("en"), corpus("de")
    plans = {
        "unigram_en": [("en", SPLITS)],
        "unigram_de": [("de", SPLITS)],
        "bpe_en": [("en", SPLITS), ("de", ["val"])],
        "udbf_de": [("de", SPLITS), ("en", ["val"])],
        "bpe_en_unused": [("en", ["val", "test_2016_flickr"])],
        "unigram_en_unused": [("en", ["val", "test_2016_flickr"])],
        "unigram_en_raw": [("en", ["val"])],
        "unigram_en_noescape": [("en", ["val"])],
        "unigram_en_identity": [("en", ["val"])],
        "unigram_en_suffix": [("en", ["val"])],
        "unigram_en_rules": [("en", ["val"])],
        "unigram_en_rules_denorm": [("en", ["val"])],
    }
    torture = {"texts": TORTURE, "models": {}, "marian": {}}
    for name, plan in plans.items():
        sp = processor(name)
        for lang, splits in plan:
            lines = en if lang == "en" else de
            for split in splits:
                recs = [spm_record(sp, t, False) for t in lines[split]]
                write_jsonl_gz(OUT / f"{name}.{split}.{lang}.jsonl.gz", recs)
        torture["models"][name] = [spm_record(sp, t, True) for t in TORTURE]

    # Marian on the validation and test lines (the training lines' pieces are already covered by
    # the unigram models; their ids would add more than a megabyte).
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ["shared", "separate"]:
            tok = marian_dir(kind, "unigram_en", "unigram_de", tmp)
            for split in ["val", "test_2016_flickr"]:
                recs = [marian_record(tok, s, t, False) for s, t in zip(en[split], de[split])]
                write_jsonl_gz(OUT / f"marian_{kind}.{split}.jsonl.gz", recs)
            torture["marian"][kind] = [marian_record(tok, t, t, True) for t in TORTURE]

    (OUT / "torture.json").write_text(json.dumps(torture, ensure_ascii=False, indent=0), encoding="utf-8")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
