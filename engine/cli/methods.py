"""``kgqa <method> run`` and ``kgqa <method> export-training`` for every method of the registry,
built from its spec (:mod:`engine.methods.spec`): the run protocol's options and one flag per
config field. A method's other commands come from ``engine.cli.<method>`` (``add_commands``)
where it has one."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from engine.cli.common import (
    DATASET_HELP,
    add_device_arguments,
    add_output_arguments,
    add_config_arguments,
    add_question_arguments,
    add_store_arguments,
    config_from_args,
    given_options,
    open_from_args,
    question_set,
)
from engine.errors import InvalidInputError
from engine.methods.registry import specs
from engine.methods.spec import MethodSpec, Models
from engine.outputs import refuse_input_as_output, written_whole

if TYPE_CHECKING:
    from engine.models.sft import Sample


def register(sub: argparse._SubParsersAction) -> None:
    for spec in specs().values():
        _register_method(sub, spec)


def _register_method(sub: argparse._SubParsersAction, spec: MethodSpec) -> None:
    group = sub.add_parser(spec.name, help=spec.help, description=spec.help)
    commands = group.add_subparsers(dest=f"{spec.name}_command", required=True, metavar="COMMAND")

    p = commands.add_parser("run", help="answer a question set and write predictions JSONL")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    add_question_arguments(p, "test")
    add_device_arguments(p)
    p.add_argument("--out", default=f"{spec.name}-predictions.jsonl",
                   help=f"predictions JSONL (default {spec.name}-predictions.jsonl)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_store_arguments(p)
    _add_recipe_arguments(p, spec.name)
    add_output_arguments(p)
    add_config_arguments(p, spec.config)
    p.set_defaults(handler=lambda args: run_from_args(spec, args))

    if spec.training_samples is not None:
        p = commands.add_parser("export-training", help="the language model's training samples, as the model sees them, as JSONL")
        p.add_argument("--dataset", required=True, help=DATASET_HELP)
        add_question_arguments(p, "train")
        p.add_argument("--out", required=True, help="JSONL file of {prompt, target, task, id} samples, for `kgqa lm train --data`")
        p.add_argument("--no-progress", action="store_true", help="no progress bar")
        add_store_arguments(p)
        add_output_arguments(p)
        add_config_arguments(p, spec.config)
        p.set_defaults(handler=lambda args: export_from_args(spec, args))

    extra = _command_module(spec.name)
    if extra is not None:
        extra.add_commands(commands)


def _add_recipe_arguments(p: argparse.ArgumentParser, method: str) -> None:
    p.add_argument("--recipe", default=None, metavar="NAME",
                   help=f"answer as the run of this recipe (`kgqa reproduce {method} --recipe NAME`) in --workdir answers its "
                   "test set: with the models it trained, its options and weight precision, and its store unless --store is "
                   "given; an option given here wins over the recipe's")
    p.add_argument("--recipe-file", default=None, help=f"with --recipe: a recipe file of your own (default engine/recipes/{method}.toml)")
    p.add_argument("--workdir", default="kgqa-data", help="with --recipe: the work directory of its run (default kgqa-data)")
    p.add_argument("--recipe-set", default=None, metavar="SET",
                   help="with --recipe: the recipe's test set whose options the questions take (default --dataset); "
                   "give it where --dataset is a question file of your own")


def _command_module(name: str) -> Any:
    """``engine.cli.<name>``, where a method's commands besides ``run`` live, if it has one."""
    try:
        return importlib.import_module(f"engine.cli.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"engine.cli.{name}":
            raise
        return None


def run_from_args(spec: MethodSpec, args: argparse.Namespace) -> dict[str, Any]:
    """``kgqa <method> run``: the selected questions answered through the run protocol."""
    from engine.methods.run import format_summary, run_method

    if not args.recipe and (args.recipe_file or args.recipe_set):
        raise InvalidInputError("--recipe-file and --recipe-set go with --recipe NAME: name the recipe whose run answers")
    recipe_values, dtype = _answer_as_recipe(spec, args) if args.recipe else ({}, args.dtype)
    config = config_from_args(spec.config, args, recipe_values)
    selection = question_set(args)
    questions = selection.select()
    if not questions:
        raise InvalidInputError(
            f"no questions selected from {args.dataset!r} (split {args.split!r}, sample {args.sample}, limit {args.limit}): "
            "nothing to answer; a small question file may need --split all"
        )
    models = Models(device=args.device, dtype=dtype, questions=selection)
    with open_from_args(args) as store:
        refuse_inputs_as_output(args, store)
        method = spec.build(config, store, models)
        with written_whole(args.out, keep_partial=True) as partial:
            summary = run_method(method, questions, partial, progress=not args.no_progress)
        summary["predictions"] = args.out
    summary = {"dataset": args.dataset, "split": args.split, **summary}
    print(json.dumps(summary, indent=2, ensure_ascii=False) if args.json else format_summary(summary))
    return summary


def refuse_inputs_as_output(args: argparse.Namespace, store: Any) -> None:
    """Refuse an ``--out`` that is one of the files the command reads (the question file, a MetaQA
    file's question types) or the store's folder: the output would replace it."""
    from loaders.datasets import dataset_files

    inputs = [*dataset_files(args.dataset), *([store.path] if getattr(store, "path", None) else [])]
    refuse_input_as_output(args.out, inputs, what="the output file", option="--out")


def _answer_as_recipe(spec: MethodSpec, args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """``--recipe``: the options and weight precision with which that recipe's run in ``--workdir``
    answers the test set the questions stand for; ``args.store`` and ``args.dataset`` become that
    set's store and question file where the command line leaves them to the recipe."""
    from pathlib import Path

    from engine.models.device import pick_device
    from engine.recipes.recipe import load_recipe
    from engine.recipes.steps import answering_dtype, answering_values, dataset_source, evaluated_set
    from engine.recipes.stores import loaded_store

    recipe = load_recipe(spec.name, args.recipe, Path(args.recipe_file) if args.recipe_file else None)
    workdir = Path(args.workdir)
    try:
        chosen = evaluated_set(recipe, args.recipe_set or args.dataset)
    except InvalidInputError as e:
        if args.recipe_set is not None:
            raise
        raise InvalidInputError(f"--dataset: {e}: give --recipe-set SET, the set whose options your questions take") from None
    values = answering_values(recipe, chosen.name, workdir, given=given_options(spec.config, args))
    if args.store is None:
        reproduce = f"kgqa reproduce {spec.name} --recipe {args.recipe} --workdir {workdir}"
        args.store = str(loaded_store(workdir, chosen.store, reproduce))
    if args.recipe_set is None:
        args.dataset = dataset_source(chosen.dataset, workdir)
    return values, args.dtype or answering_dtype(recipe, pick_device(args.device))


def export_from_args(spec: MethodSpec, args: argparse.Namespace) -> dict[str, Any]:
    """``kgqa <method> export-training``: the method's samples for the selected questions, in the
    one JSONL shape every method writes; the questions that gave none are counted."""
    from tqdm import tqdm

    from engine.models.sft import write_samples

    assert spec.training_samples is not None
    config = config_from_args(spec.config, args)
    questions = question_set(args).select()
    if not questions:
        raise InvalidInputError(f"no questions selected from {args.dataset!r} (split {args.split!r}): nothing to export")
    seen: set[str | None] = set()

    def noted(samples: Iterable[Sample]) -> Iterator[Sample]:
        for sample in samples:
            seen.add(sample.id)
            yield sample

    with open_from_args(args) as store:
        refuse_inputs_as_output(args, store)
        shown = tqdm(questions, desc=f"{spec.name} samples", unit="q", file=sys.stderr, disable=args.no_progress)
        with written_whole(args.out) as partial:
            counts = write_samples(noted(spec.training_samples(store, shown, config)), partial)
    report = {"questions": len(questions), "without_samples": sum(q.id not in seen for q in questions),
              "samples": counts, "out": args.out}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{sum(counts.values())} samples ({', '.join(f'{t} {n}' for t, n in counts.items()) or 'none'}) from "
              f"{len(questions)} questions written to {args.out}"
              + (f"; {report['without_samples']} questions gave none (no gold path in the store)" if report["without_samples"] else ""))
    return report
