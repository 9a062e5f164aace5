"""An OpenAI-compatible model server (vLLM, llama.cpp, Ollama, ``transformers serve``, OpenAI)
as a :class:`engine.models.lm.LanguageModel`: :class:`OpenAIChatLM` posts over plain HTTP,
retrying transient failures (timeouts, refused connections, 429 and 5xx answers) with
tenacity's exponential backoff. ``openai:MODEL[@URL]`` names one
(:func:`engine.models.loading.load_lm`); the prompt template (``--prompt-template``) picks the
route:

- **chat** (no template, or ``chat``): each prompt goes to ``/chat/completions`` as a user
  message, wrapped by the server's own chat template. Generation only: given text cannot be
  scored, since a chat reply carries the log-probabilities of its own tokens at most.
- **completions** (``raw``, a name in :data:`engine.models.templates.TEMPLATES`, or a string
  with ``{prompt}``): the client writes the whole prompt and posts it to ``/completions``. This
  route also scores given text (:meth:`OpenAIChatLM.score_batch`, option scoring) where the
  server echoes the prompt's log-probabilities (``echo`` with ``logprobs``, as vLLM does). A
  template may go on with ``{answer}`` and the text that ends an answer (``<|im_end|>``): that
  text is what scoring with ``eos`` appends, so an option is scored as the whole answer.

A server has no beam search and no token-level constraints: :meth:`OpenAIChatLM.beam_search`
returns distinct sampled answers, and a constraint is refused. Generations of several prompts
are requested concurrently, so a server that batches requests (vLLM) decodes them together.
"""
from __future__ import annotations

import contextvars
import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from engine import deadlines
from engine.errors import InvalidInputError, KGQAError, UnsupportedOperationError, clipped
from engine.identifiers import validate_text
from engine.jsonl import parse_json
from engine.models.lm import (
    AllowedTokens,
    BatchStop,
    Generation,
    LanguageModel,
    StopWhen,
    TokenCount,
    TokenLogprob,
    per_prompt_stops,
)
from engine.models.templates import TEMPLATES

#: a ``--model`` name that starts with this names a model server: ``openai:MODEL[@URL]``
OPENAI_PREFIX = "openai:"
DEFAULT_OPENAI_BASE = "https://api.openai.com/v1"
#: in a completions template, where the answer starts; the text after it ends an answer
ANSWER = "{answer}"

# HTTP statuses worth retrying: rate limits, overload, gateway hiccups
_TRANSIENT_STATUS = {408, 409, 429, 500, 502, 503, 504}
T = TypeVar("T")
R = TypeVar("R")


def is_server_model(name: str | None) -> bool:
    """Whether a ``--model`` name names a model server rather than a local model."""
    return name is not None and name.startswith(OPENAI_PREFIX)


def split_server_name(name: str) -> tuple[str, str | None]:
    """``openai:MODEL[@URL]`` as (MODEL, URL or None); MODEL may hold an ``@`` of its own
    (``org/model@revision``): the URL starts at the last ``@http://`` or ``@https://``."""
    rest = name[len(OPENAI_PREFIX):] if name.startswith(OPENAI_PREFIX) else name
    at = max(rest.rfind("@http://"), rest.rfind("@https://"))
    return (rest[:at], rest[at + 1:]) if at >= 0 else (rest, None)


def completion_format(template: str | None) -> tuple[str, str | None] | None:
    """The completions route's (prompt format with ``{prompt}``, text that ends an answer or
    None) for a template; None for the chat route (no template, or ``chat``)."""
    if template in (None, "chat"):
        return None
    text = "{prompt}" if template == "raw" else TEMPLATES.get(template, template)  # type: ignore[arg-type]
    head, marker, end = text.partition(ANSWER)
    if "{prompt}" not in head:
        raise InvalidInputError(
            f"prompt template {template!r} for a model server: use chat (the server's own), raw, "
            f"{', '.join(TEMPLATES)} or a string with {{prompt}} (and {ANSWER} after it, before the text that ends an answer)"
        )
    return head, (end if marker and end else None)


