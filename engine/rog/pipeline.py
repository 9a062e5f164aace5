"""RoG end to end: plan, ground, reason, per question, with timings and plan validity."""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from engine.errors import InvalidInputError
from engine.models.lm import LanguageModel
from engine.rog.grounding import ground
from engine.rog.planning import (
    PLAN_MODES,
    Frontiers,
    generate_plans,
    relation_vocabulary,
)
from engine.rog.reasoning import REASONING_MODES, reason
from engine.store import Store
from loaders.questions import Question


@dataclass(frozen=True)
class RogConfig:
    plan_mode: str = "grounded"
    answer_mode: str = "llm"
    k: int = 3
    max_hops: int = 3
    direction: str = "both"
    plan_tokens: int = 100
    answer_tokens: int = 128
    prompt_tokens: int | None = 4096
    path_limit: int | None = None

    def __post_init__(self) -> None:
        if self.plan_mode not in PLAN_MODES:
            raise InvalidInputError(f"unknown planning mode {self.plan_mode!r}: use {', '.join(PLAN_MODES)}")
        if self.answer_mode not in REASONING_MODES:
            raise InvalidInputError(f"unknown answer mode {self.answer_mode!r}: use {', '.join(REASONING_MODES)}")


class RogPipeline:
    """One store, a planning model and (unless answering with path ends) a reasoning model."""

    def __init__(self, store: Store, planner: LanguageModel, reasoner: LanguageModel | None, config: RogConfig) -> None:
        self.store = store
        self.planner = planner
        self.reasoner = reasoner or planner
        self.config = config
        start = time.perf_counter()
        self.vocabulary = relation_vocabulary(store)  # once per run
        self.vocabulary_seconds = time.perf_counter() - start
        if not self.vocabulary:
            raise InvalidInputError(f"the store {store.uri!r} holds no relations: load the KB first with `kgqa load`")

    def answer(self, q: Question) -> dict[str, Any]:
        """One question's prediction record (the input of ``kgqa eval``)."""
        c = self.config
        frontiers = Frontiers(self.store, q.topic_entities, c.direction)
        start = time.perf_counter()
        plans = generate_plans(
            self.planner,
            q.question,
            k=c.k,
            mode=c.plan_mode,
            vocabulary=self.vocabulary,
            frontiers=frontiers,
            max_hops=c.max_hops,
            max_new_tokens=c.plan_tokens,
        )
        planning = time.perf_counter() - start - frontiers.seconds
        grounding = ground(self.store, q.topic_entities, [p.relations for p in plans], direction=c.direction, limit=c.path_limit)
        rendered = grounding.rendered()
        path_ends = grounding.answers()
        start = time.perf_counter()
        output = None
        if c.answer_mode == "paths":
            prediction = path_ends
        else:
            prediction, output = reason(
                self.reasoner,
                q.question,
                rendered,
                explain=c.answer_mode == "explain",
                max_new_tokens=c.answer_tokens,
                max_prompt_tokens=c.prompt_tokens,
            )
        reasoning = time.perf_counter() - start
        return {
            "id": q.id,
            "question": q.question,
            "answers": q.answers,
            "hops": q.hops,
            "qtype": q.qtype,
            "topic_entities": q.topic_entities,
            "plans": [
                {
                    "text": p.text,
                    "relations": p.relations,
                    "score": p.score,
                    "exists": bool(p.relations) and set(p.relations) <= self.vocabulary,
                    "grounds": n > 0,
                    "paths": n,
                }
                for p, n in zip(plans, grounding.paths_per_plan)
            ],
            "paths": rendered,
            "paths_truncated": grounding.truncated,
            "path_ends": path_ends,
            "prediction": prediction,
            "output": output,
            "timings": {
                "planning": round(planning, 4),
                "store": round(frontiers.seconds + grounding.seconds, 4),
                "reasoning": round(reasoning, 4),
            },
        }

    def run(self, questions: Sequence[Question], out: IO[str], progress: bool = True) -> dict[str, Any]:
        """Answer every question, one JSON line each, and return the run's summary."""
        from tqdm import tqdm

        records = []
        for q in tqdm(questions, desc="rog", unit="q", disable=not progress, file=sys.stderr):
            record = self.answer(q)
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            records.append(record)
        return summarize(records, self.config)


def summarize(records: Iterable[dict[str, Any]], config: RogConfig | None = None) -> dict[str, Any]:
    """Plan validity (relations exist; plan grounds), answer metrics and mean timings."""
    from engine.metrics import evaluate

    records = list(records)
    plans = [p for r in records for p in r["plans"]]
    n = max(len(records), 1)
    report = evaluate(records)
    summary: dict[str, Any] = {
        "questions": len(records),
        "plans": len(plans),
        "plans_parsed": sum(p["relations"] is not None for p in plans) / max(len(plans), 1),
        "plans_exist": sum(p["exists"] for p in plans) / max(len(plans), 1),
        "plans_ground": sum(p["grounds"] for p in plans) / max(len(plans), 1),
        "hits1": report.overall.hits1,
        "hits1_any": report.overall.hits1_any,
        "f1": report.overall.f1,
        "mean_seconds": {k: sum(r["timings"][k] for r in records) / n for k in ("planning", "store", "reasoning")},
        "mean_paths": sum(len(r["paths"]) for r in records) / n,
    }
    if config is not None:
        summary = {"plan_mode": config.plan_mode, "answer_mode": config.answer_mode, **summary}
    return summary
