"""The one way a method batches its questions' store calls: programs that ask for what they
need, served in lock step.

A program is a generator that yields a request — a store call (:class:`RelationsOf`,
:class:`ExpandOf`, :class:`TwoHopRelationsOf`, :class:`FollowPathsOf`, :class:`NamesOf`,
:class:`SearchOf`) or a model decision (:class:`Decide`) — or a list of requests, and is sent
the answer (a list of answers for a list). :func:`serve` runs programs together, one per
question (LDR's stages, ARG's retrieval and alignment, RoG's grounding) or one for a whole
batch where the batch already moves as one (RoG's grounded decoding, FiDeLiS's search): every
round it answers what each waiting program asks, the store calls of one kind in one call over
all their ids (:func:`engine.methods.batched.per_group`: each request gets exactly the rows
its own call gives) and the decisions through ``decide``. A question's next request depends
on the model's last choice, so this is how a batch of questions shares store calls at all;
one program alone is served call by call. :func:`together` runs programs in lock step inside
another program.
"""
from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

from engine.graph import Term
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


class StoreRequest:
    """A store call a program asks for. Requests with the same :meth:`kind` are answered
    together by :meth:`answer_all`, each with exactly what its own call gives."""

    def kind(self) -> tuple:
        raise NotImplementedError

    @staticmethod
    def answer_all(store: Store, asked: Sequence[Any]) -> list[Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class RelationsOf(StoreRequest):
    """``store.relations(ids, direction, limit)``; answered with (rows, truncated)."""

    ids: tuple[Term, ...]
    limit: int | str | None
    direction: str = "both"

    def kind(self) -> tuple:
        return ("relations", self.direction, self.limit)

    @staticmethod
    def answer_all(store: Store, asked: Sequence[RelationsOf]) -> list[Any]:
        first = asked[0]
        return per_group(lambda ids, n: store.relations(ids, first.direction, n), [a.ids for a in asked], first.limit)


@dataclass(frozen=True)
class ExpandOf(StoreRequest):
    """``store.expand(ids, relations, direction, limit)`` (``relations`` None: every
    relation); answered with (edges, truncated)."""

    ids: tuple[str, ...]
    relations: tuple[str, ...] | None
    direction: str
    limit: int | str | None

    def kind(self) -> tuple:
        return ("expand", self.relations, self.direction, self.limit)

    @staticmethod
    def answer_all(store: Store, asked: Sequence[ExpandOf]) -> list[Any]:
        first = asked[0]
        relations = None if first.relations is None else list(first.relations)
        return per_group(
            lambda ids, n: store.expand(ids, relations, first.direction, n), [a.ids for a in asked], first.limit,
            rows=attrgetter("edges"), anchor=attrgetter("src"),
        )


@dataclass(frozen=True)
class TwoHopRelationsOf(StoreRequest):
    """``store.two_hop_relations(ids, relation, direction, limit)``; answered with (rows, truncated)."""

    ids: tuple[Term, ...]
    relation: str
    direction: str
    limit: int | str | None

    def kind(self) -> tuple:
        return ("two_hop_relations", self.relation, self.direction, self.limit)

    @staticmethod
    def answer_all(store: Store, asked: Sequence[TwoHopRelationsOf]) -> list[Any]:
        first = asked[0]
        return per_group(
            lambda ids, n: store.two_hop_relations(ids, first.relation, first.direction, n), [a.ids for a in asked], first.limit
        )


@dataclass(frozen=True)
class FollowPathsOf(StoreRequest):
    """``store.follow_paths(seeds, path, direction, limit, distinct_edges=…)``; answered with
    (paths, truncated)."""

    seeds: tuple[str, ...]
    path: tuple[str, ...]
    direction: str
    limit: int | str | None
    distinct_edges: bool = True

    def kind(self) -> tuple:
        return ("follow_paths", self.path, self.direction, self.limit, self.distinct_edges)

    @staticmethod
    def answer_all(store: Store, asked: Sequence[FollowPathsOf]) -> list[Any]:
        first = asked[0]
        return per_group(
            lambda seeds, n: store.follow_paths(seeds, list(first.path), first.direction, n, distinct_edges=first.distinct_edges),
            [a.seeds for a in asked], first.limit, rows=attrgetter("paths"), anchor=attrgetter("start"),
        )


@dataclass(frozen=True)
class NamesOf(StoreRequest):
    """``store.names(ids)``; answered with the names of ``ids``."""

    ids: tuple[str, ...]

    def kind(self) -> tuple:
        return ("names",)

    @staticmethod
    def answer_all(store: Store, asked: Sequence[NamesOf]) -> list[Any]:
        return names_per_group(store, [a.ids for a in asked])


@dataclass(frozen=True)
class SearchOf(StoreRequest):
    """``store.search(text, mode, limit)``; answered with its hits. A search is one text, so
    each is its own call."""

    text: str
    mode: str
    limit: int | str | None

    def kind(self) -> tuple:
        return ("search", self.text, self.mode, self.limit)

    @staticmethod
    def answer_all(store: Store, asked: Sequence[SearchOf]) -> list[Any]:
        hits = store.search(asked[0].text, asked[0].mode, asked[0].limit).hits
        return [hits for _ in asked]


Request = Decide | StoreRequest
Program = Generator[Request | list[Request], Any, T]
#: decisions of a round, in order -> their choices
Decider = Callable[[Sequence[Decide]], list[Choice]]


def one_by_one(choose: Chooser) -> Decider:
    """A :data:`Decider` that asks ``choose`` once per decision."""
    return lambda asks: [choose(a.prompt, a.options) for a in asks]


def decider(choose: Chooser) -> Decider:
    """A :data:`Decider` over ``choose``: its own ``decide`` where it has one (a model's scorer
    scores a round's decisions together), else :func:`one_by_one`."""
    return getattr(choose, "decide", None) or one_by_one(choose)


def ask(request: Request) -> Program[Any]:
    """A program that asks ``request`` and returns its answer."""
    return (yield request)


def together(programs: Sequence[Program[T]]) -> Program[list[T]]:
    """``programs`` run in lock step as one program: every round it asks what each waiting
    program asks, as one list, and returns their results in order."""
    results: list[Any] = [None] * len(programs)
    waiting: dict[int, Request | list[Request]] = {}

    def advance(i: int, answer: Any) -> None:
        try:
            waiting[i] = programs[i].send(answer)
        except StopIteration as stop:
            waiting.pop(i, None)
            results[i] = stop.value

    for i in range(len(programs)):
        advance(i, None)
    while waiting:
        asked = list(waiting.items())
        flat: list[Request] = []
        for _, request in asked:
            flat += request if isinstance(request, list) else [request]
        answers = yield flat
        start = 0
        for i, request in asked:
            n = len(request) if isinstance(request, list) else 1
            advance(i, answers[start:start + n] if isinstance(request, list) else answers[start])
            start += n
    return results


def run(program: Program[T], store: Store, decide: Decider | None = None) -> T:
    """``program`` to its end, each of its rounds answered by :func:`answer_round`."""
    answer: Any = None
    while True:
        try:
            asked = program.send(answer)
        except StopIteration as stop:
            return stop.value
        if isinstance(asked, list):
            answer = answer_round(store, decide, asked)
        else:
            answer = answer_round(store, decide, [asked])[0]


def serve(programs: Sequence[Program[T]], store: Store, decide: Decider | None = None) -> list[T]:
    """Run ``programs`` to their ends, answering each round's requests together; their results.
    Without ``decide`` the programs may ask the store only."""
    return run(together(programs), store, decide)


def answer_round(store: Store, decide: Decider | None, asked: Sequence[Request]) -> list[Any]:
    """The answers to one round's requests, in order: the decisions through ``decide``, the
    store calls of one kind in one call (:meth:`StoreRequest.answer_all`)."""
    answers: list[Any] = [None] * len(asked)
    decisions = [i for i, r in enumerate(asked) if isinstance(r, Decide)]
    if decisions and decide is None:
        raise ValueError("a program asked for a decision, and no decider was given")
    if decisions:
        for i, choice in zip(decisions, decide([asked[i] for i in decisions]), strict=True):  # type: ignore[misc]
            answers[i] = choice
    kinds: dict[tuple, list[int]] = {}  # requests one store call can answer together, in order
    for i, r in enumerate(asked):
        if isinstance(r, StoreRequest):
            kinds.setdefault((type(r), *r.kind()), []).append(i)
        elif not isinstance(r, Decide):
            raise TypeError(f"a program asked for {r!r}, which is no request")
    for members in kinds.values():
        kind = type(asked[members[0]])
        for i, answer in zip(members, kind.answer_all(store, [asked[i] for i in members]), strict=True):  # type: ignore[attr-defined]
            answers[i] = answer
    return answers
