"""Grounding: every complete path instance of every plan from every topic entity (RoG's
Algorithm 1), one batched ``follow_paths`` call per distinct plan, names attached; for a batch
of questions, one call per distinct plan of the batch (:func:`grounding`, a program served in
lock step by :mod:`engine.methods.lockstep`).

Like RoG's own BFS, a walk may use an edge twice (``distinct_edges=False``) and matches each
relation in either direction by default; no cap on paths unless ``limit`` is given.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.errors import InvalidIdentifierError
from engine.graph import Literal, Path
from engine.identifiers import UNBOUNDED, validate_relation
from engine.methods.lockstep import FollowPathsOf, NamesOf, Program, serve
from engine.render import render_path, term_text
from engine.methods.run import topic_last
from engine.store import MAX_PATH_HOPS, Store


@dataclass
class Grounding:
    """The paths found, which plan each came from, and node names."""

    paths: list[Path] = field(default_factory=list)
    plan_of: list[int] = field(default_factory=list)
    paths_per_plan: list[int] = field(default_factory=list)
    names: dict[str, str | None] = field(default_factory=dict)
    truncated: bool = False

    def rendered(self) -> list[str]:
        """Each path as ``e0 → r1 → e1 → …`` with names (a hop against the stored direction reads ←)."""
        return [render_path(p, self.names) for p in self.paths]

    def answers(self) -> list[str]:
        """The path ends as answers (RoG without reasoning). Ends of walks that never use one
        stored edge twice come first, the most often reached first; then ends reached only by
        walks that go back over an edge they came by; the topic entities themselves last
        (:func:`engine.methods.run.topic_last`). Going back over the same edge is no evidence: the
        years of the films sharing ``[Titanic]``'s director would otherwise start with
        Titanic's own (back over its ``directed_by`` edge), which MetaQA never counts; a walk
        back over *another* edge is a fact: PathQuestion stores parents and children as two
        edges, and "X's child's parent" is often X. Chosen on validation questions
        (``--split val``) over putting walks through the topic after the others and the topic
        never: it raised Hits@1 on PQ-2H and PQ-3H and left MetaQA's as it was; it lowers F1 on
        MetaQA-2hop, where the topic film ends the list."""
        once: Counter[str] = Counter()
        again: Counter[str] = Counter()
        for p in self.paths:
            (again if _reuses_edge(p) else once)[term_text(p.end, self.names)] += 1
        ranked = [answer for answer, _ in once.most_common()] + [a for a, _ in again.most_common() if a not in once]
        return topic_last(ranked, {term_text(p.start, self.names) for p in self.paths})


def _reuses_edge(path: Path) -> bool:
    """Whether the walk uses one stored edge twice (RoG's BFS allows it, see the module doc)."""
    triples = [edge.triple() for edge in path.edges()]
    return len(set(triples)) < len(triples)


def _groundable(plan: Sequence[str] | None) -> bool:
    if not plan or len(plan) > MAX_PATH_HOPS:
        return False
    try:
        for relation in plan:
            validate_relation(relation)
    except InvalidIdentifierError:
        return False
    return True


def ground(
    store: Store,
    topics: Sequence[str],
    plans: Sequence[Sequence[str] | None],
    *,
    direction: str = "both",
    limit: int | None = None,
) -> Grounding:
    """Ground each plan from all topic entities; a plan that cannot be a path (unparsable, a
    name no relation may have) grounds to nothing. Repeated plans are queried once."""
    return ground_batch(store, [(topics, plans)], direction=direction, limit=limit)[0]


def ground_batch(
    store: Store,
    questions: Sequence[tuple[Sequence[str], Sequence[Sequence[str] | None]]],
    *,
    direction: str = "both",
    limit: int | None = None,
) -> list[Grounding]:
    """:func:`ground` for each (topics, plans), the same groundings, with the store calls of
    the batch shared: :func:`grounding` served in lock step (:mod:`engine.methods.lockstep`),
    one ``follow_paths`` call per distinct plan over the topics of every question that made
    it, one ``names`` call."""
    return serve([grounding(topics, plans, direction=direction, limit=limit) for topics, plans in questions], store)


def grounding(
    topics: Sequence[str],
    plans: Sequence[Sequence[str] | None],
    *,
    direction: str = "both",
    limit: int | None = None,
) -> Program[Grounding]:
    """:func:`ground` as a program: the paths of each distinct plan, then the names of their nodes."""
    keys = [tuple(p) if p and _groundable(p) and topics else None for p in plans]
    distinct = list(dict.fromkeys(k for k in keys if k is not None))
    bound = UNBOUNDED if limit is None else limit
    found = yield [FollowPathsOf(tuple(topics), key, direction, bound, distinct_edges=False) for key in distinct]
    answered = dict(zip(distinct, found, strict=True))
    result = Grounding()
    seen: set[tuple[str, ...]] = set()
    for i, key in enumerate(keys):
        if key is None:
            result.paths_per_plan.append(0)
            continue
        paths, truncated = answered[key]
        if key not in seen:  # a repeated plan's paths are kept once, under its first occurrence
            seen.add(key)
            result.truncated |= truncated
            result.paths += paths
            result.plan_of += [i] * len(paths)
        result.paths_per_plan.append(len(paths))
    ids = sorted({n for p in result.paths for n in p.nodes if not isinstance(n, Literal)})  # type: ignore[type-var]
    result.names = yield NamesOf(tuple(ids))
    return result
