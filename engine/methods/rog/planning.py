"""Planning: K relation paths by beam search from RoG's planning prompt, in three decoding modes.

- ``free``: the paper; the model may name relations that do not exist.
- ``vocabulary``: a token trie over the store's relation names, so every relation exists.
- ``grounded``: each next relation must leave the current frontier (the nodes reached from
  the topic entities by the relations so far), so every plan grounds to at least one path.

The constrained modes drive the model through ``<PATH> r (<SEP> r)* </PATH> eos`` token by
token; markers are tokenised as plain text when the model lacks them (SmolLM2) and are single
tokens when it has them (``rmanluo/RoG``).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from engine.methods.batched import Call, per_group
from engine.graph import NAME_RELATION, Edge, Literal
from engine.identifiers import UNBOUNDED
from engine.models.lm import BeforeStep, LanguageModel
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


@dataclass
class Plan:
    """One generated plan: its text, its relations (None when unparsable) and beam score."""

    text: str
    relations: list[str] | None
    score: float | None


def relation_vocabulary(store: Store) -> frozenset[str]:
    """Every relation of the store that a plan may name (labels excluded)."""
    return frozenset(r for r in store.relation_names() if r != NAME_RELATION)


class _Missing(Exception):
    """What a frontier lacks while a step's needs are gathered (:func:`fetch_step`)."""

    def __init__(self, frontiers: Frontiers, kind: str, prefix: tuple[str, ...]) -> None:
        super().__init__(kind, prefix)
        self.need = (frontiers, kind, prefix)


class Frontiers:
    """The nodes reached from the topic entities by each relation prefix, and the relations
    leaving them: batched store calls over a whole frontier, cached."""

    def __init__(self, store: Store, topics: Sequence[str], direction: str = "both") -> None:
        self.store = store
        self.direction = direction
        self._nodes: dict[tuple[str, ...], list[str]] = {(): sorted(set(topics))}
        self._relations: dict[tuple[str, ...], frozenset[str]] = {}
        self._gathering = False  # raise _Missing instead of calling the store

    def nodes(self, prefix: tuple[str, ...]) -> list[str]:
        if prefix not in self._nodes:
            if self._gathering:
                raise _Missing(self, "nodes", prefix)
            parent = self.nodes(prefix[:-1])
            edges = self.store.expand(parent, [prefix[-1]], self.direction, UNBOUNDED).edges if parent else []
            self._set_nodes(prefix, edges)
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
            if self._gathering:
                raise _Missing(self, "relations", prefix)
            if self._from_two_hop(prefix):
                parent = self.nodes(prefix[:-1])
                rows = self.store.two_hop_relations(parent, prefix[-1], "both", UNBOUNDED).rows if parent else []
            else:
                nodes = self.nodes(prefix)
                rows = self.store.relations(nodes, self.direction, UNBOUNDED).rows if nodes else []
            self._relations[prefix] = _walkable(rows)
        return self._relations[prefix]

    @staticmethod
    def share_first_step(frontiers: Sequence[Frontiers]) -> None:
        """Fill in the relations leaving each one's topic entities, which every grounded plan
        asks first, with one ``relations`` call for all of them (frontiers of one store and
        direction; the rows each would get alone, :func:`_fetch_together`). A batch's prompts
        may be decoded in several chunks, each with its own steps: this call spans them."""
        if any(f.store is not frontiers[0].store or f.direction != frontiers[0].direction for f in frontiers):
            raise ValueError("frontiers share their first step only over one store and direction")
        _fetch_together([(f, "relations", ()) for f in frontiers])


def fetch_step(constraints: Sequence[PlanConstraint | None]) -> BeforeStep:
    """A ``before_step`` for :meth:`LanguageModel.beam_search_batch` over grounded plans: the
    relations every row of a step will ask of its frontiers, fetched first with one store call
    per kind of call and relation for all the batch's questions (:func:`_fetch_together`), so
    the rules then read them from the frontiers' caches. The rows see exactly what their own
    calls would have returned: the same plans, fewer calls."""
    grounded = [(q, c) for q, c in enumerate(constraints) if c is not None and c.frontiers is not None]
    frontiers = list({id(c.frontiers): c.frontiers for _, c in grounded}.values())

    def gather(rows: list[tuple[int, list[int]]]) -> list[tuple[Frontiers, str, tuple[str, ...]]]:
        """Run every grounded row's rule with its frontiers refusing to call the store: what
        they lack (one thing per row and round)."""
        asked = {q for q, _ in grounded}
        missing = []
        for f in frontiers:
            f._gathering = True
        try:
            for question, generated in rows:
                if question in asked:
                    try:
                        constraints[question](generated)  # type: ignore[misc]
                    except _Missing as e:
                        missing.append(e.need)
        finally:
            for f in frontiers:
                f._gathering = False
        return missing

    def before_step(rows: list[tuple[int, list[int]]]) -> None:
        while missing := gather(rows):
            _fetch_together(missing)

    return before_step


