"""The guard of raw Cypher (``Store.query``): refuse anything that writes, and a ``$parameter``
the call does not give (FalkorDB would read it as null, a wildcard in some patterns)."""
from __future__ import annotations

import re
from typing import Any

from engine.errors import InvalidInputError, ReadOnlyViolationError

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
