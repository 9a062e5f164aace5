"""RoG's retrieval as its released code runs it, the baseline KGQA users run today: an
undirected networkx graph and a breadth-first search that follows the plan's relations hop by hop
(RoG's Algorithm 1), on a prebuilt graph of the whole KG (:class:`NetworkxGlobal`) or on a graph
built per question from the question's subgraph, as RoG's pipeline does
(:class:`NetworkxPerQuestion`). The other operations are the obvious networkx loops; shortest
paths use ``nx.all_shortest_paths``, as RoG's training-target code does.

Three things are done differently from RoG's released code so that the answers are the
engine's (its walk semantics): the graph is a MultiGraph (RoG's ``nx.Graph`` keeps one relation
per node pair, losing parallel edges), a path never uses the same edge twice (RoG's BFS can walk
an edge back), and literals are dead ends. None of them changes the cost of the search.
"""
from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import networkx as nx

from benchmarks.baselines.csr_floor import CsrFloor
from benchmarks.tasks import ALL_OPS, Answer, Retriever, Task, count_rows, python_answer
from engine.graph import Edge, Literal, Path, Term, Triple


def _half_edge(node: Term, other: Term, relation: str, subject: Term, direction: str) -> Edge | None:
    """The edge met from ``node`` along a stored triple (``subject`` is its subject), or None
    when ``direction`` excludes it. With ``both`` a self-loop is met once, as forward."""
    if node == other:
        forward = direction != "in"
    else:
        forward = subject == node
        if (direction == "out" and not forward) or (direction == "in" and forward):
            return None
    return Edge(node, relation, other, forward)


def build_multigraph(triples: Iterable[Triple]) -> nx.MultiGraph:
    """RoG's graph build (``G.add_edge(h, t, relation=r)`` per triple), keeping parallel edges:
    an edge's key is (relation, stored subject), which tells its orientation."""
    graph = nx.MultiGraph()
    graph.add_edges_from((t.subject, t.object, (t.relation, t.subject)) for t in triples)
    return graph


def half_edges(graph: nx.MultiGraph, node: Term, direction: str) -> Iterator[Edge]:
    for other, keys in graph.adj[node].items():
        for relation, subject in keys:
            edge = _half_edge(node, other, relation, subject, direction)
            if edge is not None:
                yield edge


def rog_bfs(graph: nx.MultiGraph, seed: Term, rule: tuple[str, ...], direction: str = "both") -> list[Path]:
    """RoG's rule-following BFS: a queue of partial paths, each extended by the neighbours whose
    edge carries the rule's next relation, kept when it has ``len(rule)`` hops."""
    found: list[Path] = []
    queue: deque[tuple[Term, tuple[Edge, ...]]] = deque([(seed, ())])
    while queue:
        node, hops = queue.popleft()
        depth = len(hops)
        if depth == len(rule):
            found.append(Path((seed,) + tuple(e.dst for e in hops), rule, tuple(e.forward for e in hops)))
            continue
        if node not in graph or (depth and isinstance(node, Literal)):
            continue
        used = [e.triple() for e in hops]
        for edge in half_edges(graph, node, direction):
            if edge.relation == rule[depth] and edge.triple() not in used:
                queue.append((edge.dst, hops + (edge,)))
    return found


class NetworkxGlobal(Retriever):
    """Every op on one networkx graph of the whole KG, built once."""

    name = "networkx-global"
    ops = ALL_OPS

    def __init__(self, triples: Iterable[Triple]) -> None:
        self.graph = build_multigraph(triples)
        self.has_literals = any(isinstance(n, Literal) for n in self.graph)

    def _entities(self, ids: Iterable[str]) -> list[str]:
        return [i for i in dict.fromkeys(ids) if i in self.graph]

    def run(self, task: Task, prepared: Any) -> Any:
        g = self.graph
        if task.op == "follow_paths":
            return [p for s in self._entities(task.ids) for p in rog_bfs(g, s, task.path)]
        if task.op == "relations":
            return count_rows((n, e) for n in self._entities(task.ids) for e in half_edges(g, n, "both"))
        if task.op == "two_hop_relations":
            rows = []
            for n in self._entities(task.ids):
                middles = {
                    e.dst for e in half_edges(g, n, "both") if e.relation == task.path[0] and not isinstance(e.dst, Literal)
                }
                rows.extend((n, e) for m in middles for e in half_edges(g, m, "both"))
            return [(w, task.path[0], r, d, c) for w, r, d, c in count_rows(rows)]
        if task.op == "subgraph":
            return nx_subgraph(g, task.ids, task.hops)
        if task.op == "fanout":
            hop = [e for n in self._entities(task.ids) for e in half_edges(g, n, "both")]
            neighbours = dict.fromkeys(e.dst for e in hop if not isinstance(e.dst, Literal))
            return hop, count_rows((n, e) for n in neighbours for e in half_edges(g, n, "both"))
        if task.op == "shortest_paths":
            return nx_shortest_paths(g, task.ids, task.targets, task.hops, self.has_literals)
        raise ValueError(task.op)

    def answer(self, task: Task, raw: Any) -> Answer:
        return python_answer(task, raw)


