"""The access log (one JSON object per request, on the ``kgqa.serve.access`` logger) and the
figures ``/v1/stats`` reports: requests, errors and latencies per endpoint."""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from engine.methods.meter import percentile
from engine.serve.ops import OPERATIONS

ACCESS_LOGGER = "kgqa.serve.access"
#: latencies kept per endpoint for the percentiles (the most recent ones)
KEPT_LATENCIES = 10_000

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


#: the paths ``/v1/stats`` counts by name; any other is counted as ``other``
PATHS = frozenset({"/v1/answer", "/v1/methods", "/v1/health", "/v1/stats", "/docs", "/openapi.json"})


def endpoint_of(path: str) -> str:
    """What ``/v1/stats`` counts a request under: the operation of ``/v1/ops/<operation>``, a
    known path, or ``other`` (so that no client can add names to the report)."""
    prefix = "/v1/ops/"
    if path.startswith(prefix) and path[len(prefix):] in OPERATIONS:
        return path[len(prefix):]
    return path if path in PATHS else "other"


class Stats:
    """Requests, errors (by status) and latencies per endpoint since the server started."""

    def __init__(self) -> None:
        self.started = time.time()
        self._lock = threading.Lock()
        self._requests: Counter[str] = Counter()
        self._errors: dict[str, Counter[int]] = {}
        self._latencies: dict[str, deque[float]] = {}

    def record(self, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[endpoint] += 1
            if status >= 400:
                self._errors.setdefault(endpoint, Counter())[status] += 1
            self._latencies.setdefault(endpoint, deque(maxlen=KEPT_LATENCIES)).append(seconds)

    def report(self) -> dict[str, Any]:
        with self._lock:
            endpoints = {}
            for endpoint, count in sorted(self._requests.items()):
                seconds = list(self._latencies[endpoint])
                errors = self._errors.get(endpoint, Counter())
                endpoints[endpoint] = {
                    "requests": count,
                    "errors": sum(errors.values()),
                    "errors_by_status": {str(k): v for k, v in sorted(errors.items())},
                    "latency_ms": {
                        q: round((percentile(seconds, p) or 0.0) * 1000, 3) for q, p in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
                    }
                    | {"mean": round(sum(seconds) / len(seconds) * 1000, 3)},
                }
            return {
                "uptime_seconds": round(time.time() - self.started, 3),
                "requests": sum(self._requests.values()),
                "errors": sum(sum(c.values()) for c in self._errors.values()),
                "endpoints": endpoints,
            }


class AccessLog:
    """ASGI middleware: times every HTTP request, counts it in ``stats`` and logs it as one
    JSON line (time, client, method, path, status, milliseconds, and the error kind, if any)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], stats: Stats) -> None:
        self.app = app
        self.stats = stats
        self.logger = logging.getLogger(ACCESS_LOGGER)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = 500  # what a request that ends without a response start counts as

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            path = scope["path"]
            self.stats.record(endpoint_of(path), status, seconds)
            if self.logger.isEnabledFor(logging.INFO):
                client = scope.get("client")
                self.logger.info(json.dumps({
                    "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                    "client": f"{client[0]}:{client[1]}" if client else None,
                    "method": scope["method"],
                    "path": path,
                    "status": status,
                    "ms": round(seconds * 1000, 3),
                }))


def log_to_stderr() -> None:
    """Send the access log to stderr, one JSON object a line (``kgqa serve`` does)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
