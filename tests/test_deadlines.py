"""Every call to every store ends, in a clear error when the server does not answer: a server
that takes connections and then says nothing (stopped, or a port that never answers) costs the
store's ``timeout``, never minutes or for ever. Deadlines here are a second or two."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from engine.cli.main import main
from engine.errors import (
    InvalidInputError,
    KGQAError,
    QueryTimeoutError,
    StoreError,
    StoreUnavailableError,
)
from engine.graph import Literal, Triple
from engine.servers.virtuoso import ISQL
from engine.stores.bolt import BoltStore
from engine.stores.oxigraph import OxigraphStore
from engine.stores.sparql_endpoint import SparqlEndpointStore
from engine import timeouts
from engine.timeouts import run_with_timeout, running
from tests.tcp_proxy import TcpProxy

GRAPH = [Triple("a", "r", "b"), Triple("b", "r", "c"), Triple("a", "type.object.name", Literal("A"))]
#: how long a regression may hang before the test calls it one
GUARD_S = 30.0


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that takes connections into its backlog and never answers: a stopped server."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def ends(call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """Seconds ``call`` took and what it raised; fails the test if it is still running after GUARD_S."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 — handed to the test
            outcome["error"] = e

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(GUARD_S)
    assert not worker.is_alive(), f"the call still hangs after {GUARD_S:.0f} s"
    return time.monotonic() - started, outcome.get("error")


# ---------------------------------------------------------------------- Virtuoso
@pytest.fixture
def virtuoso(make_store, servers):
    make_store("virtuoso")  # starts the session's server
    return servers["virtuoso"]


def test_isql_calls_end_at_the_timeout_when_the_sql_port_is_silent(virtuoso, silent_port, tmp_path, capsys):
    store = SparqlEndpointStore(
        virtuoso.endpoint, graph="http://kgqa-engine/test/silent", isql=f"127.0.0.1:{silent_port}",
        staging_dir=str(virtuoso.staging), timeout=1,
    )
    for call in (store.count_triples, lambda: store.add_triples(GRAPH)):
        seconds, error = ends(call)
        assert isinstance(error, StoreUnavailableError) and seconds < 10
        assert f"127.0.0.1:{silent_port}" in str(error) and "did not answer within 1 s" in str(error)
    # `kgqa load` calls isql first: it ends too, with exit status 2
    source = tmp_path / "kb.txt"
    source.write_text("a|r|b\n")
    argv = ["load", str(source), "--store", virtuoso.endpoint, "--no-progress", "--store-option", f"isql=127.0.0.1:{silent_port}",
            "--store-option", f"staging_dir={virtuoso.staging}", "--store-option", "timeout=1"]
    seconds, error = ends(lambda: pytest.fail("") if main(argv) != 2 else None)
    assert error is None and seconds < 10
    assert "did not answer within 1 s" in capsys.readouterr().err


def test_the_bulk_loader_has_a_deadline_of_its_own(virtuoso):
    store = virtuoso.new_store("deadline", load_timeout=0.001)
    seconds, error = ends(lambda: store.add_triples(GRAPH))
    assert isinstance(error, StoreError) and "the bulk load" in str(error) and "load_timeout" in str(error)
    assert seconds < 10
    virtuoso.new_store("deadline").add_triples(GRAPH)  # loading again is safe


def test_http_calls_end_at_the_timeout_when_the_endpoint_is_silent(silent_port):
    store = SparqlEndpointStore(f"http://127.0.0.1:{silent_port}/sparql", timeout=1, retries=1, backoff=0)
    for call in (lambda: store.expand(["a"]), lambda: store.query("ASK {}")):
        seconds, error = ends(call)
        assert isinstance(error, QueryTimeoutError) and seconds < 5
        assert f"timed out after 1 s (the store's timeout=) on http://127.0.0.1:{silent_port}/sparql" in str(error)


