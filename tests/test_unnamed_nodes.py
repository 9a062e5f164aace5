"""Graphs whose ids are names (MetaQA) have no ``type.object.name``: a node without a stored
name is named by its id, and ``search`` finds it by its id — on every store as on the reference."""
from __future__ import annotations

import pytest

from engine.cli.main import main
from engine.graph import NAME_RELATION, Literal, Triple
from engine.reference import ReferenceStore
from engine.results import SearchHit

METAQA = [
    Triple("Joel Zwick", "directed_by_reverse", "My Big Fat Greek Wedding"),
    Triple("My Big Fat Greek Wedding", "directed_by", "Joel Zwick"),
    Triple("My Big Fat Greek Wedding", "in_language", "English"),
    Triple("Émile Zola", "written_by_reverse", "Germinal"),
    Triple("\u212aelvin Unit", "r", "İstanbul"),  # the Kelvin sign lowers to "k"; İ to two characters
    Triple("http://example.org/Émile", "r", "Émile Zola"),  # an id that is an IRI of its own
    Triple("m.0kq90", "film.performance.actor", "m.0dn1"),  # a CVT beside a named node
    Triple("m.0dn1", NAME_RELATION, Literal.make("Harrison Ford", lang="en")),
    Triple("m.0dn1", NAME_RELATION, Literal.make("Harrison Ford (actor)")),
]
SEARCHES = [
    ("Joel Zwick", "exact", ["Joel Zwick"]),
    ("joel zwick", "exact", []),
    ("joel", "prefix", ["Joel Zwick"]),
    ("JOEL Z", "prefix", ["Joel Zwick"]),
    ("zwi", "contains", ["Joel Zwick"]),
    ("greek", "contains", ["My Big Fat Greek Wedding"]),
    ("ém", "prefix", ["Émile Zola"]),
    ("HTTP://EXAMPLE.ORG/É", "prefix", ["http://example.org/Émile"]),
    ("org/émi", "contains", ["http://example.org/Émile"]),
    ("émile", "contains", ["http://example.org/Émile", "Émile Zola"]),
    ("ÉMILE", "prefix", ["Émile Zola"]),
    ("kelvin", "prefix", ["\u212aelvin Unit"]),
    ("i̇stan", "prefix", ["İstanbul"]),
    ("m.0kq9", "prefix", ["m.0kq90"]),
    ("m.0dn", "prefix", []),  # a named node is found by its names, not its id
    ("ford", "contains", ["m.0dn1"]),
    ("Harrison Ford", "exact", ["m.0dn1"]),
]


@pytest.fixture
def metaqa(make_store, store_kind):
    return make_store(store_kind, METAQA)


def test_a_node_without_a_name_is_named_by_its_id(metaqa):
    reference = ReferenceStore(METAQA)
    ids = ["Joel Zwick", "English", "m.0kq90", "m.0dn1", "İstanbul", "nobody", "joel zwick"]
    expected = {
        "Joel Zwick": "Joel Zwick",
        "English": "English",
        "m.0kq90": "m.0kq90",
        "m.0dn1": "Harrison Ford",
        "İstanbul": "İstanbul",
        "nobody": None,  # not in the store
        "joel zwick": None,
    }
    assert reference.names(ids) == expected
    assert metaqa.names(ids) == expected


@pytest.mark.parametrize("text, mode, found", SEARCHES)
def test_search_finds_a_node_without_a_name_by_its_id(metaqa, text, mode, found):
    reference = ReferenceStore(METAQA)
    hits = metaqa.search(text, mode=mode, limit=None).hits
    assert hits == reference.search(text, mode=mode, limit=None).hits
    assert sorted({h.id for h in hits}) == found
    for hit in hits:
        if hit.id != "m.0dn1":
            assert hit == SearchHit(hit.id, hit.id)


def test_search_limits_count_ids_and_names_together(metaqa):
    full = ReferenceStore(METAQA).search("o", mode="contains", limit=None).hits
    assert len(full) > 3
    got = metaqa.search("o", mode="contains", limit=3)
    assert got.truncated and len(got.hits) == 3 and all(h in full for h in got.hits)


def test_the_first_readme_example_names_and_finds_metaqa_entities(tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    kb.write_text("My Big Fat Greek Wedding|directed_by|Joel Zwick\nMy Big Fat Greek Wedding|in_language|Greek\n")
    store = str(tmp_path / "metaqa")
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["query", "names", "Joel Zwick", "--store", store]) == 0
    assert capsys.readouterr().out.strip() == "Joel Zwick\tJoel Zwick"
    assert main(["query", "search", "joel", "--mode", "prefix", "--store", store]) == 0
    assert capsys.readouterr().out.strip() == "Joel Zwick\tJoel Zwick"
