"""Gold logical forms of MetaQA and PathQuestion questions, ARG's recall@k over them, and
stage-2 training examples from their gold paths.

The gold form follows the question's relation path from its topic entity hop by hop:
MetaQA's from the question type (``actor_to_movie_to_director`` = ``(JOIN (R directed_by)
(JOIN starred_actors [actor]))``, via :func:`loaders.questions.metaqa_relation_path`);
PathQuestion's from its annotated path (:func:`loaders.questions.gold_hops`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from engine.methods.arg.candidates import Hop, Schema, path_forms, with_names
from engine.methods.arg.prompts import build_prompt
from engine.methods.arg.ranker import BiEncoder, Example, Scorer
from engine.methods.arg.retrieval import K, retrieve
from engine.errors import InvalidInputError
from engine.methods.meter import Meter
from engine.models.sft import Sample
from engine.sexpr import parse
from engine.sexpr.tree import entities, to_text
from engine.store import Store
from loaders.questions import Question, gold_hops


def gold_path(q: Question) -> list[Hop]:
    """(relation, direction) per hop of the question's gold path."""
    hops = gold_hops(q)
    if hops is None:
        raise InvalidInputError(f"question {q.id!r} has no gold path (a MetaQA question type or a PathQuestion path)")
    return [(relation, "out" if forward else "in") for relation, forward in hops]


def gold_form(store: Store, q: Question) -> str:
    """The question's gold logical form (with ids): the dataset's, else built from its gold path."""
    if q.sexpr is not None:
        return q.sexpr
    if not q.topic_entities:
        raise InvalidInputError(f"question {q.id!r} has no topic entity to build its gold form from")
    return to_text(path_forms(q.topic_entities[0], gold_path(q))[0])


@dataclass
class RecallReport:
    questions: int
    k: int
    recall_at_k: float
    by_hops: dict[int, float]
    store_seconds_per_question: float
    model_seconds_per_question: float
    scorer: str


def recall(
    store: Store, items: list[tuple[Question, str]], bi: BiEncoder, scorer: Scorer, k: int = K, schema: Schema | None = None
) -> RecallReport:
    """The share of questions whose gold form is among the top-k references, and the store and
    ranking-model seconds per question (:class:`engine.methods.meter.Meter`)."""
    hits: dict[int, list[bool]] = {}
    meter = Meter()
    metered = meter.store(store)
    for q, gold in items:
        got = retrieve(metered, q.question, q.topic_entities, bi, scorer, k, schema, meter=meter)
        hits.setdefault(q.hops or 0, []).append(gold in {r.sexpr for r in got.references})
    flat = [h for v in hits.values() for h in v]
    n = max(len(items), 1)
    return RecallReport(
        len(flat),
        k,
        round(sum(flat) / len(flat), 4) if flat else 0.0,
        {h: round(sum(v) / len(v), 4) for h, v in sorted(hits.items())},
        round(meter.seconds["store"] / n, 4),
        round(meter.seconds["model"] / n, 4),
        "trained" if scorer.trained else "bi-encoder fallback",
    )


def training_examples(store: Store, items: list[tuple[Question, list[Hop]]], negatives: int = 3, seed: int = 0) -> list[Example]:
    """Stage-2 pairs from gold paths: per question the gold relation, the gold two-hop pair
    and the gold form as positives; as negatives, other relations of the topic entity in
    the first hop's place (as a relation, as a form) and in the second hop's place."""
    rng = random.Random(seed)
    out: list[Example] = []
    for q, hops in items:
        topic = q.topic_entities[0]
        rows = store.relations([topic], "both", 10_000).rows
        others = sorted({(r.relation, r.direction) for r in rows} - {hops[0]})
        first = hops[0][0]
        out.append(Example(q.question, f"Relation: {first}", 1.0))
        out.append(Example(q.question, f"Logical form: {to_text(path_forms(topic, hops)[0])}", 1.0))
        for hop in rng.sample(others, min(negatives, len(others))):
            out.append(Example(q.question, f"Relation: {hop[0]}", 0.0))
            out.append(Example(q.question, f"Logical form: {to_text(path_forms(topic, [hop, *hops[1:]])[0])}", 0.0))
        if len(hops) == 2:
            out.append(Example(q.question, f"One-hop Relation: {first}\nRelation: {hops[1][0]}", 1.0))
            for hop in rng.sample(others, min(negatives, len(others))):
                if hop[0] != hops[1][0]:
                    out.append(Example(q.question, f"One-hop Relation: {first}\nRelation: {hop[0]}", 0.0))
    return out


def generator_samples(
    store: Store, items: list[tuple[Question, str]], bi: BiEncoder, scorer: Scorer, k: int = K, schema: Schema | None = None
) -> list[Sample]:
    """Fine-tuning samples for the generator (``kgqa arg export-training``): the inference prompt without
    demonstrations (the question and its top-k references, as ``kgqa arg run --n-demos 0``
    builds it) → the gold form (``items``: question, gold form with ids), ids written as names."""
    ids = sorted({i for _, form in items for i in entities(parse(form))})
    names = store.names(ids) if ids else {}
    samples = []
    for q, form in items:
        references = [r.text for r in retrieve(store, q.question, q.topic_entities, bi, scorer, k, schema).references]
        samples.append(Sample(build_prompt(q.question, references, []), with_names(parse(form), names), "generation", q.id))
    return samples
