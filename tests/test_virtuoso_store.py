"""The Virtuoso / SPARQL-endpoint store: what the differential tests cannot see.

Bulk loading through isql, errors (load, unreachable, retries), the read-only guard, graph
isolation, literal round trips against the embedded store, and the Virtuoso dialect's text.
The shared behaviour of every store is in test_contract.py.
Tests that need the server share the session's Virtuoso (started by ``make_store``); the HTTP
behaviour tests run against a tiny local fake endpoint.
"""
from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs

import pytest

from engine.errors import (
    InvalidIdentifierError,
    InvalidInputError,
    QueryRefusedError,
    QueryTimeoutError,
    StoreError,
    StoreUnavailableError,
)
from engine.graph import NAME_RELATION, XSD, Literal, Triple
from engine.identifiers import DIRECTIONS
from engine.open import open_store
from engine.ops import CountTriples, Execute, Expand, Names, Relations, TwoHopRelations, Types, Walks
from engine.reference import ReferenceStore
from engine.results import LoadReport
from engine.sexpr import parse
from engine.servers.base import free_port
from engine import timeouts
from engine.stores import sparql_store
from engine.stores.oxigraph import OxigraphStore
from engine.stores.sparql_endpoint import DEFAULT_GRAPH, SparqlEndpointStore
from loaders.load import load_files
from sparql import turtle_results
from sparql.compiler import SparqlCompiler
from sparql.virtuoso import (
    IDS_AS_PARAMETERS,
    WALK_SEEDS_WITH_RELATION_PARAMETERS,
    VirtuosoCompiler,
    bind_with_parameters,
)
from tests.random_graphs import RELATIONS, node_ids, random_graph


@pytest.fixture
def server(make_store, servers):
    """The session's Virtuoso server (started on first use; skipped, or failed under CI, if it cannot)."""
    make_store("virtuoso")
    return servers["virtuoso"]


_counter = iter(range(10**9))


def _store(server, **options) -> SparqlEndpointStore:
    return server.new_store(f"vt{os.getpid()}_{next(_counter)}", **options)


# ----------------------------------------------------------------------------- loading
def test_bulk_load_matches_the_reference_and_reloading_changes_nothing(server):
    triples = random_graph(11, edges=80)
    store = _store(server)
    store.add_triples(triples)
    reference = ReferenceStore(triples)
    assert store.count_triples() == len(set(triples))
    assert store.stats() == reference.stats()
    store.add_triples(triples)
    store.add_triples(triples[:5])
    assert store.stats() == reference.stats()
    # the staging directory is left empty
    assert [p for p in os.listdir(server.staging) if p.startswith("kgqa-load-")] == []


def test_many_chunks_and_parallel_loaders_load_the_same_graph(server):
    triples = random_graph(12, edges=80)
    store = _store(server, chunk_size=7, loaders=2)
    store.add_triples(iter(triples))  # any iterable, read once
    assert store.stats() == ReferenceStore(triples).stats()


def test_concurrent_loads_into_one_graph_each_report_what_they_added(server, tmp_path):
    """Two loads at once into one graph, each through a store of its own (as two processes
    would), with triples in common and triples of their own: each reports the triples it
    added, none counts the other's, and the store holds both."""
    first = [Triple(f"m.a{i}", "r", f"m.x{i}") for i in range(3000)]
    second = first[1000:2000] + [Triple(f"m.b{i}", "r", f"m.y{i}") for i in range(4000)]
    union = set(first) | set(second)
    name = f"vt{os.getpid()}_{next(_counter)}"
    inputs = []
    for i, triples in enumerate((first, second)):
        inputs.append(tmp_path / f"in{i}.txt")
        inputs[-1].write_text("".join(f"{t.subject}|{t.relation}|{t.object}\n" for t in triples))

    def load(i: int) -> LoadReport:  # batches small enough that the two loads interleave
        store = server.new_store(name)
        return load_files(store, [inputs[i]], "metaqa", batch_size=700, progress=False, rejects_path=tmp_path / f"rej{i}")

    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(load, range(2)))
    assert [r.read for r in reports] == [len(first), len(second)]
    assert all(r.loaded <= r.read and r.duplicates == r.read - r.loaded for r in reports)
    assert sum(r.loaded for r in reports) == len(union)
    store = server.new_store(name)
    assert store.count_triples() == len(union)
    rows = store.query("SELECT ?s ?p ?o WHERE { ?s ?p ?o }").rows
    assert {Triple(*row) for row in rows} == union
    # a load on its own says what it added too
    assert store.add_triples(first[:10] + [Triple("m.new", "r", "m.x0")]) == 1


def test_nothing_to_load_is_a_no_op(server):
    store = _store(server)
    store.add_triples([])
    assert store.count_triples() == 0


def test_a_bad_triple_stops_the_load_before_anything_is_loaded(server):
    store = _store(server)
    with pytest.raises(InvalidIdentifierError):
        store.add_triples([Triple("a", "r", "b"), Triple("a", "bad relation", "c")])
    with pytest.raises(InvalidInputError, match="not valid Unicode"):
        store.add_triples([Triple("a", "r", "b"), Triple("a", "r", Literal.make("lone \ud800 surrogate"))])
    assert store.count_triples() == 0


def test_a_load_error_reported_by_virtuoso_is_a_store_error(server, monkeypatch):
    store = _store(server)
    monkeypatch.setattr(store, "_ntriples", lambda triples: iter(["this is not turtle .\n"]))
    with pytest.raises(StoreError, match="bulk loader failed.*syntax error"):
        store.add_triples([Triple("a", "r", "b")])
    assert [p for p in os.listdir(server.staging) if p.startswith("kgqa-load-")] == []


def test_a_staging_directory_with_quotes_backslashes_and_isql_macros_in_its_name_loads(server):
    """The staging path reaches isql as an SQL string: a backslash (an escape to Virtuoso) or an
    isql macro (``$ARGV[0]``, ``$U{x}``) in it must neither end the string nor rename the folder,
    which loaded nothing and said so as 0 new triples."""
    staging = server.staging / "it's a \\' dir; $ARGV[0] $U{x}\n-- line"
    staging.mkdir()
    store = _store(server, staging_dir=str(staging))
    assert store.add_triples([Triple("m.a", "r.x", "m.b"), Triple("m.b", "r.x", "m.c")]) == 2
    assert store.count_triples() == 2
    assert [p for p in os.listdir(staging) if p.startswith("kgqa-load-")] == []


