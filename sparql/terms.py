"""RDF terms for the SPARQL dialect: ids and relations as IRIs, literals as N-Triples text,
and the one function that binds a query's parameters (:meth:`Terms.bind`).

Ids and relation names live under one namespace per store (Freebase's
``http://rdf.freebase.com/ns/`` by default), percent-encoded so that any id becomes a safe
IRI (Freebase MIDs and relation names pass through unchanged). An id that is itself an
absolute IRI with an authority (``scheme://…``) is used as it is.
"""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, unquote

from engine.errors import InvalidInputError
from engine.graph import XSD, XSD_STRING, Literal, Term, double_text
from engine.identifiers import IRI_PATTERN, validate_iri, validate_relation
from engine.ops import Compiled
from sparql.readonly import bind_parameters

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_NEEDS_ESCAPE = re.compile(r'[\\"\x00-\x1f\x7f]')
# ASCII characters that characters outside ASCII lower to (str.lower): İ → i̇, K (Kelvin) → k
_LOWERED_FROM_OTHERS = frozenset("ik")
#: the characters of a search text an id pattern matches: each takes up to 27 characters of
#: pattern, and Virtuoso's regular expressions fail to compile past about 20,000
_PATTERN_CHARS = 256
_IRIS_KEPT = 200_000


class Terms:
    """Turns ids, relations and literals into SPARQL text and back, for one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = validate_iri(namespace, "namespace", "http://rdf.freebase.com/ns/")
        self._iris: dict[str, str] = {}  # id -> <IRI>: calls name the same seeds and hubs again and again

    def iri_of(self, local: str) -> str:
        """The IRI (without angle brackets) naming an id or relation."""
        if IRI_PATTERN.fullmatch(local) and local.partition(":")[2].startswith("//"):
            return local
        return self.namespace + quote(local, safe="")

    def id_of(self, iri: str) -> str:
        """The id or relation an IRI names (inverse of :meth:`iri_of`)."""
        if iri.startswith(self.namespace):
            return unquote(iri[len(self.namespace):])
        return iri

    def iri(self, local: str) -> str:
        found = self._iris.get(local)
        if found is None:
            if len(self._iris) >= _IRIS_KEPT:
                self._iris.clear()
            found = self._iris[local] = "<" + self.iri_of(local) + ">"
        return found

    def relation(self, name: str) -> str:
        """A relation name as an IRI, validated: the only way one enters query text."""
        return self.iri(validate_relation(name))

    def literal(self, lit: Literal) -> str:
        # a Literal's datatype IRI is validated when it is made (engine.graph.Literal)
        text = '"' + _NEEDS_ESCAPE.sub(_escape_char, lit.value) + '"'
        if lit.lang:
            return text + "@" + lit.lang
        if lit.datatype and lit.datatype != XSD_STRING:
            return text + "^^<" + lit.datatype + ">"
        return text

    def term(self, term: Term) -> str:
        return self.literal(term) if isinstance(term, Literal) else self.iri(term)

    def parameter(self, name: str, value: Any) -> str:
        """A query parameter as SPARQL text: str → an entity id's IRI, Literal → itself,
        numbers and booleans → typed literals; a list → its items separated by blanks (the
        rows of a ``VALUES`` block), a tuple → one ``VALUES`` row ``(a b)``."""
        if isinstance(value, list):
            return " ".join(self.parameter(name, item) for item in value)
        if isinstance(value, tuple):
            return "(" + " ".join(self.parameter(name, item) for item in value) + ")"
        if isinstance(value, bool):
            return self.literal(Literal.make(str(value).lower(), XSD + "boolean"))
        if isinstance(value, int):
            return self.literal(Literal.make(str(value), XSD + "integer"))
        if isinstance(value, float):
            return self.literal(Literal.make(double_text(value), XSD + "double"))
        if isinstance(value, (str, Literal)):
            return self.term(value)
        raise InvalidInputError(
            f"query parameter {name!r}: cannot bind a {type(value).__name__}; use str, Literal, int, float, "
            "bool, or a list of them"
        )

    def id_pattern(self, needle: str, anchored: bool) -> str:
        """A regular expression (XPath syntax, to match case-insensitively) over the text of an
        id's IRI — the namespace and the percent-encoded id, or an absolute IRI as it is — that
        matches every id whose lower-cased text starts with (``anchored``) or contains the
        lower-cased ``needle``, and a few more. An ASCII character is matched by its encoding
        or itself; a character outside ASCII by any run of encoded bytes or non-ASCII
        characters, since its case forms have other bytes and other lengths; so are ``i`` and
        ``k``, the only ASCII characters that others lower to (U+0130 lowers to ``i`` and
        U+0307, the Kelvin sign to ``k``). Only the needle's first :data:`_PATTERN_CHARS`
        characters are matched: the ids found are a superset the store filters anyway."""
        any_run = "(%[0-9a-f][0-9a-f]|[^!-~])+"
        pieces = []
        for char in needle[:_PATTERN_CHARS]:
            if not char.isascii():
                pieces.append(any_run)
                continue
            forms = sorted({_regex_escape(quote(char, safe="")), _regex_escape(char)})
            if char in _LOWERED_FROM_OTHERS:
                forms.append(any_run)
            pieces.append(forms[0] if len(forms) == 1 else "(" + "|".join(forms) + ")")
        start = f"^({_regex_escape(self.namespace)})?" if anchored else ""
        return start + "".join(pieces)

    def bind(self, compiled: Compiled) -> str:
        """The text of a compiled query with its ``$name`` parameters written in as escaped
        terms (:meth:`parameter`), so that no value can change the query's shape."""
        return bind_parameters(compiled.text, compiled.params, self.parameter) if compiled.params else compiled.text


def _escape_char(match: re.Match) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch) or "\\u%04X" % ord(ch)


def _regex_escape(text: str) -> str:
    """``text`` as a regular expression matching itself (XPath, PCRE and Rust syntax alike)."""
    return re.sub(r"([\\.?*+|{}()\[\]^$-])", r"\\\1", text)
