"""RDF terms for the SPARQL dialect: ids and relations as IRIs, literals as N-Triples text.

Ids and relation names live under one namespace per store (Freebase's
``http://rdf.freebase.com/ns/`` by default), percent-encoded so that any id becomes a safe
IRI (Freebase MIDs and relation names pass through unchanged). An id that is itself an
absolute IRI is used as it is.
"""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, unquote

from engine.errors import InvalidIdentifierError, InvalidInputError
from engine.graph import XSD, XSD_STRING, Literal, Term

_ABSOLUTE_IRI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s<>\"{}|^`\\]*")
_SAFE_IRI = re.compile(r"[^\x00-\x20<>\"{}|^`\\]*")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_NEEDS_ESCAPE = re.compile(r'[\\"\x00-\x1f\x7f]')


class Terms:
    """Turns ids, relations and literals into SPARQL text and back, for one namespace."""

    def __init__(self, namespace: str) -> None:
        if not _ABSOLUTE_IRI.fullmatch(namespace):
            raise InvalidIdentifierError(f"invalid namespace {namespace!r}: give an absolute IRI such as http://rdf.freebase.com/ns/")
        self.namespace = namespace

    def iri_of(self, local: str) -> str:
        """The IRI (without angle brackets) naming an id or relation."""
        if _ABSOLUTE_IRI.fullmatch(local):
            return local
        return self.namespace + quote(local, safe="")

    def id_of(self, iri: str) -> str:
        """The id or relation an IRI names (inverse of :meth:`iri_of`)."""
        if iri.startswith(self.namespace):
            return unquote(iri[len(self.namespace):])
        return iri

    def iri(self, local: str) -> str:
        return "<" + self.iri_of(local) + ">"

    def literal(self, lit: Literal) -> str:
        text = '"' + _NEEDS_ESCAPE.sub(_escape_char, lit.value) + '"'
        if lit.lang:
            return text + "@" + lit.lang
        if lit.datatype and lit.datatype != XSD_STRING:
            if not _SAFE_IRI.fullmatch(lit.datatype):
                raise InvalidIdentifierError(f"invalid datatype IRI {lit.datatype!r}")
            return text + "^^<" + lit.datatype + ">"
        return text

    def term(self, term: Term) -> str:
        return self.literal(term) if isinstance(term, Literal) else self.iri(term)

    def parameter(self, name: str, value: Any) -> str:
        """A query parameter as a term: str → an entity id, Literal → itself, numbers and
        booleans → typed literals."""
        if isinstance(value, bool):
            return self.literal(Literal.make(str(value).lower(), XSD + "boolean"))
        if isinstance(value, int):
            return self.literal(Literal.make(str(value), XSD + "integer"))
        if isinstance(value, float):
            return self.literal(Literal.make(repr(value), XSD + "double"))
        if isinstance(value, (str, Literal)):
            return self.term(value)
        raise InvalidInputError(
            f"query parameter {name!r}: cannot bind a {type(value).__name__}; use str, Literal, int, float or bool"
        )

    def values(self, var: str, ids: list[str]) -> str:
        return "VALUES ?" + var + " { " + " ".join(self.iri(i) for i in ids) + " }"


def _escape_char(match: re.Match) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch) or "\\u%04X" % ord(ch)


def string_literal(text: str) -> str:
    """A plain SPARQL string literal holding ``text`` (escaped)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'
