"""Golden tests of the Cypher dialects: the exact text and parameters of every operation, the
backtick helper, the read-only check, FalkorDB's parameter header and the bulk statements."""
from __future__ import annotations

import pytest

from cypher import params as cypher_params
from cypher import readonly, schema
from cypher.compiler import FALKORDB, NEO4J, CypherCompiler
from cypher.terms import literal_key, quote_relation
from engine import ops
from engine.errors import (
    InvalidIdentifierError,
    InvalidInputError,
    ReadOnlyViolationError,
)
from engine.graph import XSD, Literal, Triple
from engine.ops import Compiled


# The operations compiled as the store builds them, by their arguments.
def relations(ids, direction, fetch, dialect: CypherCompiler = NEO4J) -> Compiled:
    return dialect.compile(ops.Relations(tuple(ids), direction, limit=fetch))


def expand(ids, relations, direction, fetch, dialect: CypherCompiler = NEO4J) -> Compiled:
    rels = None if relations is None else tuple(relations)
    return dialect.compile(ops.Expand(tuple(ids), rels, direction, limit=fetch))


def walks(seeds, path, direction, fetch, pairs, dialect: CypherCompiler = NEO4J, distinct_edges=True) -> Compiled:
    pairs = None if pairs is None else tuple(tuple(p) for p in pairs)
    op = ops.Walks(tuple(seeds), tuple(path), direction, pairs=pairs, distinct_edges=distinct_edges, limit=fetch)
    return dialect.compile(op)


def two_hop_relations(ids, r1, direction, fetch, dialect: CypherCompiler = NEO4J) -> Compiled:
    return dialect.compile(ops.TwoHopRelations(tuple(ids), r1, direction, limit=fetch))


def names(ids, dialect: CypherCompiler = NEO4J) -> Compiled:
    return dialect.compile(ops.Names(tuple(ids)))


def types(ids, dialect: CypherCompiler = NEO4J) -> Compiled:
    return dialect.compile(ops.Types(tuple(ids)))


def search(text, mode, fetch) -> Compiled:
    return NEO4J.compile(ops.Search(text, mode, limit=fetch))

HOSTILE_RELATIONS = [
    "a`b",
    "a b",
    "x]->(n) DETACH DELETE n //",
    "`}) MATCH (n) DETACH DELETE n //",
    "r\nMATCH",
    "a'b",
    'a"b',
    "{a}",
    "",
    ".starts.with.dot",
    "x" * 257,
    None,
    7,
]


class TestRelationQuoting:
    @pytest.mark.parametrize("name", ["people.person.place_of_birth", "/film/film/genre", "directed_by", "/a/b./c-d"])
    def test_valid_names_are_backticked(self, name):
        assert quote_relation(name) == f"`{name}`"

    @pytest.mark.parametrize("name", HOSTILE_RELATIONS)
    def test_hostile_names_are_rejected(self, name):
        with pytest.raises(InvalidIdentifierError):
            quote_relation(name)

    @pytest.mark.parametrize("name", HOSTILE_RELATIONS[:6])
    def test_every_builder_that_takes_relations_rejects_them(self, name):
        with pytest.raises(InvalidIdentifierError):
            expand(["a"], [name], "out", None)
        with pytest.raises(InvalidIdentifierError):
            walks(["a"], [name], "out", None, None)
        with pytest.raises(InvalidIdentifierError):
            two_hop_relations(["a"], name, "out", None)
        with pytest.raises(InvalidIdentifierError):
            NEO4J.compile(ops.RelationCounts((name,)))
        with pytest.raises(InvalidIdentifierError):
            schema.merge_entity_edges(name)


