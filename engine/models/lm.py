"""The language-model interface the methods program against: :class:`LanguageModel`
(greedy and batched generation, beam search, constrained decoding, token log-probabilities and
option scoring), the :class:`Generation` and :class:`TokenLogprob` it returns, and the callback
types its decoding takes (``AllowedTokens``, ``Decoding``, ``StopWhen``, ``BatchStop``). A
prompt is the user's instruction as plain text; each model wraps it the way it expects. The
models themselves are :class:`engine.models.transformers_lm.TransformersLM` (a local causal LM)
and :class:`engine.models.openai_lm.OpenAIChatLM` (an OpenAI-compatible chat endpoint);
:func:`engine.models.loading.load_lm` turns a ``--model`` name into one of them.
"""
from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

from engine.errors import UnsupportedOperationError

#: constrained decoding: given the token ids generated so far (prompt excluded), the ids allowed next
AllowedTokens = Callable[[Sequence[int]], Sequence[int]]
#: a decoding step's rows: (the prompt's index, the token ids it generated so far), one per beam
StepRows = list[tuple[int, list[int]]]
#: a batched beam search run step by step (:meth:`LanguageModel.beam_search_steps`): it yields each
#: step's rows, is sent the tokens each row allows next, and returns the generations
Decoding = Generator[StepRows, list[Sequence[int]], list[list["Generation"]]]

#: early stop: given the text generated so far, whether it is complete (e.g. holds a closed
#: ``</PATH>`` or a balanced S-expression); a sequence for which it holds is ended there
StopWhen = Callable[[str], bool]
#: ``generate_batch``'s stop: one rule for every prompt, or a rule (or None) per prompt
BatchStop = StopWhen | Sequence[StopWhen | None] | None


def per_prompt_stops(stop: BatchStop, n: int) -> list[StopWhen | None]:
    """``stop`` as one rule per prompt of ``n``."""
    if stop is None or callable(stop):
        return [stop] * n
    stops = list(stop)
    if len(stops) != n:
        raise ValueError(f"{len(stops)} stop rules for {n} prompts")
    return stops


@dataclass(frozen=True)
class TokenLogprob:
    token: str
    logprob: float


@dataclass(frozen=True)
class Generation:
    """A generated text; ``score`` is the sum of its token log-probabilities (greedy decoding,
    endpoints that return log-probabilities) or the length-normalised beam score (beam search)."""

    text: str
    score: float | None = None
    tokens: tuple[TokenLogprob, ...] | None = None
    #: tokens the model read (template included) and wrote, where the model tells
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class TokenCount:
    """The tokens a model has read and written since it was made, as a hosted model's usage
    counts them: ``read``, every call's prompts (template included; a prompt once per call, however
    many sequences it returns) and the given text it scored; ``written``, the tokens of every
    sequence it returned (its end token included), and the one token a scoring request to a server
    generates. A local model reads a prompt that begins like a recent one from its cache; the
    count does not see that saving. ``untold``: calls whose tokens the model could not tell (a
    server that sent no usage)."""

    def __init__(self) -> None:
        self.read = 0
        self.written = 0
        self.untold = 0
        self._lock = threading.Lock()  # a server's requests are sent from several threads

    def add(self, read: int | None, written: int | None) -> None:
        """One call's tokens; None where the model could not tell them."""
        with self._lock:
            if read is None or written is None:
                self.untold += 1
            else:
                self.read += read
                self.written += written

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.read, self.written, self.untold


