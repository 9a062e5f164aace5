"""Bad text gets one answer on every store: an ``InvalidInputError`` that names the argument.

A lone surrogate (a ``str`` that cannot be encoded as UTF-8) in any text an operation takes,
NUL in search text, and an id longer than :data:`engine.identifiers.MAX_ID_LENGTH` are refused
before anything reaches the database, and the store answers the next call as before. The
loaders keep to the same bound: a line whose id is too long is a reject, and every triple they
keep can be asked for.
"""
from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.errors import InvalidInputError
from engine.graph import NAME_RELATION, XSD, Edge, Literal, Triple
from engine.identifiers import MAX_ID_LENGTH
from engine.sexpr.tree import Entity, Join, Relation
from engine.store import Store
from loaders.load import load_files
from sparql.terms import Terms

NS = "http://rdf.freebase.com/ns/"
GRAPH = [
    Triple("m.1", "film.r", "m.2"),
    Triple("m.1", NAME_RELATION, Literal("One", lang="en")),
    Triple("m.2", "film.year", Literal("1990", XSD + "gYear")),
]
SURROGATE = "\ud800"
#: an id of 10 MB: past Virtuoso's limit on query text
HUGE_ID = "m." + "x" * 10_000_000

#: a call of each operation with ``bad`` where an id, a literal or a text goes, and the name of
#: that argument as the error must give it
Call = Callable[[Store, str], object]
ID_CALLS: dict[str, tuple[Call, str]] = {
    "relations": (lambda s, bad: s.relations(["m.1", bad]), "ids[1]"),
    "expand": (lambda s, bad: s.expand([bad]), "ids[0]"),
    "follow_paths": (lambda s, bad: s.follow_paths(["m.1", bad], ["film.r"]), "seeds[1]"),
    "subgraph": (lambda s, bad: s.subgraph([bad], 2), "seeds[0]"),
    "shortest_paths sources": (lambda s, bad: s.shortest_paths([bad], ["m.2"]), "sources[0]"),
    "shortest_paths targets": (lambda s, bad: s.shortest_paths(["m.1"], ["m.2", bad]), "targets[1]"),
    "two_hop_relations": (lambda s, bad: s.two_hop_relations([bad], "film.r"), "ids[0]"),
    "names": (lambda s, bad: s.names([bad]), "ids[0]"),
    "types": (lambda s, bad: s.types(["m.2", bad]), "ids[1]"),
    "execute tree": (lambda s, bad: s.execute(Join(Relation("film.r"), Entity(bad))), "S-expression"),
}
TEXT_CALLS: dict[str, tuple[Call, str]] = {
    "relations literal": (lambda s, bad: s.relations([Literal("a" + bad)]), "literal ids[0]"),
    "two_hop_relations literal": (
        lambda s, bad: s.two_hop_relations(["m.1", Literal(bad)], "film.r"),
        "literal ids[1]",
    ),
    "search exact": (lambda s, bad: s.search("One" + bad), "search text"),
    "search contains": (lambda s, bad: s.search(bad, "contains"), "search text"),
    "execute text": (lambda s, bad: s.execute(f"(JOIN film.r m.{bad})"), "S-expression"),
    "execute literal": (lambda s, bad: s.execute(f'(JOIN film.year "{bad}")'), "S-expression"),
    "query text": (lambda s, bad: s.query(_query(s) + _comment(s) + bad, {"s": "m.1"}), "query text"),
    "query parameter": (lambda s, bad: s.query(_query(s), {"s": bad}), "query parameter 's'"),
    "query parameter list": (
        lambda s, bad: s.query(_query(s), {"s": "m.1", "t": ["m.1", bad]}),
        "query parameter 't'[1]",
    ),
    "query parameter literal": (
        lambda s, bad: s.query(_query(s), {"s": "m.1", "t": Literal(bad)}),
        "query parameter 't'",
    ),
}


def _query(store: Store) -> str:
    """A raw query for the objects of ``$s``, in the store's language."""
    if store.dialect == "sparql":
        return "SELECT ?o WHERE { $s <" + NS + "film.r> ?o }"
    return "MATCH (n:Entity {id: $s})-[:`film.r`]->(o) RETURN o.id AS o"


def _comment(store: Store) -> str:
    return " # " if store.dialect == "sparql" else " // "


def _outcomes(store: Store, calls: dict[str, tuple[Call, str]], bad: str, expected: str) -> dict[str, str]:
    """What each call did with ``bad``: "refused" for an InvalidInputError that names its
    argument and says ``expected``, else what happened instead."""
    outcomes = {}
    for name, (call, argument) in calls.items():
        try:
            call(store, bad)
            outcomes[name] = "answered"
        except InvalidInputError as e:
            message = str(e)
            outcomes[name] = "refused" if argument in message and expected in message else f"message: {message[:300]}"
        except Exception as e:  # what the store raised instead is the finding
            outcomes[name] = f"{type(e).__name__}: {str(e)[:300]}"
    return outcomes


