"""Validation of what enters the engine: identifiers, IRIs, directions, limits, counts, seconds.

Relation names become backticked relationship types in Cypher and IRIs in SPARQL, so they
must pass a strict pattern. Node ids are never pasted into query text (they travel as
parameters), so they only need to be non-empty strings without control characters, of at most
:data:`MAX_ID_LENGTH` characters. IRIs (namespaces, graphs, datatypes) pass one pattern,
:data:`IRI_PATTERN`.

Text (ids, search text, literal values, raw queries and their parameters) must be valid
Unicode: a ``str`` holding a lone surrogate (``"\\ud800"``, what decoding bytes with
``errors="surrogateescape"`` or a JSON ``\\ud800`` escape leaves) cannot be sent to any store, so
it is refused up front, naming the argument (:func:`validate_text`), the same on every store.

Limits: every operation returns at most :data:`DEFAULT_LIMIT` rows unless its caller gives
another bound (a positive integer, at most :data:`MAX_LIMIT`) or lifts it with
``limit=UNBOUNDED``; a cut answer says ``truncated``. A timeout is a number of seconds above 0
and at most :data:`MAX_SECONDS`.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from engine.errors import InvalidIdentifierError, InvalidInputError, clipped

# Freebase (`people.person.place_of_birth`), FB15k-237 (`/film/film/genre`, compound
# `/a/b/c./d/e/f`), MetaQA / PathQuestion (`starred_actors`). Letters, digits, `_`, `.`,
# `/`, `-`; starts with a letter, digit, `_` or `/`; at most 256 characters.
RELATION_PATTERN = re.compile(r"[A-Za-z0-9_/][A-Za-z0-9_./\-]{0,255}")
#: the longest node id, in characters, that enters the engine (a query argument or a loaded
#: triple), the same on every store: far beyond real ids (Freebase MIDs have about ten
#: characters, IRIs rarely pass 2,000), and short enough that a query naming one stays well
#: within what a server accepts (Virtuoso refuses query text past 10 MB). A server store's own
#: limits (:mod:`engine.limits`) refuse shorter ids at load time.
MAX_ID_LENGTH = 16_384
# a lone surrogate: a str that holds one cannot be encoded as UTF-8
_SURROGATE = re.compile("[\ud800-\udfff]")
# what an id may not hold: control characters and lone surrogates
_NOT_IN_ID = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
#: an absolute IRI: a scheme, then at least one character that is not a blank, a control
#: character, a double quote, an angle bracket, one of {}|^`\ (safe inside ``<…>``) or a lone
#: surrogate
IRI_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s\x00-\x20<>\"{}|^`\\\ud800-\udfff]+")

#: the rows an operation returns when its caller names no limit
DEFAULT_LIMIT = 100_000
#: ``limit=UNBOUNDED`` lifts the default bound: every row of the answer
UNBOUNDED = "unbounded"
#: the largest row bound a caller may give (more: ``UNBOUNDED``); a database's LIMIT takes a
#: 64-bit integer at most, and no answer of more rows fits in memory anyway
MAX_LIMIT = 1_000_000_000
#: the longest timeout, in seconds (a day): the waits that enforce one (a thread's, a poll's, a
#: server's in milliseconds) overflow far beyond it; no timeout at all is None
MAX_SECONDS = 86_400.0
#: source × target pairs one ``shortest_paths`` call takes, as many as the rows an answer holds
#: by default: every pair is held, and sent to the database, as one row of the query
MAX_PAIRS = 100_000
#: the largest random seed: numpy's legacy generator (which transformers' set_seed seeds) takes
#: 0 … 2³² − 1
MAX_SEED = 2**32 - 1

DIRECTIONS = ("out", "in", "both")
SEARCH_MODES = ("exact", "prefix", "contains")


def validate_relation(name: object) -> str:
    """Return ``name`` if it is a well-formed relation name, else raise."""
    if not isinstance(name, str) or not RELATION_PATTERN.fullmatch(name):
        raise InvalidIdentifierError(
            f"invalid relation name {clipped(repr(name), 200)}: relation names may contain only ASCII letters, digits, "
            "'_', '.', '/' and '-' (at most 256 characters), e.g. 'people.person.place_of_birth' "
            "or 'directed_by'"
        )
    return name


def check_list(value: object, argument: str, of: str) -> None:
    """Refuse ``value`` as the list ``argument`` unless it is a collection: a bare string would be
    taken character by character, and None or a number would fail inside the engine."""
    if isinstance(value, (str, bytes)):
        shown = clipped(repr(value), 200)
        raise InvalidInputError(f"expected a list of {of} as {argument}, got the string {shown}; wrap it: [{shown}]")
    if not isinstance(value, Iterable):
        raise InvalidInputError(f"expected a list of {of} as {argument}, got {clipped(repr(value), 200)}")


def validate_relations(names: Iterable[object], argument: str = "relations") -> list[str]:
    check_list(names, argument, "relation names")
    return [validate_relation(n) for n in names]


def validate_id(node_id: object, argument: str | None = None, position: int = 0) -> str:
    """Return ``node_id`` if it can name a node, else raise; the error names where the id was
    given, ``argument[position]`` (``ids[2]``), when ``argument`` is given."""
    if isinstance(node_id, str) and node_id and len(node_id) <= MAX_ID_LENGTH and not _NOT_IN_ID.search(node_id):
        return node_id
    where = "" if argument is None else f" at {argument}[{position}]"
    raise InvalidIdentifierError(f"invalid node id {clipped(repr(node_id), 200)}{where}: {_id_problem(node_id)}")


def _id_problem(node_id: object) -> str:
    """Why ``node_id`` cannot name a node, and what to do."""
    if isinstance(node_id, str) and node_id:
        bad = _NOT_IN_ID.search(node_id)
        if bad is None:
            return f"it is {len(node_id):,} characters long; ids are at most {MAX_ID_LENGTH:,} characters"
        if _SURROGATE.match(bad.group()):
            return _surrogate_problem(node_id, bad.start())
    return "ids are non-empty strings without control characters (tabs, newlines, NUL)"


def validate_ids(ids: Iterable[object] | str, argument: str = "ids") -> list[str]:
    """Validate a collection of ids, the argument named ``argument``; deduplicate, keeping
    first-seen order."""
    check_list(ids, argument, "ids")
    seen: dict[str, None] = {}
    for position, node_id in enumerate(ids):
        seen[validate_id(node_id, argument, position)] = None
    return list(seen)


def validate_text(value: str, what: str, *, nul: bool = True, max_length: int | None = None) -> str:
    """``value`` if every store can take it as text: valid Unicode (no lone surrogate), without
    NUL (U+0000) unless ``nul``, and at most ``max_length`` characters; else an
    :class:`InvalidInputError` naming ``what`` it is (``"search text"``, ``"query parameter 'x'"``)."""
    bad = None if value.isascii() else _SURROGATE.search(value)
    if bad is not None:
        raise InvalidInputError(f"{what} {clipped(repr(value), 200)}: {_surrogate_problem(value, bad.start())}")
    if max_length is not None and len(value) > max_length:
        raise InvalidInputError(
            f"{what} {clipped(repr(value), 200)} is {len(value):,} characters long; give at most {max_length:,}"
        )
    if not nul and "\x00" in value:
        raise InvalidInputError(
            f"{what} {clipped(repr(value), 200)} holds a NUL character (U+0000) at position "
            f"{value.index(chr(0)):,}; remove it"
        )
    return value


def _surrogate_problem(value: str, position: int) -> str:
    return (
        f"it is not valid Unicode: it holds a lone surrogate (U+{ord(value[position]):04X}) at position "
        f"{position:,}, which no store can take; give valid UTF-8 text (such a surrogate comes from bytes "
        "decoded with errors='surrogateescape', or from half of a JSON \\ud83d\\ude00 pair)"
    )


def validate_flag(value: object, name: str) -> bool:
    """``value`` if it is True or False, else an error naming ``name``: a string such as
    ``"no"`` or ``"false"`` is truthy, and would switch the flag on."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"invalid {name} {clipped(repr(value), 200)}: use True or False")
    return value


