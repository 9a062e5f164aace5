"""S-expression trees → SPARQL: one method per node, each a group pattern that binds a variable
to the node's set (semantics in ``engine/sexpr/evaluate.py``, literal keys in
``engine/sexpr/keys.py``, computed here from each literal's lexical form so that every
engine agrees). Ids and literals enter as escaped IRIs and literals through
:class:`sparql.terms.Terms`; relation and class names were validated by the parser.

It builds on a :class:`sparql.compiler.SparqlCompiler` (or its Virtuoso flavour), whose
``select`` and ``same_term`` it uses, so a flavour's quirks apply here too.
"""
from __future__ import annotations

import itertools

from engine.graph import TYPE_RELATION, XSD, Literal
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
from sparql.compiler import SparqlCompiler
from sparql.terms import string_literal
from sparql.virtuoso import VirtuosoCompiler

_OPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _double(number: float) -> str:
    return f'"{number!r}"^^<{XSD}double>'


class SexprCompiler:
    """Compiles one tree at a time; columns: ``v0`` (answers) or ``n`` (a count)."""

    def __init__(self, base: SparqlCompiler) -> None:
        self.base = base
        self.t = base.t
        self._names = itertools.count()

    def fresh(self, prefix: str = "v") -> str:
        return f"?{prefix}{next(self._names)}"

    def compile(self, tree: Top) -> str:
        self._names = itertools.count()
        var = self.fresh()
        if isinstance(tree, Count):
            return self.base.select(f"(COUNT(DISTINCT {var}) AS ?n)", self.pattern(tree.arg, var))
        return self.base.select(f"DISTINCT {var}", self.pattern(tree, var))

    # ------------------------------------------------------------------ sets
    def pattern(self, node: Expr, var: str) -> str:
        if isinstance(node, Entity):
            return f"VALUES {var} {{ {self.t.iri(node.id)} }}"
        if isinstance(node, Value):
            return self.anchor(node, var)
        if isinstance(node, Class):
            return f"{var} {self.t.iri(TYPE_RELATION)} {self.t.iri(node.name)} ."
        if isinstance(node, Join) and isinstance(node.arg, Value) and not isinstance(node.relation, Reverse):
            return self.literal_join(node.relation.name, node.arg, var)
        if isinstance(node, Join):
            inner = self.fresh()
            return self.pattern(node.arg, inner) + " " + self.hop(inner, node.relation, var)
        if isinstance(node, And):
            return self.pattern(node.left, var) + " " + self.pattern(node.right, var)
        if isinstance(node, Compare):
            return self.compare(node, var)
        if isinstance(node, Extreme):
            return self.extreme(node, var)
        if isinstance(node, TimeConstraint):
            return self.time_constraint(node, var)
        raise TypeError(f"not an expression node: {node!r}")

    def anchor(self, node: Value, var: str) -> str:
        """A literal anchor: the set holding exactly that literal (value and datatype)."""
        return f"VALUES {var} {{ {self.t.literal(node.literal)} }}"

    def literal_join(self, relation: str, node: Value, var: str) -> str:
        """``(JOIN relation literal)``: the subjects of that very literal."""
        return f"{var} {self.t.iri(relation)} {self.t.literal(node.literal)} ."

    def hop(self, source: str, rel: Rel, target: str) -> str:
        """JOIN's step from ``source`` (a member of X) to ``target``."""
        if isinstance(rel, Reverse):
            return f"{source} {self.t.iri(rel.relation.name)} {target} ."
        return f"{target} {self.t.iri(rel.name)} {source} ."

    def walk(self, start: str, node: Extreme, end: str) -> str:
        """The ARGMAX path from ``start`` outward to a value ``end``."""
        hops = path_hops(node.path)
        nodes = [start] + [self.fresh("m") for _ in hops[:-1]] + [end]
        parts = []
        for i, hop in enumerate(hops):
            a, b = nodes[i], nodes[i + 1]
            if isinstance(hop, Reverse):
                parts.append(f"{b} {self.t.iri(hop.relation.name)} {a} .")
            else:
                parts.append(f"{a} {self.t.iri(hop.name)} {b} .")
        return " ".join(parts)

    def compare(self, node: Compare, var: str) -> str:
        obj = self.fresh("o")
        kind = literal_kind(node.value.literal)
        bound = _double(keys.key(node.value.literal))  # type: ignore[arg-type]
        return (
            f"{var} {self.t.iri(node.relation.name)} {obj} . "
            f"FILTER({self.kind_test(obj, kind)} && {self.key(obj, kind)} {_OPS[node.op]} {bound})"  # type: ignore[arg-type]
        )

    def extreme(self, node: Extreme, var: str) -> str:
        x, o, k, best, o2 = self.fresh("x"), self.fresh("o"), self.fresh("k"), self.fresh("best"), self.fresh("o")
        aggregate = "MAX" if node.op == "ARGMAX" else "MIN"
        inner = (
            f"{self.pattern(node.arg, x)} {self.walk(x, node, o)} "
            f"FILTER({self.kind_test(o, None)}) BIND({self.key(o, None)} AS {k})"
        )
        return (
            f"{{ SELECT ({aggregate}({k}) AS {best}) WHERE {{ {inner} }} }} "
            f"{self.pattern(node.arg, var)} {self.walk(var, node, o2)} "
            f"FILTER({self.kind_test(o2, None)} && {self.key(o2, None)} = {best})"
        )

    def time_constraint(self, node: TimeConstraint, var: str) -> str:
        first, last = keys.year_bounds(node.year)
        conditions = [self.covers(var, node.relation.name, "<=", last)]
        end = keys.end_relation(node.relation.name)
        if end is not None:
            conditions.append(self.covers(var, end, ">=", first))
        return self.pattern(node.arg, var) + " FILTER(" + " && ".join(conditions) + ")"

    def covers(self, var: str, relation: str, op: str, bound: float) -> str:
        """No time value of ``var`` through ``relation``, or one whose key ``op`` ``bound``."""
        o = self.fresh("t")
        rel = self.t.iri(relation)
        test = self.kind_test(o, "time")
        return (
            f"(NOT EXISTS {{ {var} {rel} {o} . FILTER({test}) }} || "
            f"EXISTS {{ {var} {rel} {o} . FILTER({test} && {self.key(o, 'time')} {op} {_double(bound)}) }})"
        )

    # ------------------------------------------------------------------ literal keys
    def kind_test(self, var: str, kind: str | None) -> str:
        """True when ``var`` is a literal of ``kind`` (None: number or time)."""
        types = {"number": NUMERIC_TYPES, "time": TEMPORAL_TYPES, None: NUMERIC_TYPES | TEMPORAL_TYPES}[kind]
        listed = ", ".join(f"<{t}>" for t in sorted(types))
        return f"isLiteral({var}) && datatype({var}) IN ({listed})"

    def key(self, var: str, kind: str | None) -> str:
        """The key of ``var`` (known to be of ``kind``; None: either)."""
        if kind == "number":
            return self.number_key(var)
        if kind == "time":
            return self.time_key(var)
        numeric = ", ".join(f"<{t}>" for t in sorted(NUMERIC_TYPES))
        return f"IF(datatype({var}) IN ({numeric}), {self.key(var, 'number')}, {self.time_key(var)})"

    def number_key(self, var: str) -> str:
        """A number's key: its lexical form read as a double (so xsd:float 0.1 is 0.1)."""
        return f"<{XSD}double>(STR({var}))"

    def time_key(self, var: str) -> str:
        d, i = f"<{XSD}double>", f"<{XSD}integer>"
        s = f"STR({var})"
        b = f'IF(STRSTARTS({s}, "-"), SUBSTR({s}, 2), {s})'
        y = f'STRBEFORE(CONCAT(STRBEFORE(CONCAT(STRBEFORE(CONCAT({b}, "-"), "-"), "Z"), "Z"), "+"), "+")'
        n = f"STRLEN({y})"

        def part(offset: int) -> str:
            return f"{i}(SUBSTR({b}, {n} + {offset}, 2))"

        def has(*local: str) -> str:
            return f"datatype({var}) IN ({', '.join(f'<{XSD}{t}>' for t in local)})"

        year = f'IF(STRSTARTS({s}, "-"), -1, 1) * {i}({y})'
        month = f"IF({has('gYearMonth', 'date', 'dateTime')}, {part(2)}, 1)"
        day = f"IF({has('date', 'dateTime')}, {part(5)}, 1)"
        secs = f"IF({has('dateTime')}, {part(8)} * 3600 + {part(11)} * 60 + {part(14)}, 0)"
        return f"({d}({year} * 10000 + {month} * 100 + {day}) + {d}({secs}) / {d}(\"100000\"))"


