"""Hostile input against every store: rejected, or matched literally, and the store unchanged."""
from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.errors import (
    InvalidIdentifierError,
    InvalidInputError,
    ReadOnlyViolationError,
)
from engine.graph import NAME_RELATION, Literal, Triple
from engine.identifiers import RELATION_PATTERN, validate_id
from engine.reference import ReferenceStore
from engine.sexpr import SExprSyntaxError
from engine.sexpr.tree import Count, Entity, Join, Relation, Reverse, to_text
from engine.store import Store

HOSTILE_IDS = [
    "x' OR '1'='1",
    '"}) MATCH (n) DETACH DELETE n //',
    "> } DROP ALL ; INSERT DATA { <a> <b> <c> } #",
    "`) DETACH DELETE n //",
    "$param {braces} \\backslash",
    "m.0abc> <http://x/p> <http://x/o",
]
HOSTILE_RELATIONS = [
    "r`]->(x) DETACH DELETE x //",
    "r> } ; DROP ALL",
    "a b",
    "",
    "r\nDROP",
    "people.person.name'",
    "{r}",
    "r)-[:x",
]
HOSTILE_LITERALS = ['he said "hi"\n', "back\\slash }", "'; DROP TABLE names; --", "`DETACH DELETE`", "DROP ALL"]

SPARQL_WRITES = [
    "INSERT DATA { <http://x/a> <http://x/b> <http://x/c> }",
    "DROP ALL",
    "CLEAR DEFAULT",
    "DELETE WHERE { ?s ?p ?o }",
    "LOAD <http://example.org/x.nt>",
    "PREFIX x: <http://x/> SELECT * WHERE { ?s ?p ?o } ; DELETE WHERE { ?s ?p ?o }",
]
CYPHER_WRITES = [
    "CREATE (n:Entity {id: 'x'})",
    "MATCH (n) DETACH DELETE n",
    "MATCH (n) SET n.id = 'x'",
    "MERGE (n:Entity {id: 'x'})",
    "MATCH (n) REMOVE n.id",
    "MATCH (n) WITH n LIMIT 1 DELETE n",
    "UNWIND [1] AS x FOREACH (y IN [1] | CREATE (:Entity))",
    "LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row",
]


def _graph() -> list[Triple]:
    triples = [Triple(i, "r", f"target{n}") for n, i in enumerate(HOSTILE_IDS)]
    triples += [Triple(f"target{n}", NAME_RELATION, Literal.make(v)) for n, v in enumerate(HOSTILE_LITERALS)]
    triples.append(Triple("plain", "r", "other"))
    return triples


@pytest.fixture
def hostile_store(store):
    return store(_graph())


def test_hostile_ids_are_matched_literally(hostile_store):
    before = hostile_store.stats()
    for n, node in enumerate(HOSTILE_IDS):
        paths = hostile_store.follow_paths([node], ["r"], direction="out").paths
        assert [p.nodes for p in paths] == [(node, f"target{n}")]
        assert hostile_store.expand([node]).edges[0].dst == f"target{n}"
        assert hostile_store.relations([node]).rows[0].relation == "r"
        assert hostile_store.shortest_paths([node], [f"target{n}"]).paths[0].nodes == (node, f"target{n}")
    # a hostile id that is not in the store finds nothing and changes nothing
    assert hostile_store.expand(["no' OR 1=1 //"]).edges == []
    assert hostile_store.stats() == before


def test_hostile_literals_are_matched_literally(hostile_store):
    before = hostile_store.stats()
    for n, value in enumerate(HOSTILE_LITERALS):
        assert hostile_store.names([f"target{n}"]) == {f"target{n}": value}
        assert [h.id for h in hostile_store.search(value, mode="exact").hits] == [f"target{n}"]
    assert hostile_store.search("DROP", mode="contains").hits  # matches the literal text
    assert hostile_store.stats() == before


