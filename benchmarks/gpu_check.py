"""``make gpu-check``: the GPU against the CPU on the same work, in a few minutes.

1. One training stage of RoG's full recipe (its LoRA planner stage, for one epoch, on train-split
   planning samples of MetaQA-2hop and PQ-2H): on the GPU and on the CPU, both in the stage's bf16
   autocast (float32 on a CPU without bfloat16 arithmetic; each record's device says which), from
   the same samples and seed: samples and target tokens per second,
   peak memory, losses. The GPU is warmed up first by one batch of the same training, so that its
   CUDA start-up is not counted against it.
2. Batched inference of two methods on the same test questions: RoG with the planner trained on
   the GPU, LDR with the offline model. Each on the GPU (bf16 weights) and on the CPU (float32) at
   the methods' default batch size: questions per second, peak memory, Hits@1, and the share of
   questions whose predictions are the same. Then on the GPU twice more: in float32 (does the GPU
   give the CPU's answers when the precision is the same?) and in bf16 at ``--gpu-batch`` (the
   throughput a GPU user would pick).

Results go to ``benchmarks/results/gpu-check/gpu-check.json`` (commit it; ``python -m docs.gen``
turns it into docs/generated/bench-gpu-check.md). Without a CUDA GPU the check stops at once and
says so (exit status 2). ``--gpu cpu`` runs every side on the CPU, to try the script itself where
no GPU is lent.

    python -m benchmarks.gpu_check [--workdir kgqa-data] [--questions 24] [--train-questions 64] [--gpu-batch 32]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from engine.cli.common import count

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
    summary = train(samples, base, out, config, progress=False, checkpoint_seconds=None)  # time training, not saves
    seconds = time.perf_counter() - started
    epoch = max(sum(summary.epoch_seconds), 0.1)  # the training pass alone (its seconds are rounded to 0.1)
    return {"device": summary.device, "samples": summary.examples, "seconds": round(seconds, 1),
            "samples_per_second": round(summary.examples / epoch, 2),
            "target_tokens_per_second": round(summary.target_tokens / epoch, 1),
            "train_loss": summary.train_loss, "peak_memory_mib": _peak_mib(device)}


def _answer(method: str, values: dict[str, Any], questions: dict[str, list], stores: dict, device: str,
            dtype: str | None) -> dict[str, Any]:
    """``method`` with ``values`` over every set's questions on ``device`` in ``dtype`` (None: float32)."""
    from engine.methods.registry import get
    from engine.methods.run import run_method
    from engine.methods.spec import Models, make_config

    spec = get(method)
    config = make_config(spec.config, values)
    predictions: dict[str, list[str]] = {}
    seconds, count, hits = 0.0, 0, 0.0
    _peak_reset(device)
    for dataset, store_name in SETS:
        with stores[store_name].open() as store:
            built = spec.build(config, store, Models(device=device, dtype=dtype, progress=False))
            started = time.perf_counter()
            summary = run_method(built, questions[dataset], None, progress=False,
                                 on_record=lambda r, d=dataset: predictions.__setitem__(f"{d}/{r['id']}", r["prediction"]))
            seconds += time.perf_counter() - started
            count += len(questions[dataset])
            hits += summary["hits1"] * len(questions[dataset])
    return {"device": device, "dtype": dtype or "float32", "batch_size": config.batch_size, "questions": count,
            "seconds": round(seconds, 1), "questions_per_second": round(count / seconds, 3),
            "peak_memory_mib": _peak_mib(device), "hits1": round(hits / max(count, 1), 4), "predictions": predictions}


def _same(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, list[str]]:
    """The share of ``a``'s questions that ``b`` answers alike, and those it does not."""
    pa, pb = a["predictions"], b["predictions"]
    different = sorted(k for k in pa if pa[k] != pb.get(k))
    return round(1 - len(different) / max(len(pa), 1), 4), different


