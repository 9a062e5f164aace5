"""S-expression trees → SPARQL: one method per node, each a group pattern that binds a variable
to the node's set (semantics in ``engine/sexpr/evaluate.py``, literal keys in
``engine/sexpr/keys.py``, computed here from each literal's lexical form so that every
engine agrees). Ids, literals and bounds are ``$parameters`` (bound by the store); relation
and class names enter as IRIs through :meth:`sparql.terms.Terms.relation` (validated).

It builds on a dialect compiler (:class:`sparql.compiler.SparqlCompiler` or its Virtuoso
subclass) and takes that dialect's hooks from it: ``select``, ``literal_join`` and ``keys``
(:mod:`sparql.literal_keys`), so a dialect's quirks apply here too.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from engine.graph import TYPE_RELATION
from engine.ops import Compiled
from engine.sexpr import keys
from engine.sexpr.tree import (
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


class SparqlDialect(Protocol):
    """What the S-expression compiler takes from a SPARQL dialect compiler
    (:class:`sparql.compiler.SparqlCompiler` or Virtuoso's): its terms and literal keys, and
    how it writes a SELECT and a join on a literal."""

    t: Any
    keys: Any

    def select(self, head: str, body: str, tail: str = "", fetch: int | None = None, literals: Sequence[str] = ()) -> str: ...

    def literal_join(self, var: str, rel: str, literal: Any, obj: str, bind: Callable[[Any], str]) -> str: ...

_OPS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def answer_can_be_literal(node: Expr) -> bool:
    """Whether the answer variable of ``node``'s pattern can be bound to a literal that the
    query did not write itself: it is the object of some triple pattern and no ``VALUES``
    gives it."""
    return _object(node) and not _given(node)


def _object(node: Expr) -> bool:
    """The answer variable is the object of a triple pattern."""
    if isinstance(node, Join):
        return isinstance(node.relation, Reverse)
    if isinstance(node, And):
        return _object(node.left) or _object(node.right)
    if isinstance(node, Extreme):
        return _object(node.arg) or isinstance(path_hops(node.path)[0], Reverse)
    if isinstance(node, TimeConstraint):
        return _object(node.arg)
    return False


def _given(node: Expr) -> bool:
    """The answer variable is bound by ``VALUES`` (an entity or a literal written in)."""
    if isinstance(node, (Entity, Value)):
        return True
    if isinstance(node, And):
        return _given(node.left) or _given(node.right)
    if isinstance(node, (Extreme, TimeConstraint)):
        return _given(node.arg)
    return False


class SexprCompiler:
    """Compiles one tree; columns: ``v0`` (answers) or ``n`` (a count)."""

    def __init__(self, base: SparqlDialect) -> None:
        self.base = base
        self.t = base.t
        self.keys = base.keys
        self._names = itertools.count()
        self.params: dict[str, Any] = {}

    def fresh(self, prefix: str = "v") -> str:
        return f"?{prefix}{next(self._names)}"

    def bind(self, value: Any) -> str:
        """A value as a parameter: its ``$placeholder``."""
        name = f"p{len(self.params)}"
        self.params[name] = value
        return "$" + name

    def compile(self, tree: Top) -> Compiled:
        var = self.fresh()
        if isinstance(tree, Count):
            text = self.base.select(f"(COUNT(DISTINCT {var}) AS ?n)", self.pattern(tree.arg, var))
        else:
            literals = [var[1:]] if answer_can_be_literal(tree) else []
            text = self.base.select(f"DISTINCT {var}", self.pattern(tree, var), "", None, literals)
        return Compiled(text, self.params)

    # ------------------------------------------------------------------ sets
    def pattern(self, node: Expr, var: str) -> str:
        if isinstance(node, Entity):
            return f"VALUES {var} {{ {self.bind(node.id)} }}"
        if isinstance(node, Value):
            return self.anchor(node, var)
        if isinstance(node, Class):
            return f"{var} {self.t.relation(TYPE_RELATION)} {self.t.relation(node.name)} ."
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
        return f"VALUES {var} {{ {self.bind(node.literal)} }}"

    def literal_join(self, relation: str, node: Value, var: str) -> str:
        """``(JOIN relation literal)``: the subjects of that very literal (the dialect's hook)."""
        return self.base.literal_join(var, self.t.relation(relation), node.literal, self.fresh("o"), self.bind)

    def hop(self, source: str, rel: Rel, target: str) -> str:
        """JOIN's step from ``source`` (a member of X) to ``target``."""
        if isinstance(rel, Reverse):
            return f"{source} {self.t.relation(rel.relation.name)} {target} ."
        return f"{target} {self.t.relation(rel.name)} {source} ."

    def walk(self, start: str, node: Extreme, end: str) -> str:
        """The ARGMAX path from ``start`` outward to a value ``end``."""
        hops = path_hops(node.path)
        nodes = [start] + [self.fresh("m") for _ in hops[:-1]] + [end]
        parts = []
        for i, hop in enumerate(hops):
            a, b = nodes[i], nodes[i + 1]
            if isinstance(hop, Reverse):
                parts.append(f"{b} {self.t.relation(hop.relation.name)} {a} .")
            else:
                parts.append(f"{a} {self.t.relation(hop.name)} {b} .")
        return " ".join(parts)

    def compare(self, node: Compare, var: str) -> str:
        obj = self.fresh("o")
        kind = literal_kind(node.value.literal)
        key = keys.key(node.value.literal)
        if key is None:  # NaN compares with nothing
            return f"{var} {self.t.relation(node.relation.name)} {obj} . FILTER(false)"
        bound = self.bind(float(key))
        return (
            f"{var} {self.t.relation(node.relation.name)} {obj} . "
            f"FILTER({self.keys.kind_test(obj, kind)} && {self.keys.key(obj, kind)} {_OPS[node.op]} {bound})"
        )

    def extreme(self, node: Extreme, var: str) -> str:
        x, o, k, best, o2 = self.fresh("x"), self.fresh("o"), self.fresh("k"), self.fresh("best"), self.fresh("o")
        aggregate = "MAX" if node.op == "ARGMAX" else "MIN"
        inner = (
            f"{self.pattern(node.arg, x)} {self.walk(x, node, o)} "
            f"FILTER({self.keys.kind_test(o, None)}) BIND({self.keys.key(o, None)} AS {k})"
        )
        return (
            f"{{ SELECT ({aggregate}({k}) AS {best}) WHERE {{ {inner} }} }} "
            f"{self.pattern(node.arg, var)} {self.walk(var, node, o2)} "
            f"FILTER({self.keys.kind_test(o2, None)} && {self.keys.key(o2, None)} = {best})"
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
        rel = self.t.relation(relation)
        test = self.keys.kind_test(o, "time")
        return (
            f"(NOT EXISTS {{ {var} {rel} {o} . FILTER({test}) }} || "
            f"EXISTS {{ {var} {rel} {o} . FILTER({test} && {self.keys.key(o, 'time')} {op} {self.bind(float(bound))}) }})"
        )
