"""``kgqa sexpr``: execute an S-expression (GrailQA semantics) on a store."""
from __future__ import annotations

import argparse

from engine.cli.common import add_output_arguments, add_store_arguments, emit, emit_explained, open_from_args
from engine.identifiers import MAX_SECONDS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sexpr", help="execute an S-expression (GrailQA logical form) on a store")
    p.add_argument("expression", help='e.g. "(JOIN (R directed_by) [The Prowler])"')
    p.add_argument(
        "--explain", "--show-query", action="store_true", dest="explain",
        help="print the compiled SPARQL or Cypher and its parameters instead of running it",
    )
    p.add_argument("--timeout", type=float, default=None, help=f"seconds the query may run, at most {MAX_SECONDS:g} (default: no limit)")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_sexpr)


def _sexpr(args: argparse.Namespace) -> None:
    from engine.ops import Execute
    from engine.sexpr import parse

    tree = parse(args.expression)
    with open_from_args(args) as store:
        if args.explain:
            op = Execute(tree, timeout=args.timeout)
            emit_explained(args, [(op, store.explain(op))])
            return
        result = store.execute(tree, timeout=args.timeout)
        ids = [a for a in result.answers if isinstance(a, str)]
        emit(args, result, None if args.json or not ids else store.names(ids))
