"""What a load may never do, on every store: store a triple that is not in the input, merge or
cut terms in silence, destroy its input, or load a file in the wrong format without saying so."""
from __future__ import annotations

import fcntl
import gzip
import json
import os
import random
import shutil
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError
from engine.graph import FREEBASE_NS, Literal, Triple
from engine.reference import ReferenceStore
from engine.store import Store
from loaders.load import load_files
from tests.cli_process import run_kgqa

CLEAN = [Triple(f"m.{i}", "r.a", f"m.{(i * 7919) % 1000}") for i in range(1000)]
CLEAN_TSV = "".join(f"{t.subject}\tr.a\t{t.object}\n" for t in CLEAN).encode()


def stored_edges(store: Store, subjects: list[str]) -> set[Triple]:
    return {e.triple() for e in store.expand(subjects, direction="out").edges}


def test_bit_flips_of_a_gzip_file_never_store_a_wrong_triple(store_kind, make_store, tmp_path):
    """gzip checks its CRC only at the end of the stream; a damaged stream decodes to other
    triples before that (m.692 → r.a → m.493), which must never reach the store."""
    data = gzip.compress(CLEAN_TSV, mtime=0)
    rng = random.Random(16)
    header, trailer = range(10), range(len(data) - 8, len(data))
    positions = sorted({*rng.sample(range(10, len(data) - 8), 40), *rng.sample(header, 4), *rng.sample(trailer, 3)})
    store = make_store(store_kind)
    path = tmp_path / "kb.tsv.gz"
    refused = 0
    for pos in positions:
        flipped = bytearray(data)
        flipped[pos] ^= 1 << rng.randrange(8)
        path.write_bytes(flipped)
        try:
            load_files(store, path, "tsv", rejects_path=tmp_path / "rejects.tsv", progress=False)
        except InvalidInputError as e:
            assert "gzip" in str(e) and str(path) in str(e)
            refused += 1
        # nothing, or exactly the clean input (a flip in the header's time stamp changes no text)
        assert store.count_triples() in (0, len(CLEAN)), f"bit flip at byte {pos} stored other triples"
    assert refused >= 40
    if store.count_triples():
        assert stored_edges(store, [t.subject for t in CLEAN]) == set(CLEAN)


