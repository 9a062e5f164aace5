"""Raw SPARQL handed to ``Store.query``: checked token by token before it is sent, and bound
(:func:`prepare_query`). The binder (:func:`bind_parameters`) binds compiled queries too.

The text is split into SPARQL 1.1 tokens (strings, IRIs, comments, prefixed names,
variables, words), so that nothing inside a string or a comment counts and nothing outside
one hides. It is refused when it:

- writes (INSERT, DELETE, LOAD, …): :class:`ReadOnlyViolationError`;
- uses a word that is not SPARQL 1.1 (Virtuoso's ``DEFINE`` pragmas, ``OPTION``, …), ``BASE``,
  or a prefix it does not declare (the server's predefined prefixes are not used);
- names an IRI in Virtuoso's built-in or SQL namespaces (``bif:``, ``sql:``, and their
  ``http://www.openlinksw.com/schemas/…#`` forms) anywhere, or calls a function by IRI other
  than an XSD cast: Virtuoso runs any other function IRI as a stored procedure;
- uses ``SERVICE`` without ``allow_service`` (federation sends requests anywhere);
- for a store kept in one named graph, reads another (``FROM``, ``FROM NAMED``, ``GRAPH <…>``);
- is bigger than every store can read safely (:func:`check_size`): brackets nested deeper than
  :data:`MAX_NESTING`, more than :data:`MAX_OPERATORS` operators, keywords and brackets, or more
  than :data:`MAX_TOKENS` tokens (:class:`InvalidInputError`).

Servers disagree on two lexical points, so both readings are checked: Virtuoso reads
``?a<b:f(…)>0`` as an IRI where Oxigraph reads comparisons (an IRI's text is also checked as
code), and some parsers expand ``\\u`` escapes before lexing (an escape that would then end a
string or an IRI is refused; one outside a string or IRI is invalid).
"""
from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidInputError, QueryRefusedError, ReadOnlyViolationError
from engine.graph import XSD

_UCHAR = r"\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}"
_ESCAPE = rf"\\[tbnrf\"'\\]|{_UCHAR}"
_PN_PREFIX = r"[^\W\d_](?:[\w.\-\u00B7]*[\w\-\u00B7])?"
_PLX = r"%[0-9A-Fa-f]{2}|\\[_~.\-!$&'()*+,;=/?#@%]"
_PN_LOCAL = rf"(?:[\w:]|{_PLX})(?:(?:[\w.:\-\u00B7]|{_PLX})*(?:[\w:\-\u00B7]|{_PLX}))?"
# A comment ends at the first line break of any kind: ending it early only makes more text code.
_TOKEN = re.compile(
    r"(?P<space>[ \t\r\n]+)"
    r"|(?P<comment>#[^\n\r\v\f\x1c-\x1e\x85\u2028\u2029]*)"
    rf"|(?P<string>'''(?:(?:'|'')?(?:[^'\\]|{_ESCAPE}))*'''"
    rf'|"""(?:(?:"|"")?(?:[^"\\]|{_ESCAPE}))*"""'
    rf"|'(?:[^'\\\n\r]|{_ESCAPE})*'"
    rf'|"(?:[^"\\\n\r]|{_ESCAPE})*")'
    rf"|(?P<iri><(?:[^<>\"{{}}|^`\\\x00-\x20]|{_UCHAR})*>)"
    r"|(?P<var>[?$][\w\u00B7\u0300-\u036F\u203F\u2040]+)"
    r"|(?P<bnode>_:[\w](?:[\w.\-\u00B7]*[\w\-\u00B7])?)"
    rf"|(?P<pname>(?:{_PN_PREFIX})?:(?:{_PN_LOCAL})?)"
    r"|(?P<number>\d+\.\d*[eE][+-]?\d+|\d*\.\d+(?:[eE][+-]?\d+)?|\d+(?:[eE][+-]?\d+)?)"
    r"|(?P<langtag>@[A-Za-z]+(?:-[A-Za-z0-9]+)*)"
    r"|(?P<word>[A-Za-z_]\w*)"
    r"|(?P<punct>\^\^|&&|\|\||!=|<=|>=|[{}()\[\];,.*/|^+\-!=<>?])"
)
_ANY_UCHAR = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")
# What a \u escape may not stand for: expanded before lexing, it would end a string or an IRI.
_STRUCTURAL = frozenset("\"'<>\\\n\r")
_LOCAL_ESCAPE = re.compile(r"\\(.)")

