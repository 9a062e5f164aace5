"""Generation EM / F1 of ARG-KBQA over a dataset sample.

Test questions and demonstrations come from the same files but never overlap:
:func:`demo_pool` drops every candidate demonstration whose question text or gold form is
that of a test question (PathQuestion words each path three ways, so a paraphrase of a test
question would otherwise hand the model its answer). A demonstration is the question with its
gold S-expression, entity ids replaced by names as in the references (``with_names``; MetaQA
and PathQuestion ids have no separate name, so they stay as they are, in brackets).

Per question :func:`evaluate` runs :func:`engine.arg.pipeline.answer_question` and scores
EM (the executed, voted form against the gold form, as trees) and F1 (its answers against the
dataset's gold answers). ``gold_form_f1`` is the F1 of the gold form's own answers: the
ceiling F1 can reach when the form is right (MetaQA's 2-hop gold answers leave out the topic
entity, which e.g. ``(JOIN written_by (JOIN (R written_by) [X]))`` returns).
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.arg.alignment import Aligner
from engine.arg.candidates import Schema, with_names
from engine.arg.generation import DemoPicker
from engine.arg.pipeline import answer_question, exact_match, f1
from engine.arg.prompts import Demo
from engine.arg.ranker import BiEncoder, Scorer
from engine.arg.retrieval import K
from engine.errors import KGQAError
from engine.models.lm import LanguageModel
from engine.sexpr import parse
from engine.sexpr.tree import entities
from engine.store import Store
from loaders.questions import Question

STAGES = ("store", "model", "generation", "execution")


def _key(text: str) -> str:
    return " ".join(text.lower().split())


def demo_pool(store: Store, candidates: Sequence[tuple[Question, str]], tests: Sequence[tuple[Question, str]]) -> list[Demo]:
    """Demonstrations from ``candidates`` (question, gold form with ids), none sharing its
    question text or its gold form with a test question."""
    test_texts = {_key(q.question) for q, _ in tests}
    test_forms = {parse(form) for _, form in tests}
    kept = [(q, form) for q, form in candidates if _key(q.question) not in test_texts and parse(form) not in test_forms]
    ids = sorted({i for _, form in kept for i in entities(parse(form))})
    names = store.names(ids) if ids else {}
    return [Demo(q.question, with_names(parse(form), names)) for q, form in kept]


@dataclass
class EvalReport:
    questions: int
    em: float
    f1: float
    hits: float  # share with at least one gold answer among the answers
    gold_form_f1: float  # F1 of the gold forms' own answers: the ceiling for F1
    parsed: float  # share with at least one parsable generated form
    answered: float  # share with a non-empty answer
    by_hops: dict[int, dict[str, float]]
    seconds_per_question: dict[str, float]  # retrieval store / model, generation, execution
    demos: int  # demonstrations in the pool
    n_demos: int
    demo_mode: str
    samples: int
    lm: str
    setup_seconds: float = 0.0  # loading the models (set by the command)


def _mean(values: Sequence[float]) -> float:
    return round(statistics.mean(values), 4) if values else 0.0


def evaluate(
    store: Store,
    tests: Sequence[tuple[Question, str]],
    pool: Sequence[Demo],
    lm: LanguageModel,
    bi: BiEncoder,
    scorer: Scorer,
    *,
    n_demos: int = 10,
    demo_mode: str = "bm25",
    samples: int = 1,
    k: int = K,
    timeout: float | None = 10.0,
    seed: int = 0,
    schema: Schema | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> EvalReport:
    """EM and F1 of the generated forms for ``tests`` (question, gold form with ids); one
    record per question goes to ``on_record`` as soon as it is scored."""
    picker = DemoPicker(pool, n_demos, demo_mode, seed)
    aligner = Aligner(store, timeout=timeout)
    records: list[dict[str, Any]] = []
    for q, gold in tests:
        got = answer_question(store, q.question, q.topic_entities, lm, picker, bi, scorer, aligner, k, samples, schema)
        try:
            gold_answers = store.execute(gold, timeout=timeout).answers
        except KGQAError:
            gold_answers = []
        record = {
            "id": q.id,
            "question": q.question,
            "hops": q.hops,
            "gold_form": gold,
            "gold_answers": q.answers,
            "demos": got.demos,
            "outputs": got.outputs,
            "generated": got.generated,
            "executed": got.executed,
            "sexpr": got.sexpr,
            "answers": [str(a) for a in got.answers],
            "em": exact_match(got.sexpr, gold),
            "f1": round(f1(got.answers, q.answers), 4),
            "gold_form_f1": round(f1(gold_answers, q.answers), 4),
            "timed_out": got.timed_out,
            "seconds": {
                "store": got.store_seconds, "model": got.model_seconds,
                "generation": got.generation_seconds, "execution": got.execution_seconds,
            },
        }
        records.append(record)
        if on_record is not None:
            on_record(record)
    by_hops: dict[int, dict[str, float]] = {}
    for hops in sorted({r["hops"] or 0 for r in records}):
        group = [r for r in records if (r["hops"] or 0) == hops]
        by_hops[hops] = {"questions": len(group), "em": _mean([r["em"] for r in group]), "f1": _mean([r["f1"] for r in group])}
    gold_sets = [{str(a) for a in q.answers} for q, _ in tests]
    return EvalReport(
        questions=len(records),
        em=_mean([r["em"] for r in records]),
        f1=_mean([r["f1"] for r in records]),
        hits=_mean([bool(set(r["answers"]) & g) for r, g in zip(records, gold_sets)]),
        gold_form_f1=_mean([r["gold_form_f1"] for r in records]),
        parsed=_mean([bool(r["generated"]) for r in records]),
        answered=_mean([r["sexpr"] is not None for r in records]),
        by_hops=by_hops,
        seconds_per_question={s: _mean([r["seconds"][s] for r in records]) for s in STAGES},
        demos=len(pool),
        n_demos=n_demos,
        demo_mode=demo_mode,
        samples=samples,
        lm=getattr(lm, "name", type(lm).__name__),
    )
