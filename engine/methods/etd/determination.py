"""Determination: a language model picks among the lettered reference answers, or the GNN's
top candidate stands (GNN-only mode).

Any model of the engine's language-model layer (``engine.models.lm.load_lm``) can determine;
the chosen label is parsed from its free text (``The correct answer is A. 1989``), else an
option whose text it names, else its own answer (the prompt allows answering from its own
knowledge).
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.methods.etd.prompts import LABELS

if TYPE_CHECKING:
    from engine.models.lm import LanguageModel

MAX_NEW_TOKENS = 64

# "the answer is B", "answer: B" (the label a capital: "the answer is a comedy" names no option)
_STATED = re.compile(r"(?i:answer is:?|answer:|answer would be:?)\s*[\"'(*]*([A-Z])\b(?![a-z'])")
_LEADING = re.compile(r"^\W*([A-Z])(?:[.):]|\s*$|\s)")
# the output opens with a label written as the prompt writes its labels ("B. 1998", "(B)", "B:")
_OPENING = re.compile(r"^\W*([A-Z])[.):]")
_ANYWHERE = re.compile(r"(?<![A-Za-z])([A-Z])\.\s")


@dataclass(frozen=True)
class Determination:
    """The chosen option (``index`` into the options, None for a free answer) and the model's text."""

    index: int | None
    answer: str
    output: str


def _option(match: re.Match | None, options: Sequence[str], output: str) -> Determination | None:
    """The option whose label ``match`` found, if it is one of the options' labels."""
    if match is None or match.group(1) not in LABELS[: len(options)]:
        return None
    index = LABELS.index(match.group(1))
    return Determination(index, options[index], output)


def _opening(text: str, options: Sequence[str], output: str) -> Determination | None:
    """The option whose label ``text`` opens with, written as a label (``B. 1998``)."""
    return _option(_OPENING.match(text), options, output)


def _labelled(text: str, options: Sequence[str], output: str) -> Determination | None:
    """The option whose label ``text`` gives: stated (``the answer is B``), leading (``B 1998``)
    or written ``B. `` anywhere, in that order; None if it gives none."""
    for pattern in (_STATED, _LEADING, _ANYWHERE):
        for match in pattern.finditer(text):
            found = _option(match, options, output)
            if found is not None:
                return found
    return None


def _first_labelled_lines(lines: Sequence[str], options: Sequence[str], output: str) -> Determination | None:
    """:func:`_labelled` of the fewest first ``lines`` that give a label; None if all of them
    give none. Once some first lines give a label, more lines still do, so the fewest are found
    by bisection: a reply of many lines is read a few times, not once per line."""

    def of(end: int) -> Determination | None:
        return _labelled("\n".join(lines[:end]), options, output)

    ends = range(1, len(lines) + 1)
    first = bisect.bisect_left(ends, True, key=lambda end: of(end) is not None)
    return of(ends[first]) if first < len(ends) else None


def parse_choice(output: str, options: Sequence[str]) -> Determination:
    """The answer the output states first: the label it opens with (``B. 1998``, the format the
    prompt asks for: "the label and content of the answer"); else its lines up to the first one
    that gives a label (:func:`_labelled`); else the longest option text it mentions; else its
    first line as a free answer (the prompt allows answering from the model's own knowledge).
    What the model writes after its label (the paper's Llama-2 explains its choice; a small model
    echoes the options back) does not change the answer, so decoding may stop there
    (:func:`answer_settled`)."""
    text = output.strip()
    found = _opening(text, options, output)
    if found is not None:
        return found
    lines = text.splitlines()
    found = _first_labelled_lines(lines, options, output)
    if found is not None:
        return found
    lowered = output.lower()
    named = [i for i, option in enumerate(options) if option and option.lower() in lowered]
    if named:
        index = max(named, key=lambda i: len(options[i]))
        return Determination(index, options[index], output)
    return Determination(None, lines[0].strip() if lines else "", output)


def answer_settled(options: Sequence[str]) -> Callable[[str], bool]:
    """A stop rule for a determination over ``options``: the text opens with a label, or holds
    a whole line (more text follows it) that gives one, so :func:`parse_choice`'s answer is
    settled."""

    def settled(text: str) -> bool:
        if _opening(text, options, "") is not None:
            return True
        head, newline, _ = text.rpartition("\n")
        return bool(newline) and _labelled(head, options, "") is not None

    return settled


def determine(
    lm: LanguageModel, prompts: Sequence[str], options: Sequence[Sequence[str]], max_new_tokens: int = MAX_NEW_TOKENS
) -> list[Determination]:
    """Each prompt's choice among its options: the prompts decoded together (greedy,
    :meth:`LanguageModel.generate_batch`), each until its answer is settled
    (:func:`answer_settled`), and parsed."""
    outputs = lm.generate_batch(prompts, max_new_tokens=max_new_tokens, stop=[answer_settled(o) for o in options])
    return [parse_choice(g.text, opts) for g, opts in zip(outputs, options, strict=True)]
