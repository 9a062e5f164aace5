"""Every method's records on a tiny movie graph are still those checked in under
tests/golden/methods/ (predictions, traces and store calls; regenerate with
``python -m tests.method_outputs`` and review the diff)."""
from __future__ import annotations

import json

import pytest

from engine.open import open_store
from tests.method_outputs import GOLDEN, OPTIONS, TRIPLES, outputs, same


@pytest.fixture(scope="module")
def movie_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("movies") / "store"
    with open_store(str(path)) as store:
        store.add_triples(TRIPLES)
    with open_store(str(path), read_only=True) as store:
        yield store


@pytest.mark.model
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_a_methods_records_are_the_golden_ones(name, movie_store, tmp_path):
    path = GOLDEN / f"{name}.json"
    assert path.exists(), f"{path} is missing: run python -m tests.method_outputs {name}"
    differences = same(outputs(name, movie_store, tmp_path), json.loads(path.read_text(encoding="utf-8")))
    assert not differences, (
        f"{name}'s records changed: if on purpose, run python -m tests.method_outputs {name} and review the diff\n"
        + "\n".join(differences[:20])
    )
