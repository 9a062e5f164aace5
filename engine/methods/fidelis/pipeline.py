"""FiDeLiS end to end on the method-run protocol (:mod:`engine.methods.run`), and its own figures:
validity ratio, coverage ratio, LLM prompts and tokens per question."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.methods.fidelis.index import EmbeddingIndex
from engine.methods.fidelis.search import Outcome, SearchConfig, Searcher, SearchStep, check_steps
from engine.methods.metrics import coverage_ratio, validity_ratio
from engine.models.lm import LanguageModel
from engine.methods.fidelis.config import FidelisConfig
from engine.methods.spec import Method, Models, Prediction, empty_reply
from engine.store import Store
from loaders.questions import Question, gold_relation_path


@dataclass(frozen=True)
class PlanTrace:
    """The question's plan (F.1): keywords, planning steps, the declarative statement; whether
    the reply parsed, and whether only in part (JSON cut short)."""

    keywords: list[str]
    steps: list[str]
    statement: str
    parsed: bool
    partial: bool


@dataclass(frozen=True)
class SearchTrace:
    """One topic entity's beam search: its steps, the paths the verifier accepted and the
    reasoning paths (the accepted ones, else the last beams)."""

    topic: str
    steps: list[SearchStep]
    verified: list[str]
    paths: list[str]


@dataclass(frozen=True)
class LlmUsage:
    """The question's LLM prompts (all, and per stage) and the replies per stage that could not
    be used (the tokens are the run protocol's, in the record's ``tokens``)."""

    prompts: int
    by_stage: dict[str, int]
    malformed: dict[str, int]


@dataclass(frozen=True)
class Validity:
    """How many steps the reasoning paths take, and how many are triples of the store."""

    steps: int
    valid: int


@dataclass(frozen=True)
class Coverage:
    """The gold relation path, and the share of it among the retrieved and the kept relations."""

    gold: list[str]
    retrieved: float | None
    kept: float | None


@dataclass(frozen=True)
class FidelisTrace:
    """How FiDeLiS answered a question, as its record shows it (``coverage`` None where the
    dataset gives no gold path; ``embedding_seconds``: the question's share of the batch's
    encoder and Eq. 3 time)."""

    plan: PlanTrace
    searches: list[SearchTrace]
    paths: list[str]
    output: str | None
    llm: LlmUsage
    validity: Validity
    coverage: Coverage | None
    embedding_seconds: float


class FidelisMethod(Method):
    """FiDeLiS: Path-RAG over the store with an embedding index, and deductive-verification
    beam search with a language model. ``batch_size`` questions are searched in lock step."""

    name = "fidelis"

    def __init__(self, store: Store, models: Models, config: FidelisConfig, lm: LanguageModel, index: EmbeddingIndex) -> None:
        super().__init__(store, models, config.batch_size)
        self.config = search_config(config)
        self.searcher = Searcher(self.store, index, lm, self.config, self.meter)

    def _answer(self, questions: list[Question]) -> list[Prediction]:
        searcher = self.searcher
        searcher.embedding_seconds = 0.0
        outcomes = searcher.run(questions)
        paths = [p for o in outcomes for s in o.searches for p in s.reasoning_paths]
        valid = check_steps(self.store, paths)
        share = searcher.embedding_seconds / max(len(questions), 1)
        return [self._prediction(q, o, valid, share) for q, o in zip(questions, outcomes)]

    def _prediction(self, q: Question, o: Outcome, valid: dict, embedding_seconds: float) -> Prediction:
        text = self.searcher.text
        flags = [ok for s in o.searches for p in s.reasoning_paths for ok in valid[p]]
        gold = gold_relation_path(q)
        retrieved = {r for s in o.searches for r in s.retrieved}
        kept = {p.relations for s in o.searches for p in s.reasoning_paths}
        trace = FidelisTrace(
            plan=PlanTrace(o.plan.keywords, o.plan.steps, o.plan.statement, o.plan.parsed, o.plan.partial),
            searches=[
                SearchTrace(s.topic, s.steps, [text(p) for p in s.finished], [text(p) for p in s.reasoning_paths])
                for s in o.searches
            ],
            paths=[text(p) for s in o.searches for p in s.reasoning_paths],
            output=o.output,
            llm=LlmUsage(sum(o.usage.prompts.values()), dict(o.usage.prompts), dict(o.usage.malformed)),
            validity=Validity(len(flags), sum(flags)),
            coverage=None if gold is None else Coverage(gold, coverage_ratio(retrieved, [gold]), coverage_ratio(kept, [gold])),
            embedding_seconds=round(embedding_seconds, 5),
        )
        return Prediction(o.answers, o.answer_ids, trace, None if o.answers else why_empty(o))

    def summary(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return summarize(records, self.config, dict(self.searcher.truncated))


def why_empty(o: Outcome) -> str:
    """Why FiDeLiS's answer is empty: its search kept no reasoning path, or the answering
    model's reply named no answer."""
    if not any(s.reasoning_paths for s in o.searches):
        return "the search found no reasoning path from the topic entities"
    return empty_reply("the answering model", o.output, "names no answer")


