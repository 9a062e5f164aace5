"""What a load may never do, on every store: store a triple that is not in the input, merge or
cut terms in silence, destroy its input, or load a file in the wrong format without saying so."""
from __future__ import annotations

import gzip
import random

import pytest

from engine.cli import main
from engine.errors import InvalidInputError
from engine.graph import Triple
from engine.reference import ReferenceStore
from engine.store import Store
from loaders.load import load_files

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
    assert main(["stats", "--store", store, "--json"]) == 0
    assert '"triples": 0' in capsys.readouterr().out


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
