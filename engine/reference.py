"""A plain-Python reference implementation of the operation vocabulary.

It is the oracle the stores are tested against: every operation is written straight from
its definition in ``engine/store.py`` (``subgraph`` and ``shortest_paths`` too, node by node
on the breadth-first loop of ``engine/walk.py``, rather than through the base class's batched
store calls), favouring obviousness over speed. It compiles nothing: it answers each
operation of :mod:`engine.ops` in Python.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from engine.errors import UnsupportedOperationError
from engine.graph import (
    NAME_RELATION,
    TYPE_RELATION,
    Edge,
    Literal,
    Path,
    Term,
    Triple,
    path_key,
    term_key,
)
from engine.identifiers import (
    validate_direction,
    validate_hops,
    validate_ids,
    validate_limit,
    validate_relations,
)
from engine.ops import Compiled, Op
from engine.results import (
    PathsResult,
    QueryResult,
    RelationCount,
    SearchHit,
    StoreStats,
    SubgraphResult,
    TwoHopRelation,
)
from engine.sexpr.evaluate import Evaluator
from engine.sexpr.tree import Count
from engine.store import SCHEMA_RELATIONS, Store, text_matches, validate_endpoints, validate_exclude
from engine.timeouts import run_with_timeout
from engine.walk import breadth_first


class ReferenceStore(Store):
    """An in-memory graph with the vocabulary implemented naively."""

    dialect = "python"

    def __init__(self, triples: Iterable[Triple] = ()) -> None:
        self.uri = "reference:"
        self.triples: set[Triple] = set()
        self._out: dict[Term, list[Triple]] = defaultdict(list)
        self._in: dict[Term, list[Triple]] = defaultdict(list)
        self._evaluator: Evaluator | None = None
        self.add_triples(triples)

    # ------------------------------------------------------------------ writing
    def _add_triples(self, triples: Iterable[Triple]) -> None:
        self._evaluator = None
        for t in triples:
            if t not in self.triples:
                self.triples.add(t)
                self._out[t.subject].append(t)
                self._in[t.object].append(t)

    def count_triples(self) -> int:
        return len(self.triples)

    def stats(self) -> StoreStats:
        relations = Counter(t.relation for t in self.triples)
        entities = {t.subject for t in self.triples} | {
            t.object for t in self.triples if not isinstance(t.object, Literal)
        }
        return StoreStats(len(self.triples), len(entities), dict(sorted(relations.items())))

    # ------------------------------------------------------------------ the walk step
    def steps(self, node: Term, relation: str | None, direction: str) -> Iterator[Edge]:
        """Every edge a walk standing on ``node`` may take next (see the walk semantics)."""
        if isinstance(node, Literal):
            return
        if direction in ("out", "both"):
            for t in self._out.get(node, ()):
                if relation is None or t.relation == relation:
                    yield Edge(node, t.relation, t.object, True)
        if direction in ("in", "both"):
            for t in self._in.get(node, ()):
                if direction == "both" and t.subject == node:
                    continue  # a self-loop is met once, as forward
                if relation is None or t.relation == relation:
                    yield Edge(node, t.relation, t.subject, False)

    # ------------------------------------------------------------------ operations
    def _run(self, op: Op, compiled: Compiled | None) -> list:
        # every operation is answered whole: the limit is the base class's job
        answer = getattr(self, "_answer_" + op.name)
        return run_with_timeout(lambda: answer(op), op.timeout, "the reference store")

    def _answer_relations(self, op) -> list[RelationCount]:
        counts: Counter = Counter()
        for node in op.ids:
            for e in self.steps(node, None, op.direction):
                counts[(node, e.relation, "out" if e.forward else "in")] += 1
        return [RelationCount(i, r, d, n) for (i, r, d), n in counts.items()]

    def _answer_expand(self, op) -> list[Edge]:
        wanted = None if op.relations is None else set(op.relations)
        return [
            e for node in op.ids for e in self.steps(node, None, op.direction) if wanted is None or e.relation in wanted
        ]

    def _answer_walks(self, op) -> list[Path]:
        path, direction, distinct_edges = op.path, op.direction, op.distinct_edges
        starts = [s for s, _ in op.pairs] if op.pairs is not None else op.seeds
        wanted_ends = None if op.pairs is None else set(op.pairs)
        out: set[Path] = set()

        def extend(nodes: list[Term], rels: list[str], fwd: list[bool], used: set[Triple]) -> None:
            hop = len(rels)
            if hop == len(path):
                if wanted_ends is None or (nodes[0], nodes[-1]) in wanted_ends:
                    out.add(Path(tuple(nodes), tuple(rels), tuple(fwd)))
                return
            for e in self.steps(nodes[-1], path[hop], direction):
                t = e.triple()
                if (distinct_edges and t in used) or (path[hop] is None and e.relation in op.exclude):
                    continue
                extend(nodes + [e.dst], rels + [e.relation], fwd + [e.forward], used | {t})

        for seed in dict.fromkeys(starts):
            extend([seed], [], [], set())
        return list(out)

    def _answer_two_hop_relations(self, op) -> list[TwoHopRelation]:
        counts: Counter = Counter()
        for node in op.ids:
            middles = {e.dst for e in self.steps(node, op.r1, op.direction) if not isinstance(e.dst, Literal)}
            for m in middles:
                for e in self.steps(m, None, "both"):
                    counts[(node, e.relation, "out" if e.forward else "in")] += 1
        return [TwoHopRelation(i, op.r1, r, d, n) for (i, r, d), n in counts.items()]

    def _answer_literal_relations(self, op) -> list[RelationCount]:
        counts: Counter = Counter((lit, t.relation) for lit in op.literals for t in self._in.get(lit, ()))
        return [RelationCount(lit, r, "in", n) for (lit, r), n in counts.items()]

    def _answer_literal_two_hop_relations(self, op) -> list[TwoHopRelation]:
        counts: Counter = Counter()
        for lit in op.literals:
            middles = {t.subject for t in self._in.get(lit, ()) if t.relation == op.r1}
            for m in middles:
                for e in self.steps(m, None, "both"):
                    counts[(lit, e.relation, "out" if e.forward else "in")] += 1
        return [TwoHopRelation(i, op.r1, r, d, n) for (i, r, d), n in counts.items()]

    def _answer_names(self, op) -> list[tuple[str, Literal | None]]:
        rows: list[tuple[str, Literal | None]] = []
        for node in dict.fromkeys(op.ids):
            if self._out.get(node) or self._in.get(node):
                names = [t.object for t in self._out.get(node, ()) if t.relation == NAME_RELATION]
                rows += [(node, n) for n in names if isinstance(n, Literal)] or [(node, None)]
        return rows

    def _answer_types(self, op) -> list[tuple[str, str]]:
        wanted = set(op.ids)
        return [
            (t.subject, t.object)  # type: ignore[misc]
            for t in self.triples
            if t.relation == TYPE_RELATION and t.subject in wanted and not isinstance(t.object, Literal)
        ]

    def _answer_entities(self, op) -> list[str]:
        return list({t.subject for t in self.triples} | {t.object for t in self.triples if not isinstance(t.object, Literal)})

    def _answer_search(self, op) -> list[SearchHit]:
        named = {t.subject: t.object for t in self.triples if t.relation == NAME_RELATION and isinstance(t.object, Literal)}
        hits = {
            SearchHit(t.subject, t.object.value)  # type: ignore[union-attr]
            for t in self.triples
            if t.subject in named and t.relation == NAME_RELATION and isinstance(t.object, Literal)
            and text_matches(t.object.value, op.text, op.mode)
        }
        nodes = {t.subject for t in self.triples} | {t.object for t in self.triples if not isinstance(t.object, Literal)}
        hits |= {SearchHit(n, n) for n in nodes - named.keys() if text_matches(n, op.text, op.mode)}  # type: ignore[arg-type]
        return list(hits)

    def _answer_execute(self, op) -> list:
        if self._evaluator is None:
            self._evaluator = Evaluator(self.triples)
        result = self._evaluator.run(op.tree)
        return [result] if isinstance(op.tree, Count) else list(result)  # type: ignore[arg-type]

    def _query(
        self, text: str, params: dict[str, Any], allow_service: bool, timeout: float | None, limit: int | None
    ) -> QueryResult:
        raise UnsupportedOperationError("the reference store has no query language")

    # ------------------------------------------------------------------ by definition
    def subgraph(self, seeds: Sequence[str], hops: int, direction: str = "both", relations=None, limit=None, *, timeout=None):
        seeds = validate_ids(seeds)
        hops = validate_hops(hops)
        direction = validate_direction(direction)
        wanted = None if relations is None else set(validate_relations(relations))
        limit = validate_limit(limit)
        depth: dict[Term, int] = {s: 0 for s in seeds}
        edges: set[Triple] = set()

        def layer(frontier: list[str]) -> list[Edge]:
            steps = (e for node in frontier for e in self.steps(node, None, direction))
            return [e for e in steps if wanted is None or e.relation in wanted]

        for layer_depth, edge, first in breadth_first(seeds, hops, layer):
            edges.add(edge.triple())
            if first:
                depth[edge.dst] = layer_depth
        ordered = sorted(edges, key=lambda t: (t.subject, t.relation, term_key(t.object)))
        if limit is not None and len(ordered) > limit:
            return SubgraphResult(ordered[:limit], depth, True)
        return SubgraphResult(ordered, depth)

    def shortest_paths(
        self, sources, targets, max_hops: int = 3, limit=None, *, exclude=SCHEMA_RELATIONS, timeout=None
    ) -> PathsResult:
        sources, targets = validate_endpoints(sources, targets)
        max_hops = validate_hops(max_hops, "max_hops")
        limit = validate_limit(limit)
        excluded = set(validate_exclude(exclude))
        found: list[Path] = []
        for s in sources:
            # BFS layers, remembering every edge that reaches a node at its shortest distance.
            dist: dict[Term, int] = {s: 0}
            parents: dict[Term, list[Edge]] = defaultdict(list)

            def layer(frontier: list[str]) -> list[Edge]:
                return [e for node in frontier for e in self.steps(node, None, "both") if e.relation not in excluded]

            for depth, edge, first in breadth_first([s], max_hops, layer):
                if first:
                    dist[edge.dst] = depth
                if dist[edge.dst] == depth:
                    parents[edge.dst].append(edge)
            for t in targets:
                if t == s or t not in dist:
                    continue
                found.extend(self._unwind(s, t, parents))
        found.sort(key=path_key)
        if limit is not None and len(found) > limit:
            return PathsResult(found[:limit], True)
        return PathsResult(found)

    def _unwind(self, source: str, node: Term, parents: dict[Term, list[Edge]]) -> list[Path]:
        if node == source:
            return [Path((source,), (), ())]
        out = []
        for e in parents[node]:
            for p in self._unwind(source, e.src, parents):
                out.append(Path(p.nodes + (node,), p.relations + (e.relation,), p.forward + (e.forward,)))
        return out
