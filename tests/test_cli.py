"""The `kgqa` command line as a user drives it: demo, load, stats, query <operation> --json, neo4j-import."""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError


NS = "http://rdf.freebase.com/ns/"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def demo_store(tmp_path, capsys) -> str:
    store = str(tmp_path / "demo")
    code, _, _ = run(capsys, "demo", "--store", store)
    assert code == 0
    return store


def test_demo_runs_every_operation(tmp_path, capsys):
    store = str(tmp_path / "demo")
    code, out, _ = run(capsys, "demo", "--store", store)
    assert code == 0
    for section in ("stats", "search", "names", "types", "relations", "expand", "follow_paths", "subgraph",
                    "shortest_paths", "two_hop_relations", "query"):
        assert f"== {section}" in out, section
    assert "Blade Runner" in out and "Harrison Ford" in out and "Ridley Scott" in out
    # the CVT path: Harrison Ford ← performance.actor ← (CVT) ← film.starring ← Blade Runner
    assert "Harrison Ford ← film.performance.actor ← m.0kq90 ← film.film.starring ← Blade Runner" in out
    # a second run finds everything already loaded
    code, out, _ = run(capsys, "demo", "--store", store)
    assert "new 0" in out and "already there 73" in out


def test_load_reports_rejects_and_is_idempotent(tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\nbroken line\nB|s|C\nA|r|B\nC|bad relation!|D\n", encoding="utf-8")
    rejects = tmp_path / "rejects.tsv"
    store = str(tmp_path / "store")
    code, out, _ = run(capsys, "load", str(kb), "--format", "metaqa", "--store", store, "--rejects", str(rejects),
                       "--no-progress", "--json")
    assert code == 0
    report = json.loads(out)
    assert (report["read"], report["loaded"], report["duplicates"], report["rejected"]) == (3, 2, 1, 2)
    lines = rejects.read_text(encoding="utf-8").splitlines()
    assert [line.split("\t")[0] for line in lines] == [f"{kb}:2", f"{kb}:5"]
    code, out, _ = run(capsys, "load", str(kb), "--format", "metaqa", "--store", store, "--rejects", str(rejects),
                       "--no-progress", "--json")
    assert json.loads(out)["loaded"] == 0
    code, out, _ = run(capsys, "stats", "--store", store, "--json")
    assert json.loads(out) == {"triples": 2, "entities": 3, "relations": {"r": 1, "s": 1}}


def test_query_operations_print_json(demo_store, capsys):
    def q(*argv: str):
        code, out, err = run(capsys, "query", *argv, "--store", demo_store, "--json")
        assert code == 0, err
        return json.loads(out)

    assert q("names", "m.0kq01") == {"m.0kq01": "Blade Runner"}
    assert q("types", "m.0kq10")["m.0kq10"] == ["film.director", "people.person"]
    assert {"id": "m.0kq01", "name": "Blade Runner"} in q("search", "blade", "--mode", "prefix")["hits"]
    rows = q("relations", "m.0kq10", "--direction", "in")["rows"]
    assert rows == [{"id": "m.0kq10", "relation": "film.film.directed_by", "direction": "in", "count": 2}]
    edges = q("expand", "m.0kq01", "--relation", "film.film.directed_by")["edges"]
    assert edges == [{"src": "m.0kq01", "relation": "film.film.directed_by", "dst": "m.0kq10", "forward": True}]
    paths = q("follow_paths", "m.0kq10", "--path", "film.film.directed_by,film.film.genre")["paths"]
    assert sorted(p["nodes"][-1] for p in paths) == ["m.0kq40", "m.0kq40", "m.0kq41"]
    assert q("follow-paths", "m.0kq10", "--path", "film.film.directed_by", "--limit", "1")["truncated"] is True
    sub = q("subgraph", "m.0kq01", "--hops", "1")
    assert len(sub["edges"]) == 8
    sp = q("shortest_paths", "--sources", "m.0kq20", "--targets", "m.0kq01", "--max-hops", "3")["paths"]
    assert [(p["relations"], p["forward"]) for p in sp] == [
        (["film.performance.actor", "film.film.starring"], [False, False])
    ]
    # Ford and Scott meet through the film, not through their shared class (schema relations
    # are left out unless asked for)
    sp = q("shortest_paths", "--sources", "m.0kq20", "--targets", "m.0kq10")["paths"]
    assert [p["nodes"] for p in sp] == [["m.0kq20", "m.0kq90", "m.0kq01", "m.0kq10"]]
    sp = q("shortest_paths", "--sources", "m.0kq20", "--targets", "m.0kq10", "--include-schema")["paths"]
    assert [p["nodes"] for p in sp] == [["m.0kq20", "people.person", "m.0kq10"]]
    two = q("two_hop_relations", "m.0kq01", "--r1", "film.film.starring", "--direction", "out")["rows"]
    assert {"id": "m.0kq01", "r1": "film.film.starring", "relation": "film.performance.actor", "direction": "out",
            "count": 2} in two
    rows = q("relations", "--literal", "1979^^http://www.w3.org/2001/XMLSchema#gYear")["rows"]
    assert rows == [{"id": {"value": "1979", "datatype": "http://www.w3.org/2001/XMLSchema#gYear"},
                     "relation": "film.film.initial_release_date", "direction": "in", "count": 1}]
    two = q("two_hop_relations", "--literal", "1979^^http://www.w3.org/2001/XMLSchema#gYear",
            "--r1", "film.film.initial_release_date")["rows"]
    assert {(r["relation"], r["direction"]) for r in two} >= {("film.film.directed_by", "out")}
    result = q("query", "SELECT ?o WHERE { $film <http://rdf.freebase.com/ns/film.film.directed_by> ?o }",
               "--param", "film=m.0kq01")
    assert result == {"columns": ["o"], "rows": [["m.0kq10"]], "truncated": False}
    every = q("query", "SELECT ?s ?o WHERE { ?s <http://rdf.freebase.com/ns/film.film.directed_by> ?o } ORDER BY ?s")
    cut = q("query", "SELECT ?s ?o WHERE { ?s <http://rdf.freebase.com/ns/film.film.directed_by> ?o } ORDER BY ?s",
            "--limit", "1")
    assert len(every["rows"]) > 1 and not every["truncated"]
    assert cut == {"columns": ["s", "o"], "rows": every["rows"][:1], "truncated": True}


def test_errors_name_the_input_and_exit_2(demo_store, capsys):
    code, _, err = run(capsys, "query", "expand", "m.0kq01", "--relation", "x} DROP", "--store", demo_store)
    assert code == 2 and "invalid relation name 'x} DROP'" in err
    code, _, err = run(capsys, "query", "query", "DROP ALL", "--store", demo_store)
    assert code == 2 and "refused" in err
    code, _, err = run(capsys, "query", "relations", "--store", demo_store)
    assert code == 2 and "at least one id or --literal" in err
    code, _, err = run(capsys, "query", "relations", "--literal", "(JOIN r m.1)", "--store", demo_store)
    assert code == 2 and "is not a literal (it reads as a name or an expression, not a value)" in err
    # a text with a space, unquoted: the fix is said; a megabyte of it is not echoed whole
    code, _, err = run(capsys, "query", "relations", "--literal", "hello world", "--store", demo_store)
    assert code == 2 and "'hello world' is not a literal (unexpected text" in err and "'\"hello world\"'" in err
    code, _, err = run(capsys, "query", "relations", "--literal", "a" * 100_000, "--store", demo_store)
    assert code == 2 and "(100,002 characters) is not a literal (invalid class name" in err and len(err) < 1_000
    code, _, err = run(capsys, "query", "expand", "m.0kq01", "--relation", "film.é", "--store", demo_store)
    assert code == 2 and "invalid relation name 'film.é': relation names may contain only ASCII letters" in err
    code, _, err = run(capsys, "load", "no/such/file.nt", "--store", demo_store, "--no-progress")
    assert code == 2 and "no/such/file.nt" in err


def test_bounds_on_limits_timeouts_and_pairs_are_errors_naming_the_value(demo_store, capsys):
    """Past each bound: one line naming the value and what to give, exit 2, no traceback."""
    for argv, message in [
        (["query", "relations", "m.0kq01", "--limit", "18446744073709551616"],
         "invalid limit 18446744073709551616: give a whole number of rows from 1 to 1,000,000,000, or 'unbounded' "
         "for every row; leave it out for the default bound of 100,000 rows"),
        (["query", "relations", "m.0kq01", "--limit", "0"], "invalid limit 0: give a whole number of rows from 1"),
        (["sexpr", "(COUNT m.0kq01)", "--timeout", "1e12"],
         "invalid timeout 1000000000000.0: use a number of seconds above 0 and at most 86,400 (a day)"),
        (["query", "expand", "m.0kq01", "--timeout", "1e300"], "invalid timeout 1e+300: use a number of seconds above 0"),
        (["query", "shortest_paths", "--sources", *[f"m.s{i}" for i in range(400)], "--targets",
          *[f"m.t{i}" for i in range(400)]],
         "400 sources × 400 targets make 160,000 pairs; shortest_paths takes at most 100,000: give at most 100,000 "
         "sources × targets; split the call"),
    ]:
        code, out, err = run(capsys, *argv, "--store", demo_store)
        assert (code, out) == (2, ""), argv
        assert err.startswith(f"kgqa: error: {message}") and err.count("\n") == 1 and "SELECT" not in err, (argv, err)
    code, out, _ = run(capsys, "query", "relations", "m.0kq01", "--limit", "1000000000", "--timeout", "86400",
                       "--store", demo_store, "--json")
    assert code == 0 and json.loads(out)["rows"]


def test_an_empty_store_uri_is_refused_and_an_empty_kgqa_store_is_unset(tmp_path, capsys, monkeypatch):
    from engine.open import open_store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KGQA_STORE", str(tmp_path / "from-env"))
    for uri in ("", "  "):
        code, out, err = run(capsys, "stats", "--store", uri)
        assert (code, out) == (2, "")
        assert f"kgqa: error: invalid store URI {uri!r}: give a directory, memory:" in err
        assert "leave it out for $KGQA_STORE, else kgqa-data/store" in err
        with pytest.raises(InvalidInputError, match="invalid store URI"):
            open_store(uri)
    monkeypatch.setenv("KGQA_STORE", "")
    code, _, err = run(capsys, "stats")
    assert code == 2 and f"no store at {tmp_path / 'kgqa-data' / 'store'}" in err  # the default, as if unset
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_console_script_is_installed(kgqa_script, tmp_path):
    out = subprocess.run([str(kgqa_script), "--help"], capture_output=True, text=True, check=True)
    for command in ("load", "stats", "query", "demo", "bench", "server", "eval"):
        assert f"    {command} " in out.stdout, command
    # the script runs the engine end to end: a load and a query through it
    kb = tmp_path / "kb.tsv"
    kb.write_text("m.a\tr.x\tm.b\n", encoding="utf-8")
    store = str(tmp_path / "store")
    run = lambda *argv: subprocess.run([str(kgqa_script), *argv, "--store", store], capture_output=True, text=True, check=False)
    assert run("load", str(kb), "--no-progress").returncode == 0
    done = run("query", "expand", "m.a", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["edges"] == [{"src": "m.a", "relation": "r.x", "dst": "m.b", "forward": True}]
    done = run("query", "expand", "m.a", "--relation", "x} DROP")
    assert done.returncode == 2 and "invalid relation name 'x} DROP'" in done.stderr


def test_explain_prints_the_compiled_query_without_running_it(demo_store, capsys):
    code, out, _ = run(capsys, "query", "expand", "m.0kq01", "--relation", "film.film.directed_by",
                       "--limit", "5", "--explain", "--store", demo_store, "--json")  # fmt: skip
    assert code == 0
    (call,) = json.loads(out)
    assert call["op"] == "expand" and call["params"] == {"ids": ["m.0kq01"]}
    assert "<http://rdf.freebase.com/ns/film.film.directed_by>" in call["text"] and call["text"].endswith("LIMIT 6")
    code, out, _ = run(capsys, "query", "shortest_paths", "--sources", "m.0kq20", "--targets", "m.0kq01",
                       "--max-hops", "2", "--explain", "--store", demo_store)  # fmt: skip
    assert code == 0 and out.count("-- walks\n") == 2 and '-- parameters: {"pairs": [["m.0kq20", "m.0kq01"]]}' in out
    code, out, _ = run(capsys, "sexpr", "(JOIN (R film.film.directed_by) m.0kq01)", "--explain", "--store", demo_store)
    assert code == 0 and out.startswith("-- execute\nSELECT DISTINCT ?v0 ") and '"p0": "m.0kq01"' in out


def test_limits_can_be_lifted_on_the_command_line(demo_store, capsys):
    code, out, _ = run(capsys, "query", "expand", "m.0kq01", "--limit", "unbounded", "--store", demo_store, "--json")
    assert code == 0 and json.loads(out)["truncated"] is False
    code, out, _ = run(capsys, "query", "expand", "m.0kq01", "--limit", "1", "--store", demo_store, "--json")
    assert code == 0 and json.loads(out)["truncated"] is True and len(json.loads(out)["edges"]) == 1
    with pytest.raises(SystemExit):
        main(["query", "expand", "m.0kq01", "--limit", "lots", "--store", demo_store])


def test_reading_commands_open_only_an_existing_store(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KGQA_STORE", raising=False)
    missing = tmp_path / "kgqa-data" / "mispelled"
    for argv in (["stats", "--store", str(missing)], ["query", "names", "m.1", "--store", str(missing)],
                 ["query", "search", "x"], ["sexpr", "(JOIN r [a])", "--store", "oxigraph:" + str(missing)]):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "", argv
        looked = missing if "--store" in argv else tmp_path / "kgqa-data" / "store"  # the default, from here
        assert f"no store at {looked}: that path does not exist" in err, (argv, err)
        assert "kgqa load" in err
    assert not (tmp_path / "kgqa-data").exists()  # nothing was created
    (tmp_path / "empty").mkdir()
    code, _, err = run(capsys, "stats", "--store", str(tmp_path / "empty"))
    assert code == 2 and "is not an Oxigraph store" in err


def test_load_creates_a_store_and_says_so(tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\n", encoding="utf-8")
    store = tmp_path / "new"
    code, out, err = run(capsys, "load", str(kb), "--format", "metaqa", "--store", str(store), "--no-progress", "--json")
    assert code == 0 and f"creating a new store at {store}" in err
    assert json.loads(out)["loaded"] == 1
    code, out, err = run(capsys, "load", str(kb), "--format", "metaqa", "--store", str(store), "--no-progress")
    assert code == 0 and "creating" not in err
    code, out, _ = run(capsys, "stats", "--store", str(store), "--json")
    assert json.loads(out)["triples"] == 1


@pytest.mark.parametrize("command", ["load", "demo"])
def test_a_store_is_made_only_in_a_new_or_empty_folder(command, tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\n", encoding="utf-8")
    argv = {"load": ["load", str(kb), "--format", "metaqa", "--no-progress"], "demo": ["demo"]}[command]
    # a folder of one's own, even one holding files named as RocksDB names its own
    mine = tmp_path / "mine"
    mine.mkdir()
    held = {"notes.txt": "mine\n", "LOG": "my log\n", "CURRENT": "my current\n"}
    for name, text in held.items():
        (mine / name).write_text(text)
    code, _, err = run(capsys, *argv, "--store", str(mine))
    assert code == 2 and f"{mine} is neither a kgqa store nor empty" in err and "give a new or empty folder" in err
    assert {p.name: p.read_text() for p in mine.iterdir()} == held  # nothing written, renamed or removed
    # an empty folder takes a new store, and the store opens again
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(capsys, *argv, "--store", str(empty))[0] == 0
    assert run(capsys, *argv, "--store", str(empty))[0] == 0


@pytest.mark.parametrize("damage", ["garbled CURRENT", "truncated sst"])
def test_a_damaged_store_is_named_without_a_traceback(damage, demo_store, capsys):
    from pathlib import Path

    folder = Path(demo_store)
    if damage == "garbled CURRENT":
        (folder / "CURRENT").write_text("garbage\n")
    else:
        for sst in folder.glob("*.sst"):
            os.truncate(sst, 10)
    code, out, err = run(capsys, "stats", "--store", demo_store)
    assert code == 2 and out == ""
    assert f"the store at {folder} is damaged: Corruption: " in err
    assert "restore it from a backup or load it again into a new folder" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["stats"],  # the engine's own queries, in this process
        ["query", "query", "SELECT * WHERE { ?s ?p ?o }"],  # a raw query, in this process
        ["query", "query", "SELECT * WHERE { ?s ?p ?o }", "--timeout", "60"],  # a raw query, in a query process
    ],
    ids=["stats", "raw", "raw-in-a-query-process"],
)
def test_a_store_damaged_where_only_a_query_reads_is_named_without_a_traceback(argv, tmp_path, capsys):
    """RocksDB opens a store whose data block is damaged and finds the damage only when a query
    reads that block: it is the same error as damage found at open."""
    kb = tmp_path / "kb.txt"
    kb.write_text("".join(f"entity {i}|relation_{i % 7}|other entity {i * 7}\n" for i in range(5000)), encoding="utf-8")
    folder = tmp_path / "store"
    assert run(capsys, "load", str(kb), "--format", "metaqa", "--store", str(folder), "--no-progress")[0] == 0
    largest = max(folder.glob("*.sst"), key=lambda sst: sst.stat().st_size)
    with open(largest, "r+b") as f:  # the middle of its data blocks, far from its index and footer
        f.seek(largest.stat().st_size // 2)
        f.write(b"\xff" * 200)
    code, out, err = run(capsys, *argv, "--store", str(folder))
    assert code == 2 and out == ""
    assert f"the store at {folder} is damaged: Corruption: " in err and str(largest) in err
    assert "restore it from a backup or load it again into a new folder" in err

def test_demo_refuses_a_store_that_holds_other_data(demo_store, tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\n", encoding="utf-8")
    store = str(tmp_path / "mine")
    assert run(capsys, "load", str(kb), "--format", "metaqa", "--store", store, "--no-progress")[0] == 0
    code, out, err = run(capsys, "demo", "--store", store)
    assert code == 2 and "holds other data (1 triple, not the demo's sample)" in err and "give --store a new folder" in err
    code, out, _ = run(capsys, "stats", "--store", store, "--json")
    assert json.loads(out)["triples"] == 1  # the sample was not added
    code, out, _ = run(capsys, "demo", "--store", demo_store)  # the demo's own store runs again
    assert code == 0 and "already there 73" in out


@pytest.mark.parametrize("command", ["load", "neo4j-import"])
def test_a_reject_share_past_one_is_refused(command, tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\n", encoding="utf-8")
    where = ["--store", str(tmp_path / "s")] if command == "load" else ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as exit_:
        main([command, str(kb), *where, "--max-reject-share", "2"])
    assert exit_.value.code == 2 and "'2': give a fraction from 0 to 1" in capsys.readouterr().err
    assert not (tmp_path / "s").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("operation, flag", [("subgraph", "--hops"), ("shortest_paths", "--max-hops")])
def test_hops_past_the_engines_bound_are_refused_as_arguments(operation, flag, capsys):
    ids = ["m.1"] if operation == "subgraph" else ["--sources", "m.1", "--targets", "m.2"]
    with pytest.raises(SystemExit) as exit_:
        main(["query", operation, *ids, flag, "1000", "--store", "memory:"])
    assert exit_.value.code == 2 and f"argument {flag}: '1000': give a whole number from 1 to 8" in capsys.readouterr().err


def test_neo4j_import_never_writes_over_an_input_or_a_folder_it_did_not_export(tmp_path, capsys):
    data = tmp_path / "ud7"
    data.mkdir()
    nodes = data / "nodes.csv"
    nodes.write_text("A\tr\tB\n", encoding="utf-8")
    (data / "rel-1.csv").write_text("mine\n")
    code, _, err = run(capsys, "neo4j-import", str(nodes), "--format", "tsv", "--out", str(data), "--no-progress")
    assert code == 2 and f"the import directory {str(data)!r} holds the input {str(nodes)!r}" in err
    assert "would destroy the input" in err
    # a folder that holds files of an export's names that no export wrote, or only other files
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "rejects.tsv").write_text("my own table\n")
    (mine / "rel-1.csv").write_text("mine\n")
    code, _, err = run(capsys, "neo4j-import", str(nodes), "--format", "tsv", "--out", str(mine), "--no-progress")
    assert code == 2 and "holds rejects.tsv, which no export wrote" in err and "give --out a new or empty folder" in err
    (mine / "rejects.tsv").unlink()
    (mine / "rel-1.csv").rename(mine / "notes.txt")
    code, _, err = run(capsys, "neo4j-import", str(nodes), "--format", "tsv", "--out", str(mine), "--no-progress")
    assert code == 2 and "is neither empty nor an earlier export (it holds notes.txt)" in err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"] and nodes.read_text() == "A\tr\tB\n"
    # an earlier export is replaced, and a file of one's own beside it stays
    out = tmp_path / "out"
    assert run(capsys, "neo4j-import", str(nodes), "--format", "tsv", "--out", str(out), "--no-progress")[0] == 0
    (out / "notes.txt").write_text("mine\n")
    assert run(capsys, "neo4j-import", str(nodes), "--format", "tsv", "--out", str(out), "--no-progress")[0] == 0
    assert (out / "notes.txt").read_text() == "mine\n"


def test_neo4j_import_writes_the_import_files_and_lists_every_reject(tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    long_id = "€" * 3000  # 9,000 bytes: a valid id, past the 8,000 bytes Neo4j's id index takes
    kb.write_text(f"A|r|B\nbroken line\nB|s|C\nA|r|B\n{long_id}|r|A\n", encoding="utf-8")
    names = tmp_path / "names.nt"
    names.write_text('<http://rdf.freebase.com/ns/A> <http://rdf.freebase.com/ns/type.object.name> "Alpha"@en .\n', encoding="utf-8")
    out = tmp_path / "import"
    code, printed, _ = run(capsys, "neo4j-import", str(kb), str(names), "--out", str(out), "--database", "kgqa",
                           "--no-progress", "--json")
    assert code == 0
    plan = json.loads(printed)
    assert (plan["triples"], plan["duplicates"], plan["rejected"], plan["entities"], plan["literals"]) == (3, 1, 2, 3, 1)
    rejects = (out / "rejects.tsv").read_text(encoding="utf-8").splitlines()
    assert plan["rejects_file"] == str(out / "rejects.tsv")
    assert [line.split("\t")[0] for line in rejects] == [f"{kb}:2", f"{kb}:5"] and "Neo4j" in rejects[1]
    with open(out / "nodes.csv", newline="", encoding="utf-8") as f:
        assert sorted(list(csv.reader(f))[1:]) == [["A", "Alpha", "Entity"], ["B", "", "Entity"], ["C", "", "Entity"]]
    assert plan["command"][:4] == ["neo4j-admin", "database", "import", "full"] and plan["command"][-1] == "kgqa"
    assert plan["schema_command"] == ["cypher-shell", "-d", "kgqa", "-f", str(out / "schema.cypher")]

    # as text: the counts, where the rejects are, and the two command lines to run
    code, printed, _ = run(capsys, "neo4j-import", str(kb), "--format", "metaqa", "--out", str(out), "--no-progress")
    lines = printed.splitlines()
    assert code == 0 and "2 rejected" in lines[0] and lines[1] == f"rejected lines written to {out / 'rejects.tsv'}"
    assert any(line.startswith("neo4j-admin database import full --nodes=") and line.endswith(" neo4j") for line in lines)
    assert f"cypher-shell -d neo4j -f {out / 'schema.cypher'}" in lines
    # an export without rejects leaves no earlier export's rejects behind
    kb.write_text("A|r|B\n", encoding="utf-8")
    code, printed, _ = run(capsys, "neo4j-import", str(kb), "--out", str(out), "--no-progress", "--json")
    assert code == 0 and json.loads(printed)["rejected"] == 0 and not (out / "rejects.tsv").exists()
    # a file in another format than it is read as stops the export, as it stops `kgqa load`: the
    # earlier export stays whole, and the rejects are beside it
    earlier = sorted(p.name for p in out.iterdir())
    kb.write_text("A\tr\tB\nB\ts\tC\n", encoding="utf-8")
    code, _, err = run(capsys, "neo4j-import", str(kb), "--format", "metaqa", "--out", str(out), "--no-progress")
    assert code == 2 and "2 of its first 2 lines were rejected as metaqa" in err and "--format tsv" in err
    beside = tmp_path / "import.rejects.tsv"
    assert "Nothing of this file was exported" in err and f"its rejects are in {beside}" in err
    assert sorted(p.name for p in out.iterdir()) == earlier and len(beside.read_text().splitlines()) == 2
    code, printed, _ = run(capsys, "neo4j-import", str(kb), "--format", "metaqa", "--out", str(out), "--no-progress",
                           "--max-reject-share", "1", "--json")
    assert code == 0 and json.loads(printed)["rejected"] == 2
    assert len((out / "rejects.tsv").read_text().splitlines()) == 2 and not beside.exists()


def test_neo4j_import_that_stops_part_way_leaves_the_earlier_export_whole(tmp_path, capsys):
    good = tmp_path / "good.tsv"
    good.write_text("A\tr\tB\nB\ts\tC\n", encoding="utf-8")
    out = tmp_path / "import"
    assert run(capsys, "neo4j-import", str(good), "--format", "tsv", "--out", str(out), "--no-progress")[0] == 0
    (out / "notes.txt").write_text("mine\n")
    earlier = {p.name: p.read_bytes() for p in out.iterdir()}
    # the first file's triples are written before the second is found to be in another format
    more = tmp_path / "more.tsv"
    more.write_text("D\tr\tE\nF\ts\tG\nH\tt\tI\n", encoding="utf-8")
    bad = tmp_path / "bad.tsv"
    bad.write_text("no tabs here\nnor here\n", encoding="utf-8")
    code, _, err = run(capsys, "neo4j-import", str(more), str(bad), "--format", "tsv", "--out", str(out), "--no-progress")
    assert code == 2 and f"{bad}: 2 of its first 2 lines were rejected as tsv" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv", "good.tsv", "import", "import.rejects.tsv", "more.tsv"]
    # an export that completes replaces the earlier one, and keeps the files of one's own
    code, printed, _ = run(capsys, "neo4j-import", str(more), "--format", "tsv", "--out", str(out), "--no-progress", "--json")
    assert code == 0 and json.loads(printed)["triples"] == 3
    with open(out / "nodes.csv", newline="", encoding="utf-8") as f:
        assert sorted(row[0] for row in list(csv.reader(f))[1:]) == ["D", "E", "F", "G", "H", "I"]
    assert sorted(p.name for p in out.glob("rel-*.csv")) == ["rel-0001-r.csv", "rel-0002-s.csv", "rel-0003-t.csv"]
    assert (out / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv", "good.tsv", "import", "more.tsv"]


def test_sexpr_prints_a_table(demo_store, capsys):
    code, out, _ = run(capsys, "sexpr", "(JOIN (R film.film.directed_by) m.0kq01)", "--store", demo_store)
    assert code == 0 and out.splitlines() == ["m.0kq10\tRidley Scott"]
    code, out, _ = run(capsys, "sexpr", "(COUNT (JOIN film.film.directed_by m.0kq10))", "--store", demo_store)
    assert code == 0 and out.strip() == "count\t2"
    code, out, _ = run(capsys, "sexpr", "(JOIN (R film.film.initial_release_date) m.0kq01)", "--store", demo_store)
    assert code == 0 and "ExecuteResult" not in out and out.count("\t") == 1


def test_sexpr_says_why_its_answer_is_empty(demo_store, capsys):
    """A misspelled relation or an id the store lacks is noted on stderr with the nearest ones,
    in text and --json output alike, instead of a bare (nothing) or a count of 0."""
    code, out, err = run(capsys, "sexpr", "(JOIN (R film.film.directd_by) m.0kq01)", "--store", demo_store)
    assert code == 0 and out.strip() == "(nothing)"
    assert err.splitlines() == [
        "kgqa: note: no edge in the store has the relation 'film.film.directd_by'; nearest: film.film.directed_by, "
        "film.film.genre, film.film.starring"
    ]
    code, out, err = run(capsys, "sexpr", "(JOIN (R film.film.directed_by) m.0kq0x)", "--store", demo_store, "--json",
                         "--timeout", "30")
    assert code == 0 and json.loads(out) == {"answers": [], "count": None}
    assert err.splitlines() == ["kgqa: note: 'm.0kq0x' is not in the store; nearest: m.0kq90, m.0kq92, m.0kq91"]
    code, out, err = run(capsys, "sexpr", "(COUNT (JOIN film.film.directd_by m.0kq10))", "--store", demo_store)
    assert code == 0 and out.strip() == "count\t0" and "'film.film.directd_by'; nearest: film.film.directed_by" in err
    code, out, err = run(capsys, "sexpr", "(JOIN (R film.film.directed_by) m.0kq01)", "--store", demo_store)
    assert code == 0 and out.splitlines() == ["m.0kq10\tRidley Scott"] and err == ""  # an answer: nothing to explain


def test_text_output_escapes_control_characters_in_what_the_store_holds(tmp_path, capsys):
    """A name with a newline, a tab and an ANSI escape stays on its row in text output (written
    as \\n, \\t, \\x1b), and --json gives it exactly."""
    name = "evil\nname\twith\u001b[31mred\u2028end\\n"
    kb = tmp_path / "kb.nt"
    kb.write_text(f'<{NS}m.z> <{NS}type.object.name> {json.dumps(name)}@en .\n'
                  f'<{NS}m.z> <{NS}film.film.directed_by> <{NS}m.y> .\n', encoding="utf-8")
    store = str(tmp_path / "store")
    assert run(capsys, "load", str(kb), "--format", "ntriples", "--store", store, "--no-progress")[0] == 0
    shown = "evil\\nname\\twith\\x1b[31mred\\u2028end\\n"  # a backslash in the name stays as it is
    exact = {"m.z": name}
    for argv, as_json in ((("query", "names", "m.z"), exact),
                          (("query", "search", "evil", "--mode", "prefix"), {"hits": [{"id": "m.z", "name": name}], "truncated": False})):
        code, out, _ = run(capsys, *argv, "--store", store)
        assert (code, out) == (0, f"m.z\t{shown}\n"), argv
        code, out, _ = run(capsys, *argv, "--store", store, "--json")
        assert (code, json.loads(out)) == (0, as_json), argv
    code, out, _ = run(capsys, "query", "expand", "m.y", "--store", store)
    assert code == 0 and out.splitlines() == ["m.y ← film.film.directed_by ← m.z"]


def test_arguments_that_are_not_utf8_get_the_engines_error(demo_store, capsys):
    for bad in ("m.\udcff", "\ud800"):  # an undecodable byte as Python passes it; a lone surrogate
        code, out, err = run(capsys, "query", "names", bad, "--store", demo_store)
        assert code == 2 and out == ""
        assert err.startswith("kgqa: error: the argument") and "not valid UTF-8" in err and "Traceback" not in err


def test_a_path_the_command_cannot_use_is_named_without_a_traceback(tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    kb.write_text("A|r|B\n", encoding="utf-8")
    code, _, err = run(capsys, "neo4j-import", str(kb), "--out", str(kb / "import"), "--no-progress")
    assert code == 2 and err.startswith(f"kgqa: error: cannot use {kb}") and "Traceback" not in err


def test_a_closed_pipe_ends_quietly(demo_store):
    # the reader is gone before anything is written (as `kgqa stats | head` once head has its lines)
    read, write = os.pipe()
    os.close(read)
    process = subprocess.run(
        [sys.executable, "-m", "engine.cli.main", "stats", "--store", demo_store],
        stdout=write, stderr=subprocess.PIPE, check=False, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))},
    )
    os.close(write)
    assert process.returncode == 0 and process.stderr == b""


@pytest.mark.parametrize("uri, kind", [("memory:", "OxigraphStore"), ("http://127.0.0.1:9/sparql", "SparqlEndpointStore"),
                                       ("bolt://127.0.0.1:9", "BoltStore")])
def test_a_store_option_the_store_does_not_take_is_named_with_those_it_does(uri, kind, capsys):
    """Before any connection: the option's name, and the options that kind of store takes."""
    from engine.open import open_store

    assert main(["stats", "--store", uri, "--store-option", "graphs=x"]) == 2
    err = capsys.readouterr().err
    assert f"{kind} takes no option 'graphs': give one of " in err and "namespace" in err and "Traceback" not in err
    with pytest.raises(InvalidInputError, match=f"{kind} takes no option 'graphs'"):
        open_store(uri, graphs="x")


@pytest.mark.parametrize("uri", ["oxigraph:", "oxigraph:  "])
def test_an_embedded_store_uri_without_a_folder_is_refused(uri, capsys, tmp_path, monkeypatch):
    from engine.open import open_store

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="names no folder: give oxigraph:PATH, a directory, or memory:"):
        open_store(uri)
    assert main(["stats", "--store", uri]) == 2
    assert "names no folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing made


@pytest.mark.parametrize("uri, shown, why", [
    ("http://[::1", "http://[::1", "Invalid IPv6 URL"),
    ("bolt://[::1", "bolt://[::1", "Invalid IPv6 URL"),
    ("neo4j://user:secret@[::1", "neo4j://user@[::1", "Invalid IPv6 URL"),  # the password left out
    ("http://h:abc/sparql", "http://h:abc/sparql", "Port could not be cast"),
    ("http://127.0.0.1:99999/sparql", "http://127.0.0.1:99999/sparql", "Port out of range"),
    ("bolt://h:99999", "bolt://h:99999", "Port out of range"),
])
def test_a_server_store_uri_with_a_malformed_host_or_port_is_named(uri, shown, why, capsys, monkeypatch):
    from engine.open import open_store
    from engine.stores.bolt import BoltStore
    from engine.stores.sparql_endpoint import SparqlEndpointStore

    says = f"invalid store URI {shown!r}: {why}"
    with pytest.raises(InvalidInputError, match=re.escape(says)):
        open_store(uri)
    with pytest.raises(InvalidInputError, match=re.escape(says)):  # the constructors check it too
        (BoltStore if uri.startswith(("bolt", "neo4j")) else SparqlEndpointStore)(uri)
    assert main(["stats", "--store", uri]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and "secret" not in err
    monkeypatch.setenv("KGQA_STORE", uri)
    assert main(["stats"]) == 2
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("uri, says", [
    ("kgqa\x00data", "store URI 'kgqa\\x00data' holds a NUL character (U+0000) at position 4; remove it"),
    ("oxigraph:\ud800", "store URI 'oxigraph:\\ud800': it is not valid Unicode: it holds a lone surrogate (U+D800)"),
    ("MEMORY:", "store URI 'MEMORY:' begins with MEMORY:, which is no scheme the engine knows: use memory:"),
    ("memroy:", "begins with memroy:, which is no scheme"),
    ("oxigraph:memory:", "store URI 'oxigraph:memory:' begins with memory:, which is no scheme the engine knows"),
    ("file:/tmp/kgqa", "for a folder whose name holds a colon, write ./file:/tmp/kgqa"),
])
def test_a_store_uri_no_folder_can_be_named_by_is_refused(uri, says, tmp_path, monkeypatch):
    from engine.open import open_store

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError) as e:
        open_store(uri)
    assert says in str(e.value)
    assert list(tmp_path.iterdir()) == []  # nothing made


def test_a_folder_whose_name_holds_a_colon_is_a_store_where_named_as_a_path(tmp_path, monkeypatch):
    from engine.graph import Triple
    from engine.open import open_store

    monkeypatch.chdir(tmp_path)
    with open_store("./data:v2") as store:
        store.add_triples([Triple("a", "r", "b")])
    with open_store("data:v2", read_only=True) as store:  # there now: a folder, not a scheme
        assert store.count_triples() == 1


def test_python_entry_points_name_an_argument_of_the_wrong_kind():
    from engine.models.loading import load_lm
    from engine.open import open_store
    from loaders.load import load_files

    with pytest.raises(InvalidInputError, match="expected a list of input files as paths, got None"):
        load_files(open_store("memory:"), None, "ntriples")
    with pytest.raises(InvalidInputError, match="language model 5: name it by a path"):
        load_lm(5)


def test_a_device_torch_cannot_use_here_is_named(tmp_path, monkeypatch, capsys):
    import re

    import torch

    from engine.models.device import pick_device

    for device, says in (("tpu", "device 'tpu' is not a torch device: use cpu, cuda or cuda:N"), ("cuda:99", "device cuda:99: "),
                         ("mps" if not torch.backends.mps.is_available() else "tpu", "device ")):
        with pytest.raises(InvalidInputError, match=re.escape(says)):
            pick_device(device)
    assert pick_device("cpu") == "cpu"
    monkeypatch.setenv("KGQA_DEVICE", "gpu")
    pick_device.cache_clear()
    try:
        with pytest.raises(InvalidInputError, match=re.escape("$KGQA_DEVICE 'gpu' is not a torch device")):
            pick_device()
    finally:
        pick_device.cache_clear()
    monkeypatch.delenv("KGQA_DEVICE")
    # a command names it before any work: here before a recipe loads a store
    assert main(["reproduce", "rog", "--quick", "--device", "tpu", "--workdir", str(tmp_path / "work")]) == 2
    assert "device 'tpu' is not a torch device" in capsys.readouterr().err and not (tmp_path / "work").exists()
    (tmp_path / "file").write_text("")
    assert main(["reproduce", "rog", "--quick", "--device", "cpu", "--workdir", str(tmp_path / "file")]) == 2
    assert f"--workdir {tmp_path / 'file'} is a file" in capsys.readouterr().err