def test_loading_without_a_staging_directory_says_what_to_give(server):
    store = _store(server, staging_dir=None)
    with pytest.raises(InvalidInputError, match="staging_dir=.*DirsAllowed"):
        store.add_triples([Triple("a", "r", "b")])


def test_wrong_isql_credentials_or_port_are_unavailable_errors(server):
    with pytest.raises(StoreUnavailableError, match="SQL port"):
        _store(server, password="wrong").add_triples([Triple("a", "r", "b")])
    with pytest.raises(StoreUnavailableError, match="SQL port"):
        _store(server, isql=f"127.0.0.1:{free_port()}").add_triples([Triple("a", "r", "b")])


def test_missing_isql_binary_names_the_fix(server):
    with pytest.raises(StoreUnavailableError, match="not found.*loader='update'"):
        _store(server, isql_command="no-such-isql-binary").add_triples([Triple("a", "r", "b")])


def test_insert_data_loader_through_the_authenticated_endpoint(server):
    triples = random_graph(13)
    store = _store(server, loader="update", batch_size=9)
    store.add_triples(triples)
    store.add_triples(triples)
    assert store.stats() == ReferenceStore(triples).stats()
    with pytest.raises(StoreError, match="refused INSERT DATA"):
        _store(server, loader="update", password="wrong").add_triples(triples[:1])


# ----------------------------------------------------------------------------- literals
ROUND_TRIP = [
    Literal.make("chat", lang="fr"),
    Literal.make("Grüße, Évian 😀", lang="de-AT"),
    Literal.make("plain"),
    Literal.make(""),
    Literal.make('quote " backslash \\ tab \t newline \n'),
    Literal.make("x" * 5000),
    Literal.make("42", XSD + "integer"),
    Literal.make("-7", XSD + "integer"),
    Literal.make("2147483648", XSD + "integer"),  # beyond 32 bits
    Literal.make("-9007199254740993", XSD + "integer"),
    Literal.make("2.5", XSD + "float"),
    Literal.make("1.1", XSD + "float"),
    Literal.make("123456.7", XSD + "float"),
    Literal.make("0.1", XSD + "double"),
    Literal.make("1.2345678901234567", XSD + "double"),
    Literal.make("1e20", XSD + "double"),
    Literal.make("2.50", XSD + "decimal"),
    Literal.make("2001-05-04", XSD + "date"),
    Literal.make("2001-05-04Z", XSD + "date"),
    Literal.make("-0500-01-01", XSD + "date"),
    Literal.make("1990", XSD + "gYear"),
    Literal.make("-0044", XSD + "gYear"),
    Literal.make("1990-04", XSD + "gYearMonth"),
    Literal.make("2020-05-17T10:20:30", XSD + "dateTime"),
    Literal.make("2020-05-17T10:20:30Z", XSD + "dateTime"),
    Literal.make("2020-05-17T10:20:30.25-05:00", XSD + "dateTime"),
    Literal.make("2020-05-17T10:20:30.250+00:00", XSD + "dateTime"),
    Literal.make("1999+00:00", XSD + "gYear"),
    Literal.make("true", XSD + "boolean"),
    Literal.make("0", XSD + "boolean"),
    Literal.make("custom", "http://example.org/datatype"),
]


@pytest.mark.parametrize("loader", ["isql", "update"])
def test_literals_round_trip_exactly_as_on_the_embedded_store(server, loader, monkeypatch):
    # Virtuoso's Turtle answers are read line by line, never by the full parser's fallback
    monkeypatch.setattr(turtle_results, "_read_graph", lambda data: pytest.fail(f"unknown layout: {data[:500]}"))
    triples = [Triple(f"s{i}", "p", lit) for i, lit in enumerate(ROUND_TRIP)]
    store = _store(server, loader=loader)
    store.add_triples(triples)
    embedded = OxigraphStore(None)
    embedded.add_triples(triples)
    for i, lit in enumerate(ROUND_TRIP):
        got = store.expand([f"s{i}"]).edges
        assert got == embedded.expand([f"s{i}"]).edges
        assert [e.dst for e in got] == [lit]
        assert store.follow_paths([f"s{i}"], ["p"], "out").paths[0].end == lit
    # raw queries too, but for doubles and floats: query() shows Virtuoso's six digits
    inexact = {XSD + "float", XSD + "double"}
    rows = [r for r in store.query("SELECT ?s ?o WHERE { ?s ?p ?o }").rows if r[1].datatype not in inexact]
    expected = [[t.subject, t.object] for t in triples if t.object.datatype not in inexact]
    assert sorted(rows, key=repr) == sorted(expected, key=repr)


# ----------------------------------------------------------------------------- reading
def test_two_stores_on_one_server_do_not_see_each_other(server):
    first, second = _store(server), _store(server)
    first.add_triples([Triple("a", "r", "b")])
    second.add_triples([Triple("a", "r", "c"), Triple("a", "s", "d")])
    assert first.count_triples() == 1 and second.count_triples() == 2
    assert [e.dst for e in first.expand(["a"]).edges] == ["b"]
    assert first.query("SELECT ?o WHERE { ?s ?p ?o }").rows == [["b"]]  # raw queries too
    assert first.query("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }").rows[0][0].value == "1"
    assert first.query("ASK { ?s ?p <http://rdf.freebase.com/ns/c> }").rows == [[False]]


def test_graph_from_the_uri_and_open_store(server):
    graph = f"http://kgqa-engine/test/uri{os.getpid()}"
    loader = _store(server, graph=graph)
    loader.add_triples([Triple("a", "r", "b")])
    reader = open_store(f"{server.endpoint}?graph={graph}")
    assert isinstance(reader, SparqlEndpointStore)
    assert (reader.graph, reader.endpoint) == (graph, server.endpoint)
    assert reader.count_triples() == 1
    assert SparqlEndpointStore(server.endpoint).graph == DEFAULT_GRAPH