_QUERY_WORDS = frozenset(
    word.upper()
    for line in (
        "SELECT CONSTRUCT DESCRIBE ASK PREFIX DISTINCT REDUCED AS FROM NAMED WHERE ORDER BY ASC DESC",
        "LIMIT OFFSET GROUP HAVING VALUES UNDEF OPTIONAL UNION MINUS GRAPH SERVICE SILENT FILTER BIND",
        "NOT IN EXISTS a true false SEPARATOR",
        # built-in functions and aggregates
        "STR LANG LANGMATCHES DATATYPE BOUND IRI URI BNODE RAND ABS CEIL FLOOR ROUND CONCAT STRLEN",
        "UCASE LCASE ENCODE_FOR_URI CONTAINS STRSTARTS STRENDS STRBEFORE STRAFTER YEAR MONTH DAY HOURS",
        "MINUTES SECONDS TIMEZONE TZ NOW UUID STRUUID MD5 SHA1 SHA256 SHA384 SHA512 COALESCE IF",
        "STRLANG STRDT sameTerm isIRI isURI isBLANK isLITERAL isNUMERIC REGEX SUBSTR REPLACE",
        "COUNT SUM MIN MAX AVG SAMPLE GROUP_CONCAT",
    )
    for word in line.split()
)
_UPDATE_WORDS = frozenset(("INSERT", "DELETE", "LOAD", "CLEAR", "CREATE", "DROP", "COPY", "MOVE", "ADD"))
# Virtuoso's built-in (bif:) and SQL (sql:) functions, under any of their names.
_SERVER_NAMESPACES = (
    "bif:",
    "sql:",
    "special::",
    "http://www.openlinksw.com/schemas/bif#",
    "http://www.openlinksw.com/schemas/sql#",
)
_SERVER_PREFIXES = frozenset({"bif", "sql"})
_CAST = re.compile(re.escape(XSD) + r"[A-Za-z]+")

#: Oxigraph's parser recurses once per bracket level: past about 2,100 levels it overflows an
#: 8 MiB stack and the process dies. (Virtuoso refuses curly braces nested past about 75.)
MAX_NESTING = 64
#: Oxigraph's query algebra nests one level per clause or operator, even side by side
#: (``A MINUS {} MINUS {} …``): about 7,800 such tokens (2,600 ``MINUS {}``) overflow an 8 MiB stack.
MAX_OPERATORS = 2_000
#: Tokens of any kind (VALUES data included): bounds the work of checking a query.
MAX_TOKENS = 100_000
#: Triple patterns, joined or side by side: Virtuoso refuses a query of about 80 and its server
#: dies at about 85 (a chain, a star, groups or OPTIONALs alike); Oxigraph plans 64 in under a
#: second, 256 in a minute, and its process dies at about 10,000.
MAX_PATTERNS = 64
_OPENING = frozenset("{([")
_CLOSING = frozenset("})]")
# Tokens that are part of a term or separate terms, and so add no level to a query's algebra.
_TERM_PUNCTUATION = frozenset({".", ",", ";", "^^"})
_TERM_WORDS = frozenset({"TRUE", "FALSE", "UNDEF"})  # and `a`, in lower case only
_TERM_KINDS = frozenset({"iri", "var", "bnode", "pname", "string", "number"})
# What a triple pattern's subject follows; a collection's opening parenthesis may also follow
# what comes before an object.
_PATTERN_START_AFTER = frozenset({"{", "}", ".", ")"})
_COLLECTION_AFTER = _PATTERN_START_AFTER | {";", ",", "["}


@dataclass(frozen=True)
class Token:
    kind: str  # a group name of _TOKEN
    text: str
    start: int


