"""Who may open an embedded store at once: any number of readers in any number of processes,
or one writer; a command that is refused says which process holds the store."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError, StoreError, StoreUnavailableError
from engine.graph import Triple
from engine.open import open_store
from tests.cli_process import ROOT, child_env, run_kgqa

#: a process that opens the store (argv[1]) as argv[2] says, reports "ready" and holds it
#: until its stdin closes
HOLDER = """
import sys
path, how = sys.argv[1], sys.argv[2]
if how == "pyoxigraph":  # a writer that is not the engine: only RocksDB's own lock
    import pyoxigraph
    store = pyoxigraph.Store(path)
else:
    from engine.open import open_store
    store = open_store(path, read_only=how == "read")
print("ready", flush=True)
sys.stdin.read()
"""


@contextmanager
def held(store: str, how: str) -> Iterator[int]:
    """The pid of another process that holds ``store`` open (``read``, ``write`` or ``pyoxigraph``)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env=child_env(),
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield process.pid
    finally:
        process.stdin.close()  # type: ignore[union-attr]
        process.wait(timeout=60)


@pytest.fixture
def store(tmp_path) -> str:
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\nB|r|C\n", encoding="utf-8")
    path = str(tmp_path / "store")
    assert main(["load", str(kb), "--format", "metaqa", "--store", path, "--no-progress"]) == 0
    return path


def more_triples(tmp_path: Path) -> str:
    kb = tmp_path / "more.txt"
    kb.write_text("C|r|D\n", encoding="utf-8")
    return str(kb)


def test_processes_read_one_store_at_once(store, tmp_path):
    with open_store(store, read_only=True) as mine, held(store, "read"):
        done = run_kgqa("query", "expand", "A", "--store", store, "--json")
        assert done.returncode == 0, done.stderr
        assert [edge["dst"] for edge in json.loads(done.stdout)["edges"]] == ["B"]
        done = run_kgqa("stats", "--store", store, "--json")
        assert done.returncode == 0 and '"triples": 2' in done.stdout, done.stderr
        assert mine.count_triples() == 2 and mine.read_only


def test_a_load_is_refused_while_the_store_is_read_and_names_the_reader(store, tmp_path, capsys):
    with held(store, "read") as reader:
        assert main(["load", more_triples(tmp_path), "--format", "metaqa", "--store", store, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"is open in process {reader} (" in err and "writing into it needs it to itself" in err
    # what the reader saw is all there was while it read; once it is gone the load goes in
    assert main(["load", more_triples(tmp_path), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    with open_store(store, read_only=True) as reopened:
        assert reopened.count_triples() == 3


def test_a_store_being_written_refuses_readers_and_writers_and_names_the_writer(store, tmp_path, capsys):
    with held(store, "write") as writer:
        assert main(["load", more_triples(tmp_path), "--format", "metaqa", "--store", store, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"process {writer} (" in err and "wait until" in err
        assert main(["query", "names", "A", "--store", store]) == 2
        err = capsys.readouterr().err
        assert f"is being written by process {writer} (" in err and "wait until it is done" in err
    assert main(["query", "names", "A", "--store", store]) == 0


def test_a_writer_outside_the_engine_is_named_too(store, tmp_path, capsys):
    with held(store, "pyoxigraph") as writer:
        assert main(["stats", "--store", store]) == 2
        assert f"is open for writing in process {writer} (" in capsys.readouterr().err
        assert main(["load", more_triples(tmp_path), "--format", "metaqa", "--store", store, "--no-progress"]) == 2
        assert f"It is open for writing in process {writer} (" in capsys.readouterr().err


def test_a_read_only_store_is_never_created_nor_written(store, tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(StoreUnavailableError, match="does not exist"):
        open_store(str(missing), read_only=True)
    assert not missing.exists()
    with open_store(store, read_only=True) as reader:
        with pytest.raises(StoreError, match="open read only"):
            reader.add_triples([Triple("X", "r", "Y")])
        assert reader.count_triples() == 2
        with pytest.raises(StoreUnavailableError, match="this process"):  # one process, two opens: still refused
            open_store(store)


def test_a_closed_store_says_so_and_keeps_its_data(store):
    """A store used after close() raises a StoreError naming it, not an AttributeError from
    inside the engine; what it holds is still there when it is opened again."""
    for uri in (store, "memory:"):
        closed = open_store(uri)
        closed.close()
        for call in (lambda: closed.expand(["A"]), closed.count_triples, closed.stats,
                     lambda: closed.query("SELECT * WHERE { ?s ?p ?o }"),
                     lambda: closed.add_triples([Triple("X", "r", "Y")])):
            with pytest.raises(StoreError, match=f"the store {re.escape(closed.uri)} is closed: open it again"):
                call()
        closed.close()  # closing again is harmless
    with open_store(store, read_only=True) as reopened:
        assert reopened.count_triples() == 2


def test_a_flag_given_as_a_string_is_refused_before_anything_is_made(tmp_path):
    """``read_only="no"`` would be truthy, opening the store read only; ``create="no"`` would
    make a store where none should be."""
    for option in ("create", "read_only"):
        with pytest.raises(InvalidInputError, match=f"invalid {option} 'no': use True or False"):
            open_store(str(tmp_path / "new"), **{option: "no"})
    assert list(tmp_path.iterdir()) == []