class TestOperations:
    def test_relations_out(self):
        assert relations(["m.1", "m.2"], "out", 11) == (
            "UNWIND $ids AS id\n"
            "MATCH (a:Entity {id: id})-[r]->()\n"
            "RETURN id, type(r) AS relation, 'out' AS direction, count(*) AS count\n"
            "LIMIT $fetch",
            {"ids": ["m.1", "m.2"], "fetch": 11},
        )

    def test_relations_in(self):
        text, params = relations(["m.1"], "in", None)
        assert text == (
            "UNWIND $ids AS id\n"
            "MATCH (a:Entity {id: id})<-[r]-()\n"
            "RETURN id, type(r) AS relation, 'in' AS direction, count(*) AS count"
        )
        assert params == {"ids": ["m.1"]}

    def test_relations_both_reports_each_edge_once_with_its_orientation(self):
        assert relations(["m.1"], "both", None) == (
            "UNWIND $ids AS id\n"
            "MATCH (a:Entity {id: id})-[r]-()\n"
            "RETURN id, type(r) AS relation, CASE WHEN startNode(r) = a THEN 'out' ELSE 'in' END AS direction, "
            "count(*) AS count",
            {"ids": ["m.1"]},
        )

    def test_expand_with_relations(self):
        assert expand(["m.1"], ["a.b", "/c/d"], "in", 5) == (
            "UNWIND $ids AS src\n"
            "MATCH (a:Entity {id: src})<-[r:`a.b`|`/c/d`]-(b)\n"
            "RETURN src, type(r) AS relation, b.id AS id, b.value AS value, b.datatype AS datatype, "
            "b.lang AS lang, false AS forward\n"
            "LIMIT $fetch",
            {"ids": ["m.1"], "fetch": 5},
        )

    def test_expand_out_and_both(self):
        text, _ = expand(["m.1"], None, "out", None)
        assert "MATCH (a:Entity {id: src})-[r]->(b)\n" in text and text.endswith("true AS forward")
        text, params = expand(["m.1"], None, "both", None)
        assert text == (
            "UNWIND $ids AS src\n"
            "MATCH (a:Entity {id: src})-[r]-(b)\n"
            "RETURN src, type(r) AS relation, b.id AS id, b.value AS value, b.datatype AS datatype, "
            "b.lang AS lang, startNode(r) = a AS forward"
        )
        assert params == {"ids": ["m.1"]}

    def test_walks_from_seeds(self):
        assert walks(["m.1"], ["a.b", None], "out", 3, None) == (
            "UNWIND $ids AS id\n"
            "MATCH (n0:Entity {id: id})-[r1:`a.b`]->(n1:Entity)-[r2]->(n2)\n"
            "WHERE r1 <> r2\n"
            "RETURN [n0.id, n1.id, n2.id] AS ids, n2.value AS value, n2.datatype AS datatype, n2.lang AS lang, "
            "[type(r1), type(r2)] AS relations, [true, true] AS forward\n"
            "LIMIT $fetch",
            {"ids": ["m.1"], "fetch": 3},
        )

    def test_walk_of_one_hop_needs_no_distinctness(self):
        text, _ = walks(["m.1"], ["a.b"], "in", None, None)
        assert text == (
            "UNWIND $ids AS id\n"
            "MATCH (n0:Entity {id: id})<-[r1:`a.b`]-(n1)\n"
            "RETURN [n0.id, n1.id] AS ids, n1.value AS value, n1.datatype AS datatype, n1.lang AS lang, "
            "[type(r1)] AS relations, [false] AS forward"
        )

    def test_walks_between_pairs(self):
        # grouped by their start: each start's walks are expanded once
        assert walks([], [None, None, None], "both", None, [("m.1", "m.2"), ("m.3", "m.2"), ("m.1", "m.4")]) == (
            "UNWIND $groups AS g\n"
            "WITH g[0] AS id, g[1] AS targets\n"
            "MATCH (n0:Entity {id: id})-[r1]-(n1:Entity)-[r2]-(n2:Entity)-[r3]-(n3:Entity)\n"
            "WHERE n3.id IN targets AND r1 <> r2 AND r1 <> r3 AND r2 <> r3\n"
            "RETURN [n0.id, n1.id, n2.id, n3.id] AS ids, n3.value AS value, n3.datatype AS datatype, "
            "n3.lang AS lang, [type(r1), type(r2), type(r3)] AS relations, "
            "[startNode(r1) = n0, startNode(r2) = n1, startNode(r3) = n2] AS forward",
            {"groups": [["m.1", ["m.2", "m.4"]], ["m.3", ["m.2"]]]},
        )

    def test_two_hop_relations(self):
        assert two_hop_relations(["m.1"], "a.b", "both", 7) == (
            "UNWIND $ids AS id\n"
            "MATCH (a:Entity {id: id})-[:`a.b`]-(m:Entity)\n"
            "WITH DISTINCT id, m\n"
            "MATCH (m)-[r]-()\n"
            "RETURN id, type(r) AS relation, CASE WHEN startNode(r) = m THEN 'out' ELSE 'in' END AS direction, "
            "count(*) AS count\n"
            "LIMIT $fetch",
            {"ids": ["m.1"], "fetch": 7},
        )
        text, _ = two_hop_relations(["m.1"], "a.b", "out", None)
        assert "MATCH (a:Entity {id: id})-[:`a.b`]->(m:Entity)\n" in text

    def test_names_and_types(self):
        assert names(["m.1"]) == (
            "UNWIND $ids AS id\n"
            "MATCH (a:Entity {id: id})\n"
            "OPTIONAL MATCH (a)-[:`type.object.name`]->(l:Literal)\n"
            "RETURN id, l.value AS value, l.datatype AS datatype, l.lang AS lang",
            {"ids": ["m.1"]},
        )
        assert types(["m.1"]) == (
            "UNWIND $ids AS id\n"
            "MATCH (a:Entity {id: id})-[:`type.object.type`]->(t:Entity)\n"
            "RETURN id, t.id AS type",
            {"ids": ["m.1"]},
        )

    def test_search_exact(self):
        assert search("Foo", "exact", 11) == (
            "MATCH (a:Entity)-[:`type.object.name`]->(l:Literal)\n"
            "WHERE l.value = $text\n"
            "RETURN DISTINCT a.id AS id, l.value AS name\n"
            "LIMIT $fetch\n"
            "UNION ALL\n"
            "MATCH (a:Entity {id: $text})\n"
            "OPTIONAL MATCH (a)-[:`type.object.name`]->(l:Literal)\n"
            "WITH a, count(l) AS names\n"
            "WHERE names = 0\n"
            "RETURN a.id AS id, null AS name\n"
            "LIMIT $fetch",
            {"text": "Foo", "fetch": 11},
        )

    @pytest.mark.parametrize("mode, operator", [("prefix", "STARTS WITH"), ("contains", "CONTAINS")])
    def test_search_case_insensitive_lowers_the_needle_in_python(self, mode, operator):
        assert search("FÖÖ", mode, None) == (
            "MATCH (a:Entity)-[:`type.object.name`]->(l:Literal)\n"
            f"WHERE toLower(l.value) {operator} $needle OR any(c IN $special WHERE l.value CONTAINS c)\n"
            "RETURN DISTINCT a.id AS id, l.value AS name\n"
            "UNION ALL\n"
            "MATCH (a:Entity)\n"
            f"WHERE toLower(a.id) {operator} $needle OR any(c IN $special WHERE a.id CONTAINS c)\n"
            "OPTIONAL MATCH (a)-[:`type.object.name`]->(l:Literal)\n"
            "WITH a, count(l) AS names\n"
            "WHERE names = 0\n"
            "RETURN a.id AS id, null AS name",
            {"needle": "föö", "special": ["\u0130", "\u03a3"]},
        )

    def test_counts(self):
        assert NEO4J.compile(ops.CountTriples()) == ("MATCH ()-[r]->() RETURN count(r) AS count", {})
        assert NEO4J.compile(ops.CountEntities()) == ("MATCH (n:Entity) RETURN count(n) AS count", {})
        assert NEO4J.compile(ops.RelationCounts(("a.b", "c"))) == (
            "MATCH ()-[r:`a.b`]->() RETURN 0 AS i, count(r) AS count\n"
            "UNION ALL\n"
            "MATCH ()-[r:`c`]->() RETURN 1 AS i, count(r) AS count",
            {},
        )

    @pytest.mark.parametrize(
        "value",
        ["}) MATCH (n) DETACH DELETE n //", "a'}) DETACH DELETE n", 'b"]->() DELETE r', "x\nMATCH (n)", "`$ids`"],
    )
    def test_values_never_enter_the_text(self, value):
        def strings(x):
            if isinstance(x, str):
                yield x
            elif isinstance(x, (list, tuple, dict)):
                for item in x.values() if isinstance(x, dict) else x:
                    yield from strings(item)

        for text, params in (
            relations([value], "both", 3),
            expand([value], None, "out", None),
            walks([value], ["a"], "out", None, None),
            walks([], ["a"], "both", None, [(value, value)]),
            two_hop_relations([value], "a", "in", None),
            names([value]),
            search(value, "exact", None),
            search(value, "contains", None),
        ):
            assert value not in text and value.lower() not in text
            assert value in strings(params) or value.lower() in strings(params)


