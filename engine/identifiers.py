"""Validation of the identifiers that enter queries.

Relation names become backticked relationship types in Cypher and IRIs in SPARQL, so they
must pass a strict pattern. Node ids are never pasted into query text (they travel as
parameters or percent-encoded IRIs), so they only need to be non-empty strings without
control characters.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from engine.errors import InvalidIdentifierError, InvalidInputError

# Freebase (`people.person.place_of_birth`), FB15k-237 (`/film/film/genre`, compound
# `/a/b/c./d/e/f`), MetaQA / PathQuestion (`starred_actors`). Letters, digits, `_`, `.`,
# `/`, `-`; starts with a letter, digit, `_` or `/`; at most 256 characters.
RELATION_PATTERN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./\-]{0,255}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

DIRECTIONS = ("out", "in", "both")
SEARCH_MODES = ("exact", "prefix", "contains")


def validate_relation(name: object) -> str:
    """Return ``name`` if it is a well-formed relation name, else raise."""
    if not isinstance(name, str) or not RELATION_PATTERN.fullmatch(name):
        raise InvalidIdentifierError(
            f"invalid relation name {name!r}: relation names may contain only letters, digits, "
            "'_', '.', '/' and '-' (at most 256 characters), e.g. 'people.person.place_of_birth' "
            "or 'directed_by'"
        )
    return name


def validate_relations(names: Iterable[object]) -> list[str]:
    return [validate_relation(n) for n in names]


def validate_id(node_id: object) -> str:
    """Return ``node_id`` if it can name a node, else raise."""
    if not isinstance(node_id, str) or not node_id or _CONTROL.search(node_id):
        raise InvalidIdentifierError(
            f"invalid node id {node_id!r}: ids are non-empty strings without control characters "
            "(tabs, newlines)"
        )
    return node_id


def validate_ids(ids: Iterable[object] | str) -> list[str]:
    """Validate a collection of ids; deduplicate, keeping first-seen order."""
    if isinstance(ids, str):
        raise InvalidInputError(f"expected a list of ids, got the string {ids!r}; wrap it: [{ids!r}]")
    seen: dict[str, None] = {}
    for node_id in ids:
        seen[validate_id(node_id)] = None
    return list(seen)


def validate_direction(direction: object) -> str:
    if direction not in DIRECTIONS:
        raise InvalidInputError(f"invalid direction {direction!r}: use one of {', '.join(DIRECTIONS)}")
    return direction  # type: ignore[return-value]


def validate_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError(f"invalid limit {limit!r}: use a positive integer or None")
    return limit


def validate_hops(hops: object, name: str = "hops", maximum: int = 8) -> int:
    if isinstance(hops, bool) or not isinstance(hops, int) or not 1 <= hops <= maximum:
        raise InvalidInputError(f"invalid {name} {hops!r}: use an integer from 1 to {maximum}")
    return hops
