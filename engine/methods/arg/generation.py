"""Logical-form generation: demonstrations chosen at random (ARG) or by BM25 similarity to the
question (ARG-R), the prompt, and K forms from a causal LM (``engine.models.lm``: a local
transformers model or an OpenAI-compatible endpoint), each cut to its first balanced
S-expression (a local model stops generating there)."""
from __future__ import annotations

import random
import re
from collections.abc import Sequence

from engine.methods.arg.candidates import with_names
from engine.methods.arg.prompts import Demo
from engine.models.lm import LanguageModel
from engine.sexpr import parse
from engine.sexpr.tree import entities
from engine.store import Store
from loaders.questions import Question

_WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text.replace(".", " ").replace("_", " "))]


class DemoPicker:
    """``random`` (one fixed draw, as ARG) or ``bm25`` (nearest training questions, as ARG-R)."""

    def __init__(self, pool: Sequence[Demo], n: int, mode: str = "bm25", seed: int = 0) -> None:
        from rank_bm25 import BM25Okapi

        if mode not in ("random", "bm25"):
            raise ValueError(f"demonstration mode {mode!r}: use random or bm25")
        self.pool, self.n, self.mode = list(pool), n, mode
        self.fixed = random.Random(seed).sample(self.pool, min(n, len(self.pool)))
        self.bm25 = BM25Okapi([tokens(d.question) or ["_"] for d in self.pool]) if self.pool and mode == "bm25" else None

    def pick(self, question: str) -> list[Demo]:
        if self.bm25 is None:
            return self.fixed
        scores = self.bm25.get_scores(tokens(question))
        best = sorted(range(len(self.pool)), key=lambda i: (-scores[i], i))[: self.n]
        return [self.pool[i] for i in reversed(best)]  # nearest last, closest to the question


def demo_pool(store: Store, candidates: Sequence[tuple[Question, str]], tests: Sequence[tuple[Question, str]]) -> list[Demo]:
    """Demonstrations from ``candidates`` (question, gold form with ids), none sharing its
    question text or its gold form with a test question (PathQuestion words each path three
    ways, so a paraphrase of a test question would otherwise hand the model its answer). Entity
    ids are replaced by names, as in the references."""
    test_texts = {_key(q.question) for q, _ in tests}
    test_forms = {parse(form) for _, form in tests}
    kept = [(q, form) for q, form in candidates if _key(q.question) not in test_texts and parse(form) not in test_forms]
    ids = sorted({i for _, form in kept for i in entities(parse(form))})
    names = store.names(ids) if ids else {}
    return [Demo(q.question, with_names(parse(form), names)) for q, form in kept]


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def first_sexpr(text: str) -> str | None:
    """The first balanced ``( … )`` in generated text, or None."""
    start = text.find("(")
    if start < 0:
        return None
    depth = 0
    quoted = False
    for i in range(start, len(text)):
        c = text[i]
        if c == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif not quoted and c == "(":
            depth += 1
        elif not quoted and c == ")":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return None


def generate_outputs(lm: LanguageModel, prompts: Sequence[str], k: int = 1) -> list[list[str]]:
    """K raw generations per prompt: greedy for K = 1, all prompts decoded together; beam
    search per prompt otherwise. Each ends at its first balanced form."""
    if k == 1:
        return [[g.text] for g in lm.generate_batch(prompts, max_new_tokens=128, stop=_complete)]
    return [[g.text for g in beams] for beams in lm.beam_search_batch(prompts, num_beams=k, num_return=k, max_new_tokens=128, stop=_complete)]


def _complete(text: str) -> bool:
    """Generation ends at the first balanced S-expression."""
    return first_sexpr(text) is not None


def forms_of(outputs: Sequence[str]) -> list[str]:
    """The first S-expression of each output; outputs without one kept out."""
    return [form for form in (first_sexpr(o) for o in outputs) if form is not None]
