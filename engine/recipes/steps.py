"""The steps of a recipe: export a sample set, train a stage, answer a validation or test set.

Each step has a hash of everything its output depends on (its definition, the content
fingerprint of its store, the bytes of its question file, the hashes of the steps it reads) and
writes ``<output>.done.json`` beside its output when it finishes, with that hash, its wall and
CPU seconds (:mod:`engine.cpu_time`) and what it reports. A step whose marker holds its hash is
not run again: its report is read back (``resumed``). A training stage that stopped part way goes
on from its last checkpoint (at most ``CHECKPOINT_SECONDS`` of training back).
"""
from __future__ import annotations

import hashlib
import json
import random
import shutil
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.cpu_time import cpu_seconds
from engine.errors import InvalidInputError
from engine.models import device as devices  # native_bf16 looked up at each call, as tests replace it
from engine.methods.spec import MethodSpec, make_config
from engine.outputs import written_whole
from engine.recipes.recipe import TEST_SPLIT, TRAIN_SPLIT, QuestionSelection, Recipe, Stage
from engine.recipes.stores import ReadyStore, built_dataset_dir, marker, read_record, write_record


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def run_directory(workdir: Path, recipe: Recipe) -> Path:
    """Where ``recipe``'s run in ``workdir`` keeps its samples, stages and predictions."""
    return workdir / "runs" / recipe.method / recipe.name


def stage_directory(run_dir: Path, stage: str) -> Path:
    return run_dir / "stages" / stage


def stage_output(run_dir: Path, reference: str) -> tuple[str, str, str]:
    """The stage, the file in its output and the path that ``"@stage[/file]"`` names in a run directory."""
    stage, _, file = reference[1:].partition("/")
    path = stage_directory(run_dir, stage)
    return stage, file, str(path / file if file else path)


def evaluated_set(recipe: Recipe, set_name: str) -> QuestionSelection:
    """The test set of ``recipe`` named ``set_name``; an error naming its sets where it has none of that name."""
    chosen = next((e for e in recipe.evaluate if e.name == set_name), None)
    if chosen is None:
        sets = ", ".join(e.name for e in recipe.evaluate)
        raise InvalidInputError(f"{recipe.method}'s {recipe.name} recipe answers no test set {set_name!r} (its sets: {sets})")
    return chosen


def dataset_source(dataset: str, workdir: Path) -> str:
    """What the dataset readers take for a recipe's ``dataset``: a built dataset's file under the
    work directory, else the name itself."""
    from loaders.datasets import BUILT_DATASETS

    if dataset in BUILT_DATASETS:
        return str(built_dataset_dir(workdir) / BUILT_DATASETS[dataset][0])
    return dataset


def answering_dtype(recipe: Recipe, device: str) -> str | None:
    """The weight precision ``recipe``'s run answers in on ``device`` (a picked device, not
    None): the recipe's ``dtype``, else bfloat16 on a CUDA GPU that has it, else the model's own. A device
    without bfloat16 arithmetic answers a recipe's bfloat16 in the model's own precision (with a
    warning): converted in software, bfloat16 would be several times slower there, not faster."""
    if recipe.dtype is None:
        return "bfloat16" if device.startswith("cuda") and devices.native_bf16(device) else None
    if recipe.dtype == "bfloat16" and not devices.bf16_or_warn(
        device, f"{recipe.method}'s {recipe.name} recipe answers in bfloat16, but ",
        ": answering in the model's own precision, which is faster here",
    ):
        return None
    return recipe.dtype


def answering_values(recipe: Recipe, set_name: str, workdir: Path, given: Collection[str] = ()) -> dict[str, Any]:
    """The option values with which ``recipe``'s run in ``workdir`` answers its test set
    ``set_name``, each ``"@stage"`` the path of what that run trained; an error naming the
    command to run where that stage has not finished there. Options in ``given``, which the
    caller sets itself, are left out."""
    chosen = evaluated_set(recipe, set_name)
    run_dir = run_directory(workdir, recipe)
    values: dict[str, Any] = {}
    for key, value in chosen.config.items():
        if key in given:
            continue
        if isinstance(value, str) and value.startswith("@"):
            stage, _, value = stage_output(run_dir, value)
            if _marked_done(stage_directory(run_dir, stage)) is None:
                recipe_flag = "" if recipe.name == "full" else f" --recipe {recipe.name}"
                raise InvalidInputError(f"{recipe.method}'s {recipe.name} recipe has not trained stage {stage!r} in "
                                        f"{workdir}: run `kgqa reproduce {recipe.method}{recipe_flag} --workdir {workdir}`")
        values[key] = value
    return values


