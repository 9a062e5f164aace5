"""RoG's prompts, verbatim (the released checkpoint ``rmanluo/RoG`` expects them), and the
plan format ``<PATH>r1<SEP>r2</PATH>``.

The paper gives the templates' words; the line breaks follow the released code
(``Reasoning Paths:\\n…\\n\\nQuestion:\\n…``, a ``?`` added to a question without one).
"""
from __future__ import annotations

import ast
import re
from collections.abc import Sequence

PATH_OPEN, PATH_SEP, PATH_CLOSE = "<PATH>", "<SEP>", "</PATH>"

PLANNING_INSTRUCTION = "Please generate a valid relation path that can be helpful for answering the following question: "
REASONING_INSTRUCTION = (
    "Based on the reasoning paths, please answer the given question. "
    "Please keep the answer as simple as possible and return all the possible answers as a list."
)
EXPLANATION_INSTRUCTION = (
    "Based on the reasoning paths, please answer the given question and explain why. Here are some examples:"
)

#: the explanation prompt's few-shot example, after the paper's case study (Table 6)
EXPLANATION_EXAMPLES = """Reasoning Paths:
1946 World Series → sports.sports_team.championships → St. Louis Cardinals → sports.sports_team.arena_stadium → Busch Stadium
1946 World Series → sports.sports_team.championships → St. Louis Cardinals → sports.sports_team.arena_stadium → Roger Dean Stadium

Question:
Where is the home stadium of the team who won the 1946 World Series championship?

Answer:
Busch Stadium

Explanation:
The path 1946 World Series → sports.sports_team.championships → St. Louis Cardinals tells that the St. Louis Cardinals won the 1946 World Series, and St. Louis Cardinals → sports.sports_team.arena_stadium → Busch Stadium gives their home stadium. Roger Dean Stadium is a training ground, not the home stadium."""

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


def planning_prompt(question: str) -> str:
    return PLANNING_INSTRUCTION + question


def _question(question: str) -> str:
    return question if question.endswith("?") else question + "?"


def reasoning_prompt(question: str, paths: Sequence[str]) -> str:
    """The reasoning prompt with one rendered path (``e0 → r1 → e1 → …``) per line."""
    return f"{REASONING_INSTRUCTION}\n\nReasoning Paths:\n" + "\n".join(paths) + f"\n\nQuestion:\n{_question(question)}"


def explanation_prompt(question: str, paths: Sequence[str], examples: str = EXPLANATION_EXAMPLES) -> str:
    """The explanation variant: the same paths and question after few-shot examples."""
    return (
        f"{EXPLANATION_INSTRUCTION}\n\n{examples}\n\nReasoning Paths:\n" + "\n".join(paths) + f"\n\nQuestion:\n{_question(question)}"
    )


def format_plan(relations: Sequence[str]) -> str:
    return PATH_OPEN + PATH_SEP.join(relations) + PATH_CLOSE


def parse_plan(text: str) -> list[str] | None:
    """The relations of the first ``<PATH>…</PATH>`` in a generation, or None when there is none.
    Found by two scans, not a lazy regex, which would scan to the end from every ``<PATH>`` of
    a reply that never closes one."""
    start = text.find(PATH_OPEN)
    end = text.find(PATH_CLOSE, start + len(PATH_OPEN)) if start >= 0 else -1
    if end < 0:
        return None
    relations = [r.strip() for r in text[start + len(PATH_OPEN):end].split(PATH_SEP)]
    return [r for r in relations if r] or None


def parse_answers(text: str) -> list[str]:
    """The answers in a reasoning output, best first: a Python/JSON list, else one per line
    (bullets and numbering removed); the explanation variant's ``Answer:`` block when present."""
    if "Answer:" in text:
        text = text.split("Answer:", 1)[1].split("Explanation:", 1)[0]
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        try:
            value = ast.literal_eval(text)
        # Python's parser refuses nesting too deep for it with a RecursionError or a MemoryError
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            value = None
        if isinstance(value, list):
            return list(dict.fromkeys(str(v).strip() for v in value if str(v).strip()))
    lines = (_BULLET.sub("", line).strip() for line in text.splitlines())
    return list(dict.fromkeys(line for line in lines if line))
