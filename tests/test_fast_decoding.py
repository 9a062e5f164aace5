"""The fast paths of result decoding give exactly what the plain ones give: Oxigraph's answers
read from TSV (``sparql/tsv.py``) equal the same answers read from pyoxigraph's term objects,
on every kind of term; Turtle result sets laid out as Virtuoso writes them
(``sparql/turtle_results.py``) read as the same result set written by a Turtle serialiser and
read by a full parser; ``sort_paths`` orders paths exactly as sorting by ``path_key`` does; ``build_each`` builds
the result objects their constructors build."""
from __future__ import annotations

import copy
import dataclasses
import pickle
import random
from itertools import repeat

import pyoxigraph as ox
import pytest

from engine.errors import StoreError
from engine.graph import XSD, Edge, Literal, Path, Triple, build_each, edge_key, path_key, sort_edges, sort_paths
from engine.stores.oxigraph import OxigraphStore
from sparql import turtle_results
from sparql.tsv import parse_term
from sparql.turtle_results import RES, expand_prefixed, read_turtle_results

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
        with pytest.raises(StoreError, match="cannot read the value"):
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


def test_sort_edges_orders_as_edge_key():
    rng = random.Random(7)
    nodes = ["a", "b", "B", "a b", "é", "_:x", Literal("a"), Literal("a", "urn:x:t"), Literal("a", lang="en"),
             Literal("a", lang="de"), Literal("b", lang="de"), Literal("1", XSD + "integer"), Literal("1", XSD + "decimal")]
    ids = [n for n in nodes if isinstance(n, str)]
    for trial in range(300):
        ends = nodes if trial % 2 == 0 else ids
        edges = [Edge(rng.choice(ids), rng.choice("rs"), rng.choice(ends), rng.random() < 0.5) for _ in range(rng.randint(0, 60))]
        edges += rng.sample(edges, min(3, len(edges)))  # duplicates
        fast = list(edges)
        sort_edges(fast)
        assert fast == sorted(edges, key=edge_key)


def test_built_in_bulk_is_built_as_by_the_constructor():
    rng = random.Random(5)
    nodes = IDS + LITERALS[:5]

    def some(pick) -> list:
        return [pick() for _ in range(50)]

    rows = {
        Triple: (some(lambda: rng.choice(IDS)), some(lambda: rng.choice("rs")), some(lambda: rng.choice(nodes))),
        Edge: (some(lambda: rng.choice(nodes)), ["r"] * 50, some(lambda: rng.choice(nodes)), some(lambda: rng.random() < 0.5)),
        Path: (some(lambda: (rng.choice(IDS), rng.choice(nodes))), [("r",)] * 50, some(lambda: (rng.random() < 0.5,))),
    }
    for cls, columns in rows.items():
        expected = [cls(*row) for row in zip(*columns)]
        # the first column as an iterator, a constant one as repeat(value)
        lazy = [iter(columns[0])] + [repeat(c[0]) if len(set(c)) == 1 else c for c in columns[1:]]
        for built in (build_each(cls, *columns), build_each(cls, *lazy)):
            assert built == expected and [hash(b) for b in built] == [hash(e) for e in expected]
            assert [type(b) for b in built] == [cls] * 50 and [repr(b) for b in built] == [repr(e) for e in expected]
            assert pickle.loads(pickle.dumps(built)) == built and copy.deepcopy(built) == built
            assert dataclasses.replace(built[0]) == built[0]
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(built[0], dataclasses.fields(cls)[0].name, "x")
    assert build_each(Triple, [], [], []) == build_each(Triple, iter([]), repeat("r"), repeat("o")) == []


