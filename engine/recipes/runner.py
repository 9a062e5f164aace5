"""``kgqa reproduce``: a recipe from a clean state (or from where an earlier run stopped) to its
results file.

Order: the stores (loaded or reused), the sample sets, the training stages, the validation
sets, the test sets. The results file (``<results>/<method>/<recipe>.json``, a copy beside the
run's models in ``<workdir>/runs/<method>/<recipe>/results.json``) holds every step with its
hash, wall and CPU seconds, device, the machine it ran on (each but a store's) and whether it was
resumed; the scores of every validation and test set in every convention
(:mod:`engine.methods.scoring`), per hop count and question type; the commit, the recipe's hash,
the machine and the device.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine.cpu_time import cpu_seconds
from engine.errors import InvalidInputError
from engine.outputs import written_whole
from engine.recipes.recipe import TEST_SPLIT, VALIDATE_SPLIT, Recipe, load_recipe
from engine.recipes.steps import RERUNNABLE, Context, answer_set, answering_dtype, export_samples, train_stage
from engine.recipes.stores import ensure_store

#: the checkout this code runs from (where the commit is read)
ROOT = Path(__file__).resolve().parents[2]


def commit() -> dict[str, Any] | None:
    """The checkout's commit and whether tracked files differ from it; None outside a git checkout."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        return {"id": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.CalledProcessError):
        return None


def host() -> dict[str, Any]:
    """This machine's CPU model (None where unreadable), its bfloat16 instruction sets and its memory
    in GiB (None where unreadable), from /proc; no torch, so that any benchmark can record them."""
    found: dict[str, Any] = {"cpu": None, "bf16_instructions": [], "memory_gib": None}
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        found["cpu"] = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), None)
        flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
        found["bf16_instructions"] = sorted(f for f in set(flags) if f in ("avx512_bf16", "amx_bf16"))
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
        found["memory_gib"] = round(kib / 1024 ** 2, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return found


def machine(device: str) -> dict[str, Any]:
    """The CPU (model, its bfloat16 instruction sets, cores this process may use), memory, the GPU
    when the device is one, versions. The bfloat16 instructions say how fast bf16 autocast can be on
    this CPU (without them torch emulates bf16, which can be slower than float32)."""
    import torch

    this = host()
    found = {
        "cpu": this["cpu"] or platform.processor() or platform.machine(),
        "bf16_instructions": this["bf16_instructions"],
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "memory_gib": this["memory_gib"],
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return found


@contextmanager
def _environment(values: dict[str, str | None]) -> Iterator[None]:
    """Environment variables set while the recipe runs (those that are not None), then restored:
    ``$KGQA_DEVICE`` for trainers that pick their own device, ``$KGQA_DATA`` for every dataset reader."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _shown(path: Path) -> str:
    """``path`` relative to the checkout where it is inside it (results files name no home folders)."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _check_bases(r: Recipe) -> None:
    """Every training stage's base model that is not an earlier stage's output must be found now,
    not once the stage starts after the stores have loaded. (Not when the recipe is read: ``kgqa
    report`` reads recipes on machines that hold no models.)"""
    from engine.models.loading import local_source
    from engine.models.sources import model_source
    from engine.models.transformers_lm import LM_SOURCES

    for stage in r.stages:
        if stage.kind != "lm":
            continue
        base = stage.lm_settings()[0]
        if base is None or not base.startswith("@"):  # None: the offline default
            model_source(local_source(base), f"the base model of stage {stage.name!r} of {r.file}", LM_SOURCES)


def reproduce(
    method: str,
    recipe: str,
    *,
    recipe_path: Path | None = None,
    workdir: Path = Path("kgqa-data"),
    results_dir: Path = Path("results"),
    device: str | None = None,
    data_directory: Path | None = None,
    progress: bool = True,
    rerun: Collection[str] = (),
) -> dict[str, Any]:
    """Run ``method``'s recipe ``recipe`` and write its results file; the results. Steps of the
    kinds in ``rerun`` (:data:`engine.recipes.steps.RERUNNABLE`) run again though finished."""
    from engine.methods.registry import get
    from engine.models.device import pick_device

    started, cpu_started = time.perf_counter(), cpu_seconds()
    unknown = set(rerun) - set(RERUNNABLE)
    if unknown:
        raise InvalidInputError(f"cannot rerun {', '.join(sorted(unknown))}: steps that can run again are {', '.join(RERUNNABLE)}")
    r = load_recipe(method, recipe, recipe_path)
    device = pick_device(device)
    workdir = Path(workdir)
    if workdir.exists() and not workdir.is_dir():
        raise InvalidInputError(f"--workdir {workdir} is a file: give a directory (made where it does not exist)")
    _check_bases(r)
    dtype = answering_dtype(r, device)
    ctx = Context(r, get(method), workdir, {}, device, dtype, progress, data_directory, frozenset(rerun), machine(device))
    steps: list[dict[str, Any]] = []
    from loaders.datasets import DATA_ENV

    with _environment({"KGQA_DEVICE": device, DATA_ENV: str(data_directory) if data_directory else None}):
        for name, source in r.stores.items():
            print(f"kgqa reproduce: store:{name} …", file=sys.stderr)
            ready = ensure_store(source, workdir, data_directory=data_directory, progress=progress)
            said = f"loaded before, reused ({ready.seconds:.0f} s then)" if ready.reused else f"{ready.seconds:.0f} s"
            print(f"kgqa reproduce: store:{name}: {said}", file=sys.stderr)
            ctx.stores[name] = ready
            steps.append({"step": f"store:{name}", "kind": "store", "hash": ready.content, "seconds": ready.seconds,
                          "cpu_seconds": ready.cpu_seconds, "device": "cpu", "resumed": ready.reused, "triples": ready.triples})
        steps += [export_samples(ctx, s) for s in r.samples]
        steps += [train_stage(ctx, stage) for stage in r.stages]
        validation = {e.name: answer_set(ctx, e, VALIDATE_SPLIT) for e in r.validate}
        evaluation = {e.name: answer_set(ctx, e, TEST_SPLIT) for e in r.evaluate}
    every = [*steps, *validation.values(), *evaluation.values()]
    cpu = [s["cpu_seconds"] for s in every]
    results = {
        "method": method,
        "recipe": recipe,
        "description": r.description,
        "recipe_file": _shown(r.file),
        "recipe_hash": r.hash,
        "commit": commit(),
        "machine": ctx.machine,
        "device": device,
        "dtype": ctx.dtype or "float32",
        "wall_seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(cpu_seconds() - cpu_started, 1),
        # every step's own time, resumed ones as they took when they ran: the recipe's cost from a clean state
        "steps_seconds": round(sum(s["seconds"] for s in every), 1),
        # None where a step's CPU seconds were not recorded (a step finished by an older engine)
        "steps_cpu_seconds": None if None in cpu else round(sum(cpu), 1),
        "steps": steps,
        "validation": validation,
        "evaluation": evaluation,
    }
    text = json.dumps(results, indent=2, ensure_ascii=False) + "\n"
    out = Path(results_dir) / method / f"{recipe}.json"
    for path in (out, ctx.run_dir / "results.json"):
        with written_whole(path) as partial:  # a run stopped here leaves the results file before it whole
            partial.write_text(text, encoding="utf-8")
    results["results_file"] = str(out)
    return results
