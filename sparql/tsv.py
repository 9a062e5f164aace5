"""Reading a SELECT's results in the SPARQL 1.1 TSV results format, as Oxigraph writes them.

Why: Oxigraph writes a whole result as TSV in Rust in about the time Python takes to walk its
solution objects, and a TSV row is read with two ``str.split`` calls; turning each value into
an engine term is then one dictionary lookup (:meth:`engine.stores.sparql_store.SparqlStore._from_tsv`
keeps the terms read so far), so decoding a large answer costs a small fraction of running it.

A value is written in Turtle's syntax: ``<iri>``, ``_:label``, a quoted string with an optional
``@lang`` or ``^^<datatype>``, or a bare ``true``/``false``, integer, decimal or double; an
unbound value is an empty field. Inside a quoted string the writer escapes the tab, the line
breaks, the quote and the backslash, so a row never spans lines and a field never holds a tab.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from engine.errors import StoreError
from engine.graph import XSD, Literal, Term

K = TypeVar("K")
V = TypeVar("V")
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))", re.DOTALL)
_ESCAPED = {"t": "\t", "n": "\n", "r": "\r", "b": "\b", "f": "\f", '"': '"', "'": "'", "\\": "\\"}
#: Turtle's bare literals, in the order they are tried, with the datatype each stands for
_BARE = (
    (re.compile(r"true|false"), XSD + "boolean"),
    (re.compile(r"[+-]?[0-9]+"), XSD + "integer"),
    (re.compile(r"[+-]?[0-9]*\.[0-9]+"), XSD + "decimal"),
    (re.compile(r"[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)[eE][+-]?[0-9]+"), XSD + "double"),
)


def _unescape(match: re.Match) -> str:
    code = match.group(1) or match.group(2)
    if code:
        return chr(int(code, 16))
    char = match.group(3)
    if char not in _ESCAPED:
        raise StoreError(f"unknown escape \\{char} in a TSV result")
    return _ESCAPED[char]


def parse_term(
    token: str, id_of: Callable[[str], str], literal: Callable[[str, str | None, str | None], Any] = Literal
) -> Any:
    """One value in Turtle's syntax (a TSV field, a Turtle result's value) as an engine term:
    an IRI as ``id_of(iri)``, a blank node as ``_:label``, a literal as ``literal(value,
    datatype, lang)`` (a :class:`Literal` unless told otherwise), or None for an empty
    (unbound) field."""
    if not token:
        return None
    first = token[0]
    if first == "<" and not token.startswith("<<"):
        iri = token[1:-1]
        return id_of(_ESCAPE.sub(_unescape, iri) if "\\" in iri else iri)  # Turtle's \u escapes
    if first == '"':
        end = token.rfind('"')  # a language tag or datatype IRI holds no quote
        value = token[1:end]
        if "\\" in value:
            value = _ESCAPE.sub(_unescape, value)
        suffix = token[end + 1:]
        if not suffix:
            return literal(value, None, None)
        if suffix[0] == "@":
            return literal(value, None, suffix[1:])
        if suffix.startswith("^^<") and suffix.endswith(">"):
            return literal(value, suffix[3:-1], None)
    elif token.startswith("_:"):
        return token
    else:
        for pattern, datatype in _BARE:
            if pattern.fullmatch(token):
                return literal(token, datatype, None)
    raise StoreError(f"cannot read the value {token[:200]!r} of a query result")


def read_tsv(
    data: str, known: dict[str, Term | None], read: Callable[[str], Term | None]
) -> tuple[list[str], list[list[Term | None]]]:
    """A TSV result's variable names and, per name, the column of its values. A value is
    looked up in ``known`` (token → term), else read by ``read(token)`` and added to it."""
    header, _, body = data.partition("\n")
    names = [name[1:] for name in header.split("\t")] if header else []
    if not body or not names:
        return names, [[] for _ in names]
    # Every row ends in a newline and holds len(names) fields: one flat list of all fields,
    # decoded at C speed, then cut into columns.
    tokens = body[:-1].replace("\n", "\t").split("\t")
    if len(tokens) % len(names):
        raise StoreError(f"a TSV result's rows do not have {len(names)} fields each")
    values = decode_each(tokens, known, read)
    width = len(names)
    return names, [values[i::width] for i in range(width)]


def decode_each(keys: list[K], known: dict[K, V], read: Callable[[K], V]) -> list[V]:
    """``known[key]`` for each key, in order; a key met for the first time is read once by
    ``read(key)`` and kept in ``known``. Answers repeat the same values row after row, so a
    large answer costs one dictionary lookup per value (at C speed) and one read per distinct one."""
    try:
        return list(map(known.__getitem__, keys))
    except KeyError:  # values not met before
        for key in set(keys).difference(known):
            known[key] = read(key)
        return list(map(known.__getitem__, keys))
