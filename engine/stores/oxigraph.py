"""The embedded store: Oxigraph through pyoxigraph, on disk or in memory."""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pyoxigraph as ox

from engine.errors import InvalidInputError, StoreError, StoreUnavailableError
from engine.graph import FREEBASE_NS
from engine.results import QueryResult
from engine.stores.sparql_store import Columns, SparqlStore
from engine.timeouts import run_with_timeout
from sparql.compiler import SparqlCompiler
from sparql.readonly import prepare_query


def is_oxigraph_store(path: str) -> bool:
    """Whether ``path`` holds an Oxigraph (RocksDB) database."""
    return os.path.isfile(os.path.join(path, "CURRENT"))


class OxigraphStore(SparqlStore):
    """Oxigraph, embedded: ``OxigraphStore(path)`` on disk, ``OxigraphStore(None)`` in memory.

    ``create=False`` opens only a store that exists (reading a misspelled path must not answer
    from a new, empty store); ``created`` says whether this call made a new one.
    """

    def __init__(self, path: str | None, namespace: str = FREEBASE_NS, *, create: bool = True) -> None:
        super().__init__(SparqlCompiler(namespace))
        self.path = path
        self.uri = f"oxigraph:{path}" if path else "memory:"
        self.created = path is None or not is_oxigraph_store(path)
        if path is not None and self.created and not create:
            what = "is not an Oxigraph store" if os.path.exists(path) else "does not exist"
            raise StoreUnavailableError(
                f"no store at {os.path.abspath(path)}: that path {what}. Give the store's path (--store PATH, "
                f"or $KGQA_STORE), or load data into a new one: kgqa load FILE --store {path}"
            )
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

    def close(self) -> None:
        if self.path is not None and hasattr(self, "db"):
            self.db.flush()
        self.__dict__.pop("db", None)

    # ------------------------------------------------------------------ writing
    def _add_ntriples(self, lines: Iterable[str]) -> None:
        try:
            data = "".join(lines).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInputError(f"a triple to load is not valid Unicode ({e.reason}): {e.object[max(0, e.start - 80):e.end + 80]!r}") from e
        try:
            # The bulk loader: no transaction, parses and writes in Rust without holding the GIL.
            self.db.bulk_load(input=data, format=ox.RdfFormat.N_TRIPLES)
        except (OSError, SyntaxError, ValueError) as e:
            raise StoreError(f"bulk load into {self.uri} failed: {e}") from e

    def count_triples(self) -> int:
        return len(self.db)

    # ------------------------------------------------------------------ reading
    def _select(self, text: str, timeout: float | None = None) -> Columns:
        # pyoxigraph cannot cancel a query: past the timeout it is abandoned (engine.timeouts)
        return run_with_timeout(lambda: self._solutions(text), timeout, "Oxigraph")

    def _solutions(self, text: str) -> Columns:
        # The answer comes out as TSV, written in Rust: reading it is a fraction of the cost of
        # walking pyoxigraph's solution objects in Python (sparql/tsv.py).
        try:
            solutions = self.db.query(text, use_default_graph_as_union=False)
            data = solutions.serialize(format=ox.QueryResultsFormat.TSV)
        except SyntaxError as e:  # a compiler bug, never user input
            raise StoreError(f"Oxigraph rejected a generated query: {e}\n{text}") from e
        return self._read_tsv(data.decode("utf-8"))

    def _query(self, text: str, params: dict[str, Any], allow_service: bool) -> QueryResult:
        text = prepare_query(text, params, self.terms.parameter, allow_service=allow_service)
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