def _fetch_together(missing: Iterable[tuple[Frontiers, str, tuple[str, ...]]]) -> None:
    """Fill in what the frontiers lack, one store call per kind of call, relation and
    direction for all of them (:func:`engine.methods.batched.per_group`: each frontier gets exactly its
    own call's rows). What waits on a frontier not expanded yet gets that frontier now and is
    asked in the next round."""
    # (kind, relation, direction, store) -> {(frontier, prefix): frontier}; the call fills in the
    # prefix's frontier (expand) or its relations (two_hop, relations)
    calls: dict[tuple[str, str | None, str, int], dict[tuple[int, tuple[str, ...]], Frontiers]] = {}
    for f, kind, prefix in missing:
        if kind == "nodes":
            call, base = ("expand", prefix[-1], f.direction), prefix[:-1]
        elif f._from_two_hop(prefix):
            call, base = ("two_hop", prefix[-1], "both"), prefix[:-1]
        else:
            call, base = ("relations", None, f.direction), prefix
        if base not in f._nodes:  # first the nearest frontier on the way that is not there
            while base[:-1] not in f._nodes:
                base = base[:-1]
            call, prefix, base = ("expand", base[-1], f.direction), base, base[:-1]
        calls.setdefault((*call, id(f.store)), {})[(id(f), prefix)] = f
    for (kind, relation, direction, _), asked in calls.items():
        items = [(prefix, f) for (_, prefix), f in asked.items()]
        store = items[0][1].store
        if kind == "expand":
            groups = [f._nodes[prefix[:-1]] for prefix, f in items]
            found = _per_nonempty_group(
                lambda ids, n, s=store, r=relation, d=direction: s.expand(ids, [r], d, n),
                groups, rows=attrgetter("edges"), anchor=attrgetter("src"),
            )
            for (prefix, f), edges in zip(items, found, strict=True):
                f._set_nodes(prefix, edges)
            continue
        if kind == "two_hop":
            groups = [f._nodes[prefix[:-1]] for prefix, f in items]
            found = _per_nonempty_group(lambda ids, n, s=store, r=relation: s.two_hop_relations(ids, r, "both", n), groups)
        else:
            groups = [f._nodes[prefix] for prefix, f in items]
            found = _per_nonempty_group(lambda ids, n, s=store, d=direction: s.relations(ids, d, n), groups)
        for (prefix, f), rows in zip(items, found, strict=True):
            f._relations[prefix] = _walkable(rows)


def _per_nonempty_group(call: Call, groups: list[list[str]], **how: Any) -> list[list[Any]]:
    """:func:`per_group`'s rows for each group, unbounded; an empty group gets none and no call."""
    asked = [g for g in groups if g]
    found = iter(per_group(call, asked, UNBOUNDED, **how)) if asked else iter(())
    return [next(found)[0] if g else [] for g in groups]


def _walkable(rows: Iterable[RelationCount]) -> frozenset[str]:
    """The relations of ``relations`` rows a plan may name (names are shown, not walked)."""
    return frozenset(r.relation for r in rows if r.relation != NAME_RELATION)


class PlanConstraint:
    """``allowed_tokens`` for :meth:`LanguageModel.beam_search`: a state machine over
    ``<PATH> r (<SEP> r)* </PATH> eos`` where each r comes from a token trie of the relations
    allowed after the relations so far (``vocabulary``, or ``frontiers`` when grounded).

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
    max_hops: int = 3,
    max_new_tokens: int = 100,
) -> list[Plan]:
    """K plans for ``question`` by beam search, best first (``max_new_tokens`` bounds free mode;
    the constrained modes take what their longest plan needs)."""
    return generate_plans_batch(
        lm, [question], k=k, mode=mode, vocabulary=vocabulary, frontiers=[frontiers], max_hops=max_hops,
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
    max_hops: int = 3,
    max_new_tokens: int = 100,
) -> list[list[Plan]]:
    """:func:`generate_plans` for each question (grounded in ``frontiers[i]``), the beam
    searches decoded together (:meth:`LanguageModel.beam_search_batch`)."""
    if mode not in PLAN_MODES:
        raise ValueError(f"unknown planning mode {mode!r}: use one of {', '.join(PLAN_MODES)}")
    per_question = list(frontiers) if frontiers is not None else [None] * len(questions)
    constraints: list[PlanConstraint] | None = None
    if mode != "free":
        if mode == "grounded" and any(f is None for f in per_question):
            raise ValueError("grounded planning needs the frontiers of the question's topic entities")
        vocabulary = frozenset(vocabulary)
        constraints = [PlanConstraint(lm, max_hops, vocabulary, f if mode == "grounded" else None) for f in per_question]
        max_new_tokens = max((c.max_new_tokens() for c in constraints), default=max_new_tokens)
    found = lm.beam_search_batch(
        [planning_prompt(q) for q in questions], num_beams=k, num_return=k, max_new_tokens=max_new_tokens,
        allowed_tokens=constraints, stop=_closed,
        before_step=fetch_step(constraints) if constraints is not None and mode == "grounded" else None,
    )
    return [[Plan(b.text, parse_plan(b.text), b.score) for b in beams] for beams in found]
