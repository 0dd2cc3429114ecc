"""What both test files stand on: the OPUS-MT-shaped Marian fixture of the library's tests
(crates/transformer/tests/fixtures/marian/opus), imported once with `transformer.import_marian`,
and a `Translator` over it."""

import json
import pathlib

import pytest

import transformer

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "crates" / "transformer" / "tests" / "fixtures" / "marian" / "opus"
REFERENCE = json.loads((FIXTURE / "reference.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("opus")
    transformer.import_marian(str(FIXTURE / "hf"), str(out))
    return out


@pytest.fixture(scope="session")
def translator(model_dir):
    return transformer.Translator(str(model_dir))
