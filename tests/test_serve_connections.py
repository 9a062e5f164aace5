"""The server's bounds on connections (engine.serve.server), on kgqa serve and kgqa mcp's HTTP:
a request whose headers or body do not arrive within the read timeout is answered 408 and its
connection closed; connections past the most are answered 503 and closed; and with a token set, a
request without it is refused from its headers, before its body is read. Each time the server
answers the next client at once."""
from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from engine.serve.app import create_app
from engine.serve.client import ServeClient
from engine.serve.mcp import create_server, http_app
from engine.serve.server import Background
from engine.serve.settings import ServeSettings
from tests.test_serve import oxigraph  # noqa: F401 (the fixture)


@contextmanager
def serving(app_of, settings: ServeSettings) -> Iterator[Background]:
    with Background(app_of(settings), settings=settings) as server:
        yield server


def _connect(server: Background) -> socket.socket:
    # the generous timeout only keeps a broken server from hanging the test
    return socket.create_connection((server.host, server.port), timeout=60)


def _answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _apps(oxigraph):
    return {
        "serve": lambda settings: create_app(oxigraph, settings),
        "mcp": lambda settings: http_app(create_server(oxigraph, settings), settings, "127.0.0.1"),
    }


BODY = json.dumps({"ids": ["m.0kq01"]}).encode()


def _slow(path: bytes) -> list[bytes]:
    """Requests to ``path`` that stop short: nothing sent, headers cut, a body cut, a chunked body cut."""
    head = b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" % path
    head += b"Accept: application/json, text/event-stream\r\n"
    return [
        b"",
        head[:-20],
        head + b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY[:5]),
        head + b"Transfer-Encoding: chunked\r\n\r\n5\r\n" + BODY[:5] + b"\r\n",
    ]


@pytest.mark.parametrize("kind", ["serve", "mcp"])
def test_a_request_that_does_not_arrive_in_time_is_answered_408_and_closed(oxigraph, kind):
    settings = ServeSettings(read_timeout=1.0)
    with serving(_apps(oxigraph)[kind], settings) as server:
        slow = _slow(b"/v1/ops/names" if kind == "serve" else b"/mcp")
        socks = [_connect(server) for _ in slow]
        for sock, sent in zip(socks, slow):
            sock.sendall(sent)
        for sock, sent in zip(socks, slow):
            answer = _answer(sock)  # the server closes it: recv would otherwise wait out the socket's timeout
            assert answer.startswith(b"HTTP/1.1 408 "), (sent, answer)
            assert b"within 1 s" in answer
            sock.close()
        if kind == "serve":
            with ServeClient(server.url) as client:
                assert client.op("names", ids=["m.0kq01"])["names"] == {"m.0kq01": "Blade Runner"}


def test_connections_past_the_most_are_answered_503_and_closed(oxigraph):
    settings = ServeSettings(max_concurrency=1)
    with serving(_apps(oxigraph)["serve"], settings) as server:
        held = [_connect(server) for _ in range(settings.max_connections)]
        for sock in held:  # each one sends a byte, so that the server has accepted it before the next
            sock.sendall(b"G")
        extra = _connect(server)
        answer = _answer(extra)
        assert answer.startswith(b"HTTP/1.1 503 ") and f"{settings.max_connections:,} connections".encode() in answer
        extra.close()
        for sock in held:
            sock.close()
        with ServeClient(server.url) as client:
            assert client.op("names", ids=["m.0kq01"])["names"] == {"m.0kq01": "Blade Runner"}


def test_a_request_without_the_token_is_refused_before_its_body_is_read(oxigraph):
    """A body declared at 15 MB, of which nothing comes: with the token checked first, the answer
    is 401 at once, not a wait for the body (nor a 408 at the read timeout)."""
    settings = ServeSettings(token="s3cret", max_body=16_000_000, read_timeout=60.0)
    with serving(_apps(oxigraph)["serve"], settings) as server:
        sock = _connect(server)
        sock.sendall(b"POST /v1/ops/names HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 15000000\r\n\r\n" + b"x" * 1000)
        answer = _answer(sock)
        assert answer.startswith(b"HTTP/1.1 401 ") and b"bearer token" in answer
        sock.close()
        with ServeClient(server.url, "s3cret") as client:
            assert client.op("names", ids=["m.0kq01"])["names"] == {"m.0kq01": "Blade Runner"}