def _inference(method: str, values: dict[str, Any], questions: dict[str, list], stores: dict, gpu: str,
               gpu_batch: int) -> dict[str, Any]:
    """One method on the GPU in bf16 and on the CPU in float32 at its default batch size, then on
    the GPU in float32 (the CPU's precision) and in bf16 at ``gpu_batch``."""
    bf16 = "bfloat16" if gpu.startswith("cuda") else None
    on_gpu = _answer(method, values, questions, stores, gpu, bf16)
    on_cpu = _answer(method, values, questions, stores, "cpu", None)
    float32 = _answer(method, values, questions, stores, gpu, "float32")
    large = _answer(method, {**values, "batch_size": gpu_batch}, questions, stores, gpu, bf16)
    match, different = _same(on_gpu, on_cpu)
    float32["predictions_match_cpu"], _ = _same(float32, on_cpu)
    large["predictions_match_gpu"], _ = _same(large, on_gpu)
    for side in (on_gpu, on_cpu, float32, large):
        side.pop("predictions")
    return {"gpu": on_gpu, "cpu": on_cpu, "speedup": round(on_gpu["questions_per_second"] / on_cpu["questions_per_second"], 2),
            "predictions_match": match, "different": different, "gpu_float32": float32, "gpu_large_batch": large}


def run(args: argparse.Namespace, command: list[str]) -> dict[str, Any]:
    import torch

    from engine.methods.registry import get
    from engine.recipes.recipe import BUILT_IN
    from engine.recipes.runner import machine
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
    _train(samples[:8], base, check_dir / "warm-up", args.gpu)  # CUDA's start-up, not counted below
    training = {"gpu": _train(samples, base, check_dir / "planner-gpu", args.gpu),
                "cpu": _train(samples, base, check_dir / "planner-cpu", "cpu")}
    training["speedup"] = round(training["gpu"]["samples_per_second"] / training["cpu"]["samples_per_second"], 2)
    planner = str(check_dir / "planner-gpu")
    rog_values = {"model": planner, "plan_mode": "grounded", "k": 1, "answer_mode": "paths"}
    ldr_values = {"model": base} if base else {}
    inference = {"rog": _inference("rog", rog_values, questions, stores, args.gpu, args.gpu_batch),
                 "ldr": _inference("ldr", ldr_values, questions, stores, args.gpu, args.gpu_batch)}
    return {
        "command": command, "machine": machine(args.gpu), "torch_cuda": torch.version.cuda,
        "base_model": base or "SmolLM2-135M-Instruct (offline)", "sets": [d for d, _ in SETS],
        "train_questions_per_set": args.train_questions, "test_questions_per_set": args.questions,
        "training": training, "inference": inference, "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", default="cuda", help="the device to check against the CPU (default cuda)")
    p.add_argument("--workdir", default="kgqa-data", help="stores and models (default kgqa-data)")
    p.add_argument("--questions", type=count, default=24, help="test questions per set (default 24)")
    p.add_argument("--train-questions", type=count, default=64, help="train-split questions per set for the planner (default 64)")
    p.add_argument("--gpu-batch", type=count, default=32, help="questions per batch of the GPU's large-batch run (default 32)")
    p.add_argument("--base", default=None, help="base model (default: the offline SmolLM2-135M-Instruct)")
    p.add_argument("--out", default=str(OUT), help=f"results file (default {OUT.relative_to(OUT.parents[3])})")
    args = p.parse_args(argv)
    if args.gpu.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"gpu-check: no CUDA GPU here (torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}): "
                  "nothing to check; run `make gpu-check` on a machine with one", file=sys.stderr)
            return NO_GPU
    results = run(args, ["python -m benchmarks.gpu_check", *(argv if argv is not None else sys.argv[1:])])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    t, i = results["training"], results["inference"]
    print(f"training: {t['gpu']['samples_per_second']} samples/s on {args.gpu} against {t['cpu']['samples_per_second']} on the CPU "
          f"({t['speedup']}x); peak {t['gpu']['peak_memory_mib']} / {t['cpu']['peak_memory_mib']} MiB")
    for name, r in i.items():
        f32, large = r["gpu_float32"], r["gpu_large_batch"]
        print(f"{name}: {r['gpu']['questions_per_second']} q/s against {r['cpu']['questions_per_second']} ({r['speedup']}x); "
              f"predictions the same for {r['predictions_match']:.0%}; Hits@1 {r['gpu']['hits1']} / {r['cpu']['hits1']}; "
              f"in float32 on {args.gpu} the same as the CPU's for {f32['predictions_match_cpu']:.0%}; "
              f"{large['questions_per_second']} q/s at batch {large['batch_size']}")
    print(f"{results['seconds']:.0f} s; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
