"""``make gpu-check``: the GPU against the CPU on the same work, in a few minutes.

1. One training stage of RoG's full recipe (its LoRA planner stage, for one epoch, on train-split
   planning samples of MetaQA-2hop and PQ-2H): on the GPU (bf16 autocast, as every recipe trains
   there) and on the CPU, from the same samples and seed: samples and target tokens per second,
   peak memory, losses.
2. Batched inference of two methods on the same test questions, each on the GPU (bf16 weights)
   and on the CPU (float32): RoG with the planner trained on the GPU, LDR with the offline model.
   Questions per second, peak memory, and the share of questions whose predictions are the same.

Results go to ``benchmarks/results/gpu-check/gpu-check.json`` (commit it). Without a CUDA GPU
the check stops at once and says so (exit status 2). ``--gpu cpu`` runs both sides on the CPU,
to try the script itself where no GPU is lent.

    python -m benchmarks.gpu_check [--workdir kgqa-data] [--questions 64] [--train-questions 128]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "results" / "gpu-check" / "gpu-check.json"
#: (dataset, store) pairs the check trains and answers on
SETS = (("metaqa-2hop", "metaqa"), ("pathquestion-2h", "pathquestion-2h"))
NO_GPU = 2


def _peak_reset(device: str) -> None:
    import torch

    from benchmarks.procstat import reset_peak

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_peak()


def _peak_mib(device: str) -> float | None:
    import torch

    from benchmarks.procstat import peak_rss_mib

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
        return round(torch.cuda.max_memory_allocated(device) / 2 ** 20, 1)
    return peak_rss_mib()


def _train(samples: list, base: str | None, out: Path, device: str) -> dict[str, Any]:
    """One epoch of the RoG full recipe's planner stage (its LoRA, learning rate, batch and seed)."""
    from engine.models.sft import SftConfig, train
    from engine.recipes.recipe import load_recipe

    _, template, settings = load_recipe("rog", "full").stages[0].lm_settings()
    config = SftConfig(**{**settings, "epochs": 1}, template=template, device=device)
    _peak_reset(device)
    started = time.perf_counter()
    summary = train(samples, base, out, config, progress=False)
    seconds = time.perf_counter() - started
    epoch = max(sum(summary.epoch_seconds), 0.1)  # the training pass alone (its seconds are rounded to 0.1)
    return {"device": summary.device, "samples": summary.examples, "seconds": round(seconds, 1),
            "samples_per_second": round(summary.examples / epoch, 2),
            "target_tokens_per_second": round(summary.target_tokens / epoch, 1),
            "train_loss": summary.train_loss, "peak_memory_mib": _peak_mib(device)}


def _answer(method: str, values: dict[str, Any], questions: dict[str, list], stores: dict, device: str) -> dict[str, Any]:
    from engine.methods.registry import get
    from engine.methods.run import run_method
    from engine.methods.spec import Models, make_config

    spec = get(method)
    config = make_config(spec.config, values)
    dtype = "bfloat16" if device.startswith("cuda") else None
    predictions: dict[str, list[str]] = {}
    seconds, count = 0.0, 0
    _peak_reset(device)
    for dataset, store_name in SETS:
        with stores[store_name].open() as store:
            built = spec.build(config, store, Models(device=device, dtype=dtype, progress=False))
            started = time.perf_counter()
            run_method(built, questions[dataset], None, progress=False,
                       on_record=lambda r, d=dataset: predictions.__setitem__(f"{d}/{r['id']}", r["prediction"]))
            seconds += time.perf_counter() - started
            count += len(questions[dataset])
    return {"device": device, "dtype": dtype or "float32", "questions": count, "seconds": round(seconds, 1),
            "questions_per_second": round(count / seconds, 3), "peak_memory_mib": _peak_mib(device), "predictions": predictions}


