"""One way to run a method over questions: the method-run protocol every method follows.

A method (:class:`engine.methods.spec.Method`) answers a batch of questions and returns one
:class:`Prediction` per question, best answer first. :func:`run_method` owns everything else:
batching, the progress bar, one JSONL record per question, and the summary through
:mod:`engine.methods.metrics`. Time and calls are counted by the method's :class:`Meter`: its
store and its language models are :class:`Metered` proxies, so every store call counts as
``store`` seconds and calls and every LM call as ``model`` seconds and ``llm`` calls without a
stopwatch in the method. Other model
work (a GNN, an encoder) is timed with ``meter.stage("model")``. Stages nest exclusively: a
store call made inside a ``model`` stage counts as store time only.

A record holds ``id, question, topic, answers`` (gold names), ``answer_ids`` (gold ids),
``prediction`` (best first), ``prediction_ids``, ``hops, qtype``, ``seconds{store, model,
other, total}``, ``calls{store, llm}``, ``tokens{prompt_tokens, completion_tokens}`` (the tokens
its language models read and wrote, where they count them: :meth:`Meter.tokens`) and the
method's trace under its name. Questions answered in one batch share the batch's seconds, calls
and tokens evenly. Before a batch is answered its
topic entities are looked up in the store (one ``names`` call, neither timed nor counted): a
question with a topic entity the store does not hold gets ``missing_topics`` and a ``warning``
in its record, and the summary counts such questions (a method finds nothing from an entity
that is not there, so its prediction is likely empty). A method that leaves a prediction empty
says why in the record's ``warning`` too (:attr:`Prediction.warning`: a model's reply that
names no answer, a search that found nothing).
"""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

from engine import deadlines
from engine.errors import InvalidIdentifierError, InvalidInputError, clipped
from engine.identifiers import validate_id, validate_path
from engine.methods.meter import CALLS, STAGES, TOKENS, percentile
from engine.methods.spec import Method, Prediction, questions_list
from engine.results import to_json
from loaders.questions import Question

def topic_last(answers: Sequence[Any], topics: Collection[Any]) -> list[Any]:
    """``answers`` in their order with the question's own topic entities moved after the others.
    A retrieval that goes out and back reaches X itself — ARG's form for "who co-starred with
    [X]", ``(JOIN starred_actors (JOIN (R starred_actors) [X]))``; LDR's tree for "who wrote the
    films [X] directed" when X wrote them too — which a question seldom asks for but can
    (PathQuestion's "X's child's parent"), so it stays an answer, last. Chosen on validation
    questions (``--split val``) for LDR and ARG: it raised their MetaQA-2hop Hits@1 and changed no
    other MetaQA or PathQuestion set. RoG's path ends end with it too
    (:meth:`engine.methods.rog.grounding.Grounding.answers`)."""
    own = set(topics)
    return [a for a in answers if a not in own] + [a for a in answers if a in own]


def missing_topics(store: Any, questions: Sequence[Question]) -> list[list[str]]:
    """Per question, its topic entities that ``store`` does not hold, found with one ``names``
    call for them all (an id that no store can hold is missing without asking)."""
    wanted = dict.fromkeys(t for q in questions for t in q.topic_entities)
    absent = set()
    for topic in wanted:
        try:
            validate_id(topic)
        except InvalidIdentifierError:
            absent.add(topic)
    if len(absent) < len(wanted):
        names = store.names([t for t in wanted if t not in absent])
        absent.update(t for t, name in names.items() if name is None)
    return [[t for t in q.topic_entities if t in absent] for q in questions]


def _open_predictions(out: Path) -> IO[str]:
    try:
        return open(out, "w", encoding="utf-8")
    except OSError as e:
        raise InvalidInputError(f"cannot write the predictions file {str(out)!r}: {e.strerror or e}; give another path") from e


def _batches(items: Sequence[Question], size: int) -> Iterator[Sequence[Question]]:
    for start in range(0, len(items), max(size, 1)):
        yield items[start : start + max(size, 1)]


