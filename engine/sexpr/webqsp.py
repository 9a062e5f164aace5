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

Anything else (no topic entity, an empty chain, an order that is not the first item or that
sorts by the node's own value, a time block of another shape, other operators or value types) is
reported as an uncovered shape. A parse with a field of the wrong type, a relation name the engine
refuses (:func:`engine.identifiers.validate_relation`) or an entity that is not a Freebase id
(``m.…``, ``g.…`` or a dotted name such as ``education.university``) is an
:class:`InvalidParse`: reported naming its question, parse and field, never converted.
:func:`steps` gives a parse's constraints one by one (for building forms that keep only some
of them, as the WebQSP slice over FB15k-237 does); :func:`convert` applies them all.
"""
from __future__ import annotations

import gzip
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError, clipped
from engine.graph import XSD, Literal
from engine.identifiers import RELATION_PATTERN, validate_id, validate_relation
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
    FREEBASE_ID,
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


class InvalidParse(Uncovered):
    """A parse with a field that convert cannot read: its shape is ``invalid FIELD`` (list
    positions left out, so that such parses count together); ``field`` and ``problem`` say
    which and why."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__("invalid " + re.sub(r"\[\d+\]", "[]", field))
        self.field = field
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


@dataclass
class Coverage:
    parses: int = 0
    converted: int = 0
    questions: int = 0
    questions_converted: int = 0
    uncovered: Counter = field(default_factory=Counter)
    #: each invalid question or parse: ``question ID, parse ID: FIELD: problem``
    invalid: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "parses": self.parses,
            "converted": self.converted,
            "parse_coverage": round(self.converted / self.parses, 4) if self.parses else 0.0,
            "questions": self.questions,
            "questions_converted": self.questions_converted,
            "uncovered_shapes": dict(self.uncovered.most_common()),
            "invalid_parses": self.invalid,
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
    """The topic entity and inferential chain of a parse; raises :class:`Uncovered`
    (:class:`InvalidParse` for a parse :func:`check_parse` refuses)."""
    check_parse(parse)
    topic, chain = parse.get("TopicEntityMid"), parse.get("InferentialChain") or []
    if not topic:
        raise Uncovered("no topic entity")
    if not chain:
        raise Uncovered("empty inferential chain")
    if any(c["SourceNodeIndex"] >= len(chain) for c in parse.get("Constraints") or []):
        raise Uncovered("constraint on a node beyond the chain")
    order = parse.get("Order")
    if order and order["SourceNodeIndex"] >= len(chain):
        raise Uncovered("order on a node beyond the chain")
    return topic, list(chain)


def check_parse(parse: object) -> None:
    """Raise :class:`InvalidParse` naming the first field of ``parse`` that convert cannot
    read: a value of the wrong type, a relation name the engine refuses, an entity that is not
    a Freebase id. Fields left empty are the uncovered shapes' business (no topic entity …)."""
    if not isinstance(parse, dict):
        raise InvalidParse("parse", f"expected an object, got {_shown(parse)}")
    if parse.get("TopicEntityMid"):
        _check_entity(parse["TopicEntityMid"], "TopicEntityMid")
    chain = parse.get("InferentialChain")
    if chain:
        for i, relation in enumerate(_list(chain, "InferentialChain", "relation names")):
            _check_relation(relation, f"InferentialChain[{i}]")
    constraints = _list(parse.get("Constraints") or [], "Constraints", "constraint objects")
    for i, c in enumerate(constraints):
        where = f"Constraints[{i}]"
        _object(c, where)
        _node_index(c, where)
        for key in ("Operator", "ArgumentType", "ValueType", "Argument"):
            if not isinstance(c.get(key), str):
                raise InvalidParse(f"{where}.{key}", f"expected a string, {_got(c, key)}")
        _check_relation(c.get("NodePredicate"), f"{where}.NodePredicate")
        if c["ArgumentType"] == "Entity":
            _check_entity(c["Argument"], f"{where}.Argument")
    time = parse.get("Time")
    if time:
        _object(time, "Time")
        for i, index in enumerate(_list(time.get("AssociatedConstraints") or [], "Time.AssociatedConstraints", "constraint indexes")):
            if not _is_index(index):
                raise InvalidParse(f"Time.AssociatedConstraints[{i}]", f"expected an index ≥ 0, got {_shown(index)}")
        for key in ("Start", "End"):
            if time.get(key) is not None and not isinstance(time[key], str):
                raise InvalidParse(f"Time.{key}", f"expected a date string, got {_shown(time[key])}")
    order = parse.get("Order")
    if order:
        _object(order, "Order")
        _node_index(order, "Order")
        if order.get("SortOrder") not in ("Ascending", "Descending"):
            raise InvalidParse("Order.SortOrder", f"expected 'Ascending' or 'Descending', {_got(order, 'SortOrder')}")
        for key in ("Start", "Count"):
            if not _is_index(order.get(key)):
                raise InvalidParse(f"Order.{key}", f"expected an integer ≥ 0, {_got(order, key)}")
        if order.get("NodePredicate") is not None:  # None: sorted by the node's own value (uncovered)
            _check_relation(order["NodePredicate"], "Order.NodePredicate")


def _parse_id(parse: dict[str, Any]) -> str:
    """The ParseId that names a parse's form in convert's output."""
    if not isinstance(parse.get("ParseId"), str):
        raise InvalidParse("ParseId", f"expected a string, {_got(parse, 'ParseId')}")
    return parse["ParseId"]