def tokens(text: str, *, lenient: bool = False, limit: int | None = None) -> list[Token]:
    """The significant tokens of ``text`` (no blanks or comments). Text that no token matches
    is an :class:`InvalidInputError`, or skipped one character at a time when ``lenient``; so is
    a text of more than ``limit`` tokens (read no further)."""
    found: list[Token] = []
    pos = 0
    while pos < len(text):
        if limit is not None and len(found) > limit:
            raise InvalidInputError(
                f"invalid SPARQL query: it holds more than {limit:,} tokens (the last read at "
                f"{_where(text, found[-1].start)}); query() takes at most {limit:,}: split it into several queries"
            )
        match = _TOKEN.match(text, pos)
        if match is None:
            if lenient:
                pos += 1
                continue
            raise InvalidInputError(f"invalid SPARQL query: cannot read it at {_where(text, pos)}")
        kind = match.lastgroup
        if kind not in ("space", "comment"):
            found.append(Token(kind, match.group(), pos))  # type: ignore[arg-type]
        pos = match.end()
    return found


def prepare_query(
    text: str,
    params: dict[str, Any],
    render: Callable[[str, Any], str],
    *,
    graph: str | None = None,
    allow_service: bool = False,
) -> str:
    """Check a raw query (see the module's docstring), bind its ``$name`` parameters
    (:func:`bind_parameters`), check the bound text again and return it.

    ``graph``: the one graph the query may read (None: no limit).
    """
    if "\x00" in text:
        raise InvalidInputError("invalid SPARQL query: it contains a NUL character")
    found = tokens(text, limit=MAX_TOKENS)
    bound = bind_parameters(text, params, render, found)
    _check(bound, found if bound is text else tokens(bound), graph, allow_service)  # what is sent is what is checked
    check_size(text, found)  # a bound value is a term: binding adds no bracket or operator
    return bound


def bind_parameters(
    text: str, params: dict[str, Any], render: Callable[[str, Any], str], found: list[Token] | None = None
) -> str:
    """``text`` with each ``$name`` variable replaced by ``render(name, value)``, an escaped
    RDF term, so that no value can change the query's shape (raw and compiled queries alike).
    Every ``$name`` of the text must be given, and every parameter must appear."""
    places = _placeholders(text) if found is None else _placeholders_of(found)
    named = {name for _, name in places}
    missing = sorted(named - set(params))
    if missing:
        raise InvalidInputError(
            f"query parameter(s) {', '.join('$' + m for m in missing)} not given: pass a value for each "
            f"(--param {missing[0]}=ID, or params={{{missing[0]!r}: …}}), or write ?{missing[0]} for a variable"
        )
    unknown = sorted(set(params) - named)
    if unknown:
        raise InvalidInputError(f"query parameters {unknown} do not appear in the query as $name placeholders")
    if not named:
        return text
    pieces, pos = [], 0
    for start, name in places:
        pieces += [text[pos:start], render(name, params[name])]
        pos = start + 1 + len(name)
    return "".join(pieces) + text[pos:]


def _placeholders_of(found: list[Token]) -> tuple[tuple[int, str], ...]:
    """Where each ``$name`` placeholder starts, and its name."""
    return tuple((t.start, t.text[1:]) for t in found if t.kind == "var" and t.text[0] == "$")


@functools.lru_cache(maxsize=4096)
def _placeholders(text: str) -> tuple[tuple[int, str], ...]:
    """:func:`_placeholders_of` a text, kept: a compiled query's text holds its values as
    placeholders, so the same few texts come back call after call, and reading one costs
    more than running a small query."""
    return _placeholders_of(tokens(text))


