"""``kgqa serve``: the HTTP API over real stores, started with uvicorn on a free loopback port.

Every operation answers over HTTP exactly what the Python API answers on the same store;
bad requests get a 4xx naming what is wrong, never a 500 and never a write; the server's bounds
(token, body size, row bound, deadline, concurrency) hold; ``/v1/answer`` answers with a
registered method; a Virtuoso killed under the server gives 503 within the deadline, and the
server answers again once it is back."""
from __future__ import annotations

import http.client
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from engine.cli.demo import sample_path
from engine.errors import InvalidInputError
from engine.graph import XSD, Literal, Triple
from engine.methods import registry
from engine.methods.run import run_method
from engine.methods.spec import Method, MethodSpec, Models, Prediction, option
from engine.results import to_json
from engine.serve.app import create_app
from engine.serve.client import ServeClient
from engine.serve.ops import OPERATIONS, run_operation
from engine.serve.server import Background
from engine.serve.settings import ServeSettings
from engine.servers.base import free_port
from engine.store import MAX_PARAMETER_DEPTH, Store
from loaders.formats import read_triples
from loaders.questions import Question
from tests.cli_process import run_kgqa, wait_listening
from tests.conftest import missing

GRAPH = [t for t in read_triples(sample_path(), "ntriples") if isinstance(t, Triple)]
NS = "http://rdf.freebase.com/ns/"
YEAR = Literal("1979", XSD + "gYear")


@contextmanager
def served(store: Any, settings: ServeSettings | None = None) -> Iterator[ServeClient]:
    """The API over ``store`` on a free loopback port, and a client of it."""
    with Background(create_app(store, settings), settings=settings) as server, ServeClient(server.url, settings and settings.token) as client:
        yield client


def raw_query(store: Store) -> tuple[str, dict[str, Any]]:
    """A raw query in the store's language: the films ``$d`` directed, with their names."""
    if store.dialect == "sparql":
        return (f"SELECT ?f ?n WHERE {{ ?f <{NS}film.film.directed_by> $d . ?f <{NS}type.object.name> ?n }} ORDER BY ?f",
                {"d": "m.0kq10"})
    return ("MATCH (f:Entity)-[:`film.film.directed_by`]->(d:Entity {id: $d}) RETURN f.id AS f, f.name AS n ORDER BY f",
            {"d": "m.0kq10"})


#: (operation, JSON body, the same call in Python, its result as the API answers it)
CASES: list[tuple[str, dict[str, Any], Callable[[Store], Any]]] = [
    ("relations", {"ids": ["m.0kq01", YEAR.to_json()]}, lambda s: s.relations(["m.0kq01", YEAR])),
    ("relations", {"ids": ["m.0kq10"], "direction": "in", "limit": 1}, lambda s: s.relations(["m.0kq10"], "in", 1)),
    ("expand", {"ids": ["m.0kq01", "m.0kq10"], "relations": ["film.film.directed_by"]},
     lambda s: s.expand(["m.0kq01", "m.0kq10"], ["film.film.directed_by"])),
    ("expand", {"ids": ["m.0kq01"], "direction": "out", "limit": 3}, lambda s: s.expand(["m.0kq01"], None, "out", 3)),
    ("follow_paths", {"seeds": ["m.0kq10"], "path": ["film.film.directed_by", "film.film.genre"]},
     lambda s: s.follow_paths(["m.0kq10"], ["film.film.directed_by", "film.film.genre"])),
    ("follow_paths", {"seeds": ["m.0kq01"], "path": ["film.film.directed_by", "film.film.directed_by"], "distinct_edges": False},
     lambda s: s.follow_paths(["m.0kq01"], ["film.film.directed_by"] * 2, distinct_edges=False)),
    ("subgraph", {"seeds": ["m.0kq01"], "hops": 2}, lambda s: s.subgraph(["m.0kq01"], 2)),
    ("subgraph", {"seeds": ["m.0kq10"], "hops": 1, "direction": "out", "relations": ["people.person.date_of_birth"]},
     lambda s: s.subgraph(["m.0kq10"], 1, "out", ["people.person.date_of_birth"])),
    ("shortest_paths", {"sources": ["m.0kq01"], "targets": ["m.0kq03", "m.0kq61"]},
     lambda s: s.shortest_paths(["m.0kq01"], ["m.0kq03", "m.0kq61"])),
    ("shortest_paths", {"sources": ["m.0kq30"], "targets": ["m.0kq31"], "max_hops": 2, "exclude": []},
     lambda s: s.shortest_paths(["m.0kq30"], ["m.0kq31"], 2, exclude=())),
    ("two_hop_relations", {"ids": ["m.0kq10", YEAR.to_json()], "r1": "film.film.directed_by"},
     lambda s: s.two_hop_relations(["m.0kq10", YEAR], "film.film.directed_by")),
    ("names", {"ids": ["m.0kq01", "m.0kq03", "m.0kq90", "m.nope"]},
     lambda s: {"names": s.names(["m.0kq01", "m.0kq03", "m.0kq90", "m.nope"]), "truncated": False}),
    ("types", {"ids": ["m.0kq10", "m.nope"]}, lambda s: {"types": s.types(["m.0kq10", "m.nope"]), "truncated": False}),
    ("search", {"text": "blade", "mode": "prefix"}, lambda s: s.search("blade", "prefix")),
    ("search", {"text": "o", "mode": "contains", "limit": 2}, lambda s: s.search("o", "contains", 2)),
    ("execute", {"sexpr": "(JOIN (R film.film.directed_by) m.0kq01)"},
     lambda s: {**to_json(s.execute("(JOIN (R film.film.directed_by) m.0kq01)")), "truncated": False}),
    ("execute", {"sexpr": "(COUNT (JOIN film.film.directed_by m.0kq10))"},
     lambda s: {**to_json(s.execute("(COUNT (JOIN film.film.directed_by m.0kq10))")), "truncated": False}),
]


