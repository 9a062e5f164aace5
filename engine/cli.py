"""The ``kgqa`` command line: load, stats, query <operation>, demo, bench."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from engine.errors import InvalidInputError, KGQAError
from engine.graph import FREEBASE_NS
from engine.open import open_store
from engine.render import render
from engine.results import to_json

#: modules that add their own subcommands through ``register(subparsers)``; each keeps its
#: module-level imports light (torch and models are imported inside the handlers)
COMMAND_MODULES: tuple[str, ...] = ("engine.etd.cli", "engine.arg.cli", "engine.rog.cli", "engine.ldr.cli", "engine.metrics_cli", "engine.models.cli")

STORE_HELP = "store URI: a directory or oxigraph:PATH (embedded, default kgqa-data/store, or $KGQA_STORE), memory:, http://host:port/sparql, bolt://… or neo4j://…"


def add_store_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.add_argument("--namespace", default=FREEBASE_NS, help="namespace of ids in RDF stores (default: Freebase's)")
    p.add_argument(
        "--store-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a store option, repeatable: e.g. staging_dir=/srv/stage isql=localhost:1111 graph=IRI for Virtuoso, "
        "database=NAME for Bolt",
    )


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


DATASET_HELP = (
    "metaqa-1hop|2hop|3hop, pathquestion-2h|3h (from $KGQA_DATA or ../shared/data), or a question file: "
    "RoG .jsonl/.parquet, PathQuestion PQ-*.txt, MetaQA qa_*.txt"
)


def add_run_arguments(p: argparse.ArgumentParser, method: str, model_help: str | None = None) -> None:
    """The options every method's ``run`` shares (the method-run protocol of :mod:`engine.run`)."""
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--split", choices=["train", "val", "test", "all"], default="test",
                   help="which part of the dataset's seeded split to answer (default: the held-out test part)")
    p.add_argument("--sample", type=int, default=None, help="a seeded random sample of this many questions of the split")
    p.add_argument("--limit", type=int, default=None, help="answer only the first N questions (after --sample)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and of the sample (default 0)")
    p.add_argument("--model", default=None, help=model_help or "language model: HF id, local directory, .gguf, or "
                   "openai:MODEL[@URL] (default: the offline SmolLM2-135M-Instruct)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--out", default=f"{method}-predictions.jsonl", help=f"predictions JSONL (default {method}-predictions.jsonl)")
    p.add_argument("--no-progress", action="store_true")
    add_store_arguments(p)
    add_output_arguments(p)


def run_questions(args: argparse.Namespace) -> list:
    """The questions ``--dataset --split --sample --limit --seed`` select."""
    from loaders.datasets import select_questions

    return select_questions(args.dataset, args.split, sample=args.sample, limit=args.limit, seed=args.seed)


def run_from_args(args: argparse.Namespace, build: Any, questions: list | None = None) -> dict:
    """Open the store, build the method with ``build(store, meter)`` (store metered), run it over
    the selected questions, print the summary and return it."""
    from engine.run import Meter, format_summary, run_method

    questions = run_questions(args) if questions is None else questions
    if not questions:
        raise InvalidInputError(
            f"no questions selected from {args.dataset!r} (split {args.split!r}, sample {args.sample}, limit {args.limit}): "
            "nothing to answer; a small question file may need --split all"
        )
    meter = Meter()
    with open_from_args(args) as store:
        method = build(meter.store(store), meter)
        summary = run_method(method, questions, meter, args.out, progress=not args.no_progress)
    summary = {"dataset": args.dataset, "split": args.split, **summary}
    print(json.dumps(summary, indent=2, ensure_ascii=False) if args.json else format_summary(summary))
    return summary


def open_from_args(args: argparse.Namespace):
    options: dict[str, Any] = {}
    if args.store is None or not args.store.startswith(("bolt", "neo4j")):
        options["namespace"] = args.namespace
    for item in getattr(args, "store_option", []):
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise KGQAError(f"--store-option {item!r}: write KEY=VALUE, e.g. staging_dir=/srv/stage")
        options[key] = int(value) if value.isdigit() else value
    try:
        return open_store(args.store, **options)
    except TypeError as e:  # an option the store does not take
        raise KGQAError(f"--store-option: {e}") from e