@pytest.mark.parametrize(
    "text",
    [
        "INSERT DATA { <http://x/a> <http://x/b> <http://x/c> }",
        "DELETE WHERE { ?s ?p ?o }",
        "DROP GRAPH <http://kgqa-engine/graph/default>",
        "CLEAR ALL",
        "LOAD <http://example.org/x.nt>",
        "SELECT * WHERE { ?s ?p ?o FILTER(bif:exec('checkpoint')) }",
        "SELECT (sql:RDF_QUAD_URI('g', 's', 'p', 'o') AS ?x) WHERE { }",
        "WITH <http://x/g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
    ],
)
def test_query_refuses_writes_and_sql_calls(server, text):
    store = _store(server)
    store.add_triples([Triple("a", "r", "b")])
    with pytest.raises(QueryRefusedError):  # ReadOnlyViolationError for the writes
        store.query(text)
    assert store.count_triples() == 1


def test_query_binds_hostile_parameters_literally(server):
    hostile = '" } ; DROP ALL ; SELECT * { "'
    store = _store(server)
    store.add_triples([Triple("a", "r", Literal.make(hostile)), Triple("a> <x", "r", "b")])
    rows = store.query("SELECT ?s WHERE { ?s ?p $v }", {"v": Literal.make(hostile)}).rows
    assert rows == [["a"]]
    assert store.query("SELECT ?o WHERE { $s ?p ?o }", {"s": "a> <x"}).rows == [["b"]]
    assert store.query("SELECT ?o WHERE { $s ?p ?o }", {"s": "a"}).rows == [[Literal.make(hostile)]]
    assert store.count_triples() == 2


def test_query_forms(server):
    store = _store(server)
    store.add_triples([Triple("a", "r", "b"), Triple("a", "r", Literal.make("0.1", XSD + "double"))])
    construct = store.query("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }")
    assert construct.columns == ["subject", "predicate", "object"]
    assert sorted(construct.rows, key=repr) == sorted(
        [["a", "r", "b"], ["a", "r", Literal.make("0.1", XSD + "double")]], key=repr
    )
    assert store.query("ASK { $s ?p ?o }", {"s": "a"}).rows == [[True]]
    described = store.query("DESCRIBE <http://rdf.freebase.com/ns/a>")
    assert ["a", "r", "b"] in described.rows
    with pytest.raises(InvalidInputError, match="invalid SPARQL query"):
        store.query("SELECT ?s WHERE { ?s ?p }")


def test_the_generic_flavour_reads_any_endpoint(server):
    store = _store(server, flavour="generic")
    store.add_triples([Triple("a", "r", "b"), Triple("b", "r", "c")])
    assert isinstance(store.compiler, SparqlCompiler) and not isinstance(store.compiler, VirtuosoCompiler)
    assert store.follow_paths(["a"], ["r", "r"], "out").paths[0].nodes == ("a", "b", "c")
    construct = store.query("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }")  # N-Triples, parsed locally
    assert sorted(construct.rows) == [["a", "r", "b"], ["b", "r", "c"]]


