"""The HTTP status of every error a request can meet, and the server's own errors.

Bad input is a 4xx naming the input (the engine's own message); a store that cannot be reached
or fails is 503, a deadline 504. Nothing else reaches a client but a short 500 without a
traceback (:mod:`engine.serve.app`)."""
from __future__ import annotations

from engine.errors import (
    DeadlineExceededError,
    InvalidInputError,
    KGQAError,
    ParseError,
    QueryRefusedError,
    QueryTimeoutError,
    StoreError,
    UnsupportedOperationError,
)


class ServeError(KGQAError):
    """An error of the server itself, with the HTTP status it answers."""

    status = 400
    headers: dict[str, str] = {}


class UnknownOperationError(ServeError, InvalidInputError):
    status = 404


class RequestBodyError(ServeError, InvalidInputError):
    """A body that is not the JSON an endpoint takes (the message names the fields at fault)."""

    status = 422


class RequestParameterError(ServeError, InvalidInputError):
    """A query-string, path or header parameter that is not what an endpoint takes (the message
    names it: ``query.limit: …``)."""

    status = 422


class UnauthorizedError(ServeError):
    status = 401
    headers = {"WWW-Authenticate": "Bearer"}


class BodyTooLargeError(ServeError):
    status = 413
    headers = {"Connection": "close"}


class RequestTimeoutError(ServeError):
    status = 408


class BusyError(ServeError):
    status = 429
    headers = {"Retry-After": "1"}


class DeadlineError(ServeError, QueryTimeoutError):
    status = 504


def error_status(error: BaseException) -> int:
    """The HTTP status a request that raised ``error`` answers with (500 for a bug)."""
    if isinstance(error, ServeError):
        return error.status
    if isinstance(error, QueryRefusedError):
        return 403  # a write, a server built-in, federation: refused, never run
    if isinstance(error, (QueryTimeoutError, DeadlineExceededError)):
        return 504
    if isinstance(error, StoreError):
        return 503  # unreachable, or failing: the request itself may be fine
    if isinstance(error, (InvalidInputError, ParseError, UnsupportedOperationError, KGQAError)):
        return 400
    return 500


def error_body(error: BaseException) -> dict[str, str]:
    """What a client is told: the error's kind and the engine's message (a bug's message is not
    sent; the server's log has it)."""
    if error_status(error) == 500:
        return {"error": "InternalError", "detail": "the server failed on this request; its log says why"}
    return {"error": type(error).__name__, "detail": str(error)}
