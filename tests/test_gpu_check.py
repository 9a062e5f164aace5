"""``make gpu-check`` (benchmarks/gpu_check.py): a clear stop where there is no GPU, and the
whole check run with the CPU standing in for the GPU, on the tiny local model."""
from __future__ import annotations

import json
import warnings

import pytest

from benchmarks import gpu_check
from engine.models.device import native_bf16


def test_without_a_gpu_the_check_stops_and_says_so(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == gpu_check.NO_GPU
    assert "no CUDA GPU here" in capsys.readouterr().err


@pytest.mark.shared_data
def test_the_check_runs_with_the_cpu_in_place_of_the_gpu(shared_data, tmp_path, capsys):
    from tests.tiny_lm import make_tiny_lm

    tiny = make_tiny_lm(tmp_path / "tiny")
    out = tmp_path / "gpu-check.json"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert gpu_check.main(["--gpu", "cpu", "--base", tiny, "--questions", "2", "--train-questions", "4",
                               "--workdir", str(tmp_path / "work"), "--out", str(out)]) == 0
    # the CPU standing in for the GPU trains in bf16 only where it computes bfloat16, else says so
    fell_back = [w for w in caught if "no bfloat16 arithmetic" in str(w.message)]
    assert bool(fell_back) == (not native_bf16("cpu"))
    results = json.loads(out.read_text())
    assert results["training"]["gpu"]["samples"] == results["training"]["cpu"]["samples"] > 0
    for method in ("rog", "ldr"):
        r = results["inference"][method]
        assert r["gpu"]["questions"] == r["cpu"]["questions"] == 4
        assert r["predictions_match"] == 1.0 and r["gpu"]["peak_memory_mib"] > 0  # the same device, the same answers
        assert r["gpu"]["hits1"] == r["cpu"]["hits1"] and 0 <= r["cpu"]["hits1"] <= 1
        assert r["gpu_float32"]["predictions_match_cpu"] == 1.0 and r["gpu_float32"]["dtype"] == "float32"
        # a larger batch gives the same answers (batched against one by one)
        assert r["gpu_large_batch"]["batch_size"] == 32 and r["gpu_large_batch"]["predictions_match_gpu"] == 1.0
    assert results["command"][0] == "python -m benchmarks.gpu_check" and "--questions" in results["command"]
    assert "predictions the same for 100%" in capsys.readouterr().out
