"""RoG's training data: for each question, all shortest paths between its topic and answer
entities (``shortest_paths``, undirected) give the planning targets; grounding those relation
paths gives the reasoning prompt whose target is the answer list.

With ``targets="gold"`` a question that carries its gold relation path (a MetaQA question type,
a PathQuestion path, a WebQSP slice chain) is supervised with that path instead, and one with a
gold path but no topic entity (``webqsp-fb15k237-chains``) gives a planning sample alone. Shortest paths
are RoG's choice, but they teach shortcuts where an answer is also reachable by a shorter path
than the question asks for (44 % of MetaQA-3hop and 68 % of PQ-3H training questions here).

:func:`training_samples` gives them as the model sees them (``kgqa rog export-training``, then
``kgqa lm train``): a planning sample per gold relation path and a reasoning sample whose prompt
keeps the paths that fit the reasoning model's token budget, as at inference."""
from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.errors import InvalidInputError
from engine.identifiers import MAX_PAIRS, UNBOUNDED
from engine.models.sft import Sample
from engine.methods.rog.grounding import ground
from engine.methods.rog.prompts import format_plan, planning_prompt, reasoning_prompt
from engine.methods.rog.reasoning import fit_paths
from engine.store import Store
from loaders.questions import Question, gold_relation_path

if TYPE_CHECKING:
    from engine.methods.rog.pipeline import RogConfig

TASKS = ("planning", "reasoning")
TARGETS = ("shortest", "gold")


@dataclass
class TrainingExample:
    """One question's supervision: its distinct gold relation paths and reasoning example."""

    question: Question
    relation_paths: list[tuple[str, ...]]
    reasoning_paths: list[str]


def shortest_relation_paths(store: Store, question: Question, max_hops: int = 3) -> list[tuple[str, ...]]:
    """The distinct relation sequences of all shortest paths from topic to answer entities."""
    topics = list(dict.fromkeys(question.topic_entities))
    targets = [a for a in dict.fromkeys(question.answer_entities) if a not in topics]
    if not topics or not targets:
        return []
    # a question with thousands of answers asks in parts, each within the pairs one call takes
    step = max(1, MAX_PAIRS // len(topics))
    relations: set[tuple[str, ...]] = set()
    for start in range(0, len(targets), step):
        paths = store.shortest_paths(topics, targets[start:start + step], max_hops, UNBOUNDED).paths
        relations.update(p.relations for p in paths)
    return sorted(relations)


def _target_paths(store: Store, q: Question, max_hops: int, targets: str) -> list[tuple[str, ...]]:
    """The planning targets of one question (see :func:`training_examples`)."""
    if targets not in TARGETS:
        raise InvalidInputError(f"unknown training targets {targets!r}: use {', '.join(TARGETS)}")
    gold = gold_relation_path(q) if targets == "gold" else None
    if gold and len(gold) <= max_hops and (not q.topic_entities or ground(store, q.topic_entities, [gold]).paths):
        return [tuple(gold)]
    return shortest_relation_paths(store, q, max_hops)


def training_examples(
    store: Store, questions: Iterable[Question], max_hops: int = 3, targets: str = "shortest"
) -> Iterator[TrainingExample]:
    """An example per question that has a target path (others are skipped): its shortest
    paths, or with ``targets="gold"`` its gold relation path where it has one that grounds, or
    that has no topic entity to ground from (then no reasoning paths), falling back to the
    shortest paths."""
    for q in questions:
        relation_paths = _target_paths(store, q, max_hops, targets)
        if relation_paths:
            rendered = ground(store, q.topic_entities, relation_paths).rendered() if q.topic_entities else []
            yield TrainingExample(q, relation_paths, rendered)


def training_samples(store: Store, questions: Iterable[Question], config: RogConfig) -> Iterator[Sample]:
    """RoG's samples for each question with a target path (:func:`training_examples`, with
    ``config.training_targets``): one planning sample per relation path (Eq. 4/8; at most
    ``config.plans_per_question`` of them, a sample seeded by the question's id) and, where
    the paths ground, one reasoning sample (Eq. 10) whose prompt keeps the grounded paths that fit
    ``config.prompt_tokens`` of the reasoning model's tokenizer, as :func:`engine.methods.rog.reasoning.reason`
    fits them at inference."""
    from engine.models.loading import load_lm

    tokens = None
    if config.prompt_tokens is not None:  # the tokenizer of the model that will read the prompt
        tokens = load_lm(config.reasoner or config.model, "cpu", config.prompt_template)
    for example in training_examples(store, questions, config.max_hops, config.training_targets):
        q = example.question
        paths = example.relation_paths
        if config.plans_per_question is not None and len(paths) > config.plans_per_question:
            paths = random.Random(q.id).sample(paths, config.plans_per_question)
        for relations in paths:
            yield Sample(planning_prompt(q.question), format_plan(relations), "planning", q.id)
        kept = example.reasoning_paths
        if not kept:  # nothing grounded to reason over (a question with no topic entity)
            continue
        if tokens is not None:
            kept = fit_paths(tokens, reasoning_prompt(q.question, []), kept, config.prompt_tokens)
        yield Sample(reasoning_prompt(q.question, kept), "\n".join(q.answers), "reasoning", q.id)