def check_size(text: str, found: list[Token]) -> None:
    """Raise :class:`InvalidInputError` unless the query ``found`` (the tokens of ``text``) nests
    brackets at most :data:`MAX_NESTING` deep, holds at most :data:`MAX_OPERATORS` operators,
    keywords and brackets (the parentheses of VALUES rows aside) and at most :data:`MAX_PATTERNS`
    triple patterns (:class:`_PatternCount`): the bounds within which every store reads it safely.
    An unmatched closing bracket closes nothing, so it hides no opening one."""
    depth = operators = 0
    data_depth: int | None = None  # the depth of the VALUES data block being read, if any
    values_header = False  # between VALUES and its data block: variables and parentheses only
    patterns = _PatternCount()
    for t in found:
        punct = t.text if t.kind == "punct" else ""
        if values_header and not (t.kind == "var" or punct in ("(", ")", "{")):
            values_header = False
        in_data = data_depth is not None or (values_header and punct == "{")
        if patterns.read(t, data=in_data) > MAX_PATTERNS:
            raise InvalidInputError(
                f"invalid SPARQL query: it holds more than {MAX_PATTERNS} triple patterns (the last counted at "
                f"{_where(text, t.start)}); query() takes at most {MAX_PATTERNS}, as Virtuoso fails on a query of "
                "about 80: split it into several queries"
            )
        if punct in _OPENING:
            depth += 1
            if depth > MAX_NESTING:
                raise InvalidInputError(
                    f"invalid SPARQL query: brackets nest more than {MAX_NESTING} deep at {_where(text, t.start)}; "
                    f"query() takes at most {MAX_NESTING} levels of {{ }}, ( ) and [ ]: put groups and "
                    "subqueries side by side rather than inside each other"
                )
            if values_header and punct == "{":
                data_depth, values_header = depth, False
        elif punct in _CLOSING:
            if depth == data_depth:
                data_depth = None
            depth = max(depth - 1, 0)
        elif t.kind == "word" and t.text.upper() == "VALUES":
            values_header = True
        if data_depth is not None and punct in ("(", ")"):
            continue  # a row of VALUES data
        if (punct and punct not in _TERM_PUNCTUATION) or (t.kind == "word" and not _is_term_word(t.text)):
            operators += 1
            if operators > MAX_OPERATORS:
                raise InvalidInputError(
                    f"invalid SPARQL query: it holds more than {MAX_OPERATORS:,} operators, keywords and brackets "
                    f"(the last counted at {_where(text, t.start)}); query() takes at most {MAX_OPERATORS:,}: give "
                    "long lists of values as VALUES data or IN (…), or split the query into several"
                )


class _PatternCount:
    """The triple patterns of a query read token by token (VALUES data left out), counted from
    above: inside braces and outside expressions' parentheses, each subject (a term, ``[`` or
    ``(`` after ``{``, ``}``, ``.`` or ``)``), each ``,`` and ``;`` (one more object or
    predicate), each ``[`` (a blank node's own patterns), and two per member of a collection
    ``( … )`` (its ``rdf:first`` and ``rdf:rest``). A projection or ordering that puts a term
    after ``)`` counts too: an overcount, never an undercount."""

    def __init__(self) -> None:
        self.count = 0
        self.braces = 0
        self.parens: list[bool] = []  # each open parenthesis: whether it holds a collection
        self.previous: Token | None = None

    def read(self, t: Token, *, data: bool = False) -> int:
        """The count after ``t``; ``data``: ``t`` is VALUES data (or its braces), which holds no pattern."""
        if data:
            self.previous = t
            return self.count
        punct = t.text if t.kind == "punct" else ""
        previous = self.previous
        after = previous.text if previous is not None and previous.kind == "punct" else None  # the punctuation before t
        in_collection = bool(self.parens) and self.parens[-1]
        if punct == "{":
            self.braces += 1
        elif punct == "}":
            self.braces = max(self.braces - 1, 0)
        elif punct == "(":
            pattern_place = not self.parens and (_is_term(previous) or after in _COLLECTION_AFTER)
            opens_collection = self.braces > 0 and (in_collection or pattern_place)
            if opens_collection and not self.parens and after in _PATTERN_START_AFTER:
                self.count += 1  # a collection as a subject
            self.parens.append(opens_collection)
        elif punct == ")":
            if self.parens:
                self.parens.pop()
        elif in_collection:
            self.count += 2 * _is_term(t)
        elif self.braces > 0 and not self.parens:
            if (_is_term(t) or punct == "[") and after in _PATTERN_START_AFTER:
                self.count += 1
            if punct in (",", ";", "["):
                self.count += 1
        self.previous = t
        return self.count


