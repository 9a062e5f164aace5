"""EtD end to end: datasets and splits, and prediction (exploration, evidence, determination)
written as JSONL with a summary."""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from engine.etd.determination import determine
from engine.etd.evidence import backtrack, facts
from engine.etd.exploration import Explorer, RelationVocab
from engine.etd.model import EtDModel, encode_texts, ranked
from engine.etd.prompts import LABELS, Option, render_prompt
from engine.etd.training import (
    batches,
    explore,
    gold_answers,
    peak_memory_mb,
    question_texts,
)
from engine.graph import Literal
from engine.metrics import QuestionScore, aggregate, score_question
from engine.models.device import pick_device
from engine.store import Store
from loaders.datasets import load_dataset
from loaders.questions import Question


def load_questions(dataset: str, path: str | Path | None = None, data_dir: str | Path | None = None) -> list[Question]:
    """A dataset's questions, from ``path`` or its usual file under the data directory."""
    return load_dataset(path if path is not None else dataset, data_dir)


@dataclass
class PredictSummary:
    """What a prediction run did; Hits@1 by ``engine.metrics`` (of the final answer, and of the
    GNN's top candidate)."""

    questions: int
    device: str
    hits1_gnn: float
    hits1: float
    seconds: float
    questions_per_second: float
    explore_seconds: float
    store_seconds: float
    store_share: float
    determine_seconds: float
    llm_calls: int
    peak_memory_mb: float
    output: str


def _text(term: Any, names: dict[str, str | None]) -> str:
    return term.value if isinstance(term, Literal) else (names.get(term) or term)


def predict(
    store: Store,
    model: EtDModel,
    questions: Sequence[Question],
    output: str | Path,
    *,
    top_n: int = 3,
    lm: Any = None,
    batch_size: int = 50,
    max_degree: int | None = 1000,
    progress: bool = True,
    encoding_cache: str | Path | None = None,
) -> PredictSummary:
    """Explore, backtrack evidence for the top-N candidates and determine each question's answer
    (by ``lm`` when given, else the GNN's top candidate); one JSONL record per question."""
    model.eval()
    explorer = Explorer(store, RelationVocab(list(model.config.relations)), max_degree=max_degree)
    features = encode_texts(question_texts(questions, model.config.mask_topic), model.config.encoder, cache_dir=encoding_cache)
    started = time.perf_counter()
    explore_s = store_s = determine_s = 0.0
    llm_calls = 0
    gnn_scores: list[QuestionScore] = []
    scores: list[QuestionScore] = []
    with open(output, "w", encoding="utf-8") as sink:
        bar = tqdm(list(batches(range(len(questions)), batch_size)), desc="predict", file=sys.stderr, disable=not progress)
        for members in bar:
            t0, store_before = time.perf_counter(), explorer.store_seconds
            with torch.no_grad():
                exploration = explore(model, explorer, questions, features, members)
            top = ranked(exploration, len(members), top_n)
            evidence = [[facts(backtrack(exploration, int(exploration.keys[c])), explorer) for c, _, _ in t] for t in top]
            ids = {explorer.terms[n] for t in top for _, n, _ in t} | {
                term for per_q in evidence for fs in per_q for f in fs for term in (f.subject, f.object)
            }
            names_started = time.perf_counter()
            names = store.names(sorted(i for i in ids if isinstance(i, str)))
            batch_store = explorer.store_seconds - store_before + time.perf_counter() - names_started
            batch_explore = time.perf_counter() - t0
            explore_s, store_s = explore_s + batch_explore, store_s + batch_store
            for i, cands, cand_facts in zip(members, top, evidence):
                q = questions[i]
                options = [
                    Option(_text(explorer.terms[n], names), p, tuple(f)) for (_, n, p), f in zip(cands, cand_facts)
                ]
                gnn_answer = str(explorer.terms[cands[0][1]]) if cands else None
                gold = gold_answers(q)
                record: dict[str, Any] = {
                    "id": q.id,
                    "question": q.question,
                    "answers": gold,
                    "hops": q.hops,
                    "qtype": q.qtype,
                    "candidates": [
                        {
                            "id": str(explorer.terms[n]),
                            "name": o.text,
                            "probability": round(p, 6),
                            "evidence": [[_text(f.subject, names), f.relation, _text(f.object, names)] for f in o.facts],
                        }
                        for (_, n, p), o in zip(cands, options)
                    ],
                    "gnn_answer": gnn_answer,
                    "timings": {"explore_s": round(batch_explore / len(members), 5), "store_s": round(batch_store / len(members), 5)},
                }
                answer = gnn_answer
                if lm is not None and options:
                    t1 = time.perf_counter()
                    choice = determine(lm, render_prompt(q.question, options), [o.text for o in options])
                    elapsed = time.perf_counter() - t1
                    determine_s, llm_calls = determine_s + elapsed, llm_calls + 1
                    answer = str(explorer.terms[cands[choice.index][1]]) if choice.index is not None else choice.answer
                    record["label"] = None if choice.index is None else LABELS[choice.index]
                    record["llm_output"] = choice.output
                    record["timings"]["determine_s"] = round(elapsed, 5)
                record["answer"] = answer
                record["prediction"] = [answer] if answer else []
                gnn_scores.append(score_question([gnn_answer] if gnn_answer else [], gold))
                scores.append(score_question(record["prediction"], gold))
                sink.write(json.dumps(record, ensure_ascii=False) + "\n")
    seconds = time.perf_counter() - started
    return PredictSummary(
        questions=len(questions),
        device=pick_device(),
        hits1_gnn=round(aggregate(gnn_scores).hits1, 5),
        hits1=round(aggregate(scores).hits1, 5),
        seconds=round(seconds, 2),
        questions_per_second=round(len(questions) / seconds, 2) if seconds else 0.0,
        explore_seconds=round(explore_s, 2),
        store_seconds=round(store_s, 2),
        store_share=round(store_s / seconds, 4) if seconds else 0.0,
        determine_seconds=round(determine_s, 2),
        llm_calls=llm_calls,
        peak_memory_mb=peak_memory_mb(),
        output=str(output),
    )
