"""The Bolt/Cypher store against a real FalkorDB server: what is particular to this backend
(bulk loading, batching, one statement per operation, the read-only passthrough, errors,
hostile input); and the neo4j-admin exporter. The shared behaviour of every store is in
test_contract.py, the randomised cross-store tests in the differential suite."""
from __future__ import annotations

import csv
import socket
import time
from pathlib import Path as FilePath

import pytest

from cypher import schema
from cypher.terms import literal_key
from engine.errors import (
    InvalidIdentifierError,
    InvalidInputError,
    ReadOnlyViolationError,
    StoreUnavailableError,
)
from engine.graph import NAME_RELATION, TYPE_RELATION, XSD, Literal, Path, Triple
from engine.open import open_store
from engine.reference import ReferenceStore
from engine.servers.base import free_port
from engine.servers.falkordb import bolt_answers
from engine.stores import bolt_quickack
from engine.stores.bolt import BOLT_HANDSHAKE, BoltStore
from loaders.neo4j_import import export_neo4j_import
from tests.test_contract import (
    GRAPH,  # the contract tests' small graph: self-loop, edges both ways, literal dead ends
)

pytestmark = pytest.mark.server

L = Literal.make
INT = XSD + "integer"


HOSTILE_IDS = [
    "it's",
    'say "hi"',
    "back`tick",
    "{braces}",
    "}) MATCH (n) DETACH DELETE n //",
    "a'}) DETACH DELETE n //",
    "x\\' RETURN 1 //",
    "$ids",
    "m.0 OR 1=1",
    "m.1",
    "m.1 ",
    "  m.1",
]
HOSTILE_LITERALS = [
    "line\nbreak",
    "quote ' and \\ backslash",
    "}) MATCH (n) DETACH DELETE n //",
    "`DETACH DELETE`",
    "tab\tand\r\n",
    "",
]
HOSTILE_RELATIONS = ["a`b", "x]->(n) DETACH DELETE n //", "`}) MATCH (n) DETACH DELETE n //", "r\nMATCH", "a b", "r'"]


@pytest.fixture
def bolt(make_store, servers):
    """``bolt(triples=(), **options)``: a fresh FalkorDB-backed store; options go to BoltStore."""
    opened: list[BoltStore] = []

    def factory(triples=(), **options) -> BoltStore:
        if not options:
            return make_store("bolt", triples)  # type: ignore[return-value]
        make_store("bolt")  # starts the server, or skips / fails saying why
        store = servers["bolt"].new_store(f"options{len(opened)}", **options)
        opened.append(store)
        store.add_triples(triples)
        return store

    yield factory
    for store in opened:
        store.close()


def record_statements(store: BoltStore, monkeypatch) -> list[tuple[str, dict, bool]]:
    """Every statement the store sends from now on: (text, params, write)."""
    sent: list[tuple[str, dict, bool]] = []
    execute = store._execute

    def recording(text, params, *, write, timeout=None):
        sent.append((text, params, write))
        return execute(text, params, write=write, timeout=timeout)

    monkeypatch.setattr(store, "_execute", recording)
    return sent


def graph_counts(store: BoltStore) -> tuple[int, int, int]:
    (row,) = store.query(
        "MATCH (n) OPTIONAL MATCH (n)-[r]->() RETURN count(DISTINCT n), count(r), count(DISTINCT n.key)"
    ).rows
    return tuple(row)  # type: ignore[return-value]


