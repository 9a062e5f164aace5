"""The Cypher compiler: one builder per store operation, each returning ``(text, params)``.

Values (ids, names, literals, limits) always travel as ``$parameters``. Relationship types
cannot be parameters, so relation names enter the text only through :func:`quote_relation`,
after :func:`engine.identifiers.validate_relation`.

The graph layout (see ``cypher/schema.py``): ``(:Entity {id, name})`` nodes, one relationship
type per relation, and ``(:Literal {key, value, datatype, lang})`` nodes as literal objects.

How the walk semantics of ``engine/store.py`` map onto Cypher:
- ``out`` / ``in`` are directed patterns; ``both`` is an undirected pattern, which per openCypher
  matches a self-loop once, and ``startNode(r) = a`` then reports it as forward;
- literals are dead ends: every node of a walk but the last is labelled ``:Entity``;
- a walk never reuses a relationship: Neo4j guarantees it within one MATCH, FalkorDB does not,
  so the builders state it (``WHERE r1 <> r2 …``); walks that may reuse edges
  (``distinct_edges=False``) put each hop in a MATCH of its own.

Where Neo4j 5 and FalkorDB need different text, a :class:`Flavour` says how: only the lookup
of an entity by id differs (FalkorDB's string index trims the keys it stores and does not check
what it returns). FalkorDB's parameter transport (:func:`inline_parameters`) and the read-only
check (:func:`check_read_only`) live here too, since both are about Cypher text.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidInputError, ReadOnlyViolationError
from engine.graph import NAME_RELATION, TYPE_RELATION
from engine.identifiers import validate_relation

Compiled = tuple[str, dict[str, Any]]

#: Characters whose lower-casing differs between Python and some Cypher servers: FalkorDB
#: lowers U+0130 to one code point where Python (and Java) give two, and ignores the
#: word-final sigma rule. Names holding them are filtered again in Python by ``search``.
CASE_SPECIAL = ("\u0130", "\u03a3")


@dataclass(frozen=True)
class Flavour:
    """What differs in the text between servers.

    ``exact_index``: the server's string index finds exactly the key looked up (Neo4j). FalkorDB
    4.16's does not: it stores keys with leading and trailing blanks trimmed and does not check
    its hits, so looking up ``'x '`` finds nothing and ``'x'`` also finds ``' x'``. There an
    entity is looked up by its id trimmed of spaces (which ids may contain; other blanks are
    control characters, which they may not) and the hits are checked exactly, in a form
    (``id + ''``) that the planner cannot turn back into an index lookup.
    """

    name: str
    exact_index: bool

    def entity(self, var: str, key: str) -> tuple[str, list[str]]:
        """The node pattern of the entity whose id is the expression ``key``, where the match
        starts (the only node of its pattern looked up by id), and the conditions to add to the
        WHERE clause."""
        if self.exact_index:
            return f"({var}:Entity {{id: {key}}})", []
        return f"({var}:Entity {{id: trim({key})}})", [f"{var}.id + '' = {key}"]

    def entity_reached(self, var: str, key: str) -> tuple[str, list[str]]:
        """Like :meth:`entity` for a node that the match reaches rather than starts from: on
        FalkorDB a lookup there is a plain filter, which the trimmed key would break."""
        if self.exact_index:
            return self.entity(var, key)
        return f"({var}:Entity)", [f"{var}.id + '' = {key}"]


NEO4J = Flavour("neo4j", exact_index=True)
FALKORDB = Flavour("falkordb", exact_index=False)


def quote_relation(name: str) -> str:
    """A relation name as a backticked relationship type (the only way one enters the text)."""
    return "`" + validate_relation(name).replace("`", "``") + "`"


def _types(relations: Sequence[str] | None) -> str:
    """The type filter of a relationship pattern: ``:`a`|`b```, or nothing for any type."""
    if not relations:
        return ""
    return ":" + "|".join(quote_relation(r) for r in relations)


def _hop(direction: str, var: str, relations: Sequence[str] | None = None) -> str:
    """A relationship pattern between two node patterns, e.g. ``-[r1:`a`]->``."""
    inner = f"[{var}{_types(relations)}]"
    if direction == "out":
        return f"-{inner}->"
    if direction == "in":
        return f"<-{inner}-"
    return f"-{inner}-"


def _forward(direction: str, rel: str, src: str) -> str:
    """Whether the hop over ``rel`` from ``src`` follows the stored orientation."""
    if direction == "both":
        return f"startNode({rel}) = {src}"
    return "true" if direction == "out" else "false"


def _limit(fetch: int | None, params: dict[str, Any]) -> str:
    if fetch is None:
        return ""
    params["fetch"] = fetch
    return "\nLIMIT $fetch"


def where_clause(conditions: Sequence[str]) -> str:
    """A WHERE clause on a line of its own, or nothing."""
    return "\nWHERE " + " AND ".join(conditions) if conditions else ""


def _distinct_relationships(rels: Sequence[str]) -> list[str]:
    return [f"{a} <> {b}" for i, a in enumerate(rels) for b in rels[i + 1:]]


# ---------------------------------------------------------------------- operations
def relations(ids: list[str], direction: str, fetch: int | None, flavour: Flavour = NEO4J) -> Compiled:
    """Rows (id, relation, direction, count) of the edges adjacent to each id."""
    params: dict[str, Any] = {"ids": ids}
    sides = {"out": "'out'", "in": "'in'", "both": "CASE WHEN startNode(r) = a THEN 'out' ELSE 'in' END"}
    side = sides[direction]
    start, conditions = flavour.entity("a", "id")
    text = (
        "UNWIND $ids AS id\n"
        f"MATCH {start}{_hop(direction, 'r')}()"
        + where_clause(conditions)
        + f"\nRETURN id, type(r) AS relation, {side} AS direction, count(*) AS count"
        + _limit(fetch, params)
    )
    return text, params


def literal_relations(keys: list[str], fetch: int | None) -> Compiled:
    """Rows (key, relation, count) of the edges entering the literal node of each key
    (:func:`cypher.schema.literal_key`); a literal's edges all enter it."""
    params: dict[str, Any] = {"keys": keys}
    text = (
        "UNWIND $keys AS key\n"
        "MATCH (:Literal {key: key})<-[r]-()\n"
        "RETURN key, type(r) AS relation, count(*) AS count"
        + _limit(fetch, params)
    )
    return text, params


