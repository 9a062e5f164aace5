"""A plain-Python reference implementation of the operation vocabulary.

It is the oracle the stores are tested against: every operation is written straight from
its definition in ``engine/store.py`` (``subgraph`` and ``shortest_paths`` too, rather than
through the base class's store-side algorithms), favouring obviousness over speed.
"""
from __future__ import annotations

from collections import Counter, defaultdict, deque
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
from engine.sexpr.tree import Top
from engine.store import Store
from engine.timeouts import run_with_timeout


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

    # ------------------------------------------------------------------ primitives
    def _relations(self, ids: list[str], direction: str, fetch: int | None) -> list[RelationCount]:
        counts: Counter = Counter()
        for node in ids:
            for e in self.steps(node, None, direction):
                counts[(node, e.relation, "out" if e.forward else "in")] += 1
        return [RelationCount(i, r, d, n) for (i, r, d), n in counts.items()]

    def _expand(self, ids: list[str], relations: list[str] | None, direction: str, fetch: int | None) -> list[Edge]:
        wanted = None if relations is None else set(relations)
        return [
            e for node in ids for e in self.steps(node, None, direction) if wanted is None or e.relation in wanted
        ]

    def _walks(self, seeds, path, direction, fetch, pairs, distinct_edges=True):
        starts = [s for s, _ in pairs] if pairs is not None else seeds
        wanted_ends = None if pairs is None else set(pairs)
        out: set[Path] = set()

        def extend(nodes: list[Term], rels: list[str], fwd: list[bool], used: set[Triple]) -> None:
            hop = len(rels)
            if hop == len(path):
                if wanted_ends is None or (nodes[0], nodes[-1]) in wanted_ends:
                    out.add(Path(tuple(nodes), tuple(rels), tuple(fwd)))
                return
            for e in self.steps(nodes[-1], path[hop], direction):
                t = e.triple()
                if distinct_edges and t in used:
                    continue
                extend(nodes + [e.dst], rels + [e.relation], fwd + [e.forward], used | {t})

        for seed in dict.fromkeys(starts):
            extend([seed], [], [], set())
        return list(out)

    def _two_hop_relations(self, ids, r1, direction, fetch):
        counts: Counter = Counter()
        for node in ids:
            middles = {e.dst for e in self.steps(node, r1, direction) if not isinstance(e.dst, Literal)}
            for m in middles:
                for e in self.steps(m, None, "both"):
                    counts[(node, e.relation, "out" if e.forward else "in")] += 1
        return [TwoHopRelation(i, r1, r, d, n) for (i, r, d), n in counts.items()]

    def _literal_relations(self, literals: list[Literal], fetch: int | None) -> list[RelationCount]:
        counts: Counter = Counter((lit, t.relation) for lit in literals for t in self._in.get(lit, ()))
        return [RelationCount(lit, r, "in", n) for (lit, r), n in counts.items()]

    def _literal_two_hop_relations(self, literals, r1, fetch):
        counts: Counter = Counter()
        for lit in literals:
            middles = {t.subject for t in self._in.get(lit, ()) if t.relation == r1}
            for m in middles:
                for e in self.steps(m, None, "both"):
                    counts[(lit, e.relation, "out" if e.forward else "in")] += 1
        return [TwoHopRelation(i, r1, r, d, n) for (i, r, d), n in counts.items()]

    def _names(self, ids: list[str]) -> dict[str, list[Literal]]:
        wanted = set(ids)
        found: dict[str, list[Literal]] = defaultdict(list)
        for t in self.triples:
            if t.relation == NAME_RELATION and t.subject in wanted and isinstance(t.object, Literal):
                found[t.subject].append(t.object)
        return found

    def _types(self, ids: list[str]) -> dict[str, list[str]]:
        wanted = set(ids)
        found: dict[str, list[str]] = defaultdict(list)
        for t in self.triples:
            if t.relation == TYPE_RELATION and t.subject in wanted and not isinstance(t.object, Literal):
                found[t.subject].append(t.object)
        return found

    def _search(self, text: str, mode: str, fetch: int | None) -> list[SearchHit]:
        needle = text.lower()
        hits = set()
        for t in self.triples:
            if t.relation != NAME_RELATION or not isinstance(t.object, Literal):
                continue
            name = t.object.value
            if (
                (mode == "exact" and name == text)
                or (mode == "prefix" and name.lower().startswith(needle))
                or (mode == "contains" and needle in name.lower())
            ):
                hits.add(SearchHit(t.subject, name))
        return list(hits)

    def _query(self, text: str, params: dict[str, Any]) -> QueryResult:
        raise UnsupportedOperationError("the reference store has no query language")

    def _execute_tree(self, tree: Top, timeout: float | None = None) -> set[Term] | int:
        if self._evaluator is None:
            self._evaluator = Evaluator(self.triples)
        evaluator = self._evaluator
        return run_with_timeout(lambda: evaluator.run(tree), timeout, "the reference store")

    # ------------------------------------------------------------------ by definition
    def subgraph(self, seeds: Sequence[str], hops: int, direction: str = "both", relations=None, limit=None):
        seeds = validate_ids(seeds)
        hops = validate_hops(hops)
        direction = validate_direction(direction)
        wanted = None if relations is None else set(validate_relations(relations))
        limit = validate_limit(limit)
        depth: dict[Term, int] = {s: 0 for s in seeds}
        queue = deque(seeds)
        edges: set[Triple] = set()
        while queue:
            node = queue.popleft()
            if depth[node] == hops:
                continue
            for e in self.steps(node, None, direction):
                if wanted is not None and e.relation not in wanted:
                    continue
                edges.add(e.triple())
                if e.dst not in depth:
                    depth[e.dst] = depth[node] + 1
                    queue.append(e.dst)
        ordered = sorted(edges, key=lambda t: (t.subject, t.relation, term_key(t.object)))
        if limit is not None and len(ordered) > limit:
            return SubgraphResult(ordered[:limit], depth, True)
        return SubgraphResult(ordered, depth)

    def shortest_paths(self, sources, targets, max_hops: int = 3, limit=None) -> PathsResult:
        sources = validate_ids(sources)
        targets = validate_ids(targets)
        max_hops = validate_hops(max_hops, "max_hops")
        limit = validate_limit(limit)
        found: list[Path] = []
        for s in sources:
            # BFS layers, remembering every edge that reaches a node at its shortest distance.
            dist: dict[Term, int] = {s: 0}
            parents: dict[Term, list[Edge]] = defaultdict(list)
            frontier = [s]
            while frontier and dist[frontier[0]] < max_hops:
                nxt: list[Term] = []
                for node in frontier:
                    for e in self.steps(node, None, "both"):
                        if e.dst not in dist:
                            dist[e.dst] = dist[node] + 1
                            nxt.append(e.dst)
                        if dist[e.dst] == dist[node] + 1:
                            parents[e.dst].append(e)
                frontier = nxt
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
