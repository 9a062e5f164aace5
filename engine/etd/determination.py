"""Determination: a language model picks among the lettered reference answers, or the GNN's
top candidate stands (GNN-only mode).

Any model of the engine's language-model layer (``engine.models.lm.load_lm``) can determine;
the chosen label is parsed from its free text (``The correct answer is A. 1989``), else an
option whose text it names, else its own answer (the prompt allows answering from its own
knowledge).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.etd.prompts import LABELS

if TYPE_CHECKING:
    from engine.models.lm import LanguageModel

MAX_NEW_TOKENS = 64

_STATED = re.compile(r"(?:answer is|answer:|answer would be)\s*[\"'(*]*([A-Z])\b(?![a-z'])", re.IGNORECASE)
_LEADING = re.compile(r"^\W*([A-Z])(?:[.):]|\s*$|\s)")
_ANYWHERE = re.compile(r"(?<![A-Za-z])([A-Z])\.\s")


@dataclass(frozen=True)
class Determination:
    """The chosen option (``index`` into the options, None for a free answer) and the model's text."""

    index: int | None
    answer: str
    output: str


def parse_choice(output: str, options: Sequence[str]) -> Determination:
    """The option the model chose: a stated label, a leading label, a label written ``X. ``, or
    the longest option text it mentions; else its first line as a free answer."""
    labels = LABELS[: len(options)]
    for pattern in (_STATED, _LEADING, _ANYWHERE):
        for match in pattern.finditer(output.strip()):
            label = match.group(1).upper()
            if label in labels:
                index = labels.index(label)
                return Determination(index, options[index], output)
    lowered = output.lower()
    named = [i for i, text in enumerate(options) if text and text.lower() in lowered]
    if named:
        index = max(named, key=lambda i: len(options[i]))
        return Determination(index, options[index], output)
    first = output.strip().splitlines()[0].strip() if output.strip() else ""
    return Determination(None, first, output)


def determine(
    lm: LanguageModel, prompts: Sequence[str], options: Sequence[Sequence[str]], max_new_tokens: int = MAX_NEW_TOKENS
) -> list[Determination]:
    """Each prompt's choice among its options: the prompts decoded together (greedy,
    :meth:`LanguageModel.generate_batch`), each answer parsed."""
    outputs = lm.generate_batch(prompts, max_new_tokens=max_new_tokens)
    return [parse_choice(g.text, opts) for g, opts in zip(outputs, options, strict=True)]
