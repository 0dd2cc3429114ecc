"""Writes crates/transformer/tests/fixtures/sacrebleu.json: BLEU and chrF cases scored by the real
sacrebleu package, for the Rust parity test (tests/bleu_sacrebleu.rs).

    pip install sacrebleu==2.6.0 && python dev/reference/sacrebleu_fixtures.py

Every case records its inputs, options, the full-precision score and the exact line sacrebleu
prints (signature and score), so the test can compare both.
"""
import gzip
import json
import random
from pathlib import Path

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "crates/transformer/tests/fixtures/sacrebleu.json"
DATA = ROOT.parent / "shared/data/multi30k"

BASIC_REF = [
    "The cat sat on the mat.",
    "A man is riding a bicycle down the street.",
    "Two dogs are playing in the snow, near a red house.",
    "She said: \"It's 3.14 - or 1,000 - whatever!\"",
]
BASIC_HYP = [
    "The cat sat on a mat.",
    "A man rides a bike down the street.",
    "Two dogs play in snow near the red house .",
    "She said: \"It's 3.14-or 1,000 whatever!\"",
]

TEXT_CASES = {
    "basic": (BASIC_HYP, [BASIC_REF]),
    "exact": (BASIC_REF, [BASIC_REF]),
    "german": (
        ["Ein Mann fährt Fahrrad über die Straße.", "Zwei Hunde spielen im Schnee.", "Größere Häuser, schöne Grüße!"],
        [["Ein Mann fährt mit dem Fahrrad die Straße entlang.", "Zwei Hunde spielen im Schnee.", "Große Häuser und schöne Grüße!"]],
    ),
    "punctuation_numbers": (
        ["In 1990-2000, prices rose 3.5% (approx.) to $1,200.50; see [ref] {x} <y> a/b @home #1 ~tilde `q`", "End.Next,word 5.5.5 -5 a-b 7-"],
        [["In 1990 - 2000, prices rose by 3.5% (approximately) to $1,200.50; see [ref] {x} <y> a/b @home #1", "End. Next, word 5.5.5 -5 a-b 7-"]],
    ),
    "entities": (
        ["Tom &amp; Jerry said &quot;hi&quot; &lt;b&gt;", "a &amp;amp; b"],
        [["Tom & Jerry said \"hi\" <b>", "a & b"]],
    ),
    "one_empty_hypothesis": (["", "A man is riding a bicycle.", "Dogs play."], [["Something here.", "A man is riding a bicycle.", "Two dogs play."]]),
    "all_empty_hypotheses": (["", ""], [["A reference.", "Another one here."]]),
    "empty_reference": (["A hypothesis here.", "Two dogs play."], [["", "Two dogs play."]]),
    "multi_reference_2": (
        BASIC_HYP,
        [BASIC_REF, ["The cat was sitting on a mat.", "A man rides a bike along the street.", "Two dogs play in the snow close to a red house.", "She said: 'it is 3.14 or 1,000 or whatever'"]],
    ),
    "multi_reference_3": (
        ["the quick brown fox", "jumps over", "the lazy dog"],
        [["a quick brown fox", "jumped over", "the lazy dog"], ["the fast brown fox", "jumps over it", "a lazy dog"], ["quick brown foxes", "leaps over", "the dog"]],
    ),
    "hyp_longer": (["the the the cat cat sat sat on on the mat mat today"], [["the cat sat on the mat"]]),
    "hyp_shorter": (["the cat"], [["the cat sat on the mat today in the sun"]]),
    "no_4gram_matches": (["a b c d e f", "g h i"], [["a b x c d y e f", "g z h i"]]),
    "no_matches": (["xyz uvw"], [["abc def ghi"]]),
    "casing": (["THE Cat SAT on The MAT.", "Hello World"], [["the cat sat on the mat.", "hello world"]]),
    "greek_turkish_lowercase": (["ΟΔΟΣ ΣΟΦΟΣ ΙΣΤΑΝΒΟΥΛ", "İstanbul IŞIK"], [["οδος σοφος ισταnβουλ", "i̇stanbul ışık"]]),
    "unicode_punctuation": (
        ["«Bonjour», dit-il… ¿Qué? ¡Sí! “quoted” — dash 2,5 € 100$ ©2020 ™ ±3", "日本語の文です。中文，标点！"],
        [["« Bonjour » dit-il ... ¿ Qué ? ¡ Sí ! \"quoted\" - dash 2,5 € 100 $ © 2020 ± 3", "日本語の文です 。中文 ， 标点 ！"]],
    ),
    "emoji_symbols": (["I ❤ NY 😀 a+b=c x^2 < y > z | q ~ w"], [["I ❤ NY 😀 a + b = c x ^ 2 < y > z | q ~ w"]]),
    "whitespace": (["  leading and   inner\tspaces  ", "trailing\x0b\x0c \u00a0", "sep\x1cinside\x1fword"], [["leading and inner spaces", "trailing", "sep inside word"]]),
    "skipped_and_hyphen_newline": (["this <skipped> is a com-\nplete line\nwith newline"], [["this is a complete line with newline"]]),
    "cjk_char": (["猫がマットの上に座った。", "我爱北京天安门"], [["猫はマットの上に座っていた。", "我爱北京"]]),
    "single_token": (["yes"], [["yes"]]),
}