class _FakeEndpoint:
    """Answers each POST with the next scripted (status, headers, body); records the requests
    and the client port each came from. ``protocol`` HTTP/1.1 keeps connections open;
    ``hang_up`` then closes each one after its answer without saying so, as a server does
    with an idle connection; ``pause`` seconds pass before each answer, as on a busy server."""

    def __init__(
        self, script: list[tuple[int, dict[str, str], str]], protocol: str = "HTTP/1.0", hang_up: bool = False, pause: float = 0.0
    ) -> None:
        self.script = list(script)
        self.requests: list[str] = []
        self.ports: list[int] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = protocol

            def do_POST(self) -> None:
                owner.requests.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
                owner.ports.append(self.client_address[1])
                status, headers, body = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                time.sleep(pause)
                data = body.encode()
                self.send_response(status)
                for key, value in {"Content-Type": "application/sparql-results+json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if hang_up:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.httpd.server_address[1]}/sparql"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# a count as Virtuoso answers it: compiled queries ask for the Turtle result set (its layout)
_COUNT = """@prefix res: <http://www.w3.org/2005/sparql-results#> .
@prefix rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#> .
_:_ a res:ResultSet .
_:_ res:resultVariable "n" .
_:_ res:solution [
      res:binding [ res:variable "n" ; res:value 3 ] ] .
"""


@pytest.fixture
def fake() -> Iterator:
    opened: list[_FakeEndpoint] = []

    def make(*script: tuple[int, dict[str, str], str], **options: Any) -> _FakeEndpoint:
        opened.append(_FakeEndpoint(list(script), **options))
        return opened[-1]

    yield make
    for endpoint in opened:
        endpoint.close()


def test_transient_server_errors_are_retried(fake):
    endpoint = fake((503, {}, "busy"), (500, {}, "proxy error"), (200, {}, _COUNT))
    store = SparqlEndpointStore(endpoint.uri, retries=3, backoff=0.01)
    assert store.count_triples() == 3
    assert len(endpoint.requests) == 3
    assert f"FROM <{DEFAULT_GRAPH}>" in parse_qs(endpoint.requests[0])["query"][0]


def test_a_query_the_caller_gave_up_on_is_not_sent_again(fake):
    """A generic endpoint cannot stop a query, so a call's timeout abandons it; the store's
    retries of a transient failure must then stop, not send the query again."""
    endpoint = fake((503, {}, "busy"), pause=0.6)
    store = SparqlEndpointStore(endpoint.uri, flavour="generic", retries=3, backoff=0.01)
    with pytest.raises(QueryTimeoutError):
        store.relations(["a"], timeout=0.2)
    time.sleep(1.5)  # the busy answer comes at 0.6 s; a retry would follow 0.01 s later
    assert len(endpoint.requests) == 1


def test_queries_share_one_kept_alive_connection(fake):
    endpoint = fake((200, {}, _COUNT), protocol="HTTP/1.1")
    store = SparqlEndpointStore(endpoint.uri, retries=0)
    assert [store.count_triples() for _ in range(4)] == [3] * 4
    assert len(endpoint.requests) == 4 and len(set(endpoint.ports)) == 1


def test_a_connection_the_server_dropped_is_reopened_once(fake):
    endpoint = fake((200, {}, _COUNT), protocol="HTTP/1.1", hang_up=True)
    store = SparqlEndpointStore(endpoint.uri, retries=0)  # not the retries: the reopening itself
    assert [store.count_triples() for _ in range(3)] == [3] * 3
    assert len(endpoint.requests) == 3 and len(set(endpoint.ports)) == 3


def test_query_errors_are_not_retried(fake):
    endpoint = fake((400, {}, "Virtuoso 37000 Error SP030: SPARQL compiler, line 1: syntax error"))
    store = SparqlEndpointStore(endpoint.uri, retries=3, backoff=0.01)
    with pytest.raises(InvalidInputError, match="SP030"):
        store.query("SELECT * WHERE { ?s ?p ?o }")
    endpoint500 = fake((500, {}, "Virtuoso 42000 Error SR186: No permission\n\nSPARQL query:\nSELECT …"))
    with pytest.raises(StoreError, match="SR186") as caught:
        SparqlEndpointStore(endpoint500.uri, retries=3, backoff=0.01).count_triples()
    assert "SPARQL query:" not in str(caught.value)
    assert len(endpoint.requests) == 1 and len(endpoint500.requests) == 1


def test_a_query_cancelled_at_its_timeout_is_a_timeout(fake):
    # Virtuoso ends a query at the request's timeout with S1T00, or at times by cancelling it (HY008)
    for state in ("S1T00 Error SR171: Transaction timed out", "HY008 Error SR203: Async statement killed by SQLCancel."):
        endpoint = fake((500, {}, f"Virtuoso {state}\n\nSPARQL query:\nSELECT …"))
        store = SparqlEndpointStore(endpoint.uri, retries=2, backoff=0.01, timeout=30)
        with pytest.raises(QueryTimeoutError, match=state.split()[0]):
            # a deadline long enough that the server's answer, not the client's clock, ends the call
            store.execute("(JOIN r m.x)", timeout=5)
        assert len(endpoint.requests) == 1  # not retried
        assert parse_qs(endpoint.requests[0])["timeout"] == ["5000"]  # the deadline, in milliseconds
        # without a timeout of its own, a call's deadline is the store's, and Virtuoso is told it too
        with pytest.raises(QueryTimeoutError, match=rf"deadline of 30 s \(the store's timeout=\).*{state.split()[0]}"):
            store.execute("(JOIN r m.x)")
        assert len(endpoint.requests) == 2 and 29_000 < int(parse_qs(endpoint.requests[1])["timeout"][0]) <= 30_000


def test_a_query_stopped_as_it_was_compiled_is_a_timeout_not_a_bad_query(fake):
    # Virtuoso looks at the deadline only once a query is compiled; one that took longer to
    # compile comes back as a 400 naming S1TAT
    body = "Virtuoso S1TAT Error RC...: Returning incomplete results, query interrupted by result timeout.\n\nSPARQL query:\nSELECT …"
    endpoint = fake((400, {}, body))
    store = SparqlEndpointStore(endpoint.uri, retries=2, backoff=0.01)
    with pytest.raises(QueryTimeoutError, match="deadline of 5 s \\(its timeout\\).*S1TAT"):
        store.query("SELECT * WHERE { ?s ?p ?o }", timeout=5)
    assert len(endpoint.requests) == 1


def test_persistent_server_errors_become_unavailable(fake):
    endpoint = fake((503, {}, "down for maintenance"))
    with pytest.raises(StoreUnavailableError, match="3 attempt"):
        SparqlEndpointStore(endpoint.uri, retries=2, backoff=0.01).count_triples()
    assert len(endpoint.requests) == 3


def test_cut_down_answers_are_errors_not_silent(fake):
    capped = fake((200, {"X-SPARQL-MaxRows": "10000"}, _COUNT))
    with pytest.raises(StoreError, match="ResultSetMaxRows"):
        SparqlEndpointStore(capped.uri).count_triples()
    partial = fake((200, {"X-SQL-State": "S1TAT", "X-SQL-Message": "RC...: Returning incomplete results"}, _COUNT))
    # Virtuoso was told the store's deadline: an answer cut at it is a timeout
    with pytest.raises(QueryTimeoutError, match="answered only in part"):
        SparqlEndpointStore(partial.uri).count_triples()
    # an endpoint that was told no deadline cut the answer at a limit of its own
    with pytest.raises(StoreError, match="partial answer") as caught:
        SparqlEndpointStore(partial.uri, flavour="generic").count_triples()
    assert not isinstance(caught.value, QueryTimeoutError)


def test_an_answer_that_is_not_results_json_is_a_store_error(fake):
    for body, says in (("<html>proxy error</html>", "Expecting value"), ("[" * 100_000 + "]" * 100_000, "JSON nested too deep")):
        endpoint = fake((200, {}, body))
        with pytest.raises(StoreError, match=rf"{endpoint.uri} answered with a body that is not SPARQL results JSON \({says}"):
            SparqlEndpointStore(endpoint.uri).query("SELECT ?s WHERE { ?s ?p ?o }")


def test_an_unreachable_endpoint_fails_fast_and_names_the_uri():
    uri = f"http://127.0.0.1:{free_port()}/sparql"
    store = SparqlEndpointStore(uri, retries=2, backoff=0.01, timeout=2)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match=f"{uri}.*Is the server running"):
        store.relations(["a"])
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "options, message",
    [
        ({"flavour": "blazegraph"}, "invalid flavour"),
        ({"loader": "ftp"}, "invalid loader"),
        ({"graph": "not an iri"}, "invalid graph IRI"),
        ({"timeout": 0}, "invalid timeout"),
        ({"retries": -1}, "invalid retries"),
        ({"chunk_size": 0}, "invalid chunk_size"),
    ],
)
def test_bad_options_are_rejected(options, message):
    with pytest.raises(InvalidInputError, match=message):
        SparqlEndpointStore("http://127.0.0.1:8890/sparql", **options)