@dataclass
class Context:
    """What every step of one ``kgqa reproduce`` run shares."""

    recipe: Recipe
    spec: MethodSpec
    workdir: Path
    stores: dict[str, ReadyStore]
    device: str
    dtype: str | None
    progress: bool = True
    data_directory: Path | None = None
    #: kinds of step (:data:`RERUNNABLE`) run again though marked done
    rerun: frozenset[str] = frozenset()
    #: the machine this run is on (``runner.machine``), recorded with each step it runs, so that a
    #: step resumed later, on another machine, still says where it ran
    machine: dict[str, Any] = field(default_factory=dict)
    #: step name -> its hash, as the steps finish
    hashes: dict[str, str] = field(default_factory=dict)
    _digests: dict[str, str] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return run_directory(self.workdir, self.recipe)

    def stage_dir(self, name: str) -> Path:
        return stage_directory(self.run_dir, name)

    def samples_file(self, name: str) -> Path:
        return self.run_dir / "samples" / f"{name}.jsonl"

    def dataset(self, dataset: str) -> str:
        """What the dataset readers take for ``dataset`` (:func:`dataset_source`)."""
        return dataset_source(dataset, self.workdir)

    def dataset_digest(self, dataset: str) -> str:
        """A hash of the question file behind ``dataset``."""
        from loaders.datasets import DATASETS, data_dir

        if dataset not in self._digests:
            path = data_dir(self.data_directory) / DATASETS[dataset] if dataset in DATASETS else Path(self.dataset(dataset))
            self._digests[dataset] = file_digest(path)
        return self._digests[dataset]

    def resolve(self, value: Any) -> tuple[Any, Any]:
        """A value as a step uses it and as its hash sees it: ``"@stage/file"`` is that stage's
        output path, and for the hash that stage's hash (the work directory may move)."""
        if not (isinstance(value, str) and value.startswith("@")):
            return value, value
        stage, file, path = stage_output(self.run_dir, value)
        return path, {"stage": self.hashes[f"stage:{stage}"], "file": file}

    def config(self, values: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The method's config from recipe values, and the values as its hash sees them."""
        resolved = {k: self.resolve(v) for k, v in values.items()}
        return make_config(self.spec.config, {k: v[0] for k, v in resolved.items()}), {k: v[1] for k, v in resolved.items()}


#: the steps that answer questions: a change to the engine's answering code changes what they
#: give, and no step hash covers code, so ``kgqa reproduce --rerun`` names them
RERUNNABLE = ("validate", "evaluate")


#: a step's report key: seconds its work took in earlier runs that stopped part way (a training
#: stage's time up to its checkpoint), counted in the step's seconds, the cost from a clean state
EARLIER_SECONDS = "seconds_before_resuming"
#: a step's report key: its CPU seconds in those earlier runs (None where they were not recorded,
#: which leaves the step's CPU seconds unknown)
EARLIER_CPU_SECONDS = "cpu_seconds_before_resuming"


def _marked_done(output: Path) -> dict[str, Any] | None:
    """The record of ``output``'s marker where it says the step finished and holds what a resumed
    step reports; None for a marker that cannot be read or lacks any of it, so the step runs again."""
    record = read_record(marker(output))
    if not record or record.get("state") != "done" or not isinstance(record.get("report"), dict):
        return None
    if not isinstance(record.get("seconds"), (int, float)) or not isinstance(record.get("device"), str):
        return None
    return record


def _finished(output: Path, wanted: str) -> dict[str, Any] | None:
    record = _marked_done(output)
    return record if record is not None and record.get("hash") == wanted else None


def _run_step(ctx: Context, name: str, kind: str, output: Path, wanted: str, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``work`` unless ``output`` is marked done with hash ``wanted``; the step's report."""
    ctx.hashes[name] = wanted
    record = None if name.split(":", 1)[0] in ctx.rerun else _finished(output, wanted)
    if record is not None:
        print(f"kgqa reproduce: {name}: done before, resumed ({record['seconds']:.0f} s then)", file=sys.stderr)
        return {"step": name, "kind": kind, "hash": wanted, "seconds": record["seconds"],
                "cpu_seconds": record.get("cpu_seconds"), "device": record["device"],
                "machine": record.get("machine"), "resumed": True, **record["report"]}
    print(f"kgqa reproduce: {name} …", file=sys.stderr)
    started, cpu_started = time.perf_counter(), cpu_seconds()
    report = work()
    seconds = round(time.perf_counter() - started + report.get(EARLIER_SECONDS, 0.0), 1)
    earlier_cpu = report.get(EARLIER_CPU_SECONDS, 0.0)
    cpu = None if earlier_cpu is None else round(cpu_seconds() - cpu_started + earlier_cpu, 1)
    write_record(marker(output), {"hash": wanted, "state": "done", "seconds": seconds, "cpu_seconds": cpu,
                                  "device": ctx.device, "machine": ctx.machine, "report": report})
    print(f"kgqa reproduce: {name}: {seconds:.0f} s", file=sys.stderr)
    return {"step": name, "kind": kind, "hash": wanted, "seconds": seconds, "cpu_seconds": cpu, "device": ctx.device,
            "machine": ctx.machine, "resumed": False, **report}


# ----------------------------------------------------------------------------- samples
def export_samples(ctx: Context, s: QuestionSelection) -> dict[str, Any]:
    """The method's training samples of ``s``'s questions (train split) as JSONL."""
    from loaders.datasets import select_questions

    assert ctx.spec.training_samples is not None
    config, seen_config = ctx.config({**ctx.recipe.config, **s.config})
    out = ctx.samples_file(s.name)
    wanted = digest({"step": "samples", "method": ctx.recipe.method, "dataset": ctx.dataset_digest(s.dataset),
                     "store": ctx.stores[s.store].content, "sample": s.sample, "seed": s.seed, "config": seen_config})

    def work() -> dict[str, Any]:
        from tqdm import tqdm

        from engine.models.sft import write_samples

        questions = select_questions(ctx.dataset(s.dataset), TRAIN_SPLIT, sample=s.sample, seed=s.seed,
                                     data_directory=ctx.data_directory)
        if not questions:
            raise InvalidInputError(f"sample set {s.name!r}: no questions in the train split of {s.dataset!r}")
        seen: set[str | None] = set()

        def noted(samples):
            for sample in samples:
                seen.add(sample.id)
                yield sample

        with ctx.stores[s.store].open() as store, written_whole(out) as partial:
            shown = tqdm(questions, desc=f"{s.name} samples", unit="q", file=sys.stderr, disable=not ctx.progress)
            counts = write_samples(noted(ctx.spec.training_samples(store, shown, config)), partial)
        return {"questions": len(questions), "without_samples": sum(q.id not in seen for q in questions), "samples": counts}

    return _run_step(ctx, f"samples:{s.name}", "samples", out, wanted, work)


# ----------------------------------------------------------------------------- stages
def train_stage(ctx: Context, stage: Stage) -> dict[str, Any]:
    return (_lm_stage if stage.kind == "lm" else _etd_stage)(ctx, stage)


def mix_samples(ctx: Context, stage: Stage) -> list[Any]:
    """The samples of a stage's mix: per part, the set's samples of ``tasks``, of at most
    ``questions`` of its questions (drawn with ``seed``)."""
    from engine.models.sft import read_samples

    found = []
    for part in stage.mix:
        rows = read_samples(ctx.samples_file(part.samples), part.tasks)
        if part.questions is not None:
            ids = sorted({str(r.id) for r in rows})
            chosen = set(random.Random(part.seed).sample(ids, min(part.questions, len(ids))))
            rows = [r for r in rows if str(r.id) in chosen]
        if not rows:
            raise InvalidInputError(f"stage {stage.name!r}: the sample set {part.samples!r} has no samples"
                                    + (f" of the tasks {', '.join(part.tasks)}" if part.tasks else ""))
        found += rows
    return found


def _lm_stage(ctx: Context, stage: Stage) -> dict[str, Any]:
    from engine.models.sft import SftConfig

    base_name, template, settings = stage.lm_settings()
    base, seen_base = ctx.resolve(base_name)
    out = ctx.stage_dir(stage.name)
    wanted = digest({"step": "lm", "settings": settings, "template": template, "base": seen_base,
                     "mix": [{**vars(p), "hash": ctx.hashes[f"samples:{p.samples}"]} for p in stage.mix]})

    def work() -> dict[str, Any]:
        from dataclasses import asdict

        from engine.models.run_folder import find_checkpoint
        from engine.models.sft import remove_checkpoints, train, trained_cpu_seconds, trained_seconds

        samples = mix_samples(ctx, stage)
        config = SftConfig(**settings, template=template, device=ctx.device)
        started = out.with_name(out.name + ".started.json")
        resume, earlier, earlier_cpu = None, 0.0, 0.0
        if (read_record(started) or {}).get("hash") == wanted and find_checkpoint(out) is not None:
            resume = out  # the same stage stopped part way: go on from its last checkpoint
            earlier, earlier_cpu = round(trained_seconds(out), 1), trained_cpu_seconds(out)
            earlier_cpu = None if earlier_cpu is None else round(earlier_cpu, 1)
        elif out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        write_record(started, {"hash": wanted})
        summary = asdict(train(samples, base, out, config, resume=resume, progress=ctx.progress))
        remove_checkpoints(out)  # the saved model is the stage's output
        started.unlink()
        return {"samples": len(samples), "continued_from_checkpoint": resume is not None, EARLIER_SECONDS: earlier,
                EARLIER_CPU_SECONDS: earlier_cpu,
                "training": {k: summary[k] for k in ("examples", "val_examples", "skipped", "tokens", "target_tokens", "epochs",
                                                     "best_epoch", "train_loss", "val_loss", "epoch_seconds", "device")}}

    return _run_step(ctx, f"stage:{stage.name}", "lm", out, wanted, work)


def _etd_stage(ctx: Context, stage: Stage) -> dict[str, Any]:
    assert stage.dataset is not None and stage.store is not None
    settings = dict(stage.settings)  # checked when the recipe was read
    init_from, seen_init = ctx.resolve(settings.pop("init_from", None))
    paper = settings.pop("paper_config", None) or stage.dataset
    out = ctx.stage_dir(stage.name)
    wanted = digest({"step": "etd", "settings": settings, "paper": paper, "init_from": seen_init,
                     "dataset": ctx.dataset_digest(stage.dataset), "store": ctx.stores[stage.store].content})

    def work() -> dict[str, Any]:
        from engine.methods.etd.config import TrainConfig
        from engine.methods.etd.training import train
        from loaders.datasets import load_dataset, split_questions

        config = TrainConfig.for_dataset(paper, **settings, init_from=init_from,
                                         encoding_cache=str(ctx.workdir / "cache" / "etd-encodings"))
        parts = split_questions(load_dataset(ctx.dataset(stage.dataset), ctx.data_directory), config.split_seed,
                                config.val_fraction, config.test_fraction)
        if out.exists():
            shutil.rmtree(out)
        with ctx.stores[stage.store].open() as store:
            summary = train(store, parts[TRAIN_SPLIT][: config.max_train], parts["val"], config, out, progress=ctx.progress)
        found = summary.to_json()
        return {"training": {k: found[k] for k in ("train_questions", "val_questions", "epochs", "best_epoch", "best_val_hits1",
                                                   "val_hits1", "epoch_seconds", "stopped_by", "device")}}

    return _run_step(ctx, f"stage:{stage.name}", "etd", out, wanted, work)


# ----------------------------------------------------------------------------- runs
def answer_set(ctx: Context, e: QuestionSelection, split: str) -> dict[str, Any]:
    """``e``'s questions of ``split`` answered through the run protocol, and their scores."""
    config, seen_config = ctx.config(e.config)
    out = ctx.run_dir / ("evaluate" if split == TEST_SPLIT else "validate") / f"{e.name}.jsonl"
    wanted = digest({"step": "run", "method": ctx.recipe.method, "split": split, "dataset": ctx.dataset_digest(e.dataset),
                     "store": ctx.stores[e.store].content, "sample": e.sample, "seed": e.seed, "config": seen_config,
                     # the precision the answers were computed in (float32, the CPU default, adds nothing)
                     **({"dtype": ctx.dtype} if ctx.dtype not in (None, "float32") else {})})

    def work() -> dict[str, Any]:
        from engine.methods.metrics import read_predictions
        from engine.methods.scoring import score
        from engine.methods.run import run_method
        from engine.methods.spec import Models
        from loaders.datasets import QuestionSet

        selection = QuestionSet(ctx.dataset(e.dataset), split, e.sample, None, e.seed)
        questions = selection.select()
        if not questions:
            raise InvalidInputError(f"set {e.name!r}: no questions in the {split} split of {e.dataset!r}")
        out.parent.mkdir(parents=True, exist_ok=True)
        models = Models(device=ctx.device, dtype=ctx.dtype, questions=selection, progress=ctx.progress)
        with ctx.stores[e.store].open() as store:
            method = ctx.spec.build(config, store, models)
            summary = run_method(method, questions, out, progress=ctx.progress)
        extra = summary.get(ctx.recipe.method) or {}
        tokens = summary.get("tokens_per_question")
        scores = score(read_predictions(out), default_set=e.name).to_json()
        return {
            "dataset": e.name, "split": split, "questions": len(questions), "sample": e.sample, "seed": e.seed,
            "scores": scores["sets"][e.name], "scoring": {k: scores[k] for k in ("match", "by", "bootstrap")},
            "seconds_per_question": summary["seconds_per_question"],
            "p50_seconds": summary["p50_seconds"], "p95_seconds": summary["p95_seconds"],
            "calls_per_question": summary["calls_per_question"],
            **({"tokens_per_question": tokens} if tokens else {}),
            **({"missing_topics": summary["missing_topics"]} if summary.get("missing_topics") else {}),
            "method": extra,
        }

    return _run_step(ctx, f"{'evaluate' if split == TEST_SPLIT else 'validate'}:{e.name}", "run", out, wanted, work)