def test_hostile_literal_anchors_are_matched_literally(hostile_store):
    before = hostile_store.stats()
    for n, value in enumerate(HOSTILE_LITERALS):
        anchor = Literal.make(value)
        rows = hostile_store.relations([anchor]).rows
        assert [(r.id, r.relation, r.direction, r.count) for r in rows] == [(anchor, NAME_RELATION, "in", 1)]
        two = hostile_store.two_hop_relations([anchor], NAME_RELATION).rows
        assert [(r.id, r.relation, r.direction) for r in two] == [(anchor, "r", "in"), (anchor, NAME_RELATION, "out")]
        tagged = Literal.make(value, lang="en")  # same text, another literal: nothing
        assert hostile_store.relations([tagged]).rows == []
    assert hostile_store.relations([Literal.make("x' OR '1'='1"), Literal.make('"} DROP ALL #')]).rows == []
    assert hostile_store.stats() == before


@pytest.mark.parametrize(
    "literal",
    [
        ("1", "http://x/t> } ; DROP ALL ; #", None),
        ("1", "http://x/t\"x", None),
        ("1", "no scheme", None),
        ("chat", None, "en} DROP ALL"),
        ("1", "http://www.w3.org/2001/XMLSchema#integer\n", None),
    ],
)
def test_hostile_literal_anchor_types_are_rejected(hostile_store, literal):
    # such a Literal cannot even be made (engine.graph.Literal validates itself)
    before = hostile_store.stats()
    with pytest.raises((InvalidIdentifierError, InvalidInputError)):
        hostile_store.relations([Literal(*literal)])
    with pytest.raises((InvalidIdentifierError, InvalidInputError)):
        hostile_store.two_hop_relations(["plain", Literal(*literal)], "r")
    assert hostile_store.stats() == before


@pytest.mark.parametrize("relation", HOSTILE_RELATIONS)
def test_hostile_relation_names_are_rejected(hostile_store, relation):
    before = hostile_store.stats()
    calls = [
        lambda: hostile_store.expand(["plain"], [relation]),
        lambda: hostile_store.follow_paths(["plain"], [relation]),
        lambda: hostile_store.follow_paths(["plain"], ["r", relation]),
        lambda: hostile_store.subgraph(["plain"], 1, relations=[relation]),
        lambda: hostile_store.two_hop_relations(["plain"], relation),
    ]
    for call in calls:
        with pytest.raises(InvalidIdentifierError, match="invalid relation name"):
            call()
    with pytest.raises(InvalidIdentifierError):
        hostile_store.add_triples([Triple("plain", relation, "x")])
    assert hostile_store.stats() == before


def test_ids_with_control_characters_are_rejected(hostile_store):
    with pytest.raises(InvalidIdentifierError, match="control characters"):
        hostile_store.expand(["a\nb"])
    with pytest.raises(InvalidInputError, match="wrap it"):
        hostile_store.expand("plain")  # a bare string is not a list of ids


def test_an_argument_that_is_not_a_list_is_named_before_anything_runs(hostile_store):
    """A bare string where a list goes would be taken character by character ("r.s" as the
    relations r, ., s); None or a number would fail inside the engine: each is named instead."""
    calls = [
        (lambda: hostile_store.expand(["plain"], "r"), "expected a list of relation names as relations, got the string 'r'; wrap it: ['r']"),
        (lambda: hostile_store.follow_paths(["plain"], "r"), "expected a list of relation names as path, got the string 'r'"),
        (lambda: hostile_store.subgraph(["plain"], 1, relations="r"), "as relations, got the string 'r'"),
        (lambda: hostile_store.follow_paths(["plain"], None), "expected a list of relation names as path, got None"),
        (lambda: hostile_store.relations(None), "expected a list of ids or literals as ids, got None"),
        (lambda: hostile_store.expand(5), "expected a list of ids as ids, got 5"),
        (lambda: hostile_store.shortest_paths(["plain"], None), "expected a list of ids as targets, got None"),
        (lambda: hostile_store.query("RETURN 1", "plain"), "query parameters must be a mapping of names to values"),
    ]
    for call, says in calls:
        with pytest.raises(InvalidInputError) as e:
            call()
        assert says in str(e.value)


