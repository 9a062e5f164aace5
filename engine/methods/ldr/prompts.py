"""LDR's three prompts (Appendix F, Table 9), verbatim, and the option texts they are answered with.

The prompts are written as ``../shared/methods/LDR.md`` gives them: one paragraph, the
table's line breaks as single spaces. Answers (what the model scores):
- search: ``node+relation`` (``^relation`` against the stored direction), or ``None``;
- constraints: ``entity_2= KITT`` as the paper's case study prints them (``<=``, ``>=`` for
  ≤, ≥; ``num_3 max`` / ``num_3 min`` take no target), several joined by ``, ``, or
  ``No constrain``;
- answer: a node's name.
"""
from __future__ import annotations

from collections.abc import Sequence

NONE = "None"
NO_CONSTRAINT = "No constrain"

SEARCH = (
    "Below is a wikipedia question, you can retrieve a graph to help you answer the question. The retrieved graph "
    "information is given as information triple like (Entity1, Relation, Entity2), or only the name of the start "
    "entity. Decide which entity and corresponding relation to retrieve next, response in form of 'entity+relation'. "
    "Response 'None' if the retrieved graph is informative enough to answer the question. Question: {question} "
    "Retrieved graph: {graph} Next retrieve:"
)

_SUPPORT = (
    "Below is a question with a support graph presented as triples (entity A, relation, entity B). The entity name "
    "in the support graph is 'type_id'. 'Type' denotes the entity type, which includes four types: ordinary entity "
    "(entity), topic entity (topic), number (num), and date (date). 'Id' is an incremental identifier used to "
    "distinguish entities. "
)

CONSTRAINTS = (
    _SUPPORT + "Please match all the constrains with one of the entity in the support graph. Support graph: {graph} "
    "Question: {question} Constraints: {constraints} Determine result:"
)

ANSWER = (
    _SUPPORT + "Please select the answer from the support graph by choosing the right entity. Support graph: {graph} "
    "Question: {question} Answer entity:"
)


def search_prompt(question: str, graph: str) -> str:
    return SEARCH.format(question=question, graph=graph)


def constraint_prompt(question: str, graph: str, constraints: Sequence[str]) -> str:
    return CONSTRAINTS.format(graph=graph, question=question, constraints=", ".join(constraints))


def answer_prompt(question: str, graph: str) -> str:
    return ANSWER.format(graph=graph, question=question)


def stage_of(prompt: str) -> str:
    """Which stage a prompt of this module belongs to: ``search``, ``constraints`` or ``answer``."""
    for stage, template in (("search", SEARCH), ("constraints", CONSTRAINTS), ("answer", ANSWER)):
        if prompt.endswith(template.rsplit("}", 1)[1]):
            return stage
    raise ValueError("not an LDR prompt")
