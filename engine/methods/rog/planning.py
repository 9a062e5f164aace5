"""Planning: K relation paths by beam search from RoG's planning prompt, in three decoding modes.

- ``free``: the paper; the model may name relations that do not exist.
- ``vocabulary``: a token trie over the store's relation names, so every relation exists.
- ``grounded``: each next relation must leave the current frontier (the nodes reached from
  the topic entities by the relations so far), so every plan grounds to at least one path.

The constrained modes drive the model through ``<PATH> r (<SEP> r)* </PATH> eos`` token by
token; markers are tokenised as plain text when the model lacks them (SmolLM2) and are single
tokens when it has them (``rmanluo/RoG``). Grounded decoding runs step by step: what every row
of a step needs of the store is fetched first, in shared calls (:mod:`engine.methods.lockstep`),
and the allowed tokens go to the model as data; the model layer never calls the store.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from engine.graph import NAME_RELATION, Edge, Literal
from engine.identifiers import UNBOUNDED
from engine.methods.lockstep import ExpandOf, Program, RelationsOf, Request, TwoHopRelationsOf, run
from engine.models.lm import Decoding, Generation, LanguageModel
from engine.models.trie import TokenTrie
from engine.results import RelationCount
from engine.methods.rog.prompts import (
    PATH_CLOSE,
    PATH_OPEN,
    PATH_SEP,
    parse_plan,
    planning_prompt,
)
from engine.store import Store

PLAN_MODES = ("free", "vocabulary", "grounded")
T = TypeVar("T")


@dataclass
class Plan:
    """One generated plan: its text, its relations (None when unparsable) and beam score."""

    text: str
    relations: list[str] | None
    score: float | None


def relation_vocabulary(store: Store) -> frozenset[str]:
    """Every relation of the store that a plan may name (labels excluded)."""
    return frozenset(r for r in store.relation_names() if r != NAME_RELATION)


class Missing(Exception):
    """What a frontier lacks: the nodes or the relations of a prefix not fetched yet
    (:func:`prepare` fetches it)."""

    def __init__(self, frontiers: Frontiers, kind: str, prefix: tuple[str, ...]) -> None:
        super().__init__(kind, prefix)
        self.frontiers, self.kind, self.prefix = frontiers, kind, prefix


class Frontiers:
    """The nodes reached from the topic entities by each relation prefix, and the relations
    leaving them, as far as they are fetched (:func:`prepare`); asking for what is not there
    raises :class:`Missing`."""

    def __init__(self, topics: Sequence[str], direction: str = "both") -> None:
        self.direction = direction
        self._nodes: dict[tuple[str, ...], list[str]] = {(): sorted(set(topics))}
        self._relations: dict[tuple[str, ...], frozenset[str]] = {}

    def nodes(self, prefix: tuple[str, ...]) -> list[str]:
        if prefix not in self._nodes:
            raise Missing(self, "nodes", prefix)
        return self._nodes[prefix]

    def _set_nodes(self, prefix: tuple[str, ...], edges: Iterable[Edge]) -> None:
        # literals end walks: they are reached but never left
        self._nodes[prefix] = sorted({e.dst for e in edges if not isinstance(e.dst, Literal)})  # type: ignore[type-var]

    def _from_two_hop(self, prefix: tuple[str, ...]) -> bool:
        """Whether ``relations(prefix)`` comes from ``two_hop_relations`` over the frontier
        before the prefix's last relation (rather than ``relations`` of its own frontier)."""
        return bool(prefix) and self.direction == "both" and prefix not in self._nodes

    def relations(self, prefix: tuple[str, ...]) -> frozenset[str]:
        """Relations of edges leaving the frontier of ``prefix``. Walking both ways, those of a
        non-empty prefix come from ONE ``two_hop_relations`` call from the frontier before its
        last relation (the relations of the nodes that relation reaches), so the frontier
        itself is expanded only when a longer prefix needs it."""
        if prefix not in self._relations:
            raise Missing(self, "relations", prefix)
        return self._relations[prefix]