def test_arguments_python_would_misread_are_named_and_nothing_is_written(hostile_store):
    """A truthy string as a flag ("no" switches it on), a lone Triple or None as the triples to
    add, an integer too long to write as text and a parameter nested without end are each named,
    never a TypeError, ValueError or RecursionError from inside the engine."""
    before = hostile_store.stats()
    nested: list = []
    for _ in range(10_000):
        nested = [nested]
    text = "ASK { ?s ?p $x }" if hostile_store.dialect == "sparql" else "RETURN $x"
    calls = [
        (lambda: hostile_store.query(text, {"x": "plain"}, allow_service="no"), "invalid allow_service 'no': use True or False"),
        (lambda: hostile_store.follow_paths(["plain"], ["r"], distinct_edges="no"), "invalid distinct_edges 'no': use True or False"),
        (lambda: hostile_store.query(text, {"x": 10**5000}), "query parameter 'x' is an integer of 16,610 bits; give one of at most 14,000 bits"),
        (lambda: hostile_store.query(text, {"x": nested}), "nests lists, tuples or maps more than 32 levels deep"),
        (lambda: hostile_store.add_triples(None), "expected a list of Triples, such as [Triple("),
        (lambda: hostile_store.add_triples(Triple("plain", "r", "new")), "got Triple(subject='plain'"),
        (lambda: hostile_store.add_triples("plain r new"), "got 'plain r new'"),
        (lambda: hostile_store.explain(None), "explain takes an operation of engine.ops"),
    ]
    for call, says in calls:
        with pytest.raises(InvalidInputError) as e:
            call()
        assert says in str(e.value)
    assert hostile_store.stats() == before


def test_query_refuses_every_write(hostile_store):
    before = hostile_store.stats()
    writes = SPARQL_WRITES if hostile_store.dialect == "sparql" else CYPHER_WRITES
    for text in writes:
        with pytest.raises(ReadOnlyViolationError):
            hostile_store.query(text)
    assert hostile_store.stats() == before


def test_query_parameters_bind_hostile_values_literally(hostile_store):
    node = HOSTILE_IDS[1]
    if hostile_store.dialect == "sparql":
        text = "SELECT ?o WHERE { $node ?p ?o }"
    else:
        text = "MATCH (n:Entity {id: $node})-[r]->(o) RETURN o.id AS o"
    result = hostile_store.query(text, {"node": node})
    assert result.rows == [["target1"]]


