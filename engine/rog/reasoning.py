"""Reasoning: answers from the grounded paths, by an LLM (RoG's reasoning or explanation
prompt, any model of :mod:`engine.models.lm`) or by the path ends alone (RoG w/o reasoning)."""
from __future__ import annotations

from collections.abc import Sequence

from engine.models.lm import LanguageModel
from engine.rog.prompts import explanation_prompt, parse_answers, reasoning_prompt

REASONING_MODES = ("paths", "llm", "explain")


def reason(
    lm: LanguageModel, question: str, paths: Sequence[str], *, explain: bool = False, max_new_tokens: int = 128
) -> tuple[list[str], str]:
    """The answers (best first) and the raw output of ``lm`` given the rendered paths."""
    prompt = explanation_prompt(question, paths) if explain else reasoning_prompt(question, paths)
    output = lm.generate(prompt, max_new_tokens=max_new_tokens).text
    return parse_answers(output), output