def check_question(question: object) -> None:
    """Raise :class:`InvalidParse` naming the first field of a WebQSP question that the slice
    over FB15k-237 reads and cannot: ``QuestionId`` and ``RawQuestion`` strings, ``Parses`` a list."""
    if not isinstance(question, dict):
        raise InvalidParse("question", f"expected an object, got {_shown(question)}")
    for key in ("QuestionId", "RawQuestion"):
        if not isinstance(question.get(key), str):
            raise InvalidParse(key, f"expected a string, {_got(question, key)}")
    _list(question.get("Parses") or [], "Parses", "parses")


def check_gold(parse: dict[str, Any]) -> None:
    """Raise :class:`InvalidParse` naming the first field of a parse's ``ParseId`` and gold
    ``Answers`` that the slice cannot read: each answer an object with a string
    ``AnswerArgument`` and a string or no ``EntityName``."""
    _parse_id(parse)
    for i, answer in enumerate(_list(parse.get("Answers") or [], "Answers", "answer objects")):
        where = f"Answers[{i}]"
        if not isinstance(answer, dict):
            raise InvalidParse(where, f"expected an object, got {_shown(answer)}")
        if not isinstance(answer.get("AnswerArgument"), str):
            raise InvalidParse(f"{where}.AnswerArgument", f"expected a string, {_got(answer, 'AnswerArgument')}")
        if not isinstance(answer.get("EntityName") or "", str):
            raise InvalidParse(f"{where}.EntityName", f"expected a string, {_got(answer, 'EntityName')}")


def _shown(value: object) -> str:
    return clipped(repr(value), 100)


def _got(item: dict[str, Any], key: str) -> str:
    return f"got {_shown(item[key])}" if key in item else "but it is missing"


def _list(value: object, where: str, of: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidParse(where, f"expected a list of {of}, got {_shown(value)}")
    return value


def _object(value: object, where: str) -> None:
    if not isinstance(value, dict):
        raise InvalidParse(where, f"expected an object, got {_shown(value)}")


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _node_index(item: dict[str, Any], where: str) -> None:
    if not _is_index(item.get("SourceNodeIndex")):
        raise InvalidParse(f"{where}.SourceNodeIndex", f"expected a chain node index ≥ 0, {_got(item, 'SourceNodeIndex')}")


def _check_relation(name: object, where: str) -> None:
    try:
        validate_relation(name)
    except InvalidInputError as e:  # its message names the relation
        raise InvalidParse(where, str(e)) from e


def _check_entity(node_id: object, where: str) -> None:
    """A Freebase id: a MID (``m.0abc``, ``g.11b…``) or a dotted name (``education.university``,
    a type a constraint may name)."""
    try:
        validate_id(node_id)
    except InvalidInputError as e:
        raise InvalidParse(where, str(e)) from e
    if not (FREEBASE_ID.fullmatch(node_id) or RELATION_PATTERN.fullmatch(node_id)):  # type: ignore[arg-type]
        raise InvalidParse(where, f"{_shown(node_id)} is not a Freebase id: give a MID such as m.0abc")


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
    if order and order.get("NodePredicate") is None:
        out.append(Uncovered("order by the node's own value"))
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
    except (ValueError, OSError, EOFError, zlib.error) as e:  # malformed JSON, not UTF-8 text, not gzip, damaged gzip
        raise InvalidInputError(f"{str(path)!r} is not a WebQSP JSON file ({e}): give WebQSP.train.json(.gz) or WebQSP.test.json(.gz)") from e
    if not isinstance(data, dict) or not isinstance(data.get("Questions"), list):
        raise InvalidInputError(f"{str(path)!r} is not a WebQSP file: expected an object with a 'Questions' list")
    return data["Questions"]


def convert_all(questions: list[dict[str, Any]]) -> tuple[list[tuple[str, str]], Coverage]:
    """(ParseId, S-expression) of every convertible parse, and the coverage report (an invalid
    question or parse counted as not converted, and named in ``invalid``)."""
    out: list[tuple[str, str]] = []
    report = Coverage()
    for number, q in enumerate(questions, 1):
        report.questions += 1
        question = q.get("QuestionId") if isinstance(q, dict) else None
        shown_question = question if isinstance(question, str) else f"#{number}"
        parses = q.get("Parses", []) if isinstance(q, dict) else None
        if not isinstance(parses, list):
            problem = InvalidParse("question" if parses is None else "Parses",
                                   f"expected {'an object' if parses is None else 'a list of parses'}, "
                                   f"got {_shown(q if parses is None else parses)}")
            report.invalid.append(f"question {shown_question}: {problem}")  # no parses to count
            continue
        any_ok = False
        for index, p in enumerate(parses):
            report.parses += 1
            try:
                sexpr = to_text(convert(p))
                parse_id = _parse_id(p)
            except InvalidParse as e:
                shown_parse = p["ParseId"] if isinstance(p, dict) and isinstance(p.get("ParseId"), str) else f"#{index}"
                report.invalid.append(f"question {shown_question}, parse {shown_parse}: {e}")
                report.uncovered[e.shape] += 1
                continue
            except Uncovered as e:
                report.uncovered[e.shape] += 1
                continue
            out.append((parse_id, sexpr))
            report.converted += 1
            any_ok = True
        report.questions_converted += any_ok
    return out, report