def prepare(attempts: Sequence[Callable[[], T]]) -> Program[list[T]]:
    """Every attempt's result, as a program (:mod:`engine.methods.lockstep`): the attempts run;
    what their frontiers lack (one thing per attempt and round) is fetched in one round of
    requests for all of them — one store call per kind of call and relation, each frontier
    getting exactly its own call's rows — and they run again, until none lacks anything. An
    attempt is a rule asked of a decoding step's row, or a frontier's relations."""
    while True:
        results: list[T] = []
        missing: list[Missing] = []
        for attempt in attempts:
            try:
                results.append(attempt())
            except Missing as lacking:
                missing.append(lacking)
        if not missing:
            return results
        yield from _fetch(missing)


def _fetch(missing: Iterable[Missing]) -> Program[None]:
    """One round of requests filling in what the frontiers lack. What waits on a frontier not
    expanded yet gets that frontier now and is asked in the next round; a frontier without
    nodes has no edges and no relations, without a call."""
    # (request, frontier, prefix), one per distinct call and frontier prefix; the request fills
    # in the prefix's frontier (expand) or its relations (two_hop_relations, relations)
    asked: dict[tuple[Any, int, tuple[str, ...]], tuple[Frontiers, tuple[str, ...]]] = {}
    for need in missing:
        f, prefix = need.frontiers, need.prefix
        if need.kind == "nodes":
            call, base = "expand", prefix[:-1]
        elif f._from_two_hop(prefix):
            call, base = "two_hop", prefix[:-1]
        else:
            call, base = "relations", prefix
        if base not in f._nodes:  # first the nearest frontier on the way that is not there
            while base[:-1] not in f._nodes:
                base = base[:-1]
            call, prefix, base = "expand", base, base[:-1]
        asked[(call, id(f), prefix)] = (f, prefix)
    requests: list[Request] = []
    fills: list[Callable[[Any], None]] = []
    for (call, _, _), (f, prefix) in asked.items():
        if call == "expand":
            ids = f._nodes[prefix[:-1]]
            request: Request = ExpandOf(tuple(ids), (prefix[-1],), f.direction, UNBOUNDED)
            fill = partial(_fill_nodes, f, prefix)
        elif call == "two_hop":
            ids = f._nodes[prefix[:-1]]
            request = TwoHopRelationsOf(tuple(ids), prefix[-1], "both", UNBOUNDED)
            fill = partial(_fill_relations, f, prefix)
        else:
            ids = f._nodes[prefix]
            request = RelationsOf(tuple(ids), UNBOUNDED, f.direction)
            fill = partial(_fill_relations, f, prefix)
        if ids:
            requests.append(request)
            fills.append(fill)
        else:
            fill(([], False))
    answers = yield requests
    for fill, answer in zip(fills, answers, strict=True):
        fill(answer)


def _fill_nodes(f: Frontiers, prefix: tuple[str, ...], answer: tuple[list[Edge], bool]) -> None:
    f._set_nodes(prefix, answer[0])


def _fill_relations(f: Frontiers, prefix: tuple[str, ...], answer: tuple[list[RelationCount], bool]) -> None:
    f._relations[prefix] = _walkable(answer[0])


def _walkable(rows: Iterable[RelationCount]) -> frozenset[str]:
    """The relations of ``relations`` rows a plan may name (names are shown, not walked)."""
    return frozenset(r.relation for r in rows if r.relation != NAME_RELATION)