def _is_term_word(word: str) -> bool:
    return word == "a" or word.upper() in _TERM_WORDS


def _is_term(t: Token | None) -> bool:
    return t is not None and (t.kind in _TERM_KINDS or (t.kind == "word" and _is_term_word(t.text)))


def _check(text: str, found: list[Token], graph: str | None, allow_service: bool) -> None:
    for t in found:  # a write is named as such, whatever else the text holds
        if t.kind == "word" and t.text.upper() in _UPDATE_WORDS:
            raise ReadOnlyViolationError(
                f"query refused: {t.text.upper()} would write to the store; query() runs read-only "
                "SPARQL (SELECT, ASK, CONSTRUCT, DESCRIBE) only — load data with `kgqa load`"
            )
    _check_escapes(text, found)
    prefixes = _prefixes(text, found)
    for i, t in enumerate(found):
        following = found[i + 1] if i + 1 < len(found) else None
        if t.kind == "word":
            after = found[i + 2] if i + 2 < len(found) else None
            _check_word(t, following, after, prefixes, graph, allow_service)
        elif t.kind in ("iri", "pname"):
            declaring = i > 0 and found[i - 1].kind == "word" and found[i - 1].text.upper() == "PREFIX"
            _check_term(t, None if declaring else prefixes, following)
            if t.kind == "iri":  # read as code too: Oxigraph reads `?a<b:f(…)>0` as comparisons
                _check_code(t.text[1:-1], prefixes)


def _check_word(
    t: Token,
    following: Token | None,
    after: Token | None,
    prefixes: dict[str, str],
    graph: str | None,
    allow_service: bool,
) -> None:
    word = t.text.upper()
    if word == "BASE":
        raise QueryRefusedError("query refused: query() does not take BASE; write absolute IRIs or PREFIX declarations")
    if word not in _QUERY_WORDS:
        raise QueryRefusedError(
            f"query refused: {t.text!r} is not a word of a SPARQL 1.1 query; query() runs standard "
            "SPARQL 1.1 only (no server extensions such as Virtuoso's DEFINE pragmas or OPTION clauses)"
        )
    if word == "SERVICE" and not allow_service:
        raise QueryRefusedError(
            "query refused: SERVICE makes the store send requests to other servers; allow federation "
            "explicitly with query(…, allow_service=True) (`kgqa query query … --allow-service`)"
        )
    if graph is None or word not in ("FROM", "GRAPH"):
        return
    named = word == "FROM" and following is not None and following.text.upper() == "NAMED"
    target = after if named else following
    if word == "GRAPH" and target is not None and target.kind == "var":
        return  # the endpoint is told that the store's graph is the only named graph
    if target is None or target.kind not in ("iri", "pname") or _resolve(target, prefixes) != graph:
        shown = target.text if target is not None else "(nothing)"
        raise QueryRefusedError(
            f"query refused: {t.text}{' NAMED' if named else ''} {shown} reads outside this store's graph "
            f"<{graph}>; a raw query reads that graph only (leave out FROM and GRAPH <…>, or name that graph)"
        )


def _check_term(t: Token, prefixes: dict[str, str] | None, following: Token | None) -> None:
    """Refuse a server namespace however the IRI or prefixed name ``t`` spells it, and a call of
    anything but an XSD cast. ``prefixes`` None: ``t`` is being declared (or cannot be resolved)."""
    spellings = [t.text, _expand_uchars(t.text)]
    iri = _resolve(t, prefixes) if prefixes is not None and _declared(t, prefixes) else None
    if iri is not None:
        spellings.append(iri)
    for spelling in spellings:
        bare = spelling.strip("<>").lower()
        if bare.startswith(_SERVER_NAMESPACES) or (t.kind == "pname" and bare.split(":", 1)[0] in _SERVER_PREFIXES):
            raise QueryRefusedError(
                f"query refused: {t.text} names one of Virtuoso's built-in or SQL functions (bif:, sql:); "
                "query() runs SPARQL's own functions only"
            )
    if prefixes is not None and iri is None:
        _resolve(t, prefixes)  # raises: an undeclared prefix
    if following is not None and following.text == "(" and not (iri is not None and _CAST.fullmatch(iri)):
        raise QueryRefusedError(
            f"query refused: {t.text}(…) calls a function by IRI; query() allows SPARQL's built-in "
            f"functions and XSD casts (<{XSD}integer>(…) and the like) only"
        )


