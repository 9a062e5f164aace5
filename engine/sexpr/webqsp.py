"""WebQSP parses → S-expressions, with a coverage report.

A parse's structured fields say everything its SPARQL does, in the shapes below; node ``i`` is
the ``i``-th node after the topic entity along the inferential chain (the last is the answer):

- chain ``[r1, …, rn]`` from topic ``e``: node 0 = ``(JOIN (R r1) e)``, node i = ``(JOIN (R ri) node i-1)``;
- an ``Equal`` constraint on node i with an entity: ``(AND node (JOIN pred m.…))``; with a
  string value: ``(AND node (JOIN pred "value"@en))`` (Freebase strings are English);
- a ``Time`` block with its two constraints ``pred ≤ End`` and ``pred' ≥ Start`` where pred'
  is pred's end relation (``.from``/``.to`` …): ``(TC node pred YEAR)`` when it spans one
  calendar year, ``(TC node pred NOW)`` when relative to now (WebQSP's 2015-08-10);
- other ``LessOrEqual`` / ``GreaterOrEqual`` date constraints: ``(AND node (le pred D^^xsd:date))`` …;
- ``Order`` with Start 0 and Count 1 on node i: ``(ARGMAX node pred)`` (Descending) or ARGMIN.

Anything else (no topic entity, an empty chain, an order that is not the first item, a time
block of another shape, other operators or value types) is reported as an uncovered shape.
:func:`steps` gives a parse's constraints one by one (for building forms that keep only some
of them, as the WebQSP slice over FB15k-237 does); :func:`convert` applies them all.
"""
from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError
from engine.graph import XSD, Literal
from engine.jsonl import parse_json
from engine.sexpr import keys
from engine.sexpr.tree import (
    NOW,
    And,
    Compare,
    Entity,
    Expr,
    Extreme,
    Join,
    Relation,
    Reverse,
    TimeConstraint,
    Top,
    to_text,
    value,
)


class Uncovered(Exception):
    """A parse whose shape has no S-expression here; ``shape`` names it."""

    def __init__(self, shape: str) -> None:
        super().__init__(shape)
        self.shape = shape


@dataclass
class Coverage:
    parses: int = 0
    converted: int = 0
    questions: int = 0
    questions_converted: int = 0
    uncovered: Counter = field(default_factory=Counter)

    def to_json(self) -> dict[str, Any]:
        return {
            "parses": self.parses,
            "converted": self.converted,
            "parse_coverage": round(self.converted / self.parses, 4) if self.parses else 0.0,
            "questions": self.questions,
            "questions_converted": self.questions_converted,
            "uncovered_shapes": dict(self.uncovered.most_common()),
        }


#: the constrained node's place in a :class:`Step`'s ``wrap``, filled in by :meth:`Step.apply`
HOLE = Entity("?")


@dataclass(frozen=True)
class Step:
    """One constraint of a parse on chain node ``node``: ``wrap`` is ``(AND HOLE c)``,
    ``(TC HOLE pred year)`` or ``(ARGMAX HOLE pred)`` with :data:`HOLE` where the node goes."""

    node: int
    wrap: And | TimeConstraint | Extreme

    def apply(self, expr: Expr) -> Expr:
        return replace(self.wrap, left=expr) if isinstance(self.wrap, And) else replace(self.wrap, arg=expr)


def topic_and_chain(parse: dict[str, Any]) -> tuple[str, list[str]]:
    """The topic entity and inferential chain of a parse; raises :class:`Uncovered`."""
    topic, chain = parse.get("TopicEntityMid"), parse.get("InferentialChain") or []
    if not topic:
        raise Uncovered("no topic entity")
    if not chain:
        raise Uncovered("empty inferential chain")
    if any(c["SourceNodeIndex"] >= len(chain) for c in parse.get("Constraints") or []):
        raise Uncovered("constraint on a node beyond the chain")
    return topic, list(chain)


def steps(parse: dict[str, Any], chain_length: int) -> list[Step | Uncovered]:
    """The constraints of a parse as :class:`Step` s, node by node (entity and value
    constraints, then the time block, then the order), each one that has no S-expression
    here as an :class:`Uncovered` (an uncovered time block or order first)."""
    out: list[Step | Uncovered] = []
    constraints = list(parse.get("Constraints") or [])
    time_of: dict[int, tuple[str, str]] = {}
    time = parse.get("Time")
    if time:
        try:
            node, year, used = _time_block(time, constraints)
            time_of[node] = (_time_relation(constraints, node), year)
        except Uncovered as e:
            out.append(e)
            used = set(time.get("AssociatedConstraints") or [])
        constraints = [c for i, c in enumerate(constraints) if i not in used]
    order = parse.get("Order")
    if order and (order.get("Start") != 0 or order.get("Count") != 1):
        out.append(Uncovered(f"order Start={order.get('Start')} Count={order.get('Count')}"))
        order = None
    for i in range(chain_length):
        for c in constraints:
            if c["SourceNodeIndex"] == i:
                try:
                    out.append(Step(i, And(HOLE, _constraint(c))))
                except Uncovered as e:
                    out.append(e)
        if i in time_of:
            out.append(Step(i, TimeConstraint(HOLE, Relation(time_of[i][0]), time_of[i][1])))
        if order and order["SourceNodeIndex"] == i:
            op = "ARGMAX" if order["SortOrder"] == "Descending" else "ARGMIN"
            out.append(Step(i, Extreme(op, HOLE, Relation(order["NodePredicate"]))))
    return out


