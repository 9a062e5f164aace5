"""POSTing SPARQL queries over HTTP connections that stay open between requests.

SPARQLWrapper opens a new connection for every query (``urllib``), which on a small query costs
about as much as the query itself. :class:`KeptConnections` keeps one connection per thread and
reuses it; a connection the server closed while idle is reopened once, at once, and one the
server closes after its answer (Virtuoso after a streamed Turtle answer) is opened anew.

Plain HTTP connections read with immediate TCP acknowledgements (:mod:`engine.stores.quick_ack`):
Virtuoso writes its answers in pieces with Nagle's algorithm on, and some answer sizes waited
for the client's delayed acknowledgement (docs/design/quick-acks.md).

Failures look as they did through SPARQLWrapper, so that :mod:`engine.stores.endpoint_errors`
tells them apart the same way: the HTTP statuses SPARQLWrapper names raise its exceptions with the
response body (400 :class:`QueryBadFormed`, 401 :class:`Unauthorized`, 404
:class:`EndPointNotFound`, 414 :class:`URITooLong`, 500 :class:`EndPointInternalError`), any other
status outside 2xx raises :class:`urllib.error.HTTPError`, and network failures their ``OSError``,
except that running out of time once the request is sent raises
:class:`engine.stores.endpoint_errors.NoAnswer` (the server may be working on it).
"""
from __future__ import annotations

import http.client
import io
import socket
import threading
import time
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
from engine.stores.endpoint_errors import NoAnswer

_RAISED = {400: QueryBadFormed, 401: Unauthorized, 404: EndPointNotFound, 414: URITooLong, 500: EndPointInternalError}
#: errors of a request on a reused connection that mean the server closed it while it was idle
_STALE = (http.client.RemoteDisconnected, http.client.CannotSendRequest, BrokenPipeError, ConnectionResetError)
_CHUNK = 1 << 20  # bytes read at a time, the time left checked between reads


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
        """POST ``form`` (urlencoded); the response's headers and body, within ``timeout``
        seconds from now for connecting, sending and reading it all. Past them it raises
        :class:`NoAnswer` once the request has been sent (``TimeoutError`` while connecting)."""
        deadline = time.monotonic() + timeout
        body = urllib.parse.urlencode(form).encode("utf-8")
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": accept,
            "User-Agent": "kgqa-engine",
        }
        connection = getattr(self._local, "connection", None)
        reused = connection is not None
        if connection is None:
            connection = self._open(deadline)
        try:
            try:
                response, sock = self._send(connection, body, headers, deadline)
            except _STALE:
                if not reused:
                    raise
                connection.close()
                connection = self._open(deadline)
                response, sock = self._send(connection, body, headers, deadline)
            data = self._read(response, sock, deadline)
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

    def _open(self, deadline: float) -> http.client.HTTPConnection:
        """A new connection, connected (a failure here means nothing was sent)."""
        kind = http.client.HTTPSConnection if self.https else QuickAckHTTPConnection
        connection = kind(self.host, self.port, timeout=_left(deadline))
        connection.connect()
        self._local.connection = connection
        return connection

    def _send(
        self, connection: http.client.HTTPConnection, body: bytes, headers: dict[str, str], deadline: float
    ) -> tuple[http.client.HTTPResponse, socket.socket]:
        """Send the request; its response (headers read) and the socket it is read from (the
        connection lets go of it when the response says the server closes it)."""
        sock = connection.sock
        try:
            _set_timeout(sock, deadline)
            connection.request("POST", self.target, body, headers)
            return connection.getresponse(), sock
        except TimeoutError as e:
            raise NoAnswer(f"no answer from {self.url} in the time given") from e

    @staticmethod
    def _read(response: http.client.HTTPResponse, sock: socket.socket, deadline: float) -> bytes:
        """The response's body, read in pieces so that the deadline holds for all of it (a
        socket's timeout holds for each read alone)."""
        parts = []
        try:
            while True:
                _set_timeout(sock, deadline)
                part = response.read1(_CHUNK)
                if not part:
                    response.close()  # read1 leaves a response of known length open at its end
                    return b"".join(parts)
                parts.append(part)
        except TimeoutError as e:
            raise NoAnswer(f"the answer from {self.url} did not arrive in the time given") from e

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


def _left(deadline: float) -> float:
    """Seconds until ``deadline`` (a ``time.monotonic()`` time), at least a millisecond: a
    socket timeout of 0 would make it non-blocking instead of timing out at once."""
    return max(0.001, deadline - time.monotonic())


def _set_timeout(sock: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline has passed")
    sock.settimeout(left)
