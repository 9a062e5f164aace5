"""Whole questions per second, per method: what a user waits for, split into store, model and
other time, with the store and LLM calls per question.

Each method runs exactly as ``kgqa <method> run`` runs it: the benchmark builds it from the
registry's spec (:mod:`engine.methods.registry`) with the config's defaults, which are the
command's, or with ``--recipe-runs DIR`` as its recipe (``full``, or the one ``--recipe
METHOD=NAME`` names) answers its test split, with the models that recipe's run in DIR trained
(:func:`engine.recipes.steps.answering_values`), and the
options given as ``--method-option METHOD.NAME=VALUE`` over either, on a store the
benchmark loaded, and answers a seeded sample of the held-out test split through
:func:`engine.methods.run.run_method`. Seconds and calls come from the run protocol's meter
(:mod:`engine.methods.run`); a method that cannot be built (no trained checkpoint, a model that
is not there) is listed as skipped with the reason, never dropped.
"""
from __future__ import annotations

import contextlib
import io
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import runner, sources
from engine.errors import InvalidInputError, KGQAError
from engine.methods import registry
from engine.methods.run import tokens_cell

#: the knowledge graphs the benchmark loads -> the question sets asked over each
QUESTION_SETS: dict[str, tuple[str, ...]] = {
    "metaqa": ("metaqa-1hop", "metaqa-2hop", "metaqa-3hop"),
    "pathquestion": ("pathquestion-2h", "pathquestion-3h"),
}
#: per-question seconds of the EtD paper's Table 3 (WebQSP, 7B models on GPUs), for scale
PAPER_ANCHORS = {"EtD": 1.29, "RoG": 1.98, "ToG": 16.7}


@dataclass
class MethodsConfig:
    methods: list[str]
    datasets: list[str]  # keys of QUESTION_SETS
    stores: list[str]  # oxigraph, virtuoso, bolt or a store URI
    questions: int  # per question set
    seed: int
    workdir: Path
    device: str | None = None
    #: config options per method (field names), e.g. {"rog": {"model": "models/rog", "k": "1"}}
    method_options: dict[str, dict[str, str]] = field(default_factory=dict)
    #: EtD checkpoints: <dir>/<question set>/best.pt (``kgqa etd train --checkpoint-dir``)
    etd_checkpoints: Path | None = None
    #: a ``kgqa reproduce`` work directory: each method answers as its recipe's run there does
    recipe_runs: Path | None = None
    #: method -> the recipe whose run it answers as, with ``recipe_runs`` (default: ``full``)
    recipes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


def answering_recipe(cfg: MethodsConfig, method: str) -> Any:
    """The recipe whose run in ``cfg.recipe_runs`` the method answers as."""
    from engine.recipes.recipe import DEFAULT_RECIPE, load_recipe

    return load_recipe(method, cfg.recipes.get(method, DEFAULT_RECIPE))


def method_config(cfg: MethodsConfig, method: str, spec: str, question_set: str) -> Any:
    """The method's config for one question set of the graph ``spec``, or why it cannot run."""
    from engine.methods.spec import make_config
    from engine.recipes.steps import answering_values

    options = cfg.method_options.get(method, {})
    values: dict[str, Any] = {}
    if cfg.recipe_runs is not None:
        values = answering_values(answering_recipe(cfg, method), question_set, cfg.recipe_runs, given=options)
    values.update(options)
    if method == "etd" and "checkpoint" not in values:
        checkpoint = (cfg.etd_checkpoints or Path("-")) / question_set / "best.pt"
        if not checkpoint.is_file():
            return f"no EtD checkpoint at {checkpoint}: train one with `kgqa etd train --dataset {question_set} --checkpoint-dir …`"
        values["checkpoint"] = str(checkpoint)
    if method == "fidelis" and "index" not in values:
        # one index per graph, kept in the workdir: every store of the same content shares it
        # (an index is keyed to the store's statistics, which a server and the embedded store agree on)
        values["index"] = str(cfg.workdir / "fidelis-index" / spec)
    return make_config(registry.get(method).config, values)


def answering_dtype(cfg: MethodsConfig, method: str) -> str | None:
    """The weight precision the method's models answer in: as its recipe's run answers, with ``recipe_runs``."""
    from engine.models.device import pick_device
    from engine.recipes.steps import answering_dtype as recipe_dtype

    return recipe_dtype(answering_recipe(cfg, method), pick_device(cfg.device)) if cfg.recipe_runs is not None else None


def run_one(cfg: MethodsConfig, method: str, config: Any, store: Any, question_set: str, out: Path) -> dict[str, Any]:
    """One method over one question set on an opened store, as its command runs it."""
    from engine.methods.run import run_method
    from engine.methods.spec import Models
    from loaders.datasets import QuestionSet

    chosen = QuestionSet(question_set, "test", sample=cfg.questions, seed=cfg.seed)
    models = Models(device=cfg.device, dtype=answering_dtype(cfg, method), questions=chosen, progress=False)
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # model loaders may print
        method_ = registry.get(method).build(config, store, models)
    setup = time.perf_counter() - started
    summary = run_method(method_, chosen.select(), out, progress=False)
    return {"setup_s": round(setup, 2), **summary}