#: what a language model may reply where a relation, an id, a search text or an S-expression
#: goes: quotes of every kind, the characters that close a term or a query, both languages'
#: keywords and comments, text no store can take, and text longer than any name
MODEL_TEXT = [
    "'", '"', "`", "\u2019", "'''", '"""', "}", ">", "]", "\\]", "\n", "\\", "\\'", "``DROP``",
    "$x", "?o", "#", "%", "' OR 1=1 //", '" OR "1"="1', "<http://x> . ?s ?p ?o", ") RETURN n //",
    '"}}; DROP', "m.1) (JOIN r m.2", "[m.1]", "r`]->(x) DETACH DELETE x //", "r> } ; DROP ALL",
    "DROP", "DELETE", "MATCH", "RETURN", "SELECT", "WHERE", "DETACH", "CREATE", "OPTIONAL",
    "DROP ALL", "DELETE WHERE { ?s ?p ?o }", "MATCH (n) DETACH DELETE n", "CALL db.labels()",
    "a\x00b", "\ud800", "(\"é') " * 60, "'\"}`$x ) " * 1250,
]
#: a call of an operation with the model's text where the methods pass it: a relation, an id,
#: a search text, or a relation, an id or a literal inside an S-expression
ModelCall = Callable[[Store, str], object]
MODEL_TEXT_CALLS: dict[str, ModelCall] = {
    "follow_paths relation": lambda s, text: s.follow_paths(["m.1"], [text], direction="both"),
    "follow_paths second relation": lambda s, text: s.follow_paths(["m.1"], ["r", text], direction="both"),
    "two_hop_relations relation": lambda s, text: s.two_hop_relations(["m.1"], text),
    "expand relation": lambda s, text: s.expand(["m.1"], [text]),
    "follow_paths id": lambda s, text: s.follow_paths([text, "m.1"], ["r"], direction="both"),
    "relations id": lambda s, text: s.relations(["m.1", text]),
    "expand id": lambda s, text: s.expand([text]),
    "names id": lambda s, text: s.names([text, "m.1"]),
    "search exact": lambda s, text: s.search(text, "exact", limit=None),
    "search prefix": lambda s, text: s.search(text, "prefix", limit=None),
    "search contains": lambda s, text: s.search(text, "contains", limit=None),
    "execute relation": lambda s, text: s.execute(f"(JOIN {text} m.2)"),
    "execute reverse relation": lambda s, text: s.execute(f"(JOIN (R {text}) m.1)"),
    "execute relation tree": lambda s, text: s.execute(Join(Relation(text), Entity("m.2"))),
    "execute reverse relation tree": lambda s, text: s.execute(Join(Reverse(Relation(text)), Entity("m.1"))),
    "execute id": lambda s, text: s.execute(f"(JOIN r {text})"),
    "execute bracketed id": lambda s, text: s.execute(to_text(Count(Join(Relation("r"), Entity(text))))),
    "execute id tree": lambda s, text: s.execute(Join(Relation("r"), Entity(text))),
    "execute literal": lambda s, text: s.execute(f'(JOIN {NAME_RELATION} "{text}")'),
}


def _model_text_graph() -> list[Triple]:
    """A graph in which the model's text that can name a relation or a node does: a query the
    text changed would miss these edges, or find others."""
    triples = [Triple("m.1", "r", "m.2"), Triple("m.1", NAME_RELATION, Literal.make("One"))]
    for text in MODEL_TEXT:
        if RELATION_PATTERN.fullmatch(text):
            triples.append(Triple("m.1", text, "m.2"))
        if len(text) <= 400 and text.isprintable():
            triples.append(Triple(text, "r", "m.2"))
        if len(text) <= 100 and text.isprintable():  # a longer id is found by search as an id
            triples.append(Triple(text, NAME_RELATION, Literal.make(text)))
    return triples


def _outcome(call: ModelCall, db: Store, text: str) -> tuple[str, object]:
    """("answered", the answer), or ("refused", the engine's named error for bad input)."""
    try:
        return "answered", call(db, text)
    except (InvalidInputError, SExprSyntaxError) as e:
        return "refused", type(e).__name__


def test_model_text_is_refused_or_answered_as_the_reference_does_and_changes_nothing(store):
    """Text a language model wrote, passed where the methods pass it, is refused with the
    engine's named error or answered exactly as the plain-Python reference answers it on the
    same graph: it never changes the query it travels in, nor the data."""
    triples = _model_text_graph()
    reference = ReferenceStore(triples)
    db = store(triples)
    assert db.stats() == reference.stats()
    differences = {}
    for text in MODEL_TEXT:
        for name, call in MODEL_TEXT_CALLS.items():
            expected = _outcome(call, reference, text)
            try:
                got = _outcome(call, db, text)
            except Exception as e:  # what the store raised instead is the finding
                got = (type(e).__name__, str(e)[:300])
            if got[0] != "refused" and got != expected:
                differences[f"{name} {text[:40]!r}"] = f"{got!r:.300} where the reference gives {expected!r:.300}"
    assert differences == {}
    assert db.stats() == reference.stats()
