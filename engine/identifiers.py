"""Validation of what enters the engine: identifiers, IRIs, directions, limits, counts, seconds.

Relation names become backticked relationship types in Cypher and IRIs in SPARQL, so they
must pass a strict pattern. Node ids are never pasted into query text (they travel as
parameters), so they only need to be non-empty strings without control characters. IRIs
(namespaces, graphs, datatypes) pass one pattern, :data:`IRI_PATTERN`.

Limits: every operation returns at most :data:`DEFAULT_LIMIT` rows unless its caller gives
another bound (a positive integer) or lifts it with ``limit=UNBOUNDED``; a cut answer says
``truncated``.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable

from engine.errors import InvalidIdentifierError, InvalidInputError

# Freebase (`people.person.place_of_birth`), FB15k-237 (`/film/film/genre`, compound
# `/a/b/c./d/e/f`), MetaQA / PathQuestion (`starred_actors`). Letters, digits, `_`, `.`,
# `/`, `-`; starts with a letter, digit, `_` or `/`; at most 256 characters.
RELATION_PATTERN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./\-]{0,255}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: an absolute IRI: a scheme, then at least one character that is not a blank, a control
#: character, a double quote, an angle bracket or one of {}|^`\ (safe inside ``<…>``)
IRI_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s\x00-\x20<>\"{}|^`\\]+")

#: the rows an operation returns when its caller names no limit
DEFAULT_LIMIT = 100_000
#: ``limit=UNBOUNDED`` lifts the default bound: every row of the answer
UNBOUNDED = "unbounded"

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
    """The bound an operation's answer is cut to: ``limit`` itself, :data:`DEFAULT_LIMIT` for
    None, or None (no bound) for :data:`UNBOUNDED`."""
    if limit is None:
        return DEFAULT_LIMIT
    if limit == UNBOUNDED:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidInputError(
            f"invalid limit {limit!r}: use a positive integer, None for the default bound of "
            f"{DEFAULT_LIMIT:,} rows, or {UNBOUNDED!r} for every row"
        )
    return limit


def positive_int(value: object, name: str) -> int:
    """``value`` if it is an integer ≥ 1 (not a bool), else an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"invalid {name} {value!r}: use a positive integer")
    return value


def positive_seconds(value: object, name: str = "timeout") -> float:
    """``value`` as seconds if it is a finite number > 0 (not a bool), else an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInputError(f"invalid {name} {value!r}: use a positive number of seconds")
    return float(value)


def validate_timeout(timeout: object) -> float | None:
    """``timeout`` as seconds (a positive finite number), or None for no timeout."""
    return None if timeout is None else positive_seconds(timeout, "timeout")


def validate_iri(iri: object, what: str, example: str = "http://example.org/x") -> str:
    """``iri`` if it is an absolute IRI safe to write between angle brackets, else an error
    naming ``what`` it was meant to be."""
    if not isinstance(iri, str) or not IRI_PATTERN.fullmatch(iri):
        raise InvalidIdentifierError(f"invalid {what} {iri!r}: give an absolute IRI such as {example}")
    return iri


def validate_hops(hops: object, name: str = "hops", maximum: int = 8) -> int:
    if isinstance(hops, bool) or not isinstance(hops, int) or not 1 <= hops <= maximum:
        raise InvalidInputError(f"invalid {name} {hops!r}: use an integer from 1 to {maximum}")
    return hops
