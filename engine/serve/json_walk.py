"""Walking a request body's JSON: every value in it, with where it is and how deep, for the
checks that look at each one (its texts, its lists' sizes, its nesting)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from engine.errors import clipped

#: the longest name of a place in a body a message shows (a key may be megabytes long)
MAX_WHERE = 200


def member(where: str, key: Any) -> str:
    """The name of ``key``'s value in the object at ``where``: ``questions[0].id``."""
    return clipped(f"{where}.{key}" if where else str(key), MAX_WHERE)


def walk(value: Any, where: str = "") -> Iterator[tuple[str, int, Any]]:
    """``value`` and every value inside it, each as (where it is, how many lists and objects hold
    it, the value), parents before their children; walked without recursion, so that any nesting
    is walked (a tuple counts as a list)."""
    stack = [(where, 0, value)]
    while stack:
        at, depth, item = stack.pop()
        yield at, depth, item
        if isinstance(item, dict):
            stack.extend((member(at, key), depth + 1, inner) for key, inner in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((clipped(f"{at}[{position}]", MAX_WHERE), depth + 1, inner) for position, inner in enumerate(item))
