"""The load driver, against the plain-Python reference store."""
from __future__ import annotations

import gzip
from collections.abc import Iterable
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError, KGQAWarning
from engine.graph import Literal, Triple
from engine.open import open_store
from engine.reference import ReferenceStore
from engine.results import LoadReport, to_json
from loaders.formats import FORMATS
from loaders.load import load_files
from loaders.tabular import read_metaqa

DATA = Path(__file__).parent / "data"

TSV = (
    "a\tr\tb\n"
    "a\tr\tc\n"
    "bad line\n"
    "a\tr\tb\n"  # a duplicate within the file
    "c\tr\td\n"
    "x\tnot a relation\ty\n"
    "d\tr\te\n"
)
TSV_TRIPLES = {Triple("a", "r", "b"), Triple("a", "r", "c"), Triple("c", "r", "d"), Triple("d", "r", "e")}


class BatchSpy(ReferenceStore):
    """A reference store that remembers the size of every batch it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def add_triples(self, triples: Iterable[Triple]) -> None:
        triples = list(triples)
        if triples:
            self.batches.append(len(triples))
        super().add_triples(triples)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_report_numbers_and_rejects_file(tmp_path):
    source = write(tmp_path / "kb.tsv", TSV)
    store = ReferenceStore()
    rejects = tmp_path / "out" / "rejects.tsv"
    rejects.parent.mkdir()
    report = load_files(store, source, "tsv", rejects_path=rejects, progress=False)
    assert (report.read, report.loaded, report.duplicates, report.rejected) == (5, 4, 1, 2)
    assert report.rejects_file == str(rejects)
    assert report.seconds > 0
    assert store.triples == TSV_TRIPLES
    lines = rejects.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert lines[0] == f"{source}:3\texpected subject<TAB>relation<TAB>object, found 1 field(s)\tbad line"
    where, reason, text = lines[1].split("\t", 2)
    assert where == f"{source}:6"
    assert "invalid relation name 'not a relation'" in reason
    assert text == "x\tnot a relation\ty"


def test_loading_twice_changes_nothing_and_reports_duplicates(tmp_path):
    source = write(tmp_path / "kb.tsv", TSV)
    store = ReferenceStore()
    first = load_files(store, [source], "tsv", rejects_path=tmp_path / "r1.tsv", progress=False)
    snapshot = set(store.triples)
    second = load_files(store, [source], "tsv", rejects_path=tmp_path / "r2.tsv", progress=False)
    assert store.triples == snapshot
    assert (second.read, second.loaded, second.duplicates, second.rejected) == (5, 0, 5, 2)
    assert first.loaded == 4


def test_default_rejects_file_only_when_there_are_rejects_and_never_beside_the_inputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inputs = tmp_path / "in"  # a data folder: the load has no business writing into it
    inputs.mkdir()
    clean = write(inputs / "clean.tsv", "a\tr\tb\n")
    report = load_files(ReferenceStore(), clean, progress=False)
    assert report.rejected == 0 and report.rejects_file is None
    assert list(tmp_path.glob("**/*.rejects.tsv")) == []

    dirty = write(inputs / "dirty.tsv", TSV)
    report = load_files(ReferenceStore(), [dirty, clean], progress=False)
    expected = tmp_path / "dirty.tsv.rejects.tsv"  # a store that is not on disk: the current directory
    assert report.rejects_file == str(expected)
    assert len(expected.read_text().splitlines()) == 2
    with open_store(str(tmp_path / "stores" / "kb")) as store:  # an embedded store: beside it
        report = load_files(store, [dirty, clean], progress=False)
    expected = tmp_path / "stores" / "kb.rejects.tsv"
    assert report.rejects_file == str(expected)
    assert len(expected.read_text().splitlines()) == 2
    assert sorted(p.name for p in inputs.iterdir()) == ["clean.tsv", "dirty.tsv"]


def test_explicit_rejects_file_is_written_even_when_empty(tmp_path):
    rejects = write(tmp_path / "rejects.tsv", "old.tsv:3\tmalformed line\tstale content from an earlier run\n")
    report = load_files(ReferenceStore(), write(tmp_path / "kb.tsv", "a\tr\tb\n"), rejects_path=rejects, progress=False)
    assert report.rejects_file == str(rejects)
    assert rejects.read_text() == ""


def test_batches(tmp_path):
    source = write(tmp_path / "kb.txt", "".join(f"e{i}|r|e{i + 1}\n" for i in range(25)))
    store = BatchSpy()
    report = load_files(store, source, "metaqa", batch_size=10, progress=False)
    assert store.batches == [10, 10, 5]
    assert report.loaded == 25
    with pytest.raises(InvalidInputError, match="batch_size"):
        load_files(store, source, batch_size=0, progress=False)


def test_a_file_holding_no_triple_is_said_and_the_other_files_load(tmp_path, capsys):
    empty, comments = write(tmp_path / "empty.txt", ""), write(tmp_path / "comments.nt", "# a header only\n\n")
    kb = write(tmp_path / "kb.txt", "a|r|b\n")
    store = ReferenceStore()
    with pytest.warns(KGQAWarning) as said:
        report = load_files(store, [empty, kb], "metaqa", progress=False)
    assert report.loaded == 1 and [str(w.message) for w in said] == [
        f"{empty} holds no metaqa triple: it is empty, or only blank lines and comments; nothing of it was loaded. "
        "Check that it is the file you meant"]
    with pytest.warns(KGQAWarning, match="comments.nt holds no ntriples triple"):
        assert load_files(store, comments, progress=False).read == 0
    # the command line says it as its own warning, and still loads what there is
    assert main(["load", str(empty), str(kb), "--format", "metaqa", "--store", str(tmp_path / "store"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"kgqa: warning: {empty} holds no metaqa triple" in err
    with open_store(str(tmp_path / "store")) as stored:
        assert stored.count_triples() == 1
    assert main(["neo4j-import", str(empty), "--format", "metaqa", "--out", str(tmp_path / "import"), "--no-progress"]) == 0
    assert f"kgqa: warning: {empty} holds no metaqa triple: it is empty, or only blank lines and comments; nothing of it " \
           "was exported" in capsys.readouterr().err


def test_nothing_stored_is_lost_when_a_later_line_is_bad(tmp_path):
    lines = [f"e{i}|r|e{i + 1}" for i in range(7)] + ["broken|line"]
    source = write(tmp_path / "kb.txt", "\n".join(lines) + "\n")
    store = ReferenceStore()
    report = load_files(store, source, "metaqa", batch_size=3, rejects_path=tmp_path / "rej.tsv", progress=False)
    assert report.loaded == 7 and report.rejected == 1
    assert store.count_triples() == 7


def test_several_files_and_formats_detected(tmp_path):
    gz = tmp_path / "names.gz"
    gz.write_bytes(gzip.compress(b"/m/0a\tAlpha\n"))
    store = ReferenceStore()
    report = load_files(
        store,
        [DATA / "sample.nt", DATA / "metaqa-kb-sample.txt", DATA / "freebase-rdf-sample", gz],
        rejects_path=tmp_path / "rejects.tsv",
        progress=False,
    )
    assert report.rejected == 4 + 3  # metaqa sample + freebase sample
    assert Triple("m.0a", "type.object.name", Literal("Alpha", None, "en")) in store.triples
    assert Triple("Kismet", "has_genre", "Musical") in store.triples
    assert Triple("m.0xyz", "type.object.type", "location.location") in store.triples
    assert report.loaded == store.count_triples()
    where = {line.split("\t")[0].rsplit(":", 1)[0] for line in (tmp_path / "rejects.tsv").read_text().splitlines()}
    assert where == {str(DATA / "metaqa-kb-sample.txt"), str(DATA / "freebase-rdf-sample")}


def test_namespace_and_reader_options(tmp_path):
    source = write(tmp_path / "g.nt", "<http://e.org/s> <http://e.org/p> <http://e.org/o> .\n")
    store = ReferenceStore()
    load_files(store, source, namespace="http://e.org/", progress=False)
    assert store.triples == {Triple("s", "p", "o")}

    store = ReferenceStore()
    load_files(
        store,
        DATA / "freebase-rdf-sample",
        rejects_path=tmp_path / "rejects.tsv",
        reader_options={"drop_domains": ("base", "user")},
        progress=False,
    )
    assert not any(t.relation.startswith(("base.", "user.")) for t in store.triples)
    with pytest.raises(InvalidInputError, match="drop_domains"):
        load_files(store, source, "metaqa", reader_options={"drop_domains": ("base",)}, progress=False)


def test_missing_file_and_unknown_format_load_nothing(tmp_path):
    good = write(tmp_path / "kb.tsv", "a\tr\tb\n")
    store = ReferenceStore()
    with pytest.raises(InvalidInputError) as e:
        load_files(store, [good, tmp_path / "missing.tsv"], progress=False)
    assert "missing.tsv" in str(e.value) and all(name in str(e.value) for name in FORMATS)
    with pytest.raises(InvalidInputError) as e:
        load_files(store, good, "csv", progress=False)
    assert "'csv'" in str(e.value) and all(name in str(e.value) for name in FORMATS)
    with pytest.raises(InvalidInputError, match="cannot tell the format"):
        load_files(store, [good, write(tmp_path / "odd.txt", "what is this\n")], progress=False)
    with pytest.raises(InvalidInputError, match="no input files"):
        load_files(store, [], progress=False)
    with pytest.raises(InvalidInputError, match="not a file"):
        load_files(store, tmp_path, progress=False)
    assert store.count_triples() == 0


def test_python_arguments_of_the_wrong_kind_are_named_and_nothing_is_written(tmp_path):
    """What a Python caller may get wrong (a store URI for the store, bytes or an empty path for a
    file, a NUL in a path, a string for the reader options) is named before anything is read or
    written, never a TypeError, ValueError or AttributeError from inside the loader."""
    good = write(tmp_path / "kb.tsv", "a\tr\tb\n")
    store = ReferenceStore()
    calls = [
        (lambda: load_files("memory:", good, progress=False), "load_files loads into a store, got 'memory:'"),
        (lambda: load_files(None, good, progress=False), "load_files loads into a store, got None"),
        (lambda: load_files(store, [bytes(good)], progress=False), "invalid input file b'"),
        (lambda: load_files(store, "", progress=False), "invalid input file '': it names no file"),
        (lambda: load_files(store, [good, "kb\x00.tsv"], progress=False), "input file 'kb\\x00.tsv': it holds a NUL character"),
        (lambda: load_files(store, good, reader_options="drop_domains=base", progress=False),
         "reader_options must be a mapping of option names to values"),
        (lambda: load_files(store, good, rejects_path=str(tmp_path / "rejects\x00.tsv"), progress=False),
         "invalid rejects file"),
    ]
    for call, says in calls:
        with pytest.raises(InvalidInputError) as e:
            call()
        assert says in str(e.value)
    assert store.count_triples() == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb.tsv"]


def test_progress_and_summary_go_to_stderr(tmp_path, capsys):
    source = write(tmp_path / "kb.tsv", TSV)
    load_files(ReferenceStore(), source, rejects_path=tmp_path / "r.tsv", progress=False)
    assert capsys.readouterr() == ("", "")
    load_files(ReferenceStore(), source, rejects_path=tmp_path / "r.tsv", progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert "loaded 4 triples from 1 file" in err and "2 rejected" in err


def test_the_command_prints_its_summary_once_and_says_where_the_rejects_are(tmp_path, capsys):
    source = write(tmp_path / "kb.tsv", TSV)
    assert main(["load", str(source), "--store", str(tmp_path / "store")]) == 0  # with its progress bar
    out, err = capsys.readouterr()
    assert (out + err).count("triples/s") == 1
    assert out.startswith("loaded 4 triples from 1 file in ") and "5 read, 1 duplicates, 2 rejected" in out
    assert f"rejected lines written to {tmp_path / 'store.rejects.tsv'}" in out


def test_a_rejected_line_of_megabytes_is_clipped_in_the_rejects_file(tmp_path, capsys):
    source = write(tmp_path / "kb.txt", "A|r|B\n" + "x" * 5_000_000)  # its last line never ends
    rejects = tmp_path / "rejects.tsv"
    store = str(tmp_path / "store")
    argv = ["load", str(source), "--format", "metaqa", "--store", store, "--rejects", str(rejects), "--no-progress"]
    assert main([*argv, "--max-reject-share", "1"]) == 0
    assert "1 rejected" in capsys.readouterr().out
    where, reason, text = rejects.read_text(encoding="utf-8").rstrip("\n").split("\t")
    assert where == f"{source}:2" and "found 1 field(s)" in reason
    assert len(text) < 10_100 and text.startswith("x" * 9_000) and text.endswith("… (5,000,000 characters)")
    assert main(["stats", "--store", store, "--json"]) == 0
    assert '"triples": 1' in capsys.readouterr().out  # the good line is loaded all the same


def test_report_is_a_load_report_of_what_was_loaded(tmp_path):
    store = ReferenceStore()
    report = load_files(store, write(tmp_path / "kb.tsv", "a\tr\tb\nb\tr\tc\na\tr\tb\n"), progress=False)
    assert isinstance(report, LoadReport)
    assert (report.read, report.loaded, report.duplicates, report.rejected, report.rejects_file) == (3, 2, 1, 0, None)
    assert store.triples == {Triple("a", "r", "b"), Triple("b", "r", "c")}
    assert report.seconds > 0 and report.triples_per_second == pytest.approx(3 / report.seconds)
    assert to_json(report) == {
        "read": 3, "loaded": 2, "duplicates": 1, "rejected": 0, "seconds": report.seconds, "rejects_file": None,
        "triples_per_second": round(3 / report.seconds, 1),
    }


@pytest.mark.shared_data
def test_real_metaqa_load(shared_data, tmp_path):
    path = shared_data / "metaqa" / "kb.txt.gz"
    store = ReferenceStore()
    report = load_files(store, path, rejects_path=tmp_path / "r.tsv", progress=False)
    assert (report.read, report.loaded, report.duplicates, report.rejected) == (133_582, 133_582, 0, 0)
    assert store.triples == set(read_metaqa(path))


def test_an_interrupted_load_says_what_it_stored(tmp_path, capsys, monkeypatch):
    import loaders.load as load_module

    nt = tmp_path / "x.nt"
    nt.write_text("".join(f"<http://rdf.freebase.com/ns/m.{i}> <http://rdf.freebase.com/ns/r.a> <http://rdf.freebase.com/ns/m.{i + 1}> .\n" for i in range(5000)))
    real = load_module._plan

    def interrupting(*args, **kwargs):  # Ctrl-C after 2,500 lines of the file
        fmt, options = real(*args, **kwargs)

        class Interrupting:
            def __getattr__(self, name):
                return getattr(fmt, name)

            def read(self, src, **opts):
                for n, item in enumerate(fmt.read(src, **opts), 1):
                    if n > 2500:
                        raise KeyboardInterrupt
                    yield item

        return Interrupting(), options

    monkeypatch.setattr(load_module, "_plan", interrupting)
    store = str(tmp_path / "store")
    assert main(["load", str(nt), "--store", store, "--batch-size", "1000", "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert "interrupted: loaded" in err and "skips it as duplicates" in err
    stored = int(err.split("interrupted: loaded ")[1].split(" ")[0].replace(",", ""))
    monkeypatch.setattr(load_module, "_plan", real)
    with open_store(store) as opened:
        assert opened.count_triples() == stored and 0 < stored <= 2500
