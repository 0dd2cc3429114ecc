"""The Python package against the real tool's outputs: a small OPUS-MT (Marian) model whose greedy
translations and losses `transformers` wrote (crates/transformer/tests/fixtures/marian/opus,
reference.json), imported with `transformer.import_marian` and driven through CTranslate2's API."""

import json
import threading

import pytest

import transformer
from conftest import FIXTURE, REFERENCE, ROOT

# Marian's ids -> pieces, from the Hugging Face directory's vocabulary (one for both sides).
PIECE = {i: p for p, i in json.loads((FIXTURE / "hf" / "vocab.json").read_text(encoding="utf-8")).items()}
EOS = 0  # Marian's </s>


def source_tokens():
    """The reference sources as pieces, without the </s> Marian's tokenizer appends."""
    return [[PIECE[i] for i in ids[:-1]] for ids in REFERENCE["source_ids"]]


def test_module_functions(model_dir):
    assert transformer.contains_model(str(model_dir))
    # The Hugging Face directory is not one of ours until imported.
    assert not transformer.contains_model(str(FIXTURE / "hf"))
    assert not transformer.contains_model(str(model_dir / "missing"))
    types = transformer.get_supported_compute_types("cpu")
    assert {"float32", "int8", "int8_float32"} <= types
    assert not types & {"float16", "int8_float16", "int16"}
    with pytest.raises(ValueError, match="CPU"):
        transformer.get_supported_compute_types("cuda")
    transformer.set_random_seed(7)
    assert isinstance(transformer.__version__, str)


def test_the_tokenizer_cuts_as_marians(translator):
    for text, ids in zip(REFERENCE["sources"], REFERENCE["source_ids"]):
        assert translator.tokenize(text) == [PIECE[i] for i in ids[:-1]], text


def test_greedy_translations_equal_transformers_generate(translator):
    # generate stopped each output at its source's length (with </s>) + 50, forcing </s> there: the
    # same limit, one sentence at a time. A blank source is </s> alone, as generate read it.
    for i, (src, ids, want) in enumerate(zip(source_tokens(), REFERENCE["source_ids"], REFERENCE["greedy_ids"])):
        (r,) = translator.translate_batch([src], beam_size=1, max_decoding_length=len(ids) + 50)
        assert want[-1] == EOS
        assert r.hypotheses == [[PIECE[t] for t in want[:-1]]], f"sentence {i}"
        assert r.scores == []
        assert translator.detokenize(r.hypotheses[0]) == REFERENCE["greedy_text"][i]


def test_score_batch_equals_the_transformers_loss(translator):
    target = [[PIECE[i] for i in ids[:-1]] for ids in REFERENCE["target_ids"]]
    results = translator.score_batch(source_tokens(), target)
    for i, (r, want) in enumerate(zip(results, REFERENCE["nll"])):
        assert r.tokens == target[i] + ["</s>"]
        assert len(r.log_probs) == len(r.tokens)
        mean_nll = -sum(r.log_probs) / len(r.log_probs)
        assert abs(mean_nll - want) < 1e-4 * want, f"pair {i}: {mean_nll} vs transformers {want}"
    # offset: the first tokens are conditioned on but not scored.
    shifted = translator.score_batch(source_tokens()[:2], target[:2], offset=2)
    for r, full in zip(shifted, results):
        assert r.tokens == full.tokens[2:]
        assert r.log_probs == pytest.approx(full.log_probs[2:], abs=1e-6)
    with pytest.raises(ValueError, match="1 sources but 2 targets"):
        translator.score_batch(source_tokens()[:1], target[:2])


def test_beam_search_returns_the_n_best_by_score(translator):
    src = source_tokens()[:3]
    results = translator.translate_batch(src, beam_size=4, num_hypotheses=3, return_scores=True)
    for r in results:
        assert len(r.hypotheses) == 3 and len(r.scores) == 3
        assert r.scores == sorted(r.scores, reverse=True)
        assert len({tuple(h) for h in r.hypotheses}) == 3
    # CTranslate2's defaults: beam 2, one hypothesis.
    default = translator.translate_batch(src)
    assert [len(r.hypotheses) for r in default] == [1, 1, 1]
    same = translator.translate_batch(src, beam_size=2, length_penalty=1.0, max_decoding_length=256)
    assert [r.hypotheses for r in same] == [r.hypotheses for r in default]
    # max_decoding_length caps the output (EOS not counted).
    short = translator.translate_batch(src, max_decoding_length=3)
    assert all(len(r.hypotheses[0]) <= 3 for r in short)
    with pytest.raises(ValueError, match=r"num_hypotheses=3 is more than beam_size \* patience \(2\)"):
        translator.translate_batch(src, num_hypotheses=3)
    with pytest.raises(ValueError, match="batch_type"):
        translator.translate_batch(src, max_batch_size=2, batch_type="sentences")


def test_what_the_search_cannot_do_yet_is_refused_by_name(translator):
    src = source_tokens()[:2]
    for kwargs in [
        {"coverage_penalty": 0.2},
        {"return_logits_vocab": True},
        {"end_token": "</s>"},
        {"callback": print},
    ]:
        name = next(iter(kwargs))
        with pytest.raises(ValueError, match=name):
            translator.translate_batch(src, **kwargs)
    # Empty prefixes ask for nothing.
    assert [r.hypotheses for r in translator.translate_batch(src, [None, []])] == \
        [r.hypotheses for r in translator.translate_batch(src)]
    with pytest.raises(ValueError, match="target_prefix has 1 entries for 2 sources"):
        translator.translate_batch(src, [None])


