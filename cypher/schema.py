"""Schema (indexes, constraints) and bulk-write statements of the property-graph layout.

Layout: entity nodes ``(:Entity {id, name})``; one relationship type per relation (backticked,
validated); literal objects as ``(:Literal {key, value, datatype, lang})`` nodes MERGEd on
``key``, a digest of the literal's N-Triples form, so that identical literals are one node and
the key stays short enough for any index.

What differs between the servers is kept apart: :data:`NEO4J_SCHEMA` (uniqueness constraints,
a TEXT index) is Neo4j 5 only; FalkorDB gets plain range indexes, created once each
(:func:`falkordb_missing_indexes`), since it has no ``IF NOT EXISTS``. FalkorDB's string index
is not exact (see :class:`cypher.compiler.FalkorDBCompiler`), so there entities are not MERGEd on their
id but looked up exactly and created when missing, and literal values are not indexed.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from cypher.compiler import NEO4J, CypherCompiler
from cypher.terms import literal_key, quote_relation, where_clause
from engine.errors import InvalidInputError
from engine.graph import Literal, Triple
from engine.identifiers import validate_id, validate_relation
from engine.ops import Compiled

# ---------------------------------------------------------------------- Neo4j 5 only
NEO4J_SCHEMA = (
    "CREATE CONSTRAINT kgqa_entity_id IF NOT EXISTS FOR (n:Entity) REQUIRE n.id IS UNIQUE",
    "CREATE CONSTRAINT kgqa_literal_key IF NOT EXISTS FOR (n:Literal) REQUIRE n.key IS UNIQUE",
    # TEXT, not RANGE: range index keys are limited to 8 KB and literal values can be longer.
    "CREATE TEXT INDEX kgqa_literal_value IF NOT EXISTS FOR (n:Literal) ON (n.value)",
)
#: Answers on Neo4j; fails on FalkorDB, which tells the two apart (both announce "Neo4j/5.x").
NEO4J_COMPONENTS = "CALL dbms.components() YIELD name, versions, edition RETURN name, versions, edition"

# ---------------------------------------------------------------------- FalkorDB
FALKORDB_INDEXES = (("Entity", "id"), ("Literal", "key"))
FALKORDB_LIST_INDEXES = "CALL db.indexes() YIELD label, properties RETURN label, properties"


def falkordb_missing_indexes(existing: Iterable[tuple[str, list[str]]]) -> list[str]:
    """CREATE INDEX statements for the indexes not among ``existing`` (label, properties)."""
    have = {(label, prop) for label, props in existing for prop in props}
    return [
        f"CREATE INDEX FOR (n:{label}) ON (n.{prop})" for label, prop in FALKORDB_INDEXES if (label, prop) not in have
    ]


# ---------------------------------------------------------------------- bulk writes
def canonical_triple(triple: Triple) -> Triple:
    """``triple`` validated (ids, relation), with its literal object in canonical form."""
    if not isinstance(triple, Triple):
        raise InvalidInputError(f"expected a Triple, got {triple!r}")
    obj = triple.object
    if isinstance(obj, Literal):
        obj = Literal.make(obj.value, obj.datatype, obj.lang)
    elif isinstance(obj, str):
        validate_id(obj)
    else:
        raise InvalidInputError(f"the object of {triple!r} must be an id (str) or a Literal")
    return Triple(validate_id(triple.subject), validate_relation(triple.relation), obj)


def merge_entity_edges(relation: str, dialect: CypherCompiler = NEO4J) -> str:
    """Rows [subject, object id]: MERGE both entities (on FalkorDB: find them, see
    :func:`add_entities`) and the edge between them."""
    if dialect.exact_index:
        ends = "MERGE (s:Entity {id: row[0]})\nMERGE (o:Entity {id: row[1]})"
    else:
        (s, s_conditions), (o, o_conditions) = dialect.entity("s", "row[0]"), dialect.entity("o", "row[1]")
        ends = f"MATCH {s}, {o}" + where_clause(s_conditions + o_conditions)
    return f"UNWIND $rows AS row\n{ends}\nMERGE (s)-[:{quote_relation(relation)}]->(o)"


def merge_literal_edges(relation: str, dialect: CypherCompiler = NEO4J) -> str:
    """Rows [subject, key, value, datatype, lang]: MERGE the entity (on FalkorDB: find it),
    the literal node and the edge."""
    if dialect.exact_index:
        subject = "MERGE (s:Entity {id: row[0]})"
    else:
        pattern, conditions = dialect.entity("s", "row[0]")
        subject = f"MATCH {pattern}" + where_clause(conditions)
    return (
        f"UNWIND $rows AS row\n{subject}\n"
        "MERGE (o:Literal {key: row[1]})\n"
        "ON CREATE SET o.value = row[2], o.datatype = row[3], o.lang = row[4]\n"
        f"MERGE (s)-[:{quote_relation(relation)}]->(o)"
    )


def add_entities(dialect: CypherCompiler) -> str:
    """Ids (distinct): create the entities not there yet. Needed where MERGE cannot be trusted
    to find an entity by id (FalkorDB)."""
    pattern, conditions = dialect.entity("e", "id")
    return (
        f"UNWIND $ids AS id\nOPTIONAL MATCH {pattern}"
        + where_clause(conditions)
        + "\nWITH id, e\nWHERE e IS NULL\nCREATE (:Entity {id: id})"
    )


def set_names(dialect: CypherCompiler = NEO4J) -> str:
    """Rows [id, name]: the display name property of entity nodes."""
    pattern, conditions = dialect.entity("a", "row[0]")
    return f"UNWIND $rows AS row\nMATCH {pattern}" + where_clause(conditions) + "\nSET a.name = row[1]"


def edge_batches(triples: Iterable[Triple], batch_size: int, dialect: CypherCompiler = NEO4J) -> Iterator[Compiled]:
    """Bulk MERGE statements for ``triples`` (canonical, validated, without duplicates), grouped
    by relationship type and object kind, since a relationship type cannot be a parameter;
    at most ``batch_size`` rows each. On FalkorDB each is preceded by the :func:`add_entities`
    statement for the entities it links."""
    groups: dict[tuple[str, bool], list[list]] = defaultdict(list)
    for t in triples:
        if isinstance(t.object, Literal):
            o = t.object
            groups[(t.relation, True)].append([t.subject, literal_key(o), o.value, o.datatype, o.lang])
        else:
            groups[(t.relation, False)].append([t.subject, t.object])
    for (relation, is_literal), rows in sorted(groups.items()):
        text = merge_literal_edges(relation, dialect) if is_literal else merge_entity_edges(relation, dialect)
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            if not dialect.exact_index:
                ids = [row[0] for row in batch] + ([] if is_literal else [row[1] for row in batch])
                yield add_entities(dialect), {"ids": list(dict.fromkeys(ids))}
            yield text, {"rows": batch}


def name_batches(names: dict[str, str], batch_size: int, dialect: CypherCompiler = NEO4J) -> Iterator[Compiled]:
    """SET statements for the ``name`` property of entity nodes, ``batch_size`` rows each."""
    rows = [[i, n] for i, n in sorted(names.items())]
    for start in range(0, len(rows), batch_size):
        yield set_names(dialect), {"rows": rows[start:start + batch_size]}
