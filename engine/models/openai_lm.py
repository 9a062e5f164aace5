"""An OpenAI-compatible chat endpoint (vLLM, Ollama, OpenAI) as a
:class:`engine.models.lm.LanguageModel`: :class:`OpenAIChatLM` posts to ``/chat/completions``
over plain HTTP, retrying transient failures (timeouts, refused connections, 429 and 5xx answers)
with tenacity's exponential backoff, and returns token log-probabilities where the server gives
them. Such an endpoint has no beam search and no token-level constraints: beam search returns
distinct sampled answers, and a constraint is refused. ``openai:MODEL[@URL]`` names one
(:func:`engine.models.loading.load_lm`).
"""
from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from typing import Any

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from engine.errors import InvalidInputError, KGQAError, UnsupportedOperationError
from engine.models.lm import AllowedTokens, Generation, LanguageModel, StopWhen, TokenLogprob

#: a ``--model`` name that starts with this names a chat endpoint: ``openai:MODEL[@URL]``
OPENAI_PREFIX = "openai:"
DEFAULT_OPENAI_BASE = "https://api.openai.com/v1"

# HTTP statuses worth retrying: rate limits, overload, gateway hiccups
_TRANSIENT_STATUS = {408, 409, 429, 500, 502, 503, 504}


class _Transient(Exception):
    """A failure worth another try: timeouts, refused connections, 429 and 5xx answers."""


class OpenAIChatLM(LanguageModel):
    """An OpenAI-compatible ``/chat/completions`` endpoint, over plain HTTP with tenacity retries.

    Log-probabilities come back when asked for and the server gives them. Chat endpoints have
    no beam search and no token-level constraints: :meth:`beam_search` returns distinct sampled
    answers instead, and ``allowed_tokens`` is refused.
    """

    def __init__(
        self,
        model: str,
        base_url: str = DEFAULT_OPENAI_BASE,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        retries: int = 5,
        retry_wait: float = 1.0,
        sample_temperature: float = 0.7,
    ) -> None:
        if not model:
            raise InvalidInputError("an OpenAI-compatible model needs a model name: openai:MODEL[@URL]")
        self.name = f"{OPENAI_PREFIX}{model}@{base_url}"
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.retry_wait = retry_wait
        self.sample_temperature = sample_temperature

    def _post_once(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")[:500]
            if e.code in _TRANSIENT_STATUS:
                raise _Transient(f"HTTP {e.code}: {detail}") from e
            raise KGQAError(f"{self.url} answered HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise _Transient(f"{type(e).__name__}: {e}") from e

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        retrying = Retrying(
            stop=stop_after_attempt(self.retries),
            wait=wait_exponential(multiplier=self.retry_wait, max=30),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            return retrying(self._post_once, body)
        except _Transient as e:
            raise KGQAError(f"{self.url} failed {self.retries} times, last: {e}; is the server up?") from e

    def _chat(self, prompt: str, *, n: int, temperature: float, max_new_tokens: int, logprobs: bool) -> list[Generation]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "n": n,
        }
        if logprobs:
            body["logprobs"] = True
        reply = self._post(body)
        try:
            choices = reply["choices"]
            out = []
            for choice in choices:
                content = (choice.get("logprobs") or {}).get("content") if logprobs else None
                tokens = tuple(TokenLogprob(t["token"], float(t["logprob"])) for t in content) if content else None
                score = sum(t.logprob for t in tokens) if tokens else None
                out.append(Generation((choice["message"].get("content") or "").strip(), score, tokens))
            usage = reply.get("usage") or {}
            if len(out) == 1 and isinstance(usage.get("prompt_tokens"), int):
                out[0] = dataclasses.replace(
                    out[0], prompt_tokens=usage["prompt_tokens"], completion_tokens=usage.get("completion_tokens")
                )
            return out
        except (KeyError, TypeError, ValueError) as e:
            raise KGQAError(f"{self.url} returned an unexpected reply: {str(reply)[:300]}") from e

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 256,
        logprobs: bool = False,
        allowed_tokens: AllowedTokens | None = None,
        stop: StopWhen | None = None,
    ) -> Generation:
        if allowed_tokens is not None:
            raise UnsupportedOperationError(f"{self.name}: chat endpoints cannot constrain decoding token by token")
        return self._chat(prompt, n=1, temperature=0.0, max_new_tokens=max_new_tokens, logprobs=logprobs)[0]

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
        if allowed_tokens is not None:
            raise UnsupportedOperationError(f"{self.name}: chat endpoints cannot constrain decoding token by token")
        samples = self._chat(
            prompt, n=num_beams, temperature=self.sample_temperature, max_new_tokens=max_new_tokens, logprobs=True
        )
        distinct: dict[str, Generation] = {}
        for g in sorted(samples, key=lambda g: -(g.score if g.score is not None else float("-inf"))):
            distinct.setdefault(g.text, g)
        return list(distinct.values())[: num_return or num_beams]

