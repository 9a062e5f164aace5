"""The Cypher dialects: one method per operation of :mod:`engine.ops`, each returning
``Compiled(text, params)``.

Values (ids, literal keys, names, limits) always travel as ``$parameters``. Relationship types
cannot be parameters, so relation names enter the text only through
:func:`cypher.terms.quote_relation` (validated).

The graph layout (see ``cypher/schema.py``): ``(:Entity {id, name})`` nodes, one relationship
type per relation, and ``(:Literal {key, value, datatype, lang})`` nodes as literal objects.

How the walk semantics of ``engine/store.py`` map onto Cypher:
- ``out`` / ``in`` are directed patterns; ``both`` is an undirected pattern, which per openCypher
  matches a self-loop once, and ``startNode(r) = a`` then reports it as forward;
- literals are dead ends: every node of a walk but the last is labelled ``:Entity``;
- a walk never reuses a relationship: Neo4j guarantees it within one MATCH, FalkorDB does not,
  so the builders state it (``WHERE r1 <> r2 …``); walks that may reuse edges
  (``distinct_edges=False``) put each hop in a MATCH of its own.

:class:`CypherCompiler` writes Neo4j 5's Cypher; :class:`FalkorDBCompiler` overrides only the
lookup of an entity by id (FalkorDB's string index trims the keys it stores and does not check
what it returns). The read-only check of raw queries is in ``cypher/readonly.py``, FalkorDB's
parameter transport in ``cypher/params.py``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from cypher.sexpr import compile_sexpr
from cypher.terms import literal_key, quote_relation, where_clause
from engine.errors import UnsupportedOperationError
from engine.graph import NAME_RELATION, TYPE_RELATION
from engine.ops import (
    Compiled,
    Compiler,
    CountEntities,
    CountTriples,
    Entities,
    Execute,
    Expand,
    LiteralRelations,
    LiteralTwoHopRelations,
    Names,
    RelationCounts,
    Relations,
    RelationTypes,
    Search,
    TwoHopRelations,
    Types,
    Walks,
)

#: Characters whose lower-casing differs between Python and some Cypher servers: FalkorDB
#: lowers U+0130 to one code point where Python (and Java) give two, and ignores the
#: word-final sigma rule. Names holding them are filtered again in Python by ``search``.
CASE_SPECIAL = ("\u0130", "\u03a3")


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


def _distinct_relationships(rels: Sequence[str]) -> list[str]:
    return [f"{a} <> {b}" for i, a in enumerate(rels) for b in rels[i + 1:]]


class CypherCompiler(Compiler):
    """Neo4j 5's Cypher (and what FalkorDB shares with it)."""

    dialect: ClassVar[str] = "neo4j"
    #: the server's string index finds exactly the key looked up (Neo4j); see FalkorDBCompiler
    exact_index: ClassVar[bool] = True

    def entity(self, var: str, key: str) -> tuple[str, list[str]]:
        """The node pattern of the entity whose id is the expression ``key``, where the match
        starts (the only node of its pattern looked up by id), and the conditions to add to the
        WHERE clause."""
        return f"({var}:Entity {{id: {key}}})", []

    def entity_reached(self, var: str, key: str) -> tuple[str, list[str]]:
        """Like :meth:`entity` for a node that the match reaches rather than starts from."""
        return self.entity(var, key)

    def entity_among(self, var: str, key: str) -> tuple[str, list[str]]:
        """A node that the match reaches, whose id is one of the list ``key``."""
        return f"({var}:Entity)", [f"{var}.id IN {key}"]

    # ------------------------------------------------------------------ operations
    def relations(self, op: Relations) -> Compiled:
        """Rows (id, relation, direction, count) of the edges adjacent to each id."""
        params: dict[str, Any] = {"ids": list(op.ids)}
        sides = {"out": "'out'", "in": "'in'", "both": "CASE WHEN startNode(r) = a THEN 'out' ELSE 'in' END"}
        start, conditions = self.entity("a", "id")
        text = (
            "UNWIND $ids AS id\n"
            f"MATCH {start}{_hop(op.direction, 'r')}()"
            + where_clause(conditions)
            + f"\nRETURN id, type(r) AS relation, {sides[op.direction]} AS direction, count(*) AS count"
            + _limit(op.limit, params)
        )
        return Compiled(text, params)

    def literal_relations(self, op: LiteralRelations) -> Compiled:
        """Rows (key, relation, count) of the edges entering the literal node of each key
        (:func:`cypher.terms.literal_key`); a literal's edges all enter it."""
        params: dict[str, Any] = {"keys": [literal_key(lit) for lit in op.literals]}
        text = (
            "UNWIND $keys AS key\n"
            "MATCH (:Literal {key: key})<-[r]-()\n"
            "RETURN key, type(r) AS relation, count(*) AS count"
            + _limit(op.limit, params)
        )
        return Compiled(text, params)

    def expand(self, op: Expand) -> Compiled:
        """Rows (src, relation, id, value, datatype, lang, forward): one per edge met from an id;
        the far node is an entity (``id``) or a literal (``value``, ``datatype``, ``lang``)."""
        params: dict[str, Any] = {"ids": list(op.ids)}
        start, conditions = self.entity("a", "src")
        text = (
            "UNWIND $ids AS src\n"
            f"MATCH {start}{_hop(op.direction, 'r', op.relations)}(b)"
            + where_clause(conditions)
            + "\nRETURN src, type(r) AS relation, b.id AS id, b.value AS value, b.datatype AS datatype, "
            f"b.lang AS lang, {_forward(op.direction, 'r', 'a')} AS forward"
            + _limit(op.limit, params)
        )
        return Compiled(text, params)

    def walks(self, op: Walks) -> Compiled:
        """Rows (ids, value, datatype, lang, relations, forward), one per walk following the
        path (None = any relation but those of ``op.exclude``). ``ids`` lists the node ids; the last is null when the walk
        ends on a literal, described by ``value``/``datatype``/``lang``. With ``pairs``, only
        walks from pair[0] ending at pair[1]. With ``distinct_edges=False`` each hop is a MATCH
        of its own, since relationship uniqueness holds only within one MATCH."""
        path, direction = op.path, op.direction
        k = len(path)
        nodes = [f"n{i}" for i in range(k + 1)]
        rels = [f"r{i}" for i in range(1, k + 1)]
        if op.pairs is None:
            params: dict[str, Any] = {"ids": list(op.seeds)}
            start, conditions = self.entity("n0", "id")
            text = f"UNWIND $ids AS id\nMATCH {start}"
            last = f"({nodes[-1]})"
        else:
            # pairs grouped by their start, so that each start's walks are expanded once, not
            # once per pair (on FalkorDB each pair's expansion cost milliseconds)
            ends: dict[str, list[str]] = {}
            for first, last_id in op.pairs:
                ends.setdefault(first, []).append(last_id)
            params = {"groups": [[first, targets] for first, targets in ends.items()]}
            start, conditions = self.entity("n0", "id")
            last, end_conditions = self.entity_among(nodes[-1], "targets")
            conditions += end_conditions
            text = f"UNWIND $groups AS g\nWITH g[0] AS id, g[1] AS targets\nMATCH {start}"
        for i, relation in enumerate(path):
            if i > 0 and not op.distinct_edges:
                text += f"\nMATCH ({nodes[i]})"
            text += _hop(direction, rels[i], None if relation is None else [relation])
            text += last if i == k - 1 else f"({nodes[i + 1]}:Entity)"
        if op.exclude and None in path:
            params["exclude"] = list(op.exclude)
            conditions += [f"NOT type({rels[i]}) IN $exclude" for i, relation in enumerate(path) if relation is None]
        end = nodes[-1]
        text += (
            where_clause(conditions + (_distinct_relationships(rels) if op.distinct_edges else []))
            + f"\nRETURN [{', '.join(n + '.id' for n in nodes)}] AS ids, "
            f"{end}.value AS value, {end}.datatype AS datatype, {end}.lang AS lang, "
            f"[{', '.join(f'type({r})' for r in rels)}] AS relations, "
            f"[{', '.join(_forward(direction, r, nodes[i]) for i, r in enumerate(rels))}] AS forward"
            + _limit(op.limit, params)
        )
        return Compiled(text, params)

    def two_hop_relations(self, op: TwoHopRelations) -> Compiled:
        """Rows (id, relation, direction, count) over the edges of the distinct entities reached
        from each id through ``r1``; a self-loop counts once, as ``out``."""
        params: dict[str, Any] = {"ids": list(op.ids)}
        start, conditions = self.entity("a", "id")
        text = (
            "UNWIND $ids AS id\n"
            f"MATCH {start}{_hop(op.direction, '', [op.r1])}(m:Entity)"
            + where_clause(conditions)
            + "\nWITH DISTINCT id, m\n"
            "MATCH (m)-[r]-()\n"
            "RETURN id, type(r) AS relation, CASE WHEN startNode(r) = m THEN 'out' ELSE 'in' END AS direction, "
            "count(*) AS count"
            + _limit(op.limit, params)
        )
        return Compiled(text, params)

    def literal_two_hop_relations(self, op: LiteralTwoHopRelations) -> Compiled:
        """Rows (key, relation, direction, count) over the edges of the distinct entities with an
        ``r1`` edge to the literal node of each key; a self-loop counts once, as ``out``."""
        params: dict[str, Any] = {"keys": [literal_key(lit) for lit in op.literals]}
        text = (
            "UNWIND $keys AS key\n"
            f"MATCH (:Literal {{key: key}})<-[:{quote_relation(op.r1)}]-(m:Entity)\n"
            "WITH DISTINCT key, m\n"
            "MATCH (m)-[r]-()\n"
            "RETURN key, type(r) AS relation, CASE WHEN startNode(r) = m THEN 'out' ELSE 'in' END AS direction, "
            "count(*) AS count"
            + _limit(op.limit, params)
        )
        return Compiled(text, params)

    def names(self, op: Names) -> Compiled:
        """Rows (id, value, datatype, lang): every literal name of each id that is an entity,
        or one row of nulls for an entity without a name."""
        params: dict[str, Any] = {"ids": list(op.ids)}
        start, conditions = self.entity("a", "id")
        text = (
            "UNWIND $ids AS id\n"
            f"MATCH {start}"
            + where_clause(conditions)
            + f"\nOPTIONAL MATCH (a)-[:{quote_relation(NAME_RELATION)}]->(l:Literal)"
            + "\nRETURN id, l.value AS value, l.datatype AS datatype, l.lang AS lang"
            + _limit(op.limit, params)
        )
        return Compiled(text, params)

    def types(self, op: Types) -> Compiled:
        """Rows (id, type): every entity class of each id."""
        params: dict[str, Any] = {"ids": list(op.ids)}
        start, conditions = self.entity("a", "id")
        text = (
            "UNWIND $ids AS id\n"
            f"MATCH {start}-[:{quote_relation(TYPE_RELATION)}]->(t:Entity)"
            + where_clause(conditions)
            + "\nRETURN id, t.id AS type"
            + _limit(op.limit, params)
        )
        return Compiled(text, params)

    def search(self, op: Search) -> Compiled:
        """Rows (id, name) of entities whose name literal matches the text, then rows (id, null)
        of entities without a name literal whose id matches; ``op.limit`` of each. ``prefix``
        and ``contains`` compare lower-cased (the needle lowered here, in Python) and also
        return every name or id holding a :data:`CASE_SPECIAL` character, for the store to
        filter."""
        if op.mode == "exact":
            params: dict[str, Any] = {"text": op.text}
            condition = "l.value = $text"
            start, conditions = self.entity("a", "$text")
            by_id = f"MATCH {start}" + where_clause(conditions)
        else:
            params = {"needle": op.text.lower(), "special": list(CASE_SPECIAL)}
            operator = "STARTS WITH" if op.mode == "prefix" else "CONTAINS"
            condition = f"toLower(l.value) {operator} $needle OR any(c IN $special WHERE l.value CONTAINS c)"
            by_id = f"MATCH (a:Entity)\nWHERE toLower(a.id) {operator} $needle OR any(c IN $special WHERE a.id CONTAINS c)"
        limit = _limit(op.limit, params)
        text = (
            f"MATCH (a:Entity)-[:{quote_relation(NAME_RELATION)}]->(l:Literal)\n"
            f"WHERE {condition}\n"
            "RETURN DISTINCT a.id AS id, l.value AS name"
            + limit
            + "\nUNION ALL\n"
            + by_id
            + f"\nOPTIONAL MATCH (a)-[:{quote_relation(NAME_RELATION)}]->(l:Literal)"
            + "\nWITH a, count(l) AS names\nWHERE names = 0\nRETURN a.id AS id, null AS name"
            + limit
        )
        return Compiled(text, params)

    def execute(self, op: Execute) -> Compiled:
        """Rows (id, value, datatype, lang), one per answer node, or one row (count); see
        ``cypher/sexpr.py``."""
        return compile_sexpr(op.tree, self)

    def count_triples(self, op: CountTriples) -> Compiled:
        return Compiled("MATCH ()-[r]->() RETURN count(r) AS count", {})

    def count_entities(self, op: CountEntities) -> Compiled:
        return Compiled("MATCH (n:Entity) RETURN count(n) AS count", {})

    def entities(self, op: Entities) -> Compiled:
        params: dict[str, Any] = {}
        return Compiled("MATCH (a:Entity) RETURN a.id AS id" + _limit(op.limit, params), params)

    def relation_types(self, op: RelationTypes) -> Compiled:
        return Compiled("CALL db.relationshipTypes() YIELD relationshipType RETURN relationshipType", {})

    def relation_counts(self, op: RelationCounts) -> Compiled:
        """Rows (i, count): the number of edges of ``relations[i]``, one branch per type so that
        Neo4j answers each from its count store."""
        if op.relations is None:
            raise UnsupportedOperationError(
                f"the {self.dialect} dialect counts the relations it is given: list them (relation_types)"
            )
        branches = [
            f"MATCH ()-[r:{quote_relation(rel)}]->() RETURN {i} AS i, count(r) AS count"
            for i, rel in enumerate(op.relations)
        ]
        return Compiled("\nUNION ALL\n".join(branches), {})


