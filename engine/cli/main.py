"""The ``kgqa`` command line: load, stats, query <operation>, demo, bench, server, serve, mcp."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from engine.cli.common import (
    add_output_arguments,
    add_reject_share_argument,
    add_store_arguments,
    emit,
    emit_explained,
    hops,
    notes_cut_short,
    notes_deadline,
    open_from_args,
    parse_anchors,
    print_notes,
    reject_share,
)
from engine.errors import KGQAError, KGQAWarning, QueryTimeoutError
from engine.identifiers import DEFAULT_LIMIT, MAX_PAIRS, MAX_SECONDS, UNBOUNDED
from engine.results import to_json
from engine.store import SCHEMA_RELATIONS

#: modules that add their own subcommands through ``register(subparsers)``; each keeps its
#: module-level imports light (torch and models are imported inside the handlers)
COMMAND_MODULES: tuple[str, ...] = (
    "engine.cli.sexpr", "engine.cli.methods", "engine.cli.eval", "engine.cli.server", "engine.cli.webqsp", "engine.cli.lm",
    "engine.cli.neo4j_import", "engine.cli.serve", "engine.cli.reproduce",
    "engine.cli.mcp",
)


def _limit(text: str) -> int | str:
    """A ``--limit`` value: a number of rows, or ``unbounded``."""
    if text == UNBOUNDED:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of rows, or {UNBOUNDED}") from None


def _query_anchors(args: argparse.Namespace) -> list:
    return parse_anchors(args.ids, args.literals, f"{args.operation} needs at least one id or --literal VALUE")


def _add_operations(sub: argparse._SubParsersAction) -> None:
    def op(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, aliases=[name.replace("_", "-")] if "_" in name else [])
        p.set_defaults(operation=name)
        add_store_arguments(p)
        add_output_arguments(p)
        if name != "query":
            p.add_argument(
                "--explain", action="store_true",
                help="print the compiled SPARQL or Cypher and its parameters instead of running it",
            )
        p.add_argument(
            "--timeout", type=float, default=None,
            help=f"seconds the operation may run (all its store calls together), at most {MAX_SECONDS:g}; the notes on an empty answer end within "
            "this many seconds of the command's start (default: a server store's timeout= option; none on the embedded store)",
        )
        return p

    def direction(p: argparse.ArgumentParser, default: str = "both") -> None:
        p.add_argument("--direction", choices=["out", "in", "both"], default=default,
                       help=f"out: the stored direction, in: against it, both (default {default})")

    def limit(p: argparse.ArgumentParser, default: int | None = None) -> None:
        shown = f"default {default}" if default else f"default {DEFAULT_LIMIT:,}"
        p.add_argument(
            "--limit", type=_limit, default=default,
            help=f"most rows to return ({shown}; '{UNBOUNDED}' for every row); a cut answer says it is truncated",
        )

    def literal_anchors(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--literal", action="append", default=[], dest="literals",
            help="a literal anchor too, written as in an S-expression, e.g. 1990^^http://www.w3.org/2001/XMLSchema#gYear (repeatable)",
        )

    p = op("relations", "distinct relations adjacent to each id or literal, with direction and count")
    p.add_argument("ids", nargs="*", help="entity ids (MIDs, or a graph's own ids)")
    literal_anchors(p)
    direction(p)
    limit(p)
    p = op("expand", "one hop from each id")
    p.add_argument("ids", nargs="+", help="entity ids to expand")
    p.add_argument("--relation", action="append", dest="relations", help="keep only this relation (repeatable)")
    direction(p)
    limit(p)
    p = op("follow_paths", "every path instance of a relation path from the seeds")
    p.add_argument("seeds", nargs="+", help="entity ids the paths start from")
    p.add_argument("--path", required=True, help="relations separated by commas, e.g. starred_actors,directed_by")
    p.add_argument("--reuse-edges", action="store_true", help="let a walk use one stored edge more than once")
    direction(p)
    limit(p)
    p = op("subgraph", "edges met by a breadth-first expansion")
    p.add_argument("seeds", nargs="+", help="entity ids the expansion starts from")
    p.add_argument("--hops", type=hops, default=1, help="layers to expand (default 1)")
    p.add_argument("--relation", action="append", dest="relations", help="follow only this relation (repeatable; default: all)")
    direction(p)
    limit(p)
    p = op("shortest_paths", "all shortest undirected paths between sources and targets")
    p.add_argument("--sources", nargs="+", required=True, help="entity ids the paths start from")
    p.add_argument("--targets", nargs="+", required=True,
                   help=f"entity ids the paths end at (sources × targets: at most {MAX_PAIRS:,} pairs)")
    p.add_argument("--max-hops", type=hops, default=3, help="longest path looked for (default 3)")
    p.add_argument(
        "--exclude", action="append", default=[], metavar="RELATION",
        help="a relation no path may use, repeatable (type.object.type and type.object.name are left out too)",
    )
    p.add_argument("--include-schema", action="store_true", help="let paths use type.object.type and type.object.name")
    limit(p)
    p = op("two_hop_relations", "relations around the nodes reached through r1")
    p.add_argument("ids", nargs="*", help="entity ids (MIDs, or a graph's own ids)")
    literal_anchors(p)
    p.add_argument("--r1", required=True, help="the first hop's relation")
    direction(p)
    limit(p)
    p = op("names", "display names of ids")
    p.add_argument("ids", nargs="+", help="entity ids to name (one without a name is named by its id)")
    p = op("types", "classes of ids")
    p.add_argument("ids", nargs="+", help="entity ids")
    p = op("search", "entities by name")
    p.add_argument("text", help="the name, or part of it, to look for")
    p.add_argument("--mode", choices=["exact", "prefix", "contains"], default="exact",
                   help="exact: the whole name (default), prefix: names starting with it, contains: names holding it")
    limit(p, 10)
    p = op("query", "raw read-only SPARQL or Cypher")
    p.add_argument("text", help="the query; $NAME marks a parameter (--param)")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="bind $NAME (an id); repeatable")
    p.add_argument(
        "--allow-service", action="store_true", help="let a SPARQL query send SERVICE requests to other servers"
    )
    p.add_argument("--limit", type=_limit, default=UNBOUNDED,
                   help="most rows to return (default: every row the query gives); a cut answer says it is truncated")


def _run_operation(args: argparse.Namespace) -> None:
    with open_from_args(args) as store:
        if getattr(args, "explain", False):
            with store.explaining() as calls:
                _call_operation(store, args)
            emit_explained(args, calls)
        else:
            deadline = notes_deadline(args)
            result = _call_operation(store, args)
            emit(args, result)
            print_notes(_why_empty(store, args, result, deadline))


def _why_empty(store: Any, args: argparse.Namespace, result: Any, deadline: float | None = None) -> list[str]:
    """For an answer with nothing in it: the ids named that are not in the store and the
    relations that the nodes reached do not have, with the nearest ones (engine.suggest),
    looked up before ``deadline`` (a :func:`time.monotonic` instant: ``--timeout`` seconds
    after the operation began)."""
    from engine.suggest import absent_ids, missing_id_notes, missing_ids, missing_relations, nearest_entities

    name = args.operation
    if name == "query":
        return []
    notes: list[str] = []
    try:
        if name in ("names", "types"):
            empty = [i for i, v in result.items() if not v]
            return missing_ids(store, empty, deadline=deadline) if empty else []
        rows = next((getattr(result, f) for f in ("rows", "edges", "paths", "hits") if hasattr(result, f)), None)
        if rows or rows is None:
            return []
        if name == "search":
            near = nearest_entities(store, args.text, deadline=deadline)
            return [f"nothing is named {args.text!r}" + (f"; nearest: {', '.join(near)}" if near else "")]
        ids = [*getattr(args, "ids", ()), *getattr(args, "seeds", ()), *getattr(args, "sources", ()), *getattr(args, "targets", ())]
        absent = absent_ids(store, ids, deadline=deadline)
        notes += missing_id_notes(store, absent, deadline=deadline)
        left_out = set(absent)
        present = [i for i in dict.fromkeys(ids) if i not in left_out]
        direction = getattr(args, "direction", "both")
        if name == "follow_paths":
            path = [r.strip() for r in args.path.split(",") if r.strip()]
            notes += missing_relations(store, present, path, direction, deadline=deadline)
        elif name == "two_hop_relations":
            notes += missing_relations(store, present, [args.r1], direction, deadline=deadline)
        elif name in ("expand", "subgraph"):
            for relation in args.relations or []:
                notes += missing_relations(store, present, [relation], direction, deadline=deadline)
    except QueryTimeoutError as e:
        notes.append(notes_cut_short(args, e))
    return notes


def _call_operation(store: Any, args: argparse.Namespace) -> Any:
    name = args.operation
    timeout = {"timeout": args.timeout} if getattr(args, "timeout", None) is not None else {}
    if name == "relations":
        return store.relations(_query_anchors(args), args.direction, args.limit, **timeout)
    if name == "expand":
        return store.expand(args.ids, args.relations, args.direction, args.limit, **timeout)
    if name == "follow_paths":
        path = [r.strip() for r in args.path.split(",") if r.strip()]
        return store.follow_paths(
            args.seeds, path, args.direction, args.limit, distinct_edges=not args.reuse_edges, **timeout
        )
    if name == "subgraph":
        return store.subgraph(args.seeds, args.hops, args.direction, args.relations, args.limit, **timeout)
    if name == "shortest_paths":
        exclude = [*(() if args.include_schema else SCHEMA_RELATIONS), *args.exclude]
        return store.shortest_paths(args.sources, args.targets, args.max_hops, args.limit, exclude=exclude, **timeout)
    if name == "two_hop_relations":
        return store.two_hop_relations(_query_anchors(args), args.r1, args.direction, args.limit, **timeout)
    if name == "names":
        return store.names(args.ids, **timeout)
    if name == "types":
        return store.types(args.ids, **timeout)
    if name == "search":
        return store.search(args.text, args.mode, args.limit, **timeout)
    params: dict[str, Any] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise KGQAError(f"--param {item!r}: write NAME=VALUE, with a name")
        if key in params:
            raise KGQAError(f"--param {key} is given twice ({params[key]!r} and {value!r}): give each parameter once")
        params[key] = value
    return store.query(args.text, params, allow_service=args.allow_service, limit=args.limit, **timeout)


# --------------------------------------------------------------------- load, stats, demo
def _run_load(args: argparse.Namespace) -> None:
    from loaders.load import load_files, summary_line

    store = open_from_args(args, write=True)
    new_folder = os.path.abspath(store.path) if getattr(store, "created", False) and getattr(store, "path", None) else None
    if new_folder:
        print(f"kgqa: creating a new store at {new_folder}", file=sys.stderr)
    try:
        with store:  # a new store that the load leaves empty, as it fails, is removed (OxigraphStore)
            report = load_files(
                store,
                args.files,
                args.format,
                namespace=args.namespace,
                rejects_path=args.rejects,
                batch_size=args.batch_size,
                progress=not args.no_progress,
                max_reject_share=reject_share(args),
                summary=False,  # printed below, once
            )
    finally:
        if new_folder and not os.path.exists(new_folder):
            print(f"kgqa: removed the new store at {new_folder}: nothing was loaded into it", file=sys.stderr)
    print(json.dumps(to_json(report), indent=2) if args.json else summary_line(report, len(args.files)))


def _run_stats(args: argparse.Namespace) -> None:
    with open_from_args(args) as store:
        emit(args, store.stats())


def _run_demo(args: argparse.Namespace) -> None:
    from engine.cli.demo import run_demo

    run_demo(args.store)


def _run_bench(args: argparse.Namespace, rest: list[str]) -> int:
    from benchmarks.cli import main as bench_main

    return bench_main(rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kgqa", description="Knowledge-graph QA engine over Oxigraph, Virtuoso and Neo4j.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("load", help="bulk-load dump or dataset files into a store")
    p.add_argument("files", nargs="+", help="files to load (gzip or plain), all in one format")
    p.add_argument("--format", default=None, help="ntriples, freebase, metaqa, tsv, entity-names, rog (default: from the file name)")
    p.add_argument(
        "--rejects", default=None,
        help="file for malformed lines (default, when there are any: <store folder>.rejects.tsv beside an embedded store, "
        "else <first file's name>.rejects.tsv in the current directory)",
    )
    add_reject_share_argument(p, "loading")
    p.add_argument("--batch-size", type=int, default=None, help="triples per store call (default: the store's own)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
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

    sub.add_parser("bench", help="benchmarks: `kgqa bench retrieval|load|overhead|scale|methods|generate|limits` (see benchmarks/README.md)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for arg in argv:  # Python hands undecodable bytes over as lone surrogates
        if not _is_text(arg):
            print(f"kgqa: error: the argument {arg!a} is not valid UTF-8 text: give it in UTF-8", file=sys.stderr)
            return 2
    parser = build_parser()
    args = parser.parse_args(["bench"] if argv[:1] == ["bench"] else argv)
    if getattr(args, "no_progress", False):
        _hide_model_loading_bars()
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning(warnings.showwarning)
        return _run(args, argv)


def _hide_model_loading_bars() -> None:
    """``--no-progress`` also hides the bars that transformers and huggingface_hub draw while a
    model loads ("Loading weights"). transformers reads huggingface_hub's setting when it is
    imported, so one imported already (a command run in-process) is told as well."""
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging

        logging.disable_progress_bar()


def _show_warning(show: Any) -> Any:
    """``show`` (warnings.showwarning) with the engine's own warnings said as ``kgqa: warning: …``."""
    def shown(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
              line: str | None = None) -> None:
        if issubclass(category, KGQAWarning):
            print(f"kgqa: warning: {message}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)
    return shown


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        if argv[:1] == ["bench"]:
            return _run_bench(args, argv[1:]) or 0
        args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except BrokenPipeError:
        # the reader stopped reading (`kgqa stats | head`): stop quietly, with nothing left to flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KGQAError as e:
        print(f"kgqa: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.filename is None:  # not a path the command was given or made from one: a defect to see whole
            raise
        # a path that cannot be used as the command needs it (a file where a folder goes, no
        # permission, a full disk): name it, without a traceback
        where = f"{e.filename} → {e.filename2}" if e.filename2 else str(e.filename)
        print(f"kgqa: error: cannot use {where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kgqa: interrupted", file=sys.stderr)
        return 130
    return 0


def _is_text(arg: str) -> bool:
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
