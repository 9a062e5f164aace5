"""FalkorDB's parameter transport: parameters bound in its own ``CYPHER name=value`` header.

FalkorDB's Bolt endpoint pastes Bolt parameters into such a header without escaping quotes
and through a fixed 4 KB buffer, so the Bolt store binds them itself, escaped, here.
"""
from __future__ import annotations

import math
import re
from typing import Any

from engine.errors import InvalidInputError

_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def cypher_literal(value: Any) -> str:
    """``value`` as a Cypher literal, escaped so that the text reads back as exactly it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"cannot pass the non-finite number {value!r} to the store")
        return repr(value)
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError(f"FalkorDB cannot store NUL characters: {value!r}")
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cypher_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = (f"`{str(k).replace('`', '``')}`: {cypher_literal(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise InvalidInputError(f"cannot pass a {type(value).__name__} parameter to the store: {value!r}")


def inline_parameters(text: str, params: dict[str, Any]) -> str:
    """The query with its parameters bound through FalkorDB's own ``CYPHER name=value`` header.

    FalkorDB's Bolt endpoint pastes Bolt parameters into such a header without escaping
    quotes and through a fixed 4 KB buffer, so the store binds them itself, escaped.
    """
    if not params:
        return text
    for name in params:
        if not isinstance(name, str) or not _PARAM_NAME.fullmatch(name):
            raise InvalidInputError(f"invalid query parameter name {name!r}: use letters, digits and '_'")
    header = " ".join(f"{name}={cypher_literal(value)}" for name, value in params.items())
    return f"CYPHER {header} {text}"