class FalkorDBCompiler(CypherCompiler):
    """FalkorDB 4.16: its string index is not exact. It stores keys with leading and trailing
    blanks trimmed and does not check its hits, so looking up ``'x '`` finds nothing and
    ``'x'`` also finds ``' x'``. Here an entity is looked up by its id trimmed of spaces (which
    ids may contain; other blanks are control characters, which they may not) and the hits are
    checked exactly, in a form (``id + ''``) that the planner cannot turn back into an index
    lookup."""

    dialect: ClassVar[str] = "falkordb"
    exact_index: ClassVar[bool] = False

    def entity(self, var: str, key: str) -> tuple[str, list[str]]:
        return f"({var}:Entity {{id: trim({key})}})", [f"{var}.id + '' = {key}"]

    def entity_reached(self, var: str, key: str) -> tuple[str, list[str]]:
        # on FalkorDB a lookup there is a plain filter, which the trimmed key would break
        return f"({var}:Entity)", [f"{var}.id + '' = {key}"]

    def entity_among(self, var: str, key: str) -> tuple[str, list[str]]:
        return f"({var}:Entity)", [f"({var}.id + '') IN {key}"]


#: the compilers, ready to use (they hold no state)
NEO4J = CypherCompiler()
FALKORDB = FalkorDBCompiler()
