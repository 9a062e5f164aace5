"""The store interface: the operation vocabulary every backend honours identically.

Public methods validate their input, call one backend primitive (``_relations``,
``_expand``, ``_walks`` …), then sort and cut the rows the same way for every store. A
primitive gets ``fetch`` (``limit + 1``, or None for everything) and returns at most that
many rows in any order; the base turns the extra row into ``truncated``.

Limit contract: when ``truncated`` is False the answer is identical on every store; when it
is True every store returns exactly ``limit`` rows, each a row of the full answer (which
rows is up to the store: asking a database for a sorted prefix of a hub's millions of edges
would defeat the point of the limit).

Walk semantics, shared by ``expand``, ``follow_paths``, ``subgraph``, ``shortest_paths``,
``relations`` and ``two_hop_relations``:
- ``direction`` is ``out`` (stored orientation), ``in`` (against it) or ``both``;
- with ``both`` a self-loop is one edge, met once, as forward;
- literals are dead ends: a walk may end on a literal but never leaves one;
- a walk never uses the same stored edge (triple) twice.

``relations`` and ``two_hop_relations`` also take literal anchors (ARG-KBQA's questions
anchor on values such as a year): a literal's edges are those whose object is that literal,
all met ``in``; the rows name the anchor by the canonical :class:`Literal` itself.

``execute`` takes a ``timeout`` in seconds; a store that runs past it raises
:class:`engine.errors.QueryTimeoutError` (see :meth:`Store.execute` for how each store
enforces it).
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from engine.errors import (
    InvalidIdentifierError,
    InvalidInputError,
    QueryTimeoutError,
    UnsupportedOperationError,
)
from engine.graph import Edge, Literal, Path, Term, Triple, edge_key, path_key, term_key
from engine.identifiers import (
    SEARCH_MODES,
    validate_direction,
    validate_hops,
    validate_id,
    validate_ids,
    validate_limit,
    validate_relation,
    validate_relations,
)
from engine.results import (
    ExecuteResult,
    ExpandResult,
    PathsResult,
    QueryResult,
    RelationCount,
    RelationsResult,
    SearchHit,
    SearchResult,
    StoreStats,
    SubgraphResult,
    TwoHopRelation,
    TwoHopResult,
)
from engine.sexpr.parser import parse
from engine.sexpr.tree import Count, Top, to_text
from engine.timeouts import validate_timeout

if TYPE_CHECKING:
    from sparql.ntriples import CanonicalNTriples

MAX_PATH_HOPS = 8


def pick_name(names: Iterable[Literal]) -> str | None:
    """The display name among a node's names: English first, then untagged, then any."""
    best: tuple | None = None
    for name in names:
        if not isinstance(name, Literal):
            continue
        rank = 0 if name.lang == "en" else 1 if name.lang is None else 2
        key = (rank, name.value)
        if best is None or key < best:
            best = key
    return None if best is None else best[1]


def checked_triples(triples: Iterable[Triple]) -> Iterator[Triple]:
    """Pass triples through, raising on the first that may not enter a store."""
    for t in triples:
        if not isinstance(t, Triple):
            raise InvalidInputError(f"expected a Triple, got {t!r}")
        validate_id(t.subject)
        validate_relation(t.relation)
        if not isinstance(t.object, Literal):
            validate_id(t.object)
        yield t


# a datatype IRI: a scheme, then no blanks, quotes, angle brackets or the like
_DATATYPE_IRI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\x00-\x20<>\"{}|^`\\]*")


def validate_literal(literal: Literal) -> Literal:
    """``literal`` in its canonical form (:meth:`Literal.make`), with a safe datatype IRI."""
    if literal.datatype is not None and not _DATATYPE_IRI.fullmatch(literal.datatype):
        raise InvalidIdentifierError(f"invalid datatype IRI {literal.datatype!r} on literal {literal.value!r}")
    if not isinstance(literal.value, str):
        raise InvalidInputError(f"a literal's value must be a string, got {literal.value!r}")
    return Literal.make(literal.value, literal.datatype, literal.lang)


def split_anchors(anchors: Iterable[str | Literal] | str) -> tuple[list[str], list[Literal]]:
    """Validate anchors (node ids and literals); deduplicate each kind, keeping first-seen order."""
    if isinstance(anchors, (str, Literal)):
        raise InvalidInputError(f"expected a list of ids or literals, got {anchors!r}; wrap it: [{anchors!r}]")
    ids: dict[str, None] = {}
    literals: dict[Literal, None] = {}
    for anchor in anchors:
        if isinstance(anchor, Literal):
            literals[validate_literal(anchor)] = None
        else:
            ids[validate_id(anchor)] = None
    return list(ids), list(literals)