class TestFalkorDBDialect:
    """FalkorDB's string index trims keys: entities are looked up trimmed, then checked exactly."""

    def test_lookups_start_trimmed_and_are_checked_exactly(self):
        assert relations(["m.1"], "out", None, FALKORDB) == (
            "UNWIND $ids AS id\n"
            "MATCH (a:Entity {id: trim(id)})-[r]->()\n"
            "WHERE a.id + '' = id\n"
            "RETURN id, type(r) AS relation, 'out' AS direction, count(*) AS count",
            {"ids": ["m.1"]},
        )
        text, _ = expand(["m.1"], ["a"], "both", 2, FALKORDB)
        assert text.startswith(
            "UNWIND $ids AS src\nMATCH (a:Entity {id: trim(src)})-[r:`a`]-(b)\nWHERE a.id + '' = src\nRETURN "
        )
        for text, _ in (
            two_hop_relations(["m.1"], "a", "in", None, FALKORDB),
            names(["m.1"], FALKORDB),
            types(["m.1"], FALKORDB),
        ):
            assert "MATCH (a:Entity {id: trim(id)})" in text and "\nWHERE a.id + '' = id\n" in text

    def test_walks_check_the_far_end_without_the_index(self):
        text, _ = walks([], [None, "x"], "both", 3, [("a", "b")], FALKORDB)
        assert text.splitlines()[:4] == [
            "UNWIND $groups AS g",
            "WITH g[0] AS id, g[1] AS targets",
            "MATCH (n0:Entity {id: trim(id)})-[r1]-(n1:Entity)-[r2:`x`]-(n2:Entity)",
            "WHERE n0.id + '' = id AND (n2.id + '') IN targets AND r1 <> r2",
        ]
        text, _ = walks(["a"], ["x"], "out", None, None, FALKORDB)
        assert text.splitlines()[1:3] == ["MATCH (n0:Entity {id: trim(id)})-[r1:`x`]->(n1)", "WHERE n0.id + '' = id"]

    def test_writes_find_entities_instead_of_merging_them(self):
        assert schema.add_entities(FALKORDB) == (
            "UNWIND $ids AS id\n"
            "OPTIONAL MATCH (e:Entity {id: trim(id)})\n"
            "WHERE e.id + '' = id\n"
            "WITH id, e\n"
            "WHERE e IS NULL\n"
            "CREATE (:Entity {id: id})"
        )
        assert schema.merge_entity_edges("r", FALKORDB) == (
            "UNWIND $rows AS row\n"
            "MATCH (s:Entity {id: trim(row[0])}), (o:Entity {id: trim(row[1])})\n"
            "WHERE s.id + '' = row[0] AND o.id + '' = row[1]\n"
            "MERGE (s)-[:`r`]->(o)"
        )
        assert schema.merge_literal_edges("r", FALKORDB) == (
            "UNWIND $rows AS row\n"
            "MATCH (s:Entity {id: trim(row[0])})\n"
            "WHERE s.id + '' = row[0]\n"
            "MERGE (o:Literal {key: row[1]})\n"
            "ON CREATE SET o.value = row[2], o.datatype = row[3], o.lang = row[4]\n"
            "MERGE (s)-[:`r`]->(o)"
        )
        assert schema.set_names(FALKORDB) == (
            "UNWIND $rows AS row\nMATCH (a:Entity {id: trim(row[0])})\nWHERE a.id + '' = row[0]\nSET a.name = row[1]"
        )
        assert schema.set_names() == "UNWIND $rows AS row\nMATCH (a:Entity {id: row[0]})\nSET a.name = row[1]"

    def test_edge_batches_create_missing_entities_first(self):
        triples = [Triple("a", "r", "b"), Triple("b", "r", "a"), Triple("a", "r", Literal.make("x"))]
        batches = list(schema.edge_batches(triples, 10, FALKORDB))
        assert [(text, params) for text, params in batches] == [
            (schema.add_entities(FALKORDB), {"ids": ["a", "b"]}),
            (schema.merge_entity_edges("r", FALKORDB), {"rows": [["a", "b"], ["b", "a"]]}),
            (schema.add_entities(FALKORDB), {"ids": ["a"]}),
            (
                schema.merge_literal_edges("r", FALKORDB),
                {"rows": [["a", literal_key(Literal.make("x")), "x", None, None]]},
            ),
        ]