# ----------------------------------------------------------------------------- Turtle result sets
def _virtuoso_layout(names: list[str], rows: list[list], xsd_after: int = 0) -> str:
    """A result set as Virtuoso 7.2 writes it for ``Accept: text/turtle``: XSD datatypes through
    the ``xsd:`` prefix (declared after the variables, or, as Virtuoso does for a namespace it
    first meets further on, before row ``xsd_after``), integers and decimals bare."""
    lines = [f"@prefix res: <{RES}> .", "@prefix rdf: <http://www.w3.org/1999/02/22-rdf-syntax-ns#> .",
             "_:_ a res:ResultSet .", "_:_ res:resultVariable " + " , ".join(f'"{n}"' for n in names) + " ."]
    xsd = "@prefix xsd:\t<http://www.w3.org/2001/XMLSchema#> ."

    def token(term) -> str:
        text = str(term)
        if isinstance(term, ox.Literal) and term.datatype.value.startswith(XSD):
            local = term.datatype.value[len(XSD):]
            if local in ("integer", "decimal") and "\\" not in text:
                return term.value
            return text[:text.rindex("^^")] + "^^xsd:" + local if "^^" in text else text
        return text

    for i, row in enumerate(rows):
        if i == xsd_after:
            lines.append(xsd)
        bound = [(n, t) for n, t in zip(names, row) if t is not None]
        if not bound:
            lines.append("_:_ res:solution [ ] .")
            continue
        lines.append("_:_ res:solution [")
        for k, (name, term) in enumerate(bound):
            end = " ] ] ." if k == len(bound) - 1 else " ] ;"
            lines.append(f'      res:binding [ res:variable "{name}" ; res:value {token(term)}{end}')
    if xsd_after >= len(rows):
        lines.append(xsd)
    return "\n".join(lines) + "\n\n"


def _serialised(names: list[str], rows: list[list]) -> str:
    """The same result set written by pyoxigraph's Turtle serialiser (another layout)."""
    def res(local: str) -> ox.NamedNode:
        return ox.NamedNode(RES + local)

    top, triples = ox.BlankNode(), []
    triples += [ox.Triple(top, res("resultVariable"), ox.Literal(n)) for n in names]
    for row in rows:
        solution = ox.BlankNode()
        triples.append(ox.Triple(top, res("solution"), solution))
        for name, term in zip(names, row):
            if term is not None:
                binding = ox.BlankNode()
                triples += [ox.Triple(solution, res("binding"), binding), ox.Triple(binding, res("variable"), ox.Literal(name)),
                            ox.Triple(binding, res("value"), term)]
    return ox.serialize(triples, format=ox.RdfFormat.TURTLE).decode("utf-8")


def _terms(result) -> list[list]:
    _, columns, prefixes = result
    return [[None if t is None else parse_term(expand_prefixed(t, prefixes), str) for t in column] for column in columns]


def test_turtle_result_sets_read_the_same_in_either_layout(oxigraph, monkeypatch):
    rng = random.Random(11)
    pool = [ox.NamedNode(oxigraph.terms.iri_of(i)) for i in IDS]
    pool += [ox.NamedNode("http://x.org/\u00e9t\u00e9".encode().decode("unicode_escape"))]
    pool += [ox.Literal(text) for text in ("a ] ;", "b ] ] .", '" ] ;', "x ] ;\n ] ] .")]  # line ends inside
    pool += [ox.Literal(lit.value, datatype=ox.NamedNode(lit.datatype)) if lit.datatype
             else ox.Literal(lit.value, language=lit.lang) if lit.lang else ox.Literal(lit.value) for lit in LITERALS]
    expected_lines = regular = 0
    for trial in range(120):
        names = [f"v{i}" for i in range(rng.randint(1, 4))]
        if trial % 2:  # rows that bind different variables
            rows = [[rng.choice(pool) if rng.random() < 0.85 else None for _ in names] for _ in range(rng.randint(0, 12))]
        else:  # every row binds the same ones, the column reader's case
            bound = [True] + [rng.random() < 0.7 for _ in names[1:]]
            rng.shuffle(bound)
            rows = [[rng.choice(pool) if b else None for b in bound] for _ in range(rng.randint(1, 12))]
        text = _virtuoso_layout(names, rows, xsd_after=rng.choice([0, 0, rng.randint(0, len(rows))]))
        fast = read_turtle_results(text)
        assert fast == turtle_results._read_lines(text)
        by_columns = turtle_results._read_regular(text)
        if by_columns is not None:
            assert by_columns == fast
            regular += 1
        assert fast[0] == names and all(len(column) == len(rows) for column in fast[1])
        expected = [[None if t is None else parse_term(str(t), str) for t in column] for column in zip(*rows)]
        assert _terms(fast) == (expected or [[] for _ in names])
        # a full parser on another layout gives the same terms
        assert _terms(read_turtle_results(_serialised(names, rows))) == _terms(fast)
        expected_lines += len(rows)
    assert expected_lines > 400 and regular >= 60
    # the Virtuoso layout is read without the full parser
    monkeypatch.setattr(turtle_results, "_read_graph", lambda data: pytest.fail("fell back to the full parser"))
    read_turtle_results(_virtuoso_layout(["a"], [[pool[0]], [None], [pool[-1]]]))