def nx_subgraph(graph: nx.MultiGraph, seeds: Iterable[str], hops: int) -> tuple[list[Triple], dict[Term, int]]:
    depth: dict[Term, int] = {s: 0 for s in dict.fromkeys(seeds)}
    frontier = [s for s in depth if s in graph]
    met: set[Triple] = set()
    for layer in range(1, hops + 1):
        nxt = []
        for node in frontier:
            for e in half_edges(graph, node, "both"):
                met.add(e.triple())
                if e.dst not in depth:
                    depth[e.dst] = layer
                    if not isinstance(e.dst, Literal):
                        nxt.append(e.dst)
        frontier = nxt
    return list(met), depth


def nx_shortest_paths(
    graph: nx.MultiGraph, sources: Iterable[str], targets: Iterable[str], max_hops: int, has_literals: bool
) -> list[Path]:
    """``nx.all_shortest_paths`` per (source, target), each node path expanded over parallel edges."""
    found: list[Path] = []
    for s in dict.fromkeys(sources):
        for t in dict.fromkeys(targets):
            if s == t or s not in graph or t not in graph:
                continue
            # literals are dead ends: hide every literal but the target
            view = nx.subgraph_view(graph, filter_node=lambda n, t=t: n == t or not isinstance(n, Literal)) if has_literals else graph
            try:
                node_paths = list(nx.all_shortest_paths(view, s, t))
            except nx.NetworkXNoPath:
                continue
            if len(node_paths[0]) - 1 > max_hops:
                continue
            for nodes in node_paths:
                options = [list(half_edges_between(graph, a, b)) for a, b in zip(nodes, nodes[1:])]
                for hops in itertools.product(*options):
                    found.append(Path(tuple(nodes), tuple(e.relation for e in hops), tuple(e.forward for e in hops)))
    return found


def half_edges_between(graph: nx.MultiGraph, a: Term, b: Term) -> Iterator[Edge]:
    for relation, subject in graph.adj[a][b]:
        edge = _half_edge(a, b, relation, subject, "both")
        if edge is not None:
            yield edge


class NetworkxPerQuestion(Retriever):
    """RoG's pipeline as it runs: per question, build the graph from the question's subgraph
    (the triples within the question's hops of its topic entity, as the datasets ship them),
    then search it. The subgraph is cut beforehand (untimed); the build and search are timed."""

    name = "networkx-per-question"
    ops = frozenset({"follow_paths", "shortest_paths"})

    def __init__(self, floor: CsrFloor) -> None:
        self.floor = floor

    def prepare(self, task: Task) -> list[tuple[str, list[Triple]]]:
        """Each question's subgraph (a batched task holds one question per seed)."""
        hops = len(task.path) if task.op == "follow_paths" else task.hops
        return [(seed, self.floor.ball([seed], hops)) for seed in dict.fromkeys(task.ids)]

    def run(self, task: Task, prepared: list[tuple[str, list[Triple]]]) -> Any:
        found: list[Path] = []
        for seed, triples in prepared:
            graph = build_multigraph(triples)
            if task.op == "follow_paths":
                found.extend(rog_bfs(graph, seed, task.path) if seed in graph else ())
            else:
                has_literals = any(isinstance(t.object, Literal) for t in triples)
                found.extend(nx_shortest_paths(graph, [seed], task.targets, task.hops, has_literals))
        return found

    def answer(self, task: Task, raw: Any) -> Answer:
        return python_answer(task, raw)