def test_asynchronous_and_iterable_calls_give_the_same_results(translator, tmp_path):
    src = source_tokens()
    want = [r.hypotheses for r in translator.translate_batch(src, beam_size=3)]
    pending = translator.translate_batch(src, beam_size=3, asynchronous=True)
    assert [p.result().hypotheses for p in pending] == want
    assert all(p.done() for p in pending)
    streamed = translator.translate_iterable(iter(src), max_batch_size=4, beam_size=3)
    assert [r.hypotheses for r in streamed] == want
    by_tokens = translator.translate_iterable(src, max_batch_size=40, batch_type="tokens", beam_size=3)
    assert [r.hypotheses for r in by_tokens] == want
    target = [h[0] for h in want]
    scores = [r.log_probs for r in translator.score_batch(src, target)]
    # Other batches, other products: on the `gemm` path (no AVX-512) the last bits of a sum depend
    # on the batch's shape, so equal to f32 rounding (a wrong token is off by more than 1e-2).
    streamed = [r.log_probs for r in translator.score_iterable(src, target, max_batch_size=5)]
    assert len(streamed) == len(scores)
    for got, want_row in zip(streamed, scores):
        assert got == pytest.approx(want_row, rel=1e-5, abs=1e-5)
    assert [p.result().log_probs for p in translator.score_batch(src, target, asynchronous=True)] == scores
    with pytest.raises(ValueError, match="different lengths"):
        list(translator.score_iterable(src, target[:-1], max_batch_size=100))


def test_translate_file_writes_a_line_per_source(translator, tmp_path):
    src = [s for s in source_tokens() if s]
    source = tmp_path / "source.txt"
    source.write_text("".join(" ".join(s) + "\n" for s in src), encoding="utf-8")
    out = tmp_path / "out.txt"
    stats = translator.translate_file(str(source), str(out), beam_size=3)
    want = [" ".join(r.hypotheses[0]) for r in translator.translate_batch(src, beam_size=3)]
    assert out.read_text(encoding="utf-8").splitlines() == want
    assert stats.num_examples == len(src)
    assert stats.num_tokens == sum(len(w.split()) for w in want)
    scored = tmp_path / "scored.txt"
    translator.translate_file(str(source), str(scored), beam_size=3, with_scores=True)
    for line, w in zip(scored.read_text(encoding="utf-8").splitlines(), want):
        score, text = line.split(" ||| ")
        assert float(score) < 0 and text == w
    with pytest.raises(ValueError, match="is the source file"):
        translator.translate_file(str(source), str(source))
    assert source.read_text(encoding="utf-8").splitlines()[0] == " ".join(src[0])


def test_compute_types_and_devices(model_dir):
    src = source_tokens()[:4]
    f32 = transformer.Translator(str(model_dir), compute_type="float32")
    assert f32.compute_type == "float32" and f32.device == "cpu"
    int8 = transformer.Translator(str(model_dir), compute_type="int8", intra_threads=1)
    assert [len(r.hypotheses[0]) > 0 for r in int8.translate_batch(src)] == [True] * 4
    by_device = transformer.Translator(str(model_dir), compute_type={"cpu": "int8_float32"}, device_index=[0])
    assert [r.hypotheses for r in by_device.translate_batch(src)] == [r.hypotheses for r in int8.translate_batch(src)]
    with pytest.raises(ValueError, match="float16"):
        transformer.Translator(str(model_dir), compute_type="float16")
    with pytest.raises(ValueError, match="CPU only"):
        transformer.Translator(str(model_dir), device="cuda")
    with pytest.raises(ValueError, match="device 0"):
        transformer.Translator(str(model_dir), device_index=1)
    with pytest.raises(ValueError, match="Hugging Face model directory: import it first"):
        transformer.Translator(str(FIXTURE / "hf"))
    with pytest.raises(ValueError, match="holds no checkpoint"):
        transformer.Translator(str(FIXTURE))


def test_decoding_releases_the_gil(translator):
    src = source_tokens() * 30
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        before = ticks[0]
        translator.translate_batch(src, beam_size=4)
        during = ticks[0] - before
    finally:
        stop.set()
        t.join()
    # Held, the GIL would let the counting thread run only between the calls.
    assert during > 1000, during


def test_a_ctranslate2_directory_opens_with_its_path_and_decodes_as_ctranslate2(tmp_path):
    """A directory CTranslate2's own Marian converter wrote (the real Marian's model), with its
    SentencePiece model beside it as `--copy_files` leaves it: `Translator(path)` as in a
    CTranslate2 script, its greedy translations CTranslate2's own (checks.json, dev/ct2/check.py)."""
    import gzip
    import shutil

    fixtures = FIXTURE.parents[1]
    checks = json.loads((fixtures / "ct2" / "checks.json").read_text(encoding="utf-8"))
    d = tmp_path / "ct2"
    shutil.copytree(fixtures / "ct2" / "tied_all_relu-float32", d)
    shutil.copy(fixtures / "marian-real" / "tied_all_relu" / "vocab.spm", d / "vocab.spm")
    assert transformer.contains_model(str(d))
    n = checks["sentences"]
    with gzip.open(ROOT / "data" / "multi30k" / "test_2016_flickr.en.gz", "rt") as f:
        lines = f.read().splitlines()[:n]
    t = transformer.Translator(str(d))
    assert t.translate(lines, beam_size=1) == checks["import"]["tied_all_relu-float32"]["greedy"]["ct2_1best"]
    # Without its SentencePiece model the directory's tokens have no tokenizer: said, not guessed.
    (d / "vocab.spm").unlink()
    with pytest.raises(ValueError, match="--spm"):
        transformer.Translator(str(d))