def emit(args: argparse.Namespace, result: Any, names: dict | None = None) -> None:
    if args.json:
        print(json.dumps(to_json(result), ensure_ascii=False, indent=2))
    else:
        print(render(result, names))


# --------------------------------------------------------------------- query operations
def parse_anchors(ids: list[str], literal_texts: list[str], missing: str) -> list:
    """Ids, then literals written as in an S-expression; ``missing`` is the error when there
    are none."""
    from engine.sexpr import parse_literal

    found = [*ids, *(parse_literal(text) for text in literal_texts)]
    if not found:
        raise InvalidInputError(missing)
    return found


def _query_anchors(args: argparse.Namespace) -> list:
    return parse_anchors(args.ids, args.literals, f"{args.operation} needs at least one id or --literal VALUE")


def _add_operations(sub: argparse._SubParsersAction) -> None:
    def op(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, aliases=[name.replace("_", "-")] if "_" in name else [])
        p.set_defaults(operation=name)
        add_store_arguments(p)
        add_output_arguments(p)
        return p

    def direction(p: argparse.ArgumentParser, default: str = "both") -> None:
        p.add_argument("--direction", choices=["out", "in", "both"], default=default)

    def limit(p: argparse.ArgumentParser) -> None:
        p.add_argument("--limit", type=int, default=None)

    def literal_anchors(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--literal", action="append", default=[], dest="literals",
            help="a literal anchor too, written as in an S-expression, e.g. 1990^^http://www.w3.org/2001/XMLSchema#gYear (repeatable)",
        )

    p = op("relations", "distinct relations adjacent to each id or literal, with direction and count")
    p.add_argument("ids", nargs="*")
    literal_anchors(p)
    direction(p)
    limit(p)
    p = op("expand", "one hop from each id")
    p.add_argument("ids", nargs="+")
    p.add_argument("--relation", action="append", dest="relations", help="keep only this relation (repeatable)")
    direction(p)
    limit(p)
    p = op("follow_paths", "every path instance of a relation path from the seeds")
    p.add_argument("seeds", nargs="+")
    p.add_argument("--path", required=True, help="relations separated by commas, e.g. starred_actors,directed_by")
    p.add_argument("--reuse-edges", action="store_true", help="let a walk use one stored edge more than once")
    direction(p)
    limit(p)
    p = op("subgraph", "edges met by a breadth-first expansion")
    p.add_argument("seeds", nargs="+")
    p.add_argument("--hops", type=int, default=1)
    p.add_argument("--relation", action="append", dest="relations")
    direction(p)
    limit(p)
    p = op("shortest_paths", "all shortest undirected paths between sources and targets")
    p.add_argument("--sources", nargs="+", required=True)
    p.add_argument("--targets", nargs="+", required=True)
    p.add_argument("--max-hops", type=int, default=3)
    limit(p)
    p = op("two_hop_relations", "relations around the nodes reached through r1")
    p.add_argument("ids", nargs="*")
    literal_anchors(p)
    p.add_argument("--r1", required=True)
    direction(p)
    limit(p)
    p = op("names", "display names of ids")
    p.add_argument("ids", nargs="+")
    p = op("types", "classes of ids")
    p.add_argument("ids", nargs="+")
    p = op("search", "entities by name")
    p.add_argument("text")
    p.add_argument("--mode", choices=["exact", "prefix", "contains"], default="exact")
    p.add_argument("--limit", type=int, default=10)
    p = op("query", "raw read-only SPARQL or Cypher")
    p.add_argument("text")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="bind $NAME (an id); repeatable")


