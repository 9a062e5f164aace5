"""xsd:double and xsd:float ``INF``, ``-INF`` and ``NaN`` are valid XSD values: accepted by the
data model and the loader, stored and returned exactly, matched as anchors, and compared as
the typed-literal semantics say (INF above and -INF below every number; NaN equal to itself as
a term but in no comparison or ARGMAX) — on every store as on the reference."""
from __future__ import annotations

import pytest

from engine.errors import InvalidInputError
from engine.graph import XSD, Literal, Triple
from engine.reference import ReferenceStore
from loaders.load import load_files

D, F = XSD + "double", XSD + "float"
VALUES = [(v, dt) for dt in (D, F) for v in ("INF", "-INF", "NaN", "1.5", "-2")]
LITERALS = [Literal.make(v, dt) for v, dt in VALUES]
GRAPH = [Triple(f"s{i}", "p", lit) for i, lit in enumerate(LITERALS)] + [
    Triple(f"s{i}", "in_set", "m.set") for i in range(len(LITERALS))
]


def test_the_data_model_accepts_xsd_spellings_only():
    assert Literal.make("INF", D) == Literal("INF", D)
    assert Literal.make(" +INF ", F) == Literal("INF", F)  # XSD 1.1's +INF, canonically INF
    assert Literal.make("-INF", D).value == "-INF"
    assert Literal.make("NaN", F).value == "NaN"
    for wrong in ("inf", "Infinity", "nan", "NAN", "-inf", "+NaN"):
        with pytest.raises(InvalidInputError, match="ill-typed"):
            Literal.make(wrong, D)
    with pytest.raises(InvalidInputError):
        Literal.make("INF", XSD + "decimal")  # xsd:decimal has no infinities


@pytest.fixture
def store(make_store, store_kind):
    return make_store(store_kind, GRAPH)


def test_special_values_round_trip_and_anchor(store):
    reference = ReferenceStore(GRAPH)
    ids = [f"s{i}" for i in range(len(LITERALS))]
    assert store.expand(ids, ["p"]) == reference.expand(ids, ["p"])
    assert [e.dst for e in store.expand(ids, ["p"]).edges] == LITERALS
    for i, literal in enumerate(LITERALS):
        rows = store.relations([literal]).rows
        assert rows == reference.relations([literal]).rows
        assert [(r.relation, r.count) for r in rows] == [("p", 1)], literal
        assert store.two_hop_relations([literal], "p").rows == reference.two_hop_relations([literal], "p").rows


@pytest.mark.parametrize(
    "sexpr, expected",
    [
        (f"(lt p 2.0^^{D})", ["s1", "s3", "s4", "s6", "s8", "s9"]),
        (f"(gt p 2.0^^{D})", ["s0", "s5"]),
        (f'(ge p "INF"^^{D})', ["s0", "s5"]),
        (f'(le p "-INF"^^{F})', ["s1", "s6"]),
        (f'(gt p "-INF"^^{D})', ["s0", "s3", "s4", "s5", "s8", "s9"]),
        (f'(lt p "NaN"^^{D})', []),
        (f'(ge p "NaN"^^{D})', []),
        ("(ARGMAX m.set (R in_set))", []),  # m.set has no number: its members do
        ("(ARGMAX (JOIN in_set m.set) p)", ["s0", "s5"]),
        ("(ARGMIN (JOIN in_set m.set) p)", ["s1", "s6"]),
        (f'(JOIN p "INF"^^{D})', ["s0"]),
        (f'(JOIN p "INF"^^{F})', ["s5"]),
        (f'(JOIN p "NaN"^^{D})', ["s2"]),
        (f'(JOIN p "NaN"^^{F})', ["s7"]),
        (f'(COUNT (JOIN p "-INF"^^{D}))', 1),
    ],
)
def test_special_values_compare_as_the_semantics_say(store, sexpr, expected):
    got = store.execute(sexpr)
    assert got == ReferenceStore(GRAPH).execute(sexpr)
    assert (got.count if isinstance(expected, int) else got.answers) == expected


def test_the_loader_takes_them_and_rejects_other_spellings(make_store, store_kind, tmp_path):
    ns = "http://rdf.freebase.com/ns/"
    lines = [
        f'<{ns}a> <{ns}p> "INF"^^<{D}> .',
        f'<{ns}b> <{ns}p> "-INF"^^<{F}> .',
        f'<{ns}c> <{ns}p> "NaN"^^<{D}> .',
        f'<{ns}d> <{ns}p> "+INF"^^<{D}> .',
        f'<{ns}e> <{ns}p> "inf"^^<{D}> .',
        f'<{ns}f> <{ns}p> "Infinity"^^<{F}> .',
    ]
    path = tmp_path / "special.nt"
    path.write_text("\n".join(lines) + "\n")
    store = make_store(store_kind)
    report = load_files(store, [str(path)], "ntriples", rejects_path=str(tmp_path / "rejects.tsv"), progress=False)
    assert (report.loaded, report.rejected) == (4, 2)
    rejected = (tmp_path / "rejects.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in rejected] == [f"{path}:5", f"{path}:6"]
    edges = store.expand(["a", "b", "c", "d"], ["p"]).edges
    assert [(e.src, e.dst) for e in edges] == [
        ("a", Literal("INF", D)), ("b", Literal("-INF", F)), ("c", Literal("NaN", D)), ("d", Literal("INF", D))
    ]
    assert store.execute(f"(gt p 0^^{XSD}integer)").answers == ["a", "d"]


def test_virtuoso_keeps_them_alike_through_either_loader(make_store, servers):
    """isql's bulk loader keeps them as typed strings; INSERT DATA would make numbers of them,
    which no query literal meets: the update loader stores them the bulk loader's way."""
    make_store("virtuoso")  # starts the server
    reference = ReferenceStore(GRAPH)
    for loader in ("isql", "update"):
        store = servers["virtuoso"].new_store(f"special_{loader}", loader=loader)
        store.add_triples(GRAPH)
        try:
            assert store.expand([f"s{i}" for i in range(len(LITERALS))], ["p"]).edges == reference.expand(
                [f"s{i}" for i in range(len(LITERALS))], ["p"]
            ).edges
            for literal in LITERALS:
                assert store.relations([literal]).rows == reference.relations([literal]).rows, (loader, literal)
            for sexpr in (f"(gt p 2.0^^{D})", "(ARGMAX (JOIN in_set m.set) p)", f'(JOIN p "NaN"^^{F})'):
                assert store.execute(sexpr) == reference.execute(sexpr), (loader, sexpr)
        finally:
            store.close()