def expand(
    ids: list[str], relations: list[str] | None, direction: str, fetch: int | None, flavour: Flavour = NEO4J
) -> Compiled:
    """Rows (src, relation, id, value, datatype, lang, forward): one per edge met from an id;
    the far node is an entity (``id``) or a literal (``value``, ``datatype``, ``lang``)."""
    params: dict[str, Any] = {"ids": ids}
    start, conditions = flavour.entity("a", "src")
    text = (
        "UNWIND $ids AS src\n"
        f"MATCH {start}{_hop(direction, 'r', relations)}(b)"
        + where_clause(conditions)
        + "\nRETURN src, type(r) AS relation, b.id AS id, b.value AS value, b.datatype AS datatype, "
        f"b.lang AS lang, {_forward(direction, 'r', 'a')} AS forward"
        + _limit(fetch, params)
    )
    return text, params


def walks(
    seeds: list[str],
    path: list[str | None],
    direction: str,
    fetch: int | None,
    pairs: list[tuple[str, str]] | None,
    flavour: Flavour = NEO4J,
    distinct_edges: bool = True,
) -> Compiled:
    """Rows (ids, value, datatype, lang, relations, forward), one per walk following ``path``
    (None = any relation). ``ids`` lists the node ids; the last is null when the walk ends on
    a literal, described by ``value``/``datatype``/``lang``. With ``pairs``, only walks from
    pair[0] ending at pair[1]. With ``distinct_edges=False`` each hop is a MATCH of its own,
    since relationship uniqueness holds only within one MATCH."""
    k = len(path)
    nodes = [f"n{i}" for i in range(k + 1)]
    rels = [f"r{i}" for i in range(1, k + 1)]
    if pairs is None:
        params: dict[str, Any] = {"ids": seeds}
        start, conditions = flavour.entity("n0", "id")
        text = f"UNWIND $ids AS id\nMATCH {start}"
        last = f"({nodes[-1]})"
    else:
        params = {"pairs": [list(p) for p in pairs]}
        start, conditions = flavour.entity("n0", "pair[0]")
        last, end_conditions = flavour.entity_reached(nodes[-1], "pair[1]")
        conditions += end_conditions
        text = f"UNWIND $pairs AS pair\nMATCH {start}"
    for i, relation in enumerate(path):
        if i > 0 and not distinct_edges:
            text += f"\nMATCH ({nodes[i]})"
        text += _hop(direction, rels[i], None if relation is None else [relation])
        text += last if i == k - 1 else f"({nodes[i + 1]}:Entity)"
    end = nodes[-1]
    text += (
        where_clause(conditions + (_distinct_relationships(rels) if distinct_edges else []))
        + f"\nRETURN [{', '.join(n + '.id' for n in nodes)}] AS ids, "
        f"{end}.value AS value, {end}.datatype AS datatype, {end}.lang AS lang, "
        f"[{', '.join(f'type({r})' for r in rels)}] AS relations, "
        f"[{', '.join(_forward(direction, r, nodes[i]) for i, r in enumerate(rels))}] AS forward"
        + _limit(fetch, params)
    )
    return text, params