def convert(parse: dict[str, Any]) -> Top:
    """The S-expression of one WebQSP parse; raises :class:`Uncovered`."""
    topic, chain = topic_and_chain(parse)
    constraints = steps(parse, len(chain))
    for step in constraints:
        if isinstance(step, Uncovered):
            raise step
    expr: Expr = Entity(topic)
    for i, relation in enumerate(chain):
        expr = Join(Reverse(Relation(relation)), expr)
        for step in constraints:
            if step.node == i:  # type: ignore[union-attr]
                expr = step.apply(expr)  # type: ignore[union-attr]
    return expr


def _time_relation(constraints: list[dict[str, Any]], node: int) -> str:
    for c in constraints:
        if c["SourceNodeIndex"] == node and c["Operator"] == "LessOrEqual" and c["ValueType"] == "DateTime":
            return c["NodePredicate"]
    raise Uncovered("time block without a start constraint")


def _time_block(time: dict[str, Any], constraints: list[dict[str, Any]]) -> tuple[int, str, set[int]]:
    """(node, YEAR or NOW, indexes of the constraints it stands for)."""
    used = set(time.get("AssociatedConstraints") or [])
    linked = [constraints[i] for i in sorted(used) if i < len(constraints)]
    if len(linked) != 2 or len(used) != 2:
        raise Uncovered("time block without two constraints")
    by_op = {c["Operator"]: c for c in linked}
    start, end = by_op.get("LessOrEqual"), by_op.get("GreaterOrEqual")
    if start is None or end is None or start["SourceNodeIndex"] != end["SourceNodeIndex"]:
        raise Uncovered("time block of other operators")
    if keys.end_relation(start["NodePredicate"]) != end["NodePredicate"]:
        raise Uncovered("time block over a relation pair without from/to naming")
    if time.get("IsRelativeToNow"):
        return start["SourceNodeIndex"], NOW, used
    first, last = str(time.get("Start", "")), str(time.get("End", ""))
    if first[:4] == last[:4] and first[4:] == "-01-01" and last[4:] == "-12-31":
        return start["SourceNodeIndex"], first[:4], used
    raise Uncovered("time block that is not one calendar year")


def _constraint(c: dict[str, Any]) -> Expr:
    op, kind, pred, arg = c["Operator"], c["ArgumentType"], c["NodePredicate"], c["Argument"]
    relation = Relation(pred)
    if op == "Equal" and kind == "Entity":
        return Join(relation, Entity(arg))
    if op == "Equal" and kind == "Value" and c["ValueType"] == "String":
        return Join(relation, value(Literal.make(arg, lang="en")))
    if op in ("LessOrEqual", "GreaterOrEqual") and kind == "Value" and c["ValueType"] == "DateTime":
        try:
            date = Literal.make(arg, XSD + "date")
        except InvalidInputError as e:
            raise Uncovered(f"date constraint with value {arg!r}") from e
        return Compare("le" if op == "LessOrEqual" else "ge", relation, value(date))
    raise Uncovered(f"constraint {op}/{kind}/{c['ValueType']}")


def read_questions(path: str | Path) -> list[dict[str, Any]]:
    """The ``Questions`` of a WebQSP JSON file (gzip allowed): the one WebQSP reader."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"WebQSP file {str(path)!r} not found: give WebQSP.train.json(.gz) or WebQSP.test.json(.gz)")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            data = parse_json(f.read())
    except (ValueError, OSError) as e:  # malformed JSON, not UTF-8 text, not gzip
        raise InvalidInputError(f"{str(path)!r} is not a WebQSP JSON file ({e}): give WebQSP.train.json(.gz) or WebQSP.test.json(.gz)") from e
    if not isinstance(data, dict) or not isinstance(data.get("Questions"), list):
        raise InvalidInputError(f"{str(path)!r} is not a WebQSP file: expected an object with a 'Questions' list")
    return data["Questions"]


def convert_all(questions: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], Coverage]:
    """(ParseId, S-expression) of every convertible parse, and the coverage report."""
    out: list[tuple[str, str]] = []
    report = Coverage()
    for q in questions:
        report.questions += 1
        any_ok = False
        for p in q.get("Parses", []):
            report.parses += 1
            try:
                out.append((p["ParseId"], to_text(convert(p))))
            except Uncovered as e:
                report.uncovered[e.shape] += 1
                continue
            report.converted += 1
            any_ok = True
        report.questions_converted += any_ok
    return out, report
