"""The graph data model: node ids, typed literals, triples, edges and paths.

A node is an entity id (``str``) or a typed :class:`Literal`. Result types live in
:mod:`engine.results`.
"""
from __future__ import annotations

import math
import re
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, fields
from decimal import Decimal, InvalidOperation
from itertools import repeat
from operator import attrgetter
from typing import Any, TypeVar, Union

from engine.errors import InvalidIdentifierError, InvalidInputError
from engine.identifiers import IRI_PATTERN

R = TypeVar("R")

XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
XSD_STRING = XSD + "string"

#: the namespace of ids and relations in RDF stores, as the public Freebase setups use it
FREEBASE_NS = "http://rdf.freebase.com/ns/"

NAME_RELATION = "type.object.name"
TYPE_RELATION = "type.object.type"

_DATE_PATTERNS = {
    "date": re.compile(r"-?\d{4,}-\d{2}-\d{2}(Z|[+-]\d{2}:\d{2})?"),
    "gYear": re.compile(r"-?\d{4,}(Z|[+-]\d{2}:\d{2})?"),
    "gYearMonth": re.compile(r"-?\d{4,}-\d{2}(Z|[+-]\d{2}:\d{2})?"),
    "dateTime": re.compile(r"-?\d{4,}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?"),
}
# canonical forms: a zero timezone is "Z", a fraction of seconds has no trailing zeros
_ZERO_ZONE = re.compile(r"[+-]00:00$")
_FRACTION = re.compile(r"(:\d\d)\.(\d*?)0*(?=$|Z|[+-])")
#: xsd:double and xsd:float's special values in their canonical lexical forms
SPECIAL_FLOATS = ("INF", "-INF", "NaN")
# their lexical forms (case matters; +INF is XSD 1.1's) and canonical forms
_SPECIAL_FLOATS = {"INF": "INF", "+INF": "INF", "-INF": "-INF", "NaN": "NaN"}
_LANG = re.compile(r"[a-zA-Z]{1,8}(-[a-zA-Z0-9]{1,8})*")


# XSD types derived from xsd:integer; stores keep them as xsd:integer (Oxigraph returns every one
# of them as xsd:integer), so the data model does too.
INTEGER_TYPES = frozenset(
    XSD + t
    for t in (
        "integer", "int", "long", "short", "byte", "nonNegativeInteger", "positiveInteger",
        "negativeInteger", "nonPositiveInteger", "unsignedLong", "unsignedInt", "unsignedShort", "unsignedByte",
    )
)


def _canonical_lexical(value: str, datatype: str) -> str:
    """The canonical lexical form of a typed value; raises ValueError when it is ill-typed."""
    local = datatype[len(XSD):] if datatype.startswith(XSD) else None
    if datatype in INTEGER_TYPES:
        return str(int(value.strip()))
    if local == "decimal":
        number = Decimal(value.strip())
        if not number.is_finite():
            raise ValueError(value)
        text = format(number.normalize(), "f")
        return "0" if text in ("-0", "0") else text
    if local in ("float", "double"):
        text = value.strip()
        if text in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[text]
        number = float(text)
        if math.isnan(number) or math.isinf(number):  # Python's own spellings: inf, nan, Infinity
            raise ValueError(value)
        if local == "float":  # single precision: the shortest decimal of its nearest float32
            number = float(_shortest_float32(number))
        if number.is_integer() and abs(number) < 1e16:
            return str(int(number))
        return repr(number)
    if local == "boolean":
        lowered = value.strip().lower()
        if lowered in ("true", "1"):
            return "true"
        if lowered in ("false", "0"):
            return "false"
        raise ValueError(value)
    if local in _DATE_PATTERNS:
        text = value.strip()
        if not _DATE_PATTERNS[local].fullmatch(text):
            raise ValueError(value)
        text = _ZERO_ZONE.sub("Z", text)
        return _FRACTION.sub(lambda m: m.group(1) + ("." + m.group(2) if m.group(2) else ""), text)
    return value