class TestReadOnlyCheck:
    @pytest.mark.parametrize(
        "query",
        [
            "MATCH (n) RETURN n LIMIT 5",
            "MATCH (n:Entity {id: 'CREATE (x)'}) RETURN n",
            'MATCH (n) WHERE n.id = "DETACH DELETE n" RETURN n',
            "MATCH (n)-[:`SET`]->(m) RETURN m",
            "MATCH (n:Entity) RETURN n.set, n.create, $merge",
            "// DELETE everything\nMATCH (n) RETURN count(n)",
            "MATCH (n) /* MERGE (x) */ RETURN n",
            "MATCH (n) WHERE n.name STARTS WITH 'a' RETURN startNode(n)",
            "CALL db.labels() YIELD label RETURN label",
            "CALL db . relationshipTypes()",
            "MATCH (n) CALL { WITH n MATCH (n)--(m) RETURN count(m) AS c } RETURN n, c",
            "MATCH (n) CALL (n) { MATCH (n)--(m) RETURN m } RETURN m",
            "RETURN 'it''s' AS x, 'a\\'CREATE' AS y",
            "MATCH (n:Set:Create) RETURN n",
        ],
    )
    def test_reads_pass(self, query):
        readonly.check_read_only(query)

    @pytest.mark.parametrize(
        "query",
        [
            "CREATE (n:Entity {id: 'x'})",
            "create (n)",
            "MATCH (n) DETACH DELETE n",
            "MATCH (n) DELETE n",
            "MATCH (n) SET n.x = 1",
            "MATCH (n) REMOVE n.id",
            "MERGE (n:Entity {id: 'x'})",
            "MATCH (n)\nWITH n\nSET n:Foo",
            "MATCH (n) FOREACH (x IN [1] | CREATE (m))",
            "LOAD CSV FROM 'file:///x' AS row RETURN row",
            "DROP INDEX foo",
            "MATCH (n) CALL { WITH n DELETE n }",
            "MATCH (n:Entity {id: 'a'}) RETURN n; MATCH (m) DELETE m",
            "MATCH (n) RETURN n /* unterminated comment DELETE n",
            "RETURN 'unterminated string CREATE (n)",
            "MATCH (n) WHERE n.id = 'x' RETURN n //\nDELETE n",
            "CALL apoc.create.node(['X'], {})",
            "CALL `apoc.create.node`(['X'], {})",
            "CALL `db`.`labels`()",
            "CALL db.idx.fulltext.createNodeIndex('L', 'p')",
            "CALL dbms.killQueries([])",
            "CALL db.labels .create()",
            "INSERT (n:Entity)",
            "ALTER DATABASE neo4j SET ACCESS READ ONLY",
            "MATCH (n)SET n.x = 1",
        ],
    )
    def test_writes_are_refused(self, query):
        with pytest.raises(ReadOnlyViolationError):
            readonly.check_read_only(query)