class PlanConstraint:
    """The tokens a plan allows next: a state machine over ``<PATH> r (<SEP> r)* </PATH> eos``
    where each r comes from a token trie of the relations allowed after the relations so far
    (``vocabulary``, or ``frontiers`` when grounded). Over a vocabulary it is an
    ``allowed_tokens`` rule of :meth:`LanguageModel.beam_search`; grounded, it reads only what
    its frontiers hold and raises :class:`Missing` for the rest, so it is asked between the
    steps of :meth:`LanguageModel.beam_search_steps`, after :func:`prepare`.

    Relation names cannot contain ``<``, so a marker's first token never continues a relation:
    after a complete relation the next token says unambiguously whether it goes on."""

    def __init__(
        self,
        lm: LanguageModel,
        max_hops: int,
        vocabulary: Iterable[str],
        frontiers: Frontiers | None = None,
    ) -> None:
        self.eos = lm.eos_token_id
        self.open = tuple(lm.encode(PATH_OPEN))
        self.markers = {"sep": tuple(lm.encode(PATH_SEP)), "close": tuple(lm.encode(PATH_CLOSE)) + (self.eos,)}
        self.max_hops = max_hops
        self.vocabulary = frozenset(vocabulary)
        self.frontiers = frontiers
        self._encode = lm.encode
        self._tokens: dict[str, tuple[int, ...]] = {}
        self._tries: dict[frozenset[str], tuple[TokenTrie, dict[tuple[int, ...], str]]] = {}
        self._states: dict[tuple[int, ...], tuple] = {(): ("open", (), ())}

    def max_new_tokens(self) -> int:
        """Enough tokens for the longest plan of ``max_hops`` relations of the vocabulary."""
        longest = max((len(self._relation_tokens(r)) for r in self.vocabulary), default=1)
        marker = max(len(m) for m in self.markers.values())
        return len(self.open) + self.max_hops * (longest + marker) + 1

    def _relation_tokens(self, relation: str) -> tuple[int, ...]:
        if relation not in self._tokens:
            self._tokens[relation] = tuple(self._encode(relation))
        return self._tokens[relation]

    def _allowed_relations(self, prefix: tuple[str, ...]) -> frozenset[str]:
        if self.frontiers is None:
            return self.vocabulary
        return self.frontiers.relations(prefix)

    def _trie(self, prefix: tuple[str, ...]) -> tuple[TokenTrie, dict[tuple[int, ...], str]]:
        relations = self._allowed_relations(prefix)
        if relations not in self._tries:
            by_tokens = {self._relation_tokens(r): r for r in sorted(relations) if self._relation_tokens(r)}
            self._tries[relations] = (TokenTrie(by_tokens), by_tokens)
        return self._tries[relations]

    def _markers_after(self, relations: tuple[str, ...]) -> list[tuple[int, ...]]:
        """``</PATH>`` always; ``<SEP>`` while hops remain and some relation can follow."""
        options = [self.markers["close"]]
        if len(relations) < self.max_hops and self._allowed_relations(relations):
            options.append(self.markers["sep"])
        return options

    def _allowed(self, state: tuple) -> list[int]:
        phase, relations, partial = state
        if phase == "open":
            return [self.open[len(partial)]]
        if phase == "relation":
            trie, by_tokens = self._trie(relations)
            node = trie.node(partial)
            allowed = TokenTrie.next_tokens(node) if node is not None else []
            if partial in by_tokens:
                allowed += [m[0] for m in self._markers_after(relations + (by_tokens[partial],))]
            return allowed
        if phase == "marker":
            return sorted({m[len(partial)] for m in self._markers_after(relations) if m[: len(partial)] == partial})
        return [self.eos]  # done, or a dead end (no relation leaves the frontier)

    def _step(self, state: tuple, token: int) -> tuple:
        phase, relations, partial = state
        if phase == "open":
            partial += (token,)
            return ("relation", (), ()) if partial == self.open else ("open", (), partial)
        if phase == "relation":
            trie, by_tokens = self._trie(relations)
            node = trie.node(partial)
            if node is not None and token in node:
                return ("relation", relations, partial + (token,))
            if partial not in by_tokens:  # not an allowed token: end the plan unparsable
                return ("dead", relations, ())
            # a marker starts: the relation is complete
            return self._step(("marker", relations + (by_tokens[partial],), ()), token)
        if phase == "marker":
            partial += (token,)
            if partial == self.markers["sep"]:
                return ("relation", relations, ())
            if partial == self.markers["close"]:
                return ("done", relations, ())
            return ("marker", relations, partial)
        return state

    def __call__(self, generated: Sequence[int]) -> list[int]:
        key = tuple(generated)
        state = self._states.get(key)
        if state is None:
            parent = self._states.get(key[:-1])
            if parent is None:  # never happens with HF's step-by-step calls; walk from the start
                parent = self._states[()]
                for token in key[:-1]:
                    parent = self._step(parent, token)
            state = self._step(parent, key[-1])
            self._states[key] = state
        return self._allowed(state) or [self.eos]


def _closed(text: str) -> bool:
    """A plan is complete at its first ``</PATH>``: free decoding stops there."""
    return PATH_CLOSE in text


