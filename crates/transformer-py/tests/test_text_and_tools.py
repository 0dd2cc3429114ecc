"""Beyond token strings: text in and text out, the parser, the metrics, and the package's
behaviour as a Python library (threads, Ctrl-C, exceptions). Where a test compares with
`transformer` itself it runs the CLI binary the README's test command built before it
(target/debug/transformer, or $TRANSFORMER_BIN)."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import threading
import time

import pytest

import transformer

from conftest import FIXTURE, REFERENCE, ROOT

SOURCES = [s for s in REFERENCE["sources"] if s.strip()]


def cli():
    """The `transformer` binary, or a skip saying how to build it."""
    for path in [os.environ.get("TRANSFORMER_BIN"), ROOT / "target" / "debug" / "transformer",
                 ROOT / "target" / "release" / "transformer"]:
        if path and pathlib.Path(path).is_file():
            return str(path)
    pytest.skip("no transformer binary: run `cargo test --workspace` (or `cargo build`) first, or set TRANSFORMER_BIN")


def run_cli(*args, stdin=None):
    out = subprocess.run([cli(), *map(str, args)], input=stdin, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def compute_types():
    supported = transformer.get_supported_compute_types("cpu")
    return [c for c in ["float32", "int8", "bfloat16"] if c in supported]


@pytest.mark.parametrize("compute_type", compute_types())
def test_text_and_pieces_give_exactly_the_clis_translations(model_dir, tmp_path, compute_type):
    # CTranslate2's search (beam 2, patience 1, length_penalty 1 dividing by the length, EOS
    # counted, 256 steps, at least one token) is the CLI's --beam 2 --alpha 1 --length-norm marian
    # --patience 1 --max-len-a 0 --max-len-b 256 --min-len 1 --end-at-limit.
    precision = {"float32": "f32", "int8": "int8", "bfloat16": "bf16"}[compute_type]
    source = tmp_path / "source.txt"
    source.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    want = run_cli("translate", "--checkpoint", model_dir / "model.safetensors", "--tokenizer",
                   model_dir / "tokenizer.json", "--precision", precision, "--beam", 2, "--alpha", 1,
                   "--length-norm", "marian", "--patience", 1, "--max-len-a", 0, "--max-len-b", 256, "--end-at-limit", "--min-len", 1,
                   "--workers", 1, "--input", source).splitlines()
    assert len(want) == len(SOURCES)
    t = transformer.Translator(str(model_dir), compute_type=compute_type)
    assert t.translate(SOURCES) == want
    assert t.translate(SOURCES[0]) == want[0]
    # A CTranslate2 script: tokenize, translate_batch on pieces, detokenize.
    pieces = t.translate_batch([t.tokenize(s) for s in SOURCES])
    assert [t.detokenize(r.hypotheses[0]) for r in pieces] == want
    # n-best on text: that many, best first.
    nbest = t.translate(SOURCES[:3], beam_size=4, num_hypotheses=3)
    assert [len(n) for n in nbest] == [3, 3, 3]
    assert [n[0] for n in nbest] == t.translate(SOURCES[:3], beam_size=4)
    # The repetition controls, CTranslate2's names, the CLI's flags.
    controls = dict(repetition_penalty=1.5, no_repeat_ngram_size=2, min_decoding_length=3)
    want = run_cli("translate", "--checkpoint", model_dir / "model.safetensors", "--tokenizer",
                   model_dir / "tokenizer.json", "--precision", precision, "--beam", 2, "--alpha", 1,
                   "--length-norm", "marian", "--patience", 1, "--max-len-a", 0, "--max-len-b", 256, "--end-at-limit", "--min-len", 3,
                   "--repetition-penalty", 1.5, "--no-repeat-ngram-size", 2, "--workers", 1,
                   "--input", source).splitlines()
    assert t.translate(SOURCES, **controls) == want
    pieces = t.translate_batch([t.tokenize(s) for s in SOURCES], **controls)
    assert [t.detokenize(r.hypotheses[0]) for r in pieces] == want
    for r in pieces:
        h = r.hypotheses[0]
        assert len(h) >= 3
        assert len(set(zip(h, h[1:]))) == len(h) - 1, h  # no bigram twice


def test_sampling_is_seeded_and_equals_the_clis(model_dir, tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    pieces = None
    outputs = {}
    for inter in (1, 2):
        t = transformer.Translator(str(model_dir), inter_threads=inter, intra_threads=1)
        pieces = pieces or [t.tokenize(s) for s in SOURCES]
        transformer.set_random_seed(5)
        r = t.translate_batch(pieces, beam_size=1, num_hypotheses=3, sampling_topk=0, sampling_temperature=1.5)
        outputs[inter] = [[t.detokenize(h) for h in x.hypotheses] for x in r]
    # The same seed, the same samples on any thread count.
    assert outputs[1] == outputs[2]
    assert all(len(n) == 3 for n in outputs[1])
    assert any(len(set(n)) > 1 for n in outputs[1]), "three samples, always the same"
    transformer.set_random_seed(6)
    t = transformer.Translator(str(model_dir))
    other = t.translate_batch(pieces, beam_size=1, num_hypotheses=3, sampling_topk=0, sampling_temperature=1.5)
    assert [[t.detokenize(h) for h in x.hypotheses] for x in other] != outputs[1]
    # The CLI's --sampling with the same seed writes the same samples.
    lines = run_cli("translate", "--checkpoint", model_dir / "model.safetensors", "--tokenizer",
                    model_dir / "tokenizer.json", "--sampling", "--temperature", 1.5, "--seed", 5, "--nbest", 3,
                    "--alpha", 1, "--length-norm", "marian", "--max-len-a", 0, "--max-len-b", 256, "--end-at-limit", "--min-len", 1,
                    "--input", source).splitlines()
    by_sentence = {}
    for line in lines:
        index, text = line.split(" ||| ")[:2]
        by_sentence.setdefault(int(index), []).append(text)
    assert [by_sentence[i] for i in range(len(SOURCES))] == outputs[1]
    # Top-k 1 with a nucleus, or sampling with a beam, cannot be.
    with pytest.raises(ValueError, match="sampling_topp=0.5 applies to sampling"):
        t.translate_batch(pieces[:1], sampling_topp=0.5)
    with pytest.raises(ValueError, match="samples with beam_size=1"):
        t.translate_batch(pieces[:1], beam_size=2, sampling_topk=10)
    transformer.set_random_seed(0)


def test_prefixes_and_constraints_equal_the_clis(model_dir, translator, tmp_path):
    # Text: the CLI's --prefix (a line a sentence) and --constraints (tab-separated phrases).
    sources = SOURCES[:6]
    prefixes = ["Das ist", None, "Ein", None, "Wir", "Es"]
    phrases = [["Haus"], [], ["heute", "gut"], ["nicht"], [], ["Welt"]]
    files = {"source.txt": sources, "prefix.txt": [p or "" for p in prefixes],
             "constraints.tsv": ["\t".join(p) for p in phrases]}
    for name, lines in files.items():
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    want = run_cli("translate", "--checkpoint", model_dir / "model.safetensors", "--tokenizer",
                   model_dir / "tokenizer.json", "--beam", 4, "--alpha", 1, "--length-norm", "marian",
                   "--max-len-a", 0, "--max-len-b", 256, "--end-at-limit", "--min-len", 1, "--workers", 1,
                   "--input", tmp_path / "source.txt", "--prefix", tmp_path / "prefix.txt",
                   "--constraints", tmp_path / "constraints.tsv").splitlines()
    got = translator.translate(sources, beam_size=4, target_prefix=prefixes, constraints=phrases)
    assert got == want
    for out, prefix, wanted in zip(got, prefixes, phrases):
        assert out.startswith(prefix or ""), (out, prefix)
        assert all(p in out for p in wanted), (out, wanted)
    assert translator.translate(sources[0], beam_size=4, target_prefix="Das ist", constraints=["Haus"]) == want[0]
    # Pieces: the hypotheses start with the prefix's tokens and hold every phrase's.
    pieces = [translator.tokenize(s) for s in sources]
    free = [r.hypotheses[0] for r in translator.translate_batch(pieces, beam_size=4)]
    prefix_tokens = [h[1:3] for h in free]
    phrase_tokens = [[h[:1]] for h in free[1:]] + [[]]
    results = translator.translate_batch(pieces, prefix_tokens, beam_size=4, num_hypotheses=2,
                                         constraints=phrase_tokens)
    for r, p, c in zip(results, prefix_tokens, phrase_tokens):
        for h in r.hypotheses:
            assert h[:len(p)] == p, (h, p)
            assert all(any(h[i:i + len(x)] == x for i in range(len(h))) for x in c), (h, c)
    streamed = translator.translate_iterable(iter(pieces), iter(prefix_tokens), max_batch_size=4, beam_size=4,
                                             num_hypotheses=2, constraints=None)
    assert [r.hypotheses[0][:2] for r in streamed] == prefix_tokens
    with pytest.raises(ValueError, match="constraints has 1 entries for 6 sources"):
        translator.translate_batch(pieces, constraints=[[]])
    with pytest.raises(ValueError, match="target_prefix has 2 entries for 6 lines"):
        translator.translate(sources, target_prefix=["a", "b"])
    with pytest.raises(ValueError, match="not to sampling"):
        translator.translate(sources[0], constraints=["Haus"], beam_size=1, sampling_topk=5)


def test_use_vmap_decodes_over_the_directorys_shortlist_as_the_cli(model_dir, translator, tmp_path):
    # The shortlist CTranslate2 reads from its directory (vmap.txt) is ours as shortlist.json.
    with pytest.raises(ValueError, match="shortlist.json"):
        translator.translate(SOURCES[:2], use_vmap=True)
    pairs = [(s, t) for s, t in zip(REFERENCE["sources"], REFERENCE["targets"]) if s.strip() and t.strip()]
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    source = tmp_path / "source.txt"
    source.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    model = ["--checkpoint", model_dir / "model.safetensors", "--tokenizer", model_dir / "tokenizer.json"]
    search = ["--beam", 2, "--alpha", 1, "--length-norm", "marian", "--patience", 1, "--max-len-a", 0, "--max-len-b", 256, "--end-at-limit",
              "--min-len", 1, "--workers", 1]
    for name in ["every", "small"]:
        directory = tmp_path / name
        shutil.copytree(model_dir, directory)
        # One target a source token, no frequent ones.
        run_cli("shortlist", *model, "--src", tmp_path / "src.txt", "--tgt", tmp_path / "tgt.txt",
                "--per-source", 1, "--frequent", 0, "--output", directory / "shortlist.json")
        if name == "every":
            # Every id of the vocabulary listed as frequent (the file's documented format).
            table = json.loads((directory / "shortlist.json").read_text(encoding="utf-8"))
            table["frequent"] = list(range(table["vocab_size"]))
            (directory / "shortlist.json").write_text(json.dumps(table), encoding="utf-8")
        want = run_cli("translate", *model, *search, "--shortlist", directory / "shortlist.json",
                       "--input", source).splitlines()
        t = transformer.Translator(str(directory))
        assert t.translate(SOURCES, use_vmap=True) == want
        # Without use_vmap the directory's list is not used.
        assert t.translate(SOURCES) == translator.translate(SOURCES)
        pieces = [r.hypotheses[0] for r in t.translate_batch([t.tokenize(s) for s in SOURCES], use_vmap=True)]
        if name == "every":
            # Every id listed: the whole vocabulary's output.
            assert want == translator.translate(SOURCES)
        else:
            # One target a source token, no frequent ones: only the training targets' pieces.
            vocab = json.loads((FIXTURE / "hf" / "vocab.json").read_text(encoding="utf-8"))
            piece = {i: p for p, i in vocab.items()}
            listed = {piece[i] for ids in REFERENCE["target_ids"] for i in ids} | {"<unk>"}
            assert all(set(h) <= listed for h in pieces), pieces
            assert want != translator.translate(SOURCES)


def test_return_attention_is_the_clis_soft_alignment(model_dir, translator, tmp_path):
    # CTranslate2's attention vectors: per hypothesis, a row per output token over the source
    # tokens; ours the mean of the last layer's heads, as `translate --alignment soft` writes it.
    sources = SOURCES[:5]
    (tmp_path / "source.txt").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    lines = run_cli("translate", "--checkpoint", model_dir / "model.safetensors", "--tokenizer",
                    model_dir / "tokenizer.json", "--beam", 2, "--alpha", 1, "--length-norm", "marian", "--patience", 1,
                    "--max-len-a", 0, "--max-len-b", 256, "--end-at-limit", "--min-len", 1, "--workers", 1,
                    "--input", tmp_path / "source.txt", "--alignment", "soft").splitlines()
    pieces = [translator.tokenize(s) for s in sources]
    results = translator.translate_batch(pieces, return_attention=True)
    later = translator.translate_batch(pieces, return_attention=True, asynchronous=True)
    for line, r, a, src in zip(lines, results, later, pieces):
        text, soft = line.split(" ||| ")
        want = [[float(w) for w in row.split(",")] for row in soft.split()]
        (got,) = r.attention
        assert len(got) == len(r.hypotheses[0]) == len(want)
        assert all(len(row) == len(src) for row in got)
        for g, w in zip(got, want):
            assert g == pytest.approx(w, rel=1e-4, abs=1e-6)
        assert a.result().attention == r.attention
        assert translator.detokenize(r.hypotheses[0]) == text
    assert translator.translate_batch(pieces[:1])[0].attention == []


def test_threads_in_parallel_give_the_serial_outputs(translator):
    batches = [[translator.tokenize(s) for s in SOURCES[i::4]] for i in range(4)]
    serial = [[r.hypotheses for r in translator.translate_batch(b, beam_size=3)] for b in batches]
    texts = translator.translate(SOURCES, beam_size=3)
    parallel = [None] * 4
    text_parallel = [None] * 2

    def work(i):
        parallel[i] = [r.hypotheses for r in translator.translate_batch(batches[i], beam_size=3)]

    def text(i):
        text_parallel[i] = translator.translate(SOURCES, beam_size=3)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=text, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert parallel == serial
    assert text_parallel == [texts, texts]


def test_ctrl_c_interrupts_a_long_call_and_leaves_the_translator_usable(translator):
    src = [translator.tokenize(s) for s in SOURCES] * 300
    before = translator.translate(SOURCES[:4])
    start = time.perf_counter()
    translator.translate_batch(src, beam_size=4)
    full = time.perf_counter() - start
    timer = threading.Timer(0.1 * full, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        translator.translate_batch(src, beam_size=4)
    stopped = time.perf_counter() - start
    timer.join()
    # It stops after the batch it is on, long before the call would have ended.
    assert stopped < 0.6 * full, (stopped, full)
    assert translator.translate(SOURCES[:4]) == before


def test_a_panic_is_a_runtime_error_and_the_process_goes_on(translator):
    with pytest.raises(RuntimeError, match="internal error in transformer .*: a bug on purpose"):
        transformer._panic_inside_a_call("a bug on purpose")
    assert len(translator.translate(SOURCES[:3])) == 3


def test_errors_are_the_exceptions_python_expects(model_dir, translator, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        transformer.Translator(str(tmp_path / "missing"))
    assert transformer.model_files(str(model_dir)) == (str(model_dir / "model.safetensors"),
                                                       str(model_dir / "tokenizer.json"))
    with pytest.raises(ValueError, match="holds no checkpoint"):
        transformer.model_files(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        translator.translate_file(str(tmp_path / "missing.txt"), str(tmp_path / "out.txt"))
    # What the search cannot honour yet is a ValueError naming the argument.
    for kwargs in [{"coverage_penalty": 0.2}, {"patience": 0.0}, {"return_alternatives": True}]:
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            translator.translate_batch([["▁Hallo"]], **kwargs)
    with pytest.raises(ValueError, match="compute_type \"float16\" is not supported"):
        transformer.Translator(str(model_dir), compute_type="float16")
    with pytest.raises(ValueError, match="text must be a string or a list of strings"):
        translator.translate(3)
    with pytest.raises(ValueError, match="2 hypotheses but 1 reference|hypotheses"):
        transformer.bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="1 gold trees and 2 test trees"):
        transformer.evalb(["(S (X a))"], ["(S (X a))", "(S (X b))"])


def sacrebleu_cases(metric):
    cases = json.loads((ROOT / "crates" / "transformer" / "tests" / "fixtures" / "sacrebleu.json").read_text("utf-8"))
    return [c for c in cases["cases"] if c["metric"] == metric]


@pytest.mark.parametrize("metric", ["bleu", "chrf"])
def test_bleu_and_chrf_equal_sacrebleu_on_every_fixture_case(metric):
    cases = sacrebleu_cases(metric)
    assert len(cases) >= 25
    score = {"bleu": transformer.bleu, "chrf": transformer.chrf}[metric]
    for c in cases:
        got = score(c["hyps"], c["refs"], **c["options"])
        assert abs(got.score - c["score"]) < 1e-9, c["name"]
        assert str(got) == c["line"], c["name"]
        assert float(got) == got.score
    one = transformer.bleu(["The cat sat on the mat."], ["The cat sat on the mat."])
    assert one.score == pytest.approx(100.0, abs=1e-9) and one.precisions == [100.0] * 4
    assert one.sys_len == one.ref_len == 7


def test_evalb_equals_the_real_evalb_on_the_projects_trees():
    cases = sorted(p for p in (ROOT / "tests" / "evalb").iterdir() if (p / "evalb.out").is_file())
    compared = 0
    for case in cases:
        want = (case / "evalb.out").read_text(encoding="utf-8")
        gold = (case / "gold.txt").read_text(encoding="utf-8").splitlines()
        test = (case / "test.txt").read_text(encoding="utf-8").splitlines()
        if "=== Summary ===" not in want or len(gold) != len(test):
            continue  # EVALB stopped early there (our scorer goes on): tests/evalb.rs covers those
        got = transformer.evalb(gold, test)
        assert got.report == want, case.name
        compared += 1
    assert compared >= 10, compared


@pytest.fixture(scope="module")
def parser_dir(tmp_path_factory):
    """A seconds-long parsing quick start on the project's own treebank (tests/treebank)."""
    out = tmp_path_factory.mktemp("parser") / "out"
    run_cli("quickstart", "--task", "parsing", "--minutes", "0.1", "--test-sentences", "2", "--treebank",
            ROOT / "tests" / "treebank", "--train-files", "own_0001..own_0030", "--valid-files",
            "own_0031..own_0031", "--test-files", "own_0036..own_0036", "--output", out)
    return out


