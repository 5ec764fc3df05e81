"""Shared fixtures. The tests import the package from this source tree (no install needed) and
find libember from EMBER_LIBRARY or the build tree, as the package itself does."""

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the source tree wins over an installed copy

import ember  # noqa: E402

REPO = HERE.parents[2]
MODEL = REPO / "models" / "ember-kjv-25m-q8_0.gguf"
PROMPT_TEXT = "And God said unto Moses, Behold"  # the reference prompt (../shared/models/README.md)


def ids(path: Path) -> list:
    return [int(t) for t in path.read_text().split()]


@pytest.fixture(scope="session")
def model():
    if not MODEL.exists():
        pytest.skip(f"the default model is missing: {MODEL}")
    with ember.Model(MODEL) as m:
        yield m


@pytest.fixture(scope="session")
def reference():
    """(prompt ids, greedy continuation ids) of the reference run (F32 KV cache)."""
    return ids(REPO / "models" / "ember-kjv-25m-q8_0.tokens.txt"), ids(REPO / "models" / "ember-kjv-25m-q8_0.greedy.txt")


@pytest.fixture
def ctx(model):
    # the reference ran with an F32 cache; with F16 its third step is a near-tie
    with ember.Context(model, n_ctx=128, kv_type="f32", n_threads=2) as c:
        yield c


def pytest_report_header(config):
    try:
        return f"ember: {ember.library_path()} (version {ember.version()})"
    except ember.Error as e:
        return f"ember: library not loaded: {e}"


os.environ.setdefault("SOURCE_DATE_EPOCH", "0")  # templates that print the date stay stable