def test_every_operation_answers_over_http_as_the_python_api(store):
    opened = store(GRAPH)
    text, params = raw_query(opened)
    with served(opened) as client:
        assert {name for name, _, _ in CASES} | {"query"} == set(OPERATIONS)
        for name, body, call in CASES:
            expected = to_json(call(opened))
            assert client.op(name, **body) == expected, (name, body)
            assert "truncated" in expected
        truncated = client.op("expand", ids=["m.0kq01"], direction="out", limit=3)
        assert truncated["truncated"] and len(truncated["edges"]) == 3
        result = opened.query(text, params)
        answer = client.op("query", text=text, params=params)
        assert answer == {"columns": result.columns, "rows": to_json(result.rows), "truncated": False}
        assert [row[0] for row in answer["rows"]] == ["m.0kq01", "m.0kq02"]
        cut = client.op("query", text=text, params=params, limit=1)
        assert cut == {"columns": result.columns, "rows": to_json(result.rows[:1]), "truncated": True}
        # a literal parameter, written as the API writes literals
        if opened.dialect == "sparql":
            by_year = f"SELECT ?f WHERE {{ ?f <{NS}film.film.initial_release_date> $y }}"
            assert client.op("query", text=by_year, params={"y": YEAR.to_json()})["rows"] == [["m.0kq02"]]
        assert client.get("/v1/health") == {"status": "ok", "dialect": opened.dialect}
        stats = client.get("/v1/stats")
        assert stats["endpoints"]["expand"]["requests"] == 3 and stats["endpoints"]["expand"]["errors"] == 0
        assert set(stats["endpoints"]["expand"]["latency_ms"]) == {"p50", "p95", "p99", "mean"}


def _writes(store: Store) -> list[str]:
    if store.dialect == "sparql":
        return [
            f"INSERT DATA {{ <{NS}m.x> <{NS}film.film.genre> <{NS}m.y> }}",
            "DELETE WHERE { ?s ?p ?o }",
            "CLEAR ALL",
            f"DELETE {{ ?s ?p ?o }} INSERT {{ ?s ?p <{NS}m.z> }} WHERE {{ ?s ?p ?o }}",
        ]
    return [
        "CREATE (n:Entity {id: 'm.x'}) RETURN n",
        "MATCH (n) DETACH DELETE n",
        "MERGE (n:Entity {id: 'm.y'}) RETURN n.id",
        "MATCH (n:Entity {id: 'm.0kq01'}) SET n.name = 'changed' RETURN n.id",
    ]


def _deep(levels: int, objects: bool = False) -> Any:
    """A string inside ``levels`` lists (with ``objects``, lists and objects by turns)."""
    inner: Any = "m.0kq01"
    for level in range(levels):
        inner = {"k": inner} if objects and level % 2 else [inner]
    return inner


#: bodies every store refuses, with the status and a part of the message
BAD: list[tuple[str, Any, int, str]] = [
    ("expand", {"ids": [""]}, 400, "invalid node id '' at ids[0]"),
    ("expand", {"ids": ["m.1\nm.2"]}, 400, "invalid node id"),
    ("expand", {"ids": [42]}, 422, "ids[0]: Input should be a valid string"),
    ("expand", {"ids": "m.0kq01"}, 422, "ids: Input should be a valid list"),
    ("expand", {"ids": ["m.0kq01"], "relations": ["film film"]}, 400, "invalid relation name 'film film'"),
    ("expand", {"ids": ["m.0kq01"], "direction": "sideways"}, 422, "direction: Input should be 'out', 'in' or 'both'"),
    ("expand", {"ids": ["m.0kq01"], "hops": 2}, 422, "hops: Extra inputs are not permitted"),
    ("expand", {"ids": ["m.0kq01"], "limit": 0}, 422, "limit: Input should be greater than or equal to 1"),
    ("expand", {"ids": ["m.0kq01"], "limit": "unbounded"}, 422, "limit: Input should be a valid integer"),
    ("expand", {"ids": ["m.0kq01"], "limit": 101}, 400, "limit 101 is above this server's maximum of 100 rows"),
    ("expand", {"ids": ["m.0kq01"], "timeout": 11}, 400, "timeout 11 s is above this server's maximum of 10 s"),
    ("expand", ["m.0kq01"], 422, "Input should be a valid dictionary"),
    ("relations", {"ids": [{"value": "x", "datatype": "not an iri"}]}, 400, "invalid datatype IRI"),
    ("follow_paths", {"seeds": ["m.0kq01"], "path": []}, 400, "must have 1 to 8 relations"),
    ("subgraph", {"seeds": ["m.0kq01"], "hops": 99}, 400, "invalid hops 99"),
    ("shortest_paths", {"sources": [f"m.s{i}" for i in range(101)], "targets": [f"m.t{i}" for i in range(1000)]}, 400,
     "101 sources × 1,000 targets make 101,000 pairs; shortest_paths takes at most 100,000"),
    ("search", {"text": " "}, 400, "search text must be a non-empty string"),
    ("execute", {"sexpr": "(JOIN film.film.directed_by"}, 400, "unbalanced parentheses"),
    ("query", {"text": "SELECT ?s WHERE { ?s ?p ?o }", "allow_service": True}, 422, "allow_service: Extra inputs"),
    ("query", {"text": "SELECT ?s WHERE { ?s ?p ?o }", "params": {"x": _deep(500)}}, 400,
     f"params.x: lists and objects nest more than {MAX_PARAMETER_DEPTH} levels deep"),
    ("query", {"text": "SELECT ?s WHERE { ?s ?p ?o }", "params": {"y": _deep(MAX_PARAMETER_DEPTH + 1, objects=True)}}, 400,
     f"params.y: lists and objects nest more than {MAX_PARAMETER_DEPTH} levels deep"),
    ("no_such_operation", {"ids": ["m.0kq01"]}, 404, "unknown operation 'no_such_operation': use one of relations, expand"),
]