# ----------------------------------------------------------------------------- the flavour's text
def test_virtuoso_compiler_differs_only_where_virtuoso_needs_it():
    generic = SparqlCompiler("http://rdf.freebase.com/ns/", "http://g")
    virtuoso = VirtuosoCompiler("http://rdf.freebase.com/ns/", "http://g")

    def text(compiler, op):
        return compiler.t.bind(compiler.compile(op))

    assert generic.same_term("?a", "?b") == "sameTerm(?a, ?b)"
    assert virtuoso.same_term("?a", "?b") == "(?a = ?b)"
    assert text(virtuoso, Expand(("m.1",), ("r",), "both", limit=6)) == (
        "SELECT ?src ?rel ?dst ?dir"
        ' (IF(isNumeric(?dst), CONCAT(bif:sprintf("%.17g", ?dst), " ", STR(DATATYPE(?dst))), ?dst__exact_none)'
        " AS ?dst__exact) WHERE { SELECT ?src ?rel ?dst ?dir"
        " FROM <http://g> WHERE { VALUES ?src { <http://rdf.freebase.com/ns/m.1> }"
        ' { ?src <http://rdf.freebase.com/ns/r> ?dst . BIND("out" AS ?dir) } UNION'
        ' { ?dst <http://rdf.freebase.com/ns/r> ?src . BIND("in" AS ?dir) FILTER(!(?dst = ?src)) }'
        " BIND(<http://rdf.freebase.com/ns/r> AS ?rel) } LIMIT 6 }"
    )
    # one relation's hop is not a group of its own (Virtuoso refuses such a group joined to an
    # id sent as a parameter); several relations are a UNION of groups, as in the generic text
    one = text(virtuoso, Expand(("m.1",), ("r",), "in"))
    assert one.endswith(
        '{ VALUES ?src { <http://rdf.freebase.com/ns/m.1> } ?dst <http://rdf.freebase.com/ns/r> ?src .'
        ' BIND("in" AS ?dir) BIND(<http://rdf.freebase.com/ns/r> AS ?rel) }'
    )
    assert text(virtuoso, Expand(("m.1",), ("r", "s"), "in")) == text(generic, Expand(("m.1",), ("r", "s"), "in"))
    # a companion only for what can be a literal: a walk's last node, a name; not aggregates
    walks = text(virtuoso, Walks(("m.1",), ("r", "r"), "both"))
    assert "sameTerm" not in walks and '(IF(?d0 = "out", ?n0, ?n1) = IF(?d1 = "out", ?n1, ?n2))' in walks
    assert walks.count("__exact)") == 1 and "AS ?n2__exact)" in walks
    assert "__exact" not in text(virtuoso, Walks(("m.1",), ("r", "r"), "in"))  # ends on a subject
    assert "__exact" not in text(virtuoso, Walks((), (None, None), "both", pairs=(("m.1", "m.2"),)))  # ends on an id
    assert "AS ?name__exact)" in text(virtuoso, Names(("m.1",))) and "__exact" not in text(virtuoso, Types(("m.1",)))
    assert text(virtuoso, Relations(("m.1",), "out")) == text(generic, Relations(("m.1",), "out"))
    assert text(virtuoso, CountTriples()) == text(generic, CountTriples())


def test_a_single_id_is_bound_as_a_parameter_and_the_rest_written_in():
    virtuoso = VirtuosoCompiler("http://rdf.freebase.com/ns/", "http://g")

    def bound(op):
        return bind_with_parameters(op, virtuoso.compile(op), virtuoso.t)

    text, sent = bound(Relations(("m.1",), "out"))
    assert "VALUES" not in text and "m.1" not in text and "{ BIND(?::ids AS ?id) }" in text
    assert sent == [("?ids", "<http://rdf.freebase.com/ns/m.1>")]
    # the text is the same for every id: Virtuoso compiles it once
    assert bound(Relations(("m.2",), "out"))[0] == text
    # an id is escaped as an IRI in the parameter as in the text
    for awkward in ("x'y\"z", "a> <b", "{}`$"):
        _, sent = bound(Relations((awkward,), "out"))
        assert sent == [("?ids", virtuoso.t.parameter("ids", awkward))] and sent[0][1].count(">") == 1
    # a text with EXISTS, ids no triple pattern binds, a literal, pairs, or more ids than go as
    # parameters: everything written in, as Terms.bind writes it
    for op in (
        Names(("m.1",)),
        Names(("m.1", "m.2")),
        Types(("m.1", "m.2")),
        Walks((), (None,), "out", pairs=(("m.1", "m.2"),), exclude=("r",)),
        Walks(tuple(f"m.{i}" for i in range(IDS_AS_PARAMETERS["walks"] + 1)), (None, None), "out"),
        Relations(tuple(f"m.{i}" for i in range(IDS_AS_PARAMETERS["relations"] + 1)), "both"),
        Expand(tuple(f"m.{i}" for i in range(IDS_AS_PARAMETERS["expand"] + 1)), None, "both"),
        Expand(tuple(f"m.{i}" for i in range(IDS_AS_PARAMETERS["expand"] + 1)), ("r", "s"), "both"),
    ):
        compiled = virtuoso.compile(op)
        assert bind_with_parameters(op, compiled, virtuoso.t) == (virtuoso.t.bind(compiled), [])
    count = CountTriples()
    assert bind_with_parameters(count, virtuoso.compile(count), virtuoso.t) == (virtuoso.compile(count).text, [])


def test_short_lists_of_ids_go_as_parameters_in_a_filter_one_text_per_power_of_two():
    virtuoso = VirtuosoCompiler("http://rdf.freebase.com/ns/", "http://g")

    def bound(op):
        return bind_with_parameters(op, virtuoso.compile(op), virtuoso.t)

    text, sent = bound(Relations(("m.1", "m.2", "m.3"), "both"))
    assert "VALUES" not in text and "m.1" not in text
    assert text.endswith("FILTER(?id IN (?::ids_0, ?::ids_1, ?::ids_2, ?::ids_3)) } GROUP BY ?id ?rel ?dir")
    assert [value for _, value in sent] == [f"<http://rdf.freebase.com/ns/m.{i}>" for i in (1, 2, 3, 3)]
    assert bound(Relations(("a", "b", "c", "d"), "both"))[0] == text  # 3 and 4 ids share a text
    assert bound(Relations(("a", "b"), "both"))[0] != text
    # the filter closes the group the VALUES block opened: the subquery's, for two_hop_relations
    text, sent = bound(TwoHopRelations(("m.1", "m.2"), "r", "both"))
    inner = text.index("SELECT DISTINCT")
    assert text.index("FILTER(?id IN (?::ids_0, ?::ids_1))") < text.index("} }", inner) < text.index("?m ?rel ?x")
    text, _ = bound(Expand(("m.1", "m.2"), ("r", "s"), "both"))
    assert "FILTER(?src IN (?::ids_0, ?::ids_1))" in text and "VALUES" not in text


