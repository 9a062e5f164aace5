"""What every SPARQL store shares: compiling operations and decoding their rows.

A backend supplies ``_select(text)``, returning rows as dicts from variable name to a decoded
value (an id ``str`` for an IRI, a :class:`Literal` for a literal, None when unbound), and its
own loading and raw-query paths.
"""
from __future__ import annotations

from abc import abstractmethod
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from engine.graph import FREEBASE_NS, Edge, Literal, Path, Term, Triple
from engine.results import RelationCount, SearchHit, StoreStats, TwoHopRelation
from engine.sexpr.tree import Count, Top
from engine.store import Store
from sparql.compiler import SparqlCompiler
from sparql.ntriples import CanonicalNTriples
from sparql.sexpr import sexpr_compiler
from sparql.terms import Terms

Row = dict[str, Any]


def _text(value: Any) -> str:
    return value.value if isinstance(value, Literal) else str(value)


def _int(value: Any) -> int:
    return int(_text(value))


class SparqlStore(Store):
    dialect = "sparql"
    compiler: SparqlCompiler

    def __init__(self, namespace: str = FREEBASE_NS, graph: str | None = None) -> None:
        self.terms = Terms(namespace)
        self.compiler = self.make_compiler(self.terms, graph)

    def make_compiler(self, terms: Terms, graph: str | None) -> SparqlCompiler:
        return SparqlCompiler(terms, graph)

    @abstractmethod
    def _select(self, text: str, timeout: float | None = None) -> list[Row]:
        """Run a SELECT and decode its rows; past ``timeout`` seconds (None: the store's own
        limits), raise :class:`engine.errors.QueryTimeoutError`."""

    # ------------------------------------------------------------------ loading
    # Both RDF stores load N-Triples text: triples are written as lines (``_ntriples``), and the
    # loader's fast lane hands over lines of the input file that are already in that form.
    def canonical_ntriples(self, namespace: str) -> CanonicalNTriples | None:
        if namespace != self.terms.namespace:
            return None
        return CanonicalNTriples(namespace)

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
        return _int(self._select(self.compiler.count_triples())[0]["n"])

    def stats(self) -> StoreStats:
        relations = {_text(r["p"]): _int(r["n"]) for r in self._select(self.compiler.relation_counts())}
        entities = _int(self._select(self.compiler.entity_count())[0]["n"])
        return StoreStats(sum(relations.values()), entities, dict(sorted(relations.items())))

    # ------------------------------------------------------------------ primitives
    def _relations(self, ids, direction, fetch) -> list[RelationCount]:
        rows = self._select(self.compiler.relations(ids, direction, fetch))
        return [RelationCount(r["id"], r["rel"], _text(r["dir"]), _int(r["n"])) for r in rows]

    def _expand(self, ids, relations, direction, fetch) -> list[Edge]:
        rows = self._select(self.compiler.expand(ids, relations, direction, fetch))
        return [Edge(r["src"], r["rel"], r["dst"], _text(r["dir"]) == "out") for r in rows]

    def _walks(self, seeds, path, direction, fetch, pairs, distinct_edges=True) -> list[Path]:
        rows = self._select(self.compiler.walks(seeds, path, direction, fetch, pairs, distinct_edges))
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

    def _two_hop_relations(self, ids, r1, direction, fetch) -> list[TwoHopRelation]:
        rows = self._select(self.compiler.two_hop_relations(ids, r1, direction, fetch))
        return [TwoHopRelation(r["id"], r1, r["rel"], _text(r["dir"]), _int(r["n"])) for r in rows]

    def _literal_relations(self, literals, fetch) -> list[RelationCount]:
        rows = self._select(self.compiler.literal_relations(literals, fetch))
        return [RelationCount(literals[_int(r["i"])], r["rel"], "in", _int(r["n"])) for r in rows]

    def _literal_two_hop_relations(self, literals, r1, fetch) -> list[TwoHopRelation]:
        rows = self._select(self.compiler.literal_two_hop_relations(literals, r1, fetch))
        return [TwoHopRelation(literals[_int(r["i"])], r1, r["rel"], _text(r["dir"]), _int(r["n"])) for r in rows]

    def _names(self, ids) -> dict[str, list[Literal]]:
        found: dict[str, list[Literal]] = defaultdict(list)
        for r in self._select(self.compiler.names(ids)):
            found[r["id"]].append(r["name"])
        return found

    def _types(self, ids) -> dict[str, list[str]]:
        found: dict[str, list[str]] = defaultdict(list)
        for r in self._select(self.compiler.types(ids)):
            found[r["id"]].append(r["type"])
        return found

    def _search(self, text, mode, fetch) -> list[SearchHit]:
        return [SearchHit(r["id"], r["name"].value) for r in self._select(self.compiler.search(text, mode, fetch))]

    def _execute_tree(self, tree: Top, timeout: float | None = None) -> list[Term] | int:
        rows = self._select(sexpr_compiler(self.compiler).compile(tree), timeout)
        if isinstance(tree, Count):
            return _int(rows[0]["n"])
        return [r["v0"] for r in rows]