def _cut(rows: list, limit: int | None, key) -> tuple[list, bool]:
    rows.sort(key=key)
    if limit is not None and len(rows) > limit:
        return rows[:limit], True
    return rows, False


def _fetch(limit: int | None) -> int | None:
    return None if limit is None else limit + 1


class Store(ABC):
    """A knowledge-graph store. Open one with :func:`engine.open_store`."""

    #: ``sparql``, ``cypher`` or ``python``
    dialect: str = ""
    #: the URI the store was opened with
    uri: str = ""

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Release connections and files."""

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

    #: triples per ``add_triples`` call that the loader (:func:`loaders.load.load_files`) sends
    load_batch_size: int = 50_000

    # ------------------------------------------------------------------ writing
    def add_triples(self, triples: Iterable[Triple]) -> None:
        """Add triples through the store's bulk path; triples already present are no-ops.

        Every triple is validated on its way in (ids, relation names, literal objects), so a
        bad one stops the load before it reaches the store.
        """
        self._add_triples(checked_triples(triples))

    def _add_triples(self, triples: Iterable[Triple]) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot load triples")

    def canonical_ntriples(self, namespace: str) -> CanonicalNTriples | None:
        """The loader's fast lane (:func:`loaders.load.load_files`): a recogniser of N-Triples
        lines under ``namespace`` that this store loads as they are, through ``_add_ntriples``,
        with the same result as parsing them; None when the store has no such lane."""
        return None

    def _add_ntriples(self, lines: Iterable[str]) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot load N-Triples text")

    @abstractmethod
    def count_triples(self) -> int:
        """The number of distinct triples stored."""

    @abstractmethod
    def stats(self) -> StoreStats:
        """Triples, entities and triples per relation."""

    # ------------------------------------------------------------------ operations
    def relations(
        self, ids: Sequence[str | Literal], direction: str = "both", limit: int | None = None
    ) -> RelationsResult:
        """Distinct relations adjacent to each anchor, with direction and edge count.

        An anchor is a node id or a :class:`Literal`. A literal has only incoming edges: its
        relations are those of the edges whose object is that literal (matched by value and
        datatype or language, in the canonical form of :meth:`Literal.make`), all ``in``; with
        ``direction="out"`` it has none. A row's ``id`` is the anchor itself (the id, or the
        canonical Literal). Node ids and literals mixed in one call cost one query for each kind.
        """
        ids, literals = split_anchors(ids)
        direction = validate_direction(direction)
        limit = validate_limit(limit)
        fetch = _fetch(limit)
        rows: list[RelationCount] = []
        if ids:
            rows += self._relations(ids, direction, fetch)
        if literals and direction != "out":
            rows += self._literal_relations(literals, fetch)
        rows, truncated = _cut(rows, limit, lambda r: (term_key(r.id), r.relation, r.direction))
        return RelationsResult(rows, truncated)

    def expand(
        self,
        ids: Sequence[str],
        relations: Sequence[str] | None = None,
        direction: str = "both",
        limit: int | None = None,
    ) -> ExpandResult:
        """One hop from each id: edges (src, relation, dst, forward)."""
        ids = validate_ids(ids)
        rels = None if relations is None else sorted(set(validate_relations(relations)))
        direction = validate_direction(direction)
        limit = validate_limit(limit)
        if not ids or rels == []:
            return ExpandResult([])
        edges = self._expand(ids, rels, direction, _fetch(limit))
        edges, truncated = _cut(edges, limit, edge_key)
        return ExpandResult(edges, truncated)

    def follow_paths(
        self,
        seeds: Sequence[str],
        path: Sequence[str],
        direction: str = "both",
        limit: int | None = None,
        *,
        distinct_edges: bool = True,
    ) -> PathsResult:
        """Every walk of exactly len(path) hops from a seed whose i-th edge carries path[i].

        ``distinct_edges=False`` lets a walk use one stored edge more than once (there and
        back), as RoG's own BFS and PathQuestion's answer generation do."""
        seeds = validate_ids(seeds)
        if isinstance(path, str):
            raise InvalidInputError(f"path must be a list of relation names, got the string {path!r}")
        hops = validate_relations(path)
        if not 1 <= len(hops) <= MAX_PATH_HOPS:
            raise InvalidInputError(f"path {list(path)!r} must have 1 to {MAX_PATH_HOPS} relations")
        direction = validate_direction(direction)
        limit = validate_limit(limit)
        if not seeds:
            return PathsResult([])
        paths = self._walks(seeds, list(hops), direction, _fetch(limit), None, bool(distinct_edges))
        paths, truncated = _cut(paths, limit, path_key)
        return PathsResult(paths, truncated)

    def subgraph(
        self,
        seeds: Sequence[str],
        hops: int,
        direction: str = "both",
        relations: Sequence[str] | None = None,
        limit: int | None = None,
    ) -> SubgraphResult:
        """Edges met by a breadth-first expansion of ``hops`` layers (one store call per layer)."""
        seeds = validate_ids(seeds)
        hops = validate_hops(hops)
        direction = validate_direction(direction)
        rels = None if relations is None else sorted(set(validate_relations(relations)))
        limit = validate_limit(limit)
        depth: dict[Term, int] = {s: 0 for s in seeds}
        edges: dict[Triple, None] = {}
        frontier = list(seeds)
        truncated = False
        for layer in range(1, hops + 1):
            if not frontier or rels == []:
                break
            # A layer meets each already-kept edge at most once more (from its far end), so
            # asking for limit + 1 + len(edges) rows is enough to decide truncation exactly.
            fetch = None if limit is None else limit + 1 + len(edges)
            met = sorted(self._expand(frontier, rels, direction, fetch), key=edge_key)
            next_frontier: list[str] = []
            for edge in met:
                triple = edge.triple()
                if triple not in edges:
                    if limit is not None and len(edges) == limit:
                        truncated = True
                        break
                    edges[triple] = None
                if edge.dst not in depth:
                    depth[edge.dst] = layer
                    if not isinstance(edge.dst, Literal):
                        next_frontier.append(edge.dst)
            if truncated:
                break
            frontier = next_frontier
        ordered = sorted(edges, key=lambda t: (t.subject, t.relation, term_key(t.object)))
        return SubgraphResult(ordered, depth, truncated)

    def shortest_paths(
        self, sources: Sequence[str], targets: Sequence[str], max_hops: int = 3, limit: int | None = None
    ) -> PathsResult:
        """All shortest undirected paths (at most ``max_hops``) between each source and target.

        Carried out as iterative deepening: one batched query per depth over the pairs not yet
        connected, so the work stays inside the database.
        """
        sources = validate_ids(sources)
        targets = validate_ids(targets)
        max_hops = validate_hops(max_hops, "max_hops")
        limit = validate_limit(limit)
        pending = [(s, t) for s in sources for t in targets if s != t]
        found: list[Path] = []
        truncated = False
        for depth in range(1, max_hops + 1):
            if not pending:
                break
            fetch = None if limit is None else limit - len(found) + 1
            paths = self._walks([], [None] * depth, "both", fetch, pending, True)
            if fetch is not None and len(paths) >= fetch:
                paths.sort(key=path_key)
                found.extend(paths[: fetch - 1])
                truncated = True
                break
            found.extend(paths)
            connected = {(p.start, p.end) for p in paths}
            pending = [pair for pair in pending if pair not in connected]
        found.sort(key=path_key)
        return PathsResult(found, truncated)

    def two_hop_relations(
        self, ids: Sequence[str | Literal], r1: str, direction: str = "both", limit: int | None = None
    ) -> TwoHopResult:
        """Relations (both directions) of the nodes reached from each anchor through r1.

        Anchors are node ids or literals, as for :meth:`relations`: from a literal, r1 is
        followed backwards to the subjects of its edges (so ``direction="out"`` reaches none).
        """
        ids, literals = split_anchors(ids)
        r1 = validate_relation(r1)
        direction = validate_direction(direction)
        limit = validate_limit(limit)
        fetch = _fetch(limit)
        rows: list[TwoHopRelation] = []
        if ids:
            rows += self._two_hop_relations(ids, r1, direction, fetch)
        if literals and direction != "out":
            rows += self._literal_two_hop_relations(literals, r1, fetch)
        rows, truncated = _cut(rows, limit, lambda r: (term_key(r.id), r.r1, r.relation, r.direction))
        return TwoHopResult(rows, truncated)

    def names(self, ids: Sequence[str]) -> dict[str, str | None]:
        """The display name of each id (``type.object.name``; English first), or None."""
        ids = validate_ids(ids)
        found = self._names(ids) if ids else {}
        return {i: pick_name(found.get(i, ())) for i in ids}

    def types(self, ids: Sequence[str]) -> dict[str, list[str]]:
        """The classes (``type.object.type``) of each id, sorted."""
        ids = validate_ids(ids)
        found = self._types(ids) if ids else {}
        return {i: sorted(set(found.get(i, ()))) for i in ids}

    def search(self, text: str, mode: str = "exact", limit: int | None = 10) -> SearchResult:
        """Entities by name: ``exact`` (case-sensitive equality), ``prefix`` or ``contains``
        (both case-insensitive)."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(f"search text must be a non-empty string, got {text!r}")
        if mode not in SEARCH_MODES:
            raise InvalidInputError(f"invalid search mode {mode!r}: use one of {', '.join(SEARCH_MODES)}")
        limit = validate_limit(limit)
        hits = self._search(text, mode, _fetch(limit))
        hits, truncated = _cut(hits, limit, lambda h: (h.id, h.name))
        return SearchResult(hits, truncated)

    def execute(self, sexpr: str | Top, timeout: float | None = None) -> ExecuteResult:
        """Execute an S-expression (text or a parsed tree) with GrailQA's semantics, as defined
        in :mod:`engine.sexpr.evaluate` and :mod:`engine.sexpr.keys`: its answer set sorted by
        :func:`term_key`, or the count of ``(COUNT …)``. Text is parsed (and so validated)
        first; a malformed one raises :class:`engine.sexpr.SExprSyntaxError`.

        ``timeout`` (seconds; None: none) bounds the query; past it the call raises
        :class:`engine.errors.QueryTimeoutError` naming the expression. Virtuoso stops the query
        itself (the endpoint's ``timeout`` parameter; it checks it at its own pace, so the call
        can return later than the timeout), Neo4j too (the transaction timeout). Oxigraph,
        FalkorDB and the reference store cannot stop a running query: the call returns at the
        timeout and the query runs on in a background thread until it ends
        (:mod:`engine.timeouts`).
        """
        tree = parse(sexpr) if isinstance(sexpr, str) else sexpr
        if not isinstance(tree, Top):
            raise InvalidInputError(f"execute takes an S-expression (text or tree), got {type(sexpr).__name__}")
        timeout = validate_timeout(timeout)
        try:
            result = self._execute_tree(tree, timeout)
        except QueryTimeoutError as e:
            text = to_text(tree)
            shown = text if len(text) <= 300 else text[:300] + "…"
            raise QueryTimeoutError(
                f"the S-expression {shown} ran past its timeout of {timeout:g} s on {self.uri} ({e}); "
                "give a larger timeout, or a narrower expression"
            ) from e
        if isinstance(tree, Count):
            return ExecuteResult([], int(result))  # type: ignore[arg-type]
        return ExecuteResult(sorted(set(result), key=term_key))  # type: ignore[arg-type]

    def _execute_tree(self, tree: Top, timeout: float | None = None) -> set[Term] | list[Term] | int:
        """The answers (any order, duplicates allowed) or the count of a parsed tree; past
        ``timeout`` seconds, :class:`QueryTimeoutError`."""
        raise UnsupportedOperationError(f"{type(self).__name__} cannot execute S-expressions")

    def query(self, text: str, params: dict[str, Any] | None = None) -> QueryResult:
        """Raw read-only query in the store's own language; anything that writes is refused."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError("query text must be a non-empty string")
        return self._query(text, dict(params or {}))

    # ------------------------------------------------------------------ primitives
    @abstractmethod
    def _relations(self, ids: list[str], direction: str, fetch: int | None) -> list[RelationCount]: ...

    @abstractmethod
    def _expand(self, ids: list[str], relations: list[str] | None, direction: str, fetch: int | None) -> list[Edge]: ...

    @abstractmethod
    def _walks(
        self,
        seeds: list[str],
        path: list[str | None],
        direction: str,
        fetch: int | None,
        pairs: list[tuple[str, str]] | None,
        distinct_edges: bool,
    ) -> list[Path]:
        """Walks following ``path`` (None = any relation) from ``seeds``; when ``pairs`` is
        given, ignore ``seeds`` and return only walks from pair[0] ending at pair[1]; when
        ``distinct_edges`` is False a walk may use one stored edge more than once."""

    @abstractmethod
    def _two_hop_relations(self, ids: list[str], r1: str, direction: str, fetch: int | None) -> list[TwoHopRelation]: ...

    @abstractmethod
    def _literal_relations(self, literals: list[Literal], fetch: int | None) -> list[RelationCount]:
        """Rows (literal, relation, ``in``, count) over the edges whose object is each literal."""

    @abstractmethod
    def _literal_two_hop_relations(self, literals: list[Literal], r1: str, fetch: int | None) -> list[TwoHopRelation]:
        """Like :meth:`_two_hop_relations` from literals: the middles are the subjects of the
        ``r1`` edges whose object is the literal."""

    @abstractmethod
    def _names(self, ids: list[str]) -> dict[str, list[Literal]]: ...

    @abstractmethod
    def _types(self, ids: list[str]) -> dict[str, list[str]]: ...

    @abstractmethod
    def _search(self, text: str, mode: str, fetch: int | None) -> list[SearchHit]: ...

    @abstractmethod
    def _query(self, text: str, params: dict[str, Any]) -> QueryResult: ...