# ---------------------------------------------------------------------- loading
class TestLoading:
    def test_loading_twice_changes_nothing(self, bolt):
        store = bolt(GRAPH)
        before = (store.count_triples(), store.stats(), graph_counts(store))
        store.add_triples(GRAPH)
        store.add_triples(list(reversed(GRAPH)) + GRAPH)
        assert (store.count_triples(), store.stats(), graph_counts(store)) == before
        assert store.stats() == ReferenceStore(GRAPH).stats()

    def test_identical_literals_are_one_node(self, bolt):
        store = bolt(GRAPH)
        literals = {t.object for t in GRAPH if isinstance(t.object, Literal)}
        assert store.query("MATCH (l:Literal) RETURN count(l)").rows == [[len(literals)]]
        shared = store.query("MATCH (l:Literal {value: '5'})<-[r]-(e) RETURN count(DISTINCT l), count(r)").rows
        assert shared == [[1, 2]]

    def test_literals_are_canonicalised_on_the_way_in(self, bolt):
        store = bolt([Triple("a", "n", Literal("007", INT)), Triple("a", "n", Literal("x", lang="EN"))])
        assert sorted(e.dst for e in store.expand(["a"]).edges) == [L("7", INT), L("x", lang="en")]
        with pytest.raises(InvalidInputError):
            store.add_triples([Triple("a", "n", Literal("seven", INT))])

    def test_entities_carry_their_display_name(self, bolt):
        store = bolt(GRAPH)
        rows = store.query("MATCH (n:Entity) WHERE n.name IS NOT NULL RETURN n.id, n.name ORDER BY n.id").rows
        assert rows == [["a", "Alpha"], ["b", "ΟΔΟΣ"], ["c", "İstanbul"], ["d", "Alphabet"]]
        store.add_triples([Triple("b", NAME_RELATION, L("Beta", lang="en"))])
        assert store.query("MATCH (n:Entity {id: 'b'}) RETURN n.name").rows == [["Beta"]]

    def test_writes_are_batched_by_relation_type_and_object_kind(self, bolt, monkeypatch):
        store = bolt(batch_size=2)
        sent = record_statements(store, monkeypatch)
        triples = [Triple(f"e{i}", "r.x", f"e{i + 1}") for i in range(5)]
        triples += [Triple(f"e{i}", "r.x", L(f"v{i}")) for i in range(3)]
        triples += [Triple("e0", "/s/t", "e1")]
        store.add_triples(triples)
        flavour = store.compiler
        edges = [(text, params) for text, params, write in sent if write and "$rows" in text]
        assert [(text, len(params["rows"])) for text, params in edges] == [
            (schema.merge_entity_edges("/s/t", flavour), 1),
            (schema.merge_entity_edges("r.x", flavour), 2),
            (schema.merge_entity_edges("r.x", flavour), 2),
            (schema.merge_entity_edges("r.x", flavour), 1),
            (schema.merge_literal_edges("r.x", flavour), 2),
            (schema.merge_literal_edges("r.x", flavour), 1),
        ]
        # FalkorDB cannot MERGE entities on their id: each batch first adds the missing ones
        adds = [params["ids"] for text, params, write in sent if text == schema.add_entities(flavour)]
        assert adds == [["e0", "e1"], ["e0", "e1", "e2"], ["e2", "e3", "e4"], ["e4", "e5"], ["e0", "e1"], ["e2"]]
        assert sum(1 for text, _, _ in sent if text.startswith("CREATE INDEX")) == 2  # schema, once
        sent.clear()
        store.add_triples(triples[:1])
        assert not any(text.startswith("CREATE INDEX") for text, _, _ in sent)
        assert store.count_triples() == len(triples)

    def test_a_large_batch_goes_through_falkordbs_bolt_endpoint(self, bolt):
        # Bolt parameters over 4 KB overflow FalkorDB's buffer; the store binds them itself.
        triples = [Triple(f"m.{i:06d}", NAME_RELATION, L(f"name {i} 'quoted'")) for i in range(3000)]
        store = bolt(triples)
        assert store.count_triples() == 3000
        assert store.names(["m.000042"]) == {"m.000042": "name 42 'quoted'"}

    def test_answers_over_4_kb_are_read_with_immediate_acks(self, bolt, quick_acks_asked):
        """Connecting to FalkorDB installs the quick-ACK reads (Linux): every read of the
        driver asks for TCP_QUICKACK first, and answers past 4 KB come back whole."""
        store = bolt([Triple(f"film{i}", "starred_actors", f"actor{j}") for i in range(40) for j in range(i, i + 20)])
        assert bolt_quickack.installed()
        quick_acks_asked.clear()  # only the reads of the answer below
        edges = store.expand([f"film{i}" for i in range(40)], ["starred_actors"], "out").edges
        assert len(edges) == 800 and {e.dst for e in edges} == {f"actor{j}" for j in range(59)}
        assert quick_acks_asked and set(quick_acks_asked) == {1}

    @pytest.mark.parametrize("relation", HOSTILE_RELATIONS)
    def test_hostile_relations_are_rejected_and_nothing_is_written(self, bolt, relation):
        store = bolt(GRAPH)
        before = graph_counts(store)
        with pytest.raises(InvalidIdentifierError):
            store.add_triples([Triple("a", "ok", "b"), Triple("a", relation, "b")])
        for call in (
            lambda: store.expand(["a"], [relation]),
            lambda: store.follow_paths(["a"], ["r.x", relation]),
            lambda: store.two_hop_relations(["a"], relation),
            lambda: store.subgraph(["a"], 2, relations=[relation]),
        ):
            with pytest.raises(InvalidIdentifierError):
                call()
        assert graph_counts(store) == before


