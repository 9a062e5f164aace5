"""Raw queries and S-expressions under a deadline, on an embedded store opened read only, run in
processes that are killed at the deadline (engine.stores.oxigraph_processes): they answer exactly
what the query answers in process (and the S-expression evaluator), on every kind of term and
result; a query past its deadline is stopped, its process gone, and the store answers the next at
once; processes busy past a deadline, killed from outside, orphaned by their parent or left at
close all end, and one still opening the store at a deadline is kept; over HTTP a stopped query
gives its place back at once."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pyoxigraph as ox
import pytest

from engine.errors import InvalidInputError, QueryTimeoutError, StoreError
from engine.graph import Triple
from engine.reference import ReferenceStore
from engine.results import ExecuteResult, QueryResult
from engine.serve.settings import ServeSettings
from engine.stores.oxigraph import OxigraphStore
from engine.stores import oxigraph_processes
from engine.stores.oxigraph_processes import QueryProcesses
from tests.test_fast_decoding import IDS, LITERALS
from tests.cli_process import child_env, gone
from tests.sexpr_graphs import expressions, freebase_graph, read_roles
from tests.test_serve import served
from tests.test_sexpr_execute import _chain, _costly_graph

NS = "http://rdf.freebase.com/ns/"
#: a product of four patterns: hours on a few thousand triples, and no first row before then
RUNAWAY = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?p ?b . ?c ?q ?d . ?e ?r ?f . ?g ?s ?h }"
LINKS = [Triple(f"m.{i}", f"r{i % 5}", f"m.{(i * 7) % 400}") for i in range(2000)]


def _fill(store: OxigraphStore) -> None:
    store.add_triples([Triple(IDS[i % len(IDS)], "r", lit) for i, lit in enumerate(LITERALS)] + LINKS)
    blank = ox.BlankNode("b1")  # the engine never writes blank nodes; another tool may
    store.db.add(ox.Quad(blank, ox.NamedNode(store.terms.iri_of("r")), ox.Literal("from a blank node")))
    store.db.add(ox.Quad(ox.NamedNode(store.terms.iri_of("m.0abc")), ox.NamedNode(store.terms.iri_of("link")), blank))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("ro") / "store")
    with OxigraphStore(path) as store:
        _fill(store)
    return path


@pytest.fixture
def reader(folder) -> Iterator[OxigraphStore]:
    with OxigraphStore(folder, read_only=True) as store:
        yield store


def _pids(store: OxigraphStore) -> set[int]:
    assert store._processes is not None
    return {child.process.pid for child in store._processes._all}


def _ended(pid: int, within: float = 10) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie nobody has reaped) within ``within`` s."""
    deadline = time.monotonic() + within
    while not gone(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _canonical(result: QueryResult) -> QueryResult:
    """Blank node labels numbered in order of appearance: a CONSTRUCT makes new ones each run."""
    labels: dict[str, str] = {}

    def term(value: object) -> object:
        if isinstance(value, str) and value.startswith("_:"):
            return labels.setdefault(value, f"_:{len(labels)}")
        return value

    return QueryResult(result.columns, [[term(v) for v in row] for row in result.rows])


QUERIES = [
    "SELECT ?s ?p ?o WHERE { ?s ?p ?o } ORDER BY ?s ?p ?o",  # every kind of term the store holds
    f"SELECT ?s ?o ?x WHERE {{ ?s <{NS}r> ?o OPTIONAL {{ ?o <{NS}link> ?x }} }} ORDER BY ?s ?o",  # unbound values
    f"SELECT (COUNT(*) AS ?n) (SUM(?one) AS ?sum) WHERE {{ ?s <{NS}r0> ?o BIND(1 AS ?one) }}",
    "SELECT ?s WHERE { ?s ?p ?o } LIMIT 0",
    f"ASK {{ <{NS}m.0abc> <{NS}link> ?b }}",
    f"ASK {{ <{NS}m.0abc> <{NS}nothing> ?b }}",
    f"CONSTRUCT {{ ?s <{NS}seen> _:n . _:n <{NS}value> ?o }} WHERE {{ ?s <{NS}r> ?o }}",
    f"DESCRIBE <{NS}m.0abc>",
    "CONSTRUCT WHERE { ?s ?p ?o }",
    'SELECT ?v WHERE { VALUES ?v { "tab\\there" "中文"@zh 12345678901234567890123 "x"^^<urn:t> } }',
]


@pytest.mark.parametrize("text", QUERIES)
def test_a_query_in_a_process_answers_as_in_this_one(reader, text):
    in_process = reader.query(text)
    assert reader._processes is not None and not _pids(reader)  # no deadline, no process
    in_child = reader.query(text, timeout=60)
    assert _pids(reader)  # it ran in one
    if text.startswith(("CONSTRUCT", "DESCRIBE")):
        assert sorted(map(repr, _canonical(in_child).rows)) == sorted(map(repr, _canonical(in_process).rows))
        assert in_child.columns == in_process.columns
    else:
        assert in_child == in_process
    assert in_process.rows or "LIMIT 0" in text


def test_a_query_past_its_deadline_is_stopped_with_its_process(reader):
    assert reader.query("ASK { ?s ?p ?o }", timeout=30).rows == [[True]]
    (warm,) = _pids(reader)
    started = time.monotonic()
    with pytest.raises(QueryTimeoutError, match=re.escape("timed out after 1 s (its timeout)") + ".*stopped") as caught:
        reader.query(RUNAWAY, timeout=1)
    assert time.monotonic() - started < 1 + 3, caught.value
    assert _ended(warm, within=0) and not _pids(reader)  # killed at the deadline, not left running
    started = time.monotonic()
    assert reader.query(f"SELECT ?o WHERE {{ <{NS}m.1> ?p ?o }}", timeout=30).rows == [["m.7"]]
    assert time.monotonic() - started < 3


def test_bad_text_found_in_the_process_is_invalid_input(reader):
    # the engine's own checks pass it; Oxigraph's parser does not
    with pytest.raises(InvalidInputError, match="invalid SPARQL query: error at 1:"):
        reader.query("SELECT ?x WHERE { ?x <urn:p> }", timeout=30)
    assert reader.query("ASK { ?s ?p ?o }", timeout=30).rows == [[True]]  # the same process goes on


def test_a_query_that_finds_every_process_busy_waits_within_its_deadline(folder):
    processes = QueryProcesses(folder, most=1)
    errors: list[BaseException] = []
    first = threading.Thread(target=lambda: _catch(errors, lambda: processes.ask(RUNAWAY, 3)))
    try:
        first.start()
        time.sleep(0.5)
        with pytest.raises(QueryTimeoutError, match="all 1 query processes were busy until the deadline, so it did not start"):
            processes.ask("ASK { ?s ?p ?o }", 1)
        first.join(10)
        assert len(errors) == 1 and "ran past its deadline and was stopped" in str(errors[0])
        assert processes.ask("ASK { ?s ?p ?o }", 10) == b'S{"head":{},"boolean":true}'  # the slot is free again
    finally:
        processes.close()


def _catch(errors: list[BaseException], call) -> None:
    try:
        call()
    except BaseException as e:  # noqa: BLE001 (the test reads it)
        errors.append(e)


def test_a_process_killed_from_outside_fails_its_query_and_is_replaced(reader):
    reader.query("ASK { ?s ?p ?o }", timeout=30)
    (idle,) = _pids(reader)
    os.kill(idle, signal.SIGKILL)
    os.waitid(os.P_PID, idle, os.WEXITED | os.WNOWAIT)  # until it can be reaped: its threads take a moment to end
    assert reader.query("ASK { ?s ?p ?o }", timeout=30).rows == [[True]]  # an idle one found dead is not asked
    assert idle not in _pids(reader)
    (busy,) = _pids(reader)
    threading.Timer(0.5, os.kill, (busy, signal.SIGKILL)).start()
    with pytest.raises(StoreError, match="the process that ran the query was killed by signal 9 before it answered"):
        reader.query(RUNAWAY, timeout=30)
    assert reader.query("ASK { ?s ?p ?o }", timeout=30).rows == [[True]]


def test_closing_the_store_ends_its_processes_busy_or_idle(folder):
    store = OxigraphStore(folder, read_only=True)
    errors: list[BaseException] = []
    busy = threading.Thread(target=lambda: _catch(errors, lambda: store.query(RUNAWAY, timeout=60)))
    busy.start()
    deadline = time.monotonic() + 10
    while not _pids(store) and time.monotonic() < deadline:
        time.sleep(0.05)
    store.query("ASK { ?s ?p ?o }", timeout=30)  # in a second process, idle after
    pids = _pids(store)
    assert len(pids) == 2 and len(store._processes._idle) == 1
    store.close()
    assert all(_ended(pid) for pid in pids)
    busy.join(10)
    assert not busy.is_alive() and isinstance(errors[0], StoreError) and "killed by signal 9" in str(errors[0])
    with OxigraphStore(folder) as writer:  # and the store is free for a writer
        assert writer.count_triples() > 0


def test_a_process_whose_parent_is_killed_ends(folder, tmp_path):
    parent = textwrap.dedent(f"""
        import threading, time
        from engine.stores.oxigraph import OxigraphStore
        store = OxigraphStore({folder!r}, read_only=True)
        threading.Thread(target=lambda: store.query({RUNAWAY!r}, timeout=600), daemon=True).start()
        while not store._processes._all:
            time.sleep(0.05)
        print(*[c.process.pid for c in store._processes._all], flush=True)
        time.sleep(600)
    """)
    process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, env=child_env())
    try:
        (child,) = map(int, process.stdout.readline().split())  # type: ignore[union-attr]
        assert not _ended(child, within=0.5)  # at work on the query
        process.kill()
        process.wait()
        assert _ended(child)
    finally:
        process.kill()
        process.wait()


