"""The pieces of Cypher text every builder shares: relation names as backticked relationship
types (the only way a name enters the text), literal node keys, WHERE clauses."""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

from engine.graph import Literal
from engine.identifiers import validate_relation


def quote_relation(name: str) -> str:
    """A relation name as a backticked relationship type, after
    :func:`engine.identifiers.validate_relation` (the only way one enters the text)."""
    return "`" + validate_relation(name).replace("`", "``") + "`"


def where_clause(conditions: Sequence[str]) -> str:
    """A WHERE clause on a line of its own, or nothing."""
    return "\nWHERE " + " AND ".join(conditions) if conditions else ""


def literal_key(literal: Literal) -> str:
    """The MERGE key of a literal node: a digest of its N-Triples form."""
    escaped = literal.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    text = f'"{escaped}"'
    if literal.lang:
        text += f"@{literal.lang}"
    elif literal.datatype:
        text += f"^^<{literal.datatype}>"
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()
