"""What every SPARQL store shares: compiling operations and decoding their rows.

A backend supplies ``_select(text, timeout)``, returning :class:`Columns`: per variable, the
list of its decoded values, one per row (an id ``str`` for an IRI, a :class:`Literal` for a
literal, None when unbound), and its own loading and raw-query paths. Columns, not rows: a
decoder zips the columns it needs, which builds no per-row lookup.
"""
from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator
from itertools import repeat
from typing import Any, NamedTuple

import pyoxigraph as ox

from engine.graph import Edge, Literal, Path, Term, Triple, build_each
from engine.identifiers import validate_timeout
from engine.limits import TermCheck, TermLimits, term_check
from engine.ops import (
    Compiled,
    CountEntities,
    CountTriples,
    Op,
    RelationCounts,
    RelationTypes,
)
from engine.results import RelationCount, SearchHit, StoreStats, TwoHopRelation
from engine.sexpr.tree import Count
from engine.store import Store
from engine.timeouts import Budget
from sparql.compiler import SparqlCompiler
from sparql.ntriples import CanonicalNTriples
from sparql.terms import Terms
from sparql.tsv import parse_term, read_tsv

DECODED_MAX = 1_000_000  # decoded terms kept (a few hundred MB at most)
#: the field holding the ids (or literals) of each operation whose every row belongs to one of them
_LISTED = {
    "relations": "ids",
    "expand": "ids",
    "walks": "seeds",
    "two_hop_relations": "ids",
    "names": "ids",
    "types": "ids",
    "literal_relations": "literals",
    "literal_two_hop_relations": "literals",
}
#: literal anchors per query, on every SPARQL store: each is a UNION branch, whose cost grows
#: faster than their number (Oxigraph, MetaQA's years as anchors of ``relations``: 300 / 1,000
#: / 3,000 in one query 0.07 / 0.89 / 9.7 s; Virtuoso fails from 300 on, out of memory)
LITERALS_PER_QUERY = 100


def _listed(op: Op) -> tuple[str, tuple]:
    """The field of an operation whose every row belongs to one of its items (ids, seeds,
    pairs or literals), and those items; ("", ()) for any other operation."""
    if op.name == "walks" and op.pairs is not None:  # type: ignore[attr-defined]
        return "pairs", op.pairs  # type: ignore[attr-defined]
    field = _LISTED.get(op.name)
    return ("", ()) if field is None else (field, getattr(op, field))


def _text(value: Any) -> str:
    return value.value if isinstance(value, Literal) else str(value)


def _int(value: Any) -> int:
    return int(_text(value))


class Columns(NamedTuple):
    """A SELECT's answer: its variable names, and per name the column of its decoded values."""

    names: list[str]
    columns: list[list[Any]]

    def __call__(self, *names: str) -> list[list[Any]]:
        """The columns of ``names``, in that order."""
        return [self.columns[self.names.index(name)] for name in names]

    def first(self, name: str) -> Any:
        """The value of ``name`` in the first row."""
        return self.columns[self.names.index(name)][0]


