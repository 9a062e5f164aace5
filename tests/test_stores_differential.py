"""Every store (the ``store`` fixture of the contract tests) against the plain-Python
reference, on the same random graphs.

Each graph is loaded once per store; then a few hundred random calls of every operation must
give exactly the reference's answer (or, under a limit, a subset of the right size).
"""
from __future__ import annotations

import random

import pytest

from engine.graph import NAME_RELATION, TYPE_RELATION, Literal
from engine.reference import ReferenceStore
from engine.stores.sparql_store import LITERALS_PER_QUERY
from tests.random_graphs import (
    ABSENT_LITERALS,
    AWKWARD_IDS,
    NAMES,
    RELATIONS,
    literal_objects,
    node_ids,
    random_graph,
)

SEEDS = [1, 2, 3]
DIRECTIONS = ["out", "in", "both"]
CALLS = 60
ID_SEARCHES = [(node, "exact") for node in [*AWKWARD_IDS, "n1", "no-such-node"]] + [
    (text, mode)
    for mode, texts in (
        ("prefix", ["N", "n1", "ÉV", "év", "X'", "{}", "100%", "THE P", "A/B#"]),
        ("contains", ["1", "vian", "'Y\"", "/b#", "`", "0%", " pro", "C?D", "É"]),
    )
    for text in texts
]


def _sample(rng: random.Random, pool: list[str], k: int) -> list[str]:
    return rng.sample(pool, min(k, len(pool)))


def _anchors(rng: random.Random, ids: list[str], literals: list) -> list:
    """Node ids and literals mixed (ARG-KBQA's anchors), or literals alone."""
    chosen = _sample(rng, literals + ABSENT_LITERALS, rng.randint(1, 3))
    return chosen + _sample(rng, ids, rng.randint(0, 2))


def _calls(rng: random.Random, ids: list[str], literals: list):
    """Yield (operation, args, kwargs) triples drawn at random."""
    rels = RELATIONS + [NAME_RELATION, TYPE_RELATION]
    for _ in range(CALLS):
        seeds = _sample(rng, ids + ["no-such-node"], rng.randint(1, 4))
        direction = rng.choice(DIRECTIONS)
        anchors = _anchors(rng, ids, literals)
        yield "relations", (seeds,), {"direction": direction}
        yield "relations", (anchors,), {"direction": direction}
        yield "two_hop_relations", (anchors, rng.choice(rels)), {"direction": direction}
        yield "expand", (seeds,), {"relations": rng.choice([None, _sample(rng, rels, 2)]), "direction": direction}
        path = [rng.choice(RELATIONS) for _ in range(rng.randint(1, 3))]
        yield "follow_paths", (seeds, path), {"direction": direction}
        yield "follow_paths", (seeds, path), {"direction": direction, "distinct_edges": False}
        yield "subgraph", (seeds, rng.randint(1, 3)), {
            "direction": direction,
            "relations": rng.choice([None, _sample(rng, RELATIONS, 3)]),
        }
        exclude = rng.choice([{}, {"exclude": ()}, {"exclude": _sample(rng, rels, 2)}])
        yield "shortest_paths", (_sample(rng, ids, 2), _sample(rng, ids, 3)), {"max_hops": rng.randint(1, 3), **exclude}
        yield "two_hop_relations", (seeds, rng.choice(RELATIONS)), {"direction": direction}
    yield "names", (ids + ["no-such-node"],), {}
    yield "types", (ids,), {}
    yield "entities", (), {}
    for name in NAMES:
        for mode in ("exact", "prefix", "contains"):
            text = name if mode == "exact" else name[1:4].lower() if mode == "contains" else name[:2].upper()
            yield "search", (text,), {"mode": mode, "limit": None}
    # nodes without a name are found by their id (percent-encoded in RDF stores)
    for text, mode in ID_SEARCHES:
        yield "search", (text,), {"mode": mode, "limit": None}


