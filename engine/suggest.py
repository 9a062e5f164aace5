"""Why an answer is empty: the ids a call named that are not in the store, and the relations
that the nodes it reached do not have, each with the nearest ones the store does hold
(``directd_by`` → ``directed_by``). The command line says so instead of a bare ``(nothing)``."""
from __future__ import annotations

import difflib
from collections.abc import Sequence

from engine.store import Store

#: how many candidates a lookup reads, and how many suggestions a line shows
CANDIDATES = 2000
SHOWN = 3


def missing_ids(store: Store, ids: Sequence[str]) -> list[str]:
    """A line for each id that is not in the store, with the nearest ids or names it holds."""
    names = store.names(list(dict.fromkeys(ids)))
    lines = []
    for node, name in names.items():
        if name is not None:
            continue
        near = nearest_entities(store, node)
        hint = f"; nearest: {', '.join(near)}" if near else ""
        lines.append(f"{node!r} is not in the store{hint}")
    return lines


def missing_relations(store: Store, seeds: Sequence[str], path: Sequence[str], direction: str = "both") -> list[str]:
    """A line for the first relation of ``path`` that the nodes reached so far (from ``seeds``
    along the relations before it) do not have, with their relations nearest to it."""
    ends: list[str] = list(dict.fromkeys(seeds))
    for i, relation in enumerate(path):
        if not ends:
            return []
        held = sorted({r.relation for r in store.relations(ends, direction).rows})
        if relation not in held:
            where = "the seeds" if i == 0 else f"the nodes reached through {', '.join(path[:i])}"
            near = difflib.get_close_matches(relation, held, n=SHOWN, cutoff=0.5)
            hint = f"; nearest: {', '.join(near)}" if near else f"; they have {', '.join(held[:10]) or 'no edges'}"
            return [f"no edge of {where} has the relation {relation!r}{hint}"]
        reached = store.follow_paths(ends, [relation], direction, limit=CANDIDATES).paths
        ends = list(dict.fromkeys(p.end for p in reached if isinstance(p.end, str)))
    return []


def nearest_entities(store: Store, text: str) -> list[str]:
    """Ids or names in the store spelled most like ``text`` (looked up by its first letters)."""
    found: dict[str, str] = {}
    for probe in dict.fromkeys((text[:3], text[:1])):
        if probe.strip():
            for hit in store.search(probe, mode="prefix", limit=CANDIDATES).hits:
                found.setdefault(hit.name, hit.id)
                found.setdefault(hit.id, hit.id)
    near = difflib.get_close_matches(text, list(found), n=SHOWN, cutoff=0.6)
    return [f"{found[n]} ({n})" if found[n] != n else n for n in near]
