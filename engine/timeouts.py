"""Per-query timeouts for stores that cannot stop a running query themselves.

Oxigraph (pyoxigraph has no cancellation), FalkorDB (its Bolt endpoint ignores the
transaction timeout) and the Python reference store run the query in a daemon thread and stop
waiting at the deadline: the caller gets :class:`QueryTimeoutError` at once, and the abandoned
query runs on in the background until it ends (its answer is dropped). Virtuoso and Neo4j stop
the query inside the database (see ``Store.execute``).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from engine.errors import QueryTimeoutError

T = TypeVar("T")


def run_with_timeout(call: Callable[[], T], timeout: float | None, store: str) -> T:
    """``call()``, or QueryTimeoutError when it has not returned after ``timeout`` seconds
    (None: wait for it). Its exceptions are raised here, in the caller's thread."""
    if timeout is None:
        return call()
    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as e:  # noqa: BLE001 (handed to the caller below)
            outcome["error"] = e

    worker = threading.Thread(target=work, name="kgqa-query", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise QueryTimeoutError(
            f"{store} cannot stop a running query, so it was abandoned at the deadline and runs on in "
            "the background until it ends"
        )
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