def search_config(config: FidelisConfig) -> SearchConfig:
    """The beam search's own settings, from the method's config."""
    return SearchConfig(
        width=config.width, depth=config.depth, top_n=config.top_n, alpha=config.alpha, verifier=config.verifier,
        answer_mode=config.answer_mode, neighbour_limit=config.neighbour_limit, lookahead_limit=config.lookahead_limit,
        plan_tokens=config.plan_tokens, rank_tokens=config.rank_tokens, verify_tokens=config.verify_tokens,
        answer_tokens=config.answer_tokens,
    )


def build(config: FidelisConfig, store: Store, models: Models) -> FidelisMethod:
    """FiDeLiS as its config names it: the store's index (built when missing, refused when
    stale unless ``rebuild_index``; built on the plain store, not metered) and the model."""
    from engine.methods.fidelis.index import index_dir, open_index

    index = open_index(store, index_dir(store, config.index), config.encoder, models.device,
                       rebuild=config.rebuild_index, progress=models.progress, build=models.build_indexes)
    return FidelisMethod(store, models, config, models.lm(config.model, config.prompt_template), index)


def summarize(records: Sequence[dict[str, Any]], config: SearchConfig | None = None, truncated: dict | None = None) -> dict[str, Any]:
    """Validity and coverage ratios, LLM prompts and tokens per question, how often the model's
    replies were unusable, and the store's share of the time."""
    extras = [r["fidelis"] for r in records]
    n = max(len(extras), 1)
    covered = [e["coverage"] for e in extras if e["coverage"] is not None]
    steps = [True] * sum(e["validity"]["valid"] for e in extras)
    steps += [False] * sum(e["validity"]["steps"] - e["validity"]["valid"] for e in extras)
    total = sum(r["seconds"]["total"] for r in records)
    malformed: dict[str, int] = {}
    for e in extras:
        for k, v in e["llm"]["malformed"].items():
            malformed[k] = malformed.get(k, 0) + v
    summary: dict[str, Any] = {
        "validity_ratio": validity_ratio(steps),
        "coverage_ratio": sum(c["retrieved"] for c in covered) / len(covered) if covered else None,
        "path_coverage": sum(c["kept"] for c in covered) / len(covered) if covered else None,
        "verified": sum(any(s["verified"] for s in e["searches"]) for e in extras) / n,
        "llm_prompts": sum(e["llm"]["prompts"] for e in extras) / n,
        "plans_parsed": sum(e["plan"]["parsed"] for e in extras) / n,
        "plans_partial": sum(e["plan"].get("partial", False) for e in extras) / n,
        "malformed": malformed,
        "embedding_seconds": sum(e["embedding_seconds"] for e in extras) / n,
        "store_share": sum(r["seconds"]["store"] for r in records) / total if total > 0 else 0.0,
    }
    if truncated:
        summary["truncated"] = truncated
    if config is not None:
        summary = {"width": config.width, "depth": config.depth, "verifier": config.verifier, "answer_mode": config.answer_mode, **summary}
    return summary