def test_a_corrupt_gzip_fails_the_command_and_loads_nothing(tmp_path, capsys):
    data = bytearray(gzip.compress(CLEAN_TSV, mtime=0))
    data[len(data) // 2] ^= 0x10
    path = tmp_path / "kb.tsv.gz"
    path.write_bytes(data)
    good = tmp_path / "good.tsv"
    good.write_bytes(CLEAN_TSV[:100])
    store = str(tmp_path / "store")
    # the damaged file is named second: it is refused before the first one is loaded either
    assert main(["load", str(good), str(path), "--format", "tsv", "--store", store, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "not intact gzip data" in err and str(path) in err and "nothing was loaded" in err
    assert not os.path.exists(store)  # the store it created for the load is gone again


def test_truncated_gzip_is_refused_before_loading(tmp_path):
    path = tmp_path / "kb.tsv.gz"
    path.write_bytes(gzip.compress(CLEAN_TSV, mtime=0)[:-20])
    store = ReferenceStore()
    with pytest.raises(InvalidInputError, match="truncated"):
        load_files(store, path, "tsv", progress=False)
    assert store.count_triples() == 0


def test_intact_multi_member_gzip_loads(tmp_path):
    half = len(CLEAN_TSV) // 2
    cut = CLEAN_TSV.index(b"\n", half) + 1
    path = tmp_path / "kb.tsv.gz"
    path.write_bytes(gzip.compress(CLEAN_TSV[:cut]) + b"\0\0" + gzip.compress(CLEAN_TSV[cut:]))
    store = ReferenceStore()
    report = load_files(store, path, "tsv", progress=False)
    assert report.loaded == len(CLEAN) and store.triples == set(CLEAN)


@pytest.mark.parametrize("alias", ["same", "relative", "symlink", "hardlink"])
def test_a_rejects_file_that_is_an_input_is_refused_and_the_input_kept(alias, tmp_path, monkeypatch):
    source = tmp_path / "kb.tsv"
    source.write_bytes(CLEAN_TSV + b"a bad line\n")
    monkeypatch.chdir(tmp_path)
    rejects = {
        "same": source,
        "relative": tmp_path / "sub" / ".." / "kb.tsv",
        "symlink": tmp_path / "link.tsv",
        "hardlink": tmp_path / "hard.tsv",
    }[alias]
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.tsv").symlink_to(source)
    (tmp_path / "hard.tsv").hardlink_to(source)
    store = ReferenceStore()
    with pytest.raises(InvalidInputError, match="is the input"):
        load_files(store, source, "tsv", rejects_path=rejects, progress=False)
    assert source.read_bytes() == CLEAN_TSV + b"a bad line\n"
    assert store.count_triples() == 0


def test_the_command_refuses_an_input_as_its_rejects_file(tmp_path, capsys):
    source = tmp_path / "x.nt"
    text = '<http://rdf.freebase.com/ns/m.1> <http://rdf.freebase.com/ns/r> "x" .\nnot n-triples\n'
    source.write_text(text)
    code = main(["load", str(source), "--rejects", str(source), "--store", str(tmp_path / "s"), "--no-progress"])
    assert code == 2 and "is the input" in capsys.readouterr().err
    assert source.read_text() == text


def test_a_rejects_file_inside_the_store_is_refused_and_the_store_kept(tmp_path, capsys):
    source = _with_bad_lines(tmp_path)
    store = tmp_path / "store"
    assert main(["load", str(source), "--store", str(store), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["load", str(source), "--store", str(store), "--rejects", str(store / "CURRENT"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"the rejects file {str(store / 'CURRENT')!r} is inside the store's folder" in err and "outside it" in err
    assert (store / "CURRENT").read_bytes().startswith(b"MANIFEST-")  # RocksDB's, not a rejects line
    assert main(["stats", "--store", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["triples"] == CLEAN_TSV[:200].count(b"\n")


def test_a_rejects_file_overwrites_only_an_earlier_loads_rejects(tmp_path, capsys):
    source = _with_bad_lines(tmp_path)
    precious = tmp_path / "precious.txt"
    precious.write_text("my notes\n")
    store = str(tmp_path / "store")
    assert main(["load", str(source), "--store", store, "--rejects", str(precious), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"the rejects file {str(precious)!r} exists and is not a rejects file of an earlier load" in err
    assert "give --rejects (rejects_path=) a new file, or remove that one first" in err
    assert precious.read_text() == "my notes\n" and not os.path.exists(store)
    # an earlier load's rejects file, and an empty file, are written over
    rejects = tmp_path / "rejects.tsv"
    for before in ("", f"{source}:1\tmalformed\told line\n"):
        rejects.write_text(before)
        assert main(["load", str(source), "--store", store, "--rejects", str(rejects), "--no-progress"]) == 0
        lines = source.read_bytes().count(b"\n")  # the last two are the bad ones
        assert [line.split("\t")[0] for line in rejects.read_text().splitlines()] == [f"{source}:{lines - 1}", f"{source}:{lines}"]


def _with_bad_lines(tmp_path: Path) -> Path:
    source = tmp_path / "in" / "kb.tsv"
    source.parent.mkdir(exist_ok=True)
    source.write_bytes(CLEAN_TSV[:200] + b"a bad line\nanother one\n")
    return source


@pytest.mark.parametrize("where", ["explicit", "default"])
def test_a_rejects_file_that_is_a_symbolic_link_is_refused_and_its_target_kept(where, tmp_path, capsys):
    source = _with_bad_lines(tmp_path)
    store = tmp_path / "store"
    precious = tmp_path / "precious.txt"
    precious.write_text("not the load's to overwrite\n")
    link = tmp_path / "rejects.tsv" if where == "explicit" else tmp_path / "store.rejects.tsv"
    link.symlink_to(precious)
    argv = ["load", str(source), "--store", str(store), "--no-progress"] + (["--rejects", str(link)] if where == "explicit" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"cannot write the rejects file {str(link)!r}: it is a symbolic link" in err and "--rejects" in err
    assert precious.read_text() == "not the load's to overwrite\n"
    assert not store.exists()  # refused before anything was loaded


def test_a_dangling_symbolic_link_as_the_rejects_file_creates_nothing(tmp_path):
    source = _with_bad_lines(tmp_path)
    link = tmp_path / "rejects.tsv"
    link.symlink_to(tmp_path / "elsewhere" / "created.tsv")
    (tmp_path / "elsewhere").mkdir()
    store = ReferenceStore()
    with pytest.raises(InvalidInputError, match="it is a symbolic link, not a regular file"):
        load_files(store, source, "tsv", rejects_path=link, progress=False)
    assert list((tmp_path / "elsewhere").iterdir()) == [] and store.count_triples() == 0


@pytest.mark.parametrize("reader", [False, True])
def test_a_fifo_as_the_rejects_file_is_refused_without_hanging(reader, tmp_path):
    source = _with_bad_lines(tmp_path)
    fifo = tmp_path / "rejects.fifo"
    os.mkfifo(fifo)
    listening = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if reader else None  # someone reads it: still refused
    try:
        # in a process of its own: a load that hangs on the FIFO fails the test at the timeout
        done = run_kgqa("load", str(source), "--rejects", str(fifo), "--store", str(tmp_path / "store"), "--no-progress")
        assert done.returncode == 2 and "it is a FIFO, not a regular file" in done.stderr, done.stderr
        if listening is not None:
            assert os.read(listening, 100) == b""
    finally:
        if listening is not None:
            os.close(listening)


def test_a_load_that_stores_nothing_removes_the_store_it_created_and_only_that(tmp_path, capsys):
    damaged = tmp_path / "kb.tsv.gz"
    data = bytearray(gzip.compress(CLEAN_TSV, mtime=0))
    data[len(data) // 2] ^= 0x10
    damaged.write_bytes(data)
    good = tmp_path / "good.tsv"
    good.write_bytes(b"m.1\tr.a\tm.2\n")
    new = tmp_path / "data" / "stores" / "kb"  # its two parent folders are new too
    assert main(["load", str(damaged), "--store", str(new), "--no-progress"]) == 2
    assert f"removed the new store at {new}" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
    # a folder that was there keeps what it held, and nothing of the failed load
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    assert main(["load", str(damaged), "--store", str(folder), "--no-progress"]) == 2
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    # a store that holds triples is never removed, whatever fails later
    assert main(["load", str(good), "--format", "tsv", "--store", str(new), "--no-progress"]) == 0
    assert main(["load", str(damaged), "--store", str(new), "--no-progress"]) == 2
    capsys.readouterr()
    assert main(["stats", "--store", str(new), "--json"]) == 0
    assert '"triples": 1' in capsys.readouterr().out


NT_LINE = "<http://rdf.freebase.com/ns/m.{0}> <http://rdf.freebase.com/ns/r.a> <http://rdf.freebase.com/ns/m.{1}> .\n"


@pytest.mark.parametrize("name, fmt, looks_like", [
    ("kb.nt", "metaqa", "ntriples"),     # a valid but wrong --format
    ("kb.txt", "tsv", "metaqa"),
    ("kb.nt", None, "tsv"),              # a misleading name: detected as N-Triples, holds TSV
])
def test_a_file_in_another_format_stops_early_and_names_its_format(name, fmt, looks_like, tmp_path, monkeypatch):
    body = {
        "ntriples": "".join(NT_LINE.format(i, i + 1) for i in range(3000)),
        "metaqa": "".join(f"m.{i}|r.a|m.{i + 1}\n" for i in range(3000)),
        "tsv": "".join(f"m.{i}\tr.a\tm.{i + 1}\n" for i in range(3000)),
    }[looks_like]
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    source = tmp_path / name
    source.write_text(body)
    store = ReferenceStore()
    with pytest.raises(InvalidInputError) as e:
        load_files(store, source, fmt, batch_size=10, progress=False)
    message = str(e.value)
    assert str(source) in message and f"--format {looks_like}" in message and "1,000 of its first 1,000" in message
    assert store.count_triples() == 0  # not even the batches read before the verdict
    rejects = elsewhere / (name + ".rejects.tsv")  # in the current directory, not beside the input
    assert len(rejects.read_text().splitlines()) == 1000 and not (tmp_path / (name + ".rejects.tsv")).exists()


def test_a_wrong_format_fails_the_command_on_every_store(store_kind, make_store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the rejects of a store that is not on disk go
    store = make_store(store_kind)
    good = tmp_path / "good.txt"
    good.write_text("a|r|b\n")
    source = tmp_path / "kb.txt"
    source.write_text("".join(NT_LINE.format(i, i + 1) for i in range(20)))
    with pytest.raises(InvalidInputError, match="looks like ntriples"):
        load_files(store, [good, source], "metaqa", progress=False)
    assert store.count_triples() == 1  # the good file before it stays loaded


def test_mostly_good_files_and_the_share_option(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = tmp_path / "kb.txt"
    lines = [f"m.{i}|r.a|m.{i + 1}" if (i + 1) % 5 else "bad line" for i in range(100)]  # 20 % rejected
    source.write_text("\n".join(lines) + "\n")
    report = load_files(ReferenceStore(), source, "metaqa", progress=False)
    assert (report.loaded, report.rejected) == (80, 20)
    assert report.rejects_file == str(tmp_path / "kb.txt.rejects.tsv")
    with pytest.raises(InvalidInputError, match="20 of its first 100 lines"):
        load_files(ReferenceStore(), source, "metaqa", max_reject_share=0.1, progress=False)
    tsv = tmp_path / "kb.tsv"
    tsv.write_text(source.read_text())
    store = str(tmp_path / "store")
    assert main(["load", str(tsv), "--format", "tsv", "--store", store, "--no-progress"]) == 2
    assert "looks like metaqa" in capsys.readouterr().err
    args = ["load", str(tsv), "--format", "tsv", "--store", store, "--no-progress", "--max-reject-share", "1", "--json"]
    assert main(args) == 0
    assert '"rejected": 100' in capsys.readouterr().out


NS = FREEBASE_NS
#: the longest ASCII id each store keeps exactly, measured (engine/limits.py): Virtuoso cuts IRIs
#: (namespace + id) past 1,880 bytes, FalkorDB's index keeps ids of 4,096 bytes
ID_MAX = {"oxigraph": None, "virtuoso": 1880 - len(NS), "bolt": 4096, "neo4j": 8000}
LITERAL_MAX = {"bolt": 16_384}


def _long_id(tag: str, size: int) -> str:
    return f"{tag}-".ljust(size, "x")


def test_a_nul_character_is_a_reject_with_its_line_on_the_bolt_store_and_kept_elsewhere(store_kind, make_store, tmp_path):
    lines = [
        f"<{NS}m.1> <{NS}film.r> <{NS}m.2> .",
        f'<{NS}m.1> <{NS}type.object.name> "plain" .',
        f'<{NS}m.1> <{NS}type.object.name> "a\\u0000b" .',  # valid N-Triples
        f"<{NS}m.3> <{NS}film.r> <{NS}m.4> .",
        f'<{NS}m.3> <{NS}type.object.name> "other" .',
    ]
    source = tmp_path / "nul.nt"
    source.write_text("\n".join(lines) + "\n")
    store = make_store(store_kind)
    rejects = tmp_path / "rejects.tsv"
    report = load_files(store, source, rejects_path=rejects, progress=False)
    names = {e.dst for e in store.expand(["m.1"], ["type.object.name"], direction="out").edges}
    assert {e.dst for e in store.expand(["m.1", "m.3"], ["film.r"], direction="out").edges} == {"m.2", "m.4"}
    assert Literal("other") in {e.dst for e in store.expand(["m.3"], direction="out").edges}
    if store_kind in ("bolt", "neo4j") and store._falkordb:  # type: ignore[attr-defined]
        assert (report.read, report.rejected, store.count_triples()) == (4, 1, 4)
        where, reason, _ = rejects.read_text().splitlines()[0].split("\t", 2)
        assert where == f"{source}:3" and "NUL" in reason
        assert names == {Literal("plain")}
        with pytest.raises(InvalidInputError, match="NUL"):  # the API refuses the whole call, writing none of it
            store.add_triples([Triple("m.9", "film.r", "m.8"), Triple("m.9", "type.object.name", Literal("x\x00"))])
        assert store.count_triples() == 4
    else:
        assert (report.read, report.rejected, store.count_triples()) == (5, 0, 5)
        assert names == {Literal("plain"), Literal("a\x00b")}


def test_terms_beyond_a_stores_limits_are_rejects_and_distinct_terms_never_merge(store_kind, make_store, tmp_path):
    limit = ID_MAX[store_kind] or 5000
    at_limit = [_long_id(f"a{i}", limit) for i in (1, 2)]  # distinct only in their first bytes
    shared = "z" * (limit - 1)
    twins = [shared + "-1", shared + "-2"]  # one byte too long: cut to the limit, they would be one node
    lines = [
        f"s\tr\t{at_limit[0]}",
        f"s\tr\t{at_limit[1]}",
        f"s\tr\t{twins[0]}",
        f"s\tr\t{twins[1]}",
        f"{_long_id('b', 2000)}\tr\tt",  # the 2,000- and 4,000-character ids
        f"{_long_id('c', 4000)}\tr\tt",
        f"{_long_id('d', 10_000)}\tr\tt",
        "s\tr\tshort",
    ]
    source = tmp_path / "long.tsv"
    source.write_text("\n".join(lines) + "\n")
    store = make_store(store_kind)
    rejects = tmp_path / "rejects.tsv"
    load_files(store, source, "tsv", rejects_path=rejects, progress=False)
    kept = [i for i, line in enumerate(lines, 1) if ID_MAX[store_kind] is None or max(map(len, line.split("\t"))) <= limit]
    rejected = [line.split("\t")[0] for line in (rejects.read_text().splitlines() if rejects.exists() else [])]
    assert rejected == [f"{source}:{i}" for i in range(1, len(lines) + 1) if i not in kept]
    # every kept id comes back whole from the short end of its edge, none cut, none merged
    objects = {e.dst for e in store.expand(["s"], direction="out").edges}
    subjects = {e.dst for e in store.expand(["t"], direction="in").edges}
    expected = [line.split("\t") for i, line in enumerate(lines, 1) if i in kept]
    assert objects == {o for s, _, o in expected if s == "s"}
    assert subjects == {s for s, _, o in expected if o == "t"}
    assert store.count_triples() == len(kept)
    if ID_MAX[store_kind] is not None:
        with pytest.raises(InvalidInputError, match="keeps at most"):
            store.add_triples([Triple("s", "r", "fine"), Triple("s", "r", twins[0])])
        assert store.count_triples() == len(kept)


def test_literals_beyond_a_stores_limit_are_rejects(store_kind, make_store, tmp_path):
    limit = {"virtuoso": 10_000_000, "bolt": LITERAL_MAX["bolt"]}.get(store_kind)
    store = make_store(store_kind)
    size = limit or 12_000_000
    values = ["v" * (size - 60_000 if store_kind == "virtuoso" else size), "w" * (size + 1)]
    if store_kind == "virtuoso":
        values[0] = "v" * 1000  # a literal near Virtuoso's 9.9 MB limit takes minutes to load: see engine/limits.py
    lines = [f'<{NS}m.{i}> <{NS}common.topic.description> "{v}" .' for i, v in enumerate(values)]
    source = tmp_path / "lit.nt"
    source.write_text("\n".join(lines) + "\n")
    rejects = tmp_path / "rejects.tsv"
    load_files(store, source, rejects_path=rejects, progress=False)
    stored = {e.dst for e in store.expand(["m.0", "m.1"], direction="out").edges}
    if limit is None:
        assert stored == {Literal(v) for v in values}
        assert not rejects.exists() or rejects.read_text() == ""
    else:
        assert stored == {Literal(values[0])}
        where, reason, _ = rejects.read_text().splitlines()[0].split("\t", 2)
        assert where == f"{source}:2" and "keeps at most" in reason


def _load_list(server) -> list[str]:
    """The files of the server's bulk-load list that lie in its staging directory."""
    store = server.new_store("load-list")
    out = store._isql(f"SELECT 'ROW:' || ll_file FROM DB.DBA.load_list WHERE starts_with(ll_file, '{server.staging}/');")
    return [line[4:] for line in out.splitlines() if line.startswith("ROW:")]


def test_a_killed_virtuoso_load_leaves_nothing_that_later_loads_keep(make_store, servers):
    """A load killed between ld_dir and the end of rdf_loader_run leaves its folder of staged
    files and its rows in DB.DBA.load_list; the next load forgets them, and leaves a live
    load's folder alone."""
    make_store("virtuoso")
    server = servers["virtuoso"]
    store = server.new_store("after-a-kill")
    staging = server.staging

    def staged(name: str, lock: bool) -> tuple[object, int | None]:
        folder = staging / name
        folder.mkdir()
        (folder / "part-00000.ttl").write_text(f"<http://e.org/{name}> <http://e.org/r> <http://e.org/x> .\n")
        held = None
        if lock:  # as a running load holds it
            (folder / "lock").touch()
            held = os.open(folder / "lock", os.O_RDONLY)
            fcntl.flock(held, fcntl.LOCK_EX)
        else:  # as a killed load leaves it: the lock file, free
            (folder / "lock").touch()
        store._isql(f"ld_dir('{folder}', '*.ttl', 'http://kgqa-engine/test/killed');")
        return folder, held

    dead, _ = staged("kgqa-load-killed", lock=False)
    live, held = staged("kgqa-load-running", lock=True)
    gone = "kgqa-load-deleted-by-hand"
    store._isql(f"INSERT INTO DB.DBA.load_list (ll_file, ll_graph, ll_state) VALUES ('{staging}/{gone}/part-00000.ttl', 'http://g', 1);")
    try:
        before = _load_list(server)
        assert any("killed" in f for f in before) and any(gone in f for f in before)
        store.add_triples([Triple("m.1", "r", "m.2")])
        after = _load_list(server)
        assert after == [f"{live}/part-00000.ttl"]  # the running load's row only
        assert not dead.exists() and live.exists()
        assert store.count_triples() == 1
    finally:
        os.close(held)  # type: ignore[arg-type]
        store._isql(f"DELETE FROM DB.DBA.load_list WHERE starts_with(ll_file, '{live}/');")
        shutil.rmtree(live, ignore_errors=True)