def test_relation_names_go_as_parameters_one_text_for_every_relation():
    virtuoso = VirtuosoCompiler("http://rdf.freebase.com/ns/", "http://g")

    def bound(op):
        return bind_with_parameters(op, virtuoso.compile(op), virtuoso.t)

    def iri(relation):
        return virtuoso.t.relation(relation)

    text, sent = bound(Walks(("m.1",), ("a.b", "c.d", "a.b"), "both"))
    assert "a.b" not in text and "c.d" not in text and text.count("?::rel_0") == 4 and text.count("?::rel_1") == 2
    assert sent == [("?ids", "<http://rdf.freebase.com/ns/m.1>"), ("?rel_0", iri("a.b")), ("?rel_1", iri("c.d"))]
    assert bound(Walks(("m.2",), ("x", "y", "x"), "both"))[0] == text
    assert bound(Walks(("m.2",), ("x", "y", "z"), "both"))[0] != text  # three relations, another text
    # a hop with any relation keeps its variable; the named one goes as a parameter
    text, sent = bound(Walks(("m.1",), (None, "a.b"), "out", exclude=("type.object.type",)))
    assert "?r0" in text and iri("type.object.type") in text and iri("a.b") not in text
    assert sent == [("?ids", "<http://rdf.freebase.com/ns/m.1>"), ("?rel_0", iri("a.b"))]
    text, sent = bound(TwoHopRelations(("m.1",), "a.b", "both"))
    assert iri("a.b") not in text and sent[1] == ("?rel_0", iri("a.b"))
    assert bound(TwoHopRelations(("m.1",), "c.d", "both"))[0] == text
    text, sent = bound(Expand(("m.1", "m.2", "m.3"), ("a.b", "c.d"), "both"))
    assert "BIND(?::rel_0 AS ?rel)" in text and "BIND(?::rel_1 AS ?rel)" in text and "FILTER(?src IN (" in text
    assert bound(Expand(("m.4", "m.5", "m.6", "m.7"), ("e.f", "g.h"), "both"))[0] == text
    text, sent = bound(TwoHopRelations(("m.1", "m.2"), "a.b", "both"))
    assert iri("a.b") not in text and sent[-1] == ("?rel_0", iri("a.b"))
    # a walk from more seeds keeps its relations written in (a plan made without them is slow)
    many = tuple(f"m.{i}" for i in range(WALK_SEEDS_WITH_RELATION_PARAMETERS + 1))
    text, sent = bound(Walks(many, ("a.b", "c.d"), "both"))
    assert iri("a.b") in text and "FILTER(?n0 IN (" in text and all(name.startswith("?ids_") for name, _ in sent)
    # an S-expression's relations, whatever the form; a string that holds a relation's IRI is a
    # value, written in as it is; a text with EXISTS (a time constraint) is written in whole
    text, sent = bound(Execute(parse("(JOIN (R a.b) (JOIN c.d m.1))")))
    assert iri("a.b") not in text and iri("c.d") not in text and sent[0] == ("?p0", virtuoso.t.iri("m.1"))
    assert sent[1:] == [("?rel_0", iri("a.b")), ("?rel_1", iri("c.d"))]
    assert bound(Execute(parse("(JOIN (R e.f) (JOIN k.l m.2))")))[0] == text
    quoted = f'"x {iri("a.b")} y"'
    text, sent = bound(Execute(parse(f"(AND (JOIN a.b {quoted}) (JOIN c.d m.1))")))
    assert quoted in text and text.count("?::rel_0") == 1 and ("?rel_0", iri("a.b")) in sent
    timed = Execute(parse("(TC (JOIN a.b m.1) c.d.from 2000)"))
    compiled = virtuoso.compile(timed)
    assert bind_with_parameters(timed, compiled, virtuoso.t) == (virtuoso.t.bind(compiled), [])
    # a relation name is sent as the text would hold it
    text, sent = bound(TwoHopRelations(("m.1",), "/film/film/genre", "out"))
    assert sent[1] == ("?rel_0", iri("/film/film/genre")) and "genre" not in text


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, tuple]]:
    """Each compiled query the endpoint stores send from now on: its text and URL parameters."""
    sent: list[tuple[str, tuple]] = []
    request = SparqlEndpointStore._request

    def recorded(self, text, accept, whole_graph, timeout=None, parameters=()):
        sent.append((text, tuple(parameters)))
        return request(self, text, accept, whole_graph, timeout, parameters)

    monkeypatch.setattr(SparqlEndpointStore, "_request", recorded)
    return sent


def test_counting_a_graph_before_its_load_leaves_later_queries_planned_for_its_data(server, shared_data, sent):
    """A load counts the graph before and after it. Virtuoso's optimizer keeps the row estimate
    it samples for a graph written as a constant, so a count of the still empty graph had every
    later query planned for an empty one: the relations of a film star's films scanned the
    whole graph through its subjects (RDF_QUAD_GS, about 0.3 rows expected) instead of looking
    each film up (RDF_QUAD_POGS / RDF_QUAD_OP), 70 times slower on MetaQA. The plan shows it
    without timing anything."""
    store = _store(server)
    assert store.count_triples() == 0
    load_files(store, [shared_data / "metaqa" / "kb.txt.gz"], "metaqa", progress=False)
    edges = store.expand(["Tom Hanks"], None, "both", "unbounded").edges
    films = list(dict.fromkeys(e.dst for e in edges if not isinstance(e.dst, Literal)))
    assert len(films) > 20
    sent.clear()
    store.relations(films, "both", "unbounded")
    (text, parameters), = sent
    assert not parameters  # the ids are written in, so the plan explained is the one that ran
    plan = store._isql("explain('SPARQL " + text.replace("'", "''") + "');")
    indexes = re.findall(r"(RDF_QUAD\w*)\s+[0-9.e+]+ rows", plan)
    assert indexes and "RDF_QUAD_GS" not in indexes, plan[-2000:]
    # the store counts in the quad table, not through a SPARQL COUNT, and the two agree
    sent.clear()
    counted = store.count_triples()
    assert not sent and counted == sparql_store.SparqlStore.count_triples(store) > 100_000


