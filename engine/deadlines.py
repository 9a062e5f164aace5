"""The deadline of the work under way in this context, for work that has no single call to time
out: a method answering questions (``kgqa serve``'s ``/v1/answer``).

Whoever bounds the work sets the deadline (:func:`until`); the work checks it between its units
(:func:`check`): every metered store or model call (:class:`engine.methods.meter.Meter`), every
batch of prompts and every decoding step of a local model. Past it, the next check raises
:class:`engine.errors.DeadlineExceededError`, so the work stops at its next unit, not inside one.
The deadline is a context variable: a thread the work starts for itself carries it only if it
runs in a copy of the context (:func:`engine.models.steps.stepwise` does)."""
from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from engine.errors import DeadlineExceededError, InvalidInputError, clipped

_deadline: ContextVar[float | None] = ContextVar("kgqa_deadline", default=None)


@contextmanager
def until(at: float | None) -> Iterator[None]:
    """Work inside the block stops at its first check past ``at``, a :func:`time.monotonic`
    instant (None: no deadline, or the enclosing one's)."""
    # NaN would never pass, a string fail at the first check: neither is a deadline
    if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at)):
        raise InvalidInputError(
            f"invalid deadline {clipped(repr(at), 200)}: give a time.monotonic() instant, such as "
            "time.monotonic() + 60, or None for no deadline"
        )
    if at is None:
        yield
        return
    token = _deadline.set(at)
    try:
        yield
    finally:
        _deadline.reset(token)


def remaining() -> float | None:
    """Seconds left before this context's deadline (0 once it has passed); None without one.
    For a single call that waits (a request to a model server), so that the wait ends there."""
    at = _deadline.get()
    return None if at is None else max(at - time.monotonic(), 0.0)


def check() -> None:
    """Raise :class:`DeadlineExceededError` if this context's deadline has passed."""
    at = _deadline.get()
    if at is not None and time.monotonic() > at:
        raise DeadlineExceededError(
            "answering ran past its deadline and stopped at its next store call or model step: "
            "give it more time, or fewer questions at once"
        )
