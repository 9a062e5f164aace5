"""A plain-Python evaluator of S-expression trees over raw triples: the oracle that every
store's ``execute`` is tested against. Written straight from the semantics:

- an entity is {itself}; a literal is {itself}, matched by value and datatype (canonical
  forms); a class C is {e | (e type.object.type C)};
- ``(JOIN r X)`` = {s | (s r x), x ∈ X}; ``(JOIN (R r) X)`` = {o | (x r o), x ∈ X};
- ``(AND X Y)`` = X ∩ Y (with a class, X restricted to that class);
- ``(COUNT X)`` = |X|;
- ``(ARGMAX X path)`` = the x ∈ X having a value v reached through ``path`` (a relation or a
  chain, each hop forward or reverse, as joins) whose key (``keys.py``) is the largest among
  all such values of all of X; ties all kept. ARGMIN likewise;
- ``(lt r v)`` = {s | (s r o), o a literal of v's kind, key(o) < key(v)}; le, gt, ge alike;
- ``(TC X r year)`` = the x ∈ X whose interval covers some day of ``year`` (NOW: the day
  2015-08-10): x has no time value through r or one ≤ the year's last day, and x has no time
  value through the end relation (``keys.end_relation``: from→to, start_date→end_date) or
  one ≥ the year's first day. A start relation without an end counterpart checks the start only.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from engine.graph import TYPE_RELATION, Literal, Term, Triple
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

_OPS = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
}


class Evaluator:
    """Evaluates trees over a fixed set of triples."""

    def __init__(self, triples: Iterable[Triple]) -> None:
        self.forward: dict[tuple[str, Term], set[Term]] = defaultdict(set)  # (r, s) → objects
        self.backward: dict[tuple[str, Term], set[Term]] = defaultdict(set)  # (r, o) → subjects
        self.by_relation: dict[str, list[Triple]] = defaultdict(list)
        for t in set(triples):
            self.forward[(t.relation, t.subject)].add(t.object)
            self.backward[(t.relation, t.object)].add(t.subject)
            self.by_relation[t.relation].append(t)

    def run(self, tree: Top) -> set[Term] | int:
        if isinstance(tree, Count):
            return len(self.eval(tree.arg))
        return self.eval(tree)

    def step(self, nodes: Iterable[Term], rel: Rel) -> set[Term]:
        """Nodes one hop from ``nodes``: JOIN semantics, so ``Relation`` goes from objects to
        subjects and ``Reverse`` from subjects to objects."""
        if isinstance(rel, Reverse):
            return {o for n in nodes for o in self.forward.get((rel.relation.name, n), ())}
        return {s for n in nodes for s in self.backward.get((rel.name, n), ())}

    def follow(self, node: Term, hops: list[Rel]) -> set[Term]:
        """Values reached from ``node`` along an ARGMAX path: each hop read from the node outward
        (``r`` to its objects, ``(R r)`` to its subjects)."""
        frontier: set[Term] = {node}
        for hop in hops:
            inverse = hop.relation if isinstance(hop, Reverse) else Reverse(hop)
            frontier = self.step(frontier, inverse)
        return frontier

    def eval(self, node: Expr) -> set[Term]:
        if isinstance(node, Entity):
            return {node.id}
        if isinstance(node, Value):
            return {node.literal}
        if isinstance(node, Class):
            return set(self.backward.get((TYPE_RELATION, node.name), ()))
        if isinstance(node, Join):
            return self.step(self.eval(node.arg), node.relation)
        if isinstance(node, And):
            return self.eval(node.left) & self.eval(node.right)
        if isinstance(node, Extreme):
            return self.extreme(node)
        if isinstance(node, Compare):
            return self.compare(node)
        if isinstance(node, TimeConstraint):
            return self.time_constraint(node)
        raise TypeError(f"not an expression node: {node!r}")

    def extreme(self, node: Extreme) -> set[Term]:
        hops = path_hops(node.path)
        scored: list[tuple[Term, float]] = []
        for x in self.eval(node.arg):
            for v in self.follow(x, hops):
                k = keys.key(v) if isinstance(v, Literal) else None
                if k is not None:
                    scored.append((x, k))
        if not scored:
            return set()
        best = max(k for _, k in scored) if node.op == "ARGMAX" else min(k for _, k in scored)
        return {x for x, k in scored if k == best}

    def compare(self, node: Compare) -> set[Term]:
        kind = literal_kind(node.value.literal)
        bound = keys.key(node.value.literal)
        test = _OPS[node.op]
        if bound is None:  # NaN compares with nothing
            return set()
        return {
            t.subject
            for t in self.by_relation.get(node.relation.name, ())
            if isinstance(t.object, Literal)
            and literal_kind(t.object) == kind
            and (k := keys.key(t.object)) is not None
            and test(k, bound)
        }

    def time_constraint(self, node: TimeConstraint) -> set[Term]:
        first, last = keys.year_bounds(node.year)
        end = keys.end_relation(node.relation.name)
        kept = set()
        for x in self.eval(node.arg):
            if self._covers(x, node.relation.name, lambda k: k <= last) and (
                end is None or self._covers(x, end, lambda k: k >= first)
            ):
                kept.add(x)
        return kept

    def _covers(self, node: Term, relation: str, test) -> bool:
        values = [
            keys.time_key(v)
            for v in self.forward.get((relation, node), ())
            if isinstance(v, Literal) and literal_kind(v) == "time"
        ]
        return not values or any(test(k) for k in values)


def evaluate(tree: Top, triples: Iterable[Triple]) -> set[Term] | int:
    """The answer set (or count) of ``tree`` over ``triples``."""
    return Evaluator(triples).run(tree)