def test_single_ids_reach_the_server_as_parameters(server, sent):
    triples = random_graph(5)
    store = _store(server)
    store.add_triples(triples)
    sent.clear()
    reference = ReferenceStore(triples)
    ids = sorted({t.subject for t in triples})
    for one in ids[:4] + ["x'y\"z", "no-such-node"]:
        assert store.relations([one]) == reference.relations([one])
        assert store.two_hop_relations([one], "r") == reference.two_hop_relations([one], "r")
    texts = {text for text, parameters in sent if parameters}
    assert len(texts) == 2 and len(sent) == 12  # one text per operation, whatever the id
    sent.clear()
    for n in range(2, 9):  # short lists too, one text per power of two
        for direction in DIRECTIONS:
            assert store.relations(ids[:n], direction) == reference.relations(ids[:n], direction)
            assert store.expand(ids[:n], None, direction) == reference.expand(ids[:n], None, direction)
            assert store.two_hop_relations(ids[:n], "r", direction) == reference.two_hop_relations(ids[:n], "r", direction)
    assert all(parameters for _, parameters in sent) and len({text for text, _ in sent}) == 3 * 3 * 3
    sent.clear()
    many = (ids + [f"absent-{i}" for i in range(IDS_AS_PARAMETERS["relations"])])[:IDS_AS_PARAMETERS["relations"] + 1]
    assert store.relations(many) == reference.relations(many)
    assert sent[0][1] == () and store.terms.iri(many[-1]) in sent[0][0]


def test_lists_of_ids_sent_as_parameters_match_the_reference(server, sent):
    """Every list length up to each operation's bound, in every direction: the IN filter keeps
    exactly the rows the VALUES block would, including ids with no edge."""
    triples = random_graph(8, nodes=40, edges=160)
    store = _store(server)
    store.add_triples(triples)
    reference = ReferenceStore(triples)
    ids = node_ids(triples) + ["no-such-node", "x'y\"z"]
    rng = random.Random(0)
    for n in range(2, IDS_AS_PARAMETERS["expand"] + 2):
        some = rng.sample(ids, n)
        for direction in DIRECTIONS:
            assert store.relations(some, direction) == reference.relations(some, direction)
            assert store.expand(some, None, direction) == reference.expand(some, None, direction)
            assert store.expand(some, ["r", "s"], direction) == reference.expand(some, ["r", "s"], direction)
            assert store.two_hop_relations(some, "r", direction) == reference.two_hop_relations(some, "r", direction)
    widths = {sum(name.startswith("?ids") for name, _ in parameters) for _, parameters in sent}
    assert widths == {0, 2, 4, 8, 16, 32}  # 0: written in past the bound


def test_answers_are_read_with_immediate_acks(server, quick_acks_asked):
    """Virtuoso writes its answers in pieces with Nagle's algorithm on, so some sizes waited
    ≈ 40 ms for a delayed acknowledgement: every read of the store's connections asks for
    TCP_QUICKACK first (Linux), and the answers come back whole."""
    store = _store(server)
    store.add_triples([Triple(f"m.{i}", "r.s", f"m.{i + 1}") for i in range(400)])
    quick_acks_asked.clear()  # only the reads of the answer below
    ids = [f"m.{i}" for i in range(402)]
    assert store.names(ids) == {i: (None if i == "m.401" else i) for i in ids}
    assert quick_acks_asked and set(quick_acks_asked) == {1}


def test_relations_sent_as_parameters_match_the_reference(server, sent):
    """Walks, ``two_hop_relations`` and ``expand`` over every relation, from one id and from
    a list: the answers of the reference, and the same texts whatever the relations."""
    triples = random_graph(9, nodes=30, edges=140)
    store = _store(server)
    store.add_triples(triples)
    reference = ReferenceStore(triples)
    ids = node_ids(triples) + ["no-such-node"]
    rng = random.Random(2)
    texts = []
    for at, relation in enumerate(RELATIONS):
        other = RELATIONS[(at + 1) % len(RELATIONS)]
        sent.clear()
        for direction in DIRECTIONS:
            for seeds in ([rng.choice(ids)], rng.sample(ids, 3)):
                assert store.two_hop_relations(seeds, relation, direction) == reference.two_hop_relations(
                    seeds, relation, direction
                )
                assert store.expand(seeds, [relation, other], direction) == reference.expand(
                    seeds, [relation, other], direction
                )
                for path in ([relation], [relation, other], [relation, other, relation]):
                    for distinct in (True, False):
                        assert store.follow_paths(seeds, path, direction, distinct_edges=distinct) == (
                            reference.follow_paths(seeds, path, direction, distinct_edges=distinct)
                        )
        assert all(parameters for _, parameters in sent)
        # one text per shape whatever the relations: two_hop_relations and expand from one id
        # and from a list, and walks from one id of 1, 2 and 3 hops, the last with and without
        # the filters that stop a walk from reusing an edge (a walk from a list keeps its
        # relations written in)
        texts.append({text for text, parameters in sent if any(name.startswith("?rel_") for name, _ in parameters)})
        assert len(texts[-1]) == len(DIRECTIONS) * (2 + 2 + 1 + 1 + 2)
    assert all(each == texts[0] for each in texts)


def _entity(node_id: str) -> str:
    """An id as an S-expression entity: in brackets, escaped."""
    return "[" + re.sub(r"([\]\\])", r"\\\1", node_id) + "]"


