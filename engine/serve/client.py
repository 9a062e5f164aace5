"""A small client of the ``kgqa serve`` API over one kept-alive HTTP connection (one client per
thread): what the tests and the load benchmark call the server with, and what a Python
application can use too."""
from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

from engine.errors import KGQAError
from engine.jsonl import parse_json


class ServeClientError(KGQAError):
    """The server answered with an error status; ``status`` and ``body`` hold its answer."""

    def __init__(self, status: int, body: Any) -> None:
        detail = body.get("detail") if isinstance(body, dict) else body
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.body = body


class ServeClient:
    def __init__(self, url: str, token: str | None = None, timeout: float = 120.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise KGQAError(f"invalid server URL {url!r}: give http://host:port")
        self.url = url.rstrip("/")
        self.host, self.port, self.timeout = parts.hostname, parts.port or 80, timeout
        self.headers = {"Content-Type": "application/json"}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self._connection: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """Send one request (``body`` as JSON, or ``raw`` bytes) and return the status and the
        decoded JSON answer. A kept connection the server has closed meanwhile is opened again
        once (every call of the API only reads)."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {**self.headers, **(headers or {})}
        for attempt in (1, 2):
            if self._connection is None:
                self._connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self._connection.request(method, path, body=data, headers=sent)
                response = self._connection.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt == 2:
                    raise
                continue
            except BaseException:
                self.close()  # a connection left half-way through a request cannot send another
                raise
            if response.getheader("connection", "").lower() == "close":
                self.close()
            try:
                return response.status, parse_json(payload) if payload else None
            except ValueError:
                return response.status, payload.decode("utf-8", "replace")
        raise AssertionError("unreachable")

    def get(self, path: str) -> Any:
        return self._checked(*self.request("GET", path))

    def op(self, name: str, **fields: Any) -> dict[str, Any]:
        """The result of ``POST /v1/ops/<name>`` with ``fields`` as its body."""
        return self._checked(*self.request("POST", f"/v1/ops/{name}", fields))

    def answer(self, **fields: Any) -> dict[str, Any]:
        return self._checked(*self.request("POST", "/v1/answer", fields))

    @staticmethod
    def _checked(status: int, body: Any) -> Any:
        if status != 200:
            raise ServeClientError(status, body)
        return body

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> ServeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
