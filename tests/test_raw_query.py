"""Raw queries (``Store.query``) as an attacker writes them: Virtuoso's built-in functions
however spelled, federation, other graphs, and parameters the call does not give — against
real stores, with a local HTTP server that records any request a query makes it send."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError, QueryRefusedError, ReadOnlyViolationError, StoreError
from engine.graph import Triple
from engine.servers.base import free_port
from engine.stores.oxigraph import OxigraphStore
from sparql.readonly import prepare_query
from sparql.terms import Terms

GRAPH = "http://kgqa-engine/test/g"
TERMS = Terms("http://rdf.freebase.com/ns/")


class Sink:
    """A loopback HTTP server that records every request and answers an empty SPARQL result."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                sink.requests.append(self.path)
                body = b'{"head": {"vars": ["x"]}, "results": {"bindings": [{"x": {"type": "literal", "value": "remote"}}]}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/sparql-results+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def sink() -> Iterator[Sink]:
    server = Sink()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture(params=["oxigraph", "virtuoso"])
def sparql_store(request, make_store):
    return make_store(request.param, [Triple("a", "r", "b")])


def _server_calls(url: str) -> list[str]:
    """Ways of writing a call of Virtuoso's bif:http_get (it fetches ``url`` from the database host)."""
    get = f"('{url}/x')"
    return [
        f"SELECT (bif:http_get{get} AS ?x) {{}}",
        f"PREFIX b: <bif:> SELECT (b:http_get{get} AS ?x) {{}}",
        f"PREFIX b: <bif:> SELECT (b:HTTP_GET{get} AS ?x) {{}}",
        f"SELECT (<bif:http_get>{get} AS ?x) {{}}",
        f"SELECT (<bif:HTTP_GET>{get} AS ?x) {{}}",
        f"SELECT (<bif:http_get> # a comment between the name and the call\n{get} AS ?x) {{}}",
        f"SELECT (<\\u0062if:http_get>{get} AS ?x) {{}}",
        f"PREFIX b: <\\u0062if:> SELECT (b:http_get{get} AS ?x) {{}}",
        f"PREFIX b: <http://www.openlinksw.com/schemas/bif#> SELECT (b:http_get{get} AS ?x) {{}}",
        f"SELECT (<http://www.openlinksw.com/schemas/sql#http_get>{get} AS ?x) {{}}",
        f"SELECT (<sql:http_get>{get} AS ?x) {{}}",
        f"PREFIX bif: <http://example.org/> SELECT (bif:http_get{get} AS ?x) {{}}",
        f"SELECT ?x {{ BIND(1 AS ?x) FILTER(?x<bif:http_get{get}>0) }}",
        f"SELECT (1 AS ?y) -- (bif:http_get{get} AS ?x)\n{{}}",
        f'SELECT ("\\u0022) (bif:http_get{get} AS ?x) #" AS ?y) {{}}',
        f"define input:default-graph-uri <{GRAPH}> SELECT (bif:http_get{get} AS ?x) {{}}",
        f"SELECT * {{ ?o bif:contains '\"x\"' . FILTER(<bif:http_get>{get}) }}",
        f"PREFIX f: <http://www.w3.org/2005/xpath-functions#> SELECT (f:doc{get} AS ?x) {{}}",
    ]


def test_virtuoso_built_in_functions_are_refused_however_spelled(sparql_store, sink):
    for text in _server_calls(sink.url):
        with pytest.raises(QueryRefusedError, match="query refused"):
            sparql_store.query(text)
    assert sink.requests == []  # nothing reached the network
    assert sparql_store.count_triples() == 1
    # what stays allowed: SPARQL's own functions and XSD casts
    cast = "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> SELECT (xsd:integer(STRLEN('abc')) AS ?n) {}"
    assert [[v.value for v in row] for row in sparql_store.query(cast).rows] == [["3"]]


def test_writes_through_server_functions_are_refused(sparql_store):
    for text in [
        f"PREFIX b: <bif:> SELECT (b:exec('SPARQL CLEAR GRAPH <{GRAPH}>') AS ?x) {{}}",
        "SELECT (<sql:RDF_QUAD_URI>('g', 's', 'p', 'o') AS ?x) {}",
    ]:
        with pytest.raises(QueryRefusedError):
            sparql_store.query(text)
    with pytest.raises(ReadOnlyViolationError):
        sparql_store.query("SELECT * {} ; CLEAR ALL")
    assert sparql_store.count_triples() == 1