class SparqlStore(Store):
    dialect = "sparql"
    compiler: SparqlCompiler
    #: what the server keeps exactly (:mod:`engine.limits`); None: every valid triple
    limits: TermLimits | None = None
    #: ids (or pairs) one query may hold; an operation over more runs as several (None: any)
    ids_per_query: int | None = None

    def __init__(self, compiler: SparqlCompiler) -> None:
        self.compiler = compiler
        self.terms: Terms = compiler.t
        # IRI, literal text, TSV value or JSON literal fields -> id, Literal, blank node label
        # or None (unbound)
        self._decoded: dict[Any, Any] = {}
        self._term_check: TermCheck | None = None

    def _from_ox(self, term: Any) -> Any:
        """A pyoxigraph term in the engine's terms: an IRI as its id, a Literal, ``_:`` + a
        blank node's label. Results repeat the same hubs, relations and literals row after
        row, so each is decoded once (a bounded cache)."""
        kind = term.__class__
        if kind is ox.NamedNode:
            key = term.value
        elif kind is ox.Literal:
            key = str(term)  # its N-Triples text: value, datatype and language in one key
        elif kind is ox.BlankNode:
            return "_:" + term.value
        else:
            return term
        decoded = self._decoded.get(key)
        if decoded is None:
            if kind is ox.NamedNode:
                decoded = self.terms.id_of(key)
            else:
                decoded = Literal(term.value, term.datatype.value, term.language)
            if len(self._decoded) >= DECODED_MAX:
                self._decoded.clear()
            self._decoded[key] = decoded
        return decoded

    def _read_tsv(self, data: str) -> Columns:
        """A SELECT's answer in the TSV results format (:mod:`sparql.tsv`), each distinct value
        decoded once (the cache :meth:`_from_ox` keeps too)."""
        if len(self._decoded) >= DECODED_MAX:
            self._decoded.clear()
        return Columns(*read_tsv(data, self._decoded, self._term_of_tsv))

    def _term_of_tsv(self, token: str) -> Any:
        return parse_term(token, self.terms.id_of)

    @abstractmethod
    def _select(self, text: str, timeout: float | None = None) -> Columns:
        """Run a SELECT (its parameters bound) and decode its rows; past ``timeout`` seconds
        (None: the store's own limits), raise :class:`engine.errors.QueryTimeoutError`."""

    # ------------------------------------------------------------------ loading
    # Both RDF stores load N-Triples text: triples are written as lines (``_ntriples``), and the
    # loader's fast lane hands over lines of the input file that are already in that form.
    def canonical_ntriples(self, namespace: str) -> CanonicalNTriples | None:
        if namespace != self.terms.namespace:
            return None
        # A lane line is ASCII but for its literal, so a line within the IRI limit holds only
        # terms within every limit; longer lines take the full parse and the term check.
        return CanonicalNTriples(namespace, max_chars=None if self.limits is None else self.limits.id_bytes)

    def term_check(self) -> TermCheck | None:
        if self.limits is not None and self._term_check is None:
            self._term_check = term_check(self.limits, self.terms.iri_of, self.terms.literal)
        return self._term_check

    def _add_triples(self, triples: Iterable[Triple]) -> int | None:
        return self._add_ntriples(self._ntriples(triples))

    def _ntriples(self, triples: Iterable[Triple]) -> Iterator[str]:
        """One line (with its newline) per triple, in the text this store loads."""
        relations: dict[str, str] = {}
        iri, object_text = self.terms.iri, self._object_text
        for t in triples:
            rel = relations.get(t.relation)
            if rel is None:
                rel = relations[t.relation] = iri(t.relation)
            yield f"{iri(t.subject)} {rel} {object_text(t.object)} .\n"

    def _object_text(self, obj: Term) -> str:
        return self.terms.term(obj)

    @abstractmethod
    def _add_ntriples(self, lines: Iterable[str]) -> int | None:
        """Load N-Triples lines (each ending in a newline) through the store's bulk path; how
        many were new, where the store can count that alone (:meth:`Store.add_triples`)."""

    # ------------------------------------------------------------------ statistics
    def count_triples(self) -> int:
        return self._call(CountTriples())[0]

    def stats(self) -> StoreStats:
        relations = dict(self._call(RelationCounts()))
        entities = self._call(CountEntities())[0]
        return StoreStats(sum(relations.values()), entities, dict(sorted(relations.items())))

    def relation_names(self, *, timeout: float | None = None) -> list[str]:
        return sorted(set(self._call(RelationTypes(timeout=validate_timeout(timeout)))))

    # ------------------------------------------------------------------ operations
    def _run(self, op: Op, compiled: Compiled | None) -> list:
        decode = getattr(self, "_decode_" + op.name)
        field, listed = _listed(op)
        most = LITERALS_PER_QUERY if field == "literals" else self.ids_per_query
        if most is None or len(listed) <= most:
            return decode(op, self._execute(op, compiled))  # type: ignore[arg-type]
        return self._run_in_parts(op, field, listed, most, decode)

    def _run_in_parts(
        self, op: Op, field: str, listed: tuple, step: int, decode: Callable[[Op, Columns], list]
    ) -> list:
        """An operation over more ids (pairs, literals) than one query may hold, as one query
        per ``step`` of them: each row belongs to one of them (they are distinct), so the rows
        are the parts' rows together; the limit and the timeout hold for the whole."""
        budget = Budget(op.timeout, f"{op.name} over {len(listed)} {field}")
        rows: list = []
        for start in range(0, len(listed), step):
            left = None if op.limit is None else op.limit - len(rows)
            part = dataclasses.replace(op, **{field: listed[start:start + step]}, limit=left, timeout=budget.left())
            rows += decode(part, self._execute(part, self.compiler.compile(part)))
            if op.limit is not None and len(rows) >= op.limit:
                break
        return rows

    def _execute(self, op: Op, compiled: Compiled) -> Columns:
        """Run an operation's compiled query within its timeout, the parameters written into
        its text (a backend whose server takes parameters of its own may send some as those
        instead)."""
        return self._select(self.terms.bind(compiled), op.timeout)

    def _decode_relations(self, op, result: Columns) -> list[RelationCount]:
        ids, rels, dirs, counts = result("id", "rel", "dir", "n")
        return [RelationCount(i, r, _text(d), _int(n)) for i, r, d, n in zip(ids, rels, dirs, counts)]

    def _decode_expand(self, op, result: Columns) -> list[Edge]:
        srcs, rels, dsts, dirs = result("src", "rel", "dst", "dir")
        # the direction column holds the literals "out" and "in" (as in _decode_walks)
        return build_each(Edge, srcs, rels, dsts, [d.value == "out" for d in dirs])

    def _decode_walks(self, op, result: Columns) -> list[Path]:
        path = op.path
        hops = len(path)
        nodes = zip(*result(*[f"n{i}" for i in range(hops + 1)]))
        # the direction columns hold the literals "out" and "in" (never a Literal's slow hash)
        forwards = zip(*[[d.value == "out" for d in column] for column in result(*[f"d{i}" for i in range(hops)])])
        if None not in path:
            return build_each(Path, nodes, repeat(path), forwards)
        free = [i for i in range(hops) if path[i] is None]
        relations = zip(*result(*[f"r{i}" for i in free]))
        out = []
        for n, f, found in zip(nodes, forwards, relations):
            rels = list(path)
            for i, r in zip(free, found):
                rels[i] = r
            out.append(Path(n, tuple(rels), f))
        return out

    def _decode_two_hop_relations(self, op, result: Columns) -> list[TwoHopRelation]:
        r1 = op.r1
        ids, rels, dirs, counts = result("id", "rel", "dir", "n")
        return [TwoHopRelation(i, r1, r, _text(d), _int(n)) for i, r, d, n in zip(ids, rels, dirs, counts)]

    def _decode_literal_relations(self, op, result: Columns) -> list[RelationCount]:
        literals = op.literals
        indexes, rels, counts = result("i", "rel", "n")
        return [RelationCount(literals[_int(i)], r, "in", _int(n)) for i, r, n in zip(indexes, rels, counts)]

    def _decode_literal_two_hop_relations(self, op, result: Columns) -> list[TwoHopRelation]:
        literals, r1 = op.literals, op.r1
        indexes, rels, dirs, counts = result("i", "rel", "dir", "n")
        return [
            TwoHopRelation(literals[_int(i)], r1, r, _text(d), _int(n)) for i, r, d, n in zip(indexes, rels, dirs, counts)
        ]

    def _decode_names(self, op, result: Columns) -> list[tuple[str, Literal | None]]:
        return list(zip(*result("id", "name")))

    def _decode_types(self, op, result: Columns) -> list[tuple[str, str]]:
        return list(zip(*result("id", "type")))

    def _decode_search(self, op, result: Columns) -> list[SearchHit]:
        return [SearchHit(i, i if name is None else name.value) for i, name in zip(*result("id", "name"))]

    def _decode_execute(self, op, result: Columns) -> list[Term] | list[int]:
        if isinstance(op.tree, Count):
            return [_int(result.first("n"))]
        return list(result("v0")[0])

    def _decode_count_triples(self, op, result: Columns) -> list[int]:
        return [_int(result.first("n"))]

    _decode_count_entities = _decode_count_triples

    def _decode_entities(self, op, result: Columns) -> list[str]:
        return list(result("e")[0])

    def _decode_relation_types(self, op, result: Columns) -> list[str]:
        return [_text(p) for p in result("p")[0]]

    def _decode_relation_counts(self, op, result: Columns) -> list[tuple[str, int]]:
        return [(_text(p), _int(n)) for p, n in zip(*result("p", "n"))]
