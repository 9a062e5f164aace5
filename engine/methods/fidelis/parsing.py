"""Reading the LLM's replies: the F.1 plan (JSON), F.4 indices, F.2/F.3 yes or no, F.5 answers.

Small models rarely write clean JSON, so the plan parser takes the first JSON object it can
find (code fences and chatter around it are ignored) and, failing that, falls back to the
question itself as keywords and statement; the fallback is reported, never hidden.
"""
from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from engine.methods.fidelis.prompts import PLACEHOLDER

_INT = re.compile(r"\d+")
_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class Plan:
    """F.1's three parts; ``parsed`` is False when the reply was unusable and the question
    stands in for keywords and statement; ``partial`` when they were read from JSON cut short."""

    keywords: list[str]
    steps: list[str]
    statement: str
    parsed: bool = True
    partial: bool = False  # recovered from JSON cut short
    raw: str = field(default="", compare=False)

    @property
    def keyword_text(self) -> str:
        """The keywords joined into the one string Path-RAG embeds (Eq. 2's K)."""
        return ", ".join(self.keywords)

    @property
    def context(self) -> str:
        """The planning steps as F.4's ``plan_context``."""
        return ", ".join(self.steps)

    def conclusion(self, answer: str) -> str:
        """The declarative statement with its placeholder filled (F.2's conclusion)."""
        statement = self.statement if PLACEHOLDER in self.statement else f"{self.statement.rstrip('.')} {PLACEHOLDER}"
        return statement.replace(PLACEHOLDER, answer).strip().rstrip(".")


# a model's reply may nest without end, or hold a number of more digits than Python reads
# (a ValueError, as json's own errors are)
_NOT_JSON = (ValueError, RecursionError)


class _ObjectsOnce(json.JSONDecoder):
    """A decoder that reads each JSON object of one text once: what an object starting at a
    position came to (its value and end, or its error) is kept, so a later decode that starts
    at, or comes to, that ``{`` takes it as it is. Starting at every ``{`` of a reply nested
    many levels deep (``{"k": {"k": …``) then reads the reply about once, not once per ``{``."""

    def __init__(self) -> None:
        super().__init__()
        self._objects: dict[int, tuple[Any, int] | Exception] = {}
        self.parse_object = self._object
        self.scan_once = json.scanner.py_make_scanner(self)

    def _object(self, s_and_end: tuple[str, int], *args: Any) -> tuple[Any, int]:
        start = s_and_end[1]
        if start not in self._objects:
            try:
                self._objects[start] = json.decoder.JSONObject(s_and_end, *args)
            except _NOT_JSON as e:
                self._objects[start] = e
        found = self._objects[start]
        if isinstance(found, Exception):
            raise found.with_traceback(None)  # not a traceback that grows with every raise
        return found


def _value_at(text: str, start: int, decoder: json.JSONDecoder) -> object:
    """The JSON value that starts at ``start`` of ``text``; None where none does."""
    try:
        return decoder.raw_decode(text, start)[0]
    except _NOT_JSON:
        return None


def _json_objects(text: str) -> Iterator[dict]:
    """Every JSON object that starts at a ``{`` of ``text``, in order."""
    decoder = _ObjectsOnce()
    for match in re.finditer(r"\{", text):
        value = _value_at(text, match.start(), decoder)
        if isinstance(value, dict):
            yield value


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value.strip()] if value.strip() else []
    if isinstance(value, list):
        return [str(v).strip() for v in value if isinstance(v, (str, int, float)) and str(v).strip()]
    return []


_STRING = r'"((?:[^"\\]|\\.)*)"'


def _cut_field(reply: str, key: str) -> list[str]:
    """The complete strings of a field of JSON cut short (the reply ran out of tokens): the
    quoted strings after ``"key":`` up to the next key or the end."""
    match = re.search(rf'"{key}"\s*:\s*', reply)
    if not match:
        return []
    rest = reply[match.end():]
    nxt = re.search(r'"(keywords|planning_steps|declarative_statement)"\s*:', rest)
    body = rest[: nxt.start()] if nxt else rest
    try:
        return [json.loads(f'"{m.group(1)}"').strip() for m in re.finditer(_STRING, body)]
    except json.JSONDecodeError:
        return []


