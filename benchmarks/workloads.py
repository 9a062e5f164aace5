"""Workloads: the retrieval calls each method makes, drawn from real questions where they exist.

| op | method | call |
|---|---|---|
| ``follow_paths`` | RoG path grounding | ``follow_paths([topic], gold relation path, both)`` |
| ``relations`` | LDR option pool | ``relations(group, both)``, the group reached after the first hop |
| ``two_hop_relations`` | ARG two-hop expansion | ``two_hop_relations([topic], first relation, both)`` |
| ``subgraph`` | EtD layer-wise expansion | ``subgraph([topic], min(hops, 2), both)`` |
| ``fanout`` | FiDeLiS neighbour scoring | ``expand([topic])`` then ``relations(its neighbours)`` |
| ``shortest_paths`` | RoG training targets | ``shortest_paths([topic], answers[:5], hops)`` |

MetaQA tasks come from the dev questions and their gold relation paths (from the question type),
PathQuestion tasks from the annotated paths; FB15k-237 and the generated graphs get random walks
(seeded) from random entities, over relations other than Freebase's ``type.*`` bookkeeping.
Every implementation — a store, a baseline — answers a task with an answer in one canonical
form (:func:`benchmarks.tasks.canonical`), so they can be checked against each other.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.baselines.csr_floor import CsrFloor
from benchmarks.sources import QuestionPath
from benchmarks.tasks import OPS, Answer, Retriever, Task, Workload, canonical
from engine.graph import NAME_RELATION, Literal
from engine.identifiers import UNBOUNDED
from engine.results import ExpandResult, RelationsResult
from engine.store import Store

MAX_GROUP = 100  # ids in an LDR group
MAX_WALK_PATHS = 10_000  # random walks whose relation path grounds to more are redrawn
MAX_TARGETS = 5  # answers per shortest-path task
SUBGRAPH_HOPS = 2


# ---------------------------------------------------------------------------- building tasks

@dataclass
class Seed:
    """A starting point: a topic entity, a relation path from it, and where it came from."""

    origin: str
    topic: str
    path: list[str]
    answers: list[str]


def tasks_for(seed: Seed, first_hop: Callable[[str, str], list[str]]) -> dict[str, Task]:
    """The task of every op for one seed; ``first_hop(topic, r1)`` gives the group after hop 1."""
    path, hops = tuple(seed.path), len(seed.path)
    group = [seed.topic] if hops == 1 else first_hop(seed.topic, seed.path[0])[:MAX_GROUP] or [seed.topic]
    targets = tuple(a for a in seed.answers if a != seed.topic)[:MAX_TARGETS]
    tasks = {
        "follow_paths": Task("follow_paths", (seed.topic,), path, origin=seed.origin),
        "relations": Task("relations", tuple(group), origin=seed.origin),
        "two_hop_relations": Task("two_hop_relations", (seed.topic,), path[:1], origin=seed.origin),
        "subgraph": Task("subgraph", (seed.topic,), hops=min(hops, SUBGRAPH_HOPS), origin=seed.origin),
        "fanout": Task("fanout", (seed.topic,), origin=seed.origin),
    }
    if targets:
        tasks["shortest_paths"] = Task("shortest_paths", (seed.topic,), hops=hops, targets=targets, origin=seed.origin)
    return tasks


def sample(items: list, n: int, seed: int) -> list:
    """``n`` items drawn without replacement, reproducibly (all of them when fewer)."""
    if n >= len(items):
        return list(items)
    return random.Random(seed).sample(items, n)


def question_seeds(questions: list[QuestionPath], n: int, seed: int, present: Callable[[str], bool]) -> list[Seed]:
    """``n`` questions (seeded draw) whose topic entity is in the graph."""
    usable = [q for q in questions if q.path and present(q.topic)]
    return [Seed(q.id, q.topic, q.path, q.answers) for q in sample(usable, n, seed)]


def walk_seeds(floor: CsrFloor, n: int, seed: int, max_hops: int = 3, max_paths: int = MAX_WALK_PATHS) -> list[Seed]:
    """``n`` random walks of 1 to ``max_hops`` hops from random named entities (any entity when
    the graph has no names), over relations outside ``type.*``; a walk whose relation path
    grounds to more than ``max_paths`` paths is redrawn (RoG would ground them all, but such
    calls time result materialisation, not retrieval)."""
    rng = np.random.default_rng(seed)
    skip = np.array([r.startswith("type.") for r in floor.relations], bool)
    named = floor.relation_index.get(NAME_RELATION)
    starts = np.unique(floor.src[floor.rel == named]) if named is not None else np.flatnonzero(~floor.is_literal)
    seeds: list[Seed] = []
    for attempt in range(n * 50):
        if len(seeds) == n or starts.size == 0:
            break
        walk = floor.random_walk(int(starts[rng.integers(starts.size)]), int(rng.integers(1, max_hops + 1)), rng, skip)
        if walk is None:
            continue
        start, relations, end = walk
        if floor.follow_paths([start], relations, "both").nodes.shape[0] > max_paths:
            continue
        answers = [end] if isinstance(end, str) and end != start else []
        seeds.append(Seed(f"walk:{attempt}", start, relations, answers))
    return seeds


def build_workloads(dataset: str, source: str, seeds: list[Seed], floor: CsrFloor) -> list[Workload]:
    """One workload per op from the seeds (in the order of :data:`OPS`)."""
    workloads = {op: Workload(dataset, op, source) for op in OPS}
    for s in seeds:
        for op, task in tasks_for(s, floor.neighbours_via).items():
            workloads[op].tasks.append(task)
    return [w for w in workloads.values() if w.tasks]


# ---------------------------------------------------------------------------- running on a store

def fanout(store: Store, seeds: list[str]) -> tuple[ExpandResult, RelationsResult]:
    """FiDeLiS's step: every (relation, neighbour) of the seeds, then the relations of each neighbour."""
    hop = store.expand(seeds, None, "both", UNBOUNDED)
    neighbours = list(dict.fromkeys(e.dst for e in hop.edges if not isinstance(e.dst, Literal)))
    return hop, (store.relations(neighbours, "both", UNBOUNDED) if neighbours else RelationsResult([]))


class StoreRetriever(Retriever):
    """A store answering tasks with the engine's batched operations."""

    ops = frozenset(OPS)

    def __init__(self, store: Store, label: str) -> None:
        self.store = store
        self.name = f"store:{label}"

    def run(self, task: Task, prepared: None) -> Any:
        return run_on_store(self.store, task)

    def answer(self, task: Task, raw: Any) -> Answer:
        return canonical(task.op, raw)


def run_on_store(store: Store, task: Task) -> Any:
    """The batched engine call(s) for a task."""
    ids = list(task.ids)
    if task.op == "follow_paths":
        return store.follow_paths(ids, list(task.path), "both", UNBOUNDED)
    if task.op == "relations":
        return store.relations(ids, "both", UNBOUNDED)
    if task.op == "two_hop_relations":
        return store.two_hop_relations(ids, task.path[0], "both", UNBOUNDED)
    if task.op == "subgraph":
        return store.subgraph(ids, task.hops, "both", limit=UNBOUNDED)
    if task.op == "fanout":
        return fanout(store, ids)
    if task.op == "shortest_paths":
        return store.shortest_paths(ids, list(task.targets), task.hops, UNBOUNDED, exclude=())  # as the baselines
    raise ValueError(f"unknown op {task.op!r}")