def test_turtle_results_a_large_answer_is_read_by_columns(monkeypatch):
    rows = [[ox.NamedNode(f"http://x.org/{i}"), ox.Literal(f"v{i % 7}")] for i in range(100)]
    text = _virtuoso_layout(["x", "y"], rows)
    assert len(text) >= turtle_results.COLUMNS_FROM
    by_lines = turtle_results._read_lines
    expected = by_lines(text)

    def head_only(data: str):  # the column reader reads the lines before the first row
        assert "res:solution" not in data, "read line by line"
        return by_lines(data)

    monkeypatch.setattr(turtle_results, "_read_lines", head_only)
    assert read_turtle_results(text) == expected


def test_turtle_results_rows_off_the_stride_are_read_line_by_line():
    """A layout the column reader must not take: every variation is read as the line reader
    reads it, never cut at the wrong place."""
    a, b = ox.NamedNode("http://x.org/a"), ox.Literal("v ] ;")
    text = _virtuoso_layout(["x", "y"], [[a, b], [a, b], [a, b]])
    assert turtle_results._read_regular(text) is not None
    start = "_:_ res:solution [\n"
    pieces = text.split(start)  # the head, then the three rows
    swapped = text.replace('"x" ; res:value <http://x.org/a> ] ;\n      res:binding [ res:variable "y" ; res:value "v ] ;" ] ] .',
                           '"y" ; res:value "v ] ;" ] ;\n      res:binding [ res:variable "x" ; res:value <http://x.org/a> ] ] .', 1)
    variants = {
        "a row binding its variables in another order": swapped,
        "a row binding fewer variables": _virtuoso_layout(["x", "y"], [[a, b], [a, None], [a, b]]),
        "a row binding none": _virtuoso_layout(["x", "y"], [[a, b], [None, None], [a, b]]),
        "a blank line between rows": text.replace(" ] ] .\n_:_", " ] ] .\n\n_:_", 1),
        "a row start with a comment": start.join(pieces[:2]) + "_:_ res:solution [ # row two\n" + start.join(pieces[2:]),
        "a value that looks like a line end": _virtuoso_layout(["x", "y"], [[a, ox.Literal("] ] .\n_:_ res:solution [")]] * 3),
    }
    for what, variant in variants.items():
        assert variant != text, what
        try:
            expected = turtle_results._read_lines(variant)
        except turtle_results._OtherLayout:
            expected = turtle_results._read_graph(variant)
            assert _terms(expected) == _terms(turtle_results._read_lines(text)), what
        assert read_turtle_results(variant) == expected, what
        if what == "a value that looks like a line end":  # a value it reads at its own stride
            assert turtle_results._read_regular(variant) == expected
        else:
            assert turtle_results._read_regular(variant) is None, what
    assert read_turtle_results(swapped)[1] == [[str(a)] * 3, [str(b)] * 3]
    with pytest.raises(StoreError, match="cannot read a Turtle result set"):  # a row that never closes
        read_turtle_results(pieces[0] + start)


def test_turtle_results_a_layout_or_prefix_the_reader_does_not_know():
    one_line = (f'@prefix res: <{RES}> . [] res:resultVariable "a" ; res:solution [ res:binding [ res:variable "a" ;'
                ' res:value "x\\ty"@en ] ] .')
    assert _terms(read_turtle_results(one_line)) == [[Literal("x\ty", lang="en")]]
    with pytest.raises(StoreError, match="undeclared prefix 'foaf'"):
        _terms(read_turtle_results(_virtuoso_layout(["a"], [[ox.Literal("1")]]).replace('"1"', '"1"^^foaf:x')))
    with pytest.raises(StoreError, match="cannot read a Turtle result set"):
        read_turtle_results("<not turtle")
