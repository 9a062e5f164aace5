"""``kgqa bench load|retrieval|methods|overhead|generate`` and ``python -m benchmarks …``.

``add_arguments(parser)`` puts the sub-commands on any argparse parser (the ``kgqa`` CLI uses
it); ``main(argv)`` runs them.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import report, runner, sources

_HERE = Path(__file__).resolve().parent
#: where a run's results go by default: beside the code in a checkout (benchmarks/results/<mode>);
#: an installed copy writes under its --workdir instead of into site-packages
RESULTS_DIR = _HERE / "results" if (_HERE.parent / "pyproject.toml").is_file() else None
DEFAULT_STORES = "oxigraph,virtuoso,bolt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", required=True, metavar="{retrieval,load,methods,overhead,generate}")
    for name, text in (
        ("retrieval", "time every retrieval operation on every store against the baselines"),
        ("load", "time loading through the engine against each store's native bulk loader"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        mode = p.add_mutually_exclusive_group()
        mode.add_argument("--quick", action="store_true", help="small samples, under two minutes (default: full)")
        mode.add_argument("--full", action="store_true", help="the full run (the default)")
        p.add_argument("--datasets", help="comma-separated: metaqa, pathquestion, fb15k237, gen:SIZE (e.g. gen:1M); "
                       f"quick: {','.join(runner.QUICK['datasets'])}; full: {','.join(runner.FULL['datasets'])}")
        p.add_argument("--stores", default=DEFAULT_STORES,
                       help=f"comma-separated store kinds started by the run (default {DEFAULT_STORES}); "
                       "one that cannot start is reported as skipped")
        p.add_argument("--store", action="append", default=[], metavar="URI",
                       help="also benchmark a running store (http://…/sparql, bolt://…); each dataset is loaded into it")
        p.add_argument("--questions", type=int, help="questions per MetaQA hop class, PathQuestion questions, random walks")
        p.add_argument("--batch", type=int, help="questions per batched follow_paths call")
        p.add_argument("--batches", type=int, help="batched calls per question group")
        p.add_argument("--budget", type=float, help="seconds per implementation and workload before later tasks are left out")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--workdir", type=Path, default=Path("kgqa-data") / "bench",
                       help="stores, servers and generated graphs (default kgqa-data/bench)")
        p.add_argument("--out", type=Path, help="where results go (default benchmarks/results/<mode> in a checkout, "
                       "else <workdir>/results/<mode>)")
        p.add_argument("--no-check", action="store_true", help="do not compare every answer with the floor's")
        p.set_defaults(bench_handler=_run)
    text = "whole questions per second per method (store, model and other time; store and LLM calls per question)"
    p = sub.add_parser("methods", help=text, description=text)
    p.add_argument("--methods", default="rog,etd,arg", help="comma-separated: rog, etd, arg, fidelis, ldr (default rog,etd,arg)")
    p.add_argument("--datasets", default="metaqa,pathquestion", help="comma-separated: metaqa, pathquestion (default both)")
    p.add_argument("--stores", default="oxigraph,virtuoso", help="comma-separated store kinds or URIs (default oxigraph,virtuoso)")
    p.add_argument("--questions", type=int, default=20, help="questions per question set (default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="torch device for every method (default: cuda when available)")
    p.add_argument("--method-args", action="append", default=[], metavar="METHOD=OPTIONS",
                   help='extra options of a method\'s run command, repeatable, e.g. rog="--model models/rog --plans 3"')
    p.add_argument("--etd-checkpoints", type=Path, default=None,
                   help="directory with <question set>/best.pt EtD checkpoints (without one, EtD is listed as skipped)")
    p.add_argument("--workdir", type=Path, default=Path("kgqa-data") / "bench", help="stores, servers, predictions")
    p.add_argument("--out", type=Path, help="where results go (default benchmarks/results/methods in a checkout)")
    p.set_defaults(bench_handler=_methods)

    text = "the engine's time over each store's own execution of the same compiled queries (a raw client)"
    p = sub.add_parser("overhead", help=text, description=text)
    p.add_argument("--quick", action="store_true", help="a few tasks per workload (default: full)")
    p.add_argument("--datasets", help="comma-separated: metaqa, pathquestion, fb15k237, gen:SIZE (default metaqa,fb15k237)")
    p.add_argument("--stores", default=DEFAULT_STORES, help=f"comma-separated store kinds (default {DEFAULT_STORES})")
    p.add_argument("--questions", type=int, help="questions per MetaQA hop class, random walks (quick 5, full 10)")
    p.add_argument("--repeats", type=int, help="timed runs of each side per task; the best counts (quick and full 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, default=Path("kgqa-data") / "bench", help="stores, servers, generated graphs")
    p.add_argument("--out", type=Path, help="where results go (default benchmarks/results/overhead in a checkout)")
    p.set_defaults(bench_handler=_overhead)

    p = sub.add_parser("generate", help="write a Freebase-shaped graph as N-Triples")
    p.add_argument("size", help="about how many triples: 1M, 250k, 10M …")
    p.add_argument("--out", type=Path, required=True, help="output file (.nt or .nt.gz)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(bench_handler=_generate)


def config(args: argparse.Namespace) -> runner.RunConfig:
    mode = "quick" if args.quick else "full"
    defaults = runner.QUICK if args.quick else runner.FULL
    stores = [s.strip() for s in args.stores.split(",") if s.strip()] + list(args.store)

    def pick(name: str):
        value = getattr(args, name)
        return defaults[name] if value is None else value

    return runner.RunConfig(
        mode=mode,
        datasets=[d.strip() for d in args.datasets.split(",")] if args.datasets else list(defaults["datasets"]),
        stores=stores,
        questions=pick("questions"),
        batch=pick("batch"),
        batches=pick("batches"),
        budget=pick("budget"),
        seed=args.seed,
        workdir=args.workdir.resolve(),
        check=not args.no_check,
        load_repeats=defaults["load_repeats"],
    )


def _run(args: argparse.Namespace) -> int:
    cfg = config(args)
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    results = runner.run_retrieval(cfg) if args.bench_command == "retrieval" else runner.run_load(cfg)
    out = args.out or (RESULTS_DIR or cfg.workdir / "results") / cfg.mode
    for path in report.write(results, out):
        print(path)
    return 0


def _methods(args: argparse.Namespace) -> int:
    from benchmarks import methods

    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]
    cfg = methods.MethodsConfig(
        methods=split(args.methods), datasets=split(args.datasets), stores=split(args.stores), questions=args.questions,
        seed=args.seed, workdir=args.workdir.resolve(), device=args.device,
        method_args=methods.parse_method_args(args.method_args), etd_checkpoints=args.etd_checkpoints,
    )
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    out = args.out or (RESULTS_DIR or cfg.workdir / "results") / "methods"
    for path in methods.write(methods.run_methods(cfg), out):
        print(path)
    return 0


def _overhead(args: argparse.Namespace) -> int:
    from benchmarks import overhead

    defaults = overhead.QUICK if args.quick else overhead.FULL
    cfg = overhead.OverheadConfig(
        datasets=[d.strip() for d in args.datasets.split(",")] if args.datasets else list(defaults["datasets"]),
        stores=[s.strip() for s in args.stores.split(",") if s.strip()],
        questions=args.questions or defaults["questions"], batch=defaults["batch"], batches=defaults["batches"],
        repeats=args.repeats or defaults["repeats"], seed=args.seed, workdir=args.workdir.resolve(),
    )
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    out = args.out or (RESULTS_DIR or cfg.workdir / "results") / ("overhead-quick" if args.quick else "overhead")
    for path in overhead.write(overhead.run_overhead(cfg), out):
        print(path)
    return 0


def _generate(args: argparse.Namespace) -> int:
    from benchmarks.generator import FreebaseGenerator

    generator = FreebaseGenerator(sources.parse_size(args.size), seed=args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    count = sources.write_ntriples(iter(generator), args.out)
    info = generator.info
    print(f"{args.out}: {count:,} triples, {info.entities:,} topic entities, {info.cvts:,} CVT nodes (seed {info.seed})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kgqa bench", description="Benchmarks: loading and retrieval on every store, beside the baselines.")
    add_arguments(parser)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    return args.bench_handler(args)
