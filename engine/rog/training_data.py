"""RoG's training data: for each question, all shortest paths between its topic and answer
entities (``shortest_paths``, undirected) give the planning targets; grounding those relation
paths gives the reasoning prompt whose target is the answer list."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from engine.identifiers import UNBOUNDED
from engine.rog.grounding import ground
from engine.rog.prompts import format_plan, planning_prompt, reasoning_prompt
from engine.store import Store
from loaders.questions import Question


@dataclass
class TrainingExample:
    """One question's supervision: its distinct gold relation paths and reasoning example."""

    question: Question
    relation_paths: list[tuple[str, ...]]
    reasoning_paths: list[str]

    def planning_records(self) -> list[dict]:
        prompt = planning_prompt(self.question.question)
        return [{"id": self.question.id, "instruction": prompt, "output": format_plan(r)} for r in self.relation_paths]

    def reasoning_record(self) -> dict:
        return {
            "id": self.question.id,
            "instruction": reasoning_prompt(self.question.question, self.reasoning_paths),
            "output": "\n".join(self.question.answers),
        }


def gold_relation_paths(store: Store, question: Question, max_hops: int = 3) -> list[tuple[str, ...]]:
    """The distinct relation sequences of all shortest paths from topic to answer entities."""
    targets = [a for a in question.answer_entities if a not in question.topic_entities]
    if not question.topic_entities or not targets:
        return []
    paths = store.shortest_paths(question.topic_entities, targets, max_hops, UNBOUNDED).paths
    return sorted({p.relations for p in paths})


def training_examples(store: Store, questions: Iterable[Question], max_hops: int = 3) -> Iterator[TrainingExample]:
    """An example per question that has at least one shortest path (others are skipped)."""
    for q in questions:
        relation_paths = gold_relation_paths(store, q, max_hops)
        if relation_paths:
            grounding = ground(store, q.topic_entities, relation_paths)
            yield TrainingExample(q, relation_paths, grounding.rendered())