class TestHostileValues:
    def test_ids_and_literals_are_matched_literally(self, bolt):
        triples = [Triple(i, "r", HOSTILE_IDS[(k + 1) % len(HOSTILE_IDS)]) for k, i in enumerate(HOSTILE_IDS)]
        triples += [Triple(i, NAME_RELATION, L(v)) for i, v in zip(HOSTILE_IDS, HOSTILE_LITERALS, strict=False)]
        store = bolt(triples)
        reference = ReferenceStore(triples)
        before = graph_counts(store)
        assert store.count_triples() == len(triples)
        for direction in ("out", "in", "both"):
            assert store.expand(HOSTILE_IDS, None, direction) == reference.expand(HOSTILE_IDS, None, direction)
            assert store.relations(HOSTILE_IDS, direction) == reference.relations(HOSTILE_IDS, direction)
            assert store.follow_paths(HOSTILE_IDS, ["r", "r"], direction) == reference.follow_paths(
                HOSTILE_IDS, ["r", "r"], direction
            )
        assert store.names(HOSTILE_IDS) == reference.names(HOSTILE_IDS)
        assert store.shortest_paths(HOSTILE_IDS[:2], HOSTILE_IDS[-2:]) == reference.shortest_paths(
            HOSTILE_IDS[:2], HOSTILE_IDS[-2:]
        )
        for text in HOSTILE_LITERALS[:-1]:
            for mode in ("exact", "prefix", "contains"):
                assert store.search(text, mode) == reference.search(text, mode)
        assert store.expand(["nope' OR 1=1 //"]).edges == []
        rows = store.query("MATCH (n:Entity {id: $id})-->(m) RETURN m", {"id": HOSTILE_IDS[4]}).rows
        assert sorted(rows, key=repr) == sorted([[HOSTILE_IDS[5]], [L(HOSTILE_LITERALS[4])]], key=repr)
        assert graph_counts(store) == before


