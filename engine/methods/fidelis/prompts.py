"""FiDeLiS's prompts, verbatim from the paper's Appendix F (F.1-F.5), and their builders.

Each prompt is a system text and a user template. The language-model layer takes one prompt
text, so a prompt is the system text, a blank line, then the user text. The paper's
typographic quotes are written as ASCII quotes; its in-context few-shot examples are not
published in the paper and are left out (the builders take none).
"""
from __future__ import annotations

from collections.abc import Sequence

#: F.1 plan-and-solve: keywords, planning steps and a declarative statement as JSON
PLAN_SYSTEM = (
    "You are a helpful assistant designed to output JSON that aids in navigating a knowledge graph to answer a "
    "provided question. The response should include the following keys:\n"
    "(1) 'keywords': an exhaustive list of keywords or relation names that you would use to find the reasoning path "
    "from the knowledge graph to answer the question. Aim for maximum coverage to ensure no potential reasoning "
    "paths will be overlooked;\n"
    "(2) 'planning_steps': a list of detailed steps required to trace the reasoning path with. Each step should be "
    "a string instead of a dict.\n"
    "(3) 'declarative_statement': a string of declarative statement that can be transformed from the given query, "
    "For example, convert the question 'What do Jamaican people speak?' into the statement 'Jamaican people speak "
    "*placeholder*.' leave the *placeholder* unchanged; Ensure the JSON object clearly separates these components."
)
PLAN_USER = "Q: {Query}\nA:"

#: F.2 deductive verification (the stray quote mark is the paper's)
VERIFY_SYSTEM = (
    "You are asked to verify whether the reasoning step follows deductively from the question and the current "
    'reasoning path in a deductive manner. If yes return yes, if no, return no".'
)
VERIFY_USER = (
    "Whether the conclusion '{declarative_statement}' can be deduced from '{parsed_reasoning_path}', if yes, "
    "return yes, if no, return no.\nA:"
)

#: F.3 adequacy verification (ToG's criterion, the paper's alternative to F.2)
ADEQUACY_SYSTEM = (
    "You are asked to verify whether it's sufficient for you to answer the question with the following reasoning "
    "path. For each reasoning path, respond with 'Yes' if it is sufficient, and 'No' if it is not. Your response "
    "should be either 'Yes' or 'No'."
)
ADEQUACY_USER = (
    "Whether the reasoning path '{reasoning_path}' be sufficient to answer the query '{Query}', if yes, return "
    "yes, if no, return no.\nA:"
)

#: F.4 beam search: the LLM picks the indices of the best candidates
RANK_SYSTEM = (
    "Given a question and the starting entity from a knowledge graph, you are asked to retrieve reasoning paths "
    "from the given reasoning paths that are useful for answering the question."
)
RANK_USER = (
    "Considering the planning context {plan_context} and the given question {Query}, you are asked to choose the "
    "best {beam_width} reasoning paths from the following candidates with the highest probability to lead to a "
    "useful reasoning path for answering the question. {reasoning_paths}. Only return the index of the "
    "{beam_width} selected reasoning paths in a list.\nA:"
)

#: F.5 reasoning: the final answer from the finished paths
ANSWER_SYSTEM = (
    "Given a question and the associated retrieved reasoning path from a knowledge graph, you are asked to answer "
    "the following question based on the reasoning path and your knowledge. Only return the answer to the question."
)
ANSWER_USER = "Question: {Query}\nReasoning path: {reasoning_path}\nOnly return the answer to the question.\nA:"

PLACEHOLDER = "*placeholder*"


def _prompt(system: str, user: str) -> str:
    return f"{system}\n\n{user}"


def plan_prompt(question: str) -> str:
    return _prompt(PLAN_SYSTEM, PLAN_USER.format(Query=question))


def verify_prompt(statement: str, parsed_path: str) -> str:
    return _prompt(VERIFY_SYSTEM, VERIFY_USER.format(declarative_statement=statement, parsed_reasoning_path=parsed_path))


def adequacy_prompt(question: str, path: str) -> str:
    return _prompt(ADEQUACY_SYSTEM, ADEQUACY_USER.format(reasoning_path=path, Query=question))


def rank_prompt(question: str, plan_context: str, candidates: Sequence[str], beam_width: int) -> str:
    """Candidates numbered from 1, one per line (as the authors' code lists them)."""
    numbered = "\n".join(f"{i}: {text}" for i, text in enumerate(candidates, 1))
    return _prompt(
        RANK_SYSTEM,
        RANK_USER.format(plan_context=plan_context, Query=question, beam_width=beam_width, reasoning_paths=numbered),
    )


def answer_prompt(question: str, paths: Sequence[str]) -> str:
    return _prompt(ANSWER_SYSTEM, ANSWER_USER.format(Query=question, reasoning_path="\n".join(paths)))