class VirtuosoSexprCompiler(SexprCompiler):
    """Virtuoso matches literals by value (``1990``^^gYear meets ``1990-01-01``^^date, ``2``
    meets ``2.0``) and prints numbers with six digits and negative years with fewer than
    four, so ``(JOIN r literal)`` checks the datatype and then the key (numbers, dates) or
    the lexical form (other literals) of what it meets, and a number's key is its value cast
    to a double."""

    def literal_join(self, relation: str, node: Value, var: str) -> str:
        if node.literal.datatype is None:
            return super().literal_join(relation, node, var)
        o = self.fresh("o")
        return f"{var} {self.t.iri(relation)} {o} . FILTER({self.same_literal(o, node.literal)})"

    def same_literal(self, var: str, literal: Literal) -> str:
        """True when ``var`` is a literal of ``literal``'s datatype and value (a typed one)."""
        kind = literal_kind(literal)
        same = (
            f"{self.key(var, kind)} = {_double(keys.key(literal))}"  # type: ignore[arg-type]
            if kind is not None
            else f"STR({var}) = {string_literal(literal.value)}"
        )
        return f"isLiteral({var}) && datatype({var}) = <{literal.datatype}> && {same}"

    def number_key(self, var: str) -> str:
        # Virtuoso evaluates both sides of && and fails the query casting a date to a double
        return f"<{XSD}double>(IF(isNumeric({var}), {var}, 0))"


def sexpr_compiler(base: SparqlCompiler) -> SexprCompiler:
    """The S-expression compiler for a store's SPARQL compiler (its flavour)."""
    return VirtuosoSexprCompiler(base) if isinstance(base, VirtuosoCompiler) else SexprCompiler(base)
