"""The fast paths of result decoding give exactly what the plain ones give: Oxigraph's answers
read from TSV (``sparql/tsv.py``) equal the same answers read from pyoxigraph's term objects,
on every kind of term; ``sort_paths`` orders paths exactly as sorting by ``path_key`` does."""
from __future__ import annotations

import random

import pyoxigraph as ox
import pytest

from engine.errors import StoreError
from engine.graph import XSD, Literal, Path, Triple, path_key, sort_paths
from engine.stores.oxigraph import OxigraphStore
from sparql.tsv import parse_term

TEXTS = [
    "", "plain", "tab\there", "line\nbreak", "cr\rhere", 'a "quote"', "back\\slash", "\\u0041 as text",
    "\\n as text", "trailing\\", "\x01\x1f\x7f controls", "Évian ü 中文 😀", "\u2028 line separator", "'single'",
    "semi;colon\tand\ttabs", "ends with quote\"",
]
TYPED = [
    ("42", "integer"), ("-7", "integer"), ("0", "integer"), ("1.5", "decimal"), ("-0.25", "decimal"),
    ("1e+20", "double"), ("2.5E-7", "double"), ("1000", "double"), ("INF", "double"), ("-INF", "float"),
    ("NaN", "double"), ("0.1", "float"), ("true", "boolean"), ("false", "boolean"), ("1990", "gYear"),
    ("2001-05", "gYearMonth"), ("2001-05-04", "date"), ("2001-05-04T10:00:00Z", "dateTime"),
]
LITERALS = (
    [Literal.make(t) for t in TEXTS]
    + [Literal.make(t, lang=lang) for t in TEXTS[:4] for lang in ("en", "fr-BE")]
    + [Literal.make(v, XSD + dt) for v, dt in TYPED]
    + [Literal.make("x y", "http://example.org/my#type"), Literal.make('odd "dt"', "urn:x:t")]
)
IDS = ["m.0abc", "The Prowler", "Évian", "x'y\"z", "a/b#c?d", "{}`$", "100%", "sp ace", "http://example.org/abs"]


@pytest.fixture(scope="module")
def oxigraph() -> OxigraphStore:
    store = OxigraphStore(None)
    triples = [Triple(IDS[i % len(IDS)], "r", lit) for i, lit in enumerate(LITERALS)]
    triples += [Triple(a, "link", b) for a in IDS for b in IDS[:3]]
    store.add_triples(triples)
    blank = ox.BlankNode("b1")  # the engine never writes blank nodes; another tool may
    store.db.add(ox.Quad(blank, ox.NamedNode(store.terms.iri_of("r")), ox.Literal("from a blank node")))
    store.db.add(ox.Quad(ox.NamedNode(store.terms.iri_of("m.0abc")), ox.NamedNode(store.terms.iri_of("link")), blank))
    return store


def _by_objects(store: OxigraphStore, text: str) -> list[list]:
    solutions = store.db.query(text)
    names = [v.value for v in solutions.variables]
    return [[None if s[n] is None else store._from_ox(s[n]) for n in names] for s in solutions]


@pytest.mark.parametrize(
    "text",
    [
        "SELECT ?s ?p ?o WHERE { ?s ?p ?o }",
        "SELECT ?o WHERE { ?s ?p ?o }",
        "SELECT ?s ?o WHERE { ?s ?p ?s0 OPTIONAL { ?s0 <urn:none> ?o } }",  # unbound in a column
        "SELECT ?o WHERE { ?s ?p ?x OPTIONAL { ?x <urn:none> ?o } }",  # rows of one unbound value
        "SELECT ?o WHERE { ?s <urn:none> ?o }",  # no rows
        'SELECT (COUNT(*) AS ?n) ?d WHERE { ?s ?p ?o BIND("out" AS ?d) } GROUP BY ?d',  # a bare number
    ],
)
def test_tsv_answers_equal_the_term_objects(oxigraph, text):
    expected = _by_objects(oxigraph, text)
    names, columns = oxigraph._solutions(text)
    assert names == [v.value for v in oxigraph.db.query(text).variables]
    assert all(len(column) == len(expected) for column in columns)
    rows = [list(row) for row in zip(*columns)]
    assert rows == expected
    assert all(type(a) is type(b) for row, other in zip(rows, expected) for a, b in zip(row, other))


def test_every_literal_and_id_comes_back_exactly(oxigraph):
    subjects, objects = oxigraph._solutions("SELECT ?s ?o WHERE { ?s ?p ?o }").columns
    objects = set(objects)
    assert set(LITERALS) <= objects
    assert set(IDS) <= set(subjects)
    assert "_:b1" in objects


def test_a_value_the_reader_does_not_know_is_an_error():
    for token in ("<<a b c>>", "bare", '"x"^^dt', "1.2.3"):
        with pytest.raises(StoreError, match="TSV"):
            parse_term(token, str)


def test_sort_paths_orders_as_path_key():
    rng = random.Random(5)
    nodes = ["a", "b", "B", "a b", "é", "_:x", Literal("a"), Literal("a", "urn:x:t"), Literal("a", lang="en"),
             Literal("b", lang="de"), Literal("1", XSD + "integer"), Literal("1", XSD + "decimal")]
    ids = [n for n in nodes if isinstance(n, str)]
    for trial in range(300):
        with_literals = trial % 2 == 0
        paths = []
        for _ in range(rng.randint(0, 40)):
            hops = rng.randint(1, 3)
            middle = [rng.choice(ids) for _ in range(hops)]
            end = rng.choice(nodes if with_literals else ids)
            paths.append(Path((*middle, end), tuple(rng.choice("rs") for _ in range(hops)),
                              tuple(rng.random() < 0.5 for _ in range(hops))))
        paths += rng.sample(paths, min(3, len(paths)))  # duplicates
        fast = list(paths)
        sort_paths(fast)
        assert fast == sorted(paths, key=path_key)
