"""ToG-style retrieval on a store, the per-call baseline: one query per (entity, relation,
direction) through the store's raw query path, as ToG's Freebase functions issue them, assembled
in Python."""
from __future__ import annotations

from typing import Any

from benchmarks.tasks import ALL_OPS, Answer, Retriever, Task, count_rows, python_answer
from engine.graph import Edge, Literal, Path, Term
from engine.store import Store


class TogLoop(Retriever):
    """ToG-style retrieval on a store: one query per (entity, relation, direction).

    On SPARQL stores the queries are ToG's own shapes (``SELECT ?x WHERE { e r ?x }``, its
    head/tail entity and relation searches) sent through ``store.query``; other stores get the
    same one-entity-at-a-time loop through ``store.expand``.
    """

    ops = ALL_OPS

    def __init__(self, store: Store, label: str) -> None:
        self.store = store
        self.name = f"tog-loop:{label}"
        self.sparql = store.dialect == "sparql"

    def neighbours(self, node: str, relation: str | None, direction: str) -> list[Edge]:
        """The edges met from ``node`` (through ``relation``, or any), one query per direction."""
        if not self.sparql:
            return self.store.expand([node], None if relation is None else [relation], direction).edges
        found: list[Edge] = []
        params = {"e": node} if relation is None else {"e": node, "r": relation}
        if direction in ("out", "both"):
            if relation is None:
                rows = self.store.query("SELECT ?r ?x WHERE { $e ?r ?x }", params).rows
                found.extend(Edge(node, r, x, True) for r, x in rows)
            else:
                rows = self.store.query("SELECT ?x WHERE { $e $r ?x }", params).rows
                found.extend(Edge(node, relation, x, True) for (x,) in rows)
        if direction in ("in", "both"):
            if relation is None:
                rows = self.store.query("SELECT ?r ?x WHERE { ?x ?r $e }", params).rows
            else:
                rows = [(relation, x) for (x,) in self.store.query("SELECT ?x WHERE { ?x $r $e }", params).rows]
            # with both, a self-loop was already met forward
            found.extend(Edge(node, r, x, False) for r, x in rows if direction == "in" or x != node)
        return found

    def run(self, task: Task, prepared: Any) -> Any:
        if task.op == "follow_paths":
            return [p for seed in dict.fromkeys(task.ids) for p in self._ground(seed, task.path)]
        if task.op == "relations":
            return count_rows((n, e) for n in dict.fromkeys(task.ids) for e in self.neighbours(n, None, "both"))
        if task.op == "two_hop_relations":
            rows = []
            for n in dict.fromkeys(task.ids):
                middles = {e.dst for e in self.neighbours(n, task.path[0], "both") if not isinstance(e.dst, Literal)}
                rows.extend((n, e) for m in middles for e in self.neighbours(m, None, "both"))  # type: ignore[arg-type]
            return [(w, task.path[0], r, d, c) for w, r, d, c in count_rows(rows)]
        if task.op == "subgraph":
            depth: dict[Term, int] = {s: 0 for s in dict.fromkeys(task.ids)}
            frontier, met = list(depth), set()
            for layer in range(1, task.hops + 1):
                nxt = []
                for node in frontier:
                    for e in self.neighbours(node, None, "both"):  # type: ignore[arg-type]
                        met.add(e.triple())
                        if e.dst not in depth:
                            depth[e.dst] = layer
                            if not isinstance(e.dst, Literal):
                                nxt.append(e.dst)
                frontier = nxt
            return list(met), depth
        if task.op == "fanout":
            hop = [e for n in dict.fromkeys(task.ids) for e in self.neighbours(n, None, "both")]
            neighbours = dict.fromkeys(e.dst for e in hop if not isinstance(e.dst, Literal))
            return hop, count_rows((n, e) for n in neighbours for e in self.neighbours(n, None, "both"))  # type: ignore[arg-type]
        if task.op == "shortest_paths":
            return self._shortest_paths(task)
        raise ValueError(task.op)

    def _ground(self, seed: str, path: tuple[str, ...]) -> list[Path]:
        """One question's plan, hop by hop, one query per distinct frontier entity and direction."""
        partial = [(e,) for e in self.neighbours(seed, path[0], "both")]
        for relation in path[1:]:
            heads = dict.fromkeys(h[-1].dst for h in partial if not isinstance(h[-1].dst, Literal))
            met = {node: self.neighbours(node, relation, "both") for node in heads}  # type: ignore[arg-type]
            partial = [
                h + (e,) for h in partial for e in met.get(h[-1].dst, ()) if e.triple() not in [x.triple() for x in h]
            ]
        return [Path((seed,) + tuple(e.dst for e in h), path, tuple(e.forward for e in h)) for h in partial]

    def _shortest_paths(self, task: Task) -> list[Path]:
        """BFS from each source, one neighbour query per frontier entity, stopping once every
        target is reached; then every path back along edges that go one layer down."""
        found: list[Path] = []
        for s in dict.fromkeys(task.ids):
            targets = [t for t in dict.fromkeys(task.targets) if t != s]
            dist: dict[Term, int] = {s: 0}
            parents: dict[Term, list[Edge]] = {}
            frontier: list[Term] = [s]
            for layer in range(1, task.hops + 1):
                if not frontier or all(t in dist for t in targets):
                    break
                nxt = []
                for node in frontier:
                    for e in self.neighbours(node, None, "both"):  # type: ignore[arg-type]
                        if e.dst not in dist:
                            dist[e.dst] = layer
                            nxt.append(e.dst)
                        if dist[e.dst] == layer:
                            parents.setdefault(e.dst, []).append(e)
                frontier = [n for n in nxt if not isinstance(n, Literal)]
            for t in targets:
                if t in dist:
                    found.extend(_unwind(s, t, parents))
        return found

    def answer(self, task: Task, raw: Any) -> Answer:
        return python_answer(task, raw)


def _unwind(source: Term, node: Term, parents: dict[Term, list[Edge]]) -> list[Path]:
    if node == source:
        return [Path((source,), (), ())]
    return [
        Path(p.nodes + (node,), p.relations + (e.relation,), p.forward + (e.forward,))
        for e in parents.get(node, ())
        for p in _unwind(source, e.src, parents)
    ]
