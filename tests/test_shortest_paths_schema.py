"""``shortest_paths`` leaves schema relations out: through the class node of
``type.object.type`` any two people would be two hops apart (RoG's training targets were built
on such paths). On every store, as on the reference."""
from __future__ import annotations

import pytest

from engine.cli.main import main
from engine.errors import InvalidIdentifierError, InvalidInputError
from engine.graph import NAME_RELATION, TYPE_RELATION, Literal, Triple
from engine.reference import ReferenceStore
from engine.store import SCHEMA_RELATIONS

GRAPH = [
    Triple("m.p1", TYPE_RELATION, "people.person"),
    Triple("m.p2", TYPE_RELATION, "people.person"),
    Triple("m.p1", NAME_RELATION, Literal.make("Harrison Ford", lang="en")),
    Triple("m.p2", NAME_RELATION, Literal.make("Ridley Scott", lang="en")),
    Triple("m.cvt", "film.performance.actor", "m.p1"),
    Triple("m.cvt", "film.performance.film", "m.f1"),
    Triple("m.f1", "film.film.directed_by", "m.p2"),
    Triple("m.f1", TYPE_RELATION, "film.film"),
]


@pytest.fixture
def store(make_store, store_kind):
    return make_store(store_kind, GRAPH)


def _relations(result) -> list[tuple[str, ...]]:
    return [p.relations for p in result.paths]


def test_schema_relations_are_left_out_by_default(store):
    reference = ReferenceStore(GRAPH)
    got = store.shortest_paths(["m.p1"], ["m.p2"], max_hops=3)
    assert got == reference.shortest_paths(["m.p1"], ["m.p2"], max_hops=3)
    assert _relations(got) == [("film.performance.actor", "film.performance.film", "film.film.directed_by")]
    assert got.paths[0].nodes == ("m.p1", "m.cvt", "m.f1", "m.p2")
    # asked for, the class node is the short way
    every = store.shortest_paths(["m.p1"], ["m.p2"], max_hops=3, exclude=())
    assert every == reference.shortest_paths(["m.p1"], ["m.p2"], max_hops=3, exclude=())
    assert _relations(every) == [(TYPE_RELATION, TYPE_RELATION)]


def test_a_user_list_excludes_more(store):
    reference = ReferenceStore(GRAPH)
    exclude = [*SCHEMA_RELATIONS, "film.performance.film"]
    got = store.shortest_paths(["m.p1"], ["m.p2", "m.f1"], max_hops=3, exclude=exclude)
    assert got == reference.shortest_paths(["m.p1"], ["m.p2", "m.f1"], max_hops=3, exclude=exclude)
    assert got.paths == []
    only_type = store.shortest_paths(["m.p1"], ["m.f1"], max_hops=3, exclude=["film.performance.film"])
    # a list of one's own replaces the default: the class node is open again (p1 → person ← p2 ← f1)
    assert _relations(only_type) == [(TYPE_RELATION, TYPE_RELATION, "film.film.directed_by")]
    assert only_type == reference.shortest_paths(["m.p1"], ["m.f1"], max_hops=3, exclude=["film.performance.film"])


def test_bad_exclusions_are_rejected(store):
    with pytest.raises(InvalidInputError, match="wrap it"):
        store.shortest_paths(["m.p1"], ["m.p2"], exclude="type.object.type")
    with pytest.raises(InvalidIdentifierError):
        store.shortest_paths(["m.p1"], ["m.p2"], exclude=["a b"])


def test_the_command_line_leaves_schema_relations_out(tmp_path, capsys):
    from engine.stores.oxigraph import OxigraphStore

    path = str(tmp_path / "store")
    with OxigraphStore(path) as store:
        store.add_triples(GRAPH)
    assert main(["query", "shortest_paths", "--sources", "m.p1", "--targets", "m.p2", "--store", path]) == 0
    out = capsys.readouterr().out
    assert "film.performance.actor" in out and TYPE_RELATION not in out
    assert main(["query", "shortest_paths", "--sources", "m.p1", "--targets", "m.p2", "--include-schema", "--store", path]) == 0
    assert TYPE_RELATION in capsys.readouterr().out
    assert main(["query", "shortest_paths", "--sources", "m.p1", "--targets", "m.p2", "--exclude", "film.film.directed_by",
                 "--store", path]) == 0
    assert capsys.readouterr().out.strip() == "(nothing)"
