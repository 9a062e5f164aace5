"""The server's bounds on work: the request body size (413), requests at work at once (429), and
the thread pool that runs blocking store and model work under a deadline (504)."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from engine.serve.errors import BodyTooLargeError, BusyError, DeadlineError, error_body

T = TypeVar("T")
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def grace(deadline: float) -> float:
    """How long past an operation's own deadline the server waits for it: the store raises its
    own timeout (which names the query) first, and the server's guard only catches what the store
    cannot bound (a subgraph's layers, a queue of waiting requests)."""
    return deadline + max(1.0, 0.1 * deadline)


async def send_error(send: Send, error: BodyTooLargeError) -> None:
    body = json.dumps(error_body(error)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: a request whose body is larger than ``max_body`` bytes is answered 413
    before the application sees it (told by its Content-Length, or counted as it arrives)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    def _too_large(self, size: str) -> BodyTooLargeError:
        return BodyTooLargeError(f"the request body is {size} bytes; this server takes at most {self.max_body:,} (--max-body)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return await send_error(send, self._too_large(f"{int(declared):,}"))
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return await send_error(send, self._too_large(f"over {self.max_body:,}"))
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, replay, send)


class Workers:
    """The bounded pools that run blocking work. At most ``max_concurrency`` calls are admitted
    at once (the next is refused with 429); a call holds its place until its work ends, even
    when its caller stopped waiting at the deadline. Questions a method answers run on threads
    of their own (``answering``), and the health check on one of its own (``health``), so that
    however long answers take, or however many operations wait for a worker, neither waits
    behind the other."""

    def __init__(self, workers: int, max_concurrency: int, answering: int = 1) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kgqa-serve")
        self.answer_pool = ThreadPoolExecutor(max_workers=answering, thread_name_prefix="kgqa-answer")
        # one thread: a probe of a store that does not answer holds it, and the next waits at most its deadline
        self.health_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgqa-health")
        self.max_concurrency = max_concurrency
        self._busy = 0
        self._lock = threading.Lock()

    @property
    def busy(self) -> int:
        """Calls admitted whose work has not ended."""
        return self._busy

    def _leave(self, future: asyncio.Future) -> None:
        with self._lock:
            self._busy -= 1
        if not future.cancelled():
            future.exception()  # retrieved: a call abandoned at its deadline may fail later

    async def run(self, call: Callable[[float], T], deadline: float, *, admit: bool = True, answering: bool = False,
                  health: bool = False) -> T:
        """``call(expires)`` on a worker thread (an answering one when ``answering``, the health
        check's when ``health``), where
        ``expires`` is the :func:`time.monotonic` instant ``deadline`` seconds after this call:
        the time it waits for a thread counts, so a call that starts late gets only the time left
        (``call`` bounds its work by ``expires``), and one whose deadline passed while it waited
        is not started. 429 when ``admit`` and the server is full, 504 when it has not ended a
        :func:`grace` after ``deadline`` seconds (it runs on, and keeps its place, until it ends)."""
        expires = time.monotonic() + deadline

        def work() -> T:
            if time.monotonic() >= expires:
                raise DeadlineError(
                    f"the request waited for a worker past its deadline of {deadline:g} s and was not started: "
                    "the server is busy; try again shortly, or give a larger timeout"
                )
            return call(expires)

        with self._lock:
            if admit and self._busy >= self.max_concurrency:
                raise BusyError(
                    f"the server is at work on {self._busy} requests, its most (--max-concurrency): try again shortly"
                )
            self._busy += 1
        future = asyncio.get_running_loop().run_in_executor(self.health_pool if health else self.answer_pool if answering else self.pool, work)
        future.add_done_callback(self._leave)
        try:
            return await asyncio.wait_for(asyncio.shield(future), grace(deadline))
        except TimeoutError:
            raise DeadlineError(
                f"the request ran past its deadline of {deadline:g} s; the server stopped waiting for it"
            ) from None

    def close(self) -> None:
        for pool in (self.pool, self.answer_pool, self.health_pool):
            pool.shutdown(wait=False, cancel_futures=True)