# ---------------------------------------------------------------------- reading
class TestOperations:
    @pytest.mark.parametrize(
        "text, mode",
        [("alpha", "exact"), ("Alpha", "exact"), ("ALPH", "prefix"), ("οδος", "contains"), ("ΟΔΟ", "prefix"),
         ("i̇st", "prefix"), ("ist", "prefix"), ("a", "contains")],
    )  # fmt: skip
    def test_search_lowercases_like_python(self, bolt, text, mode):
        # FalkorDB lowers İ and a final Σ differently from Python; the store corrects for it.
        store = bolt(GRAPH)
        assert store.search(text, mode) == ReferenceStore(GRAPH).search(text, mode)

    def test_search_limit_counts_only_real_matches(self, bolt):
        names = ["ΣA", "ΣB", "ΣC", "zz1", "zz2"]
        store = bolt([Triple(f"e{i}", NAME_RELATION, L(n)) for i, n in enumerate(names)])
        result = store.search("zz", "contains", limit=1)
        assert result.truncated and len(result.hits) == 1 and result.hits[0].name in ("zz1", "zz2")
        assert [h.name for h in store.search("zz", "contains", limit=2).hits] == ["zz1", "zz2"]

    def test_limits_cut_inside_the_database(self, bolt, monkeypatch):
        hub = [Triple("hub", "r", f"e{i}") for i in range(50)]
        store = bolt(hub)
        sent = record_statements(store, monkeypatch)
        result = store.expand(["hub"], limit=7)
        assert result.truncated and len(result.edges) == 7
        assert set(result.edges) <= set(ReferenceStore(hub).expand(["hub"]).edges)
        assert sent[0][1]["fetch"] == 8

    def test_each_operation_is_one_round_trip(self, bolt, monkeypatch):
        store = bolt(GRAPH)
        sent = record_statements(store, monkeypatch)
        ids = ["a", "b", "c"]
        for call in (
            lambda: store.relations(ids),
            lambda: store.expand(ids),
            lambda: store.follow_paths(ids, ["r.x", "r.x"]),
            lambda: store.two_hop_relations(ids, "r.x"),
            lambda: store.names(ids),
            lambda: store.types(ids),
            lambda: store.search("alpha", "prefix"),
        ):
            sent.clear()
            call()
            assert len(sent) == 1

    def test_open_store_dispatches_bolt_uris(self, bolt):
        store = bolt(GRAPH)
        with open_store(store.uri) as opened:
            assert isinstance(opened, BoltStore) and opened.dialect == "cypher"
            assert opened.count_triples() == len(GRAPH)


# ---------------------------------------------------------------------- query
class TestQuery:
    def test_reads_return_engine_values(self, bolt):
        store = bolt(GRAPH)
        result = store.query("MATCH (n:Entity {id: $id})-[r]->(m) RETURN n, type(r) AS t, m ORDER BY t", {"id": "b"})
        assert result.columns == ["n", "t", "m"]
        assert result.rows == [
            ["b", "/film/y", "c"],
            ["b", "n.count", L("5", INT)],
            ["b", "r.x", "a"],
            ["b", NAME_RELATION, L("ΟΔΟΣ")],
            ["b", TYPE_RELATION, "t.person"],
        ]
        (row,) = store.query("MATCH p = (:Entity {id: 'c'})<-[:`/film/y`]-(b) RETURN p, relationships(p)[0]").rows
        assert row == [Path(("c", "b"), ("/film/y",), (False,)), "/film/y"]

    @pytest.mark.parametrize(
        "text",
        [
            "MATCH (n) DETACH DELETE n",
            "match (n) set n.id = 'x'",
            "CREATE (:Entity {id: 'new'})",
            "MATCH (n:Entity {id: 'a'}) CALL { WITH n DELETE n }",
            "CALL db.idx.fulltext.createNodeIndex('Literal', 'value')",
            "MATCH (n) WHERE n.id = '' RETURN n // x\nDETACH DELETE n",
        ],
    )
    def test_writes_are_refused_before_they_are_sent(self, bolt, monkeypatch, text):
        store = bolt(GRAPH)
        before = graph_counts(store)
        sent = record_statements(store, monkeypatch)
        with pytest.raises(ReadOnlyViolationError):
            store.query(text)
        assert sent == []
        assert graph_counts(store) == before

    def test_keywords_inside_strings_and_names_are_fine(self, bolt):
        store = bolt([Triple("CREATE", "SET", L("DETACH DELETE n"))])
        query = "MATCH (n:Entity {id: 'CREATE'})-[:`SET`]->(m) WHERE m.value = 'DETACH DELETE n' RETURN m"
        rows = store.query(query).rows
        assert rows == [[L("DETACH DELETE n")]]


