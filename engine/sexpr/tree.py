"""The typed tree of the S-expression language (GrailQA's logical forms, WebQSP's TC).

One frozen dataclass per node; :func:`to_text` prints a tree back to the canonical text the
parser reads (single spaces, no space inside parentheses), so that ``to_text(parse(s)) == s``
for every canonical ``s``.

Grammar (``expr`` is a set of nodes, ``rel`` a relation or its reverse)::

    expr  := ENTITY | LITERAL | CLASS
           | (JOIN rel expr) | (AND expr expr)
           | (ARGMAX expr path) | (ARGMIN expr path)
           | (lt RELATION LITERAL) | (le …) | (gt …) | (ge …)
           | (TC expr RELATION YEAR|NOW)
    top   := expr | (COUNT expr)
    rel   := RELATION | (R RELATION)
    path  := rel | (JOIN rel path)

Atoms: a Freebase id (``m.0abc``, ``g.11b…``) or any id in brackets (``[Tom Hanks]``, with
``\\]`` and ``\\\\`` escaped); a typed literal ``1990^^http://www.w3.org/2001/XMLSchema#gYear``
(or ``"text"^^IRI`` when the value has blanks or parentheses), a string ``"text"`` or
``"text"@en``; a relation or class name (``people.person.place_of_birth``, ``directed_by``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine.graph import XSD, Literal

#: datatypes a typed literal may carry, by local name
DATATYPES = ("integer", "int", "long", "decimal", "float", "double", "boolean", "date", "gYear", "gYearMonth", "dateTime")
NUMERIC_TYPES = frozenset(XSD + t for t in ("integer", "int", "long", "decimal", "float", "double"))
TEMPORAL_TYPES = frozenset(XSD + t for t in ("gYear", "gYearMonth", "date", "dateTime"))
COMPARISONS = ("lt", "le", "gt", "ge")
#: WebQSP's "now" (the date its annotators used for ``IsRelativeToNow``)
NOW = "NOW"
NOW_DATE = "2015-08-10"

_BARE_VALUE = re.compile(r"[^\s()\"\[\]]+")


@dataclass(frozen=True)
class Entity:
    id: str


@dataclass(frozen=True)
class Value:
    """A literal as written (``text``); :attr:`literal` is its canonical form."""

    literal: Literal
    text: str


@dataclass(frozen=True)
class Relation:
    name: str


@dataclass(frozen=True)
class Reverse:
    relation: Relation


Rel = Relation | Reverse


@dataclass(frozen=True)
class Chain:
    """A relation path ``(JOIN first rest)``: first hop, then the rest."""

    first: Rel
    rest: Rel | Chain

    def hops(self) -> list[Rel]:
        return [self.first] + (self.rest.hops() if isinstance(self.rest, Chain) else [self.rest])


Path = Relation | Reverse | Chain


@dataclass(frozen=True)
class Class:
    """A class as a set: its instances (``type.object.type``)."""

    name: str


@dataclass(frozen=True)
class Join:
    relation: Rel
    arg: Expr


@dataclass(frozen=True)
class And:
    """Intersection; ``(AND class X)`` is the case where ``left`` is a :class:`Class`."""

    left: Expr
    right: Expr


@dataclass(frozen=True)
class Extreme:
    """``(ARGMAX arg path)`` (``op`` = ``ARGMAX``) or ``ARGMIN``."""

    op: str
    arg: Expr
    path: Path


@dataclass(frozen=True)
class Compare:
    op: str
    relation: Relation
    value: Value


@dataclass(frozen=True)
class TimeConstraint:
    """``(TC arg relation year)``, ``year`` an integer text or ``NOW``."""

    arg: Expr
    relation: Relation
    year: str


@dataclass(frozen=True)
class Count:
    arg: Expr


Expr = Entity | Value | Class | Join | And | Extreme | Compare | TimeConstraint
Top = Expr | Count


def path_hops(path: Path) -> list[Rel]:
    return path.hops() if isinstance(path, Chain) else [path]


def literal_kind(literal: Literal) -> str | None:
    """``number``, ``time`` or None: how a literal compares (see :mod:`engine.sexpr.keys`)."""
    if literal.datatype in NUMERIC_TYPES:
        return "number"
    if literal.datatype in TEMPORAL_TYPES:
        return "time"
    return None


# ---------------------------------------------------------------------- printing
def to_text(node: Top | Path) -> str:
    """The canonical text of a tree."""
    if isinstance(node, Entity):
        return _entity_text(node.id)
    if isinstance(node, Value):
        return node.text
    if isinstance(node, (Relation, Class)):
        return node.name
    if isinstance(node, Reverse):
        return f"(R {node.relation.name})"
    if isinstance(node, Chain):
        return f"(JOIN {to_text(node.first)} {to_text(node.rest)})"
    if isinstance(node, Join):
        return f"(JOIN {to_text(node.relation)} {to_text(node.arg)})"
    if isinstance(node, And):
        return f"(AND {to_text(node.left)} {to_text(node.right)})"
    if isinstance(node, Extreme):
        return f"({node.op} {to_text(node.arg)} {to_text(node.path)})"
    if isinstance(node, Compare):
        return f"({node.op} {node.relation.name} {node.value.text})"
    if isinstance(node, TimeConstraint):
        return f"(TC {to_text(node.arg)} {node.relation.name} {node.year})"
    if isinstance(node, Count):
        return f"(COUNT {to_text(node.arg)})"
    raise TypeError(f"not an S-expression node: {node!r}")


FREEBASE_ID = re.compile(r"[mg]\.[0-9a-z_]+")


def _entity_text(node_id: str) -> str:
    if FREEBASE_ID.fullmatch(node_id):
        return node_id
    return "[" + node_id.replace("\\", "\\\\").replace("]", "\\]") + "]"


def value_text(literal: Literal) -> str:
    """The text of a literal in an S-expression (its canonical form)."""
    if literal.lang:
        return _quoted(literal.value) + "@" + literal.lang
    if literal.datatype is None:
        return _quoted(literal.value)
    body = literal.value if _BARE_VALUE.fullmatch(literal.value) and "^^" not in literal.value else _quoted(literal.value)
    return f"{body}^^{literal.datatype}"


def value(literal: Literal) -> Value:
    """The node of a literal, written canonically."""
    return Value(literal, value_text(literal))


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def entities(node: Top | Path) -> list[str]:
    """The entity ids a tree mentions, in order of appearance."""
    return [n.id for n in _atoms(node, Entity)]


def relations(node: Top | Path) -> list[str]:
    """The relation names a tree mentions (forward or reversed), in order of appearance."""
    return [n.name for n in _atoms(node, Relation)]


def depth(node: Top | Path) -> int:
    """How deep a tree nests (an atom is 1), counted without recursion: a tree built in Python
    may be deeper than the parser allows (:data:`engine.sexpr.parser.MAX_DEPTH`)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        n, level = stack.pop()
        deepest = max(deepest, level)
        if hasattr(n, "__dataclass_fields__") and not isinstance(n, Value):
            stack.extend((getattr(n, name), level + 1) for name in n.__dataclass_fields__)  # type: ignore[attr-defined]
    return deepest