def _run_operation(args: argparse.Namespace) -> None:
    with open_from_args(args) as store:
        name = args.operation
        if name == "relations":
            result = store.relations(_query_anchors(args), args.direction, args.limit)
        elif name == "expand":
            result = store.expand(args.ids, args.relations, args.direction, args.limit)
        elif name == "follow_paths":
            path = [r.strip() for r in args.path.split(",") if r.strip()]
            result = store.follow_paths(
                args.seeds, path, args.direction, args.limit, distinct_edges=not args.reuse_edges
            )
        elif name == "subgraph":
            result = store.subgraph(args.seeds, args.hops, args.direction, args.relations, args.limit)
        elif name == "shortest_paths":
            result = store.shortest_paths(args.sources, args.targets, args.max_hops, args.limit)
        elif name == "two_hop_relations":
            result = store.two_hop_relations(_query_anchors(args), args.r1, args.direction, args.limit)
        elif name == "names":
            result = store.names(args.ids)
        elif name == "types":
            result = store.types(args.ids)
        elif name == "search":
            result = store.search(args.text, args.mode, args.limit)
        else:
            params: dict[str, Any] = {}
            for item in args.param:
                key, sep, value = item.partition("=")
                if not sep:
                    raise KGQAError(f"--param {item!r}: write NAME=VALUE")
                params[key] = value
            result = store.query(args.text, params)
        emit(args, result)


# --------------------------------------------------------------------- load, stats, demo
def _run_load(args: argparse.Namespace) -> None:
    from loaders.load import load_files

    with open_from_args(args) as store:
        report = load_files(
            store,
            args.files,
            args.format,
            namespace=args.namespace,
            rejects_path=args.rejects,
            batch_size=args.batch_size,
            progress=not args.no_progress,
        )
    if args.json:
        print(json.dumps(to_json(report), indent=2))
    else:
        print(
            f"read {report.read:,}  loaded {report.loaded:,}  duplicates {report.duplicates:,}  "
            f"rejected {report.rejected:,}  {report.seconds:.1f} s  {report.triples_per_second:,.0f} triples/s"
            + (f"\nrejected lines written to {report.rejects_file}" if report.rejects_file else "")
        )


def _run_stats(args: argparse.Namespace) -> None:
    with open_from_args(args) as store:
        emit(args, store.stats())


def _run_demo(args: argparse.Namespace) -> None:
    from engine.demo import run_demo

    run_demo(args.store)


def _run_bench(args: argparse.Namespace, rest: list[str]) -> int:
    from benchmarks.cli import main as bench_main

    return bench_main(rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgqa", description="Knowledge-graph QA engine over Oxigraph, Virtuoso and Neo4j.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("load", help="bulk-load dump or dataset files into a store")
    p.add_argument("files", nargs="+")
    p.add_argument("--format", default=None, help="ntriples, freebase, metaqa, tsv, entity-names, rog (default: from the file name)")
    p.add_argument("--rejects", default=None, help="file for malformed lines (default: <first file>.rejects.tsv, if any)")
    p.add_argument("--batch-size", type=int, default=None, help="triples per store call (default: the store's own)")
    p.add_argument("--no-progress", action="store_true")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_run_load)

    p = sub.add_parser("stats", help="triples, entities and triples per relation")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_run_stats)

    p = sub.add_parser("query", help="run one operation of the vocabulary")
    _add_operations(p.add_subparsers(dest="operation", required=True, metavar="OPERATION"))
    p.set_defaults(handler=_run_operation)

    p = sub.add_parser("demo", help="load a small Freebase-shaped sample into the embedded store and run every operation")
    p.add_argument("--store", default="kgqa-data/demo", help="where to put the demo store (default kgqa-data/demo)")
    p.set_defaults(handler=_run_demo)

    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)

    sub.add_parser("bench", help="benchmarks: `kgqa bench load|retrieval …` (see benchmarks/README.md)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] == ["bench"]:
        return _run_bench(parser.parse_args(["bench"]), argv[1:]) or 0
    args = parser.parse_args(argv)
    try:
        args.handler(args)
    except KGQAError as e:
        print(f"kgqa: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kgqa: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
