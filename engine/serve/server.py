"""Serving an app with uvicorn: in the foreground (``kgqa serve``) or on a thread of its own
(tests, benchmarks).

Within :class:`engine.serve.settings.ServeSettings`' bounds on connections: a request's headers
and body must arrive within ``read_timeout`` seconds of its first byte (of the connection's
opening, for its first request), else it is answered 408 and the connection closed; at most
``max_connections`` are open at once, and one more is answered 503 and closed at once. So no
client holds a connection, or a buffered body, by sending slowly or not at all.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine.errors import KGQAError
from engine.serve.errors import RequestTimeoutError, ServeError, error_body
from engine.serve.settings import ServeSettings
from engine.servers.base import LOOPBACK, free_port


_REASONS = {408: "Request Timeout", 503: "Service Unavailable"}


def _answer_and_close(transport: asyncio.BaseTransport, error: ServeError) -> None:
    """Answer ``error`` on a connection whose request uvicorn has not handed to the app, and close it."""
    body = json.dumps(error_body(error)).encode()
    head = f"HTTP/1.1 {error.status} {_REASONS[error.status]}\r\n"
    head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    transport.write(head.encode() + body)  # type: ignore[attr-defined]
    transport.close()


class _TooManyConnections(ServeError):
    status = 503


def _protocol(read_timeout: float, max_connections: int) -> type[H11Protocol]:
    """uvicorn's HTTP/1.1 protocol with a deadline for reading each request and a bound on the
    connections open at once."""

    class Bounded(H11Protocol):
        _read_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                _answer_and_close(transport, _TooManyConnections(
                    f"the server has {max_connections:,} connections open, its most: try again shortly"))
                return
            self._start_read_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
                if self._read_timer is None:  # the first byte of a new request: trickling it does not restart it
                    self._start_read_timer()
            elif self._read_timer is not None:  # the request has arrived
                self._read_timer.cancel()
                self._read_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None
            super().connection_lost(exc)

        def _start_read_timer(self) -> None:
            self._read_timer = self.loop.call_later(read_timeout, self._read_expired)

        def _read_expired(self) -> None:
            self._read_timer = None
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY) or self.transport.is_closing():
                return
            if self.cycle is not None and self.cycle.response_started:
                self.transport.close()  # answered already (413, 401): only the connection goes
                return
            _answer_and_close(self.transport, RequestTimeoutError(
                f"the request did not arrive whole within {read_timeout:g} s of its first byte: send its headers "
                "and body at once"))

    return Bounded

#: seconds a background server may take to start listening
STARTUP_TIMEOUT = 30.0


def _config(app: Any, host: str, port: int, settings: ServeSettings | None) -> uvicorn.Config:
    settings = settings or ServeSettings()
    # the app logs each request itself (engine.serve.access_log); uvicorn's own log only warns
    return uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=False, server_header=False,
        http=_protocol(settings.read_timeout, settings.max_connections), limit_concurrency=settings.max_connections,
    )


def run(app: Any, host: str, port: int, settings: ServeSettings | None = None) -> None:
    """Serve ``app`` on ``host:port`` within ``settings``' bounds on connections until Ctrl-C or SIGTERM."""
    uvicorn.Server(_config(app, host, port, settings)).run()


class Background:
    """``app`` served on a thread of its own on a free loopback port, for a ``with`` block."""

    def __init__(self, app: Any, host: str = LOOPBACK, port: int | None = None, settings: ServeSettings | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.server = uvicorn.Server(_config(app, host, self.port, settings))
        self.thread = threading.Thread(target=self.server.run, name="kgqa-serve-http", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> Background:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise KGQAError(f"the HTTP server did not start on {self.url}")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(STARTUP_TIMEOUT)