class TestFalkorDBParameters:
    @pytest.mark.parametrize(
        "value, literal",
        [
            (None, "null"),
            (True, "true"),
            (-3, "-3"),
            (0.5, "0.5"),
            ("plain", "'plain'"),
            ("it's", "'it\\'s'"),
            ("back\\slash", "'back\\\\slash'"),
            ("a\\'b", "'a\\\\\\'b'"),
            ("x' RETURN 1 //", "'x\\' RETURN 1 //'"),
            (["a", ["b", 1]], "['a', ['b', 1]]"),
            ({"k": "v", "a b": None}, "{`k`: 'v', `a b`: null}"),
        ],
    )
    def test_literals(self, value, literal):
        assert cypher_params.cypher_literal(value) == literal

    @pytest.mark.parametrize("value", [float("nan"), float("inf"), "nul\x00", object(), b"bytes"])
    def test_unencodable_values_are_refused(self, value):
        with pytest.raises(InvalidInputError):
            cypher_params.cypher_literal(value)

    def test_header(self):
        text = cypher_params.inline_parameters("RETURN $a, $b", {"a": "x'", "b": [1]})
        assert text == "CYPHER a='x\\'' b=[1] RETURN $a, $b"
        assert cypher_params.inline_parameters("RETURN 1", {}) == "RETURN 1"

    @pytest.mark.parametrize("name", ["a b", "x=1 MATCH", "", "1a", "a-b"])
    def test_bad_parameter_names_are_refused(self, name):
        with pytest.raises(InvalidInputError):
            cypher_params.inline_parameters("RETURN 1", {name: 1})