def triple_patterns(node: Top) -> int:
    """How many triple patterns the query of ``node`` holds, as the SPARQL stores are sent it (at
    most): one per JOIN hop, class constraint and comparison, four per time constraint (its start
    and end relations, each tested twice), and an ARGMAX's argument and path twice (once to find
    the best value, once to select the members that have it)."""
    if isinstance(node, (Entity, Value)):
        return 0
    if isinstance(node, (Class, Compare)):
        return 1
    if isinstance(node, Join):
        return 1 + triple_patterns(node.arg)
    if isinstance(node, And):
        return triple_patterns(node.left) + triple_patterns(node.right)
    if isinstance(node, Extreme):
        return 2 * (triple_patterns(node.arg) + len(path_hops(node.path)))
    if isinstance(node, TimeConstraint):
        return triple_patterns(node.arg) + 4
    if isinstance(node, Count):
        return triple_patterns(node.arg)
    raise TypeError(f"not an S-expression node: {node!r}")


def _atoms(node: object, kind: type) -> list:
    found: list = []

    def walk(n: object) -> None:
        if isinstance(n, kind):
            found.append(n)
        elif hasattr(n, "__dataclass_fields__") and not isinstance(n, Value):
            for name in n.__dataclass_fields__:  # type: ignore[attr-defined]
                walk(getattr(n, name))

    walk(node)
    return found