class LanguageModel(ABC):
    """Generation, beam search, token log-probabilities and constrained decoding."""

    name: str = ""
    #: the tokens the model has read and written; None for a model that does not count them
    tokens: TokenCount | None = None

    @abstractmethod
    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 256,
        logprobs: bool = False,
        allowed_tokens: AllowedTokens | None = None,
        stop: StopWhen | None = None,
    ) -> Generation:
        """Greedy decoding (temperature 0); ``stop`` ends it early where the model can be
        stopped token by token (local models; endpoints return their whole text)."""

    @abstractmethod
    def beam_search(
        self,
        prompt: str,
        *,
        num_beams: int = 3,
        num_return: int | None = None,
        max_new_tokens: int = 100,
        allowed_tokens: AllowedTokens | None = None,
        stop: StopWhen | None = None,
    ) -> list[Generation]:
        """The ``num_return`` (default ``num_beams``) best sequences, best first; a beam for
        which ``stop`` holds is finished."""

    def generate_batch(self, prompts: Sequence[str], *, max_new_tokens: int = 256, stop: BatchStop = None) -> list[Generation]:
        """Greedy decoding of independent prompts, one generation per prompt in order, each
        ended by ``stop`` (one rule for all, or one per prompt) as :meth:`generate` ends it;
        the default decodes them one by one (local models batch them)."""
        stops = per_prompt_stops(stop, len(prompts))
        return [self.generate(p, max_new_tokens=max_new_tokens, stop=s) for p, s in zip(prompts, stops)]

    def beam_search_batch(
        self,
        prompts: Sequence[str],
        *,
        num_beams: int = 3,
        num_return: int | None = None,
        max_new_tokens: int = 100,
        allowed_tokens: Sequence[AllowedTokens | None] | None = None,
        stop: StopWhen | None = None,
    ) -> list[list[Generation]]:
        """:meth:`beam_search` for each prompt (with its own ``allowed_tokens[i]``), in order;
        the default searches them one by one (local models batch them)."""
        constraints = list(allowed_tokens) if allowed_tokens is not None else [None] * len(prompts)
        return [
            self.beam_search(p, num_beams=num_beams, num_return=num_return, max_new_tokens=max_new_tokens, allowed_tokens=a, stop=stop)
            for p, a in zip(prompts, constraints, strict=True)
        ]

    def beam_search_steps(
        self,
        prompts: Sequence[str],
        *,
        num_beams: int = 3,
        num_return: int | None = None,
        max_new_tokens: int = 100,
        stop: StopWhen | None = None,
    ) -> Decoding:
        """:meth:`beam_search_batch` with the caller deciding each step's allowed tokens: a
        :data:`Decoding` that yields every step's rows before the step and is sent what each
        row allows, so that a constraint's data (RoG's relations leaving a frontier) is
        prepared by the caller between steps, for all the rows of a step at once. The default
        asks row by row (local models ask a whole step at once)."""
        from engine.models.steps import stepwise

        def search(ask: Callable[[StepRows], list[Sequence[int]]]) -> list[list[Generation]]:
            rules = [(lambda generated, i=i: ask([(i, list(generated))])[0]) for i in range(len(prompts))]
            return self.beam_search_batch(
                prompts, num_beams=num_beams, num_return=num_return, max_new_tokens=max_new_tokens, allowed_tokens=rules, stop=stop
            )

        return stepwise(search)

    def token_logprobs(self, prompt: str, continuation: str) -> list[TokenLogprob]:
        """The log-probability of each token of ``continuation`` as the answer to ``prompt``."""
        raise UnsupportedOperationError(f"{self.name} cannot score a given continuation")

    def score(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        """The total log-probability of each continuation (option scoring)."""
        return [sum(lps) for lps in self.score_batch(prompt, continuations)]

    def score_batch(self, prompt: str, continuations: Sequence[str], *, eos: bool = False) -> list[list[float]]:
        """The log-probability of each token of each continuation as the answer to ``prompt``
        (and of the end-of-sequence token after it with ``eos``: the probability of the
        continuation as the whole answer). Local models score all continuations in batched
        passes over the prompt, computed once."""
        if eos:
            raise UnsupportedOperationError(f"{self.name} cannot score the end of a continuation")
        return [[t.logprob for t in self.token_logprobs(prompt, c)] for c in continuations]

    def score_many(self, requests: Sequence[tuple[str, Sequence[str]]], *, eos: bool = False) -> list[list[list[float]]]:
        """:meth:`score_batch` of each ``(prompt, continuations)`` request, in order. Local
        models score prompts that begin alike together (a round of a method's decisions)."""
        return [self.score_batch(prompt, continuations, eos=eos) for prompt, continuations in requests]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` on its own (no special tokens added), for building token tries."""
        raise UnsupportedOperationError(f"{self.name} exposes no tokenizer: constrained decoding needs a local model")

    @property
    def eos_token_id(self) -> int:
        raise UnsupportedOperationError(f"{self.name} exposes no tokenizer: constrained decoding needs a local model")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

