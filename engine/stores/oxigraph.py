"""The embedded store: Oxigraph through pyoxigraph, on disk or in memory."""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import pyoxigraph as ox

from engine.errors import InvalidInputError, KGQAError, StoreError, StoreUnavailableError
from engine.model import Literal, QueryResult, Term, Triple
from engine.open import FREEBASE_NS
from engine.stores.sparql_store import Row, SparqlStore
from sparql.readonly import bind_parameters, ensure_read_only


class OxigraphStore(SparqlStore):
    """Oxigraph, embedded: ``OxigraphStore(path)`` on disk, ``OxigraphStore(None)`` in memory."""

    def __init__(self, path: str | None, namespace: str = FREEBASE_NS) -> None:
        super().__init__(namespace)
        self.path = path
        self.uri = f"oxigraph:{path}" if path else "memory:"
        try:
            if path is None:
                self.db = ox.Store()
            else:
                os.makedirs(path, exist_ok=True)
                self.db = ox.Store(path)
        except OSError as e:
            raise StoreUnavailableError(
                f"cannot open the Oxigraph store at {path!r}: {e}. Is another process using it? "
                "Close it, or give another directory."
            ) from e
        self._node_cache: dict[str, ox.NamedNode] = {}

    def close(self) -> None:
        if self.path is not None and hasattr(self, "db"):
            self.db.flush()
        self.__dict__.pop("db", None)

    # ------------------------------------------------------------------ terms
    def _node(self, local: str) -> ox.NamedNode:
        node = self._node_cache.get(local)
        if node is None:
            node = ox.NamedNode(self.terms.iri_of(local))
            if len(self._node_cache) < 100_000:  # relation names and hubs repeat; ids mostly do not
                self._node_cache[local] = node
        return node

    def _to_ox(self, term: Term) -> ox.NamedNode | ox.Literal:
        if isinstance(term, Literal):
            if term.lang:
                return ox.Literal(term.value, language=term.lang)
            if term.datatype:
                return ox.Literal(term.value, datatype=ox.NamedNode(term.datatype))
            return ox.Literal(term.value)
        return self._node(term)

    def _from_ox(self, term: Any) -> Any:
        if isinstance(term, ox.NamedNode):
            return self.terms.id_of(term.value)
        if isinstance(term, ox.Literal):
            return Literal.make(term.value, term.datatype.value, term.language)
        if isinstance(term, ox.BlankNode):
            return "_:" + term.value
        return term

    # ------------------------------------------------------------------ writing
    def _add_triples(self, triples: Iterable[Triple]) -> None:
        def quads() -> Iterator[ox.Quad]:
            for t in triples:
                yield ox.Quad(self._node(t.subject), self._node(t.relation), self._to_ox(t.object), ox.DefaultGraph())

        try:
            # The bulk loader: no transaction, writes straight into the store's storage.
            self.db.bulk_extend(quads())
        except KGQAError:
            raise
        except (OSError, ValueError) as e:
            raise StoreError(f"bulk load into {self.uri} failed: {e}") from e

    def count_triples(self) -> int:
        return len(self.db)

    # ------------------------------------------------------------------ reading
    def _select(self, text: str) -> list[Row]:
        try:
            solutions = self.db.query(text, use_default_graph_as_union=False)
        except SyntaxError as e:  # a compiler bug, never user input
            raise StoreError(f"Oxigraph rejected a generated query: {e}\n{text}") from e
        names = [v.value for v in solutions.variables]
        return [{n: self._from_ox(s[n]) for n in names} for s in solutions]

    def _query(self, text: str, params: dict[str, Any]) -> QueryResult:
        ensure_read_only(text)
        text = bind_parameters(text, params, self._param)
        try:
            result = self.db.query(text)
        except SyntaxError as e:
            raise InvalidInputError(f"invalid SPARQL query: {e}") from e
        except OSError as e:
            raise StoreError(f"query failed on {self.uri}: {e}") from e
        if isinstance(result, ox.QueryBoolean):
            return QueryResult(["result"], [[bool(result)]])
        if isinstance(result, ox.QuerySolutions):
            names = [v.value for v in result.variables]
            return QueryResult(names, [[self._from_ox(s[n]) for n in names] for s in result])
        return QueryResult(
            ["subject", "predicate", "object"],
            [[self._from_ox(t.subject), self._from_ox(t.predicate), self._from_ox(t.object)] for t in result],
        )

    def _param(self, name: str, value: Any) -> str:
        return self.terms.parameter(name, value)