def _still_answers(store: Store) -> None:
    assert store.expand(["m.1"], ["film.r"]).edges == [Edge("m.1", "film.r", "m.2", True)]
    assert [hit.id for hit in store.search("One").hits] == ["m.1"]
    assert store.query(_query(store), {"s": "m.1"}).rows == [["m.2"]]


def test_a_lone_surrogate_is_refused_naming_the_argument(store):
    db = store(GRAPH)
    calls = {**ID_CALLS, **TEXT_CALLS}
    assert _outcomes(db, calls, SURROGATE, "not valid Unicode") == dict.fromkeys(calls, "refused")
    with pytest.raises(InvalidInputError, match="not valid Unicode"):  # a load: nothing of the call is written
        db.add_triples([Triple("m.9", "film.r", "m.8"), Triple("m.9", "film.note", Literal("a" + SURROGATE))])
    assert db.count_triples() == len(GRAPH)
    _still_answers(db)


def test_nul_in_search_text_is_refused_in_every_mode(store):
    db = store(GRAPH)
    for mode in ("exact", "prefix", "contains"):
        with pytest.raises(InvalidInputError, match=r"search text 'On\\x00e' holds a NUL character"):
            db.search("On\x00e", mode)
    _still_answers(db)


def _answers_as_for_an_absent_id(store: Store, calls: dict[str, tuple[Call, str]], long_id: str) -> dict[str, str]:
    """What each call did with ``long_id``: "same" where it answered what it answers for a
    short id that is in no store, else what it did instead."""
    outcomes = {}
    for name, (call, _) in calls.items():
        try:
            answer = repr(call(store, long_id)).replace(long_id, "m.absent")
            outcomes[name] = "same" if answer == repr(call(store, "m.absent")) else f"answered {answer[:300]}"
        except Exception as e:  # what the store raised instead is the finding
            outcomes[name] = f"{type(e).__name__}: {str(e)[:300]}"
    return outcomes


def test_an_id_past_the_bound_is_refused_and_one_at_it_answers(store):
    db = store(GRAPH)
    expected = f"at most {MAX_ID_LENGTH:,} characters"
    assert _outcomes(db, ID_CALLS, HUGE_ID, expected) == dict.fromkeys(ID_CALLS, "refused")
    in_text = {"execute text": (lambda s, bad: s.execute(f"(JOIN film.r {bad})"), "S-expression")}
    assert _outcomes(db, in_text, HUGE_ID, expected) == {"execute text": "refused"}
    with pytest.raises(InvalidInputError, match=r"search text .* is 10,000,002 characters long; give at most"):
        db.search(HUGE_ID, "prefix")
    # at the bound, an id in no store is answered as any absent id is, however long its IRI
    # grows (a character outside ASCII takes 9 bytes percent-encoded)
    for longest in ("m." + "y" * (MAX_ID_LENGTH - 2), "m." + "\u20ac" * (MAX_ID_LENGTH - 2)):
        assert _answers_as_for_an_absent_id(db, ID_CALLS, longest) == dict.fromkeys(ID_CALLS, "same")
    _still_answers(db)


def test_the_loaders_keep_to_the_bound_on_ids(store, tmp_path):
    """A line whose id is past the bound is a reject on every store, in N-Triples (whose plain
    lines a SPARQL store takes unparsed) and in TSV; whatever is kept can be asked for."""
    db = store(GRAPH)
    at_bound, past_bound = "a" * MAX_ID_LENGTH, "b" * (MAX_ID_LENGTH + 1)
    terms = Terms(NS)
    ntriples = tmp_path / "long.nt"
    ntriples.write_text(
        "".join(f"<{NS}m.1> <{NS}film.long> <{terms.iri_of(i)}> .\n" for i in (at_bound, past_bound))
    )
    tsv = tmp_path / "long.tsv"
    tsv.write_text(f"{at_bound}\tfilm.back\tm.2\n{past_bound}\tfilm.back\tm.2\n")
    rejects = tmp_path / "rejects.tsv"
    load_files(db, [ntriples, tsv], rejects_path=rejects, progress=False, max_reject_share=None)
    rejected = [line.split("\t", 1)[0] for line in rejects.read_text().splitlines()]
    assert f"{ntriples}:2" in rejected and f"{tsv}:2" in rejected
    kept = {e.dst for e in db.expand(["m.1"], ["film.long"]).edges} | {
        e.dst for e in db.expand(["m.2"], ["film.back"]).edges
    }
    # a server store's own limits (engine/limits.py) reject the id at the bound too
    assert kept == ({at_bound} if store.kind == "oxigraph" else set())
    assert db.count_triples() == len(GRAPH) + 2 * len(kept)
    with pytest.raises(InvalidInputError, match=f"at most {MAX_ID_LENGTH:,} characters"):
        db.add_triples([Triple("m.1", "film.long", past_bound)])
