"""Reading JSON: :func:`parse_json` for text from outside the engine, and JSON Lines files
(predictions, training samples): one JSON value a line, blank lines skipped, and every error
naming the file and the line."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError, ParseError
from engine.identifiers import validate_path


def parse_json(text: str | bytes, **options: Any) -> Any:
    """``json.loads(text)``, with JSON nested deeper than Python's parser can follow refused as
    malformed: a :class:`ValueError` either way, never a :class:`RecursionError`. For text from
    outside the engine (a user's file, a server's reply, a model's output), which may nest
    without end."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


def json_lines(path: str | Path, what: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of the JSONL file at ``path``, read as
    UTF-8 and split at newlines only (a U+2028 inside a string is part of its line). ``what``
    names the file in errors ("predictions file")."""
    path = validate_path(path, what)
    try:
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield n, parse_json(line)
                except ValueError as e:
                    raise ParseError(f"not JSON ({getattr(e, 'msg', e)})", source=str(path), line=n) from e
    except OSError as e:
        raise InvalidInputError(f"cannot read {what} {str(path)!r}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ParseError(f"not UTF-8 text ({e.reason}): give a JSONL {what}", source=str(path)) from e
