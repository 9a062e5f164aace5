"""Per-query timeouts for stores that cannot stop a running query themselves.

Oxigraph (pyoxigraph has no cancellation; but see :mod:`engine.stores.oxigraph_processes` for
the queries it runs in processes), FalkorDB (its Bolt endpoint ignores the transaction timeout)
and the Python reference store run the query in a worker thread and stop waiting at the deadline: the caller gets :class:`QueryTimeoutError` at once, and the abandoned
query runs on in the background until it ends (its answer is dropped). Virtuoso and Neo4j stop
the query inside the database (see ``Store.execute``).

Workers are kept and reused: FalkorDB runs every call under a deadline, and starting a thread
per call cost more than a small query, the more so on a busy machine.
A worker whose query was abandoned goes back to the idle ones only once that query has ended,
so a stuck query never delays another call.

An abandoned call must not start its query again: a store that retries transient failures
(a dropped connection) asks :func:`abandoned` before each attempt and raises
:class:`Abandoned` instead of sending the query the caller already got a timeout for. A call
that takes its answer one row at a time (Oxigraph's raw queries) asks it between rows, and so
stops at the first row that comes after the deadline.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from engine.errors import QueryTimeoutError

T = TypeVar("T")

_IDLE_KEPT = 8  # idle workers kept; more end


class Abandoned(QueryTimeoutError):
    """Raised inside a call whose caller stopped waiting, in place of a retry (nobody reads it)."""

    def __init__(self) -> None:
        super().__init__("the caller stopped waiting for this call, so it is not tried again")


class _Job:
    def __init__(self, call: Callable[[], object]) -> None:
        self.call = call
        self.done = threading.Event()
        self.abandoned = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None


_running = threading.local()  # .job: the job a worker thread is running


def abandoned() -> bool:
    """True inside a call that :func:`run_with_timeout` has stopped waiting for."""
    job = getattr(_running, "job", None)
    return job is not None and job.abandoned.is_set()


def running() -> int:
    """How many calls handed to :func:`run_with_timeout` have not ended yet, abandoned ones
    included: what still runs in the background after its callers got their timeouts."""
    with _lock:
        return _busy


class _Worker:
    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="kgqa-query", daemon=True).start()

    def _loop(self) -> None:
        global _busy
        while True:
            job = self.jobs.get()
            _running.job = job
            try:
                job.value = job.call()
            except BaseException as e:  # noqa: BLE001 (handed to the caller)
                job.error = e
            _running.job = None
            job.done.set()
            del job
            with _lock:
                _busy -= 1
                if len(_idle) >= _IDLE_KEPT:
                    return
                _idle.append(self)


_idle: list[_Worker] = []
_busy = 0  # calls handed to workers that have not ended
_lock = threading.Lock()


def run_with_timeout(call: Callable[[], T], timeout: float | None, store: str) -> T:
    """``call()``, or QueryTimeoutError when it has not returned after ``timeout`` seconds
    (None: wait for it). Its exceptions are raised here, in the caller's thread."""
    global _busy
    if timeout is None:
        return call()
    with _lock:
        worker = _idle.pop() if _idle else None
        _busy += 1
    if worker is None:
        worker = _Worker()
    job = _Job(call)
    worker.jobs.put(job)
    # a wait past TIMEOUT_MAX (about 292 years) overflows the platform's clock: it is forever
    if not job.done.wait(min(timeout, threading.TIMEOUT_MAX)):
        job.abandoned.set()
        raise QueryTimeoutError(
            f"{store} cannot stop a running query, so it was abandoned at the deadline and runs on in "
            "the background until it ends"
        )
    if job.error is not None:
        raise job.error
    return job.value  # type: ignore[return-value]


class Budget:
    """One timeout shared by the queries of one call that makes several (a layer or depth each,
    a part of a long id list each): the first query gets the whole timeout and starts the clock,
    each later one the seconds left, and none starts after they are spent."""

    def __init__(self, timeout: float | None, what: str) -> None:
        self.timeout = timeout
        self.what = what
        self._deadline: float | None = None

    def left(self) -> float | None:
        """The seconds the next query may take (None: no deadline); :class:`QueryTimeoutError`
        once none are left."""
        if self.timeout is None:
            return None
        if self._deadline is None:
            self._deadline = time.monotonic() + self.timeout
            return self.timeout
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise QueryTimeoutError(f"{self.what} ran past its timeout of {self.timeout:g} s")
        return left
