"""One exception hierarchy for the whole engine.

Every error names the input at fault and says what to do; callers catch ``KGQAError``.
Wrapped exceptions are always re-raised ``from`` the original.
"""
from __future__ import annotations


class KGQAError(Exception):
    """Root of every error the engine raises on purpose."""


class InvalidInputError(KGQAError, ValueError):
    """An argument of an operation that is out of range or of the wrong shape."""


class InvalidIdentifierError(InvalidInputError):
    """A relation name or node id that may not enter a query."""


class QueryMemoryError(InvalidInputError):
    """A query needed more memory than the store lets one query take: the message says how much,
    and to narrow the query."""


class ParseError(KGQAError, ValueError):
    """A malformed line of an input file (carries the file and line number)."""

    def __init__(self, message: str, *, source: str = "", line: int = 0) -> None:
        where = (f"{source}:{line}: " if line else f"{source}: ") if source else (f"line {line}: " if line else "")
        super().__init__(where + message)
        self.source = source
        self.line = line
        self.reason = message


class StoreError(KGQAError):
    """The store failed to run an operation."""


class QueryTimeoutError(StoreError):
    """A query ran past the timeout it was given (``Store.execute(…, timeout=)``); the message
    names the expression and says whether the store stopped it or left it running."""


class DeadlineExceededError(KGQAError):
    """Work ran past the deadline it was given: a method answering questions stops at its next
    check past it (:mod:`engine.deadlines`)."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached (server down, wrong URI, wrong credentials)."""


class QueryRefusedError(KGQAError, PermissionError):
    """``query`` was handed something it does not run: a write, a server's built-in function,
    federation, another graph, or a server's own extension of the query language."""


class ReadOnlyViolationError(QueryRefusedError):
    """``query`` was handed something that would write to the store."""


class UnsupportedOperationError(KGQAError, NotImplementedError):
    """The store cannot carry out this operation."""


class KGQAWarning(UserWarning):
    """Something the user should know that does not stop the work (a file that held nothing,
    a cache that cannot be written); ``kgqa`` prints it as ``kgqa: warning: …``."""


def clipped(text: str, width: int) -> str:
    """``text`` for an error message, cut to about ``width`` characters (a term may be
    megabytes long, a query may name thousands of ids)."""
    return text if len(text) <= width else text[: width - 20] + f"… ({len(text):,} characters)"
