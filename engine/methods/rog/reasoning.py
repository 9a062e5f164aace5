"""Reasoning: answers from the grounded paths, by an LLM (RoG's reasoning or explanation
prompt, any model of :mod:`engine.models.lm`) or by the path ends alone (RoG w/o reasoning)."""
from __future__ import annotations

from collections.abc import Sequence

from engine.errors import UnsupportedOperationError
from engine.models.lm import LanguageModel
from engine.methods.rog.prompts import explanation_prompt, parse_answers, reasoning_prompt

REASONING_MODES = ("paths", "llm", "explain")


def _token_count(lm: LanguageModel, text: str) -> int:
    try:
        return len(lm.encode(text))
    except UnsupportedOperationError:  # chat endpoints: about four characters a token
        return len(text) // 4 + 1


def fit_paths(lm: LanguageModel, prompt: str, paths: Sequence[str], max_prompt_tokens: int | None) -> list[str]:
    """The first paths that keep ``prompt`` plus the paths within ``max_prompt_tokens``
    (RoG drops paths the same way, after a shuffle, to fit its 4,096-token window)."""
    if max_prompt_tokens is None:
        return list(paths)
    used = _token_count(lm, prompt)
    kept = []
    for path in paths:
        used += _token_count(lm, path + "\n")
        if used > max_prompt_tokens:
            break
        kept.append(path)
    return kept


def reason(
    lm: LanguageModel,
    items: Sequence[tuple[str, Sequence[str]]],
    *,
    explain: bool = False,
    max_new_tokens: int = 128,
    max_prompt_tokens: int | None = 4096,
) -> list[tuple[list[str], str]]:
    """For each (question, rendered paths): the answers (best first) and the raw output of
    ``lm``. The prompts are decoded together (:meth:`LanguageModel.generate_batch`)."""
    build = explanation_prompt if explain else reasoning_prompt
    prompts = [build(question, fit_paths(lm, build(question, []), paths, max_prompt_tokens)) for question, paths in items]
    outputs = [g.text for g in lm.generate_batch(prompts, max_new_tokens=max_new_tokens)]
    return [(parse_answers(output), output) for output in outputs]
