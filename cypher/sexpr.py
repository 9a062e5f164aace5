"""S-expression trees → Cypher (semantics in ``engine/sexpr/evaluate.py``, literal keys in
``engine/sexpr/keys.py``).

The query is one pipeline of clauses over a single row: each node's set becomes a list
variable (``s0``, ``s1`` …) collected by a ``WITH`` that carries the lists still pending, so
an empty set never drops the row (``OPTIONAL MATCH``, and ``[null]`` in place of an empty
list before an ``UNWIND``). Entities are ``(:Entity {id})`` nodes, literals ``(:Literal {key,
value, datatype, lang})`` nodes found by their key; ids, keys and bounds are ``$parameters``,
relation names enter through :func:`cypher.terms.quote_relation`. Entities are looked up
through the dialect compiler's ``entity`` / ``entity_reached`` hooks (FalkorDB's differ).
"""
from __future__ import annotations

import math
from typing import Any, Protocol

from cypher.terms import literal_key, quote_relation, where_clause
from engine.graph import TYPE_RELATION, XSD
from engine.ops import Compiled
from engine.sexpr import keys
from engine.sexpr.tree import (
    NUMERIC_TYPES,
    TEMPORAL_TYPES,
    And,
    Class,
    Compare,
    Count,
    Entity,
    Expr,
    Extreme,
    Join,
    Rel,
    Reverse,
    TimeConstraint,
    Top,
    Value,
    literal_kind,
    path_hops,
)


class CypherDialect(Protocol):
    """What the builder takes from a Cypher dialect compiler (:class:`cypher.compiler.CypherCompiler`
    or FalkorDB's): the pattern and conditions that match an entity node by a parameter."""

    def entity(self, var: str, param: str) -> tuple[str, list[str]]: ...

    def entity_reached(self, var: str, param: str) -> tuple[str, list[str]]: ...

_OPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_INFINITY = "toFloat('Infinity')"  # no parameter: FalkorDB's inlined parameters are finite numbers
_TYPE_PARAMS = {
    "sx_number": sorted(NUMERIC_TYPES),
    "sx_time": sorted(TEMPORAL_TYPES),
    "sx_any": sorted(NUMERIC_TYPES | TEMPORAL_TYPES),
    "sx_month": [XSD + t for t in ("gYearMonth", "date", "dateTime")],
    "sx_day": [XSD + t for t in ("date", "dateTime")],
    "sx_clock": [XSD + "dateTime"],
}


def compile_sexpr(tree: Top, dialect: CypherDialect) -> Compiled:
    """Rows (id, value, datatype, lang), one per answer node, or one row (count)."""
    return _Builder(dialect).compile(tree)


def key_expression(var: str, kind: str | None) -> str:
    """The key of the literal node ``var`` (of ``kind``; None: number or time), else null."""
    # INF and -INF read by name (Java's parser, Neo4j's, knows only Infinity); NaN has no key
    number = (
        f"(CASE {var}.value WHEN 'INF' THEN {_INFINITY} WHEN '-INF' THEN -{_INFINITY} "
        f"WHEN 'NaN' THEN null ELSE toFloat({var}.value) END)"
    )
    if kind == "number":
        return number
    v = f"{var}.value"
    # the value without its sign (kb) and its year digits (ky) are bound once, each by a
    # one-item list comprehension: written out at each use, the expression grows to 2 KB and
    # FalkorDB takes a fifth of a second to plan every query holding it
    n = "coalesce(size(ky), 0)"  # FalkorDB fails substring() with a null start, even unevaluated

    def part(offset: int) -> str:
        return f"toInteger(substring(kb, {n} + {offset}, 2))"

    year = f"(CASE WHEN left({v}, 1) = '-' THEN -1 ELSE 1 END) * toInteger(ky)"
    month = f"(CASE WHEN {var}.datatype IN $sx_month THEN {part(1)} ELSE 1 END)"
    day = f"(CASE WHEN {var}.datatype IN $sx_day THEN {part(4)} ELSE 1 END)"
    secs = f"(CASE WHEN {var}.datatype IN $sx_clock THEN {part(7)} * 3600 + {part(10)} * 60 + {part(13)} ELSE 0 END)"
    time = (
        f"[kb IN [(CASE WHEN left({v}, 1) = '-' THEN substring({v}, 1) ELSE {v} END)] | "
        f"[ky IN [split(split(split(kb, '-')[0], 'Z')[0], '+')[0]] | "
        f"toFloat({year} * 10000 + {month} * 100 + {day}) + toFloat({secs}) / 100000.0][0]][0]"
    )
    if kind == "time":
        return f"(CASE WHEN {var}.datatype IN $sx_time THEN {time} END)"
    return f"(CASE WHEN {var}.datatype IN $sx_number THEN {number} WHEN {var}.datatype IN $sx_time THEN {time} END)"


