"""ARG-KBQA's few-shot prompt (Module B): demonstrations, the top-k references, the question."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

INSTRUCTION = (
    "Translate the question into an S-expression logical form over the knowledge base. "
    "Entities are written by name in brackets. Related logical forms retrieved from the "
    "knowledge base are given as references."
)


@dataclass(frozen=True)
class Demo:
    """A training question with its gold S-expression, entities written by name."""

    question: str
    sexpr: str


def build_prompt(question: str, references: Sequence[str], demos: Sequence[Demo]) -> str:
    parts = [INSTRUCTION, ""]
    for demo in demos:
        parts += [f"Question: {demo.question}", f"Logical Form: {demo.sexpr}", ""]
    if references:
        parts.append("References:")
        parts += [f"- {r}" for r in references]
        parts.append("")
    parts += [f"Question: {question}", "Logical Form:"]
    return "\n".join(parts)