def run_methods(cfg: MethodsConfig) -> dict[str, Any]:
    started = time.time()
    unknown = sorted(set(cfg.methods) - set(registry.names()))
    if unknown:
        raise KGQAError(f"unknown method(s) {', '.join(unknown)}: use {', '.join(registry.names())}")
    if cfg.recipe_runs is not None and cfg.etd_checkpoints is not None:
        raise InvalidInputError("--etd-checkpoints and --recipe-runs both name EtD's checkpoints: give one of them")
    if cfg.recipes and cfg.recipe_runs is None:
        raise InvalidInputError("--recipe names the recipe whose run in --recipe-runs WORKDIR a method answers as: give --recipe-runs too")
    for method in cfg.recipes:
        answering_recipe(cfg, method)  # an unknown method or recipe fails before any store loads
    stores = runner.Stores(runner.RunConfig(
        mode="methods", datasets=cfg.datasets, stores=cfg.stores, questions=cfg.questions, batch=1, batches=1,
        budget=0.0, seed=cfg.seed, workdir=cfg.workdir,
    ))
    out: dict[str, Any] = {
        "kind": "methods", "config": cfg.to_json(), "load_average_start": os.getloadavg(),
        "rows": [], "skipped": [], "stores": {}, "anchors_s_per_question": PAPER_ANCHORS,
    }
    predictions = cfg.workdir / "predictions"
    predictions.mkdir(parents=True, exist_ok=True)
    try:
        for spec in cfg.datasets:
            if spec not in QUESTION_SETS:
                raise KGQAError(f"unknown dataset {spec!r} for the methods benchmark: use {', '.join(QUESTION_SETS)}")
            ds = sources.dataset(spec, cfg.workdir, cfg.seed)
            for kind in cfg.stores:
                runner.log(f"== {ds.name} on {kind}")
                store = runner.load_store(stores, kind, ds, out["stores"])
                if store is None:
                    continue
                label = runner.store_label(kind)
                try:
                    for question_set in QUESTION_SETS[spec]:
                        for method in cfg.methods:
                            where = {"method": method, "dataset": question_set, "store": label}
                            try:
                                config = method_config(cfg, method, spec, question_set)
                            except KGQAError as e:
                                out["skipped"].append({**where, "reason": f"{type(e).__name__}: {e}"})
                                continue
                            if isinstance(config, str):
                                out["skipped"].append({**where, "reason": config})
                                continue
                            runner.log(f"   {method} on {question_set}")
                            try:
                                row = run_one(cfg, method, config, store, question_set,
                                              predictions / f"{method}-{question_set}-{label}.jsonl")
                            except KGQAError as e:
                                out["skipped"].append({**where, "reason": f"{type(e).__name__}: {e}"})
                                runner.log(traceback.format_exc())
                                continue
                            out["rows"].append({**where, "device": cfg.device or _device(), **row})
                finally:
                    stores.discard(kind, store, ds.name)
    finally:
        stores.close()
    out["seconds"] = round(time.time() - started, 1)
    return out


def _device() -> str:
    from engine.models.device import pick_device

    return pick_device()


def markdown(results: dict[str, Any]) -> str:
    """The results as a table per method, the paper anchors and what was skipped."""
    lines = [
        "# Whole questions per second",
        "",
        f"{results['config']['questions']} questions per set (seeded sample of the held-out test split, seed "
        f"{results['config']['seed']}); seconds and calls per question from the method-run protocol's meter. "
        "Anchors (EtD paper, Table 3, WebQSP, 7B models on GPUs): "
        + ", ".join(f"{k} {v} s" for k, v in results["anchors_s_per_question"].items()) + " per question.",
        "",
        ("| method | dataset | store | device | n | q/s | p50 s | p95 s | store s/q | model s/q | other s/q | store share "
        "| store calls/q | LLM calls/q | LLM tokens/q (in / out) | Hits@1 | F1 |"),
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["rows"]:
        s, c = r["seconds_per_question"], r["calls_per_question"]
        share = s["store"] / s["total"] if s["total"] else 0.0
        lines.append(
            f"| {r['method']} | {r['dataset']} | {r['store']} | {r['device']} | {r['questions']} | "
            f"{r.get('questions_per_second', 0):.2f} | {r['p50_seconds']:.3f} | {r['p95_seconds']:.3f} | "
            f"{s['store']:.4f} | {s['model']:.3f} | {s['other']:.3f} | {share:.2%} | {c['store']:.1f} | {c['llm']:.1f} | "
            f"{tokens_cell(r)} | {r['hits1']:.3f} | {r['f1']:.3f} |"
        )
    if results["skipped"]:
        lines += ["", "Skipped:", ""] + [f"- {s['method']} on {s['dataset']} ({s['store']}): {s['reason']}" for s in results["skipped"]]
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out: Path) -> list[Path]:
    """``methods.json`` and ``methods.md`` in ``out``."""
    import json
    from datetime import datetime, timezone

    from benchmarks.report import machine

    out.mkdir(parents=True, exist_ok=True)
    results = dict(results, machine=machine(), finished=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    results["machine"]["load_average_start"] = [round(x, 2) for x in results.pop("load_average_start", ())]
    paths = [out / "methods.json", out / "methods.md"]
    paths[0].write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    paths[1].write_text(markdown(results))
    return paths
