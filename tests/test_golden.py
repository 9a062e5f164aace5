"""The golden table: every dialect still compiles each operation to exactly the text and
parameters checked in under tests/golden/ (regenerate with ``python -m tests.golden_ops``)."""
from __future__ import annotations

import pytest

from engine.ops import OPERATIONS
from tests.golden_ops import CASES, GOLDEN, names, render


@pytest.mark.parametrize("name", names())
def test_compiled_text_matches_the_golden_file(name):
    path = GOLDEN / f"{name}.md"
    assert path.exists(), f"{path} is missing: run python -m tests.golden_ops"
    assert render(name) == path.read_text(encoding="utf-8"), (
        f"the compiled text of {name} changed: if on purpose, run python -m tests.golden_ops and review the diff"
    )


def test_every_operation_has_golden_cases():
    assert {op.name for op in CASES} == {op.name for op in OPERATIONS}
    assert sorted(p.stem for p in GOLDEN.glob("*.md")) == sorted(names())