def generate_plans(
    lm: LanguageModel,
    question: str,
    *,
    k: int = 3,
    mode: str = "free",
    vocabulary: Iterable[str] = (),
    frontiers: Frontiers | None = None,
    store: Store | None = None,
    max_hops: int = 3,
    max_new_tokens: int = 100,
) -> list[Plan]:
    """K plans for ``question`` by beam search, best first (``max_new_tokens`` bounds free mode;
    the constrained modes take what their longest plan needs); grounded plans fetch their
    frontiers from ``store``."""
    return generate_plans_batch(
        lm, [question], k=k, mode=mode, vocabulary=vocabulary, frontiers=[frontiers], store=store, max_hops=max_hops,
        max_new_tokens=max_new_tokens,
    )[0]


def generate_plans_batch(
    lm: LanguageModel,
    questions: Sequence[str],
    *,
    k: int = 3,
    mode: str = "free",
    vocabulary: Iterable[str] = (),
    frontiers: Sequence[Frontiers | None] | None = None,
    store: Store | None = None,
    max_hops: int = 3,
    max_new_tokens: int = 100,
) -> list[list[Plan]]:
    """:func:`generate_plans` for each question (grounded in ``frontiers[i]``), the beam
    searches decoded together: :func:`planning` served on ``store``."""
    program = planning(lm, questions, k=k, mode=mode, vocabulary=vocabulary, frontiers=frontiers, max_hops=max_hops,
                       max_new_tokens=max_new_tokens)
    return run(program, store)  # type: ignore[arg-type]  # free and vocabulary plans ask the store nothing


def planning(
    lm: LanguageModel,
    questions: Sequence[str],
    *,
    k: int = 3,
    mode: str = "free",
    vocabulary: Iterable[str] = (),
    frontiers: Sequence[Frontiers | None] | None = None,
    max_hops: int = 3,
    max_new_tokens: int = 100,
) -> Program[list[list[Plan]]]:
    """The plans of every question, as one program for the batch (:mod:`engine.methods.lockstep`):
    the beam searches decoded together (:meth:`LanguageModel.beam_search_batch`). Grounded, the
    decoding runs step by step (:meth:`LanguageModel.beam_search_steps`): before each step the
    relations every row's constraint reads are fetched for the whole step (:func:`prepare`), and
    the step's allowed tokens go to the model as data. The relations leaving the topic
    entities, which every grounded plan asks first, are fetched before the first step, for every
    question at once (a batch's prompts may decode in several chunks, each with its own steps)."""
    if mode not in PLAN_MODES:
        raise ValueError(f"unknown planning mode {mode!r}: use one of {', '.join(PLAN_MODES)}")
    per_question = list(frontiers) if frontiers is not None else [None] * len(questions)
    prompts = [planning_prompt(q) for q in questions]
    if mode == "free":
        found = lm.beam_search_batch(prompts, num_beams=k, num_return=k, max_new_tokens=max_new_tokens, stop=_closed)
    else:
        if mode == "grounded" and any(f is None for f in per_question):
            raise ValueError("grounded planning needs the frontiers of the question's topic entities")
        vocabulary = frozenset(vocabulary)
        constraints = [PlanConstraint(lm, max_hops, vocabulary, f if mode == "grounded" else None) for f in per_question]
        max_new_tokens = max((c.max_new_tokens() for c in constraints), default=max_new_tokens)
        if mode == "vocabulary":
            found = lm.beam_search_batch(
                prompts, num_beams=k, num_return=k, max_new_tokens=max_new_tokens, allowed_tokens=constraints, stop=_closed
            )
        else:
            yield from prepare([partial(f.relations, ()) for f in per_question if f is not None])
            decoding = lm.beam_search_steps(prompts, num_beams=k, num_return=k, max_new_tokens=max_new_tokens, stop=_closed)
            found = yield from _constrained(decoding, constraints)
    return [[Plan(b.text, parse_plan(b.text), b.score) for b in beams] for beams in found]


def _constrained(decoding: Decoding, constraints: Sequence[PlanConstraint]) -> Program[list[list[Generation]]]:
    """Drive ``decoding``: each step's rows get what their constraints allow, once the frontiers
    hold what the constraints read (:func:`prepare`)."""
    try:
        rows = next(decoding)
        while True:
            allowed = yield from prepare([partial(constraints[q], generated) for q, generated in rows])
            rows = decoding.send(allowed)
    except StopIteration as done:
        return done.value
    finally:
        decoding.close()
