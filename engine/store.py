"""The store interface: the operation vocabulary every backend honours identically.

Public methods validate their input, build operations (:mod:`engine.ops`), run each through
:meth:`Store._call` (compile with the store's dialect, run, decode, tell the
:attr:`Store.listeners`), then sort and cut the rows the same way for every store. An
operation carries ``limit``: one row more than the caller's limit, or None for everything;
a backend returns at most that many rows in any order; the base turns the extra row into
``truncated``.

Limit contract: every operation returns at most ``limit`` rows; None means the default bound
:data:`engine.identifiers.DEFAULT_LIMIT` (100,000 rows), ``limit=UNBOUNDED`` lifts it. When
``truncated`` is False the answer is identical on every store; when it is True every store
returns exactly ``limit`` rows, each a row of the full answer (which rows is up to the store:
asking a database for a sorted prefix of a hub's millions of edges would defeat the point of
the limit).

Timeouts: every operation takes ``timeout`` (seconds; None: none beyond the store's own
request limits); a store that runs past it raises :class:`engine.errors.QueryTimeoutError`
(see :meth:`Store.execute` for how each store enforces it). An operation of several queries
shares its timeout among them (:class:`engine.timeouts.Budget`).

Walk semantics, shared by ``expand``, ``follow_paths``, ``subgraph``, ``shortest_paths``,
``relations`` and ``two_hop_relations``:
- ``direction`` is ``out`` (stored orientation), ``in`` (against it) or ``both``;
- with ``both`` a self-loop is one edge, met once, as forward;
- literals are dead ends: a walk may end on a literal but never leaves one;
- a walk never uses the same stored edge (triple) twice.

``relations`` and ``two_hop_relations`` also take literal anchors (ARG-KBQA's questions
anchor on values such as a year): a literal's edges are those whose object is that literal,
all met ``in``; the rows name the anchor by the canonical :class:`Literal` itself.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine.errors import (
    InvalidInputError,
    QueryTimeoutError,
    UnsupportedOperationError,
    clipped,
)
from engine.graph import (
    NAME_RELATION,
    TYPE_RELATION,
    Edge,
    Literal,
    Path,
    Term,
    Triple,
    build_each,
    sort_edges,
    sort_paths,
    term_key,
)
from engine.identifiers import (
    MAX_ID_LENGTH,
    MAX_PAIRS,
    SEARCH_MODES,
    UNBOUNDED,
    check_list,
    validate_direction,
    validate_flag,
    validate_hops,
    validate_id,
    validate_ids,
    validate_limit,
    validate_relation,
    validate_relations,
    validate_text,
    validate_timeout,
)
from engine.limits import TermCheck
from engine.ops import (
    CallRecord,
    Compiled,
    Compiler,
    Entities,
    Execute,
    Expand,
    LiteralRelations,
    LiteralTwoHopRelations,
    Names,
    Op,
    Relations,
    Search,
    TwoHopRelations,
    Types,
    Walks,
)
from engine.results import (
    EntitiesResult,
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
from engine.sexpr.parser import MAX_DEPTH, parse
from engine.sexpr.tree import Count, Top, depth, entities, to_text
from engine.timeouts import Budget, run_with_timeout
from engine.walk import breadth_first

if TYPE_CHECKING:
    from sparql.ntriples import CanonicalNTriples

MAX_PATH_HOPS = 8
#: relations ``shortest_paths`` leaves out unless told otherwise: through class nodes any two
#: entities of one type would be two hops apart
SCHEMA_RELATIONS = (TYPE_RELATION, NAME_RELATION)

#: a function told of every store call (see :attr:`Store.listeners`)
Listener = Callable[[CallRecord], None]


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


def text_matches(value: str, text: str, mode: str) -> bool:
    """Whether ``search(text, mode)`` matches a name, or the id of a node without one."""
    if mode == "exact":
        return value == text
    lowered, needle = value.lower(), text.lower()
    return lowered.startswith(needle) if mode == "prefix" else needle in lowered


def checked_triples(triples: Iterable[Triple], check: TermCheck | None = None) -> Iterator[Triple]:
    """Pass triples through, raising on the first that may not enter a store (literal objects
    are canonical by construction; their values must be valid Unicode) or, with ``check``
    (:meth:`Store.term_check`), that the store cannot keep exactly."""
    if isinstance(triples, (Triple, str, bytes)) or not isinstance(triples, Iterable):
        raise InvalidInputError(
            f"expected a list of Triples, such as [Triple('m.1', 'film.film.directed_by', 'm.2')], "
            f"got {clipped(repr(triples), 200)}"
        )
    for t in triples:
        if not isinstance(t, Triple):
            raise InvalidInputError(f"expected a Triple, got {t!r}")
        validate_id(t.subject)
        validate_relation(t.relation)
        if isinstance(t.object, Literal):
            try:
                validate_text(t.object.value, "its literal")
            except InvalidInputError as e:
                raise InvalidInputError(f"cannot load {clipped(repr(t), 200)}: {e}") from None
        else:
            validate_id(t.object)
        if check is not None:
            why = check(t)
            if why is not None:
                raise InvalidInputError(f"cannot load {clipped(repr(t), 200)}: {why}")
        yield t


def split_anchors(anchors: Iterable[str | Literal] | str, argument: str = "ids") -> tuple[list[str], list[Literal]]:
    """Validate anchors (node ids and literals), the argument named ``argument``; deduplicate
    each kind, keeping first-seen order."""
    if isinstance(anchors, Literal):
        shown = clipped(repr(anchors), 200)
        raise InvalidInputError(f"expected a list of ids or literals as {argument}, got {shown}; wrap it: [{shown}]")
    check_list(anchors, argument, "ids or literals")
    ids: dict[str, None] = {}
    literals: dict[Literal, None] = {}
    for position, anchor in enumerate(anchors):
        if isinstance(anchor, Literal):
            validate_text(anchor.value, f"the value of literal {argument}[{position}]")
            literals[anchor] = None
        else:
            ids[validate_id(anchor, argument, position)] = None
    return list(ids), list(literals)


#: how deep a raw query's parameter may nest lists, tuples and maps (a list of ``VALUES`` rows
#: nests two): binding walks them recursively
MAX_PARAMETER_DEPTH = 32
#: the most bits of an integer parameter: at most 4,215 decimal digits, which Python writes as
#: text (by default it refuses integers of more than 4,300 digits)
MAX_PARAMETER_BITS = 14_000


def validate_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """A raw query's parameters, if every text in them (names, strings, literal values, inside
    lists, tuples and maps too) is valid Unicode, every integer can be written as text and
    nothing nests deeper than :data:`MAX_PARAMETER_DEPTH`; else an error naming the parameter."""
    def check(value: object, where: str, level: int) -> None:
        if isinstance(value, str):
            validate_text(value, where)
        elif isinstance(value, Literal):  # its datatype and language were checked when it was made
            validate_text(value.value, f"the value of {where}")
        elif isinstance(value, int) and value.bit_length() > MAX_PARAMETER_BITS:
            raise InvalidInputError(
                f"{where} is an integer of {value.bit_length():,} bits; give one of at most {MAX_PARAMETER_BITS:,} bits"
            )
        elif isinstance(value, (list, tuple, dict)):
            if level >= MAX_PARAMETER_DEPTH:
                raise InvalidInputError(
                    f"{where} nests lists, tuples or maps more than {MAX_PARAMETER_DEPTH} levels deep; give a flatter value"
                )
            if isinstance(value, dict):
                for key, item in value.items():
                    check(key, f"a key of {where}", level + 1)
                    check(item, f"{where}[{key!r}]", level + 1)
            else:
                for position, item in enumerate(value):
                    check(item, f"{where}[{position}]", level + 1)

    for name, value in params.items():
        check(name, "a query parameter name", 0)
        check(value, f"query parameter {name!r}", 0)
    return params


def validate_endpoints(sources: Sequence[str], targets: Sequence[str]) -> tuple[list[str], list[str]]:
    """``shortest_paths``'s sources and targets, checked, and at most :data:`MAX_PAIRS` pairs
    of them (every pair is one row of the query: millions of them exhaust memory before the
    database sees the query)."""
    sources = validate_ids(sources, "sources")
    targets = validate_ids(targets, "targets")
    pairs = len(sources) * len(targets)
    if pairs > MAX_PAIRS:
        raise InvalidInputError(
            f"{len(sources):,} sources × {len(targets):,} targets make {pairs:,} pairs; shortest_paths takes "
            f"at most {MAX_PAIRS:,}: give at most {MAX_PAIRS:,} sources × targets; split the call (each pair's "
            "paths are found apart from the others', so the parts' answers together are the whole)"
        )
    return sources, targets


def validate_exclude(exclude: Sequence[str]) -> tuple[str, ...]:
    """The relations a call leaves out, checked and sorted."""
    return tuple(sorted(set(validate_relations(exclude, "exclude"))))


def _cut(rows: list, limit: int | None, key) -> tuple[list, bool]:
    rows.sort(key=key)
    return _first(rows, limit)


def _first(rows: list, limit: int | None) -> tuple[list, bool]:
    """The first ``limit`` of sorted rows, and whether any were left out."""
    if limit is not None and len(rows) > limit:
        return rows[:limit], True
    return rows, False


def _fetch(limit: int | None) -> int | None:
    return None if limit is None else limit + 1


class Store(ABC):
    """A knowledge-graph store. Open one with :func:`engine.open_store`."""

    #: the query language: ``sparql``, ``cypher`` or ``python``
    dialect: str = ""
    #: the URI the store was opened with
    uri: str = ""
    #: the dialect compiler the store runs its operations through (None: the store runs
    #: operations itself, as the reference store does)
    compiler: Compiler | None = None

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Release connections and files."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

    #: triples per ``add_triples`` call that the loader (:func:`loaders.load.load_files`) sends
    load_batch_size: int = 50_000

    # ------------------------------------------------------------------ calls
    @property
    def listeners(self) -> list[Listener]:
        """Functions called with a :class:`engine.ops.CallRecord` (operation, compiled text,
        rows, seconds) after every call this store makes to its database; append to watch
        them (counting calls and store seconds per question, logging queries). A public
        operation makes one call or more (``subgraph`` one per layer, ``shortest_paths`` one
        per depth, ``relations`` one for ids and one for literals)."""
        found = self.__dict__.get("_listeners")
        if found is None:
            found = self.__dict__["_listeners"] = []
        return found

    def explain(self, op: Op) -> Compiled:
        """The query text and parameters ``op`` compiles to on this store, without running it."""
        if not isinstance(op, Op):
            raise InvalidInputError(
                f"explain takes an operation of engine.ops (such as Expand(('m.0kq01',), None, 'out')), "
                f"got {clipped(repr(op), 200)}"
            )
        if self.compiler is None:
            raise UnsupportedOperationError(
                f"{type(self).__name__} runs operations in Python and compiles no query; explain on a database store"
            )
        return self.compiler.compile(op)

    @contextlib.contextmanager
    def explaining(self) -> Iterator[list[tuple[Op, Compiled]]]:
        """Within the block, the store's operations are compiled but not run: each call
        answers nothing, and the list yielded collects ``(op, compiled)`` for every call
        made (``kgqa query … --explain``). A public operation that goes on after an empty
        answer shows its next calls too (``shortest_paths`` one per depth)."""
        planned: list[tuple[Op, Compiled]] = []
        self.__dict__["_planned"] = planned
        try:
            yield planned
        finally:
            del self.__dict__["_planned"]

    def _call(self, op: Op) -> list:
        """Compile, run and decode one operation; tell the listeners."""
        planned = self.__dict__.get("_planned")
        if planned is not None:
            planned.append((op, self.explain(op)))
            return []
        started = time.perf_counter()
        compiled = None if self.compiler is None else self.compiler.compile(op)
        rows = self._run(op, compiled)
        listeners = self.__dict__.get("_listeners")
        if listeners:
            record = CallRecord(op, "" if compiled is None else compiled.text, len(rows), time.perf_counter() - started)
            for listener in listeners:
                listener(record)
        return rows

    @abstractmethod
    def _run(self, op: Op, compiled: Compiled | None) -> list:
        """Run one operation (compiled by :attr:`compiler`, or None) and decode its rows: at
        most ``op.limit`` of them, in any order; past ``op.timeout`` seconds,
        :class:`QueryTimeoutError`. Rows by operation: RelationCount (relations, literal
        relations), Edge, Path, TwoHopRelation, (id, name Literal), (id, class), SearchHit,
        answers or ``[count]`` (execute), ``[count]`` (counts), relation names, (relation, count)."""

    # ------------------------------------------------------------------ writing
    def add_triples(self, triples: Iterable[Triple]) -> int | None:
        """Add triples through the store's bulk path; triples already present are no-ops.
        Returns how many were new where the store counts that apart from what concurrent loads
        add (Virtuoso's bulk loader), else None.

        Every triple is validated on its way in (ids, relation names, literal objects, and
        the store's own limits, :meth:`term_check`), so a bad one stops the call before any
        of it reaches the store.
        """
        return self._add_triples(checked_triples(triples, self.term_check()))

    def term_check(self) -> TermCheck | None:
        """The test of what this store keeps exactly (terms within its measured limits,
        :mod:`engine.limits`): a triple → why it cannot be stored, or None. None when the
        store holds every valid triple."""
        return None

    def _add_triples(self, triples: Iterable[Triple]) -> int | None:
        raise NotImplementedError(f"{type(self).__name__} cannot load triples")

    def canonical_ntriples(self, namespace: str) -> CanonicalNTriples | None:
        """The loader's fast lane (:func:`loaders.load.load_files`): a recogniser of N-Triples
        lines under ``namespace`` that this store loads as they are, through ``_add_ntriples``,
        with the same result as parsing them; None when the store has no such lane."""
        return None

    def _add_ntriples(self, lines: Iterable[str]) -> int | None:
        """Load N-Triples lines; how many were new, as :meth:`add_triples` returns it."""
        raise NotImplementedError(f"{type(self).__name__} cannot load N-Triples text")

    @abstractmethod
    def count_triples(self) -> int:
        """The number of distinct triples stored."""

    @abstractmethod
    def stats(self) -> StoreStats:
        """Triples, entities and triples per relation."""

    def relation_names(self, *, timeout: float | None = None) -> list[str]:
        """The relations the stored edges carry, sorted: the keys of :meth:`stats`'s
        ``relations``, found without counting entities or edges where the store can list them
        more cheaply. What the methods take as their relation vocabulary: on a Freebase-sized
        endpoint :meth:`stats` counts every entity of the graph. ``timeout`` (seconds; None:
        none) bounds the look-up as it does an operation."""
        return run_with_timeout(lambda: sorted(self.stats().relations), validate_timeout(timeout), self.uri)

    # ------------------------------------------------------------------ operations
    def relations(
        self,
        ids: Sequence[str | Literal],
        direction: str = "both",
        limit: int | str | None = None,
        *,
        timeout: float | None = None,
    ) -> RelationsResult:
        """Distinct relations adjacent to each anchor, with direction and edge count.

        An anchor is a node id or a :class:`Literal`. A literal has only incoming edges: its
        relations are those of the edges whose object is that literal (matched by value and
        datatype or language, in its canonical form), all ``in``; with ``direction="out"`` it
        has none. A row's ``id`` is the anchor itself (the id, or the Literal). Node ids and
        literals mixed in one call cost one query for each kind.
        """
        ids, literals = split_anchors(ids)
        direction = validate_direction(direction)
        limit = validate_limit(limit)
        budget = Budget(validate_timeout(timeout), "relations")
        fetch = _fetch(limit)
        rows: list[RelationCount] = []
        if ids:
            rows += self._call(Relations(tuple(ids), direction, limit=fetch, timeout=budget.left()))
        if literals and direction != "out":
            rows += self._call(LiteralRelations(tuple(literals), limit=fetch, timeout=budget.left()))
        rows, truncated = _cut(rows, limit, lambda r: (term_key(r.id), r.relation, r.direction))
        return RelationsResult(rows, truncated)

    def expand(
        self,
        ids: Sequence[str],
        relations: Sequence[str] | None = None,
        direction: str = "both",
        limit: int | str | None = None,
        *,
        timeout: float | None = None,
    ) -> ExpandResult:
        """One hop from each id: edges (src, relation, dst, forward)."""
        ids = validate_ids(ids)
        rels = None if relations is None else sorted(set(validate_relations(relations)))
        direction = validate_direction(direction)
        limit = validate_limit(limit)
        timeout = validate_timeout(timeout)
        if not ids or rels == []:
            return ExpandResult([])
        op = Expand(tuple(ids), None if rels is None else tuple(rels), direction, limit=_fetch(limit), timeout=timeout)
        edges = self._call(op)
        sort_edges(edges)
        edges, truncated = _first(edges, limit)
        return ExpandResult(edges, truncated)

    def follow_paths(
        self,
        seeds: Sequence[str],
        path: Sequence[str],
        direction: str = "both",
        limit: int | str | None = None,
        *,
        distinct_edges: bool = True,
        timeout: float | None = None,
    ) -> PathsResult:
        """Every walk of exactly len(path) hops from a seed whose i-th edge carries path[i].

        ``distinct_edges=False`` lets a walk use one stored edge more than once (there and
        back), as RoG's own BFS and PathQuestion's answer generation do."""
        seeds = validate_ids(seeds, "seeds")
        hops = validate_relations(path, "path")
        if not 1 <= len(hops) <= MAX_PATH_HOPS:
            raise InvalidInputError(f"path {list(path)!r} must have 1 to {MAX_PATH_HOPS} relations")
        direction = validate_direction(direction)
        distinct_edges = validate_flag(distinct_edges, "distinct_edges")
        limit = validate_limit(limit)
        timeout = validate_timeout(timeout)
        if not seeds:
            return PathsResult([])
        op = Walks(tuple(seeds), tuple(hops), direction, distinct_edges=distinct_edges, limit=_fetch(limit), timeout=timeout)
        paths = self._call(op)
        sort_paths(paths)
        paths, truncated = _first(paths, limit)
        return PathsResult(paths, truncated)

    def subgraph(
        self,
        seeds: Sequence[str],
        hops: int,
        direction: str = "both",
        relations: Sequence[str] | None = None,
        limit: int | str | None = None,
        *,
        timeout: float | None = None,
    ) -> SubgraphResult:
        """Edges met by a breadth-first expansion of ``hops`` layers (one store call per
        layer); ``timeout`` bounds them all together."""
        seeds = validate_ids(seeds, "seeds")
        hops = validate_hops(hops)
        direction = validate_direction(direction)
        rels = None if relations is None else tuple(sorted(set(validate_relations(relations))))
        limit = validate_limit(limit)
        budget = Budget(validate_timeout(timeout), "subgraph")
        depth: dict[Term, int] = {s: 0 for s in seeds}
        edges: dict[tuple[str, str, Term], None] = {}  # (subject, relation, object) of each kept edge
        truncated = False

        def layer(frontier: list[str]) -> list[Edge]:
            # A layer meets each already-kept edge at most once more (from its far end), so
            # asking for limit + 1 + len(edges) rows is enough to decide truncation exactly.
            fetch = None if limit is None else limit + 1 + len(edges)
            met = self._call(Expand(tuple(frontier), rels, direction, limit=fetch, timeout=budget.left()))
            if limit is not None and len(edges) + len(met) > limit:
                sort_edges(met)  # the limit may cut this layer: cut it the same way on every store
            return met

        if rels != ():
            for depth_of_dst, edge, first in breadth_first(seeds, hops, layer):
                key = (edge.src, edge.relation, edge.dst) if edge.forward else (edge.dst, edge.relation, edge.src)
                if key not in edges:
                    if limit is not None and len(edges) == limit:
                        truncated = True
                        break
                    edges[key] = None
                if first:
                    depth[edge.dst] = depth_of_dst
        kept = list(edges)
        try:  # subjects and relations are ids; objects compare as term_key orders them, or raise
            kept.sort()
        except TypeError:
            kept.sort(key=lambda t: (t[0], t[1], term_key(t[2])))
        ordered = build_each(Triple, *zip(*kept)) if kept else []
        # nodes by layer, then as terms order: the order rows came in varies between runs on some stores
        depth = dict(sorted(depth.items(), key=lambda item: (item[1], term_key(item[0]))))
        return SubgraphResult(ordered, depth, truncated)

    def shortest_paths(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        max_hops: int = 3,
        limit: int | str | None = None,
        *,
        exclude: Sequence[str] = SCHEMA_RELATIONS,
        timeout: float | None = None,
    ) -> PathsResult:
        """All shortest undirected paths (at most ``max_hops``) between each source and target
        that use no relation of ``exclude``: by default the schema relations
        :data:`SCHEMA_RELATIONS`; a list of your own replaces them (add ``*SCHEMA_RELATIONS`` to it
        to leave those out too), and ``()`` leaves out none.

        Carried out as iterative deepening: one batched query per depth over the pairs not yet
        connected, so the work stays inside the database; ``timeout`` bounds them all together. A call
        takes at most :data:`engine.identifiers.MAX_PAIRS` source × target pairs; split a larger
        one (each pair's paths are found apart from the others').
        """
        sources, targets = validate_endpoints(sources, targets)
        max_hops = validate_hops(max_hops, "max_hops")
        limit = validate_limit(limit)
        excluded = validate_exclude(exclude)
        budget = Budget(validate_timeout(timeout), "shortest_paths")
        pending = [(s, t) for s in sources for t in targets if s != t]
        found: list[Path] = []
        truncated = False
        for depth in range(1, max_hops + 1):
            if not pending:
                break
            fetch = None if limit is None else limit - len(found) + 1
            op = Walks((), (None,) * depth, "both", pairs=tuple(pending), exclude=excluded, limit=fetch, timeout=budget.left())
            paths = self._call(op)
            if fetch is not None and len(paths) >= fetch:
                sort_paths(paths)
                found.extend(paths[: fetch - 1])
                truncated = True
                break
            found.extend(paths)
            connected = {(p.start, p.end) for p in paths}
            pending = [pair for pair in pending if pair not in connected]
        sort_paths(found)
        return PathsResult(found, truncated)

    def two_hop_relations(
        self,
        ids: Sequence[str | Literal],
        r1: str,
        direction: str = "both",
        limit: int | str | None = None,
        *,
        timeout: float | None = None,
    ) -> TwoHopResult:
        """Relations (both directions) of the nodes reached from each anchor through r1.

        Anchors are node ids or literals, as for :meth:`relations`: from a literal, r1 is
        followed backwards to the subjects of its edges (so ``direction="out"`` reaches none).
        """
        ids, literals = split_anchors(ids)
        r1 = validate_relation(r1)
        direction = validate_direction(direction)
        limit = validate_limit(limit)
        budget = Budget(validate_timeout(timeout), "two_hop_relations")
        fetch = _fetch(limit)
        rows: list[TwoHopRelation] = []
        if ids:
            rows += self._call(TwoHopRelations(tuple(ids), r1, direction, limit=fetch, timeout=budget.left()))
        if literals and direction != "out":
            rows += self._call(LiteralTwoHopRelations(tuple(literals), r1, limit=fetch, timeout=budget.left()))
        rows, truncated = _cut(rows, limit, lambda r: (term_key(r.id), r.r1, r.relation, r.direction))
        return TwoHopResult(rows, truncated)

    def names(self, ids: Sequence[str], *, timeout: float | None = None) -> dict[str, str | None]:
        """The display name of each id: its ``type.object.name`` (English first); for a node
        without one (a CVT, or any node of a graph whose ids are names, as MetaQA's) its id;
        None for an id that is not in the store."""
        ids = validate_ids(ids)
        found: dict[str, list[Literal]] = {}
        if ids:
            for i, name in self._call(Names(tuple(ids), timeout=validate_timeout(timeout))):
                names = found.setdefault(i, [])
                if name is not None:
                    names.append(name)
        return {i: (i if (name := pick_name(found[i])) is None else name) if i in found else None for i in ids}

    def types(self, ids: Sequence[str], *, timeout: float | None = None) -> dict[str, list[str]]:
        """The classes (``type.object.type``) of each id, sorted."""
        ids = validate_ids(ids)
        found: dict[str, set[str]] = {}
        if ids:
            for i, cls in self._call(Types(tuple(ids), timeout=validate_timeout(timeout))):
                found.setdefault(i, set()).add(cls)
        return {i: sorted(found.get(i, ())) for i in ids}

    def entities(self, limit: int | str | None = None, *, timeout: float | None = None) -> EntitiesResult:
        """Every entity id, sorted: the subjects and non-literal objects of the stored edges
        (what :meth:`stats` counts). For enumerating a graph (an embedding index); a graph with
        more entities than the default bound needs ``limit=UNBOUNDED`` or a larger bound."""
        limit = validate_limit(limit)
        ids = self._call(Entities(limit=_fetch(limit), timeout=validate_timeout(timeout)))
        ids, truncated = _cut(ids, limit, lambda i: i)
        return EntitiesResult(ids, truncated)

    def search(
        self, text: str, mode: str = "exact", limit: int | str | None = 10, *, timeout: float | None = None
    ) -> SearchResult:
        """Entities by name: ``exact`` (case-sensitive equality), ``prefix`` or ``contains``
        (both case-insensitive). A node without a name is found by its id the same way (as
        :meth:`names` names it), with its id as the hit's name."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(f"search text must be a non-empty string, got {clipped(repr(text), 200)}")
        # as long as an id at most: a dialect writes the text into its query several times over
        validate_text(text, "search text", nul=False, max_length=MAX_ID_LENGTH)
        if mode not in SEARCH_MODES:
            raise InvalidInputError(f"invalid search mode {mode!r}: use one of {', '.join(SEARCH_MODES)}")
        limit = validate_limit(limit)
        hits = self._search_hits(Search(text, mode, limit=_fetch(limit), timeout=validate_timeout(timeout)))
        hits, truncated = _cut(hits, limit, lambda h: (h.id, h.name))
        return SearchResult(hits, truncated)

    def _search_hits(self, op: Search) -> list[SearchHit]:
        """The hits of a search. A dialect may answer more than matches (ids percent-encoded in
        IRIs, servers that lower-case some characters otherwise than Python): keep what
        matches; rejected rows count against the LIMIT, so ask for more until the kept hits
        reach it or the candidates run out."""
        fetch = ask = op.limit
        budget = Budget(op.timeout, "search")
        while True:
            rows = self._call(dataclasses.replace(op, limit=ask, timeout=budget.left()))
            kept = [hit for hit in rows if text_matches(hit.name, op.text, op.mode)]
            if ask is None or fetch is None or len(rows) < ask or len(kept) >= fetch:
                return kept
            ask *= 4

    def execute(self, sexpr: str | Top, timeout: float | None = None) -> ExecuteResult:
        """Execute an S-expression (text or a parsed tree) with GrailQA's semantics, as defined
        in :mod:`engine.sexpr.evaluate` and :mod:`engine.sexpr.keys`: its answer set sorted by
        :func:`term_key`, or the count of ``(COUNT …)``. Text is parsed (and so validated)
        first; a malformed one raises :class:`engine.sexpr.SExprSyntaxError`.

        ``timeout`` (seconds; None: none) bounds the query; past it the call raises
        :class:`engine.errors.QueryTimeoutError` naming the expression. Virtuoso stops the query
        itself (it is told the deadline as the endpoint's ``timeout`` parameter and checks it at
        its own pace; the call returns at the deadline), Neo4j too (the transaction timeout), and
        Oxigraph opened read only (the query runs in a process killed at the deadline,
        :mod:`engine.stores.oxigraph_processes`). Oxigraph otherwise, FalkorDB and the reference
        store cannot stop a running query: the call returns at the timeout and the query runs on
        in a background thread until it ends (:mod:`engine.timeouts`). Every other operation's
        ``timeout`` works the same way, but for Oxigraph, where it always runs in a thread.
        """
        tree = parse(validate_text(sexpr, "the S-expression")) if isinstance(sexpr, str) else sexpr
        if not isinstance(tree, Top):
            raise InvalidInputError(f"execute takes an S-expression (text or tree), got {type(sexpr).__name__}")
        if not isinstance(sexpr, str):  # a tree built in Python: its literals and ids are its text
            if depth(tree) > 2 * MAX_DEPTH:  # a form nests at most two tree levels per parenthesis
                raise InvalidInputError(
                    f"the S-expression tree nests {depth(tree)} levels deep; build it with at most {MAX_DEPTH} levels of forms"
                )
            parse(validate_text(to_text(tree), "the S-expression"))  # held to the bounds its text would be
        for position, node_id in enumerate(entities(tree)):
            validate_id(node_id, "the S-expression's entities", position)
        timeout = validate_timeout(timeout)
        try:
            result = self._call(Execute(tree, timeout=timeout))
        except QueryTimeoutError as e:
            if timeout is None:
                raise  # the store's own deadline (a server that stopped answering): its message says so
            text = to_text(tree)
            shown = text if len(text) <= 300 else text[:300] + "…"
            raise QueryTimeoutError(
                f"the S-expression {shown} ran past its timeout of {timeout:g} s on {self.uri} ({e}); "
                "give a larger timeout, or a narrower expression"
            ) from e
        if isinstance(tree, Count):
            return ExecuteResult([], int(result[0]) if result else 0)  # nothing while explaining
        return ExecuteResult(sorted(set(result), key=term_key))

    def query(
        self,
        text: str,
        params: dict[str, Any] | None = None,
        *,
        allow_service: bool = False,
        timeout: float | None = None,
        limit: int | str | None = UNBOUNDED,
    ) -> QueryResult:
        """Raw read-only query in the store's own language, with ``$name`` parameters bound from
        ``params`` (each one the text names must be given). Anything that writes is refused; on
        SPARQL stores so are server built-in functions, other graphs than the store's, and
        ``SERVICE`` unless ``allow_service`` (see :mod:`sparql.readonly`).

        ``timeout`` (seconds) bounds the call as it does :meth:`execute`'s; None leaves the
        store's own limit (a server store's ``timeout=`` option; none on the embedded store).

        ``limit`` bounds the rows as every operation's does (:func:`engine.identifiers.validate_limit`;
        by default every row): a cut answer says ``truncated``. The embedded store reads no further
        than one row past it; other stores cut the answer they receive."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError("query text must be a non-empty string")
        validate_text(text, "the query text")
        if params is not None and not isinstance(params, Mapping):
            raise InvalidInputError(f"query parameters must be a mapping of names to values, such as {{'film': 'm.0kq01'}}, "
                                    f"got {clipped(repr(params), 200)}")
        params = validate_parameters(dict(params or {}))
        allow_service = validate_flag(allow_service, "allow_service")
        bound = validate_limit(limit)
        result = self._query(text, params, allow_service, validate_timeout(timeout), bound)
        if bound is None or len(result.rows) <= bound:
            return result
        return QueryResult(result.columns, result.rows[:bound], truncated=True)

    @abstractmethod
    def _query(
        self, text: str, params: dict[str, Any], allow_service: bool, timeout: float | None, limit: int | None
    ) -> QueryResult: ...