def _plan_of(obj: dict, question: str, reply: str) -> Plan | None:
    """The plan a JSON object gives, or None when it has neither keywords nor a statement."""
    keywords = _strings(obj.get("keywords"))
    statement = obj.get("declarative_statement")
    statement = statement.strip() if isinstance(statement, str) else ""
    if not (keywords or statement):
        return None
    return Plan(keywords=keywords or [question], steps=_strings(obj.get("planning_steps")), statement=statement or question, raw=reply)


def parse_plan(reply: str, question: str) -> Plan:
    """The first JSON object with usable ``keywords`` (or a ``declarative_statement``); else
    the complete strings of JSON cut short (``partial``; repeated keywords kept once); else the
    fallback plan: the question as the keywords and the statement."""
    for obj in _json_objects(reply):
        plan = _plan_of(obj, question, reply)
        if plan is not None:
            return plan
    keywords = list(dict.fromkeys(k for k in _cut_field(reply, "keywords") if k))
    if keywords:
        statement = next(iter(_cut_field(reply, "declarative_statement")), "") or question
        steps = list(dict.fromkeys(_cut_field(reply, "planning_steps")))
        return Plan(keywords=keywords, steps=steps, statement=statement, partial=True, raw=reply)
    return Plan(keywords=[question], steps=[], statement=question, parsed=False, raw=reply)


def _candidates_named(reply: str, n_candidates: int) -> Iterator[tuple[int, re.Match[str]]]:
    """Each number of ``reply`` that is a 1-based index of a candidate, as a 0-based position,
    with its match. A number with more digits than any index is out of range without being
    read: Python refuses to read one of thousands of digits."""
    longest = len(str(n_candidates))
    for match in _INT.finditer(reply):
        digits = match.group().lstrip("0")
        if len(digits) <= longest and 0 < int(digits or "0") <= n_candidates:
            yield int(digits) - 1, match


def parse_indices(reply: str, n_candidates: int, k: int) -> list[int]:
    """F.4's answer: the first ``k`` distinct 1-based indices in range, as 0-based positions
    (numbers out of range are dropped)."""
    chosen: list[int] = []
    for i, _ in _candidates_named(reply, n_candidates):
        if i not in chosen:
            chosen.append(i)
            if len(chosen) == k:
                break
    return chosen


def parse_yes(reply: str) -> bool | None:
    """Yes (True) or no (False) from the first of those words in the reply; None when neither
    appears (counted as no by the caller, as the authors' code does)."""
    for word in _WORD.findall(reply):
        lowered = word.lower()
        if lowered in ("yes", "no"):
            return lowered == "yes"
    return None


def parse_answers(reply: str) -> list[str]:
    """F.5's answer split on commas, newlines and semicolons (the code splits on ``", "``),
    a leading ``Answer:`` dropped, duplicates removed."""
    text = re.sub(r"^\s*(answer|a)\s*:\s*", "", reply.strip(), flags=re.IGNORECASE)
    parts = [p.strip().strip(".").strip() for p in re.split(r",|\n|;", text)]
    return list(dict.fromkeys(p for p in parts if p))


# ----------------------------------------------------------------------------- when to stop
# Each ``*_settled`` says whether its parser's reading of a reply can no longer change however
# the model goes on, so generation may stop there (``LanguageModel.generate_batch``'s ``stop``)
# with the very answer the whole reply would give.

def plan_settled(reply: str) -> bool:
    """The reply's first ``{`` opens a complete JSON object that :func:`parse_plan` takes: it
    reads objects in order and stops at the first usable one, so later text is never read."""
    start = reply.find("{")
    if start < 0:
        return False
    value = _value_at(reply, start, _ObjectsOnce())
    return isinstance(value, dict) and _plan_of(value, "", reply) is not None


def indices_settled(reply: str, n_candidates: int, k: int) -> bool:
    """:func:`parse_indices` has all it can take: ``k`` distinct indices in range (or every
    candidate), the last followed by something other than a digit, so it cannot grow into
    another number; the numbers before it are complete, and those after are never read."""
    wanted = min(k, n_candidates)
    if wanted <= 0:
        return True
    chosen: set[int] = set()
    for i, match in _candidates_named(reply, n_candidates):
        chosen.add(i)
        if len(chosen) == wanted:
            return match.end() < len(reply)
    return False


def verdict_settled(reply: str) -> bool:
    """:func:`parse_yes` has its word for good: the first "yes" or "no" is followed by a
    non-letter ("no" could still become "none")."""
    for match in _WORD.finditer(reply):
        if match.group().lower() in ("yes", "no"):
            return match.end() < len(reply)
    return False
