"""The guard of raw Cypher (``Store.query``): refuse anything that writes."""
from __future__ import annotations

import re

from engine.errors import ReadOnlyViolationError

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


