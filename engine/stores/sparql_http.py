"""POSTing SPARQL queries over HTTP connections that stay open between requests.

SPARQLWrapper opens a new connection for every query (``urllib``), which on a small query costs
about as much as the query itself (measured against Virtuoso on loopback: +40-60 % per call on
MetaQA's single-question calls). :class:`KeptConnections` keeps one connection per thread and
reuses it; a connection the server closed while idle is reopened once, at once, and one the
server closes after its answer (Virtuoso after a streamed Turtle answer) is opened anew.

Plain HTTP connections read with immediate TCP acknowledgements (:mod:`engine.stores.quick_ack`):
Virtuoso writes its answers in pieces with Nagle's algorithm on, and some answer sizes waited
≈ 40 ms for the client's delayed acknowledgement. A ``VALUES`` block of 300 / 400 / 512 ids
read back took 48 ms each, once compiled, against 4.1 / 5.5 / 7.1 ms with quick acknowledgements
(600 and 1,000 ids did not wait: 7.8 and 13 ms). A 287-id ``names`` call of RoG took 68 → 17 ms.

Failures look as they did through SPARQLWrapper, so that :mod:`engine.stores.endpoint_errors`
tells them apart the same way: the HTTP statuses SPARQLWrapper names raise its exceptions with the
response body (400 :class:`QueryBadFormed`, 401 :class:`Unauthorized`, 404
:class:`EndPointNotFound`, 414 :class:`URITooLong`, 500 :class:`EndPointInternalError`), any other
status outside 2xx raises :class:`urllib.error.HTTPError`, and network failures their ``OSError``.
"""
from __future__ import annotations

import http.client
import io
import threading
import urllib.error
import urllib.parse
from email.message import Message

from SPARQLWrapper.SPARQLExceptions import (
    EndPointInternalError,
    EndPointNotFound,
    QueryBadFormed,
    Unauthorized,
    URITooLong,
)

from engine.stores import quick_ack

_RAISED = {400: QueryBadFormed, 401: Unauthorized, 404: EndPointNotFound, 414: URITooLong, 500: EndPointInternalError}
#: errors of a request on a reused connection that mean the server closed it while it was idle
_STALE = (http.client.RemoteDisconnected, http.client.CannotSendRequest, BrokenPipeError, ConnectionResetError)


class QuickAckHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection whose reads ask for immediate TCP acknowledgements (module doc)."""

    def connect(self) -> None:
        super().connect()
        self.sock = quick_ack.adopt(self.sock)


class KeptConnections:
    """One open HTTP(S) connection per thread to ``url``."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.url = url
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname or "localhost", parts.port
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._local = threading.local()

    def post(self, form: list[tuple[str, str]], accept: str, timeout: float) -> tuple[Message, bytes]:
        """POST ``form`` (urlencoded); the response's headers and body."""
        body = urllib.parse.urlencode(form).encode("utf-8")
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": accept,
            "User-Agent": "kgqa-engine",
        }
        connection = getattr(self._local, "connection", None)
        reused = connection is not None
        if connection is None:
            connection = self._open(timeout)
        try:
            try:
                response = self._send(connection, body, headers, timeout)
            except _STALE:
                if not reused:
                    raise
                connection.close()
                connection = self._open(timeout)
                response = self._send(connection, body, headers, timeout)
            data = response.read()
        except BaseException:
            connection.close()  # in an unknown state: the next request opens a new one
            self._local.connection = None
            raise
        if response.will_close:
            connection.close()
            self._local.connection = None
        if not 200 <= response.status < 300:
            raised = _RAISED.get(response.status)
            if raised is not None:
                raise raised(data)
            raise urllib.error.HTTPError(self.url, response.status, response.reason, response.headers, io.BytesIO(data))
        return response.headers, data

    def _open(self, timeout: float) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self.https else QuickAckHTTPConnection
        connection = kind(self.host, self.port, timeout=timeout)
        self._local.connection = connection
        return connection

    def _send(
        self, connection: http.client.HTTPConnection, body: bytes, headers: dict[str, str], timeout: float
    ) -> http.client.HTTPResponse:
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        connection.request("POST", self.target, body, headers)
        return connection.getresponse()

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None