BLEU_OPTIONS = [
    {},
    {"tokenize": "intl"},
    {"tokenize": "char"},
    {"tokenize": "none"},
    {"lowercase": True},
    {"smooth_method": "floor"},
    {"smooth_method": "floor", "smooth_value": 0.01},
    {"smooth_method": "add-k"},
    {"smooth_method": "add-k", "smooth_value": 2},
    {"smooth_method": "none"},
    {"tokenize": "intl", "lowercase": True, "smooth_method": "none"},
]

# Which option sets each text case runs with (keeps the file small but varied).
PLAN = {
    "basic": range(len(BLEU_OPTIONS)),
    "exact": [0, 2],
    "german": [0, 1, 4],
    "punctuation_numbers": [0, 1, 3],
    "entities": [0, 1],
    "one_empty_hypothesis": [0, 5, 7, 9],
    "all_empty_hypotheses": [0, 9],
    "empty_reference": [0, 1],
    "multi_reference_2": [0, 4, 10],
    "multi_reference_3": [0, 5, 8],
    "hyp_longer": [0],
    "hyp_shorter": [0, 6],
    "no_4gram_matches": [0, 5, 6, 7, 9],
    "no_matches": [0, 7],
    "casing": [0, 4],
    "greek_turkish_lowercase": [0, 4, 10],
    "unicode_punctuation": [0, 1, 2, 10],
    "emoji_symbols": [0, 1],
    "whitespace": [0, 1, 3],
    "skipped_and_hyphen_newline": [0, 3],
    "cjk_char": [0, 1, 2],
    "single_token": [0, 9],
}

CHRF_OPTIONS = [{}, {"lowercase": True}, {"whitespace": True}, {"word_order": 2}, {"beta": 1}, {"eps_smoothing": True}]
CHRF_PLAN = {
    "basic": range(len(CHRF_OPTIONS)),
    "german": [0, 1],
    "one_empty_hypothesis": [0, 5],
    "all_empty_hypotheses": [0],
    "multi_reference_2": [0, 3],
    "multi_reference_3": [0],
    "unicode_punctuation": [0, 2, 3],
    "greek_turkish_lowercase": [0, 1],
    "whitespace": [0, 2],
    "cjk_char": [0],
    "no_matches": [0, 5],
}


def multi30k_corpus():
    """A realistic corpus: 300 Multi30k validation sentences, with perturbed copies as hypotheses."""
    with gzip.open(DATA / "val.de.gz", "rt", encoding="utf-8") as f:
        refs = [line.rstrip("\n") for line in f][:300]
    rng = random.Random(7)
    hyps = []
    for r in refs:
        words = r.split()
        if rng.random() < 0.3 and len(words) > 3:
            i = rng.randrange(len(words) - 1)
            words[i], words[i + 1] = words[i + 1], words[i]
        if rng.random() < 0.3 and len(words) > 2:
            del words[rng.randrange(len(words))]
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words) + 1), rng.choice(["der", "ein", "und", "Mann", "."]))
        hyps.append(" ".join(words))
    return hyps, [refs]


def main():
    cases = []
    for name, opts in PLAN.items():
        hyps, refs = TEXT_CASES[name]
        for k in opts:
            o = BLEU_OPTIONS[k]
            m = BLEU(**o)
            s = m.corpus_score(hyps, refs)
            cases.append({"metric": "bleu", "name": name, "options": o, "hyps": hyps, "refs": refs,
                          "score": s.score, "line": s.format(signature=str(m.get_signature()))})
    hyps, refs = multi30k_corpus()
    for o in [{}, {"lowercase": True}, {"tokenize": "intl"}]:
        m = BLEU(**o)
        s = m.corpus_score(hyps, refs)
        cases.append({"metric": "bleu", "name": "multi30k_val_300", "options": o, "hyps": hyps, "refs": refs,
                      "score": s.score, "line": s.format(signature=str(m.get_signature()))})
    for name, opts in CHRF_PLAN.items():
        hyps, refs = TEXT_CASES[name]
        for k in opts:
            o = CHRF_OPTIONS[k]
            m = CHRF(**o)
            s = m.corpus_score(hyps, refs)
            cases.append({"metric": "chrf", "name": name, "options": o, "hyps": hyps, "refs": refs,
                          "score": s.score, "line": s.format(signature=str(m.get_signature()))})
    hyps, refs = multi30k_corpus()
    m = CHRF()
    s = m.corpus_score(hyps, refs)
    cases.append({"metric": "chrf", "name": "multi30k_val_300", "options": {}, "hyps": hyps, "refs": refs,
                  "score": s.score, "line": s.format(signature=str(m.get_signature()))})
    OUT.write_text(json.dumps({"sacrebleu": sacrebleu.__version__, "cases": cases}, ensure_ascii=False, indent=0) + "\n")
    print(f"{OUT}: {len(cases)} cases ({sum(c['metric'] == 'bleu' for c in cases)} BLEU, {sum(c['metric'] == 'chrf' for c in cases)} chrF)")
    for c in cases[:3]:
        print(" ", c["line"])


if __name__ == "__main__":
    main()
