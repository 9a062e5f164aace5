"""Alignment and execution (Module C): generated names → ids, unknown relations → known ones,
every combination executed until the first non-empty answer.

- an entity written by name: exact name matches (``search``), the most popular first (degree,
  as the popularity proxy), at most ``n_entities``; none → BM25 over the names that share a
  word with it (``search`` contains), best first; :meth:`Aligner.prefetch` finds them for a
  batch's forms in lock step, the degree calls shared;
- a relation not in the store: the ``n_relations`` best by BM25 over relation names, scored
  against the relation and the question;
- the combinations run in that order; the first non-empty answer wins. Each runs with a
  per-query ``timeout`` (seconds; ``Store.execute``): one that runs past it, or fails, counts
  as an empty answer and the loop moves on to the next.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from engine.methods.arg.generation import tokens
from engine.methods.lockstep import Program, RelationsOf, SearchOf, serve
from engine.errors import KGQAError, QueryTimeoutError
from engine.identifiers import UNBOUNDED, validate_timeout
from engine.results import ExecuteResult, RelationCount
from engine.sexpr import parse
from engine.sexpr.tree import Entity, Relation, Top, Value, to_text
from engine.store import Store

#: seconds one candidate may run before it counts as empty
TIMEOUT = 10.0


@dataclass
class Aligned:
    sexpr: str | None
    result: ExecuteResult | None
    tried: int
    timed_out: int = 0  # candidates stopped at the timeout


class Aligner:
    def __init__(
        self, store: Store, n_entities: int = 15, n_relations: int = 10, timeout: float | None = TIMEOUT
    ) -> None:
        from rank_bm25 import BM25Okapi

        self.store = store
        self.timeout = validate_timeout(timeout)
        self.n_entities, self.n_relations = n_entities, n_relations
        self.known = store.relation_names()
        self.bm25 = BM25Okapi([tokens(r) or ["_"] for r in self.known]) if self.known else None
        self._ids: dict[str, list[str]] = {}  # a batch's names, from prefetch

    def entity_ids(self, name: str) -> list[str]:
        if name in self._ids:
            return self._ids[name]
        return serve([self._entity_ids(name)], self.store)[0]

    def prefetch(self, forms: Iterable[str]) -> None:
        """:meth:`entity_ids` of every name a batch's ``forms`` write, kept for :meth:`run` until
        the next prefetch: the names' look-ups served in lock step (:mod:`engine.methods.lockstep`),
        so the exact matches' degrees come from one ``relations`` call for the whole batch, each
        name getting its own call's rows."""
        names = sorted({n.id for form in forms for n in _entities_of(form)})
        self._ids = dict(zip(names, serve([self._entity_ids(name) for name in names], self.store), strict=True))

    def _entity_ids(self, name: str) -> Program[list[str]]:
        """:meth:`entity_ids` as a program: exact name matches, the most popular first; none →
        the most similar names."""
        hits = [h.id for h in (yield SearchOf(name, "exact", UNBOUNDED))]
        if not hits:
            return (yield from self._similar(name))
        rows, _ = yield RelationsOf(tuple(hits), UNBOUNDED)
        return self._most_popular(hits, rows)

    def _most_popular(self, hits: list[str], rows: Iterable[RelationCount]) -> list[str]:
        """Exact matches by degree (the popularity proxy), at most ``n_entities``."""
        degree: dict[str, int] = {}
        for row in rows:
            degree[row.id] = degree.get(row.id, 0) + row.count  # type: ignore[index]
        return sorted(set(hits), key=lambda i: (-degree.get(i, 0), i))[: self.n_entities]

    def _similar(self, name: str) -> Program[list[str]]:
        """No exact match: BM25 over the names that share ``name``'s longest word, best first."""
        words = sorted(tokens(name), key=len, reverse=True)
        if not words:
            return [name]
        from rank_bm25 import BM25Okapi

        found = yield SearchOf(words[0], "contains", 200)
        if not found:
            return [name]
        bm25 = BM25Okapi([tokens(h.name) or ["_"] for h in found])
        scores = bm25.get_scores(tokens(name))
        return [found[i].id for i in sorted(range(len(found)), key=lambda i: -scores[i])[: self.n_entities]]

    def relation_names(self, name: str, question: str) -> list[str]:
        if name in self.known or self.bm25 is None:
            return [name]
        scores = self.bm25.get_scores(tokens(name) + tokens(question))
        return [self.known[i] for i in sorted(range(len(self.known)), key=lambda i: -scores[i])[: self.n_relations]]

    def run(self, form: str, question: str, max_tries: int = 200) -> Aligned:
        try:
            tree = parse(form)
        except KGQAError:
            return Aligned(None, None, 0)
        entity_names = sorted({n.id for n in _nodes(tree, Entity)})
        relation_names = sorted({n.name for n in _nodes(tree, Relation)})
        options = [self.entity_ids(n) for n in entity_names] + [self.relation_names(r, question) for r in relation_names]
        tried = timed_out = 0
        for choice in itertools.islice(itertools.product(*options), max_tries):
            mapping = dict(zip(entity_names + relation_names, choice))
            candidate = _substitute(tree, mapping)
            tried += 1
            try:
                result = self.store.execute(candidate, timeout=self.timeout)
            except QueryTimeoutError:
                timed_out += 1  # an empty answer: on to the next combination
                continue
            except KGQAError:
                continue
            if result.answers or result.count:
                return Aligned(to_text(candidate), result, tried, timed_out)
        return Aligned(None, None, tried, timed_out)


def _entities_of(form: str) -> list[Entity]:
    """The entity nodes of a form's tree (none when it does not parse)."""
    try:
        return _nodes(parse(form), Entity)
    except KGQAError:
        return []


def _nodes(tree: Any, kind: type) -> list[Any]:
    found = []
    if isinstance(tree, kind):
        found.append(tree)
    if hasattr(tree, "__dataclass_fields__") and not isinstance(tree, Value):
        for name in tree.__dataclass_fields__:
            found.extend(_nodes(getattr(tree, name), kind))
    return found


def _substitute(tree: Any, mapping: dict[str, str]) -> Top:
    if isinstance(tree, Entity):
        return Entity(mapping.get(tree.id, tree.id))
    if isinstance(tree, Relation):
        return Relation(mapping.get(tree.name, tree.name))
    if hasattr(tree, "__dataclass_fields__") and not isinstance(tree, Value):
        changes = {name: _substitute(getattr(tree, name), mapping) for name in tree.__dataclass_fields__}
        return replace(tree, **changes)
    return tree