def _shortest_float32(number: float) -> str:
    """The shortest decimal that reads back as the single-precision float nearest ``number``."""
    try:
        single = struct.unpack("f", struct.pack("f", number))[0]
    except OverflowError as e:
        raise ValueError(number) from e
    for digits in range(1, 10):
        candidate = f"{single:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(candidate)))[0] == single:
            return candidate
    return repr(single)


@dataclass(frozen=True, order=True)
class Literal:
    """A literal: a lexical form with an optional datatype IRI or language tag.

    ``datatype`` is None for plain strings (xsd:string); ``lang`` is set only for
    language-tagged strings. Every Literal is in its canonical form, whichever way it was
    made (one rule, here): language tags lower-cased, xsd:string and rdf:langString folded
    into plain strings, integer subtypes into xsd:integer, numbers (xsd:float in single
    precision, as XSD defines it), booleans and dates in their canonical lexical form
    (``Literal("01", XSD + "integer").value == "1"``). An
    ill-typed value, a bad language tag or an unsafe datatype IRI raises InvalidInputError.
    """

    value: str
    datatype: str | None = None
    lang: str | None = None

    def __post_init__(self) -> None:
        value, datatype, lang = self.value, self.datatype, self.lang
        if not isinstance(value, str):
            raise InvalidInputError(f"a literal's value must be a string, got {value!r}")
        if lang:
            if not _LANG.fullmatch(lang):
                raise InvalidInputError(f"invalid language tag {lang!r} on literal {value!r}")
            canonical: tuple[str, str | None, str | None] = (value, None, lang.lower())
        elif datatype in (None, "", XSD_STRING, RDF_LANG_STRING):
            canonical = (value, None, None)
        else:
            if not isinstance(datatype, str) or not IRI_PATTERN.fullmatch(datatype):
                raise InvalidIdentifierError(f"invalid datatype IRI {datatype!r} on literal {value!r}")
            try:
                lexical = _canonical_lexical(value, datatype)
            except (ValueError, InvalidOperation) as e:
                raise InvalidInputError(f"ill-typed literal {value!r}^^<{datatype}>") from e
            canonical = (lexical, XSD + "integer" if datatype in INTEGER_TYPES else datatype, None)
        if canonical != (value, datatype, lang):
            object.__setattr__(self, "value", canonical[0])
            object.__setattr__(self, "datatype", canonical[1])
            object.__setattr__(self, "lang", canonical[2])

    @classmethod
    def make(cls, value: str, datatype: str | None = None, lang: str | None = None) -> Literal:
        """The same as ``Literal(value, datatype, lang)`` (canonical either way)."""
        return cls(value, datatype, lang)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"value": self.value}
        if self.datatype:
            out["datatype"] = self.datatype
        if self.lang:
            out["lang"] = self.lang
        return out

    def __str__(self) -> str:
        return self.value


Term = Union[str, Literal]


def term_key(term: Term) -> tuple:
    """A total order over terms: entities before literals, then by text."""
    if isinstance(term, Literal):
        return (1, term.value, term.datatype or "", term.lang or "")
    return (0, term, "", "")


def is_special_float(literal: Literal) -> bool:
    """Whether ``literal`` is an xsd:double or xsd:float INF, -INF or NaN."""
    return literal.value in SPECIAL_FLOATS and literal.datatype in (XSD + "double", XSD + "float")


