"""``python -m benchmarks.training``: the four variants on the tiny local model, each from the same
weights on the same batches, so that their first losses agree."""
from __future__ import annotations

import json

import pytest

from benchmarks import training
from engine.errors import InvalidInputError
from engine.models.sft import Sample, write_samples


def test_every_variant_trains_on_the_same_batches(tmp_path):
    from tests.tiny_lm import make_tiny_lm

    tiny = make_tiny_lm(tmp_path / "tiny")
    samples = tmp_path / "samples.jsonl"
    write_samples([Sample(f"question {i}: who directed film {i}?", f"director {i % 3}") for i in range(24)], samples)
    out = tmp_path / "training.json"
    assert training.main(["--samples", str(samples), "--base", tiny, "--batches", "2", "--batch-size", "4",
                          "--out", str(out)]) == 0
    results = json.loads(out.read_text())
    variants = results["variants"]
    assert list(variants) == [name for name, _, _ in training.VARIANTS]
    assert all(v["batches"] == 2 and v["samples_per_second"] > 0 for v in variants.values())
    first = [v["first_batch_loss"] for v in variants.values()]
    # in float32 the engine's loss is the baseline's (only fewer positions projected); bf16 is close
    assert first[1] == pytest.approx(first[0], rel=1e-5)
    assert first[2] == pytest.approx(first[0], rel=0.05) and first[3] == pytest.approx(first[0], rel=0.05)
    assert variants["float32, every position"]["speedup"] == 1.0
    with pytest.raises(InvalidInputError, match="empty.jsonl.*holds no samples"):
        (tmp_path / "empty.jsonl").write_text("")
        training.main(["--samples", str(tmp_path / "empty.jsonl"), "--base", tiny, "--out", str(out)])