@pytest.mark.parametrize("seed", SEEDS)
def test_every_operation_matches_the_reference(store, seed):
    triples = random_graph(seed)
    reference = ReferenceStore(triples)
    s = store(triples)
    assert s.count_triples() == len(triples)
    assert s.stats() == reference.stats()
    assert s.relation_names() == reference.relation_names() == sorted(reference.stats().relations)
    rng = random.Random(seed * 1000)
    for op, args, kwargs in _calls(rng, node_ids(triples), literal_objects(triples)):
        expected = getattr(reference, op)(*args, **kwargs)
        got = getattr(s, op)(*args, **kwargs)
        assert got == expected, f"{store.kind} {op}{args}{kwargs}"


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_limits_cut_to_a_subset_of_the_full_answer(store, seed):
    triples = random_graph(seed, edges=60)
    reference = ReferenceStore(triples)
    s = store(triples)
    ids = node_ids(triples)
    literals = literal_objects(triples)
    rng = random.Random(seed)
    for _ in range(20):
        seeds = _sample(rng, ids, 3)
        limit = rng.randint(1, 6)
        cases = [
            ("relations", (seeds,), {}, "rows"),
            ("expand", (seeds,), {}, "edges"),
            ("follow_paths", (seeds, [rng.choice(RELATIONS), rng.choice(RELATIONS)]), {}, "paths"),
            ("subgraph", (seeds, 2), {}, "edges"),
            ("shortest_paths", (seeds, _sample(rng, ids, 4)), {"max_hops": 3}, "paths"),
            ("two_hop_relations", (seeds, rng.choice(RELATIONS)), {}, "rows"),
            ("relations", (_anchors(rng, ids, literals),), {}, "rows"),
            ("two_hop_relations", (_anchors(rng, ids, literals), NAME_RELATION), {}, "rows"),
            ("search", ("a",), {"mode": "contains"}, "hits"),
            ("entities", (), {}, "ids"),
        ]
        for op, args, kwargs, field in cases:
            full = getattr(getattr(reference, op)(*args, **kwargs), field)
            got = getattr(s, op)(*args, **kwargs, limit=limit)
            rows = getattr(got, field)
            where = f"{store.kind} {op}{args} limit={limit}"
            if len(full) > limit:
                assert got.truncated and len(rows) == limit, where
                assert all(row in full for row in rows), where
            else:
                assert not got.truncated and rows == full, where


def test_more_literal_anchors_than_one_query_holds(store):
    # a SPARQL store asks for LITERALS_PER_QUERY literal anchors per query; the present ones come last
    triples = random_graph(3, edges=60)
    reference = ReferenceStore(triples)
    s = store(triples)
    absent = [Literal.make(f"absent {i}") for i in range(2 * LITERALS_PER_QUERY)]
    anchors = absent + literal_objects(triples) + node_ids(triples)[:2]
    for direction in DIRECTIONS:
        assert s.relations(anchors, direction) == reference.relations(anchors, direction), direction
    for r1 in RELATIONS[:2]:
        assert s.two_hop_relations(anchors, r1) == reference.two_hop_relations(anchors, r1), r1
    full = reference.relations(anchors).rows
    cut = s.relations(anchors, limit=3)
    assert cut.truncated and len(cut.rows) == 3 and all(row in full for row in cut.rows)


def test_loading_twice_changes_nothing(store):
    triples = random_graph(7)
    s = store(triples)
    before = s.stats()
    s.add_triples(triples)
    assert s.stats() == before


# Hypothesis draws many more graphs than the servers could load in reasonable time; the
# embedded store runs them all, and shares its compiler with the Virtuoso store.
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.graph import Literal, Triple
from engine.stores.oxigraph import OxigraphStore

_node = st.sampled_from(["a", "b", "c", "d", "Évian", "x'y"])
_object = st.one_of(_node, st.sampled_from([Literal.make("v"), Literal.make("w", lang="en")]))
_triple = st.builds(Triple, _node, st.sampled_from(["r", "s"]), _object)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    triples=st.lists(_triple, min_size=1, max_size=14),
    seeds=st.lists(_node, min_size=1, max_size=3),
    path=st.lists(st.sampled_from(["r", "s"]), min_size=1, max_size=3),
    direction=st.sampled_from(DIRECTIONS),
    hops=st.integers(1, 3),
)
def test_oxigraph_matches_the_reference_on_drawn_graphs(triples, seeds, path, direction, hops):
    reference = ReferenceStore(triples)
    store = OxigraphStore(None)
    store.add_triples(triples)
    assert store.follow_paths(seeds, path, direction) == reference.follow_paths(seeds, path, direction)
    assert store.follow_paths(seeds, path, direction, distinct_edges=False) == reference.follow_paths(
        seeds, path, direction, distinct_edges=False
    )
    assert store.subgraph(seeds, hops, direction) == reference.subgraph(seeds, hops, direction)
    assert store.shortest_paths(seeds, ["a", "b", "c"], hops) == reference.shortest_paths(seeds, ["a", "b", "c"], hops)
    anchors = [*seeds, Literal.make("v"), Literal.make("w", lang="en"), Literal.make("w")]
    assert store.relations(anchors, direction) == reference.relations(anchors, direction)
    assert store.two_hop_relations(anchors, path[0], direction) == reference.two_hop_relations(anchors, path[0], direction)
