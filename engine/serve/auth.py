"""The optional bearer token: with one set, every request but ``/v1/health`` and the API docs
must send ``Authorization: Bearer <token>``."""
from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request

from engine.serve.errors import UnauthorizedError


def bearer(token: str | None) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency that lets a request through when it carries ``token`` (any request
    when ``token`` is None), else raises 401."""
    expected = None if token is None else token.encode()

    async def check(request: Request) -> None:  # async: FastAPI would run a plain function on a thread
        if expected is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            raise UnauthorizedError("this server needs a bearer token: send the header Authorization: Bearer <token>")
        if not hmac.compare_digest(given.strip().encode(), expected):
            raise UnauthorizedError("wrong bearer token")

    return check