# ---------------------------------------------------------------------- raw queries past their deadline
#: 3,000 edges: three copies of them joined on nothing make 2.7e10 rows, hours of work
SLOW_GRAPH = [Triple(f"m.{i}", f"r{i % 7}", f"m.{i + 1}") for i in range(3000)]
MARKER = "slow_7f3a"  # a variable name: how the proxy tells this query's copies apart
SLOW_COUNT = f"SELECT (COUNT(*) AS ?{MARKER}) WHERE {{ ?a ?p ?b . ?c ?q ?d . ?e ?r ?f }}"
SLOW_ROWS = "SELECT * WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f }"


def threads_running(server) -> int:
    """The threads at work in Virtuoso, as its status() reports them (1 when idle: status's own)."""
    report = subprocess.run(
        [ISQL, f"127.0.0.1:{server.sql_port}", "dba", "dba", "exec=status();"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    found = re.search(r"Currently (\d+) threads running", report)
    assert found is not None, report[-500:]
    return int(found.group(1))


def settles(count: Callable[[], int], most: int) -> int:
    """``count()`` once it is at most ``most``, or after GUARD_S if it never gets there."""
    give_up = time.monotonic() + GUARD_S
    while (now := count()) > most and time.monotonic() < give_up:
        time.sleep(0.5)
    return now


def test_a_raw_query_past_its_deadline_is_sent_once_and_virtuoso_stops_it(virtuoso):
    """Slow to run, with retries allowed: the call ends at its deadline saying the query timed
    out, the query went to the server once, the server was told the deadline and stops working
    on it, and answers at once afterwards. The deadline is the store's timeout=, or the call's."""
    loaded = virtuoso.new_store(f"slow{os.getpid()}")
    loaded.add_triples(SLOW_GRAPH)
    with TcpProxy(virtuoso.http_port) as proxy:
        endpoint = f"http://127.0.0.1:{proxy.port}/sparql"
        calls = [
            ({"timeout": 2}, lambda store: store.query(SLOW_COUNT), "the store's timeout="),
            ({"timeout": 60}, lambda store: store.query(SLOW_COUNT, timeout=2), "its timeout"),
        ]
        for options, call, whose in calls:
            store = SparqlEndpointStore(endpoint, graph=loaded.graph, retries=4, backoff=0.01, **options)
            sent = proxy.sent_count(MARKER.encode())
            seconds, error = ends(lambda: call(store))
            assert isinstance(error, QueryTimeoutError) and seconds < 2 + 5, error
            assert f"timed out after 2 s ({whose})" in str(error) and "Virtuoso was told to stop it" in str(error)
            assert settles(lambda: threads_running(virtuoso), 1) == 1  # Virtuoso stopped it
            assert proxy.sent_count(MARKER.encode()) == sent + 1  # and it was sent once
            assert store.query("ASK { ?s ?p ?o }", timeout=5).rows == [[True]]


def test_a_raw_query_past_its_deadline_on_the_embedded_store_ends_and_stops_at_its_next_row(make_store):
    """pyoxigraph cannot cancel a query: the call ends at its deadline, and the abandoned query,
    which yields rows one at a time, stops at its next one instead of running for hours."""
    store = make_store("oxigraph", SLOW_GRAPH)
    before = running()
    seconds, error = ends(lambda: store.query(SLOW_ROWS, timeout=1))
    assert isinstance(error, QueryTimeoutError) and seconds < 1 + 5, error
    assert "timed out after 1 s (its timeout)" in str(error)
    assert settles(running, before) <= before
    # within its deadline a query answers as without one
    ask = "SELECT ?b WHERE { <http://rdf.freebase.com/ns/m.0> ?p ?b }"
    assert store.query(ask, timeout=60) == store.query(ask)
    assert store.query(ask).rows == [["m.1"]]


def test_the_query_command_takes_a_timeout(tmp_path, capsys):
    with OxigraphStore(str(tmp_path / "store")) as store:
        store.add_triples(SLOW_GRAPH)
    argv = ["query", "query", SLOW_ROWS, "--store", str(tmp_path / "store"), "--timeout", "1"]
    seconds, error = ends(lambda: pytest.fail("") if main(argv) != 2 else None)
    assert error is None and seconds < 1 + 5
    assert "timed out after 1 s" in capsys.readouterr().err


def test_a_raw_query_takes_a_timeout_on_every_store(store):
    opened = store(GRAPH)
    text = "MATCH (n) RETURN count(n) AS n" if opened.dialect == "cypher" else "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"
    assert opened.query(text, timeout=60) == opened.query(text)
    for bad in (0, -1, float("nan"), "1", True):
        with pytest.raises(InvalidInputError, match="timeout"):
            opened.query(text, timeout=bad)
    # past a day the waits that enforce a timeout overflow the platform's clock
    assert opened.query(text, timeout=86_400) == opened.query(text)
    for huge, shown in ((86_400.5, "86400.5"), (1e12, "1000000000000.0"), (float("inf"), "inf"),
                        (10**400, "(an integer of 1,329 bits)")):
        for call in (lambda t: opened.query(text, timeout=t), lambda t: opened.execute("(COUNT m.1)", timeout=t),
                     lambda t: opened.expand(["m.1"], timeout=t)):
            with pytest.raises(InvalidInputError, match=re.escape(f"invalid timeout {shown}: use a number of seconds "
                                                                  "above 0 and at most 86,400 (a day)")):
                call(huge)


def test_a_wait_past_the_platforms_clock_is_a_wait_without_end():
    assert run_with_timeout(lambda: "done", 1e12, "test") == "done"
    assert run_with_timeout(lambda: "done", float("inf"), "test") == "done"


# ---------------------------------------------------------------------- FalkorDB (Bolt)
@pytest.fixture
def falkordb(make_store) -> Iterator[tuple[str, Any]]:
    """A FalkorDB server of its own holding GRAPH: its plain Bolt URI, and its process."""
    store = make_store("bolt", GRAPH)
    instance = store._instance  # type: ignore[attr-defined]
    yield f"bolt://127.0.0.1:{instance.bolt_port}", instance.process
    os.kill(instance.process.pid, signal.SIGCONT)


def test_bolt_calls_end_at_the_timeout_when_the_server_stops(falkordb):
    uri, process = falkordb
    store = BoltStore(uri, timeout=1)
    assert store.count_triples() == len(GRAPH)
    os.kill(process.pid, signal.SIGSTOP)
    try:
        for call in (lambda: store.expand(["a"]), lambda: store.add_triples([Triple("x", "r", "y")]),
                     lambda: store.query("MATCH (n) RETURN count(n)"), lambda: store.execute("(JOIN r a)")):
            seconds, error = ends(call)
            assert isinstance(error, QueryTimeoutError) and seconds < 5, error
            assert "did not answer within 1 s" in str(error)
        seconds, error = ends(lambda: BoltStore(uri, timeout=1))
        assert isinstance(error, StoreUnavailableError) and seconds < 8
        seconds, error = ends(store.close)
        assert error is None and seconds < 5
    finally:
        os.kill(process.pid, signal.SIGCONT)
    with BoltStore(uri, timeout=5) as again:  # nothing was lost, and the server still answers
        # (the abandoned write may or may not have run: its connection was closed with the store)
        assert {e.triple() for e in again.expand(["a", "b"], direction="out").edges} == set(GRAPH)


def test_a_falkordb_answer_over_64_kib_ends_in_a_clear_error(falkordb):
    """FalkorDB sends a message over 64 KiB as one chunk whose 16-bit length wraps: the driver
    waits for bytes that never come. The call ends at the store's timeout, saying why."""
    uri, _ = falkordb
    with BoltStore(uri, timeout=1) as store:
        seconds, error = ends(lambda: store.query("RETURN $v AS v", {"v": "v" * 70_000}))
        assert isinstance(error, QueryTimeoutError) and seconds < 5
        assert "64 KiB" in str(error)
        assert store.query("RETURN $v AS v", {"v": "v" * 60_000}).rows == [["v" * 60_000]]
        assert store.count_triples() == len(GRAPH)


def test_a_store_used_by_many_threads_closes_without_blocking_the_next_ones(falkordb):
    uri, _ = falkordb
    store = BoltStore(uri, timeout=2)
    with ThreadPoolExecutor(8) as pool:  # 8 connections in the driver's pool
        counts = list(pool.map(lambda _: store.query("UNWIND range(1, 20000) AS x RETURN count(x)").rows, range(64)))
    assert counts == [[[20000]]] * 64
    store.close()
    for _ in range(2):
        started = time.monotonic()
        with BoltStore(uri, timeout=2) as again:
            assert again.count_triples() == len(GRAPH)
        assert time.monotonic() - started < 1.5


def test_connecting_to_a_silent_bolt_port_ends_at_the_timeout(silent_port):
    seconds, error = ends(lambda: BoltStore(f"bolt://127.0.0.1:{silent_port}", timeout=1))
    assert isinstance(error, KGQAError) and seconds < 8
    assert f"127.0.0.1:{silent_port}" in str(error)


def test_a_bolt_read_the_caller_gave_up_on_is_not_run_again_when_its_connection_drops(falkordb):
    """The driver retries a read whose connection is lost. After the store's deadline has passed
    the caller has its timeout: the abandoned read must not be sent again on a new connection."""
    uri, _ = falkordb
    marker = "abandoned-read-7d1f"
    with TcpProxy(int(uri.rsplit(":", 1)[1])) as proxy, BoltStore(f"bolt://127.0.0.1:{proxy.port}", timeout=1) as store:
        assert store.query("RETURN $m AS m", {"m": marker}).rows == [[marker]]
        proxy.hold()
        seconds, error = ends(lambda: store.query("RETURN $m AS m", {"m": marker}))
        assert isinstance(error, QueryTimeoutError) and seconds < 5
        sent = proxy.sent_count(marker.encode())
        proxy.cut()  # the abandoned read's connection drops; the driver's retry would come ≈ 1 s later
        time.sleep(3)
        assert proxy.sent_count(marker.encode()) == sent
        assert store.query("RETURN $m AS m", {"m": marker}).rows == [[marker]]  # the store still works


CHAIN = [Triple("n0", "r", "n1"), Triple("n1", "r", "n2"), Triple("n2", "r", "n3"), Triple("n3", "r", "n4"),
         Triple("n0", "type.object.name", Literal("start"))]


@pytest.fixture
def ten_seconds_a_call(monkeypatch) -> Callable[[Any], list[float | None]]:
    """``watch(store)``: from now on each call the store makes to its database takes ten
    seconds of the timeouts' clock; returns the list of the timeouts those calls were given."""
    now = [0.0]
    monkeypatch.setattr(timeouts, "time", SimpleNamespace(monotonic=lambda: now[0]))

    def watch(opened: Any) -> list[float | None]:
        given: list[float | None] = []

        def tick(record: Any) -> None:
            given.append(record.op.timeout)
            now[0] += 10

        opened.listeners.append(tick)
        return given

    return watch


def test_an_operation_of_several_queries_shares_one_timeout_among_them(store, ten_seconds_a_call):
    opened = store(CHAIN)
    given = ten_seconds_a_call(opened)
    with pytest.raises(QueryTimeoutError, match=r"^shortest_paths ran past its timeout of 25 s$"):
        opened.shortest_paths(["n0"], ["n4"], max_hops=4, timeout=25)
    assert given == [25, 15, 5]  # one query per depth; the fourth is not started
    del given[:]
    with pytest.raises(QueryTimeoutError, match=r"^subgraph ran past its timeout of 15 s$"):
        opened.subgraph(["n0"], 3, timeout=15)
    assert given == [15, 5]
    del given[:]
    anchors = ["n0", Literal("start")]
    with pytest.raises(QueryTimeoutError, match=r"^relations ran past its timeout of 10 s$"):
        opened.relations(anchors, timeout=10)
    with pytest.raises(QueryTimeoutError, match=r"^two_hop_relations ran past its timeout of 10 s$"):
        opened.two_hop_relations(anchors, "type.object.name", timeout=10)
    assert given == [10, 10]
    del given[:]
    # within the timeout, the answers are those of a call without one
    assert opened.shortest_paths(["n0"], ["n4"], max_hops=4, timeout=45).paths == \
        opened.shortest_paths(["n0"], ["n4"], max_hops=4).paths
    assert given[:4] == [45, 35, 25, 15]
