"""The W3C N-Triples reader (``ntriples`` format) and the N-Triples term grammar that the
Freebase reader shares."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from urllib.parse import unquote

from engine.errors import InvalidIdentifierError, InvalidInputError
from engine.graph import FREEBASE_NS, Literal, Term, Triple
from engine.limits import TermCheck
from loaders.source import (
    BadLine,
    Item,
    PathOrSource,
    RelationNames,
    check_id,
    parse_lines,
)

# ---------------------------------------------------------------------------- N-Triples

# The RDF 1.1 N-Triples grammar (https://www.w3.org/TR/n-triples/#n-triples-grammar).
_UCHAR = r"\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}"
_IRI_CHARS = r'[^\x00-\x20<>"{}|^`\\]*'
# "unrolled" (plain run, then escape + plain run, repeated): linear time, no backtracking blow-up
_IRIREF = rf"<({_IRI_CHARS}(?:(?:{_UCHAR}){_IRI_CHARS})*)>"
_PN_CHARS_BASE = (
    "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd\U00010000-\U000effff"
)
_PN_CHARS = _PN_CHARS_BASE + "_\\-0-9\u00b7\u0300-\u036f\u203f-\u2040"
_BLANK = rf"_:([{_PN_CHARS_BASE}_0-9](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?)"
# "unrolled" so that a string without its closing quote fails in linear time
_STRING = r'"([^"\\\n\r]*(?:\\(?:[tbnrf"\'\\]|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8})[^"\\\n\r]*)*)"'
_LANGTAG = r"@([a-zA-Z]+(?:-[a-zA-Z0-9]+)*)"
_LITERAL = rf"{_STRING}(?:\^\^{_IRIREF}|{_LANGTAG})?"
# groups: 1 subject IRI, 2 subject blank, 3 predicate, 4 object IRI, 5 object blank,
# 6 string, 7 datatype, 8 language
_TRIPLE_LINE = re.compile(
    rf"[ \t]*(?:{_IRIREF}|{_BLANK})[ \t]*{_IRIREF}[ \t]*(?:{_IRIREF}|{_BLANK}|{_LITERAL})[ \t]*\.[ \t]*(?:#.*)?"
)
IRI_BODY = re.compile(_IRIREF[2:-2])  # the part between the angle brackets
IRIREF_ONLY = re.compile(_IRIREF)
STRING_BODY = re.compile(_STRING[2:-2])  # the part between the quotes
LANG_ONLY = re.compile(_LANGTAG[1:])
BLANK_LABEL = re.compile(_BLANK[2:])
_ABSOLUTE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_ESCAPE = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.))")
_ECHAR = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}


def unescape(text: str) -> str:
    """Undo ECHAR and UCHAR escapes (input already checked against the grammar).

    A UTF-16 surrogate pair written as two \\u escapes becomes one character; a lone
    surrogate or a code point beyond U+10FFFF is rejected: no store can hold it.
    """
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        if m.group(3) is not None:
            if m.group(3) not in _ECHAR:
                raise BadLine(f"invalid escape {m.group(0)}")
            return _ECHAR[m.group(3)]
        code = int(m.group(1) or m.group(2), 16)
        if code > 0x10FFFF:
            raise BadLine(f"escape {m.group(0)} is beyond U+10FFFF")
        return chr(code)

    out = _ESCAPE.sub(one, text)
    if any("\ud800" <= c <= "\udfff" for c in out):
        try:
            out = out.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError as e:
            raise BadLine("escape of a lone UTF-16 surrogate") from e
    return out


class NTriplesTerms:
    """Turns N-Triples terms into node ids, relation names and literals for one namespace."""

    def __init__(self, namespace: str) -> None:
        if not isinstance(namespace, str) or not _ABSOLUTE.match(namespace):
            raise InvalidInputError(f"invalid namespace {namespace!r}: give an absolute IRI such as {FREEBASE_NS!r}")
        self.namespace = namespace
        self._cut = len(namespace)
        self.relation = RelationNames()

    def iri(self, escaped: str) -> str:
        """A node id: the percent-decoded local name under the namespace, else the whole IRI."""
        iri = unescape(escaped)
        if iri.startswith(self.namespace):
            local = iri[self._cut:]
            return check_id(unquote(local) if "%" in local else local)
        if not _ABSOLUTE.match(iri):
            raise BadLine(f"relative IRI <{iri}>: N-Triples needs absolute IRIs")
        return check_id(iri)

    def predicate(self, escaped: str) -> str:
        name = self.iri(escaped)
        try:
            return self.relation(name)
        except InvalidIdentifierError as e:
            if name.startswith(("http:", "https:", "urn:")):
                raise BadLine(
                    f"predicate <{name}> is outside the namespace <{self.namespace}>; "
                    "load with the graph's own namespace to keep it"
                ) from e
            raise

    def literal(self, escaped: str, datatype: str | None, lang: str | None) -> Literal:
        if datatype is not None:
            datatype = unescape(datatype)
            if not _ABSOLUTE.match(datatype):
                raise BadLine(f"relative datatype IRI <{datatype}>")
        return Literal.make(unescape(escaped), datatype, lang)


def _diagnose(line: str) -> str:
    """A hint at what is wrong with a line the N-Triples pattern refused."""
    body = line.split(" #", 1)[0].rstrip(" \t")
    if not body.endswith("."):
        return "malformed N-Triples line: missing the final '.'"
    if body[0] == '"':
        return "malformed N-Triples line: a literal cannot be a subject"
    return "malformed N-Triples line: expected <subject> <predicate> <object> . with absolute IRIs, _:blank nodes or \"literals\""


def read_ntriples(
    source: PathOrSource,
    *,
    namespace: str = FREEBASE_NS,
    verbatim: Callable[[str], bool] | None = None,
    check: TermCheck | None = None,
) -> Iterator[Item | str]:
    """Triples of a W3C N-Triples file.

    IRIs under ``namespace`` become bare ids and relation names (percent-decoded), other
    IRIs stay whole; blank nodes become ids ``_:label`` (labels are file-scoped in RDF:
    loading two files that reuse a label joins the nodes). Predicates must make valid
    relation names and literals must be well typed, else the line is rejected.

    ``verbatim`` (the loader's fast lane, :class:`sparql.ntriples.CanonicalNTriples`): a line
    it accepts is yielded as its text, unparsed, for a store that can take it as it is.
    ``check`` (a store's :meth:`~engine.store.Store.term_check`) rejects a parsed triple that
    the store cannot hold.
    """
    terms = NTriplesTerms(namespace)
    match = _TRIPLE_LINE.fullmatch
    predicates: dict[str, str] = {}  # escaped predicate IRI -> relation name

    def parse(line: str) -> Triple | str | None:
        if verbatim is not None and verbatim(line):
            return line
        m = match(line)
        if m is None:
            stripped = line.strip(" \t")
            if not stripped or stripped[0] == "#":
                return None
            raise BadLine(_diagnose(stripped))
        s_iri, s_blank, p, o_iri, o_blank, string, datatype, lang = m.groups()
        subject = terms.iri(s_iri) if s_blank is None else "_:" + s_blank
        relation = predicates.get(p)
        if relation is None:
            relation = predicates[p] = terms.predicate(p)
        obj: Term
        if o_iri is not None:
            obj = terms.iri(o_iri)
        elif o_blank is not None:
            obj = "_:" + o_blank
        else:
            obj = terms.literal(string, datatype, lang)
        return Triple(subject, relation, obj)

    return parse_lines(source, parse, check)