def test_over_http_a_stopped_query_gives_its_place_back_at_once(reader):
    with served(reader, ServeSettings(max_concurrency=1, workers=1)) as client:
        started = time.monotonic()
        status, answer = client.request("POST", "/v1/ops/query", {"text": RUNAWAY, "timeout": 1})
        assert status == 504 and "stopped" in answer["detail"] and time.monotonic() - started < 1 + 3, answer
        assert client.op("names", ids=["m.0abc"])["names"] == {"m.0abc": "m.0abc"}  # its place was free at once
        assert not _pids(reader) - {c.process.pid for c in reader._processes._idle}  # nothing still at work


def test_s_expressions_in_a_process_answer_as_the_evaluator(shared_data, tmp_path):
    triples, info = freebase_graph(read_roles(shared_data / "freebase-ontology"), 11)
    with OxigraphStore(str(tmp_path / "store")) as writer:
        writer.add_triples(triples)
    reference = ReferenceStore(triples)
    with OxigraphStore(str(tmp_path / "store"), read_only=True) as store:
        for text in expressions(triples, info, 11):
            assert store.execute(text, timeout=30) == reference.execute(text), text
        assert len(_pids(store)) == 1  # one process answered them all, one after another


def test_an_s_expression_past_its_deadline_is_stopped_with_its_process(tmp_path):
    with OxigraphStore(str(tmp_path / "store")) as writer:
        writer.add_triples(_costly_graph())
    with OxigraphStore(str(tmp_path / "store"), read_only=True) as store:
        assert store.execute("(COUNT (JOIN s m.hub1))", timeout=30) == ExecuteResult([], 3000)
        (warm,) = _pids(store)
        costly = _chain(6)  # hours on Oxigraph
        started = time.monotonic()
        with pytest.raises(QueryTimeoutError, match=re.escape(costly) + ".*timeout of 0.5 s.*stopped"):
            store.execute(costly, timeout=0.5)
        assert time.monotonic() - started < 0.5 + 3
        assert _ended(warm, within=0) and not _pids(store)
        assert store.execute(_chain(2), timeout=30) == store.execute(_chain(2)) == ReferenceStore(_costly_graph()).execute(_chain(2))


