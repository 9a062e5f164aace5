"""``kgqa reproduce <method>`` (a recipe end to end, :mod:`engine.recipes.runner`) and
``kgqa report`` (results files → the docs' tables, :mod:`engine.recipes.report`)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.cli.common import add_output_arguments
from engine.errors import InvalidInputError


def register(sub: argparse._SubParsersAction) -> None:
    from engine.methods.registry import names
    from engine.recipes.recipe import DEFAULT_RECIPE, QUICK_RECIPE
    from engine.recipes.steps import RERUNNABLE

    p = sub.add_parser(
        "reproduce", help="run a method's recipe end to end: stores, training samples, training stages, validation and test",
        description="Run a recipe of engine/recipes/<method>.toml from a clean state, or on from where an earlier run "
        "stopped (finished steps are kept), and write results/<method>/<recipe>.json.",
    )
    p.add_argument("method", choices=names(), help="the method whose recipe runs")
    p.add_argument("--recipe", default=None, help=f"which recipe of the method's file (default {DEFAULT_RECIPE})")
    p.add_argument("--quick", action="store_true", help=f"the {QUICK_RECIPE!r} recipe: tiny sizes that prove the pipeline in minutes on a CPU")
    p.add_argument("--recipe-file", default=None, help="a recipe file of your own (default: the engine's engine/recipes/<method>.toml)")
    p.add_argument("--list", action="store_true", help="list the method's recipes and stop")
    p.add_argument("--rerun", action="append", choices=RERUNNABLE, default=[],
                   help="run these finished steps again: validate, evaluate (repeatable; after a change to the engine's "
                   "answering code, which no step's hash covers)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, with bf16; else cpu)")
    p.add_argument("--workdir", default="kgqa-data", help="stores, samples, models and predictions (default kgqa-data)")
    p.add_argument("--results", default="results", help="where results/<method>/<recipe>.json goes (default results)")
    p.add_argument("--data-dir", default=None, help="the datasets directory (default: $KGQA_DATA, else shared/data beside the checkout)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_output_arguments(p)
    p.set_defaults(handler=_reproduce)

    p = sub.add_parser("report", help="turn results files into the docs' markdown tables",
                       description="Write docs/generated/results-<method>.md and results-all.md from results/*/*.json.")
    p.add_argument("--results", default="results", help="the results directory (default results)")
    p.add_argument("--out", default="docs/generated", help="where the tables go (default docs/generated)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the tables that differ from the results, or the results files "
                   "whose recipe has changed since they were written")
    p.set_defaults(handler=_report)


def _recipe_name(args: argparse.Namespace) -> str:
    from engine.recipes.recipe import DEFAULT_RECIPE, QUICK_RECIPE

    if args.quick and args.recipe not in (None, QUICK_RECIPE):
        raise InvalidInputError(f"--quick runs the {QUICK_RECIPE!r} recipe: leave out --recipe {args.recipe}")
    return QUICK_RECIPE if args.quick else args.recipe or DEFAULT_RECIPE


def _reproduce(args: argparse.Namespace) -> None:
    from engine.recipes.recipe import load_recipe, recipe_file, recipe_names
    from engine.recipes.runner import reproduce

    path = Path(args.recipe_file) if args.recipe_file else recipe_file(args.method)
    if args.list:
        for name in recipe_names(args.method, path):
            print(f"{name}\t{' '.join(load_recipe(args.method, name, path).description.split())}")
        return
    results = reproduce(
        args.method, _recipe_name(args), recipe_path=path, workdir=Path(args.workdir), results_dir=Path(args.results),
        device=args.device, data_directory=Path(args.data_dir) if args.data_dir else None, progress=not args.no_progress,
        rerun=args.rerun,
    )
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
        return
    cpu = results["steps_cpu_seconds"]
    print(f"{args.method} recipe {results['recipe']!r} on {results['device']}: {results['wall_seconds']:,.0f} s this run, "
          f"{results['steps_seconds']:,.0f} s of steps from a clean state"
          + (f" ({cpu:,.0f} CPU seconds)" if cpu is not None else ""))
    for name, run in results["evaluation"].items():
        m = run["scores"]["overall"]["metrics"]
        shown = "  ".join(f"{k} {m[k]['value']:.3f}" for k in ("hits1", "hits1_any", "rog_hit", "macro_f1") if m.get(k, {}).get("value") is not None)
        print(f"  test {name} ({run['questions']} q): {shown}")
    print(f"results written to {results['results_file']}; `kgqa report` makes the docs' tables")


def _report(args: argparse.Namespace) -> None:
    from engine.recipes.report import stale_results, write_report

    changed = write_report(Path(args.results), Path(args.out), check=args.check)
    stale = stale_results(Path(args.results))
    for line in stale:
        print(f"kgqa report: {line}", file=sys.stderr)
    if args.check:
        if changed:
            raise SystemExit(f"kgqa report: {', '.join(changed)} differ from {args.results}: run `kgqa report` and commit them")
        if stale:
            raise SystemExit(f"kgqa report: {len(stale)} results file(s) no longer match their recipe (above)")
        print("the tables match the results, and every results file its recipe")
        return
    print(f"{len(changed)} table(s) written to {args.out}" + (f": {', '.join(changed)}" if changed else " (none changed)"))
