"""What every SPARQL store shares: compiling operations and decoding their rows.

A backend supplies ``_select(text, timeout)``, returning rows as dicts from variable name to a
decoded value (an id ``str`` for an IRI, a :class:`Literal` for a literal, None when unbound),
and its own loading and raw-query paths.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any

import pyoxigraph as ox

from engine.graph import Edge, Literal, Path, Term, Triple
from engine.limits import TermCheck, TermLimits, term_check
from engine.ops import Compiled, CountEntities, CountTriples, Op, RelationCounts
from engine.results import RelationCount, SearchHit, StoreStats, TwoHopRelation
from engine.sexpr.tree import Count
from engine.store import Store
from sparql.compiler import SparqlCompiler
from sparql.ntriples import CanonicalNTriples
from sparql.terms import Terms

Row = dict[str, Any]

_DECODED_MAX = 1_000_000  # decoded terms kept (a few hundred MB at most)


def _text(value: Any) -> str:
    return value.value if isinstance(value, Literal) else str(value)


def _int(value: Any) -> int:
    return int(_text(value))


class SparqlStore(Store):
    dialect = "sparql"
    compiler: SparqlCompiler
    #: what the server keeps exactly (:mod:`engine.limits`); None: every valid triple
    limits: TermLimits | None = None

    def __init__(self, compiler: SparqlCompiler) -> None:
        self.compiler = compiler
        self.terms: Terms = compiler.t
        self._decoded: dict[str, Any] = {}  # IRI or literal text -> id or Literal
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
            if len(self._decoded) >= _DECODED_MAX:
                self._decoded.clear()
            self._decoded[key] = decoded
        return decoded

    @abstractmethod
    def _select(self, text: str, timeout: float | None = None) -> list[Row]:
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

    def _add_triples(self, triples: Iterable[Triple]) -> None:
        self._add_ntriples(self._ntriples(triples))

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
    def _add_ntriples(self, lines: Iterable[str]) -> None:
        """Load N-Triples lines (each ending in a newline) through the store's bulk path."""

    # ------------------------------------------------------------------ statistics
    def count_triples(self) -> int:
        return self._call(CountTriples())[0]

    def stats(self) -> StoreStats:
        relations = dict(self._call(RelationCounts()))
        entities = self._call(CountEntities())[0]
        return StoreStats(sum(relations.values()), entities, dict(sorted(relations.items())))

    # ------------------------------------------------------------------ operations
    def _run(self, op: Op, compiled: Compiled | None) -> list:
        rows = self._select(self.terms.bind(compiled), op.timeout)  # type: ignore[arg-type]
        return getattr(self, "_decode_" + op.name)(op, rows)

    def _decode_relations(self, op, rows: list[Row]) -> list[RelationCount]:
        return [RelationCount(r["id"], r["rel"], _text(r["dir"]), _int(r["n"])) for r in rows]

    def _decode_expand(self, op, rows: list[Row]) -> list[Edge]:
        return [Edge(r["src"], r["rel"], r["dst"], _text(r["dir"]) == "out") for r in rows]

    def _decode_walks(self, op, rows: list[Row]) -> list[Path]:
        path = op.path
        hops = len(path)
        node_columns = [f"n{i}" for i in range(hops + 1)]
        direction_columns = [f"d{i}" for i in range(hops)]
        fixed = None if None in path else tuple(path)  # then every row has the same relations
        out = []
        for r in rows:
            rels = fixed or tuple(path[i] if path[i] is not None else r[f"r{i}"] for i in range(hops))
            forward = tuple([_text(r[c]) == "out" for c in direction_columns])
            out.append(Path(tuple([r[c] for c in node_columns]), rels, forward))  # type: ignore[arg-type]
        return out

    def _decode_two_hop_relations(self, op, rows: list[Row]) -> list[TwoHopRelation]:
        return [TwoHopRelation(r["id"], op.r1, r["rel"], _text(r["dir"]), _int(r["n"])) for r in rows]

    def _decode_literal_relations(self, op, rows: list[Row]) -> list[RelationCount]:
        return [RelationCount(op.literals[_int(r["i"])], r["rel"], "in", _int(r["n"])) for r in rows]

    def _decode_literal_two_hop_relations(self, op, rows: list[Row]) -> list[TwoHopRelation]:
        literals, r1 = op.literals, op.r1
        return [TwoHopRelation(literals[_int(r["i"])], r1, r["rel"], _text(r["dir"]), _int(r["n"])) for r in rows]

    def _decode_names(self, op, rows: list[Row]) -> list[tuple[str, Literal | None]]:
        return [(r["id"], r["name"]) for r in rows]

    def _decode_types(self, op, rows: list[Row]) -> list[tuple[str, str]]:
        return [(r["id"], r["type"]) for r in rows]

    def _decode_search(self, op, rows: list[Row]) -> list[SearchHit]:
        return [SearchHit(r["id"], r["id"] if r["name"] is None else r["name"].value) for r in rows]

    def _decode_execute(self, op, rows: list[Row]) -> list[Term] | list[int]:
        if isinstance(op.tree, Count):
            return [_int(rows[0]["n"])]
        return [r["v0"] for r in rows]

    def _decode_count_triples(self, op, rows: list[Row]) -> list[int]:
        return [_int(rows[0]["n"])]

    _decode_count_entities = _decode_count_triples

    def _decode_entities(self, op, rows: list[Row]) -> list[str]:
        return [r["e"] for r in rows]

    def _decode_relation_types(self, op, rows: list[Row]) -> list[str]:
        return [_text(r["p"]) for r in rows]

    def _decode_relation_counts(self, op, rows: list[Row]) -> list[tuple[str, int]]:
        return [(_text(r["p"]), _int(r["n"])) for r in rows]
