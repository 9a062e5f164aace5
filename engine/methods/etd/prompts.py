"""The determination prompt of EtD (the paper's Appendix D, verbatim) and its rendering."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine.methods.etd.evidence import Fact
from engine.render import term_text

TASK_DESCRIPTION = (
    "Given a question, and the reference answers with their correct probabilities and associated retrieved "
    "knowledge graph triples (entity, relation, entity) as related facts, you are asked to answer the question "
    "with this information and your own knowledge. If the reference answers contain the correct answer, please "
    "output the label and content of the answer; If not, please answer the question based on your own knowledge."
)
LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class Option:
    """One reference answer: its text, probability and evidence facts."""

    text: str
    probability: float
    facts: tuple[Fact, ...]


def render_fact(fact: Fact, names: Mapping[str, str | None] | None = None) -> str:
    return f"({term_text(fact.subject, names)}, {fact.relation}, {term_text(fact.object, names)})"


def render_prompt(question: str, options: Sequence[Option], names: Mapping[str, str | None] | None = None) -> str:
    """Task description, question and lettered reference answers, as in the paper's Figure 4:

    ``A. 1989 (correct probability: 0.996) {relevant facts: (Birdy, written_by, William Wharton), …}``
    """
    if len(options) > len(LABELS):
        raise ValueError(f"at most {len(LABELS)} reference answers, got {len(options)}")
    lines = [TASK_DESCRIPTION, f"Question: {question}", "Reference answers:"]
    for label, option in zip(LABELS, options):
        evidence = ", ".join(render_fact(f, names) for f in option.facts)
        lines.append(
            f"{label}. {option.text} (correct probability: {round(option.probability, 3)}) {{relevant facts: {evidence}}}"
        )
    return "\n".join(lines)
