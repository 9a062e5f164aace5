"""What a ``kgqa serve`` server allows: its deadlines, row bounds, body size, concurrency, token
and CORS origins, and the method options its operator fixes. Requests may lower a deadline or a
row bound, never lift it past these."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from engine.errors import InvalidInputError
from engine.identifiers import DEFAULT_LIMIT, MAX_LIMIT, positive_int, positive_seconds
from engine.uris import checked_split

#: the environment variable ``kgqa serve`` reads its bearer token from when ``--token`` is not given
TOKEN_ENV = "KGQA_TOKEN"


def token_or_env(token: str | None) -> str | None:
    """The bearer token a server command was given, else ``$KGQA_TOKEN``'s, else None."""
    return token if token is not None else os.environ.get(TOKEN_ENV) or None


@dataclass(frozen=True)
class Bounds:
    """What one operation may take at most: seconds and rows."""

    timeout: float
    max_rows: int


@dataclass(frozen=True)
class ServeSettings:
    #: the longest deadline of one operation, in seconds (also its default)
    timeout: float = 30.0
    #: the most rows one operation returns (also its default, but for ``search``'s 10)
    max_rows: int = DEFAULT_LIMIT
    #: the largest request body, in bytes (larger: 413)
    max_body: int = 1 << 20
    #: requests at work at once; one more is answered 429
    max_concurrency: int = 64
    #: threads that run store operations (answers run on threads of their own, one per kept method)
    workers: int = 8
    #: the bearer token every request but ``/v1/health`` and the docs must carry (None: none)
    token: str | None = None
    #: origins a browser may call the API from (none: CORS off)
    cors: tuple[str, ...] = ()
    #: the longest deadline of one ``/v1/answer`` request, in seconds (also its default)
    answer_timeout: float = 600.0
    #: questions one ``/v1/answer`` request may ask
    max_questions: int = 64
    #: methods kept built (one per method and config), least recently used dropped first
    method_cache: int = 4
    #: per method, options only the operator sets (models, files, templates): ``{"rog": {"model": "…"}}``
    method_options: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the torch device methods' models run on (None: cuda when available)
    device: str | None = None
    #: the precision of methods' language models (None: the engine's default)
    dtype: str | None = None
    #: a question file the explorer page offers besides the datasets (None: the datasets only)
    questions: str | None = None
    #: seconds a request's headers and body have to arrive, from its first byte (or the
    #: connection's opening); later: 408, and the connection closed
    read_timeout: float = 30.0

    def __post_init__(self) -> None:
        positive_seconds(self.timeout, "timeout")
        positive_seconds(self.answer_timeout, "answer timeout")
        positive_seconds(self.read_timeout, "read timeout")
        for name in ("max_rows", "max_body", "max_concurrency", "workers", "max_questions", "method_cache"):
            positive_int(getattr(self, name), name.replace("_", " "))
        if self.max_rows > MAX_LIMIT:  # the store refuses a larger limit
            raise InvalidInputError(f"invalid max rows {self.max_rows:,}: give at most {MAX_LIMIT:,}")
        if self.token is not None and (not isinstance(self.token, str) or not self.token.strip()):
            raise InvalidInputError("the bearer token must be a non-empty string")
        for origin in self.cors:
            check_origin(origin)
        # the models load at a server's first answer: a wrong device or dtype is refused before it starts
        if self.dtype is not None:
            from engine.models.transformers_lm import check_dtype

            check_dtype(self.dtype)
        if self.device is not None:
            from engine.models.device import pick_device

            pick_device(self.device)

    @property
    def bounds(self) -> Bounds:
        return Bounds(self.timeout, self.max_rows)

    @property
    def max_connections(self) -> int:
        """Connections open at once: one more is answered 503 and closed. Room for every request
        at work, as many waiting or kept alive, and a few more."""
        return 2 * self.max_concurrency + 16


def check_origin(origin: str) -> None:
    """Refuse a CORS origin that is not ``*`` or ``scheme://host[:port]``, which is all a browser
    sends in its Origin header: anything else would match no request."""
    if origin == "*":
        return
    try:
        parts = checked_split(origin)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or origin != f"{parts.scheme}://{parts.netloc}":
        raise InvalidInputError(f"CORS origin {origin!r} is not an origin: give scheme://host[:port], "
                                "e.g. http://localhost:5173, with no path or trailing slash (or * for any)")


def bounded_timeout(asked: float | None, maximum: float, what: str = "timeout") -> float:
    """The deadline of one request: ``asked`` (seconds), or the server's ``maximum`` when none
    is asked; a larger one is refused, naming the maximum."""
    if asked is None:
        return maximum
    if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not math.isfinite(asked) or asked <= 0:
        raise InvalidInputError(f"invalid {what} {asked!r}: use a positive number of seconds")
    if asked > maximum:
        raise InvalidInputError(f"{what} {asked:g} s is above this server's maximum of {maximum:g} s: give at most {maximum:g}")
    return float(asked)


def bounded_limit(asked: int | None, maximum: int, default: int | None = None) -> int:
    """The row bound of one request: ``asked``, or ``default`` (the operation's own, at most the
    server's ``maximum``) when none is asked; a larger one is refused, naming the maximum."""
    if asked is None:
        return maximum if default is None else min(default, maximum)
    if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
        raise InvalidInputError(f"invalid limit {asked!r}: use a positive integer")
    if asked > maximum:
        raise InvalidInputError(f"limit {asked:,} is above this server's maximum of {maximum:,} rows: give at most {maximum:,}")
    return asked