def _record(
    method: Method, q: Question, p: Prediction, seconds: dict[str, float], calls: dict[str, float],
    tokens: dict[str, float] | None, missing: list[str],
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": q.id,
        "question": q.question,
        "topic": list(q.topic_entities),
        "answers": list(q.answers),
        "answer_ids": list(q.answer_entities),
        "prediction": [str(a) for a in p.answers],
        "prediction_ids": None if p.answer_ids is None else [str(a) for a in p.answer_ids],
        "hops": q.hops,
        "qtype": q.qtype,
        "seconds": seconds,
        "calls": calls,
    }
    if tokens is not None:
        record["tokens"] = tokens
    warnings = [p.warning] if p.warning else []
    if missing:
        record["missing_topics"] = missing
        warnings.insert(0, f"topic entit{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)} not in the store: "
                           "is the store this dataset's graph?")
    if warnings:
        record["warning"] = "; ".join(warnings)
    if p.trace is not None:
        record[method.name] = to_json(p.trace)
    return record


def run_method(
    method: Method,
    questions: Sequence[Question],
    out: str | Path | None = None,
    *,
    progress: bool = True,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Answer every question (in batches of ``method.batch_size``), write one JSON line per
    question to ``out`` as soon as its batch is answered, and return the run's summary. Time
    and calls come from the method's meter; the topic entities are looked up on its unmetered
    store (the look-up is the protocol's, not the method's). ``deadline``: a
    :func:`time.monotonic` instant, the run's :func:`engine.deadlines.until`; past it the
    method stops at its next check (a store or model call, a batch of prompts, a decoding step)
    with :class:`engine.errors.DeadlineExceededError`, and a batch it finished late is not
    recorded (a method that caught that error may have answered it wrongly)."""
    from tqdm import tqdm

    questions = questions_list(questions)
    out = None if out is None else validate_path(out, "predictions file")
    meter, lookup = method.meter, method.unmetered_store
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    with ExitStack() as files:
        files.enter_context(deadlines.until(deadline))
        sink = None if out is None else files.enter_context(_open_predictions(out))
        bar = tqdm(total=len(questions), desc=method.name, unit="q", disable=not progress, file=sys.stderr)
        for batch in _batches(questions, method.batch_size):
            missing = missing_topics(lookup, batch)
            meter.reset()
            t0 = time.perf_counter()
            try:
                predictions = method.answer(batch)
            except InvalidInputError as e:  # a question the method cannot take (one too long for its model)
                which = clipped(", ".join(q.id for q in batch), 200)
                raise InvalidInputError(f"{method.name} cannot answer question{'s' * (len(batch) > 1)} {which}: {e}") from e
            deadlines.check()
            total = time.perf_counter() - t0
            n = len(batch)
            seconds = {s: round(meter.seconds.get(s, 0.0) / n, 5) for s in STAGES}
            seconds["other"] = round(max(total - sum(meter.seconds.get(s, 0.0) for s in STAGES), 0.0) / n, 5)
            seconds["total"] = round(total / n, 5)
            calls = {k: round(meter.calls.get(k, 0) / n, 3) for k in CALLS}
            counted = meter.tokens()
            tokens = None if counted is None else {k: round(v / n, 3) for k, v in counted.items()}
            for q, p, absent in zip(batch, predictions, missing):
                record = _record(method, q, p, dict(seconds), dict(calls), None if tokens is None else dict(tokens), absent)
                records.append(record)
                if sink is not None:
                    sink.write(json.dumps(record, ensure_ascii=False) + "\n")
                if on_record is not None:
                    on_record(record)
            if sink is not None:
                sink.flush()
            bar.update(n)
        bar.close()
    summary = summarize(records, time.perf_counter() - started)
    extra = method.summary(records)
    if extra:
        summary[method.name] = extra
    summary = {"method": method.name, **summary}
    if out is not None:
        summary["predictions"] = str(out)
    return summary


def summarize(records: Sequence[dict[str, Any]], wall_seconds: float | None = None) -> dict[str, Any]:
    """Answer metrics (by ids where both sides have them, else by names), mean seconds per
    stage, p50/p95 seconds per question, mean calls per question, mean tokens per question (where
    every record counts them), and how many questions have a topic entity that is not in the
    store (``missing_topics``, only when some have)."""
    from engine.methods.metrics import evaluate

    report = evaluate(records)
    n = max(len(records), 1)
    totals = [r["seconds"]["total"] for r in records]
    summary: dict[str, Any] = {
        "questions": len(records),
        "hits1": round(report.overall.hits1, 5),
        "hits1_any": round(report.overall.hits1_any, 5),
        "f1": round(report.overall.f1, 5),
        "by_hops": {k: round(m.hits1, 5) for k, m in report.by_hops.items()},
        "seconds_per_question": {s: round(sum(r["seconds"][s] for r in records) / n, 5) for s in (*STAGES, "other", "total")},
        "p50_seconds": round(percentile(totals, 0.5) or 0.0, 5),
        "p95_seconds": round(percentile(totals, 0.95) or 0.0, 5),
        "calls_per_question": {k: round(sum(r["calls"][k] for r in records) / n, 3) for k in CALLS},
    }
    if records and all("tokens" in r for r in records):
        summary["tokens_per_question"] = {k: round(sum(r["tokens"][k] for r in records) / n, 1) for k in TOKENS}
    if wall_seconds is not None:
        summary["seconds"] = round(wall_seconds, 3)
        summary["questions_per_second"] = round(len(records) / wall_seconds, 3) if wall_seconds > 0 else 0.0
    if report.no_gold:
        summary["no_gold"] = report.no_gold
    if missing := sum(1 for r in records if r.get("missing_topics")):
        summary["missing_topics"] = missing
    return summary


def tokens_cell(summary: dict[str, Any]) -> str:
    """A summary's LLM tokens per question as a table cell, "read / written", or "–" where its
    language models did not count them."""
    tokens = summary.get("tokens_per_question")
    if not tokens:
        return "–"
    return f"{tokens.get('prompt_tokens', 0):.0f} / {tokens.get('completion_tokens', 0):.0f}"


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as a few readable lines."""
    s = summary["seconds_per_question"]
    calls = summary["calls_per_question"]
    lines = [
        f"{summary['method']}: {summary['questions']} questions"
        + (f", {summary['questions_per_second']:.2f} questions/s" if "questions_per_second" in summary else ""),
        f"Hits@1 {summary['hits1']:.3f}  Hits@1-any {summary['hits1_any']:.3f}  F1 {summary['f1']:.3f}"
        + ("  by hops: " + "  ".join(f"{h}-hop {v:.3f}" for h, v in summary["by_hops"].items()) if summary["by_hops"] else ""),
        (
            f"seconds per question: store {s['store']:.4f}  model {s['model']:.4f}  other {s['other']:.4f}"
            f"  total {s['total']:.4f}  (p50 {summary['p50_seconds']:.4f}, p95 {summary['p95_seconds']:.4f})"
        ),
        f"calls per question: store {calls['store']:.2f}  llm {calls['llm']:.2f}"
        + (f"  (llm tokens read {t['prompt_tokens']:.0f}, written {t['completion_tokens']:.0f})"
           if (t := summary.get("tokens_per_question")) else ""),
    ]
    if summary.get("no_gold"):
        lines.append(f"{summary['no_gold']} of {summary['questions']} questions have no gold answer: they are left out of the "
                     "scores above")
    if summary.get("missing_topics"):
        lines.append(
            f"{summary['missing_topics']} of {summary['questions']} questions have a topic entity that is not in the store "
            "(their records' warning names it): is the store this dataset's graph?"
        )
    extra = summary.get(summary["method"])
    if extra:
        lines.append(f"{summary['method']}: " + "  ".join(f"{k} {_fmt(v)}" for k, v in extra.items()))
    if summary.get("predictions"):
        lines.append(f"predictions written to {summary['predictions']} (score them with `kgqa eval {summary['predictions']}`)")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else json.dumps(value) if isinstance(value, dict | list) else str(value)
