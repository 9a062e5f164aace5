"""How a SPARQL endpoint's failures are told apart: transient ones (retried, :func:`retried`),
the server's own message, queries it refused, and queries it did not answer in time
(:class:`NoAnswer`, never retried)."""
from __future__ import annotations

import ast
import http.client
import re
import time
import urllib.error
from collections.abc import Callable
from typing import TypeVar

from SPARQLWrapper.SPARQLExceptions import EndPointInternalError, SPARQLWrapperException

# "Virtuoso 37000 Error SP030: ..." — a query or SQL error the server reports, not a failure
# to retry; class 40 (transaction rollback, deadlock) is the exception.
_VIRTUOSO_ERROR = re.compile(r"Virtuoso (\w{5}) Error")


T = TypeVar("T")


class QueryRejected(Exception):
    """The endpoint refused a query as malformed or failing (not a transient error)."""


class NoAnswer(TimeoutError):
    """A request was sent and its answer did not come within the time it was given. The query
    may still be running on the server, so it is not sent again: a copy per retry is what
    overloads a server that is slow to answer."""


def server_message(error: SPARQLWrapperException) -> str:
    """The server's own words from a SPARQLWrapper exception (its message embeds the body's repr)."""
    text = str(error)
    _, _, body = text.partition("Response:\n")
    try:
        message = ast.literal_eval(body).decode("utf-8", "replace") if body else text
    except (ValueError, SyntaxError, AttributeError):
        message = body or text
    # Virtuoso echoes the whole query after its message.
    return message.split("\n\nSPARQL query:", 1)[0].strip()[:2000]


def transient(error: BaseException) -> bool:
    if isinstance(error, NoAnswer):
        return False
    if isinstance(error, EndPointInternalError):
        found = _VIRTUOSO_ERROR.search(server_message(error))
        return found is None or found.group(1).startswith("40")
    if isinstance(error, urllib.error.HTTPError):
        return error.code >= 500 or error.code == 429
    if isinstance(error, SPARQLWrapperException):
        return False
    return isinstance(error, (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError))


def retried(attempt: Callable[[], T], retries: int, backoff: float, deadline: float | None = None) -> T:
    """``attempt()``, tried again on a :func:`transient` failure up to ``retries`` times after
    exponential waits (``backoff``, doubled each time, at most 30 s); the last failure is
    raised, also when the next try would start past ``deadline`` (a ``time.monotonic()``
    time; None: none). A plain loop: a retry library's machinery cost a measurable share of a
    small call."""
    tried = 0
    while True:
        try:
            return attempt()
        except Exception as e:
            if tried >= retries or not transient(e):
                raise
            wait = min(30.0, backoff * 2**tried)
            if deadline is not None and time.monotonic() + wait >= deadline:
                raise
        time.sleep(wait)
        tried += 1