def test_service_is_refused_unless_allowed(sparql_store, sink):
    text = f"SELECT ?x WHERE {{ SERVICE <{sink.url}/sparql> {{ ?s ?p ?x }} }}"
    for variant in (text, text.replace("SERVICE", "service silent")):
        with pytest.raises(QueryRefusedError, match="allow_service"):
            sparql_store.query(variant)
    assert sink.requests == []
    if isinstance(sparql_store, OxigraphStore):  # Virtuoso's anonymous user may not federate anyway
        assert sparql_store.query(text, allow_service=True).rows[0][0].value == "remote"
        assert len(sink.requests) == 1
        # a service that is not there fails as a store error, whether or not a deadline is given
        gone = f"SELECT ?x WHERE {{ SERVICE <http://127.0.0.1:{free_port()}/sparql> {{ ?s ?p ?x }} }}"
        for timeout in (None, 10):
            with pytest.raises(StoreError, match="query failed on"):
                sparql_store.query(gone, allow_service=True, timeout=timeout)


# ----------------------------------------------------------------------------- graph isolation
def _other_graph_reads(other: str) -> list[str]:
    return [
        "SELECT ?s ?o WHERE { GRAPH ?g { ?s ?p ?o } }",
        f"SELECT ?s ?o FROM <{other}> WHERE {{ ?s ?p ?o }}",
        f"SELECT ?s ?o FROM NAMED <{other}> WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
        f"SELECT ?s ?o WHERE {{ GRAPH <{other}> {{ ?s ?p ?o }} }}",
        f"SELECT ?s ?o WHERE {{ {{ SELECT ?s ?o FROM <{other}> WHERE {{ ?s ?p ?o }} }} }}",
        f"PREFIX g: <{other.rsplit('/', 1)[0]}/> SELECT ?s ?o WHERE {{ GRAPH g:{other.rsplit('/', 1)[1]} {{ ?s ?p ?o }} }}",
        f"SELECT ?s ?o WHERE {{ VALUES ?g {{ <{other}> }} GRAPH ?g {{ ?s ?p ?o }} }}",
        f"define input:default-graph-uri <{other}> SELECT ?s ?o WHERE {{ ?s ?p ?o }}",
        f"define input:named-graph-uri <{other}> SELECT ?s ?o WHERE {{ GRAPH ?g {{ ?s ?p ?o }} }}",
    ]


def test_a_raw_query_reads_its_own_graph_only_on_virtuoso(make_store):
    mine = make_store("virtuoso", [Triple("mine", "r", "x")])
    other = make_store("virtuoso", [Triple("secret", "r", "y")])
    for text in _other_graph_reads(other.graph):
        try:
            rows = mine.query(text).rows
        except QueryRefusedError:
            continue
        assert rows in ([], [["mine", "x"]]), text  # never the other store's triple
    # the store's own graph may be named
    assert mine.query(f"SELECT ?s WHERE {{ GRAPH <{mine.graph}> {{ ?s ?p ?o }} }}").rows == [["mine"]]
    assert mine.query(f"SELECT ?s FROM <{mine.graph}> WHERE {{ ?s ?p ?o }}").rows == [["mine"]]
    assert mine.query("SELECT ?s WHERE { GRAPH ?g { ?s ?p ?o } }").rows == [["mine"]]
    with pytest.raises(QueryRefusedError, match="outside this store's graph"):
        mine.query(f"SELECT * FROM <{other.graph}> WHERE {{ ?s ?p ?o }}")


# ----------------------------------------------------------------------------- parameters
def test_a_parameter_the_call_does_not_give_is_an_error(make_store, store_kind):
    store = make_store(store_kind, [Triple("film", "r", "x"), Triple("other", "r", "y")])
    if store.dialect == "sparql":
        text = "SELECT ?o WHERE { $film ?p ?o }"
    else:
        text = "MATCH (n:Entity {id: $film})-[r]->(o) RETURN o.id AS o"
    with pytest.raises(InvalidInputError, match=r"\$film not given"):
        store.query(text)
    with pytest.raises(InvalidInputError, match=r"\$film not given"):
        store.query(text, {"other": "x"})
    assert store.query(text, {"film": "film"}).rows == [["x"]]
    if store.dialect == "cypher":
        with pytest.raises(InvalidInputError, match=r"\$`the film` not given|\$the film not given"):
            store.query("MATCH (n:Entity {id: $`the film`}) RETURN n.id")
        # inside strings and comments a `$` is no parameter
        assert store.query("RETURN '$film' AS x // $film").rows == [["$film"]]
    else:
        assert store.query('SELECT ("$film" AS ?x) {} # $film').rows[0][0].value == "$film"


def test_kgqa_query_without_the_named_param_fails_naming_it(tmp_path, capsys):
    store = str(tmp_path / "demo")
    assert main(["demo", "--store", store]) == 0
    capsys.readouterr()
    code = main(["query", "query", "SELECT ?o WHERE { $film ?p ?o }", "--store", store])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "$film not given" in err and "--param film=" in err
    code = main(["query", "query", "SELECT ?o WHERE { $film ?p ?o }", "--param", "film=m.0kq01", "--store", store, "--json"])
    assert code == 0
    capsys.readouterr()
    code = main(["query", "query", "SELECT ?o WHERE { $film ?p ?o }", "--param", "film=m.0kq01", "--param", "film=m.0kq02",
                 "--store", store])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "--param film is given twice ('m.0kq01' and 'm.0kq02')" in err
    for item in ("=m.0kq01", "film"):
        code = main(["query", "query", "SELECT ?o WHERE { $film ?p ?o }", "--param", item, "--store", store])
        out, err = capsys.readouterr()
        assert code == 2 and out == "" and f"--param {item!r}: write NAME=VALUE, with a name" in err