# ---------------------------------------------------------------------- connection
class TestConnection:
    def test_unreachable_server_names_the_uri_without_the_password(self):
        port = free_port()
        with pytest.raises(StoreUnavailableError) as e:
            BoltStore(f"bolt://neo:s3cret@127.0.0.1:{port}?database=x", timeout=3)
        message = str(e.value)
        assert f"bolt://neo@127.0.0.1:{port}?database=x" in message and "s3cret" not in message

    @pytest.mark.parametrize(
        "uri",
        ["http://127.0.0.1:7687", "bolt://127.0.0.1:7687?routing=x", "bolt://", "127.0.0.1:7687", None],
    )
    def test_bad_uris_are_refused(self, uri):
        with pytest.raises(InvalidInputError):
            BoltStore(uri)  # type: ignore[arg-type]

    @pytest.mark.parametrize("options", [{"batch_size": 0}, {"batch_size": True}, {"timeout": 0}, {"timeout": "1"}])
    def test_bad_options_are_refused(self, options):
        with pytest.raises(InvalidInputError):
            BoltStore("bolt://127.0.0.1:1", **options)

    def test_credentials_from_the_uri_and_the_environment(self, bolt, monkeypatch):
        port = bolt().uri.split(":")[2].split("?")[0]
        monkeypatch.setenv("NEO4J_USER", "falkordb")
        monkeypatch.setenv("NEO4J_PASSWORD", "not-the-password")
        with pytest.raises(StoreUnavailableError, match="password"):
            BoltStore(f"bolt://127.0.0.1:{port}", timeout=5)
        with BoltStore(f"bolt://falkordb:@127.0.0.1:{port}", timeout=5) as store:  # the URI wins
            assert store.uri == f"bolt://falkordb@127.0.0.1:{port}" and store.count_triples() == 0
        with BoltStore(f"bolt://127.0.0.1:{port}", user="falkordb", password="", timeout=5) as store:
            assert repr(store) == f"BoltStore('bolt://127.0.0.1:{port}')"

    def test_closing_leaves_falkordb_answering_the_next_client(self, bolt):
        # FalkorDB stops answering handshakes after a client's GOODBYE unless the store resets it.
        store = bolt(GRAPH)
        port = int(store.uri.split(":")[2].split("?")[0])
        for _ in range(3):
            other = BoltStore(f"bolt://127.0.0.1:{port}", timeout=5)
            other.close()
            assert bolt_answers(port)
        assert store.count_triples() == len(GRAPH)

    def test_connecting_gets_past_a_socket_left_stuck_by_another_client(self, bolt):
        store = bolt(GRAPH)
        port = int(store.uri.split(":")[2].split("?")[0])
        with socket.create_connection(("127.0.0.1", port)) as rude:  # handshake, GOODBYE, gone
            rude.sendall(BOLT_HANDSHAKE)
            assert len(rude.recv(4)) == 4
            rude.sendall(bytes.fromhex("0002b0020000"))
            time.sleep(0.1)
        with BoltStore(f"bolt://127.0.0.1:{port}", timeout=2) as other:
            assert other.count_triples() == len(GRAPH)

    def test_falkordb_ignores_the_database_name(self, bolt):
        # A FalkorDB quirk this store documents: every Bolt session uses the graph "falkordb".
        store = bolt([Triple("a", "r", "b")])
        port = store.uri.split(":")[2].split("?")[0]
        with BoltStore(f"bolt://127.0.0.1:{port}?database=another", timeout=5) as other:
            assert other.count_triples() == 1

    def test_a_closed_store_says_so(self, bolt):
        store = bolt(GRAPH)
        store.close()
        store.close()
        with pytest.raises(Exception, match="closed"):
            store.count_triples()


# ---------------------------------------------------------------------- neo4j-admin import
def read_csv(path: str) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