def two_hop_relations(
    ids: list[str], r1: str, direction: str, fetch: int | None, flavour: Flavour = NEO4J
) -> Compiled:
    """Rows (id, relation, direction, count) over the edges of the distinct entities reached
    from each id through ``r1``; a self-loop counts once, as ``out``."""
    params: dict[str, Any] = {"ids": ids}
    start, conditions = flavour.entity("a", "id")
    text = (
        "UNWIND $ids AS id\n"
        f"MATCH {start}{_hop(direction, '', [r1])}(m:Entity)"
        + where_clause(conditions)
        + "\nWITH DISTINCT id, m\n"
        "MATCH (m)-[r]-()\n"
        "RETURN id, type(r) AS relation, CASE WHEN startNode(r) = m THEN 'out' ELSE 'in' END AS direction, "
        "count(*) AS count"
        + _limit(fetch, params)
    )
    return text, params


def literal_two_hop_relations(keys: list[str], r1: str, fetch: int | None) -> Compiled:
    """Rows (key, relation, direction, count) over the edges of the distinct entities with an
    ``r1`` edge to the literal node of each key; a self-loop counts once, as ``out``."""
    params: dict[str, Any] = {"keys": keys}
    text = (
        "UNWIND $keys AS key\n"
        f"MATCH (:Literal {{key: key}})<-[:{quote_relation(r1)}]-(m:Entity)\n"
        "WITH DISTINCT key, m\n"
        "MATCH (m)-[r]-()\n"
        "RETURN key, type(r) AS relation, CASE WHEN startNode(r) = m THEN 'out' ELSE 'in' END AS direction, "
        "count(*) AS count"
        + _limit(fetch, params)
    )
    return text, params


def names(ids: list[str], flavour: Flavour = NEO4J) -> Compiled:
    """Rows (id, value, datatype, lang): every literal name of each id."""
    start, conditions = flavour.entity("a", "id")
    text = (
        "UNWIND $ids AS id\n"
        f"MATCH {start}-[:{quote_relation(NAME_RELATION)}]->(l:Literal)"
        + where_clause(conditions)
        + "\nRETURN id, l.value AS value, l.datatype AS datatype, l.lang AS lang"
    )
    return text, {"ids": ids}


def types(ids: list[str], flavour: Flavour = NEO4J) -> Compiled:
    """Rows (id, type): every entity class of each id."""
    start, conditions = flavour.entity("a", "id")
    text = (
        "UNWIND $ids AS id\n"
        f"MATCH {start}-[:{quote_relation(TYPE_RELATION)}]->(t:Entity)"
        + where_clause(conditions)
        + "\nRETURN id, t.id AS type"
    )
    return text, {"ids": ids}


def search(text: str, mode: str, fetch: int | None) -> Compiled:
    """Rows (id, name) of entities whose name literal matches ``text``. ``prefix`` and
    ``contains`` compare lower-cased (the needle lowered here, in Python) and also return
    every name holding a :data:`CASE_SPECIAL` character, for the caller to filter."""
    if mode == "exact":
        params: dict[str, Any] = {"text": text}
        condition = "l.value = $text"
    else:
        params = {"needle": text.lower(), "special": list(CASE_SPECIAL)}
        operator = "STARTS WITH" if mode == "prefix" else "CONTAINS"
        condition = f"toLower(l.value) {operator} $needle OR any(c IN $special WHERE l.value CONTAINS c)"
    query = (
        f"MATCH (a:Entity)-[:{quote_relation(NAME_RELATION)}]->(l:Literal)\n"
        f"WHERE {condition}\n"
        "RETURN DISTINCT a.id AS id, l.value AS name"
        + _limit(fetch, params)
    )
    return query, params


def count_triples() -> Compiled:
    return "MATCH ()-[r]->() RETURN count(r) AS count", {}


def count_entities() -> Compiled:
    return "MATCH (n:Entity) RETURN count(n) AS count", {}


