"""The in-memory floor the stores are timed against: the whole graph in NumPy
compressed-sparse-row arrays, every operation vectorised — what no database beats. Its answers
are exactly the stores' (the engine's walk semantics: no edge used twice per walk, literals are
dead ends), so it is also the reference every timed answer is checked against."""
from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.tasks import (
    ALL_OPS,
    Answer,
    Retriever,
    Task,
    edges_answer,
    paths_answer,
    subgraph_answer,
)
from engine.graph import Edge, Literal, Path, Term, Triple

RowsAnswer = tuple


@dataclass
class _Walks:
    """Walk instances as arrays: ``nodes`` (W, h+1), ``edges`` and ``forward`` (W, h)."""

    nodes: np.ndarray
    edges: np.ndarray
    forward: np.ndarray
    relations: tuple[str, ...] | None = None  # fixed relations, or None: per edge


class CsrFloor(Retriever):
    """The graph as sorted half-edge arrays (both orientations), indexed by (node, relation)."""

    name = "csr-floor"
    ops = ALL_OPS

    def __init__(self, triples: Iterable[Triple]) -> None:
        index: dict[Term, int] = {}
        relation_index: dict[str, int] = {}
        src, rel, dst = array("q"), array("q"), array("q")
        for t in triples:
            src.append(index.setdefault(t.subject, len(index)))
            dst.append(index.setdefault(t.object, len(index)))
            rel.append(relation_index.setdefault(t.relation, len(relation_index)))
        self.terms: list[Term] = list(index)
        self.index = index
        self.relations: list[str] = list(relation_index)
        self.relation_index = relation_index
        n, r = len(self.terms), max(1, len(self.relations))
        self.R = r
        s, p, o = (np.frombuffer(a, np.int64) if len(a) else np.zeros(0, np.int64) for a in (src, rel, dst))
        order = np.lexsort((o, p, s))  # sort, then drop repeated triples
        s, p, o = s[order], p[order], o[order]
        first = np.ones(s.size, bool)
        first[1:] = (s[1:] != s[:-1]) | (p[1:] != p[:-1]) | (o[1:] != o[:-1])
        self.src, self.rel, self.dst = s[first].astype(np.int32), p[first].astype(np.int32), o[first].astype(np.int32)
        self.n_edges = self.src.size
        self.is_literal = np.fromiter((isinstance(t, Literal) for t in self.terms), bool, n)
        e = np.arange(self.n_edges, dtype=np.int32)
        node = np.concatenate([self.src, self.dst])
        relation = np.concatenate([self.rel, self.rel])
        order = np.lexsort((relation, node))
        self.h_node = node[order]
        self.h_rel = relation[order]
        self.h_nbr = np.concatenate([self.dst, self.src])[order]
        self.h_edge = np.concatenate([e, e])[order]
        self.h_fwd = np.concatenate([np.ones(self.n_edges, bool), np.zeros(self.n_edges, bool)])[order]
        # the backward copy of a self-loop, left out when walking in both directions
        self.h_loopback = np.concatenate([np.zeros(self.n_edges, bool), self.src == self.dst])[order]
        self.key = self.h_node.astype(np.int64) * r + self.h_rel
        self.node_ptr = np.searchsorted(self.key, np.arange(n + 1, dtype=np.int64) * r)
        # per-call BFS marks, reset by bumping a generation number instead of clearing
        self._mark = np.zeros(n, np.int32)
        self._dist = np.zeros(n, np.int32)
        self._generation = 0

    # ------------------------------------------------------------------ helpers
    @property
    def n_nodes(self) -> int:
        return len(self.terms)

    def ids(self, ids: Iterable[str]) -> np.ndarray:
        """Indexes of the (deduplicated) entity ids present in the graph."""
        found = [self.index[i] for i in dict.fromkeys(ids) if i in self.index]
        return np.array([i for i in found if not self.is_literal[i]], np.int64)

    def gather(self, nodes: np.ndarray, relation: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every half-edge of each node (with ``relation`` only, when given): (owner, position)."""
        if relation is None:
            lo, hi = self.node_ptr[nodes], self.node_ptr[nodes + 1]
        else:
            k = nodes.astype(np.int64) * self.R + relation
            lo, hi = np.searchsorted(self.key, k, "left"), np.searchsorted(self.key, k, "right")
        counts = hi - lo
        owner = np.repeat(np.arange(nodes.size), counts)
        pos = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(lo, counts)
        return owner, pos

    def direction_mask(self, pos: np.ndarray, direction: str) -> np.ndarray:
        if direction == "out":
            return self.h_fwd[pos]
        if direction == "in":
            return ~self.h_fwd[pos]
        return ~self.h_loopback[pos]

    def _next_generation(self) -> int:
        self._generation += 1
        return self._generation

    # ------------------------------------------------------------------ operations
    def follow_paths(self, seeds: Iterable[str], path: list[str | None], direction: str) -> _Walks:
        """Every walk from the seeds following ``path`` (None: any relation), vectorised per hop."""
        nodes = self.ids(seeds)[:, None]
        edges = np.zeros((nodes.shape[0], 0), np.int32)
        forward = np.zeros((nodes.shape[0], 0), bool)
        if any(r is not None and r not in self.relation_index for r in path):
            nodes, edges, forward = nodes[:0], edges[:0], forward[:0]
        for i, relation in enumerate(path):
            cur = nodes[:, -1]
            if i > 0:  # literals are dead ends
                keep = ~self.is_literal[cur]
                nodes, edges, forward, cur = nodes[keep], edges[keep], forward[keep], cur[keep]
            owner, pos = self.gather(cur, None if relation is None else self.relation_index[relation])
            mask = self.direction_mask(pos, direction)
            step = self.h_edge[pos]
            for j in range(i):  # a walk never uses one stored edge twice
                mask &= edges[owner, j] != step
            owner, pos = owner[mask], pos[mask]
            nodes = np.column_stack([nodes[owner], self.h_nbr[pos]])
            edges = np.column_stack([edges[owner], self.h_edge[pos]])
            forward = np.column_stack([forward[owner], self.h_fwd[pos]])
        fixed = None if any(r is None for r in path) else tuple(path)  # type: ignore[arg-type]
        return _Walks(nodes, edges, forward, fixed)

    def relation_counts(self, ids: Iterable[str], direction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(node, relation, forward, count) for every relation adjacent to each id."""
        nodes = self.ids(ids)
        owner, pos = self.gather(nodes)
        keep = self.direction_mask(pos, direction)
        return self._count(nodes[owner[keep]], pos[keep])

    def _count(self, who: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        code = (who.astype(np.int64) * self.R + self.h_rel[pos]) * 2 + self.h_fwd[pos]
        unique, counts = np.unique(code, return_counts=True)
        return unique // 2 // self.R, unique // 2 % self.R, (unique % 2).astype(bool), counts

    def two_hop_counts(self, ids: Iterable[str], r1: str, direction: str) -> tuple[np.ndarray, ...]:
        """(id, relation, forward, count) over the nodes reached from each id through r1."""
        nodes = self.ids(ids)
        if r1 not in self.relation_index:
            return self._count(nodes[:0], nodes[:0])
        owner, pos = self.gather(nodes, self.relation_index[r1])
        keep = self.direction_mask(pos, direction)
        owner, middles = owner[keep], self.h_nbr[pos[keep]]
        keep = ~self.is_literal[middles]
        pairs = np.unique(nodes[owner[keep]] * self.n_nodes + middles[keep])  # each middle once per id
        who, middle = pairs // self.n_nodes, pairs % self.n_nodes
        owner2, pos2 = self.gather(middle)
        keep2 = self.direction_mask(pos2, "both")
        return self._count(who[owner2[keep2]], pos2[keep2])

    def subgraph(self, seeds: Iterable[str], hops: int, direction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Edge ids met by a ``hops``-layer BFS, and the (node, layer) of every node reached."""
        generation = self._next_generation()
        frontier = self.ids(seeds)
        self._mark[frontier] = generation
        reached, layers, met = [frontier], [np.zeros(frontier.size, np.int64)], []
        for layer in range(1, hops + 1):
            if frontier.size == 0:
                break
            _, pos = self.gather(frontier)
            pos = pos[self.direction_mask(pos, direction)]
            met.append(self.h_edge[pos])
            nbr = self.h_nbr[pos]
            new = np.unique(nbr[self._mark[nbr] != generation])
            self._mark[new] = generation
            reached.append(new)
            layers.append(np.full(new.size, layer))
            frontier = new[~self.is_literal[new]]
        edges = np.unique(np.concatenate(met)) if met else np.zeros(0, np.int64)
        return edges, np.concatenate(reached), np.concatenate(layers)

    def expand(self, ids: Iterable[str], direction: str) -> tuple[np.ndarray, np.ndarray]:
        """Every half-edge of the ids: (source node, position)."""
        nodes = self.ids(ids)
        owner, pos = self.gather(nodes)
        keep = self.direction_mask(pos, direction)
        return nodes[owner[keep]], pos[keep]

    def fanout(self, seeds: Iterable[str]) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, ...]]:
        src, pos = self.expand(seeds, "both")
        nbr = self.h_nbr[pos]
        nbr = np.unique(nbr[~self.is_literal[nbr]])
        owner, pos2 = self.gather(nbr)
        keep = self.direction_mask(pos2, "both")
        return (src, pos), self._count(nbr[owner[keep]], pos2[keep])

    def shortest_paths(self, sources: Iterable[str], targets: Iterable[str], max_hops: int) -> list[_Walks]:
        """All shortest undirected paths of at most ``max_hops`` from each source to each target:
        a BFS from the source (stopping once every target is reached), then a vectorised walk
        back from the targets along edges that go one layer down."""
        out = []
        target_idx = [self.index[t] for t in dict.fromkeys(targets) if t in self.index]
        for s in self.ids(sources).tolist():
            wanted = np.array([t for t in target_idx if t != s], np.int64)
            if wanted.size == 0:
                continue
            generation = self._next_generation()
            self._mark[s], self._dist[s] = generation, 0
            frontier = np.array([s], np.int64)
            for layer in range(1, max_hops + 1):
                if frontier.size == 0 or (self._mark[wanted] == generation).all():
                    break
                _, pos = self.gather(frontier)
                pos = pos[~self.h_loopback[pos]]
                nbr = self.h_nbr[pos]
                new = np.unique(nbr[self._mark[nbr] != generation])
                self._mark[new], self._dist[new] = generation, layer
                frontier = new[~self.is_literal[new]]
            reached = wanted[self._mark[wanted] == generation]
            for depth in np.unique(self._dist[reached]).tolist():
                out.append(self._walk_back(s, reached[self._dist[reached] == depth], depth, generation))
        return out

    def _walk_back(self, source: int, ends: np.ndarray, depth: int, generation: int) -> _Walks:
        nodes = ends[:, None]
        edges = np.zeros((ends.size, 0), np.int32)
        forward = np.zeros((ends.size, 0), bool)
        for _ in range(depth):
            cur = nodes[:, 0]
            owner, pos = self.gather(cur)
            nbr = self.h_nbr[pos]
            keep = (
                ~self.h_loopback[pos]
                & (self._mark[nbr] == generation)
                & (self._dist[nbr] == self._dist[cur[owner]] - 1)
                & ~self.is_literal[nbr]
            )
            owner, pos = owner[keep], pos[keep]
            nodes = np.column_stack([self.h_nbr[pos], nodes[owner]])
            edges = np.column_stack([self.h_edge[pos], edges[owner]])
            # the hop nbr → cur is forward when (nbr, r, cur) is stored: the half-edge at cur is backward
            forward = np.column_stack([~self.h_fwd[pos], forward[owner]])
        keep = nodes[:, 0] == source
        return _Walks(nodes[keep], edges[keep], forward[keep], None)

    # ------------------------------------------------------------------ retriever
    def run(self, task: Task, prepared: Any) -> Any:
        if task.op == "follow_paths":
            return self.follow_paths(task.ids, list(task.path), "both")
        if task.op == "relations":
            return self.relation_counts(task.ids, "both")
        if task.op == "two_hop_relations":
            return self.two_hop_counts(task.ids, task.path[0], "both")
        if task.op == "subgraph":
            return self.subgraph(task.ids, task.hops, "both")
        if task.op == "fanout":
            return self.fanout(task.ids)
        if task.op == "shortest_paths":
            return self.shortest_paths(task.ids, task.targets, task.hops)
        raise ValueError(task.op)

    def answer(self, task: Task, raw: Any) -> Answer:
        if task.op == "follow_paths":
            return paths_answer(self.paths(raw))
        if task.op == "shortest_paths":
            return paths_answer([p for walks in raw for p in self.paths(walks)])
        if task.op == "relations":
            return self.rows(raw)
        if task.op == "two_hop_relations":
            return tuple(sorted((i, task.path[0], r, d, n) for i, r, d, n in self.rows(raw)))
        if task.op == "subgraph":
            edges, nodes, layers = raw
            depth = {self.terms[n]: int(d) for n, d in zip(nodes.tolist(), layers.tolist())}
            depth.update({s: 0 for s in task.ids})  # seeds absent from the graph are still layer 0
            return subgraph_answer(self.triples(edges), depth)
        if task.op == "fanout":
            (src, pos), counts = raw
            edges = [
                Edge(self.terms[s], self.relations[r], self.terms[d], bool(f))
                for s, r, d, f in zip(src.tolist(), self.h_rel[pos].tolist(), self.h_nbr[pos].tolist(), self.h_fwd[pos].tolist())
            ]
            return edges_answer(edges), self.rows(counts)
        raise ValueError(task.op)

    def paths(self, walks: _Walks) -> list[Path]:
        out = []
        for nodes, edges, forward in zip(walks.nodes.tolist(), walks.edges.tolist(), walks.forward.tolist()):
            relations = walks.relations or tuple(self.relations[self.rel[e]] for e in edges)
            out.append(Path(tuple(self.terms[n] for n in nodes), tuple(relations), tuple(forward)))
        return out

    def rows(self, counts: tuple[np.ndarray, ...]) -> RowsAnswer:
        who, rel, fwd, n = (a.tolist() for a in counts)
        return tuple(sorted(
            (self.terms[w], self.relations[r], "out" if f else "in", c) for w, r, f, c in zip(who, rel, fwd, n)
        ))

    def triples(self, edges: np.ndarray) -> list[Triple]:
        return [
            Triple(self.terms[s], self.relations[r], self.terms[o])  # type: ignore[arg-type]
            for s, r, o in zip(self.src[edges].tolist(), self.rel[edges].tolist(), self.dst[edges].tolist())
        ]

    # ------------------------------------------------------------------ for building workloads
    def neighbours_via(self, node: str, relation: str) -> list[str]:
        """Distinct entities one ``relation`` hop (either direction) from ``node``, sorted."""
        walks = self.follow_paths([node], [relation], "both")
        ends = np.unique(walks.nodes[:, -1])
        return sorted(self.terms[i] for i in ends.tolist() if not self.is_literal[i])  # type: ignore[type-var]

    def ball(self, seeds: Iterable[str], hops: int) -> list[Triple]:
        """The triples a ``hops``-layer BFS meets: the per-question subgraph a KGQA dataset ships."""
        return self.triples(self.subgraph(seeds, hops, "both")[0])

    def random_walk(
        self, start: int, length: int, rng: np.random.Generator, skip_relation: np.ndarray
    ) -> tuple[str, list[str], Term] | None:
        """A random walk of ``length`` hops from node ``start`` over relations not in
        ``skip_relation`` (a mask over relation ids), never reusing an edge; None when stuck."""
        node, used, relations = start, [], []
        for _ in range(length):
            if self.is_literal[node]:
                return None
            _, pos = self.gather(np.array([node]))
            pos = pos[~self.h_loopback[pos] & ~skip_relation[self.h_rel[pos]] & ~np.isin(self.h_edge[pos], used)]
            if pos.size == 0:
                return None
            p = int(pos[rng.integers(pos.size)])
            used.append(int(self.h_edge[p]))
            relations.append(self.relations[self.h_rel[p]])
            node = int(self.h_nbr[p])
        return self.terms[start], relations, self.terms[node]  # type: ignore[return-value]