def test_a_server_is_refused_bounds_no_store_call_could_take():
    from engine.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="invalid max rows 1,000,000,001: give at most 1,000,000,000"):
        ServeSettings(max_rows=1_000_000_001)
    for name in ("timeout", "answer_timeout"):
        with pytest.raises(InvalidInputError, match=r"1000000000000.0: use a number of seconds above 0 and at most 86,400"):
            ServeSettings(**{name: 1e12})
    bounds = ServeSettings(max_rows=1_000_000_000, timeout=86_400).bounds
    assert (bounds.timeout, bounds.max_rows) == (86_400, 1_000_000_000)


def test_bad_requests_get_a_4xx_with_a_message_and_never_write(store):
    opened = store(GRAPH)
    before = opened.count_triples()
    names = opened.names(["m.0kq01", "m.x", "m.y"])
    settings = ServeSettings(timeout=10, max_rows=100)
    with served(opened, settings) as client:
        for name, body, status, message in BAD:
            got, answer = client.request("POST", f"/v1/ops/{name}", body)
            assert (got, answer["error"] != "InternalError") == (status, True), (name, body, answer)
            assert message in answer["detail"], (name, body, answer)
        for text in _writes(opened):
            got, answer = client.request("POST", "/v1/ops/query", {"text": text})
            assert got in (400, 403) and answer["detail"], (text, answer)
        assert client.request("GET", "/v1/ops/expand")[0] == 405
        got, answer = client.request("POST", "/v1/ops/expand", raw=b'{"ids": [')
        assert got == 422 and "the body is not valid JSON" in answer["detail"]
        for raw, message in [
            (b'{"ids": ' + b"[" * 2000 + b"]" * 2000 + b"}", "the body is not valid JSON: its lists and objects nest too deep"),
            (b'{"ids": ["\xff"]}', "the body is not UTF-8: byte 0xff at position 10"),
            (b'{"ids": [' + b"1" * 5000 + b"]}", "a number in it has more than 4,300 digits"),
        ]:
            got, answer = client.request("POST", "/v1/ops/expand", raw=raw)
            assert (got, answer["error"]) == (422, "RequestBodyError") and message in answer["detail"], answer
    assert opened.count_triples() == before
    assert opened.names(["m.0kq01", "m.x", "m.y"]) == names


def test_a_body_with_many_problems_is_refused_with_the_first_few_and_a_count(oxigraph):
    compact = {"separators": (",", ":")}
    with served(oxigraph) as client:
        status, answer = client.request("POST", "/v1/ops/names", raw=json.dumps({"ids": [0] * 1000}, **compact).encode())
        assert (status, answer["error"]) == (422, "RequestBodyError")
        assert "ids[9]: Input should be a valid string; and 990 more" in answer["detail"]
        assert "ids[10]" not in answer["detail"] and len(answer["detail"]) < 1000
        # a list past the bound is refused as a whole, not item by item
        status, answer = client.request("POST", "/v1/ops/names", raw=json.dumps({"ids": [0] * 500_000}, **compact).encode())
        assert status == 422 and answer["detail"] == "ids: List should have at most 100000 items after validation, not 500000"
        status, answer = client.request("POST", "/v1/answer", {"method": "echo", "questions": [{"topics": [1]}] * 20})
        assert status == 422 and answer["detail"].endswith("; and 30 more") and len(answer["detail"]) < 1500
        assert client.get("/v1/health")["status"] == "ok"


def test_a_raw_query_takes_parameters_nested_as_deep_as_the_store_takes_them(oxigraph):
    text = "SELECT ?x WHERE { VALUES ?x { $x } }"
    with served(oxigraph) as client:
        assert client.op("query", text=text, params={"x": _deep(MAX_PARAMETER_DEPTH)})["rows"] == [["m.0kq01"]]
        status, answer = client.request("POST", "/v1/ops/query", {"text": text, "params": {"x": _deep(MAX_PARAMETER_DEPTH + 1)}})
    assert status == 400 and answer["detail"].startswith(
        f"params.x: lists and objects nest more than {MAX_PARAMETER_DEPTH} levels deep; give a value of at most that depth")


@pytest.fixture(scope="module")
def oxigraph() -> Iterator[Store]:
    from engine.stores.oxigraph import OxigraphStore

    with OxigraphStore(None) as opened:
        opened.add_triples(GRAPH)
        yield opened


def _headers(url: str, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, dict[str, str]]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def test_a_token_guards_every_endpoint_but_health_and_docs(oxigraph):
    with served(oxigraph, ServeSettings(token="s3cret")) as client:
        anonymous, wrong = ServeClient(client.url), ServeClient(client.url, token="guess")
        for path, body in (("/v1/ops/names", {"ids": ["m.0kq01"]}), ("/v1/answer", {"method": "rog", "question": "q"})):
            for other in (anonymous, wrong):
                status, answer = other.request("POST", path, body)
                assert status == 401 and "token" in answer["detail"]
        assert anonymous.request("GET", "/v1/stats")[0] == 401
        assert anonymous.request("GET", "/v1/methods")[0] == 401
        assert anonymous.request("GET", "/v1/health") == (200, {"status": "ok", "dialect": "sparql"})
        assert anonymous.request("GET", "/openapi.json")[0] == 200
        assert _headers(client.url, "POST", "/v1/ops/names", {})[1]["www-authenticate"] == "Bearer"
        assert client.op("names", ids=["m.0kq01"]) == {"names": {"m.0kq01": "Blade Runner"}, "truncated": False}
        anonymous.close()
        wrong.close()


