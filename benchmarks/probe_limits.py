"""Measure the longest id and literal a store keeps exactly (the numbers in :mod:`engine.limits`).

    kgqa bench limits --store URI [--max-id BYTES] [--max-literal BYTES]

Each trial writes one triple through the store's bulk path *without* the engine's term check,
then reads it back from the short end: the id must come back whole with its edge (not cut to a
prefix, not dropped), the literal whole. The longest size that survives is found by bisection
between 1 and the ``--max-*`` bound (reported as ``>= bound`` when even that survives). Ids are
ASCII and written as absolute IRIs (``http://e.org/xxx…``) so that an RDF store keeps them
unencoded; the sizes are UTF-8 bytes of the id, or of the IRI an RDF store stores.
Every trial uses ids of its own, so the store is never cleared; use a scratch store.
Large literals load slowly on Virtuoso (minutes per trial in the megabytes).
"""
from __future__ import annotations

import itertools
import sys
from collections.abc import Callable

from engine.open import open_store
from engine.errors import StoreError
from engine.graph import Literal, Triple
from engine.store import Store

_PREFIX = "http://e.org/"
#: the largest ``--max-id`` and ``--max-literal``: far past every limit measured (Virtuoso keeps
#: literals to about 10 MB), and a trial of that size still fits in memory many times over
MAX_PROBED_ID = 1_000_000
MAX_PROBED_LITERAL = 100_000_000
_trial = itertools.count()


def id_survives(store: Store, size: int) -> bool:
    """Whether an id of ``size`` bytes comes back whole, with its edge."""
    k = next(_trial)
    subject = f"{_PREFIX}{k}-".ljust(size, "x")
    target = f"probe-target-{k}"
    return _round_trip(store, Triple(subject, "probe.r", target), target, "in", subject)


def literal_survives(store: Store, size: int) -> bool:
    """Whether a plain literal of ``size`` bytes comes back whole."""
    k = next(_trial)
    subject = f"probe-literal-{k}"
    value = Literal("y" * size)
    return _round_trip(store, Triple(subject, "probe.v", value), subject, "out", value)


def _round_trip(store: Store, triple: Triple, start: str, direction: str, expected: object) -> bool:
    store._add_triples([triple])  # type: ignore[attr-defined]  (past the term check on purpose)
    try:
        edges = store.expand([start], [triple.relation], direction=direction).edges
    except StoreError as e:  # e.g. FalkorDB cannot send a row over 64 KiB: the read runs out of time
        print(f"  reading back {len(str(expected)):,} bytes failed: {e}", file=sys.stderr)
        return False
    return [e.dst for e in edges] == [expected]


def longest(survives: Callable[[int], bool], low: int, high: int) -> str:
    """The largest size in [low, high] that survives (sizes that survive form a prefix)."""
    if survives(high):
        return f">= {high:,}"
    if not survives(low):
        return f"< {low:,}"
    while high - low > 1:
        mid = (low + high) // 2
        if survives(mid):
            low = mid
        else:
            high = mid
        print(f"  … between {low:,} and {high:,}", file=sys.stderr)
    return f"{low:,}"


def probe(uri: str, max_id: int, max_literal: int) -> None:
    """Print the longest id and (unless ``max_literal`` is 0) literal the store at ``uri`` keeps."""
    with open_store(uri, create=True) as store:  # it stores probe triples
        print(f"{store!r}")
        print(f"id (as stored): {longest(lambda n: id_survives(store, n), len(_PREFIX) + 8, max_id)} bytes")
        if max_literal:
            print(f"literal value: {longest(lambda n: literal_survives(store, n), 1, max_literal)} bytes")