@pytest.mark.parametrize("timeout", [None, 30])
def test_every_shape_of_ids_sent_as_parameters_answers_as_the_reference(server, sent, timeout):
    """Each operation whose ids go as parameters, in each direction, from one id and from
    several, with no relation, one or several, with and without a timeout of its own: Virtuoso
    compiles every text it is sent (told a timeout, which the store tells it on every call, it
    refused ``expand`` from one id through one relation with "SR204: Missing named parameter")
    and answers as the reference does."""
    triples = random_graph(12, nodes=20, edges=80)
    store = _store(server)
    store.add_triples(triples)
    reference = ReferenceStore(triples)
    own = {} if timeout is None else {"timeout": timeout}
    ids = node_ids(triples)
    edges = [t for t in triples if isinstance(t.object, str) and t.relation in RELATIONS]
    rng = random.Random(4)
    for direction in DIRECTIONS:
        for at, edge in enumerate(rng.sample(edges, 3)):
            r, other = edge.relation, rng.choice([x for x in RELATIONS if x != edge.relation])
            # one id with an r edge in that direction, so that no answer below is empty by chance
            one = [edge.subject if direction == "out" or (direction == "both" and at % 2) else edge.object]
            assert reference.expand(one, [r], direction).edges
            several = rng.sample([i for i in ids if i != one[0]], 2) + one
            a, b = (_entity(i) for i in several[-2:])
            calls: dict[str, Callable[..., Any]] = {
                "relations": lambda s, seeds, **kw: s.relations(seeds, direction, **kw),
                "expand": lambda s, seeds, **kw: s.expand(seeds, None, direction, **kw),
                "expand one relation": lambda s, seeds, **kw: s.expand(seeds, [r], direction, **kw),
                "expand two relations": lambda s, seeds, **kw: s.expand(seeds, [r, other], direction, **kw),
                "two_hop_relations": lambda s, seeds, **kw: s.two_hop_relations(seeds, r, direction, **kw),
                "follow_paths 1 hop": lambda s, seeds, **kw: s.follow_paths(seeds, [r], direction, **kw),
                "follow_paths 2 hops": lambda s, seeds, **kw: s.follow_paths(seeds, [r, other], direction, **kw),
                "follow_paths 3 hops, edges reused": lambda s, seeds, **kw: s.follow_paths(
                    seeds, [r, other, r], direction, distinct_edges=False, **kw
                ),
                "subgraph": lambda s, seeds, **kw: s.subgraph(seeds, 2, direction, **kw),
                "subgraph one relation": lambda s, seeds, **kw: s.subgraph(seeds, 2, direction, [r], **kw),
            }
            for seeds in (one, several):
                for name, call in calls.items():
                    sent.clear()
                    assert call(store, seeds, **own) == call(reference, seeds), f"{name} from {seeds} ({direction})"
                    assert all(parameters for _, parameters in sent), f"{name}: ids written in"
            # a single id goes as a parameter in any operation, each anchor of an S-expression too
            for name, call in {
                "types": lambda s, **kw: s.types(one, **kw),
                "execute": lambda s, **kw: s.execute(f"(JOIN {r} {_entity(one[0])})", **kw),
                "execute reversed": lambda s, **kw: s.execute(f"(COUNT (JOIN (R {r}) {_entity(one[0])}))", **kw),
                "execute two anchors": lambda s, **kw: s.execute(f"(AND (JOIN {r} {a}) (JOIN (R {other}) {b}))", **kw),
            }.items():
                sent.clear()
                assert call(store, **own) == call(reference), f"{name} of {one} ({direction})"
                assert sent and all(parameters for _, parameters in sent), f"{name}: ids written in"


def test_operations_over_more_ids_than_a_query_holds_run_in_parts(server, sent):
    triples = random_graph(6, edges=80)
    store = _store(server)
    store.add_triples(triples)
    store.ids_per_query = 3
    reference = ReferenceStore(triples)
    ids = node_ids(triples) + ["no-such-node"]
    for direction in DIRECTIONS:
        assert store.relations(ids, direction) == reference.relations(ids, direction)
        assert store.expand(ids, None, direction) == reference.expand(ids, None, direction)
        assert store.follow_paths(ids, ["r", "s"], direction) == reference.follow_paths(ids, ["r", "s"], direction)
        assert store.two_hop_relations(ids, "r", direction) == reference.two_hop_relations(ids, "r", direction)
        assert store.subgraph(ids[:5], 2, direction) == reference.subgraph(ids[:5], 2, direction)
    assert store.names(ids) == reference.names(ids)
    assert store.types(ids) == reference.types(ids)
    assert store.shortest_paths(ids[:4], ids[4:9], max_hops=2) == reference.shortest_paths(ids[:4], ids[4:9], max_hops=2)
    sent.clear()
    # the limit holds for the whole: exactly `limit` rows of the full answer, cut
    cut = store.expand(ids, limit=4)
    assert cut.truncated and len(cut.edges) == 4 and set(cut.edges) <= set(reference.expand(ids).edges)
    assert len(sent) < -(-len(ids) // 3)  # stopped once the limit was met
    sent.clear()
    assert store.types(ids) == reference.types(ids) and len(sent) == -(-len(ids) // 3)


def test_the_timeout_holds_for_all_the_parts(monkeypatch):
    store = OxigraphStore(None)
    store.add_triples([Triple(f"m.{i}", "r", "m.x") for i in range(6)])
    store.ids_per_query = 1
    clock = iter(range(100))  # each reading of the timeouts' clock: one second later
    monkeypatch.setattr(timeouts, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    with pytest.raises(QueryTimeoutError, match="relations over 6 ids ran past its timeout of 3 s"):
        store.relations([f"m.{i}" for i in range(6)], timeout=3)


def test_thousands_of_ids_are_answered(server):
    # Virtuoso cannot compile one query naming this many ("SQ199: Maximum size of a code vector")
    store = _store(server)
    triples = [Triple("m.1", "r", "m.2"), Triple("m.1", NAME_RELATION, Literal.make("One"))]
    store.add_triples(triples)
    reference = ReferenceStore(triples)
    ids = ["m.1"] + [f"m.absent.{i}" for i in range(5000)]
    assert store.names(ids) == reference.names(ids) and store.names(ids)["m.1"] == "One"
    assert store.relations(ids) == reference.relations(ids) and len(store.relations(ids).rows) == 2
