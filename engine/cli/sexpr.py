"""``kgqa sexpr``: execute an S-expression (GrailQA semantics) on a store."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from engine.cli.common import (
    add_output_arguments,
    add_store_arguments,
    emit,
    emit_explained,
    notes_cut_short,
    notes_deadline,
    open_from_args,
    print_notes,
)
from engine.errors import QueryTimeoutError
from engine.identifiers import MAX_SECONDS

if TYPE_CHECKING:
    from engine.results import ExecuteResult
    from engine.sexpr.tree import Top
    from engine.store import Store


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sexpr", help="execute an S-expression (GrailQA logical form) on a store")
    p.add_argument("expression", help='e.g. "(JOIN (R directed_by) [The Prowler])"')
    p.add_argument(
        "--explain", "--show-query", action="store_true", dest="explain",
        help="print the compiled SPARQL or Cypher and its parameters instead of running it",
    )
    p.add_argument(
        "--timeout", type=float, default=None,
        help=f"seconds the query may run, at most {MAX_SECONDS:g}; the notes on an empty answer end within "
        "this many seconds of the command's start (default: no limit)",
    )
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
        deadline = notes_deadline(args)
        result = store.execute(tree, timeout=args.timeout)
        ids = [a for a in result.answers if isinstance(a, str)]
        emit(args, result, None if args.json or not ids else store.names(ids))
        print_notes(_why_empty(store, args, tree, result, deadline))


def _why_empty(
    store: Store, args: argparse.Namespace, tree: Top, result: ExecuteResult, deadline: float | None
) -> list[str]:
    """For no answers (or a count of 0): the form's ids that are not in the store and its
    relations that no stored edge carries, with the nearest ones (engine.suggest), looked up
    before ``deadline``."""
    from engine.sexpr.tree import entities, relations
    from engine.suggest import missing_ids, unknown_relations

    if result.answers or result.count:
        return []
    notes: list[str] = []
    try:
        ids = entities(tree)
        if ids:
            notes += missing_ids(store, ids, deadline=deadline)
        notes += unknown_relations(store, relations(tree), deadline=deadline)
    except QueryTimeoutError as e:
        notes.append(notes_cut_short(args, e))
    return notes
