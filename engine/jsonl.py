"""Reading JSON Lines files (predictions, training samples): one JSON value a line, blank
lines skipped, and every error naming the file and the line."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.errors import InvalidInputError, ParseError


def json_lines(path: str | Path, what: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of the JSONL file at ``path``, read as
    UTF-8 and split at newlines only (a U+2028 inside a string is part of its line). ``what``
    names the file in errors ("predictions file")."""
    try:
        with Path(path).open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield n, json.loads(line)
                except json.JSONDecodeError as e:
                    raise ParseError(f"not JSON ({e.msg})", source=str(path), line=n) from e
    except OSError as e:
        raise InvalidInputError(f"cannot read {what} {str(path)!r}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ParseError(f"not UTF-8 text ({e.reason}): give a JSONL {what}", source=str(path)) from e