def test_the_parser_gives_the_clis_trees(parser_dir, tmp_path):
    words = ["The board met on Tuesday .", "Sales rose 11 % ."]
    source = tmp_path / "words.txt"
    source.write_text("".join(w + "\n" for w in words), encoding="utf-8")
    want = run_cli("parse", "--constrained", "--workers", 1, "--checkpoint", parser_dir / "model.safetensors",
                   "--tokenizer", parser_dir / "run" / "vocab.json", "--input", source).splitlines()
    p = transformer.Parser(str(parser_dir))
    got = p.parse(words)
    assert got == want
    # Constrained: each a tree over exactly the sentence's words.
    for tree, sentence in zip(got, words):
        leaves = [tok.rstrip(")") for tok in tree.split() if tok.endswith(")") and not tok.startswith("(")]
        assert leaves == sentence.split(), tree
    assert p.parse(["The board met on Tuesday."], tokenize=True) == want[:1]
    # A parser is not a translator, and the other way round.
    with pytest.raises(ValueError, match="is a parsing model, not a translation one"):
        transformer.Translator(str(parser_dir))
    with pytest.raises(ValueError, match="beam_size must be at least 1"):
        p.parse(words, beam_size=0)


def tiny_run(out, steps, **more):
    """configs/tiny-test.toml's overrides: its run in `out`, `steps` updates, a validation every 10."""
    return {"train.output_dir": str(out), "data.bpe": str(out / "bpe.json"), "train.max_steps": steps,
            "train.valid_steps": 10, **more}


