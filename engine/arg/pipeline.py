"""ARG-KBQA end to end for one question: retrieval → prompt → K generated forms → alignment and
execution → majority vote over the answers; EM and F1 against gold."""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.arg.alignment import Aligner
from engine.arg.candidates import Schema
from engine.arg.generation import DemoPicker, forms_of, generate_outputs
from engine.arg.ranker import BiEncoder, Scorer
from engine.arg.retrieval import K, retrieve
from engine.graph import Literal, Term, term_key
from engine.models.lm import LanguageModel
from engine.store import Store


@dataclass
class ArgAnswer:
    question: str
    references: list[str]
    generated: list[str]
    executed: list[str | None]
    sexpr: str | None
    answers: list[Term] = field(default_factory=list)
    count: int | None = None
    timed_out: int = 0  # candidate executions stopped at the aligner's timeout
    # seconds per stage: retrieval's store calls and ranker models, generation, alignment + execution
    store_seconds: float = 0.0
    model_seconds: float = 0.0
    generation_seconds: float = 0.0
    execution_seconds: float = 0.0
    outputs: list[str] = field(default_factory=list)  # the LM's raw texts, one per sample
    demos: list[str] = field(default_factory=list)  # the demonstrations' questions, as prompted


def answer_question(
    store: Store,
    question: str,
    anchors: Sequence[str | Literal],
    lm: LanguageModel,
    picker: DemoPicker,
    bi: BiEncoder,
    scorer: Scorer,
    aligner: Aligner,
    k: int = K,
    samples: int = 1,
    schema: Schema | None = None,
) -> ArgAnswer:
    retrieval = retrieve(store, question, anchors, bi, scorer, k, schema)
    references = [r.text for r in retrieval.references]
    started = time.perf_counter()
    demos = picker.pick(question)
    outputs = generate_outputs(lm, question, references, demos, samples)
    generated = forms_of(outputs)
    generated_at = time.perf_counter()
    runs = [aligner.run(form, question) for form in generated]
    executed_at = time.perf_counter()
    votes: Counter = Counter()
    first: dict[tuple, int] = {}
    for i, run in enumerate(runs):
        if run.result is not None:
            key = (tuple(run.result.answers), run.result.count)
            votes[key] += 1
            first.setdefault(key, i)
    out = ArgAnswer(
        question, references, generated, [r.sexpr for r in runs], None, timed_out=sum(r.timed_out for r in runs),
        store_seconds=round(retrieval.store_seconds, 4), model_seconds=round(retrieval.model_seconds, 4),
        generation_seconds=round(generated_at - started, 4), execution_seconds=round(executed_at - generated_at, 4),
        outputs=outputs, demos=[d.question for d in demos],
    )
    if votes:
        best = max(votes, key=lambda key: (votes[key], -first[key]))
        out.sexpr = runs[first[best]].sexpr
        out.answers, out.count = sorted(best[0], key=term_key), best[1]
    return out


def f1(predicted: Sequence[object], gold: Sequence[object]) -> float:
    """Answer-set F1 (1.0 when both are empty)."""
    p, g = {str(x) for x in predicted}, {str(x) for x in gold}
    if not p and not g:
        return 1.0
    hits = len(p & g)
    if hits == 0:
        return 0.0
    precision, recall = hits / len(p), hits / len(g)
    return 2 * precision * recall / (precision + recall)


def exact_match(predicted: str | None, gold: str) -> bool:
    """EM of logical forms: equal trees (so spacing does not matter)."""
    from engine.errors import KGQAError
    from engine.sexpr import parse

    if predicted is None:
        return False
    try:
        return parse(predicted) == parse(gold)
    except KGQAError:
        return False