def test_kgqa_query_prints_an_unbound_value_as_an_empty_field_not_none(tmp_path, capsys):
    store = str(tmp_path / "demo")
    assert main(["demo", "--store", store]) == 0
    capsys.readouterr()
    text = 'SELECT ?x ?y WHERE { VALUES ?x { "None" "a" } OPTIONAL { ?x <http://example.org/p> ?y } }'
    assert main(["query", "query", text, "--store", store]) == 0
    assert capsys.readouterr().out.splitlines() == ["x\ty", "None\t", "a\t"]


# ----------------------------------------------------------------------------- the checker alone
@pytest.mark.parametrize(
    "text",
    [
        "PREFIX ns: <http://rdf.freebase.com/ns/> SELECT ?x WHERE { ns:m.0kq01 ns:film.film.directed_by ?x . }",
        "SELECT ?x { BIND(1 AS ?x) FILTER(?x < 2 && ?x >= 0) } ORDER BY DESC(?x) LIMIT 5",
        "SELECT (COUNT(DISTINCT ?s) AS ?n) { ?s ?p ?o } GROUP BY ?p HAVING (COUNT(*) > 1)",
        "ASK { ?s ?p \"bif:http_get('x') # \" }  # bif:http_get( in a comment",
        "SELECT * { ?s ?p ?o FILTER(regex(str(?o), '^a', 'i')) } VALUES ?s { UNDEF }",
        "SELECT ('''two\nlines''' AS ?x) (\"caf\\u00e9\" AS ?y) {}",
        "SELECT * { ?s a ?c ; <http://x/p>+/^<http://x/q>? [ <http://x/r> _:b1 ] . ?s ?p 1. ?s ?p 1.5e3 }",
        "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }",
        f"SELECT * {{ GRAPH <{GRAPH}> {{ ?s ?p ?o }} }}",
    ],
)
def test_standard_queries_pass_the_check(text):
    assert prepare_query(text, {}, TERMS.parameter, graph=GRAPH) == text


@pytest.mark.parametrize(
    "text",
    [
        "SELECT (<java:f>(1) AS ?y) {}",
        "SELECT (<http://example.org/f>(1) AS ?y) {}",
        "SELECT * { ?s ?p ?o } OPTION (QUIETCAST)",
        "SPARQL SELECT * { ?s ?p ?o }",
        "BASE <bif:> SELECT (<http_get>('x') AS ?x) {}",
        "SELECT (1 AS ?y) {} #\r SELECT (bif:http_get('x') AS ?z) {}",
        "PREFIX b: <http://x/> PREFIX b: <bif:> SELECT * {}",
        "PREFIX x: <http://www.w3.org/2001/XMLSchema#> PREFIX x: <http://x/> SELECT (x:integer(1) AS ?a) {}",
        'SELECT ("a\\\\u0022" AS ?y) {}',
    ],
)
def test_other_extensions_and_disguises_are_refused(text):
    with pytest.raises(QueryRefusedError):
        prepare_query(text, {}, TERMS.parameter)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT (b\\u0069f:http_get('x') AS ?x) {}",  # an escape outside a string or IRI
        "SELECT (ns:f(1) AS ?y) {}",  # a prefix the query does not declare
        "SELECT * {\x00}",
        "SELECT (1 AS ?y) {} #\u2028 (bif:http_get('x') AS ?z)",
    ],
)
def test_unreadable_text_is_invalid(text):
    with pytest.raises(InvalidInputError):
        prepare_query(text, {}, TERMS.parameter)


def test_a_bound_value_is_checked_again():
    # an id that is itself a bif IRI, bound where a function name goes
    with pytest.raises(QueryRefusedError):
        prepare_query("SELECT ($f('x') AS ?x) {}", {"f": "http://www.openlinksw.com/schemas/bif#http_get"}, TERMS.parameter)
    bound = prepare_query("SELECT ?o WHERE { ?s ?p $v }", {"v": "a\"b } bif:x("}, TERMS.parameter)
    assert bound == "SELECT ?o WHERE { ?s ?p <http://rdf.freebase.com/ns/a%22b%20%7D%20bif%3Ax%28> }"


def test_without_a_graph_from_and_graph_are_not_limited():
    text = "SELECT * FROM <http://x/g> WHERE { GRAPH <http://x/h> { ?s ?p ?o } }"
    assert prepare_query(text, {}, TERMS.parameter) == text
    with pytest.raises(QueryRefusedError):
        prepare_query(text, {}, TERMS.parameter, graph=GRAPH)
