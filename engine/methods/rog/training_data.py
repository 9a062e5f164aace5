"""RoG's training data: for each question, all shortest paths between its topic and answer
entities (``shortest_paths``, undirected) give the planning targets; grounding those relation
paths gives the reasoning prompt whose target is the answer list.

With ``targets="gold"`` a question that carries its gold relation path (a MetaQA question type,
a PathQuestion path, a WebQSP slice chain) is supervised with that path instead. Shortest paths
are RoG's choice, but they teach shortcuts where an answer is also reachable by a shorter path
than the question asks for (44 % of MetaQA-3hop and 68 % of PQ-3H training questions here).

``kgqa rog export-training`` writes them as ``planning.jsonl`` and ``reasoning.jsonl`` (``prompt``
/ ``target`` lines that ``kgqa lm train`` reads as they are; a reasoning line also keeps its
``question`` and ``paths``), and :func:`sft_samples` turns such directories into fine-tuning
samples, the reasoning prompt keeping the paths that fit the token budget used at inference."""
from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.errors import InvalidInputError
from engine.identifiers import UNBOUNDED
from engine.models.lm import LanguageModel
from engine.models.sft import Sample, read_jsonl
from engine.methods.rog.grounding import ground
from engine.methods.rog.prompts import format_plan, planning_prompt, reasoning_prompt
from engine.methods.rog.reasoning import fit_paths
from engine.store import Store
from loaders.questions import Question, gold_relation_path

PLANNING_FILE, REASONING_FILE = "planning.jsonl", "reasoning.jsonl"
TASKS = ("planning", "reasoning")
TARGETS = ("shortest", "gold")


@dataclass
class TrainingExample:
    """One question's supervision: its distinct gold relation paths and reasoning example."""

    question: Question
    relation_paths: list[tuple[str, ...]]
    reasoning_paths: list[str]

    def planning_records(self) -> list[dict]:
        """RoG's planning prompt → one gold relation path, one record per path (Eq. 4/8)."""
        prompt = planning_prompt(self.question.question)
        return [{"id": self.question.id, "prompt": prompt, "target": format_plan(r)} for r in self.relation_paths]

    def reasoning_record(self) -> dict:
        """RoG's reasoning prompt with the paths the gold relation paths ground to → the answers (Eq. 10)."""
        return {
            "id": self.question.id,
            "prompt": reasoning_prompt(self.question.question, self.reasoning_paths),
            "target": "\n".join(self.question.answers),
            "question": self.question.question,
            "paths": self.reasoning_paths,
        }


def shortest_relation_paths(store: Store, question: Question, max_hops: int = 3) -> list[tuple[str, ...]]:
    """The distinct relation sequences of all shortest paths from topic to answer entities."""
    targets = [a for a in question.answer_entities if a not in question.topic_entities]
    if not question.topic_entities or not targets:
        return []
    paths = store.shortest_paths(question.topic_entities, targets, max_hops, UNBOUNDED).paths
    return sorted({p.relations for p in paths})


def _target_paths(store: Store, q: Question, max_hops: int, targets: str) -> list[tuple[str, ...]]:
    """The planning targets of one question (see :func:`training_examples`)."""
    if targets not in TARGETS:
        raise InvalidInputError(f"unknown training targets {targets!r}: use {', '.join(TARGETS)}")
    gold = gold_relation_path(q) if targets == "gold" else None
    if gold and len(gold) <= max_hops and ground(store, q.topic_entities, [gold]).paths:
        return [tuple(gold)]
    return shortest_relation_paths(store, q, max_hops)


def training_examples(
    store: Store, questions: Iterable[Question], max_hops: int = 3, targets: str = "shortest"
) -> Iterator[TrainingExample]:
    """An example per question that has a target path (others are skipped): its shortest
    paths, or with ``targets="gold"`` its gold relation path where it has one that grounds
    (falling back to the shortest paths)."""
    for q in questions:
        relation_paths = _target_paths(store, q, max_hops, targets)
        if relation_paths:
            grounding = ground(store, q.topic_entities, relation_paths)
            yield TrainingExample(q, relation_paths, grounding.rendered())


def sft_samples(
    directories: Sequence[str | Path],
    tasks: Sequence[str] = TASKS,
    lm: LanguageModel | None = None,
    max_prompt_tokens: int | None = 4096,
    *,
    plans_per_question: int | None = None,
    reasoning_per_directory: int | None = None,
    seed: int = 0,
) -> dict[str, list[Sample]]:
    """Fine-tuning samples per task from ``export-training`` directories. A reasoning prompt is
    rebuilt from its question and the paths that fit ``max_prompt_tokens`` of ``lm``'s tokenizer,
    as :func:`engine.methods.rog.reasoning.reason` fits them at inference. To bound training time,
    ``plans_per_question`` keeps a seeded sample of each question's gold relation paths (RoG
    trains on all) and ``reasoning_per_directory`` a seeded sample of the reasoning lines."""
    rng = random.Random(seed)
    out: dict[str, list[Sample]] = {task: [] for task in tasks}
    for directory in directories:
        folder = Path(directory)
        if "planning" in tasks:
            by_question: dict[str, list[dict]] = {}
            for r in read_jsonl(folder / PLANNING_FILE):
                by_question.setdefault(str(r.get("id")), []).append(r)
            for rows in by_question.values():
                if plans_per_question is not None and len(rows) > plans_per_question:
                    rows = rng.sample(rows, plans_per_question)
                out["planning"] += [Sample(r["prompt"], r["target"]) for r in rows]
        if "reasoning" in tasks:
            rows = read_jsonl(folder / REASONING_FILE, ("question", "paths", "target"))
            if reasoning_per_directory is not None and len(rows) > reasoning_per_directory:
                rows = rng.sample(rows, reasoning_per_directory)
            for r in rows:
                paths = r["paths"] if lm is None else fit_paths(lm, reasoning_prompt(r["question"], []), r["paths"], max_prompt_tokens)
                out["reasoning"].append(Sample(reasoning_prompt(r["question"], paths), r["target"]))
    return out
