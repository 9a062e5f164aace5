"""Every call to every store ends, in a clear error when the server does not answer: a server
that takes connections and then says nothing (stopped, or a port that never answers) costs the
store's ``timeout``, never minutes or for ever. Deadlines here are a second or two."""
from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from engine.cli import main
from engine.errors import (
    KGQAError,
    QueryTimeoutError,
    StoreError,
    StoreUnavailableError,
)
from engine.graph import Literal, Triple
from engine.stores.bolt import BoltStore
from engine.stores.sparql_endpoint import SparqlEndpointStore
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
    seconds, error = ends(lambda: store.expand(["a"]))
    assert isinstance(error, StoreUnavailableError) and seconds < 10
    assert f"127.0.0.1:{silent_port}" in str(error)


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