def test_bodies_past_the_limit_get_413_whether_declared_or_streamed(oxigraph):
    with served(oxigraph, ServeSettings(max_body=1000)) as client:
        big = json.dumps({"ids": [f"m.{i}" for i in range(400)]}).encode()
        status, answer = client.request("POST", "/v1/ops/names", raw=big)
        assert status == 413 and "at most 1,000" in answer["detail"]
        host, port = client.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.request("POST", "/v1/ops/names", body=iter([big[:600], big[600:]]), encode_chunked=True,
                           headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        response = connection.getresponse()
        assert response.status == 413 and b"at most 1,000" in response.read()
        connection.close()
        assert client.op("names", ids=["m.0kq02"])["names"] == {"m.0kq02": "Alien"}


def test_a_request_that_fails_is_logged_with_its_paths_control_characters_escaped(oxigraph, caplog):
    """A client's control characters in a path (a terminal escape, a bidi override) reach the
    error log escaped: they drive no terminal and hide nothing."""
    app = create_app(oxigraph)

    @app.get("/fails/{anything}")
    async def fails(anything: str) -> None:
        raise RuntimeError("a bug")

    with caplog.at_level(logging.ERROR, "kgqa.serve"), Background(app) as server, ServeClient(server.url) as client:
        assert client.request("GET", "/fails/%0D%0Aforged%1B%5B31m%E2%80%AE")[0] == 500
    [logged] = [r.getMessage() for r in caplog.records if r.name == "kgqa.serve"]
    assert logged.startswith("GET '/fails/") and "forged\\x1b[31m\\u202e' failed" in logged
    assert not any(c in logged for c in "\r\n\x1b\u202e"), logged


def test_cors_is_off_unless_origins_are_named(oxigraph):
    asked = {"Origin": "http://app.example", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization,content-type"}
    with served(oxigraph) as client:
        _, headers = _headers(client.url, "GET", "/v1/health", {"Origin": "http://app.example"})
        assert "access-control-allow-origin" not in headers
        assert _headers(client.url, "OPTIONS", "/v1/ops/names", asked)[0] == 405
    with served(oxigraph, ServeSettings(cors=("http://app.example",))) as client:
        status, headers = _headers(client.url, "OPTIONS", "/v1/ops/names", asked)
        assert status == 200 and headers["access-control-allow-origin"] == "http://app.example"
        _, headers = _headers(client.url, "GET", "/v1/health", {"Origin": "http://other.example"})
        assert "access-control-allow-origin" not in headers


@pytest.mark.parametrize("given, says", [
    ({"cors": ("app.example",)}, "CORS origin 'app.example' is not an origin"),
    ({"cors": ("http://app.example/",)}, "CORS origin 'http://app.example/' is not an origin"),
    ({"cors": ("http://app.example:port",)}, "CORS origin 'http://app.example:port' is not an origin"),
    ({"dtype": "float8"}, "unknown dtype 'float8'"),
    ({"device": "cuda:99"}, "cuda:99"),  # no machine here has a hundred GPUs
])
def test_settings_refuse_what_would_fail_only_at_a_request(given, says):
    """An origin no browser sends, or a device or dtype no model can load on, is refused before
    the server starts, not at its first answer."""
    with pytest.raises(InvalidInputError, match=re.escape(says)):
        ServeSettings(**given)
    assert ServeSettings(cors=("*", "https://app.example:8443", "http://[::1]:5173")).cors[0] == "*"


def test_kgqa_serve_refuses_a_bad_origin_before_listening(tmp_path):
    result = run_kgqa("serve", "--store", "memory:", "--cors", "localhost:5173", "--port", str(free_port()), timeout=60)
    assert result.returncode == 2 and "CORS origin 'localhost:5173' is not an origin" in result.stderr
    assert "kgqa serve:" not in result.stderr  # it never announced itself listening


class Gated:
    """A store whose ``expand`` waits for :attr:`gate` before it asks the real store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.gate = threading.Event()
        self.waiting = threading.Semaphore(0)

    def expand(self, *args: Any, **kwargs: Any) -> Any:
        self.waiting.release()
        self.gate.wait(30)
        return self.store.expand(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_one_request_past_the_concurrency_limit_gets_429_and_a_stuck_one_504(oxigraph):
    gated = Gated(oxigraph)
    with served(gated, ServeSettings(max_concurrency=1, workers=1)) as client:
        answers: list[tuple[int, Any]] = []
        first = threading.Thread(target=lambda: answers.append(ServeClient(client.url).request(
            "POST", "/v1/ops/expand", {"ids": ["m.0kq01"], "relations": ["film.film.genre"]})))
        first.start()
        assert gated.waiting.acquire(timeout=30)
        status, answer = client.request("POST", "/v1/ops/names", {"ids": ["m.0kq01"]})
        assert status == 429 and "--max-concurrency" in answer["detail"]
        gated.gate.set()
        first.join(30)
        assert answers[0][0] == 200 and len(answers[0][1]["edges"]) == 1
        assert client.op("names", ids=["m.0kq01"])["names"] == {"m.0kq01": "Blade Runner"}
        gated.gate.clear()
        started = time.monotonic()
        status, answer = client.request("POST", "/v1/ops/expand", {"ids": ["m.0kq01"], "timeout": 0.5})
        assert status == 504 and "deadline of 0.5 s" in answer["detail"] and time.monotonic() - started < 5
        assert client.request("POST", "/v1/ops/names", {"ids": ["m.0kq01"]})[0] == 429  # it still holds its place
        gated.gate.set()
        deadline = time.monotonic() + 30
        while client.request("POST", "/v1/ops/names", {"ids": ["m.0kq01"]})[0] == 429 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.op("names", ids=["m.0kq01"])["names"] == {"m.0kq01": "Blade Runner"}
        assert client.get("/v1/stats")["endpoints"]["expand"]["errors_by_status"] == {"504": 1}


class Queued(Gated):
    """A :class:`Gated` store that records the ``timeout`` of each ``names`` call."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.timeouts: list[float] = []

    def names(self, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        self.timeouts.append(timeout)
        return self.store.names(*args, timeout=timeout, **kwargs)


def _in_flight(client: ServeClient, wanted: int) -> int:
    deadline = time.monotonic() + 30
    while (busy := client.get("/v1/stats")["in_flight"]) != wanted and time.monotonic() < deadline:
        time.sleep(0.02)
    return busy


def test_a_call_queued_past_its_deadline_is_not_started_and_a_late_one_gets_the_time_left(oxigraph):
    queued = Queued(oxigraph)
    with served(queued, ServeSettings(workers=1, timeout=10)) as client:
        answers: list[tuple[int, Any]] = []

        def ask(path: str, body: dict[str, Any]) -> threading.Thread:
            thread = threading.Thread(target=lambda: answers.append(ServeClient(client.url).request("POST", path, body)))
            thread.start()
            return thread

        first = ask("/v1/ops/expand", {"ids": ["m.0kq01"], "relations": ["film.film.genre"]})
        assert queued.waiting.acquire(timeout=30)  # the one worker is taken
        status, answer = client.request("POST", "/v1/ops/names", {"ids": ["m.0kq01"], "timeout": 0.5})
        assert status == 504 and "deadline of 0.5 s" in answer["detail"]
        queued.gate.set()
        first.join(30)
        assert _in_flight(client, 0) == 0
        assert queued.timeouts == []  # the queued call was dropped, never asked of the store

        queued.gate.clear()
        first = ask("/v1/ops/expand", {"ids": ["m.0kq01"], "relations": ["film.film.genre"]})
        assert queued.waiting.acquire(timeout=30)
        late = ask("/v1/ops/names", {"ids": ["m.0kq01"], "timeout": 10})
        assert _in_flight(client, 2) == 2  # it waits for the worker
        queued.gate.set()
        first.join(30)
        late.join(30)
        assert sorted(status for status, _ in answers) == [200, 200, 200]
        (given,) = queued.timeouts
        assert 0 < given < 10  # the store got the time left of its deadline, not a fresh 10 s


def test_health_says_ok_while_every_worker_is_busy(oxigraph):
    gated = Gated(oxigraph)
    with served(gated, ServeSettings(workers=1, timeout=2)) as client:
        held = threading.Thread(target=lambda: ServeClient(client.url).request(
            "POST", "/v1/ops/expand", {"ids": ["m.0kq01"], "relations": ["film.film.genre"]}))
        held.start()
        assert gated.waiting.acquire(timeout=30)  # the one worker is taken until the gate opens
        assert client.request("GET", "/v1/health") == (200, {"status": "ok", "dialect": "sparql"})
        assert client.get("/v1/stats")["in_flight"] == 1
        gated.gate.set()
        held.join(30)


def test_the_ops_layer_runs_without_a_web_framework(oxigraph):
    from engine.serve.settings import Bounds

    code = "import sys, engine.serve.ops; sys.exit('fastapi' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    assert run_operation(oxigraph, "names", {"ids": ["m.0kq11"]}, Bounds(5, 10)) == {
        "names": {"m.0kq11": "George Lucas"}, "truncated": False,
    }


# ----------------------------------------------------------------------------- /v1/answer
@dataclass(frozen=True)
class EchoConfig:
    batch_size: int = option(4, "questions answered together")
    style: str = option("name", "what to answer with", choices=("name", "id"))
    label: str | None = option(None, "a file the operator names")


BUILDS: list[EchoConfig] = []


class Echo(Method):
    """Answers each question with its first topic entity (its name or id): one names call per batch."""

    name = "echo"

    def __init__(self, store: Store, models: Models, config: EchoConfig) -> None:
        super().__init__(store, models, config.batch_size)
        self.config = config

    def _answer(self, questions: list[Question]) -> list[Prediction]:
        topics = [q.topic_entities[0] for q in questions]
        names = self.store.names(topics)
        shown = [names[t] if self.config.style == "name" else t for t in topics]
        return [Prediction([s or ""], [t], {"looked_up": t, "label": self.config.label}) for s, t in zip(shown, topics)]


def _build_echo(config: EchoConfig, store: Store, models: Models) -> Echo:
    BUILDS.append(config)
    return Echo(store, models, config)


@pytest.fixture
def echo() -> Iterator[MethodSpec]:
    spec = MethodSpec("echo", "answers with the topic entity", EchoConfig, _build_echo)
    registry.register(spec)
    BUILDS.clear()
    yield spec
    registry.unregister("echo")


def test_answer_runs_a_registered_method_as_the_run_protocol_does(oxigraph, echo):
    settings = ServeSettings(method_options={"echo": {"label": "from-the-operator"}}, max_questions=3)
    questions = [
        {"question": "what is [Blade Runner]", "topics": ["m.0kq01"], "answers": ["Blade Runner"], "id": "a"},
        {"question": "who is [m.0kq10]", "topics": ["m.0kq10"], "answers": ["Ridley Scott"]},
        {"question": "what is [m.gone]", "topics": ["m.gone"]},
    ]
    with served(oxigraph, settings) as client:
        answer = client.answer(method="echo", questions=questions, config={"batch_size": 2})
        asked = [Question(q.get("id", f"q{i}"), q["question"], q.get("answers", []), q["topics"], [])
                 for i, q in enumerate(questions)]
        records: list[dict] = []
        run_method(_build_echo(EchoConfig(batch_size=2, label="from-the-operator"), oxigraph, Models(progress=False)),
                   asked, progress=False, on_record=records.append)
        assert [p["prediction"] for p in answer["predictions"]] == [r["prediction"] for r in records]
        assert [p["prediction"] for p in answer["predictions"]] == [["Blade Runner"], ["Ridley Scott"], [""]]
        assert [p["id"] for p in answer["predictions"]] == ["a", "q1", "q2"]
        assert answer["predictions"][0]["trace"] == {"looked_up": "m.0kq01", "label": "from-the-operator"}
        assert "m.gone not in the store" in answer["predictions"][2]["warning"]
        assert set(answer["seconds"]) == {"store", "model", "other", "total"} and answer["seconds"]["store"] > 0
        assert answer["predictions"][0]["calls"]["store"] == 0.5  # one names call per batch of two
        assert answer["config"] == {"batch_size": 2, "style": "name", "label": "from-the-operator"}
        assert (answer["summary"]["questions"], answer["summary"]["hits1"], answer["summary"]["no_gold"]) == (3, 1.0, 1)
        one = client.answer(method="echo", question="who is it", topics=["m.0kq11"], config={"style": "id", "batch_size": 2})
        assert one["predictions"][0]["prediction"] == ["m.0kq11"]
        client.answer(method="echo", question="again", topics=["m.0kq11"], config={"batch_size": 2})
        assert len(BUILDS) == 3  # two configs, each built once on the server (and one here)
        for body, status, message in [
            ({"method": "echo", "question": "q", "config": {"label": "/etc/passwd"}}, 400,
             "only the server's operator sets: start kgqa serve with --method-option echo.label=VALUE"),
            ({"method": "echo", "question": "q", "config": {"batch_size": "two"}}, 400, "option batch_size='two': give an integer"),
            ({"method": "echo", "question": "q", "config": {"batch_size": 5}}, 400,
             "option batch_size=5 of echo is above this server's 4: a request may only lower it"),
            ({"method": "rog", "question": "q", "config": {"k": 0}}, 400,
             "option k (--plans) = 0: use an integer of at least 1"),  # lowering has a floor too
            ({"method": "echo", "question": "q", "config": {"style": "loud"}}, 400, "use one of name, id"),
            ({"method": "echo", "question": "q", "config": {"sytle": "id"}}, 400, "echo has no option 'sytle'"),
            ({"method": "ehco", "question": "q"}, 400, "unknown method 'ehco': use one of rog, ldr, etd, fidelis, arg, echo"),
            ({"method": "echo"}, 422, "give either question (with topics) or questions"),
            ({"method": "echo", "questions": [{"question": "q"}] * 4}, 400, "at most 3 (--max-questions)"),
            ({"method": "echo", "question": "q", "timeout": 601}, 400, "above this server's maximum of 600 s"),
        ]:
            got, answer = client.request("POST", "/v1/answer", body)
            assert got == status and message in answer["detail"], (body, answer)
        methods = {m["name"]: m for m in client.get("/v1/methods")}
        assert {"rog", "ldr", "etd", "fidelis", "arg", "echo"} <= set(methods)
        settable = {o["name"]: o["settable"] for o in methods["echo"]["options"]}
        assert settable == {"batch_size": True, "style": True, "label": False}
        assert {o["name"]: o["settable"] for o in methods["rog"]["options"]}["model"] is False


def test_answer_refuses_text_that_is_not_unicode_before_any_work(oxigraph, echo):
    asked = {"method": "echo", "question": "who \ud800 directed [Blade Runner]", "topics": ["m.0kq01"]}
    one = {"question": "who directed [Blade Runner]", "topics": ["m.0kq01"]}
    with served(oxigraph) as client:
        for body, where in [
            (asked, "question 'who \\ud800 directed"),
            ({**asked, "question": "q", "topics": ["m.\udc00"]}, "topics[0] "),
            ({"method": "echo", "questions": [one, {**one, "id": "\ud800"}]}, "questions[1].id '\\ud800'"),
            ({"method": "echo", "questions": [{**one, "answers": ["ok", "\ud800"]}]}, "questions[0].answers[1] "),
            ({**asked, "question": "q", "config": {"style": "\udfff"}}, "config.style "),
        ]:
            status, answer = client.request("POST", "/v1/answer", body)
            assert status == 400 and answer["detail"].startswith(where), (body, answer)
            assert "it is not valid Unicode: it holds a lone surrogate" in answer["detail"]
        assert BUILDS == []  # refused before the method was built
        assert client.answer(method="echo", **one)["predictions"][0]["prediction"] == ["Blade Runner"]


def test_answer_bounds_a_questions_length_and_every_number_option_before_any_work(oxigraph, echo):
    settings = ServeSettings(max_rows=1000, method_options={"rog": {"path_limit": "50"}})
    with served(oxigraph, settings) as client:
        for body, status, message in [
            ({"method": "echo", "question": "x" * 10_001, "topics": ["m.0kq01"]}, 400, "… (10,003 characters) is 10,001 characters long; give at most 10,000"),
            ({"method": "echo", "questions": [{"question": "q", "topics": ["m.0kq01"]}, {"question": "x" * 10_001, "topics": ["m.0kq01"]}]},
             400,
             "questions[1].question 'xxx"),
            # an option the server leaves unset (None: the method's own choice) is bounded by --max-rows
            ({"method": "arg", "question": "q", "config": {"k": 10**12}}, 400,
             "option k=1000000000000 of arg is above this server's bound of 1,000 for an option it leaves unset (--max-rows)"),
            ({"method": "etd", "question": "q", "config": {"max_degree": 10**15}}, 400, "option max_degree=1000000000000000 of etd"),
            ({"method": "rog", "question": "q", "config": {"plans_per_question": 10**9}}, 400, "give at most 1,000"),
            ({"method": "rog", "question": "q", "config": {"path_limit": 10**18}}, 400,
             "option path_limit=1000000000000000000 of rog is above this server's 50: a request may only lower it"),
            # null lifts a bound (every path, every edge): not a request's to ask
            ({"method": "rog", "question": "q", "config": {"path_limit": None}}, 400,
             "option path_limit=null of rog would lift this server's 50"),
            ({"method": "fidelis", "question": "q", "config": {"neighbour_limit": None}}, 400,
             "option neighbour_limit=null of fidelis would lift this server's 20000"),
        ]:
            got, answer = client.request("POST", "/v1/answer", body)
            assert got == status and message in answer["detail"], (body, answer)
        assert BUILDS == []
        long = client.answer(method="echo", question="x" * 10_000, topics=["m.0kq01"])
        assert long["predictions"][0]["prediction"] == ["Blade Runner"]


class SlowNames:
    """A store whose ``names`` takes ``delay`` seconds, or waits for :attr:`gate` while
    :attr:`gated`; it counts its calls."""

    def __init__(self, store: Store, delay: float) -> None:
        self.store, self.delay = store, delay
        self.calls = 0
        self.gated, self.gate, self.waiting = False, threading.Event(), threading.Semaphore(0)

    def names(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.gated:
            self.waiting.release()
            self.gate.wait(30)
        time.sleep(self.delay)
        return self.store.names(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_an_answer_stops_at_its_deadline_and_never_holds_up_operations_or_the_next_answer(oxigraph, echo):
    slow = SlowNames(oxigraph, 0.25)
    many = [{"question": f"what is [Blade Runner] {i}", "topics": ["m.0kq01"]} for i in range(16)]
    # one worker thread for operations: an answer at work must not take it
    with served(slow, ServeSettings(workers=1)) as client:
        answers: list[tuple[int, Any]] = []
        late = threading.Thread(target=lambda: answers.append(ServeClient(client.url).request(
            "POST", "/v1/answer", {"method": "echo", "questions": many, "config": {"batch_size": 1}, "timeout": 1.0})))
        started = time.monotonic()
        late.start()
        while not slow.calls and time.monotonic() - started < 30:
            time.sleep(0.01)
        assert client.op("expand", ids=["m.0kq01"], relations=["film.film.genre"])["edges"]  # while it answers
        assert late.is_alive()
        late.join(30)
        (status, answer), = answers
        # each question costs two names calls (the topic look-up, the method's): 8 s for all 16
        assert status == 504 and "deadline" in answer["detail"] and time.monotonic() - started < 5
        stopped_at = slow.calls
        time.sleep(1.0)
        assert slow.calls == stopped_at < 2 * len(many)  # it stopped at its next store call, not at the end
        slow.delay = 0
        assert client.answer(method="echo", question="what is [Alien]", topics=["m.0kq02"])["predictions"][0]["prediction"] == ["Alien"]

        # a request that waits for a method busy with another gives up at its own deadline
        slow.gated = True
        first = threading.Thread(target=lambda: answers.append(ServeClient(client.url).request(
            "POST", "/v1/answer", {"method": "echo", "question": "what is [Alien]", "topics": ["m.0kq02"]})))
        first.start()
        assert slow.waiting.acquire(timeout=30)
        started = time.monotonic()
        status, answer = client.request("POST", "/v1/answer", {"method": "echo", "question": "q", "topics": ["m.0kq01"], "timeout": 0.5})
        assert (status, answer["error"]) == (504, "DeadlineExceededError") and "answering other requests" in answer["detail"]
        assert time.monotonic() - started < 5
        slow.gated = False
        slow.gate.set()
        first.join(30)
        assert answers[-1][0] == 200 and answers[-1][1]["predictions"][0]["prediction"] == ["Alien"]


def test_a_method_being_built_holds_up_only_requests_for_it_and_those_until_their_deadline(oxigraph, echo):
    gate, building = threading.Event(), threading.Semaphore(0)

    def slow_build(config: EchoConfig, store: Store, models: Models) -> Echo:
        building.release()
        gate.wait(30)
        return Echo(store, models, config)

    registry.register(MethodSpec("slow", "builds until its gate opens", EchoConfig, slow_build))
    try:
        with served(oxigraph) as client:
            answers: list[tuple[int, Any]] = []
            first = threading.Thread(target=lambda: answers.append(ServeClient(client.url).request(
                "POST", "/v1/answer", {"method": "slow", "question": "what is it", "topics": ["m.0kq02"]})))
            first.start()
            assert building.acquire(timeout=30)
            # another method builds and answers meanwhile
            assert client.answer(method="echo", question="what is it", topics=["m.0kq01"])["predictions"][0]["prediction"] == ["Blade Runner"]
            status, answer = client.request("POST", "/v1/answer",
                                            {"method": "slow", "question": "q", "topics": ["m.0kq01"], "timeout": 0.5})
            assert (status, answer["error"]) == (504, "DeadlineExceededError") and "being built for another request" in answer["detail"]
            gate.set()
            first.join(30)
            assert answers[0][0] == 200 and answers[0][1]["predictions"][0]["prediction"] == ["Alien"]
            assert client.answer(method="slow", question="q", topics=["m.0kq01"])["predictions"][0]["prediction"] == ["Blade Runner"]
    finally:
        gate.set()
        registry.unregister("slow")


def test_a_failed_build_fails_the_requests_that_waited_for_it_and_a_later_request_builds_again(oxigraph):
    gate, building = threading.Event(), threading.Semaphore(0)
    builds: list[EchoConfig] = []

    def failing_build(config: EchoConfig, store: Store, models: Models) -> Echo:
        builds.append(config)
        building.release()
        gate.wait(30)
        raise InvalidInputError("no model at /nowhere/model: give --method-option failing.model=PATH")

    registry.register(MethodSpec("failing", "its build fails", EchoConfig, failing_build))
    app = create_app(oxigraph)
    question = {"method": "failing", "question": "what is it", "topics": ["m.0kq01"]}
    try:
        with Background(app) as server, ServeClient(server.url) as client:
            answers: list[tuple[int, Any]] = []
            asking = [threading.Thread(target=lambda: answers.append(ServeClient(client.url).request("POST", "/v1/answer", question)))
                      for _ in range(3)]
            asking[0].start()
            assert building.acquire(timeout=30)
            for thread in asking[1:]:
                thread.start()
            waiting = app.state.answerer._building  # the builds under way, and the requests waiting for each
            deadline = time.monotonic() + 30
            while sum(b.waiting for b in list(waiting.values())) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            gate.set()
            for thread in asking:
                thread.join(30)
            assert [(status, answer["error"]) for status, answer in answers] == [(400, "InvalidInputError")] * 3
            assert all("no model at /nowhere/model" in answer["detail"] for _, answer in answers)
            assert len(builds) == 1  # the two that waited got its error, and built nothing
            status, answer = client.request("POST", "/v1/answer", question)
            assert status == 400 and "no model at /nowhere/model" in answer["detail"]
            assert len(builds) == 2  # a later request tries again
    finally:
        gate.set()
        registry.unregister("failing")


def test_a_server_refuses_to_build_a_fidelis_index_and_writes_nothing_beside_the_store(tmp_path):
    from engine.open import open_store

    path = tmp_path / "store"
    with open_store(str(path)) as loaded:
        loaded.add_triples(GRAPH)
    question = {"method": "fidelis", "question": "who directed [Blade Runner]", "topics": ["m.0kq01"], "timeout": 30}
    with open_store(str(path), read_only=True) as opened:
        with served(opened) as client:
            status, answer = client.request("POST", "/v1/answer", question)
            assert status == 400 and f"no FiDeLiS index at {path}.fidelis-index" in answer["detail"], answer
            assert f"`kgqa fidelis index --store {opened.uri}`" in answer["detail"]
            status, answer = client.request("POST", "/v1/answer", {**question, "config": {"rebuild_index": True}})
            assert status == 400 and "a server does not build indexes" in answer["detail"] and "--force" in answer["detail"]
        elsewhere = tmp_path / "elsewhere"
        with served(opened, ServeSettings(method_options={"fidelis": {"index": str(elsewhere)}})) as client:
            status, answer = client.request("POST", "/v1/answer", question)
            assert status == 400 and f"--index {elsewhere}`" in answer["detail"], answer
            assert client.get("/v1/stats")["in_flight"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


@pytest.mark.model
def test_rog_answers_over_http_as_in_process_with_its_default_model(oxigraph):
    config = {"max_hops": 1}
    with served(oxigraph) as client:
        answer = client.answer(method="rog", question="who directed [Blade Runner]", topics=["m.0kq01"], config=config)
    (record,) = answer["predictions"]
    assert record["trace"]["plans"] and record["trace"]["paths"] and record["prediction"]
    assert answer["seconds"]["model"] > 0 and answer["seconds"]["store"] > 0
    spec = registry.get("rog")
    from engine.methods.spec import make_config

    method = spec.build(make_config(spec.config, config), oxigraph, Models(progress=False))
    (expected,) = method.answer([Question("q0", "who directed [Blade Runner]", [], ["m.0kq01"], [])])
    assert record["prediction"] == [str(a) for a in expected.answers]


# ----------------------------------------------------------------------------- a store that dies
@pytest.mark.server
def test_a_virtuoso_killed_under_the_server_gives_503_within_the_deadline_then_recovers(tmp_path):
    from engine.servers import virtuoso
    from engine.servers.base import ServerUnavailable
    from engine.stores.sparql_endpoint import SparqlEndpointStore

    try:
        server = virtuoso.start(tmp_path / "dies")  # its own: the session's server serves other tests
    except ServerUnavailable as e:
        missing(f"Virtuoso cannot start: {e}")
    try:
        loaded = server.new_store("dies")
        loaded.add_triples(GRAPH)
        loaded.add_triples(Triple(f"m.s{i}", f"r{i % 7}", f"m.s{i + 1}") for i in range(3000))
        store = SparqlEndpointStore(server.endpoint, graph=loaded.graph, retries=2, backoff=0.2)
        deadline = 4.0
        with served(store, ServeSettings(timeout=deadline)) as client:
            expected = client.op("expand", ids=["m.0kq01"])
            slow = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f }"
            outcome: list[tuple[int, Any, float]] = []

            def ask_slow() -> None:
                started = time.monotonic()
                status, answer = ServeClient(client.url).request("POST", "/v1/ops/query", {"text": slow})
                outcome.append((status, answer, time.monotonic() - started))

            asking = threading.Thread(target=ask_slow)
            asking.start()
            time.sleep(0.5)  # the query is at work in Virtuoso
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait()
            asking.join(30)
            status, answer, seconds = outcome[0]
            assert status == 503 and answer["error"] == "StoreUnavailableError", answer
            assert seconds < deadline + 2
            started = time.monotonic()
            status, answer = client.request("POST", "/v1/ops/expand", {"ids": ["m.0kq01"]})
            assert status == 503 and server.endpoint in answer["detail"] and time.monotonic() - started < deadline + 2
            assert client.request("GET", "/v1/health")[0] == 503
            server = virtuoso.start(tmp_path / "dies", server.http_port)  # back, on the same port and files
            assert client.request("GET", "/v1/health") == (200, {"status": "ok", "dialect": "sparql"})
            assert client.op("expand", ids=["m.0kq01"]) == expected
    finally:
        server.stop()


def test_kgqa_serve_starts_listens_and_stops(tmp_path, kgqa_script):
    store = tmp_path / "store"
    subprocess.run([str(kgqa_script), "load", sample_path(), "--store", str(store), "--no-progress"], check=True,
                   capture_output=True)
    port = free_port()
    process = subprocess.Popen(
        [str(kgqa_script), "serve", "--store", str(store), "--port", str(port), "--max-rows", "5"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "KGQA_TOKEN": "from-env"},
    )
    try:
        assert "API docs at /docs" in process.stderr.readline()
        wait_listening(process, port)
        with ServeClient(f"http://127.0.0.1:{port}", token="from-env") as client:
            assert client.op("search", text="Alien")["hits"] == [{"id": "m.0kq02", "name": "Alien"}]
            status, answer = client.request("POST", "/v1/ops/expand", {"ids": ["m.0kq01"], "limit": 6})
            assert status == 400 and "maximum of 5 rows" in answer["detail"]
        assert ServeClient(f"http://127.0.0.1:{port}").request("GET", "/v1/stats")[0] == 401
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [(line["path"], line["status"]) for line in lines][-3:] == [
        ("/v1/ops/search", 200), ("/v1/ops/expand", 400), ("/v1/stats", 401),
    ]
    assert "Traceback" not in err