def _compare(gpu: dict[str, Any], cpu: dict[str, Any]) -> dict[str, Any]:
    a, b = gpu.pop("predictions"), cpu.pop("predictions")
    same = sum(a[k] == b.get(k) for k in a)
    return {"gpu": gpu, "cpu": cpu, "speedup": round(gpu["questions_per_second"] / cpu["questions_per_second"], 2),
            "predictions_match": round(same / max(len(a), 1), 4), "different": sorted(k for k in a if a[k] != b.get(k))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from engine.methods.registry import get
    from engine.recipes.runner import machine
    from engine.recipes.recipe import BUILT_IN
    from engine.recipes.stores import ensure_store
    from loaders.datasets import select_questions

    started = time.perf_counter()
    workdir = Path(args.workdir)
    stores = {name: ensure_store(BUILT_IN[name], workdir, progress=False) for name in {s for _, s in SETS}}
    rog = get("rog")
    samples = []
    for dataset, store_name in SETS:
        train_questions = select_questions(dataset, "train", sample=args.train_questions, seed=0)
        config = rog.config(training_targets="gold", prompt_tokens=None)
        with stores[store_name].open() as store:
            samples += [s for s in rog.training_samples(store, train_questions, config) if s.task == "planning"]
    questions = {d: select_questions(d, "test", sample=args.questions, seed=0) for d, _ in SETS}
    base = args.base
    check_dir = workdir / "gpu-check"
    training = {"gpu": _train(samples, base, check_dir / "planner-gpu", args.gpu),
                "cpu": _train(samples, base, check_dir / "planner-cpu", "cpu")}
    training["speedup"] = round(training["gpu"]["samples_per_second"] / training["cpu"]["samples_per_second"], 2)
    planner = str(check_dir / "planner-gpu")
    rog_values = {"model": planner, "plan_mode": "grounded", "k": 1, "answer_mode": "paths"}
    ldr_values = {"model": base} if base else {}
    inference = {
        "rog": _compare(_answer("rog", rog_values, questions, stores, args.gpu), _answer("rog", rog_values, questions, stores, "cpu")),
        "ldr": _compare(_answer("ldr", ldr_values, questions, stores, args.gpu), _answer("ldr", ldr_values, questions, stores, "cpu")),
    }
    return {
        "machine": machine(args.gpu), "torch_cuda": torch.version.cuda, "base_model": base or "SmolLM2-135M-Instruct (offline)",
        "sets": [d for d, _ in SETS], "train_questions_per_set": args.train_questions, "test_questions_per_set": args.questions,
        "training": training, "inference": inference, "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", default="cuda", help="the device to check against the CPU (default cuda)")
    p.add_argument("--workdir", default="kgqa-data", help="stores and models (default kgqa-data)")
    p.add_argument("--questions", type=int, default=64, help="test questions per set (default 64)")
    p.add_argument("--train-questions", type=int, default=128, help="train-split questions per set for the planner (default 128)")
    p.add_argument("--base", default=None, help="base model (default: the offline SmolLM2-135M-Instruct)")
    p.add_argument("--out", default=str(OUT), help=f"results file (default {OUT.relative_to(OUT.parents[3])})")
    args = p.parse_args(argv)
    if args.gpu.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"gpu-check: no CUDA GPU here (torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}): "
                  "nothing to check; run `make gpu-check` on a machine with one", file=sys.stderr)
            return NO_GPU
    results = run(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    t, i = results["training"], results["inference"]
    print(f"training: {t['gpu']['samples_per_second']} samples/s on {args.gpu} against {t['cpu']['samples_per_second']} on the CPU "
          f"({t['speedup']}x); peak {t['gpu']['peak_memory_mib']} / {t['cpu']['peak_memory_mib']} MiB")
    for name, r in i.items():
        print(f"{name}: {r['gpu']['questions_per_second']} q/s against {r['cpu']['questions_per_second']} ({r['speedup']}x); "
              f"predictions the same for {r['predictions_match']:.0%}")
    print(f"{results['seconds']:.0f} s; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