class TestNeo4jImport:
    def test_files_headers_rows_and_command(self, tmp_path):
        triples = GRAPH + GRAPH[:3] + [Triple("e", "p", L("two\nlines")), Triple("e", "p", L(""))]
        plan = export_neo4j_import(triples, tmp_path / "import", database="kgqa")
        assert (plan.triples, plan.duplicates, plan.entities) == (len(GRAPH) + 2, 3, 6)

        nodes = read_csv(plan.node_files[0])
        assert nodes[0] == ["id:ID(Entity)", "name", ":LABEL"]
        assert sorted(nodes[1:]) == [
            ["a", "Alpha", "Entity"],
            ["b", "ΟΔΟΣ", "Entity"],
            ["c", "İstanbul", "Entity"],
            ["d", "Alphabet", "Entity"],
            ["e", "", "Entity"],
            ["t.person", "", "Entity"],
        ]
        assert ',"",' not in FilePath(plan.node_files[0]).read_text(encoding="utf-8")  # no name is null, not ""

        literals = read_csv(plan.node_files[1])
        assert literals[0] == ["key:ID(Literal)", "value", "datatype", "lang", ":LABEL"]
        by_value = {row[1]: row for row in literals[1:]}
        assert len(literals) - 1 == plan.literals == 8
        assert by_value["5"] == [literal_key(L("5", INT)), "5", INT, "", "Literal"]
        assert by_value["Alpha"][3] == "en" and by_value["two\nlines"][0] == literal_key(L("two\nlines"))
        assert ',"",,,"Literal"' in FilePath(plan.node_files[1]).read_text(encoding="utf-8")  # "" stays "", not null

        relationships = {}
        for path in plan.relationship_files:
            rows = read_csv(path)
            relationships[(rows[1][2], rows[0][1])] = (rows[0], sorted(rows[1:]))
        assert relationships[("r.x", ":END_ID(Entity)")] == (
            [":START_ID(Entity)", ":END_ID(Entity)", ":TYPE"],
            [["a", "a", "r.x"], ["a", "b", "r.x"], ["b", "a", "r.x"]],
        )
        header, rows = relationships[("n.count", ":END_ID(Literal)")]
        assert header == [":START_ID(Entity)", ":END_ID(Literal)", ":TYPE"]
        five = literal_key(L("5", INT))
        assert rows == [["b", five, "n.count"], ["c", five, "n.count"]]
        assert len(plan.relationship_files) == 7  # r.x, /film/y, p (entity and literal), name, type, n.count
        assert any("film_y" in f for f in plan.relationship_files)

        assert plan.command[:4] == ["neo4j-admin", "database", "import", "full"]
        assert plan.command[-2:] == ["--multiline-fields=true", "kgqa"]
        assert f"--nodes={plan.node_files[0]}" in plan.command
        assert all(f"--relationships={f}" in plan.command for f in plan.relationship_files)
        assert plan.command_line.startswith("neo4j-admin database import full --nodes=")
        schema_lines = FilePath(plan.schema_file).read_text(encoding="utf-8").splitlines()
        assert schema_lines == [s + ";" for s in schema.NEO4J_SCHEMA]
        assert plan.schema_command == ["cypher-shell", "-d", "kgqa", "-f", plan.schema_file]

    @pytest.mark.parametrize("database", ["kg", "bad db; rm -rf /", "1graph", "x" * 64, "graph_1", "grafó"])
    def test_a_database_name_neo4j_cannot_create_is_refused_before_anything_is_written(self, tmp_path, database):
        with pytest.raises(InvalidInputError, match="invalid Neo4j database name"):
            export_neo4j_import([Triple("a", "r", "b")], tmp_path / "import", database=database)
        assert not (tmp_path / "import").exists()
        assert export_neo4j_import([Triple("a", "r", "b")], tmp_path / "ok", database="free-base.v2").command[-1] == "free-base.v2"

    def test_bad_triples_stop_the_export(self, tmp_path):
        with pytest.raises(InvalidIdentifierError):
            export_neo4j_import([Triple("a", "r`) DELETE", "b")], tmp_path)
        plan = export_neo4j_import([Triple("a", "r", "b")], tmp_path)
        assert "--multiline-fields=true" not in plan.command and len(plan.relationship_files) == 1


def test_bolt_port_is_really_bolt(bolt):
    """The test server's own readiness probe speaks Bolt, not just TCP."""
    port = int(bolt().uri.split(":")[2].split("?")[0])
    assert bolt_answers(port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert not bolt_answers(s.getsockname()[1])