def test_a_process_still_opening_the_store_at_a_deadline_is_kept_for_the_next_query(folder, tmp_path, monkeypatch):
    slow = tmp_path / "slow_child.py"  # the child, as it would start on a store that takes 1.5 s to open
    slow.write_text(f"import runpy, time\ntime.sleep(1.5)\nrunpy.run_path({str(oxigraph_processes._CHILD)!r}, run_name='__main__')\n")
    monkeypatch.setattr(oxigraph_processes, "_CHILD", slow)
    with OxigraphStore(folder, read_only=True) as store:
        started = time.monotonic()
        with pytest.raises(QueryTimeoutError, match="still opening the store at the deadline.*did not start"):
            store.query("ASK { ?s ?p ?o }", timeout=0.5)
        assert time.monotonic() - started < 0.5 + 2
        (opening,) = _pids(store)  # not killed: it never had the query
        assert store.query(f"SELECT ?o WHERE {{ <{NS}m.1> ?p ?o }}", timeout=30).rows == [["m.7"]]
        assert _pids(store) == {opening}


def test_a_query_past_the_memory_bound_fails_naming_it_and_the_next_is_answered(folder) -> None:
    """A sorted product of every triple with every triple needs far more than a quarter GiB: its
    process ends at the bound, the call says so, and a new process answers the next query."""
    with OxigraphStore(folder, read_only=True, query_memory_gib=0.25) as store:
        with pytest.raises(InvalidInputError, match=r"more than 0\.25 GiB of memory.*narrow it or add a LIMIT"):
            store.query("SELECT ?a ?c ?d ?f WHERE { ?a ?b ?c . ?d ?e ?f } ORDER BY ?a ?f", timeout=120)
        assert store.query("ASK { ?s ?p ?o }", timeout=30).rows == [[True]]


def test_a_row_bound_is_read_no_further_than_one_row_past_it(reader) -> None:
    """With a row bound, the query process sends the first rows only: the answer is the unbounded
    answer's first rows, cut and said so, for solutions and for triples."""
    every = reader.query("SELECT ?s ?o WHERE { ?s ?p ?o } ORDER BY ?s ?o", timeout=30)
    cut = reader.query("SELECT ?s ?o WHERE { ?s ?p ?o } ORDER BY ?s ?o", timeout=30, limit=7)
    assert (cut.rows, cut.truncated) == (every.rows[:7], True)
    whole = reader.query("SELECT ?s ?o WHERE { ?s ?p ?o } ORDER BY ?s ?o", timeout=30, limit=len(every.rows))
    assert (whole.rows, whole.truncated) == (every.rows, False)
    triples = reader.query("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }", timeout=30, limit=3)
    assert (len(triples.rows), triples.truncated, triples.columns) == (3, True, ["subject", "predicate", "object"])
    big = "SELECT ?a ?d WHERE { ?a ?b ?c . ?d ?e ?f }"  # millions of rows: only four ever leave the process
    assert len(reader.query(big, timeout=60, limit=3).rows) == 3
