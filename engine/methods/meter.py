"""Seconds per stage and calls per kind while a method answers: :class:`Meter`, and the
:class:`Metered` proxies that time a store's or a language model's calls without a stopwatch
in the method (:mod:`engine.methods.run` reads them per batch); a call that runs step by step
(a generator) is timed step by step. Stages nest exclusively: a store call made inside a
``model`` stage counts as store time only.

Every stage, so every metered store or model call and every step of a stepwise one, first
checks the context's deadline (:mod:`engine.deadlines`): that is how a method that answers past
its deadline stops (``kgqa serve``'s ``/v1/answer``) without a check in the method."""
from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from engine import deadlines

#: the stages a record's ``seconds`` splits into (``other`` is the rest of ``total``)
STAGES = ("store", "model")
#: the kinds of calls a record counts
CALLS = ("store", "llm")
#: the tokens a record counts: what its language models read and wrote (:meth:`Meter.tokens`)
TOKENS = ("prompt_tokens", "completion_tokens")
#: store methods that do not call the database (compiling for display, closing)
STORE_UNMETERED = frozenset({"explain", "explaining", "close"})
#: language-model methods that cost a model call (tokenizer helpers do not)
LM_CALLS = frozenset({
    "generate", "beam_search", "token_logprobs", "score", "generate_batch", "beam_search_batch", "beam_search_steps", "score_batch",
    "score_many",
})


class Meter:
    """Seconds per stage and calls per kind, and the tokens its language models read and wrote,
    since the last :meth:`reset`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.operations: Counter[str] = Counter()
        self._open: list[list[float]] = []  # [start, seconds spent in nested stages]
        self._models: dict[int, tuple[Any, tuple[int, int, int] | None]] = {}  # id → (model, its tokens at reset)

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.operations.clear()
        self._models = {key: (lm, _token_count(lm)) for key, (lm, _) in self._models.items()}

    def tokens(self) -> dict[str, int] | None:
        """``prompt_tokens`` and ``completion_tokens`` the metered language models read and wrote
        since the last reset (:class:`engine.models.lm.TokenCount`); None without a model, or
        where one does not count them or could not tell a call's."""
        if not self._models:
            return None
        read = written = 0
        for lm, before in self._models.values():
            now = _token_count(lm)
            if now is None or before is None or now[2] != before[2]:
                return None
            read += now[0] - before[0]
            written += now[1] - before[1]
        return dict(zip(TOKENS, (read, written)))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block under ``name``, less the time of the stages nested in it (once the
        context's deadline has passed, the block does not start)."""
        deadlines.check()
        frame = [time.perf_counter(), 0.0]
        self._open.append(frame)
        try:
            yield
        finally:
            self._open.pop()
            elapsed = time.perf_counter() - frame[0]
            self.seconds[name] += elapsed - frame[1]
            if self._open:
                self._open[-1][1] += elapsed

    def count(self, kind: str, operation: str | None = None) -> None:
        self.calls[kind] += 1
        if operation:
            self.operations[f"{kind}.{operation}"] += 1

    def store(self, store: Any) -> Any:
        """``store`` with every public method timed as ``store`` and counted as a store call."""
        return Metered(store, self, stage="store", kind="store", skip=STORE_UNMETERED)

    def lm(self, lm: Any) -> Any:
        """``lm`` with its generation and scoring methods timed as ``model``, counted as llm
        calls; the tokens it reads and writes count from now on."""
        self._models.setdefault(id(lm), (lm, _token_count(lm)))
        return Metered(lm, self, stage="model", kind="llm", only=LM_CALLS)


def _token_count(lm: Any) -> tuple[int, int, int] | None:
    """``lm``'s tokens read, written and untold so far; None for a model that does not count them."""
    count = getattr(lm, "tokens", None)
    return count.snapshot() if count is not None else None


class Metered:
    """A proxy whose public methods run inside ``meter.stage(stage)`` and count one ``kind`` call."""

    def __init__(
        self, target: Any, meter: Meter, *, stage: str, kind: str, only: frozenset[str] | None = None, skip: frozenset[str] = frozenset()
    ) -> None:
        self._target, self._meter, self._stage, self._kind, self._only, self._skip = target, meter, stage, kind, only, skip

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name.startswith("_") or not callable(value) or name in self._skip or (self._only is not None and name not in self._only):
            return value
        meter, stage, kind = self._meter, self._stage, self._kind

        def timed(*args: Any, **kwargs: Any) -> Any:
            with meter.stage(stage):  # checks the deadline first: a refused call is not counted
                meter.count(kind, name)
                result = value(*args, **kwargs)
            return _timed_steps(result, meter, stage) if isinstance(result, Generator) else result

        timed.__name__ = name
        return timed

    def __repr__(self) -> str:
        return f"Metered({self._target!r})"


def _timed_steps(steps: Generator[Any, Any, Any], meter: Meter, stage: str) -> Generator[Any, Any, Any]:
    """``steps`` (a call run step by step, :meth:`engine.models.lm.LanguageModel.beam_search_steps`)
    with the work of each step timed under ``stage``; the caller's work between steps is its own."""
    answer = None
    try:
        while True:
            with meter.stage(stage):
                try:
                    asked = steps.send(answer)
                except StopIteration as done:
                    return done.value
            answer = yield asked
    finally:
        steps.close()


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (``q`` in 0..1) of ``values``, linearly interpolated between the two
    nearest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
