"""LDR's stages as programs that ask for what they need, served for one question or for a batch
in lock step.

A program is a generator (:meth:`engine.methods.ldr.search.Search.steps`,
:func:`engine.methods.ldr.pipeline.reasoning`) that yields requests — a model decision
(:class:`Decide`) or a store call (:class:`RelationsOf`, :class:`ExpandOf`, :class:`NamesOf`) —
and is sent each answer. :func:`serve` runs programs together: every round it answers what each
waiting program asks, the store calls of one kind in one call over all their ids
(:func:`engine.methods.batched.per_group`: each program gets exactly the rows its own call gives) and the
decisions through ``decide``. A question's next request depends on the model's last choice, so
this is how a batch of questions shares store calls at all; one program alone is served call by
call, as it always was.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

from engine.methods.batched import names_per_group, per_group
from engine.store import Store

T = TypeVar("T")


@dataclass(frozen=True)
class Choice:
    """The chosen option's index and every option's score (None when no model was asked)."""

    index: int
    scores: list[float] | None = None


#: (prompt, option texts) -> the choice; the LM scorer, or a gold policy for training data
Chooser = Callable[[str, Sequence[str]], Choice]


@dataclass(frozen=True)
class Decide:
    """A choice among ``options`` for ``prompt``; answered with a :class:`Choice`."""

    prompt: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class RelationsOf:
    """``store.relations(ids, "both", limit)``; answered with (rows, truncated)."""

    ids: tuple[str, ...]
    limit: int | None


@dataclass(frozen=True)
class ExpandOf:
    """``store.expand(ids, [relation], direction, limit)``; answered with (edges, truncated)."""

    ids: tuple[str, ...]
    relation: str
    direction: str
    limit: int | None


@dataclass(frozen=True)
class NamesOf:
    """``store.names(ids)``; answered with the names of ``ids``."""

    ids: tuple[str, ...]


Request = Decide | RelationsOf | ExpandOf | NamesOf
Program = Generator[Request, Any, T]
#: decisions of a round, in order -> their choices
Decider = Callable[[Sequence[Decide]], list[Choice]]


def one_by_one(choose: Chooser) -> Decider:
    """A :data:`Decider` that asks ``choose`` once per decision."""
    return lambda asks: [choose(a.prompt, a.options) for a in asks]


def serve(programs: Sequence[Program[T]], store: Store, decide: Decider | None = None) -> list[T]:
    """Run ``programs`` to their ends, answering each round's requests together; their results.
    Without ``decide`` the programs may ask the store only."""
    results: list[Any] = [None] * len(programs)
    waiting: dict[int, Request] = {}

    def advance(i: int, answer: Any) -> None:
        try:
            waiting[i] = programs[i].send(answer)
        except StopIteration as stop:
            waiting.pop(i, None)
            results[i] = stop.value

    for i in range(len(programs)):
        advance(i, None)
    while waiting:
        answers = _answer(store, decide, dict(waiting))
        for i, answer in answers.items():
            advance(i, answer)
    return results


def _answer(store: Store, decide: Decider | None, asked: dict[int, Request]) -> dict[int, Any]:
    answers: dict[int, Any] = {}
    decisions = [i for i, r in asked.items() if isinstance(r, Decide)]
    if decisions and decide is None:
        raise ValueError("a program asked for a decision, and no decider was given")
    if decisions:
        answers.update(zip(decisions, decide([asked[i] for i in decisions])))  # type: ignore[misc]
    kinds: dict[tuple, list[int]] = defaultdict(list)  # requests one store call can answer together
    for i, r in asked.items():
        if isinstance(r, ExpandOf):
            kinds[("expand", r.relation, r.direction, r.limit)].append(i)
        elif isinstance(r, RelationsOf):
            kinds[("relations", r.limit)].append(i)
        elif isinstance(r, NamesOf):
            kinds[("names",)].append(i)
    for members in kinds.values():
        first = asked[members[0]]
        groups = [asked[i].ids for i in members]  # type: ignore[union-attr]
        if isinstance(first, NamesOf):
            answers.update(zip(members, names_per_group(store, groups)))
        elif isinstance(first, RelationsOf):
            found = per_group(lambda ids, n: store.relations(ids, "both", n), groups, first.limit)
            answers.update(zip(members, found))
        else:
            assert isinstance(first, ExpandOf)
            found = per_group(
                lambda ids, n, r=first: store.expand(ids, [r.relation], r.direction, n),
                groups, first.limit, rows=attrgetter("edges"), anchor=attrgetter("src"),
            )
            answers.update(zip(members, found))
    return answers