def _usage(reply: Any) -> tuple[int | None, int | None]:
    """The prompt and completion tokens a reply's ``usage`` counts; None for what it does not give."""
    usage = reply.get("usage") if isinstance(reply, dict) else None
    if not isinstance(usage, dict):
        return None, None
    read, written = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (read if isinstance(read, int) else None), (written if isinstance(written, int) else None)


#: bytes asked for per read of a reply's body
_READ_CHUNK = 1 << 16


def _read_by(response: Any, end: float) -> bytes:
    """The body of ``response``, read a chunk at a time until ``end`` (a :func:`time.monotonic`
    instant), then a :class:`TimeoutError`: urlopen's timeout bounds each read of the socket, so
    a server that sends a byte a second would otherwise hold the request for as long as it likes."""
    chunks = []
    while chunk := response.read1(_READ_CHUNK):
        chunks.append(chunk)
        if time.monotonic() > end:
            raise TimeoutError("the reply's body was still coming in when the request's time ran out")
    return b"".join(chunks)


class _Transient(Exception):
    """A failure worth another try: timeouts, refused connections, 429 and 5xx answers."""


class OpenAIChatLM(LanguageModel):
    """An OpenAI-compatible server, over plain HTTP with tenacity retries: ``/chat/completions``,
    or ``/completions`` where a ``template`` says how to write the prompt (the module doc).

    Log-probabilities of generated tokens come back when asked for and the server gives them.
    :meth:`beam_search` returns distinct sampled answers (``sample_temperature``), asking again
    where a server returns fewer than asked for; ``allowed_tokens`` is refused. Several prompts
    are requested ``concurrency`` at a time.
    """

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_OPENAI_BASE,
        *,
        api_key: str | None = None,
        template: str | None = None,
        timeout: float = 120.0,
        retries: int = 5,
        retry_wait: float = 1.0,
        sample_temperature: float = 0.7,
        concurrency: int = 8,
    ) -> None:
        if not model:
            raise InvalidInputError("a model server needs a model name: openai:MODEL[@URL]")
        self.name = f"{OPENAI_PREFIX}{model}@{base_url}"
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.format = completion_format(template)
        #: where generations go: the chat route, or the completions route with a template
        self.url = self.base_url + ("/chat/completions" if self.format is None else "/completions")
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.retry_wait = retry_wait
        self.sample_temperature = sample_temperature
        self.concurrency = concurrency
        self.tokens = TokenCount()

    # -- HTTP
    def _post_once(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        deadlines.check()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
        timeout = self._timeout()
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                payload = _read_by(response, time.monotonic() + timeout)
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:500]
            if e.code in _TRANSIENT_STATUS:
                raise _Transient(f"HTTP {e.code}: {detail}") from e
            raise KGQAError(f"{url} answered HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise _Transient(f"{type(e).__name__}: {e}") from e
        try:
            return parse_json(payload.decode("utf-8"))
        except ValueError as e:  # not UTF-8, not JSON, or nested too deep
            raise KGQAError(f"{url} answered with a body that is not JSON ({e}): {clipped(repr(payload), 300)}") from e

    def _timeout(self) -> float:
        """Seconds one request may wait for the server: ``timeout``, cut to the time left
        before the context's deadline (:mod:`engine.deadlines`)."""
        left = deadlines.remaining()
        return self.timeout if left is None else min(self.timeout, left)

    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        backoff = wait_exponential(multiplier=self.retry_wait, max=30)

        def wait(state: RetryCallState) -> float:  # not past the deadline: the next attempt stops there
            left = deadlines.remaining()
            return backoff(state) if left is None else min(backoff(state), left)

        retrying = Retrying(
            stop=stop_after_attempt(self.retries),
            wait=wait,
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            reply = retrying(self._post_once, url, body)
        except _Transient as e:
            raise KGQAError(f"{url} failed {self.retries} times, last: {e}; is the server up?") from e
        self.tokens.add(*_usage(reply))
        return reply

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``fn`` over ``items`` in order, ``concurrency`` requests at a time, each in a copy of
        the caller's context (its deadline)."""
        if len(items) <= 1 or self.concurrency <= 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(min(self.concurrency, len(items))) as pool:
            futures = [pool.submit(contextvars.copy_context().run, fn, item) for item in items]
            return [f.result() for f in futures]

    # -- generation
    def _prompt(self, prompt: str) -> str:
        """The completions route's prompt text (the template filled in)."""
        assert self.format is not None
        return self.format[0].replace("{prompt}", prompt)

    def _request(self, prompt: str, *, n: int, temperature: float, max_new_tokens: int, logprobs: bool) -> list[Generation]:
        """One request for ``n`` generations; a server may return fewer."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_new_tokens, "temperature": temperature, "n": n}
        if self.format is None:
            body["messages"] = [{"role": "user", "content": prompt}]
            if logprobs:
                body["logprobs"] = True
        else:
            body["prompt"] = self._prompt(prompt)
            if logprobs:
                body["logprobs"] = 1  # the legacy API: how many alternatives per token besides the chosen one
        reply = self._post(self.url, body)
        try:
            out = [self._generation(choice, logprobs) for choice in reply["choices"]]
            read, written = _usage(reply)
            if len(out) == 1 and read is not None:
                out[0] = dataclasses.replace(out[0], prompt_tokens=read, completion_tokens=written)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise KGQAError(f"{self.url} returned an unexpected reply: {str(reply)[:300]}") from e
        if not out:
            raise KGQAError(f"{self.url} returned no choices: {str(reply)[:300]}")
        for generation in out:  # a JSON \ud800 escape reads as a lone surrogate, which no output file takes
            try:
                validate_text(generation.text, f"{self.url} returned the text")
            except InvalidInputError as e:
                raise KGQAError(str(e)) from None
        return out

    def _generation(self, choice: dict[str, Any], logprobs: bool) -> Generation:
        found = (choice.get("logprobs") or {}) if logprobs else {}
        if self.format is None:
            text = choice["message"].get("content") or ""
            pairs = [(t["token"], t["logprob"]) for t in found.get("content") or []]
        else:
            text = choice["text"] or ""
            pairs = list(zip(found.get("tokens") or [], found.get("token_logprobs") or []))
        tokens = tuple(TokenLogprob(t, float(lp)) for t, lp in pairs) if pairs else None
        return Generation(text.strip(), sum(t.logprob for t in tokens) if tokens else None, tokens)

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 256,
        logprobs: bool = False,
        allowed_tokens: AllowedTokens | None = None,
        stop: StopWhen | None = None,
    ) -> Generation:
        """Greedy decoding (temperature 0); the server returns the whole text, ``stop`` unused."""
        self._refuse_constraints(allowed_tokens)
        return self._request(prompt, n=1, temperature=0.0, max_new_tokens=max_new_tokens, logprobs=logprobs)[0]

    def generate_batch(self, prompts: Sequence[str], *, max_new_tokens: int = 256, stop: BatchStop = None) -> list[Generation]:
        """:meth:`generate` of each prompt, requested concurrently."""
        per_prompt_stops(stop, len(prompts))  # the same check as a local model's; the server returns whole texts
        return self._map(lambda p: self.generate(p, max_new_tokens=max_new_tokens), list(prompts))

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
        """``num_beams`` sampled answers (asked for again where the server returns fewer than
        ``n``), the distinct ones, best first where the server gives log-probabilities."""
        self._refuse_constraints(allowed_tokens)
        samples: list[Generation] = []
        while len(samples) < num_beams:
            samples += self._request(
                prompt, n=num_beams - len(samples), temperature=self.sample_temperature,
                max_new_tokens=max_new_tokens, logprobs=True,
            )
        distinct: dict[str, Generation] = {}
        for g in sorted(samples, key=lambda g: -(g.score if g.score is not None else float("-inf"))):
            distinct.setdefault(g.text, g)
        return list(distinct.values())[: num_return or num_beams]

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
        """:meth:`beam_search` of each prompt, requested concurrently."""
        for rule in allowed_tokens or ():
            self._refuse_constraints(rule)
        return self._map(
            lambda p: self.beam_search(p, num_beams=num_beams, num_return=num_return, max_new_tokens=max_new_tokens),
            list(prompts),
        )

    def _refuse_constraints(self, allowed_tokens: AllowedTokens | None) -> None:
        if allowed_tokens is not None:
            raise UnsupportedOperationError(
                f"{self.name}: a model server cannot constrain decoding token by token: use a local model"
            )

    # -- scoring given text
    def token_logprobs(self, prompt: str, continuation: str) -> list[TokenLogprob]:
        head, _ = self._scoring_format(eos=False)
        return self._echoed(head.replace("{prompt}", prompt), continuation)

    def score_batch(self, prompt: str, continuations: Sequence[str], *, eos: bool = False) -> list[list[float]]:
        return self.score_many([(prompt, continuations)], eos=eos)[0]

    def score_many(self, requests: Sequence[tuple[str, Sequence[str]]], *, eos: bool = False) -> list[list[list[float]]]:
        """Each continuation's token log-probabilities (with ``eos``, of the template's end
        text after it too), one echoed ``/completions`` request per continuation, the requests
        of every prompt sent concurrently. A token that spans the end of the prompt and the
        start of the continuation counts for the continuation."""
        head, end = self._scoring_format(eos)
        after = end if eos and end else ""
        pairs = [(head.replace("{prompt}", prompt), c + after) for prompt, continuations in requests for c in continuations]
        flat = iter(self._map(lambda pair: [t.logprob for t in self._echoed(*pair)], pairs))
        return [[next(flat) for _ in continuations] for _, continuations in requests]

    def _scoring_format(self, eos: bool) -> tuple[str, str | None]:
        if self.format is None:
            raise UnsupportedOperationError(
                f"{self.name}: the chat route cannot score given text; name the model's prompt format with "
                f"--prompt-template (a string with {{prompt}}, and {ANSWER} before the text that ends an answer) "
                "to score over /completions"
            )
        head, end = self.format
        if eos and end is None:
            raise UnsupportedOperationError(
                f"{self.name}: scoring an option as the whole answer needs the text that ends an answer: "
                f"write it after {ANSWER} in the prompt template (e.g. {ANSWER}<|im_end|>)"
            )
        return head, end

    def _echoed(self, context: str, continuation: str) -> list[TokenLogprob]:
        """The log-probabilities of the tokens of ``continuation`` after ``context``, from the
        server's echo of the prompt (``max_tokens`` 1: some servers refuse 0; the generated
        token is dropped)."""
        text = context + continuation
        url = self.base_url + "/completions"
        body = {"model": self.model, "prompt": text, "max_tokens": 1, "temperature": 0.0, "echo": True, "logprobs": 1}
        reply = self._post(url, body)
        try:
            choice = reply["choices"][0]
            found = choice.get("logprobs") or {}
            tokens, logprobs, offsets = found.get("tokens"), found.get("token_logprobs"), found.get("text_offset")
            echoed = (choice.get("text") or "").startswith(text)
        except (KeyError, IndexError, TypeError, AttributeError) as e:
            raise KGQAError(f"{url} returned an unexpected reply: {str(reply)[:300]}") from e
        if not (tokens and logprobs and offsets and echoed):
            raise UnsupportedOperationError(
                f"{url} returned no log-probabilities of the prompt: the server does not echo them "
                "(`echo` with `logprobs`, as vLLM does), so it cannot score given text"
            )
        out = []
        for i, (token, logprob, offset) in enumerate(zip(tokens, logprobs, offsets)):
            if offset >= len(text):
                break  # the generated token
            token_end = offsets[i + 1] if i + 1 < len(offsets) else offset + len(token)
            if token_end > len(context):
                if logprob is None:
                    raise KGQAError(f"{url} gave no log-probability for {token!r}: the prompt before the scored text is empty")
                out.append(TokenLogprob(token, float(logprob)))
        return out
