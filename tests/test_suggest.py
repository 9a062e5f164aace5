"""A misspelled relation or entity is named as not in the store, with the nearest ones,
instead of a bare empty answer — on every store, and from the command line."""
from __future__ import annotations

import argparse
import time

import pytest

from engine.cli.main import _why_empty, main
from engine.errors import QueryTimeoutError
from engine.graph import NAME_RELATION, Literal, Triple
from engine.results import ExpandResult
from engine.suggest import (
    NOTED_IDS,
    missing_id_notes,
    missing_ids,
    missing_relations,
    nearest_entities,
    unknown_relations,
)

GRAPH = [
    Triple("Joel Zwick", "directed_by_reverse", "My Big Fat Greek Wedding"),
    Triple("My Big Fat Greek Wedding", "directed_by", "Joel Zwick"),
    Triple("My Big Fat Greek Wedding", "in_language", "Greek"),
    Triple("Joel Oliansky", "directed_by_reverse", "The Competition"),
    Triple("m.0kq01", NAME_RELATION, Literal.make("Blade Runner", lang="en")),
    Triple("m.0kq01", "film.film.directed_by", "m.0kq10"),
]


@pytest.fixture
def store(make_store, store_kind):
    return make_store(store_kind, GRAPH)


def test_ids_not_in_the_store_are_named_with_the_nearest(store):
    assert missing_ids(store, ["Joel Zwick", "m.0kq01"]) == []
    (line,) = missing_ids(store, ["Joel Zwik"])
    assert line.startswith("'Joel Zwik' is not in the store; nearest: Joel Zwick")
    assert nearest_entities(store, "Blade Runer") == ["m.0kq01 (Blade Runner)"]


def test_relations_the_reached_nodes_lack_are_named_with_the_nearest(store):
    wedding = "My Big Fat Greek Wedding"
    assert missing_relations(store, [wedding], ["directed_by"]) == []
    assert missing_relations(store, [wedding], ["directd_by"]) == [
        "no edge of the seeds has the relation 'directd_by'; nearest: directed_by, directed_by_reverse"
    ]
    # the second hop is checked at the nodes the first one reaches
    assert missing_relations(store, [wedding], ["directed_by", "in_languag"]) == [
        (
            "no edge of the nodes reached through directed_by has the relation 'in_languag'; "
            "they have directed_by, directed_by_reverse"
        )
    ]
    assert missing_relations(store, ["m.0kq01"], ["film.film.directd_by"])[0].endswith("nearest: film.film.directed_by")


def test_the_command_line_says_why_an_answer_is_empty(tmp_path, capsys):
    from engine.stores.oxigraph import OxigraphStore

    path = str(tmp_path / "store")
    with OxigraphStore(path) as store:
        store.add_triples(GRAPH)
    assert main(["query", "follow_paths", "My Big Fat Greek Wedding", "--path", "directd_by", "--store", path]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "(nothing)"
    assert "kgqa: note: no edge of the seeds has the relation 'directd_by'; nearest: directed_by" in err
    assert main(["query", "relations", "Joel Zwik", "--store", path]) == 0
    assert "'Joel Zwik' is not in the store; nearest: Joel Zwick" in capsys.readouterr().err
    assert main(["query", "follow_paths", "Joel Zwick", "--path", "directed_by_reverse", "--store", path]) == 0
    assert capsys.readouterr().err == ""  # an answer: nothing to explain


def test_only_the_first_missing_ids_get_a_line_and_the_look_ups_are_shared(store):
    s = store
    seen: list[str] = []
    s.listeners.append(lambda record: seen.append(record.op_name))
    ids = [f"Joel Zwik {i}" for i in range(1_000)] + ["Joel Zwick"]
    lines = missing_ids(s, ids)
    assert len(lines) == NOTED_IDS + 1 == 21
    assert lines[0].startswith("'Joel Zwik 0' is not in the store; nearest: Joel Zwick")
    assert lines[-1] == "and 980 more ids are not in the store"
    assert seen == ["names", "search", "search"]  # one names call; the ids share their prefixes' searches
    assert missing_ids(s, ids[:NOTED_IDS + 1])[-1] == "and 1 more id is not in the store"


def test_past_the_deadline_the_ids_are_named_without_the_nearest(store):
    s = store
    past = time.monotonic() - 1
    assert missing_id_notes(s, ["Joel Zwik", "Blade Runer"], deadline=past) == [
        "'Joel Zwik' is not in the store", "'Blade Runer' is not in the store"
    ]
    with pytest.raises(QueryTimeoutError):
        missing_ids(s, ["Joel Zwik"], deadline=past)
    with pytest.raises(QueryTimeoutError):
        missing_relations(s, ["My Big Fat Greek Wedding"], ["directd_by"], deadline=past)
    args = argparse.Namespace(operation="expand", ids=["Joel Zwik"], relations=None, direction="both", timeout=5.0)
    assert _why_empty(s, args, ExpandResult([]), past) == [
        "looking up why the answer is empty ran past --timeout 5; these notes may be incomplete"
    ]


def test_relations_no_edge_carries_are_named_with_the_nearest(store):
    assert unknown_relations(store, ["directed_by", "in_language"]) == []
    assert unknown_relations(store, ["directd_by", "directd_by", "film.film.directed_by"]) == [
        "no edge in the store has the relation 'directd_by'; nearest: directed_by, directed_by_reverse, film.film.directed_by"
    ]
    with pytest.raises(QueryTimeoutError):
        unknown_relations(store, ["directd_by"], deadline=time.monotonic() - 1)


def test_past_the_deadline_sexpr_notes_say_they_may_be_incomplete(store):
    from engine.cli.sexpr import _why_empty as why_sexpr_is_empty
    from engine.results import ExecuteResult
    from engine.sexpr import parse

    args = argparse.Namespace(timeout=5.0)
    tree = parse("(JOIN (R directd_by) [Joel Zwik])")
    assert why_sexpr_is_empty(store, args, tree, ExecuteResult([]), time.monotonic() - 1) == [
        "looking up why the answer is empty ran past --timeout 5; these notes may be incomplete"
    ]
    assert why_sexpr_is_empty(store, args, tree, ExecuteResult([]), None) == [
        "'Joel Zwik' is not in the store; nearest: Joel Zwick, Joel Oliansky",
        "no edge in the store has the relation 'directd_by'; nearest: directed_by, directed_by_reverse, film.film.directed_by",
    ]


def test_the_command_line_notes_a_bounded_number_of_missing_ids(tmp_path, capsys):
    from engine.stores.oxigraph import OxigraphStore

    path = str(tmp_path / "store")
    with OxigraphStore(path) as opened:
        opened.add_triples(GRAPH)
    missing = [f"m.zz{i}" for i in range(5_000)]
    started = time.monotonic()
    assert main(["query", "expand", *missing, "--store", path, "--timeout", "20"]) == 0
    assert time.monotonic() - started < 20
    out, err = capsys.readouterr()
    assert out.strip() == "(nothing)"
    notes = err.splitlines()
    assert notes[0] == "kgqa: note: 'm.zz0' is not in the store" and len(notes) == NOTED_IDS + 1
    assert notes[-1] == "kgqa: note: and 4,980 more ids are not in the store"
