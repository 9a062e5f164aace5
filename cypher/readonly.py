"""The guard of raw Cypher (``Store.query``): refuse what a server cannot read safely
(:func:`check_shape`), anything that writes, and a ``$parameter`` the call does not give
(FalkorDB would read it as null, a wildcard in some patterns)."""
from __future__ import annotations

import re
from typing import Any

from engine.errors import InvalidInputError, ReadOnlyViolationError, clipped

# String literals, comments and backticked names, scanned left to right so that one cannot
# hide another (a quote inside a comment, ``//`` inside a string). Backticked names become a
# placeholder word, so that ``CALL `a.b`()`` still shows a procedure call.
_OPAQUE = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/|(`(?:[^`]|``)*`)""", re.DOTALL)
_WRITE_KEYWORDS = frozenset(
    ("CREATE", "MERGE", "DELETE", "DETACH", "SET", "REMOVE", "DROP", "LOAD", "FOREACH", "INSERT", "ALTER")
    + ("RENAME", "GRANT", "DENY", "REVOKE", "START", "STOP", "TERMINATE", "ENABLE", "DEALLOCATE", "REALLOCATE")
)
# Words preceded by `.`, `$` or `:` are property, parameter, label or type names.
_WORD = re.compile(r"(?<![.$:\w])[A-Za-z_]\w*")
# A procedure name after CALL; Cypher allows blanks around the dots.
_CALL_TARGET = re.compile(r"\s*([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)")
READ_ONLY_PROCEDURES = frozenset(
    name.lower()
    for name in (
        "db.labels", "db.relationshipTypes", "db.propertyKeys", "db.indexes", "db.constraints",
        "db.schema.visualization", "db.schema.nodeTypeProperties", "db.schema.relTypeProperties",
        "db.info", "db.ping", "db.meta.stats",
        "db.index.fulltext.queryNodes", "db.index.fulltext.queryRelationships",
        "db.index.vector.queryNodes", "db.index.vector.queryRelationships",
        "db.idx.fulltext.queryNodes", "db.idx.fulltext.queryRelationships", "db.idx.vector.queryNodes",
    )
)


#: FalkorDB's parser takes time exponential in the nesting of expressions: about 0.1 s at 12
#: levels of parentheses (or 16 of NOT), 2 s at 18, and at 40 it holds the server for good.
MAX_NESTING = 10

# The text read for its shape: quoted text and comments whole, ASCII words and numbers, brackets,
# other ASCII characters one at a time. Only ASCII blanks are blanks: any other character outside
# quotes is one FalkorDB cannot read (`foreign`).
_SHAPE_TOKEN = re.compile(
    r"(?P<blank>[ \t\r\n\f\v]+|//[^\n]*|/\*.*?\*/)"
    r"""|(?P<operand>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`]|``)*`|[0-9]+(?:\.[0-9]+)?)"""
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<open>[(\[{])|(?P<close>[)\]}])"
    r"|(?P<sign>[-+])"
    r"|(?P<punct>[\x00-\x7f])"
    r"|(?P<foreign>.)",
    re.DOTALL,
)
_COLON_NEXT = re.compile(r"[ \t\r\n\f\v]*:")
# Where the operand of a prefix ends: NOT's (which may hold comparisons) at these words and
# characters; a sign's at any binary operator as well.
_ENDS_NOT = frozenset(
    ("AND", "OR", "XOR", "WHEN", "THEN", "ELSE", "WHERE", "RETURN", "WITH", "MATCH", "OPTIONAL", "UNWIND")
    + ("ORDER", "BY", "SKIP", "LIMIT", "AS", "UNION", "CALL", "YIELD", ",", "|", ";")
)
_BINARY_WORDS = frozenset(("IN", "IS", "STARTS", "ENDS", "CONTAINS"))
_BINARY_PUNCTUATION = frozenset("=<>*/%^")  # not `.` or `:`, which bind closer than a sign
# Words after which a `-` or `+` is a sign (and not a subtraction or an addition).
_NO_OPERAND = _ENDS_NOT | _BINARY_WORDS | {"NOT", "CASE", "DISTINCT", "ASC", "DESC"}


class _Frame:
    """An open bracket or CASE, and the NOT and sign prefixes in it whose operand is still open."""

    def __init__(self, case: bool = False) -> None:
        self.case = case
        self.nots = 0
        self.signs = 0


def check_shape(text: str) -> None:
    """Raise :class:`InvalidInputError` for a query FalkorDB cannot read safely: a character
    outside ASCII anywhere but in a string, a comment or a backticked name (FalkorDB's error
    message then quotes half of it, which the driver cannot decode, so it drops the connection),
    or expressions nested more than :data:`MAX_NESTING` deep, counting each bracket, CASE … END,
    and each NOT, ``-`` or ``+`` prefix while its operand lasts. What is not closed (a bracket, a
    string, a comment) counts to the end of the text."""
    frames = [_Frame()]  # the text itself, then each open bracket or CASE
    depth = 0  # open brackets and CASEs, and the prefixes in every frame
    operand_before = False  # whether the last token ends an operand (so a `-` after it subtracts)
    previous = ""
    for match in _SHAPE_TOKEN.finditer(text):
        kind, token = match.lastgroup, match.group()
        if kind == "blank":
            continue
        if kind == "foreign":
            raise InvalidInputError(
                f"invalid Cypher query {clipped(repr(text), 200)}: the character {token!r} (U+{ord(token):04X}) at "
                f"position {match.start():,} stands outside a string, a comment or a `backticked` name, where "
                "FalkorDB cannot read it: write such a name in backticks"
            )
        word = token.upper() if kind == "word" else ""
        if word and (previous in (".", ":", "$") or _COLON_NEXT.match(text, match.end())):
            word, kind = "", "operand"  # a property, label, parameter or map key named like a keyword
        frame = frames[-1]
        if kind == "open" or word == "CASE":
            frames.append(_Frame(case=word == "CASE"))
            depth += 1
        elif (kind == "close" and len(frames) > 1) or (word == "END" and frame.case):
            while True:  # a bracket closes the CASEs left open inside it too
                closed = frames.pop()
                depth -= 1 + closed.nots + closed.signs
                if word == "END" or not closed.case or len(frames) == 1:
                    break
        elif word == "NOT" or (kind == "sign" and not operand_before):
            if word == "NOT":
                frame.nots += 1
            else:
                frame.signs += 1
            depth += 1
        elif word in _ENDS_NOT or (kind == "punct" and token in _ENDS_NOT):
            if not (word == "WITH" and previous in ("STARTS", "ENDS")):
                depth -= frame.nots + frame.signs
                frame.nots = frame.signs = 0
        elif kind == "sign" or (kind == "punct" and token in _BINARY_PUNCTUATION) or word in _BINARY_WORDS:
            depth -= frame.signs
            frame.signs = 0
        if depth > MAX_NESTING:
            raise InvalidInputError(
                f"invalid Cypher query {clipped(repr(text), 200)}: expressions nest more than {MAX_NESTING} deep at "
                f"position {match.start():,} ({text[match.start():match.start() + 20]!r}); query() takes at most "
                f"{MAX_NESTING} levels (each bracket, CASE, and NOT or sign prefix counts), as FalkorDB takes "
                "time exponential in the nesting to read a query: compute parts in earlier WITH steps"
            )
        operand_before = kind in ("close", "operand") or (kind == "word" and word not in _NO_OPERAND)
        previous = word or token


def check_read_only(text: str) -> None:
    """Raise ReadOnlyViolationError unless ``text`` only reads: no writing clause, and CALL
    only of a subquery or a read-only ``db.`` procedure."""
    code = _OPAQUE.sub(lambda m: " quoted_name " if m.group(1) else " ", text)
    for match in _WORD.finditer(code):
        word = match.group().upper()
        if word in _WRITE_KEYWORDS:
            raise ReadOnlyViolationError(
                f"query refused: {match.group()!r} writes to the store; query() only reads "
                "(load data with add_triples or a loader)"
            )
        if word == "CALL":
            target = _CALL_TARGET.match(code, match.end())
            name = re.sub(r"\s+", "", target.group(1)) if target else None
            if name is not None and name.lower() not in READ_ONLY_PROCEDURES:
                raise ReadOnlyViolationError(
                    f"query refused: CALL {name} is not a known read-only procedure; "
                    "query() may CALL only read-only db.* procedures such as db.labels, or a CALL {} subquery"
                )


# `$name`, `$`any name`` or `$0`, outside strings, comments and backticked names.
_PARAMETER = re.compile(_OPAQUE.pattern + r"|\$(?:([A-Za-z_]\w*)|`((?:[^`]|``)*)`|(\d+))", re.DOTALL)


def check_parameters(text: str, params: dict[str, Any]) -> None:
    """Raise unless every ``$name`` of ``text`` is given in ``params`` and every parameter appears."""
    named = set()
    for match in _PARAMETER.finditer(text):
        plain, quoted, number = match.group(2, 3, 4)
        if plain is not None or number is not None:
            named.add(plain if plain is not None else number)
        elif quoted is not None:
            named.add(quoted.replace("``", "`"))
    missing = sorted(named - set(params))
    if missing:
        raise InvalidInputError(
            f"query parameter(s) {', '.join('$' + m for m in missing)} not given: pass a value for each "
            f"(--param {missing[0]}=ID, or params={{{missing[0]!r}: …}})"
        )
    unknown = sorted(set(params) - named)
    if unknown:
        raise InvalidInputError(f"query parameters {unknown} do not appear in the query as $name placeholders")
