"""A computation that asks its caller questions through a callback, turned into a generator
that yields the questions and is sent the answers (:func:`stepwise`).

Decoding with transformers runs its own loop and calls a logits processor at every step; a
constraint whose data must come from elsewhere (RoG's allowed relations, from the store) would
have to call out from inside that loop. Run as steps instead, the loop hands each step's rows
to the caller, who prepares the data however it batches its work and sends the allowed tokens
back. The loop runs on a worker thread that waits while the caller works, so exactly one side
runs at a time.
"""
from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Generator
from typing import Any, TypeVar

Q = TypeVar("Q")
A = TypeVar("A")
T = TypeVar("T")


class _Stopped(BaseException):
    """Raised inside the computation when the caller closes the generator early."""


def stepwise(compute: Callable[[Callable[[Q], A]], T]) -> Generator[Q, A, T]:
    """``compute(ask)`` as a generator: each ``ask(question)`` is yielded, and returns what the
    caller sends back; the generator returns what ``compute`` returns, and raises what it
    raises. Closing the generator early stops the computation at its pending ``ask``."""
    to_caller: queue.Queue[tuple[str, Any]] = queue.Queue()
    to_worker: queue.Queue[tuple[str, Any]] = queue.Queue()

    def ask(question: Q) -> A:
        to_caller.put(("ask", question))
        kind, answer = to_worker.get()
        if kind == "stop":
            raise _Stopped
        return answer

    def work() -> None:
        try:
            to_caller.put(("done", compute(ask)))
        except _Stopped:
            to_caller.put(("stopped", None))
        except BaseException as error:  # handed to the caller, who raises it
            to_caller.put(("error", error))

    # in a copy of the caller's context: the computation sees its deadline (engine.deadlines)
    worker = threading.Thread(target=contextvars.copy_context().run, args=(work,), name="stepwise", daemon=True)
    worker.start()
    finished = False
    try:
        while True:
            kind, value = to_caller.get()
            if kind == "ask":
                to_worker.put(("answer", (yield value)))
                continue
            finished = True
            if kind == "error":
                raise value
            return value
    finally:
        if not finished:  # closed, or the caller's answer failed: stop the worker at its ask
            to_worker.put(("stop", None))
            while to_caller.get()[0] == "ask":
                to_worker.put(("stop", None))
        worker.join()