def double_text(number: float) -> str:
    """A Python float as xsd:double text (``INF``, ``-INF``, ``NaN`` for the special values)."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "INF" if number > 0 else "-INF"
    return repr(number)


def is_literal(term: Term) -> bool:
    return isinstance(term, Literal)


@dataclass(frozen=True, slots=True)
class Triple:
    """A stored edge in its stored orientation: subject, relation, object."""

    subject: str
    relation: str
    object: Term


@dataclass(frozen=True, slots=True)
class Edge:
    """One hop as met from ``src``: ``forward`` is True when (src, relation, dst) is stored."""

    src: Term
    relation: str
    dst: Term
    forward: bool

    def triple(self) -> Triple:
        if self.forward:
            return Triple(self.src, self.relation, self.dst)  # type: ignore[arg-type]
        return Triple(self.dst, self.relation, self.src)  # type: ignore[arg-type]


def edge_key(edge: Edge) -> tuple:
    return (term_key(edge.src), edge.relation, term_key(edge.dst), not edge.forward)


def sort_edges(edges: list[Edge]) -> None:
    """Sort edges in place by :func:`edge_key`, as :func:`sort_paths` sorts paths: four stable
    sorts on the edges' own fields (forward hops first, then destinations, relations, sources)
    build no key per edge. Where two nodes only ``term_key`` can order meet (an id and a literal,
    literals whose datatypes or languages differ where one is None), comparing them raises
    TypeError, and the edges are sorted by :func:`edge_key` instead."""
    try:
        edges.sort(key=_EDGE_FORWARD, reverse=True)  # True (forward) before False, as edge_key
        edges.sort(key=_EDGE_DST)
        edges.sort(key=_EDGE_RELATION)
        edges.sort(key=_EDGE_SRC)
    except TypeError:
        edges.sort(key=edge_key)


_EDGE_SRC, _EDGE_RELATION, _EDGE_DST, _EDGE_FORWARD = (attrgetter(f) for f in ("src", "relation", "dst", "forward"))


@dataclass(frozen=True, slots=True)
class Path:
    """A path instance: ``nodes[i] -relations[i]-> nodes[i+1]``, ``forward[i]`` per hop."""

    nodes: tuple[Term, ...]
    relations: tuple[str, ...]
    forward: tuple[bool, ...]

    @property
    def start(self) -> Term:
        return self.nodes[0]

    @property
    def end(self) -> Term:
        return self.nodes[-1]

    def edges(self) -> list[Edge]:
        return [
            Edge(self.nodes[i], self.relations[i], self.nodes[i + 1], self.forward[i])
            for i in range(len(self.relations))
        ]


def build_each(cls: type[R], *columns: Iterable[Any]) -> list[R]:
    """``[cls(*row) for row in zip(*columns)]`` for :class:`Triple`, :class:`Edge` or
    :class:`Path` (slotted frozen dataclasses, no ``__post_init__``), twice as fast on large
    answers: a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
    in Python, while this sets one field of every instance at a time through its slot, in C.
    The first column gives the number of rows; the others are at least as long (``repeat(x)``)."""
    first, *rest = columns
    first = first if isinstance(first, list) else list(first)
    built = list(map(object.__new__, repeat(cls, len(first))))
    for slot, column in zip(_SLOT_SETTERS[cls], (first, *rest)):
        deque(map(slot, built, column), maxlen=0)
    return built


def path_key(path: Path) -> tuple:
    return (tuple([term_key(n) for n in path.nodes]), path.relations, tuple([not f for f in path.forward]))


def sort_paths(paths: list[Path]) -> None:
    """Sort paths in place by :func:`path_key`, several times faster on large answers: three
    stable sorts on the paths' own tuples (forward hops first, then relations, then nodes)
    build no key per path. Entity ids compare as :func:`term_key` orders them; wherever two
    nodes only ``term_key`` can order meet (an id and a literal, literals whose datatypes or
    languages differ where one is None), comparing them raises TypeError, and the paths are
    sorted by :func:`path_key` instead."""
    try:
        paths.sort(key=_FORWARD, reverse=True)  # True (forward) before False, as path_key
        paths.sort(key=_RELATIONS)
        paths.sort(key=_NODES)
    except TypeError:
        paths.sort(key=path_key)


_FORWARD, _RELATIONS, _NODES = attrgetter("forward"), attrgetter("relations"), attrgetter("nodes")


#: per result type, the setters of its fields' slots, in the order of its fields
_SLOT_SETTERS = {cls: [getattr(cls, f.name).__set__ for f in fields(cls)] for cls in (Triple, Edge, Path)}