class _Builder:
    def __init__(self, dialect: CypherDialect) -> None:
        self.dialect = dialect
        self.params: dict[str, Any] = dict(_TYPE_PARAMS)
        self.lines: list[str] = []
        self.carry: list[str] = []
        self.counter = 0

    def compile(self, tree: Top) -> Compiled:
        if isinstance(tree, Count):
            final = self.set_of(tree.arg)
            self.lines.append(f"RETURN size({final}) AS count")
        else:
            final = self.set_of(tree)
            self.lines.append(
                f"UNWIND {final} AS n\nRETURN DISTINCT n.id AS id, n.value AS value, n.datatype AS datatype, n.lang AS lang"
            )
        return Compiled("\n".join(self.lines), self.params)

    # ------------------------------------------------------------------ plumbing
    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def param(self, value: Any) -> str:
        name = self.name("p")
        self.params[name] = value
        return f"${name}"

    def keep(self, expression: str, *pending: str) -> str:
        """``WITH <carried>, expression AS s``: the new set variable, now carried too."""
        var = self.name("s")
        self.lines.append("WITH " + ", ".join([*self.carry, *pending, f"{expression} AS {var}"]))
        self.carry.append(var)
        return var

    def drop(self, *used: str) -> None:
        for var in used:
            self.carry.remove(var)

    def unwind(self, var: str, item: str) -> None:
        self.lines.append(f"UNWIND (CASE WHEN size({var}) = 0 THEN [null] ELSE {var} END) AS {item}")

    # ------------------------------------------------------------------ sets
    def set_of(self, node: Expr) -> str:
        if isinstance(node, Entity):
            pattern, conditions = self.dialect.entity("n", self.param(node.id))
            self.lines.append(f"OPTIONAL MATCH {pattern}" + where_clause(conditions))
            return self.keep("collect(DISTINCT n)")
        if isinstance(node, Value):
            self.lines.append(f"OPTIONAL MATCH (n:Literal {{key: {self.param(literal_key(node.literal))}}})")
            return self.keep("collect(DISTINCT n)")
        if isinstance(node, Class):
            pattern, conditions = self.dialect.entity("c", self.param(node.name))
            self.lines.append(
                f"OPTIONAL MATCH {pattern}<-[:{quote_relation(TYPE_RELATION)}]-(n:Entity)" + where_clause(conditions)
            )
            return self.keep("collect(DISTINCT n)")
        if isinstance(node, Join):
            return self.join(node.relation, self.set_of(node.arg))
        if isinstance(node, And):
            return self.intersection(node)
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, Extreme):
            return self.extreme(node)
        if isinstance(node, TimeConstraint):
            return self.time_constraint(node)
        raise TypeError(f"not an expression node: {node!r}")

    def join(self, rel: Rel, source: str) -> str:
        x = self.name("x")
        self.unwind(source, x)
        self.drop(source)
        if isinstance(rel, Reverse):
            self.lines.append(f"OPTIONAL MATCH ({x})-[:{quote_relation(rel.relation.name)}]->(n)")
        else:
            self.lines.append(f"OPTIONAL MATCH ({x})<-[:{quote_relation(rel.name)}]-(n)")
        return self.keep("collect(DISTINCT n)")

    def intersection(self, node: And) -> str:
        left, right = node.left, node.right
        if isinstance(right, Class) and not isinstance(left, Class):
            left, right = right, left
        if isinstance(left, Class):
            members = self.set_of(right)
            x = self.name("x")
            self.unwind(members, x)
            self.drop(members)
            pattern, conditions = self.dialect.entity_reached("c", self.param(left.name))
            self.lines.append(
                f"OPTIONAL MATCH ({x})-[:{quote_relation(TYPE_RELATION)}]->{pattern}" + where_clause(conditions)
            )
            return self.keep(f"collect(DISTINCT CASE WHEN c IS NULL THEN null ELSE {x} END)")
        a = self.set_of(left)
        b = self.set_of(right)
        self.drop(a, b)
        return self.keep(f"[e IN {a} WHERE e IN {b}]")

    def compare(self, node: Compare) -> str:
        kind = literal_kind(node.value.literal)
        key = keys.key(node.value.literal)
        bound = _INFINITY if key == math.inf else f"-{_INFINITY}" if key == -math.inf else self.param(key)
        self.lines.append(
            f"OPTIONAL MATCH (n:Entity)-[:{quote_relation(node.relation.name)}]->(o:Literal)\n"
            f"WHERE o.datatype IN $sx_{kind} AND {key_expression('o', kind)} {_OPS[node.op]} {bound}"
        )
        return self.keep("collect(DISTINCT n)")

    def extreme(self, node: Extreme) -> str:
        members = self.set_of(node.arg)
        x = self.name("x")
        self.unwind(members, x)
        self.drop(members)
        hops = path_hops(node.path)
        current = x
        for i, hop in enumerate(hops):
            last = i == len(hops) - 1
            target = "o" if last else self.name("m")
            label = "Literal" if last else "Entity"
            arrow = (
                f"<-[:{quote_relation(hop.relation.name)}]-" if isinstance(hop, Reverse) else f"-[:{quote_relation(hop.name)}]->"
            )
            condition = "\nWHERE o.datatype IN $sx_any" if last else ""
            self.lines.append(f"OPTIONAL MATCH ({current}){arrow}({target}:{label}){condition}")
            current = target
        carried = ", ".join(self.carry)
        lead = carried + ", " if carried else ""
        aggregate = "max" if node.op == "ARGMAX" else "min"
        self.lines.append(f"WITH {lead}{x}, {key_expression('o', None)} AS k")
        self.lines.append(f"WITH {lead}collect([{x}, k]) AS pairs, {aggregate}(k) AS best")
        ranked = self.keep("[p IN pairs WHERE p[1] = best | p[0]]")
        y = self.name("y")
        self.unwind(ranked, y)
        self.drop(ranked)
        return self.keep(f"collect(DISTINCT {y})")

    def time_constraint(self, node: TimeConstraint) -> str:
        first, last = keys.year_bounds(node.year)
        members = self.set_of(node.arg)
        x = self.name("x")
        self.unwind(members, x)
        self.drop(members)
        lead = "".join(v + ", " for v in self.carry)
        ranges = [(node.relation.name, "<=", last)]
        end = keys.end_relation(node.relation.name)
        if end is not None:
            ranges.append((end, ">=", first))
        tests = [f"{x} IS NOT NULL"]
        lists: list[str] = []
        for relation, op, bound in ranges:
            values = self.name("times")
            self.lines.append(
                f"OPTIONAL MATCH ({x})-[:{quote_relation(relation)}]->(t:Literal)\nWHERE t.datatype IN $sx_time"
            )
            self.lines.append(f"WITH {lead}{x}, {''.join(v + ', ' for v in lists)}collect({key_expression('t', 'time')}) AS {values}")
            lists.append(values)
            tests.append(f"(size({values}) = 0 OR any(v IN {values} WHERE v {op} {self.param(bound)}))")
        return self.keep(f"collect(DISTINCT CASE WHEN {' AND '.join(tests)} THEN {x} END)")