def _check_code(text: str, prefixes: dict[str, str]) -> None:
    """Check ``text`` (an IRI's inside) as if it were query code: no server names, no calls."""
    inner = tokens(text, lenient=True)
    for i, t in enumerate(inner):
        if t.kind == "pname":
            following = inner[i + 1] if i + 1 < len(inner) else None
            _check_term(t, prefixes if _declared(t, prefixes) else None, following)


def _check_escapes(text: str, found: list[Token]) -> None:
    """Every \\u escape (wherever it is, even after a backslash) lies in a string or an IRI and
    stands for a character that could not end one."""
    spans = [t for t in found if t.kind in ("string", "iri")]
    starts = [t.start for t in spans]
    for match in _ANY_UCHAR.finditer(text):
        k = bisect.bisect_right(starts, match.start()) - 1
        if k < 0 or match.start() >= spans[k].start + len(spans[k].text):
            raise InvalidInputError(
                f"invalid SPARQL query: {match.group()} outside a string or IRI at {_where(text, match.start())}"
            )
        if _expand_uchars(match.group()) in _STRUCTURAL:
            raise QueryRefusedError(
                f"query refused: the escape {match.group()} at {_where(text, match.start())} stands for a quote, "
                "angle bracket, backslash or line break; write that character with its own escape (\\\", \\n …)"
            )


def _prefixes(text: str, found: list[Token]) -> dict[str, str]:
    """The PREFIX declarations of the text; one prefix declared twice differently is refused."""
    declared: dict[str, str] = {}
    for i, t in enumerate(found):
        if t.kind != "word" or t.text.upper() != "PREFIX":
            continue
        name, iri = found[i + 1] if i + 1 < len(found) else None, found[i + 2] if i + 2 < len(found) else None
        if name is None or iri is None or name.kind != "pname" or not name.text.endswith(":") or iri.kind != "iri":
            raise InvalidInputError(f"invalid SPARQL query: PREFIX must be followed by name: <IRI> at {_where(text, t.start)}")
        prefix, value = name.text[:-1], _expand_uchars(iri.text[1:-1])
        if declared.setdefault(prefix, value) != value:
            raise QueryRefusedError(f"query refused: the prefix {prefix}: is declared twice, with different IRIs")
    return declared


def _declared(t: Token, prefixes: dict[str, str]) -> bool:
    return t.kind == "iri" or t.text.split(":", 1)[0] in prefixes


def _resolve(t: Token, prefixes: dict[str, str]) -> str:
    """The full IRI that the IRI or prefixed name ``t`` names."""
    if t.kind == "iri":
        return _expand_uchars(t.text[1:-1])
    prefix, local = t.text.split(":", 1)
    if prefix not in prefixes:
        raise InvalidInputError(
            f"invalid SPARQL query: the prefix {prefix}: of {t.text} is not declared; add PREFIX {prefix}: <…> "
            "(query() does not use the server's predefined prefixes)"
        )
    return prefixes[prefix] + _LOCAL_ESCAPE.sub(r"\1", local)


def _expand_uchars(text: str) -> str:
    return _ANY_UCHAR.sub(lambda m: _chr(m.group(1) or m.group(2)), text)


def _chr(hex_digits: str) -> str:
    code = int(hex_digits, 16)
    return chr(code) if code < 0x110000 and not 0xD800 <= code < 0xE000 else "\ufffd"


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column} ({text[pos:pos + 20]!r})"
