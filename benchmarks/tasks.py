"""What the benchmark times and compares: a task (one retrieval call of one method), the
workload it belongs to, the one canonical answer every implementation gives, and the
:class:`Retriever` interface every implementation (a store, a baseline) offers."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.graph import Edge, Path, Term, Triple, edge_key, path_key, term_key

#: op → (method, what the op stands for)
OPS: dict[str, tuple[str, str]] = {
    "follow_paths": ("RoG", "path grounding: every instance of a relation path"),
    "relations": ("LDR", "option pool: relations of an entity set"),
    "two_hop_relations": ("ARG-KBQA", "two-hop expansion: relations behind (entity, r1)"),
    "subgraph": ("EtD", "layer-wise subgraph expansion"),
    "fanout": ("FiDeLiS", "neighbours, then one-hop lookahead on each"),
    "shortest_paths": ("RoG", "shortest paths topic → answers (training targets)"),
}

Answer = tuple
ALL_OPS = frozenset(OPS)


@dataclass(frozen=True)
class Task:
    """One retrieval call: ``ids`` are seeds, ids or sources depending on ``op``."""

    op: str
    ids: tuple[str, ...]
    path: tuple[str, ...] = ()  # follow_paths: the relations; two_hop_relations: (r1,)
    hops: int = 0  # subgraph: layers; shortest_paths: max_hops
    targets: tuple[str, ...] = ()
    origin: str = ""  # the question or walk it came from


@dataclass
class Workload:
    dataset: str
    op: str
    source: str
    tasks: list[Task] = field(default_factory=list)


# ---------------------------------------------------------------------------- implementations

class Retriever:
    """One way of answering tasks: ``prepare`` (untimed), ``run`` (timed), ``answer`` (untimed)."""

    name: str = ""
    ops: frozenset[str] = frozenset()

    def prepare(self, task: Task) -> Any:
        return None

    def run(self, task: Task, prepared: Any) -> Any:
        raise NotImplementedError

    def answer(self, task: Task, raw: Any) -> Answer:
        raise NotImplementedError


# ---------------------------------------------------------------------------- canonical answers

def paths_answer(paths: list[Path]) -> Answer:
    return tuple(sorted(paths, key=path_key))


def edges_answer(edges: list[Edge]) -> Answer:
    return tuple(sorted(edges, key=edge_key))


def subgraph_answer(triples: list[Triple], depth: dict[Term, int]) -> Answer:
    edges = tuple(sorted(triples, key=lambda t: (t.subject, t.relation, term_key(t.object))))
    return edges, tuple(sorted(depth.items(), key=lambda kv: term_key(kv[0])))


def canonical(op: str, result: Any) -> Answer:
    """An engine result as a canonical, comparable answer: sorted tuples of model objects
    (paths, edges, triples) or of plain rows ``(id, [r1,] relation, direction, count)``."""
    if op in ("follow_paths", "shortest_paths"):
        return paths_answer(result.paths)
    if op == "relations":
        return tuple(sorted((r.id, r.relation, r.direction, r.count) for r in result.rows))
    if op == "two_hop_relations":
        return tuple(sorted((r.id, r.r1, r.relation, r.direction, r.count) for r in result.rows))
    if op == "subgraph":
        return subgraph_answer(result.edges, result.depth)
    if op == "fanout":
        hop, look = result
        return edges_answer(hop.edges), tuple(sorted((r.id, r.relation, r.direction, r.count) for r in look.rows))
    raise ValueError(f"unknown op {op!r}")


def edges_touched(op: str, answer: Answer) -> int:
    """How many edges an answer carries (path hops, counted edges, subgraph edges)."""
    if op in ("follow_paths", "shortest_paths"):
        return sum(len(p.relations) for p in answer)
    if op in ("relations", "two_hop_relations"):
        return sum(r[-1] for r in answer)
    if op == "subgraph":
        return len(answer[0])
    if op == "fanout":
        return len(answer[0]) + sum(r[-1] for r in answer[1])
    raise ValueError(f"unknown op {op!r}")


def count_rows(edges: Iterable[tuple[str, Edge]]) -> list[tuple[str, str, str, int]]:
    """``relations`` rows ``(id, relation, direction, count)`` from (id, edge met from it) pairs."""
    counter = Counter((who, e.relation, "out" if e.forward else "in") for who, e in edges)
    return sorted((w, r, d, n) for (w, r, d), n in counter.items())


def python_answer(task: Task, raw: Any) -> Answer:
    """The canonical answer of a baseline that answers with plain Python paths, edges and rows."""
    if task.op in ("follow_paths", "shortest_paths"):
        return paths_answer(raw)
    if task.op in ("relations", "two_hop_relations"):
        return tuple(sorted(raw))
    if task.op == "subgraph":
        return subgraph_answer(*raw)
    if task.op == "fanout":
        return edges_answer(raw[0]), tuple(sorted(raw[1]))
    raise ValueError(task.op)
