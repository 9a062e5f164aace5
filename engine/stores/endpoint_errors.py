"""How a SPARQL endpoint's failures are told apart: transient ones (retried), the server's own
message, and queries it refused."""
from __future__ import annotations

import ast
import http.client
import re
import urllib.error

from SPARQLWrapper.SPARQLExceptions import EndPointInternalError, SPARQLWrapperException

# "Virtuoso 37000 Error SP030: ..." — a query or SQL error the server reports, not a failure
# to retry; class 40 (transaction rollback, deadlock) is the exception.
_VIRTUOSO_ERROR = re.compile(r"Virtuoso (\w{5}) Error")


class QueryRejected(Exception):
    """The endpoint refused a query as malformed or failing (not a transient error)."""


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
    if isinstance(error, EndPointInternalError):
        found = _VIRTUOSO_ERROR.search(server_message(error))
        return found is None or found.group(1).startswith("40")
    if isinstance(error, urllib.error.HTTPError):
        return error.code >= 500 or error.code == 429
    if isinstance(error, SPARQLWrapperException):
        return False
    return isinstance(error, (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError))