def records(run_dir):
    """metrics.jsonl without wall times."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [{k: v for k, v in json.loads(l).items() if k != "seconds"} for l in lines]


def test_training_from_python_is_the_clis_run_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository, as for the CLI
    out = tmp_path / "py"
    events = []
    summary = transformer.train("configs/tiny-test.toml", overrides=tiny_run(out, 20), on_event=events.append)
    assert summary["step"] == 20 and summary["stopped"] == "reached 20 steps", summary
    assert pathlib.Path(summary["checkpoint"]).is_file()
    updates = [e for e in events if e["kind"] == "update"]
    assert [u["step"] for u in updates] == list(range(1, 21))
    assert all(u["loss"] > 0 and u["lr"] > 0 for u in updates)
    valid = [e for e in events if e["kind"] == "validation"]
    # Every 10 updates, and at the end of the epoch (15 updates of val.en's 1,014 lines).
    assert [v["step"] for v in valid] == [10, 15, 20] and all(v["record"] == "valid" and v["ppl"] > 1 for v in valid)
    assert [e["step"] for e in events if e["kind"] == "checkpoint"] == [10, 20]
    assert any(e["kind"] == "log" and "stopped: reached 20 steps" in e["message"] for e in events)
    # The CLI's run of the same command writes the same records.
    cli_out = tmp_path / "cli"
    sets = [a for k, v in tiny_run(cli_out, 20).items() for a in ("--set", f"{k}={v}")]
    run_cli("train", "--config", "configs/tiny-test.toml", *sets)
    assert records(out) == records(cli_out)
    # A second call resumes the run directory.
    events.clear()
    summary = transformer.train("configs/tiny-test.toml", overrides=tiny_run(out, 30), on_event=events.append)
    assert summary["step"] == 30
    assert [e["step"] for e in events if e["kind"] == "update"] == list(range(21, 31))
    with pytest.raises(ValueError, match="override value"):
        transformer.train("configs/tiny-test.toml", overrides={"train.max_steps": object()})
    with pytest.raises(FileNotFoundError):
        transformer.train("configs/no-such.toml")


def test_a_training_run_stops_cleanly_on_ctrl_c_or_a_callback_error(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"

    def stop_at(step):
        def callback(e):
            if e["kind"] == "update" and e["step"] == step:
                raise RuntimeError(f"stop at {step}")
        return callback

    with pytest.raises(RuntimeError, match="stop at 7"):
        transformer.train("configs/tiny-test.toml", overrides=tiny_run(out, 1000), on_event=stop_at(7))
    # Stopped before the next update, its checkpoint written: the run resumes from step 7.
    assert max(out.glob("ckpt-*.safetensors")).name == "ckpt-00000007.safetensors"
    steps = []

    def interrupt(e):
        if e["kind"] == "update":
            steps.append(e["step"])
            if e["step"] == 12:
                os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        transformer.train("configs/tiny-test.toml", overrides=tiny_run(out, 1000), on_event=interrupt)
    assert steps[0] == 8 and steps[-1] >= 12, steps
    assert max(out.glob("ckpt-*.safetensors")).name == f"ckpt-{steps[-1]:08d}.safetensors"
