"""Several questions' anchor lists answered by one store call, split back exactly.

A method that answers a batch of questions often makes the same kind of call for each of them
(``relations`` of its anchors, ``two_hop_relations`` through one relation). On a server every
call is a round trip plus the server compiling the query's text (most of a small call on
Virtuoso, since the text changes with every id list), so one call over the union of the
anchors costs little more than one of them (docs/design/shared-store-calls.md). :func:`per_group` makes that call and gives each
group exactly the rows its own call would have given (:func:`names_per_group` does the same
for ``names``):

- rows are assigned to a group by their ``id`` (the anchor a row belongs to), in the union
  call's order, which is the store's sorted order, so each group's rows are sorted as its
  own call sorts them;
- the union call may return ``limit`` rows for every group; where it is cut anyway, where a
  group has more than ``limit`` rows (its own call would have been cut, and a cut answer
  depends on the database's row order) or where a row names no anchor of the call, the group
  is asked on its own.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter
from typing import Any

from engine.identifiers import UNBOUNDED, validate_limit

#: (anchors, limit) -> the store's answer for them, e.g. ``lambda a, n: store.relations(a, "both", n)``;
#: ``limit`` as the store takes it (a number, None for the default bound, or ``"unbounded"``)
Call = Callable[[list[Any], Any], Any]


def per_group(
    call: Call,
    groups: Sequence[Sequence[Hashable]],
    limit: int | str | None,
    *,
    rows: Callable[[Any], list[Any]] = attrgetter("rows"),
    anchor: Callable[[Any], Hashable] = attrgetter("id"),
) -> list[tuple[list[Any], bool]]:
    """``(rows, truncated)`` of ``call(group, limit)`` for every group, from one call over all
    their anchors where that answers each group exactly (see the module doc), else from the
    group's own call. ``anchor(row)`` is the anchor a row belongs to (a row's ``id``; a path's
    first node)."""

    def own(group: Sequence[Hashable]) -> tuple[list[Any], bool]:
        result = call(list(group), limit)
        return rows(result), result.truncated

    if len(groups) == 1:
        return [own(groups[0])]
    union = list(dict.fromkeys(a for group in groups for a in group))
    if not union:
        return [([], False) for _ in groups]
    bound = validate_limit(limit)
    result = call(union, UNBOUNDED if bound is None else bound * len(groups))
    found = rows(result)
    members = set(union)
    if result.truncated or any(anchor(row) not in members for row in found):
        return [own(group) for group in groups]
    out = []
    for group in groups:
        wanted = set(group)
        mine = [row for row in found if anchor(row) in wanted]
        out.append(own(group) if bound is not None and len(mine) > bound else (mine, False))
    return out


def names_per_group(store: Any, groups: Sequence[Sequence[str]]) -> list[dict[str, str | None]]:
    """``store.names(group)`` for every group, from one ``names`` call over all their ids (a
    name belongs to its id alone, so the split is exact)."""
    wanted = sorted({i for group in groups for i in group})
    names = store.names(wanted) if wanted else {}
    return [{i: names[i] for i in group} for group in groups]