def validate_path(path: object, what: str) -> Path:
    """``path`` (a ``str`` or ``os.PathLike``) as a Path, if the operating system can take it as
    a file name, else an error naming ``what`` it is (``"input file"``): a NUL character or a lone
    surrogate that no file name can hold fails deep inside ``open``."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise InvalidInputError(f"invalid {what} {clipped(repr(path), 200)}: give its path as a str or a pathlib.Path")
    if not path:  # Path("") is the current folder
        raise InvalidInputError(f"invalid {what} '': it names no file; give its path")
    if "\x00" in path:
        raise InvalidInputError(
            f"invalid {what} {clipped(repr(path), 200)}: it holds a NUL character (U+0000) at position "
            f"{path.index(chr(0)):,}, which no file name can hold; remove it"
        )
    try:
        os.fsencode(path)
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"invalid {what} {clipped(repr(path), 200)}: {_surrogate_problem(path, e.start)}") from None
    return Path(path)


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
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInputError(
            f"invalid limit {shown_value(limit)}: give a whole number of rows from 1 to {MAX_LIMIT:,}, or "
            f"{UNBOUNDED!r} for every row; leave it out for the default bound of {DEFAULT_LIMIT:,} rows"
        )
    return limit


def shown_value(value: object) -> str:
    """``value`` for a message: an integer too long to print (Python refuses past 4,300
    digits) by its size."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"(an integer of {value.bit_length():,} bits)"
    return clipped(repr(value), 200)


def positive_int(value: object, name: str) -> int:
    """``value`` if it is an integer ≥ 1 (not a bool), else an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"invalid {name} {value!r}: use a positive integer")
    return value


def positive_seconds(value: object, name: str = "timeout") -> float:
    """``value`` as seconds if it is a number above 0 and at most :data:`MAX_SECONDS` (not a
    bool, inf or NaN), else an error naming ``name``."""
    # NaN fails every comparison; an int too large for a float compares exactly
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_SECONDS:
        raise InvalidInputError(
            f"invalid {name} {shown_value(value)}: use a number of seconds above 0 and at most {MAX_SECONDS:,.0f} (a day)"
        )
    return float(value)


def validate_timeout(timeout: object) -> float | None:
    """``timeout`` as seconds (a positive finite number), or None for no timeout."""
    return None if timeout is None else positive_seconds(timeout, "timeout")


def validate_iri(iri: object, what: str, example: str = "http://example.org/x") -> str:
    """``iri`` if it is an absolute IRI safe to write between angle brackets, else an error
    naming ``what`` it was meant to be."""
    if not isinstance(iri, str) or not IRI_PATTERN.fullmatch(iri):
        raise InvalidIdentifierError(f"invalid {what} {clipped(repr(iri), 200)}: give an absolute IRI such as {example}")
    return iri


#: the most hops a walk, a path or a plan may take: each hop multiplies the work
MAX_HOPS = 8


def validate_hops(hops: object, name: str = "hops", maximum: int = MAX_HOPS) -> int:
    if isinstance(hops, bool) or not isinstance(hops, int) or not 1 <= hops <= maximum:
        raise InvalidInputError(f"invalid {name} {hops!r}: use an integer from 1 to {maximum}")
    return hops
