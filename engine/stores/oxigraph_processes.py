"""Raw queries and S-expressions on an embedded store, each run in a process of its own that is
killed at its deadline.

pyoxigraph cannot stop a running query, and a query whose shape comes from outside the engine (a
raw query, an S-expression from a model or a user) can run for hours: a product of a few patterns
over a large graph. In a thread, abandoned at its deadline, such a query would hold a core, and a
server's place for a request, until it ended. So under a deadline it runs in a child process
(:mod:`engine.stores.oxigraph_child`) that opens the same store read only, and at the deadline
the child is killed, which stops the query at once.

Children are kept between queries, and each answers one query at a time; at most ``most`` run at
once, and a query that finds them all busy waits for one within its own deadline. Starting a child
costs about a tenth of a second, more where a large store takes long to open: a query whose
deadline passes while a new child is still opening the store never reached it, and the child is
kept for the next. This needs a store opened read only: the engine's store lock
(:mod:`engine.stores.store_lock`) then keeps writers out for as long as the parent has the store
open, and the parent kills its children before it lets the lock go.

Each child may allocate at most ``memory`` bytes (by default half the machine's memory shared
among the ``most`` children, at least 1 GiB): a query that needs more (a product sorted by ORDER
BY, an answer of millions of rows) ends its child, and fails with a QueryMemoryError. A raw query
given a row bound is read only one row past it, so that its answer never holds more.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyoxigraph

from engine.errors import QueryMemoryError, QueryTimeoutError, StoreError
from engine.stores import oxigraph_child

_CHILD = Path(oxigraph_child.__file__)
_PACKAGES = Path(pyoxigraph.__file__).resolve().parents[1]  # the folder the child imports pyoxigraph from
_IDLE_KEPT = 4  # idle children kept; more end
_GIB = 1 << 30


def default_memory(most: int) -> int:
    """The bytes one of ``most`` children may allocate by default: half the machine's memory
    shared among them, at least 1 GiB."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        physical = 8 * _GIB
    return max(_GIB, physical // 2 // most)


def gib(size: int) -> str:
    return f"{size / _GIB:.3g} GiB"


class StillOpening(QueryTimeoutError):
    """The deadline passed while a new child was still opening the store: the query was never
    sent, so the child is kept for the next one."""


class _Child:
    """One query process and its pipes."""

    def __init__(self, path: str, memory: int) -> None:
        self.memory = memory
        # -I: the child's imports come from the installed packages only, never from its folder
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(_CHILD), path, str(_PACKAGES), str(os.getpid()), str(memory)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        self.opened = False  # whether it has said that the store is open

    def ask(self, mode: bytes, text: str, deadline: float, rows: int = 0) -> bytes:
        """The answer to ``text`` (a kind byte and its data), read up to ``rows`` + 1 rows where
        ``rows`` is not 0; QueryTimeoutError at ``deadline`` (time.monotonic()), StillOpening when
        it came before the store was open; QueryMemoryError when it needed more than the child's
        memory; StoreError when the child ends without answering."""
        assert self.process.stdin is not None
        if not self.opened:  # a large store takes a while to open, once: the query waits for that first
            try:
                first = self._frame(deadline)
            except QueryTimeoutError:
                raise StillOpening(
                    "the query process was still opening the store at the deadline (a large store takes a while "
                    "to open, once), so the query did not start"
                ) from None
            if first != oxigraph_child.READY:
                return first  # it could not open the store: why
            self.opened = True
        try:
            oxigraph_child.write_frame(self.process.stdin, mode + oxigraph_child.ROWS.pack(rows) + text.encode("utf-8"))
        except BrokenPipeError:
            pass  # it has ended: what it wrote before, or its exit code, says why
        answer = self._frame(deadline)
        if answer == oxigraph_child.TOO_BIG:
            raise self._too_big()
        return answer

    def _too_big(self) -> QueryMemoryError:
        return QueryMemoryError(
            f"the query needed more than {gib(self.memory)} of memory, the most one query may take on this store: "
            "narrow it or add a LIMIT"
        )

    def _frame(self, deadline: float) -> bytes:
        head = self._read(oxigraph_child.LENGTH.size, deadline)
        return self._read(oxigraph_child.LENGTH.unpack(head)[0], deadline)

    def _read(self, size: int, deadline: float) -> bytes:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        ready = select.poll()  # not select(), which takes no descriptor past 1023
        ready.register(fd, select.POLLIN)
        data = bytearray()
        while len(data) < size:
            left = deadline - time.monotonic()
            if left <= 0 or not ready.poll(left * 1000):
                raise QueryTimeoutError("it ran past its deadline and was stopped there")
            chunk = os.read(fd, size - len(data))
            if not chunk:
                self.process.wait()
                code = self.process.returncode
                if code == -signal.SIGABRT and self.memory:  # how Rust ends on a failed allocation
                    raise self._too_big()
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                raise StoreError(f"the process that ran the query {how} before it answered")
            data += chunk
        return bytes(data)

    def stop(self) -> None:
        """Kill the process; its pipes stay open for whoever is reading them."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)

    def discard(self) -> None:
        """Kill the process, reap it and close its pipes: only by the thread that holds it."""
        self.stop()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass


class QueryProcesses:
    """The query processes of the read-only store at ``path``: :meth:`ask` a query, :meth:`close`
    to kill them all."""

    def __init__(self, path: str, most: int | None = None, memory: int | None = None) -> None:
        self.path = path
        self.most = most or max(2, os.cpu_count() or 2)
        #: the bytes each child may allocate (0: no bound)
        self.memory = default_memory(self.most) if memory is None else memory
        self._slots = threading.BoundedSemaphore(self.most)
        self._idle: list[_Child] = []
        self._all: set[_Child] = set()
        self._lock = threading.Lock()
        self._closed = False

    def ask(self, text: str, timeout: float, *, compiled: bool = False, rows: int | None = None) -> bytes:
        """``text``'s answer from a child (a kind byte of :mod:`engine.stores.oxigraph_child` and
        its data), or QueryTimeoutError once ``timeout`` seconds have passed, the query stopped.
        ``compiled``: a SELECT the engine wrote, answered as TSV. ``rows``: a raw query's row
        bound, of which the child sends one row more at most."""
        deadline = time.monotonic() + timeout
        if not self._slots.acquire(timeout=timeout):
            raise QueryTimeoutError(f"all {self.most} query processes were busy until the deadline, so it did not start")
        try:
            child = self._take()
            try:
                answer = child.ask(oxigraph_child.COMPILED if compiled else oxigraph_child.RAW, text, deadline, rows or 0)
            except StillOpening:
                self._give_back(child)  # it never had the query: the next one finds the store open
                raise
            except BaseException:
                self._drop(child)
                raise
            if answer[:1] in (oxigraph_child.FAILED, oxigraph_child.DAMAGED):  # the store did not open or read: a new child tries again
                self._drop(child)
            else:
                self._give_back(child)
            return answer
        finally:
            self._slots.release()

    def _take(self) -> _Child:
        dead: list[_Child] = []
        try:
            return self._take_or_start(dead)
        finally:
            for child in dead:
                self._drop(child)

    def _take_or_start(self, dead: list[_Child]) -> _Child:
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            while self._idle:
                child = self._idle.pop()
                if child.process.poll() is None:
                    return child
                dead.append(child)  # killed from outside while idle: never asked
            child = _Child(self.path, self.memory)
            self._all.add(child)
            return child

    def _give_back(self, child: _Child) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _IDLE_KEPT:
                self._idle.append(child)
                return
        self._drop(child)

    def _drop(self, child: _Child) -> None:
        child.discard()
        with self._lock:
            self._all.discard(child)

    def close(self) -> None:
        """Kill every child. One at work is only killed: the thread that asked it sees it end
        (a StoreError) and discards it."""
        with self._lock:
            self._closed = True
            idle, busy = self._idle, self._all.difference(self._idle)
            self._idle, self._all = [], set(busy)
        for child in idle:
            child.discard()
        for child in busy:
            child.stop()
