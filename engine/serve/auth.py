"""The optional bearer token: with one set, every request but ``/v1/health`` and the API docs
must send ``Authorization: Bearer <token>`` (:func:`bearer`, ``kgqa serve``); :func:`guard` puts
any ASGI app behind the same check (the MCP server's streamable HTTP, ``kgqa mcp``)."""
from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request

from engine.serve.errors import UnauthorizedError, error_body


def bearer(token: str | None) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency that lets a request through when it carries ``token`` (any request
    when ``token`` is None), else raises 401."""
    expected = None if token is None else token.encode()

    async def check(request: Request) -> None:  # async: FastAPI would run a plain function on a thread
        if expected is not None:
            refusal = _refusal(request.headers.get("authorization", ""), expected)
            if refusal:
                raise UnauthorizedError(refusal)

    return check


def guard(app: Any, token: str | None) -> Any:
    """The ASGI ``app`` with every HTTP request checked for ``token`` (``app`` itself when None);
    a refused request is answered 401 with the JSON error body ``kgqa serve`` sends."""
    return app if token is None else BearerFirst(app, token)


class BearerFirst:
    """ASGI middleware: an HTTP request without ``token`` is answered 401 from its headers, before
    any of its body is read. ``bodies_only``: only requests that send a body are checked here
    (``kgqa serve``, whose routes check the rest with :func:`bearer`)."""

    def __init__(self, app: Any, token: str | None, bodies_only: bool = False) -> None:
        self.app = app
        self.expected = None if token is None else token.encode()
        self.bodies_only = bodies_only

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and self.expected is not None:
            headers = dict(scope.get("headers") or [])
            sends_body = headers.get(b"content-length", b"0").strip() not in (b"", b"0") or b"transfer-encoding" in headers
            refusal = None if self.bodies_only and not sends_body else _refusal(
                headers.get(b"authorization", b"").decode("latin-1"), self.expected)
            if refusal:
                body = json.dumps(error_body(UnauthorizedError(refusal))).encode()
                fields = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                fields += [(k.lower().encode(), v.encode()) for k, v in UnauthorizedError.headers.items()]
                if sends_body:
                    fields.append((b"connection", b"close"))  # its body is never read
                await send({"type": "http.response.start", "status": UnauthorizedError.status, "headers": fields})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _refusal(header: str, expected: bytes) -> str | None:
    """Why the ``Authorization`` header ``header`` does not carry the token (None: it does)."""
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        return "this server needs a bearer token: send the header Authorization: Bearer <token>"
    if not hmac.compare_digest(given.strip().encode(), expected):
        return "wrong bearer token"
    return None
