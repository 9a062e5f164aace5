"""Why an answer is empty: the ids a call named that are not in the store, and the relations
that the nodes it reached do not have, each with the nearest ones the store does hold
(``directd_by`` → ``directed_by``). The command line says so instead of a bare ``(nothing)``.
Every look-up takes a ``deadline`` (a :func:`time.monotonic` instant): each store call runs
within the time left, and past it :class:`engine.errors.QueryTimeoutError` ends the look-up."""
from __future__ import annotations

import difflib
import time
from collections.abc import Sequence

from engine.errors import QueryTimeoutError
from engine.store import Store

#: how many candidates a lookup reads, and how many suggestions a line shows
CANDIDATES = 2000
SHOWN = 3
#: ids missing from the store that get a line each (with the nearest ones: two searches each);
#: the rest are counted in one line
NOTED_IDS = 20


def _left(deadline: float | None) -> float | None:
    """Seconds left before ``deadline`` (a :func:`time.monotonic` instant; None: no deadline)."""
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise QueryTimeoutError("the look-ups ran past their deadline")
    return left


def absent_ids(store: Store, ids: Sequence[str], *, deadline: float | None = None) -> list[str]:
    """The ids (deduplicated, in first-seen order) that are not nodes of the store."""
    names = store.names(list(dict.fromkeys(ids)), timeout=_left(deadline))
    return [node for node, name in names.items() if name is None]


def missing_id_notes(store: Store, absent: Sequence[str], *, deadline: float | None = None) -> list[str]:
    """A line for each of the first :data:`NOTED_IDS` of ``absent`` (ids not in the store),
    with the nearest ids or names it holds while there is time to look them up, and a line
    counting the rest."""
    lines = []
    looking = True
    searched: dict[str, dict[str, str]] = {}
    for node in absent[:NOTED_IDS]:
        near: list[str] = []
        if looking:
            try:
                near = nearest_entities(store, node, deadline=deadline, searched=searched)
            except QueryTimeoutError:
                looking = False  # the ids are named still, without the nearest ones
        hint = f"; nearest: {', '.join(near)}" if near else ""
        lines.append(f"{node!r} is not in the store{hint}")
    rest = len(absent) - NOTED_IDS
    if rest > 0:
        lines.append(f"and {rest:,} more ids are not in the store" if rest > 1 else "and 1 more id is not in the store")
    return lines


def missing_ids(store: Store, ids: Sequence[str], *, deadline: float | None = None) -> list[str]:
    """The lines of :func:`missing_id_notes` for the ids that are not in the store."""
    return missing_id_notes(store, absent_ids(store, ids, deadline=deadline), deadline=deadline)


def missing_relations(
    store: Store, seeds: Sequence[str], path: Sequence[str], direction: str = "both", *, deadline: float | None = None
) -> list[str]:
    """A line for the first relation of ``path`` that the nodes reached so far (from ``seeds``
    along the relations before it) do not have, with their relations nearest to it."""
    ends: list[str] = list(dict.fromkeys(seeds))
    for i, relation in enumerate(path):
        if not ends:
            return []
        held = sorted({r.relation for r in store.relations(ends, direction, timeout=_left(deadline)).rows})
        if relation not in held:
            where = "the seeds" if i == 0 else f"the nodes reached through {', '.join(path[:i])}"
            near = difflib.get_close_matches(relation, held, n=SHOWN, cutoff=0.5)
            hint = f"; nearest: {', '.join(near)}" if near else f"; they have {', '.join(held[:10]) or 'no edges'}"
            return [f"no edge of {where} has the relation {relation!r}{hint}"]
        reached = store.follow_paths(ends, [relation], direction, limit=CANDIDATES, timeout=_left(deadline)).paths
        ends = list(dict.fromkeys(p.end for p in reached if isinstance(p.end, str)))
    return []


def unknown_relations(store: Store, relations: Sequence[str], *, deadline: float | None = None) -> list[str]:
    """A line for each of ``relations`` that no stored edge carries, with the nearest ones that do."""
    wanted = list(dict.fromkeys(relations))
    if not wanted:
        return []
    held = store.relation_names(timeout=_left(deadline))
    known = set(held)
    lines = []
    for relation in wanted:
        if relation not in known:
            near = difflib.get_close_matches(relation, held, n=SHOWN, cutoff=0.5)
            lines.append(f"no edge in the store has the relation {relation!r}" + (f"; nearest: {', '.join(near)}" if near else ""))
    return lines


def nearest_entities(
    store: Store, text: str, *, deadline: float | None = None, searched: dict[str, dict[str, str]] | None = None
) -> list[str]:
    """Ids or names in the store spelled most like ``text`` (looked up by its first letters).
    ``searched`` keeps the candidates of each probe for the next call: ids alike share them."""
    searched = {} if searched is None else searched
    found: dict[str, str] = {}
    for probe in dict.fromkeys((text[:3], text[:1])):
        if probe.strip():
            if probe not in searched:
                hits = store.search(probe, mode="prefix", limit=CANDIDATES, timeout=_left(deadline)).hits
                searched[probe] = {}
                for hit in hits:
                    searched[probe].setdefault(hit.name, hit.id)
                    searched[probe].setdefault(hit.id, hit.id)
            for key, node in searched[probe].items():
                found.setdefault(key, node)
    near = difflib.get_close_matches(text, list(found), n=SHOWN, cutoff=0.6)
    return [f"{found[n]} ({n})" if found[n] != n else n for n in near]