class TestSchema:
    def test_neo4j_only_statements_are_apart_from_falkordb_ones(self):
        assert all(s.startswith("CREATE ") and "IF NOT EXISTS" in s for s in schema.NEO4J_SCHEMA)
        assert "REQUIRE n.id IS UNIQUE" in schema.NEO4J_SCHEMA[0]
        assert schema.falkordb_missing_indexes([]) == [
            "CREATE INDEX FOR (n:Entity) ON (n.id)",
            "CREATE INDEX FOR (n:Literal) ON (n.key)",
        ]
        assert schema.falkordb_missing_indexes([("Entity", ["id"]), ("Literal", ["key", "value"])]) == []
        assert schema.falkordb_missing_indexes([("Literal", ["key"])]) == ["CREATE INDEX FOR (n:Entity) ON (n.id)"]

    def test_merge_statements(self):
        assert schema.merge_entity_edges("film.director") == (
            "UNWIND $rows AS row\n"
            "MERGE (s:Entity {id: row[0]})\n"
            "MERGE (o:Entity {id: row[1]})\n"
            "MERGE (s)-[:`film.director`]->(o)"
        )
        assert schema.merge_literal_edges("type.object.name") == (
            "UNWIND $rows AS row\n"
            "MERGE (s:Entity {id: row[0]})\n"
            "MERGE (o:Literal {key: row[1]})\n"
            "ON CREATE SET o.value = row[2], o.datatype = row[3], o.lang = row[4]\n"
            "MERGE (s)-[:`type.object.name`]->(o)"
        )

    def test_literal_keys_tell_literals_apart_and_only_them(self):
        keys = {
            literal_key(lit)
            for lit in (
                Literal.make("1"),
                Literal.make("1", XSD + "integer"),
                Literal.make("1", lang="en"),
                Literal.make("1", lang="fr"),
                Literal.make('1"@en'),
                Literal.make("1\n"),
                Literal.make("1\\n"),
            )
        }
        assert len(keys) == 7 and all(len(k) == 32 for k in keys)
        assert literal_key(Literal.make("x", lang="EN")) == literal_key(Literal.make("x", lang="en"))

    def test_edge_batches_group_by_relation_and_object_kind(self):
        lit = Literal.make("5", XSD + "integer")
        triples = [
            Triple("a", "r", "b"),
            Triple("a", "r", lit),
            Triple("b", "r", "c"),
            Triple("c", "r", "a"),
            Triple("a", "s", "b"),
        ]
        batches = list(schema.edge_batches(triples, 2))
        assert [(text, len(params["rows"])) for text, params in batches] == [
            (schema.merge_entity_edges("r"), 2),
            (schema.merge_entity_edges("r"), 1),
            (schema.merge_literal_edges("r"), 1),
            (schema.merge_entity_edges("s"), 1),
        ]
        assert batches[0][1] == {"rows": [["a", "b"], ["b", "c"]]}
        assert batches[2][1] == {"rows": [["a", literal_key(lit), "5", XSD + "integer", None]]}

    def test_canonical_triple(self):
        t = schema.canonical_triple(Triple("a", "r", Literal("007", XSD + "integer")))
        assert t.object == Literal("7", XSD + "integer")
        for bad in (Triple("a", "r`x", "b"), Triple("a\n", "r", "b"), Triple("a", "r", 5), ("a", "r", "b")):
            with pytest.raises((InvalidInputError, InvalidIdentifierError)):
                schema.canonical_triple(bad)  # type: ignore[arg-type]
