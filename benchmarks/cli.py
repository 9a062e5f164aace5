"""``kgqa bench load|retrieval|scale|methods|overhead|generate|limits|serve`` and ``python -m benchmarks …``.

``add_arguments(parser)`` puts the sub-commands on any argparse parser (the ``kgqa`` CLI uses
it); ``main(argv)`` runs them. A run writes its results and ``meta.json`` (the command, the
commit and the machine that produced them) into its ``--out`` folder.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import report, runner, scale, sources
from engine.cli.common import count, random_seed, seconds
from engine.errors import InvalidInputError
from engine.methods import registry

_HERE = Path(__file__).resolve().parent
#: where a run's results go by default: beside the code in a checkout (benchmarks/results/<benchmark>);
#: an installed copy writes under its --workdir instead of into site-packages
RESULTS_DIR = _HERE / "results" if (_HERE.parent / "pyproject.toml").is_file() else None
DEFAULT_STORES = "oxigraph,virtuoso,bolt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench_command", required=True, metavar="{retrieval,load,scale,methods,overhead,generate,limits,serve}")
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
        p.add_argument("--questions", type=count, help="questions per MetaQA hop class, PathQuestion questions, random walks")
        p.add_argument("--batch", type=count, help="questions per batched follow_paths call")
        p.add_argument("--batches", type=count, help="batched calls per question group")
        p.add_argument("--budget", type=seconds, help="seconds per implementation and workload before later tasks are left out")
        p.add_argument("--seed", type=random_seed, default=0, help="seed of every sample and generated graph (default 0)")
        p.add_argument("--workdir", type=Path, default=Path("kgqa-data") / "bench",
                       help="stores, servers and generated graphs (default kgqa-data/bench)")
        p.add_argument("--out", type=Path, help=f"where results go (default benchmarks/results/{name} in a checkout, "
                       f"else <workdir>/results/{name}; {name}-quick with --quick)")
        p.add_argument("--no-check", action="store_true", help="do not compare every answer with the floor's")
        p.set_defaults(bench_handler=_run)
    text = "generated Freebase-shaped graphs of growing size: load throughput, disk, memory, every workload, hub calls"
    p = sub.add_parser("scale", help=text, description=text)
    p.add_argument("--sizes", default=scale.DEFAULT_SIZES, help=f"comma-separated graph sizes in triples (default {scale.DEFAULT_SIZES}; 50M allowed)")
    p.add_argument("--stores", default=scale.DEFAULT_STORES, help=f"comma-separated: oxigraph, virtuoso (default {scale.DEFAULT_STORES}); servers are started by the run")
    p.add_argument("--questions", type=count, default=50, help="random walks per size (default 50)")
    p.add_argument("--batch", type=count, default=64, help="questions per batched follow_paths call (default 64)")
    p.add_argument("--batches", type=count, default=3, help="batched calls per size (default 3)")
    p.add_argument("--budget", type=seconds, default=20.0, help="seconds per store and workload before later tasks are left out (default 20)")
    p.add_argument("--hub-share", type=float, default=0.1, help="share of each graph's triples in the hub pool (default 0.1: 1M edges at 10M)")
    p.add_argument("--hub-limit", type=count, default=None, help="limit of the hub calls (default: the engine's default limit)")
    p.add_argument("--seed", type=random_seed, default=0, help="seed of every sample and generated graph (default 0)")
    p.add_argument("--workdir", type=Path, default=Path("kgqa-data") / "bench", help="stores, servers and generated graphs (default kgqa-data/bench)")
    p.add_argument("--out", type=Path, help="where results go (default benchmarks/results/scale in a checkout)")
    p.add_argument("--no-check", action="store_true", help="do not compare every answer with the floor's")
    p.add_argument("--virtuoso-buffer-pool-gib", type=float, default=None, metavar="GIB", help="the Virtuoso server's buffer pool (default ≈ 0.8 GiB, sized for tests beside it)")
    p.add_argument("--append", action="store_true", help="keep the sizes and stores of an earlier scale.json in --out that this run does not measure (e.g. add 50M to a 10M run, or Oxigraph to a Virtuoso run)")
    p.set_defaults(bench_handler=_scale)

    text = "whole questions per second per method (store, model and other time; store and LLM calls per question)"
    p = sub.add_parser("methods", help=text, description=text)
    p.add_argument("--methods", default="rog,etd,arg", help="comma-separated: rog, etd, arg, fidelis, ldr (default rog,etd,arg)")
    p.add_argument("--datasets", default="metaqa,pathquestion", help="comma-separated: metaqa, pathquestion (default both)")
    p.add_argument("--stores", default="oxigraph,virtuoso", help="comma-separated store kinds or URIs (default oxigraph,virtuoso)")
    p.add_argument("--questions", type=count, default=20, help="questions per question set (default 20)")
    p.add_argument("--seed", type=random_seed, default=0, help="seed of every sample and generated graph (default 0)")
    p.add_argument("--device", default=None, help="torch device for every method (default: cuda when available)")
    p.add_argument("--method-option", action="append", default=[], metavar="METHOD.OPTION=VALUE",
                   help="an option of a method's config (as `kgqa <method> run --help` lists them, with _ for -), "
                   "repeatable, e.g. rog.model=models/rog rog.k=3")
    p.add_argument("--etd-checkpoints", type=Path, default=None,
                   help="directory with <question set>/best.pt EtD checkpoints (without one, EtD is listed as skipped)")
    p.add_argument("--recipe-runs", type=Path, default=None, metavar="WORKDIR",
                   help="a `kgqa reproduce` work directory: each method answers as its recipe's test split does (its full "
                   "recipe unless --recipe names another), with the models that recipe's run there trained (a method whose "
                   "run has not trained is listed as skipped)")
    p.add_argument("--recipe", action="append", default=[], metavar="METHOD=NAME",
                   help="with --recipe-runs, the recipe whose run a method answers as, repeatable, e.g. arg=lora "
                   "(ARG's shipped generator; default: each method's full recipe)")
    p.add_argument("--workdir", type=Path, default=Path("kgqa-data") / "bench", help="stores, servers, predictions")
    p.add_argument("--out", type=Path, help="where results go (default benchmarks/results/methods in a checkout)")
    p.set_defaults(bench_handler=_methods)

    text = "the engine's time over each store's own execution of the same compiled queries (a raw client)"
    p = sub.add_parser("overhead", help=text, description=text)
    p.add_argument("--quick", action="store_true", help="a few tasks per workload (default: full)")
    p.add_argument("--datasets", help="comma-separated: metaqa, pathquestion, fb15k237, gen:SIZE (default metaqa,fb15k237)")
    p.add_argument("--stores", default=DEFAULT_STORES, help=f"comma-separated store kinds (default {DEFAULT_STORES})")
    p.add_argument("--questions", type=count, help="questions per MetaQA hop class, random walks (quick 5, full 10)")
    p.add_argument("--repeats", type=count, help="timed runs of each side per task; the best counts (quick and full 3)")
    p.add_argument("--seed", type=random_seed, default=0, help="seed of every sample and generated graph (default 0)")
    p.add_argument("--workdir", type=Path, default=Path("kgqa-data") / "bench", help="stores, servers, generated graphs")
    p.add_argument("--out", type=Path, help="where results go (default benchmarks/results/overhead in a checkout)")
    p.set_defaults(bench_handler=_overhead)

    p = sub.add_parser("generate", help="write a Freebase-shaped graph as N-Triples")
    p.add_argument("size", type=_graph_size,
                   help=f"about how many triples: 1M, 250k, 10M … (at most {sources.size_label(sources.MAX_GENERATED_TRIPLES)})")
    p.add_argument("--out", type=Path, required=True, help="output file (.nt or .nt.gz)")
    p.add_argument("--seed", type=random_seed, default=0, help="seed of the generator (default 0)")
    p.set_defaults(bench_handler=_generate)

    text = "the longest id and literal a store keeps exactly (the numbers in engine/limits.py); writes probe triples"
    p = sub.add_parser("limits", help=text, description=text)
    p.add_argument("--store", required=True, metavar="URI", help="the store to probe: use a scratch store, probe triples stay in it")
    p.add_argument("--max-id", type=count, default=20_000, help="largest id size tried, in bytes (default 20000, at most 1000000)")
    p.add_argument("--max-literal", type=int, default=100_000,
                   help="largest literal size tried, in bytes (default 100000, at most 100000000; 0 skips literals)")
    p.set_defaults(bench_handler=_limits)

    text = "the HTTP API (kgqa serve) under concurrent clients against the same calls in-process: throughput, latency, mismatches"
    p = sub.add_parser("serve", help=text, description=text)
    p.add_argument("--stores", default="oxigraph,virtuoso", help="comma-separated store kinds started by the run (default oxigraph,virtuoso)")
    p.add_argument("--dataset", default="gen:100k", help="metaqa, pathquestion, fb15k237 or gen:SIZE (default gen:100k)")
    p.add_argument("--clients", type=count, default=8, help="concurrent clients (default 8)")
    p.add_argument("--ops", type=count, default=200, help="mixed calls per client (default 200)")
    p.add_argument("--seed", type=random_seed, default=0, help="seed of the workload and a generated graph (default 0)")
    p.add_argument("--workdir", type=Path, default=Path("kgqa-data") / "bench", help="stores, servers, generated graphs")
    p.add_argument("--out", type=Path, help="where results go (default benchmarks/results/serve in a checkout)")
    p.set_defaults(bench_handler=_serve)


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


def _run(args: argparse.Namespace) -> Path:
    cfg = config(args)
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    results = runner.run_retrieval(cfg) if args.bench_command == "retrieval" else runner.run_load(cfg)
    name = args.bench_command + ("-quick" if args.quick else "")
    out = args.out or (RESULTS_DIR or cfg.workdir / "results") / name
    for path in report.write(results, out):
        print(path)
    return out


def _methods(args: argparse.Namespace) -> Path:
    from benchmarks import methods

    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]
    cfg = methods.MethodsConfig(
        methods=split(args.methods), datasets=split(args.datasets), stores=split(args.stores), questions=args.questions,
        seed=args.seed, workdir=args.workdir.resolve(), device=args.device,
        method_options=registry.parse_method_options(args.method_option), etd_checkpoints=args.etd_checkpoints,
        recipe_runs=args.recipe_runs.resolve() if args.recipe_runs else None, recipes=_method_recipes(args.recipe),
    )
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    out = args.out or (RESULTS_DIR or cfg.workdir / "results") / "methods"
    for path in methods.write(methods.run_methods(cfg), out):
        print(path)
    return out


def _method_recipes(items: list[str]) -> dict[str, str]:
    """``["arg=lora"]`` → ``{"arg": "lora"}`` (``--recipe METHOD=NAME``)."""
    found: dict[str, str] = {}
    for item in items:
        method, sep, name = item.partition("=")
        if not sep or method not in registry.names() or not name:
            raise InvalidInputError(f"--recipe {item!r}: write METHOD=NAME with METHOD one of {', '.join(registry.names())}, e.g. arg=lora")
        found[method] = name
    return found


def _overhead(args: argparse.Namespace) -> Path:
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
    return out


def _serve(args: argparse.Namespace) -> Path:
    from benchmarks import serve_load

    cfg = serve_load.ServeLoadConfig(
        stores=[s.strip() for s in args.stores.split(",") if s.strip()], dataset=args.dataset, clients=args.clients,
        ops=args.ops, seed=args.seed, workdir=args.workdir.resolve(),
    )
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    out = args.out or (RESULTS_DIR or cfg.workdir / "results") / "serve"
    for path in serve_load.write(serve_load.run_serve_load(cfg), out):
        print(path)
    return out


def _scale(args: argparse.Namespace) -> Path:
    from benchmarks import scale_report
    from engine.servers import virtuoso

    split = lambda text: [x.strip() for x in text.split(",") if x.strip()]
    if not 0 <= args.hub_share < 1:
        raise InvalidInputError(f"bench scale: --hub-share {args.hub_share} must be at least 0 and below 1")
    try:
        virtuoso.buffers_for(args.virtuoso_buffer_pool_gib)
    except InvalidInputError as e:
        raise InvalidInputError(f"bench scale: --virtuoso-buffer-pool-gib: {e}") from None
    try:
        sizes = [sources.parse_size(s) for s in split(args.sizes)]
    except InvalidInputError as e:
        raise InvalidInputError(f"bench scale: --sizes {args.sizes!r}: {e}") from None
    unknown = [s for s in split(args.stores) if s not in ("oxigraph", "virtuoso")]
    if unknown:
        raise InvalidInputError(f"bench scale: --stores {','.join(unknown)}: the scale run measures oxigraph and virtuoso")
    cfg = scale.ScaleConfig(
        mode="scale", datasets=[f"gen:{sources.size_label(n)}" for n in sizes], stores=split(args.stores),
        questions=args.questions, batch=args.batch, batches=args.batches, budget=args.budget, seed=args.seed,
        workdir=args.workdir.resolve(), check=not args.no_check, sizes=sizes, hub_share=args.hub_share,
        hub_limit=args.hub_limit, virtuoso_buffer_pool_gib=args.virtuoso_buffer_pool_gib,
    )
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    out = args.out or (RESULTS_DIR or cfg.workdir / "results") / "scale"
    differ = scale_report.appended_graphs_differ(out, sizes, args.seed, args.hub_share) if args.append else []
    if differ:
        raise InvalidInputError(
            f"bench scale: --append would mix two graphs in {out / 'scale.json'} ({'; '.join(differ)}): "
            "give the earlier run's --seed and --hub-share, or another --out"
        )
    for path in scale_report.write(scale.run_scale(cfg), out, append=args.append):
        print(path)
    return out


def _generate(args: argparse.Namespace) -> None:
    from benchmarks.generator import FreebaseGenerator

    generator = FreebaseGenerator(args.size, seed=args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    count = sources.write_ntriples(iter(generator), args.out)
    info = generator.info
    print(f"{args.out}: {count:,} triples, {info.entities:,} topic entities, {info.cvts:,} CVT nodes (seed {info.seed})")


def _graph_size(text: str) -> int:
    """An argparse type: :func:`benchmarks.sources.parse_size`."""
    try:
        return sources.parse_size(text)
    except InvalidInputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _limits(args: argparse.Namespace) -> None:
    from benchmarks.probe_limits import MAX_PROBED_ID, MAX_PROBED_LITERAL, probe

    if not 0 <= args.max_literal <= MAX_PROBED_LITERAL:
        raise InvalidInputError(
            f"--max-literal {args.max_literal}: give a size in bytes up to {MAX_PROBED_LITERAL:,}, or 0 to skip literals")
    if args.max_id > MAX_PROBED_ID:
        raise InvalidInputError(f"--max-id {args.max_id}: give a size in bytes up to {MAX_PROBED_ID:,}")
    probe(args.store, args.max_id, args.max_literal)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kgqa bench", description="Benchmarks: loading and retrieval on every store, beside the baselines.")
    add_arguments(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    out = args.bench_handler(args)
    if out is not None:  # a run that wrote results: say what produced them, with the thread limit it ran under
        threads = os.environ.get("OMP_NUM_THREADS")
        command = (f"OMP_NUM_THREADS={shlex.quote(threads)} " if threads else "") + "python -m benchmarks " + shlex.join(argv)
        report.write_meta(out, command, append=getattr(args, "append", False))
    return 0