def relation_types() -> Compiled:
    return "CALL db.relationshipTypes() YIELD relationshipType RETURN relationshipType", {}


def count_relations(relations: list[str]) -> Compiled:
    """Rows (i, count): the number of edges of ``relations[i]``, one branch per type so that
    Neo4j answers each from its count store."""
    branches = [
        f"MATCH ()-[r:{quote_relation(rel)}]->() RETURN {i} AS i, count(r) AS count"
        for i, rel in enumerate(relations)
    ]
    return "\nUNION ALL\n".join(branches), {}


# ---------------------------------------------------------------------- read-only check
# String literals, comments and backticked names, scanned left to right so that one cannot
# hide another (a quote inside a comment, ``//`` inside a string). Backticked names become a
# placeholder word, so that ``CALL `a.b`()`` still shows a procedure call.
_OPAQUE = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/|(`(?:[^`]|``)*`)""", re.DOTALL)
_WRITE_KEYWORDS = frozenset(
    ("CREATE", "MERGE", "DELETE", "DETACH", "SET", "REMOVE", "DROP", "LOAD", "FOREACH", "INSERT", "ALTER")
    + ("RENAME", "GRANT", "DENY", "REVOKE", "START", "STOP", "TERMINATE", "ENABLE", "DEALLOCATE", "REALLOCATE")
)
# Words preceded by `.`, `$` or `:` are property, parameter, label or type names.
_WORD = re.compile(r"(?<![.$:\w])[A-Za-z_]\w*")
# A procedure name after CALL; Cypher allows blanks around the dots.
_CALL_TARGET = re.compile(r"\s*([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)")
READ_ONLY_PROCEDURES = frozenset(
    name.lower()
    for name in (
        "db.labels", "db.relationshipTypes", "db.propertyKeys", "db.indexes", "db.constraints",
        "db.schema.visualization", "db.schema.nodeTypeProperties", "db.schema.relTypeProperties",
        "db.info", "db.ping", "db.meta.stats",
        "db.index.fulltext.queryNodes", "db.index.fulltext.queryRelationships",
        "db.index.vector.queryNodes", "db.index.vector.queryRelationships",
        "db.idx.fulltext.queryNodes", "db.idx.fulltext.queryRelationships", "db.idx.vector.queryNodes",
    )
)


def check_read_only(text: str) -> None:
    """Raise ReadOnlyViolationError unless ``text`` only reads: no writing clause, and CALL
    only of a subquery or a read-only ``db.`` procedure."""
    code = _OPAQUE.sub(lambda m: " quoted_name " if m.group(1) else " ", text)
    for match in _WORD.finditer(code):
        word = match.group().upper()
        if word in _WRITE_KEYWORDS:
            raise ReadOnlyViolationError(
                f"query refused: {match.group()!r} writes to the store; query() only reads "
                "(load data with add_triples or a loader)"
            )
        if word == "CALL":
            target = _CALL_TARGET.match(code, match.end())
            name = re.sub(r"\s+", "", target.group(1)) if target else None
            if name is not None and name.lower() not in READ_ONLY_PROCEDURES:
                raise ReadOnlyViolationError(
                    f"query refused: CALL {name} is not a known read-only procedure; "
                    "query() may CALL only read-only db.* procedures such as db.labels, or a CALL {} subquery"
                )


# ---------------------------------------------------------------------- FalkorDB transport
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def cypher_literal(value: Any) -> str:
    """``value`` as a Cypher literal, escaped so that the text reads back as exactly it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"cannot pass the non-finite number {value!r} to the store")
        return repr(value)
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError(f"FalkorDB cannot store NUL characters: {value!r}")
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cypher_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"`{str(k).replace('`', '``')}`: {cypher_literal(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise InvalidInputError(f"cannot pass a {type(value).__name__} parameter to the store: {value!r}")


def inline_parameters(text: str, params: dict[str, Any]) -> str:
    """The query with its parameters bound through FalkorDB's own ``CYPHER name=value`` header.

    FalkorDB's Bolt endpoint pastes Bolt parameters into such a header without escaping
    quotes and through a fixed 4 KB buffer, so the store binds them itself, escaped.
    """
    if not params:
        return text
    for name in params:
        if not isinstance(name, str) or not _PARAM_NAME.fullmatch(name):
            raise InvalidInputError(f"invalid query parameter name {name!r}: use letters, digits and '_'")
    header = " ".join(f"{name}={cypher_literal(value)}" for name, value in params.items())
    return f"CYPHER {header} {text}"
