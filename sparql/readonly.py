"""Guards for raw SPARQL text: refuse writes, and bind ``$name`` parameters as escaped terms."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from engine.errors import InvalidInputError, ReadOnlyViolationError

# Strings (long and short forms), IRIs and comments are removed before keywords are looked for,
# so a literal such as "DROP ALL" is harmless while a real DROP is caught.
_STRIPPED = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*"""'
    r"|'''(?:[^'\\]|\\.|'(?!''))*'''"
    r'|"(?:[^"\\\n]|\\.)*"'
    r"|'(?:[^'\\\n]|\\.)*'"
    r"|<[^<>\"{}|^`\\\s]*>"
    r"|#[^\n]*",
    re.S,
)
_UPDATE = re.compile(r"\b(INSERT|DELETE|LOAD|CLEAR|CREATE|DROP|COPY|MOVE|ADD)\b", re.I)
# Virtuoso runs SQL functions named bif:… / sql:… from SPARQL; only full-text search is allowed.
_SQL_CALL = re.compile(r"\b(?:sql|bif):(?!contains\b)[A-Za-z_]", re.I)


def ensure_read_only(text: str) -> None:
    bare = _STRIPPED.sub(" ", text)
    found = _UPDATE.search(bare)
    if found:
        raise ReadOnlyViolationError(
            f"query refused: {found.group(1).upper()} would write to the store; query() runs read-only "
            "SPARQL (SELECT, ASK, CONSTRUCT, DESCRIBE) only — load data with `kgqa load`"
        )
    found = _SQL_CALL.search(bare)
    if found:
        raise ReadOnlyViolationError(
            f"query refused: {found.group(0)!r} calls a SQL function; query() allows SPARQL functions only"
        )


_PARAMETER = re.compile(_STRIPPED.pattern + r"|\$([A-Za-z_][A-Za-z0-9_]*)", re.S)


def bind_parameters(text: str, params: dict[str, Any], render: Callable[[str, Any], str]) -> str:
    """Replace each ``$name`` outside strings, IRIs and comments by ``render(name, value)``.

    ``render`` must return an escaped RDF term, so no value can change the query's shape.
    """
    unknown = set(params)

    def substitute(match: re.Match) -> str:
        name = match.group(1)
        if name is None or name not in params:
            return match.group(0)
        unknown.discard(name)
        return render(name, params[name])

    bound = _PARAMETER.sub(substitute, text)
    if unknown:
        raise InvalidInputError(
            f"query parameters {sorted(unknown)} do not appear in the query as $name placeholders"
        )
    return bound
