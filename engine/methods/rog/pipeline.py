"""RoG end to end on the method-run protocol: plan, ground and reason per batch, and plan validity."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidInputError
from engine.identifiers import MAX_HOPS
from engine.models.lm import LanguageModel
from engine.methods.lockstep import run, serve
from engine.methods.rog.grounding import Grounding, grounding
from engine.methods.rog.planning import (
    PLAN_MODES,
    Frontiers,
    Plan,
    planning,
    relation_vocabulary,
)
from engine.methods.rog.reasoning import REASONING_MODES, reason
from engine.methods.spec import Method, Models, Prediction, check_options, empty_reply, option
from engine.store import Store
from loaders.questions import Question


#: the planner the engine ships: a LoRA adapter of the offline model (:mod:`engine.models.adapters`),
#: built by RoG's full recipe (engine/recipes/rog.toml)
SHIPPED_PLANNER = "rog-planner"


@dataclass(frozen=True)
class RogConfig:
    """Every option of RoG, with their defaults (listed on docs/methods/rog.md)."""

    model: str | None = option(SHIPPED_PLANNER, "planning model: HF id, directory, .gguf, LoRA adapter, or openai:MODEL[@URL] "
                               f"({SHIPPED_PLANNER}: the shipped planner `kgqa reproduce rog` trains; "
                               "SmolLM2-135M-Instruct: its untrained base)")
    reasoner: str | None = option(None, "reasoning model if not the planning model (plug-and-play)")
    prompt_template: str | None = option(None, "chat (tokenizer's), raw, llama2 (rmanluo/RoG) or a string with {prompt}")
    plan_mode: str = option("grounded", "free: the paper; vocabulary: relations of the store only; grounded: relations "
                            "leaving the frontier", choices=PLAN_MODES)
    answer_mode: str = option("paths", "paths: the path ends as answers (RoG w/o reasoning: the shipped planner does "
                              "not reason); llm: RoG's reasoning prompt (the paper); explain: the explanation prompt",
                              flag="--mode", choices=REASONING_MODES)
    k: int = option(1, "relation paths per question (beam width; the paper: 3, for its reasoner)", flag="--plans", short="-k")
    max_hops: int = option(3, "longest plan in the constrained modes", most=MAX_HOPS)
    direction: str = option("both", "which edges a plan may follow from the topic entities", choices=("out", "in", "both"))
    plan_tokens: int = option(100, "new tokens for a free plan")
    answer_tokens: int = option(128, "new tokens for an answer")
    prompt_tokens: int | None = option(4096, "paths kept in the reasoning prompt fit this many tokens (as RoG)")
    path_limit: int | None = option(None, "most paths per plan (default: all)")
    batch_size: int = option(8, "questions answered together: their plans and reasoning prompts decoded together, "
                             "their grounding store calls shared")
    training_targets: str = option("shortest", "training samples only: plan targets are every shortest path from topic "
                                   "to answers (RoG) or the question's gold relation path where the dataset gives one",
                                   choices=("shortest", "gold"))
    plans_per_question: int | None = option(None, "training samples only: at most this many of a question's target "
                                            "paths, a sample seeded by its id (default: all, as RoG)")

    def __post_init__(self) -> None:
        if self.plan_mode not in PLAN_MODES:
            raise InvalidInputError(f"unknown planning mode {self.plan_mode!r}: use {', '.join(PLAN_MODES)}")
        if self.answer_mode not in REASONING_MODES:
            raise InvalidInputError(f"unknown answer mode {self.answer_mode!r}: use {', '.join(REASONING_MODES)}")
        check_options(self)


@dataclass(frozen=True)
class PlanTrace:
    """One generated plan: its text and relations (None when unparsable), its beam score,
    whether its relations all exist and whether it grounds, and to how many paths."""

    text: str
    relations: list[str] | None
    score: float | None
    exists: bool
    grounds: bool
    paths: int


@dataclass(frozen=True)
class RogTrace:
    """How RoG answered a question: its plans, the paths they ground to (rendered; cut by
    ``path_limit`` when ``paths_truncated``), the path ends, and the reasoning model's output
    (None when answering with path ends)."""

    plans: list[PlanTrace]
    paths: list[str]
    paths_truncated: bool
    path_ends: list[str]
    output: str | None


class RogMethod(Method):
    """RoG on the method-run protocol (:mod:`engine.methods.run`): one store, a planning model
    and (unless answering with path ends) a reasoning model."""

    name = "rog"

    def __init__(
        self, store: Store, models: Models, config: RogConfig, planner: LanguageModel, reasoner: LanguageModel | None = None
    ) -> None:
        super().__init__(store, models, config.batch_size)
        self.planner = planner
        self.reasoner = reasoner or planner
        self.config = config
        self.vocabulary = relation_vocabulary(store)  # once per run, not metered
        if not self.vocabulary:
            raise InvalidInputError(f"the store {store.uri!r} holds no relations: load the KB first with `kgqa load`")

    def _answer(self, questions: list[Question]) -> list[Prediction]:
        """The batch's plans decoded together (each question's beam search under its own
        constraint, the store calls of each decoding step shared), grounded in the store with
        the batch's calls shared (each distinct plan's paths, names), then the reasoning
        prompts of the whole batch decoded together: the store calls go through the lock step
        (:mod:`engine.methods.lockstep`)."""
        c = self.config
        frontiers = [Frontiers(q.topic_entities, c.direction) for q in questions]
        plans = run(planning(
            self.planner, [q.question for q in questions], k=c.k, mode=c.plan_mode, vocabulary=self.vocabulary,
            frontiers=frontiers, max_hops=c.max_hops, max_new_tokens=c.plan_tokens,
        ), self.store)
        groundings = serve([
            grounding(q.topic_entities, [p.relations for p in ps], direction=c.direction, limit=c.path_limit)
            for q, ps in zip(questions, plans, strict=True)
        ], self.store)
        planned = [(ps, g, g.rendered(), g.answers()) for ps, g in zip(plans, groundings, strict=True)]
        if c.answer_mode == "paths":
            reasoned: list[tuple[list[str], str | None]] = [(ends, None) for _, _, _, ends in planned]
        else:
            reasoned = list(reason(
                self.reasoner,
                [(q.question, rendered) for q, (_, _, rendered, _) in zip(questions, planned, strict=True)],
                explain=c.answer_mode == "explain",
                max_new_tokens=c.answer_tokens,
                max_prompt_tokens=c.prompt_tokens,
            ))
        return [self._prediction(*p, *r) for p, r in zip(planned, reasoned, strict=True)]

    def _prediction(
        self, plans: list[Plan], grounding: Grounding, rendered: list[str], path_ends: list[str], prediction: list[str], output: str | None
    ) -> Prediction:
        trace = RogTrace(
            [
                PlanTrace(p.text, p.relations, p.score, bool(p.relations) and set(p.relations) <= self.vocabulary, n > 0, n)
                for p, n in zip(plans, grounding.paths_per_plan)
            ],
            rendered, grounding.truncated, path_ends, output,
        )
        return Prediction(list(prediction), trace=trace, warning=None if prediction else why_empty(plans, output))

    def summary(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Plan validity (parsed; relations exist; the plan grounds) and the mean number of paths."""
        return summarize_plans([r["rog"] for r in records], self.config)


def why_empty(plans: Sequence[Plan], output: str | None) -> str:
    """Why RoG's answer is empty: the reasoning model's reply (``output``) named none, or
    answering with the path ends, no plan named a relation path, or none grounded."""
    if output is not None:
        return empty_reply("the reasoning model", output, "names no answer")
    if not any(p.relations for p in plans):
        return "no plan of the planning model names a relation path (<PATH>…</PATH>)"
    return "no plan grounds in the store from the topic entities"


def build(config: RogConfig, store: Store, models: Models) -> RogMethod:
    """RoG as its config names it: the planning model, and the reasoner where it is another.
    A model server cannot plan in the constrained modes, which decode token by token."""
    from engine.models.openai_lm import is_server_model

    if config.plan_mode != "free" and is_server_model(config.model):
        raise InvalidInputError(
            f"RoG's {config.plan_mode} planning constrains the planner's decoding token by token, which the model "
            f"server {config.model!r} cannot do: plan with a local model (--model: a directory, .gguf file or hub id) "
            f"and reason over the server (--reasoner {config.model}), or plan unconstrained as the paper does "
            "(--plan-mode free)"
        )
    planner = models.lm(config.model, config.prompt_template)
    reasoner = models.lm(config.reasoner, config.prompt_template) if config.reasoner else None
    return RogMethod(store, models, config, planner, reasoner)


def summarize_plans(traces: Iterable[dict[str, Any]], config: RogConfig | None = None) -> dict[str, Any]:
    """Plan validity over RoG's per-question traces, as the records hold them."""
    extras = list(traces)
    plans = [p for e in extras for p in e["plans"]]
    n_plans = max(len(plans), 1)
    summary: dict[str, Any] = {
        "plans": len(plans),
        "plans_parsed": sum(p["relations"] is not None for p in plans) / n_plans,
        "plans_exist": sum(p["exists"] for p in plans) / n_plans,
        "plans_ground": sum(p["grounds"] for p in plans) / n_plans,
        "mean_paths": sum(len(e["paths"]) for e in extras) / max(len(extras), 1),
    }
    if config is not None:
        summary = {"plan_mode": config.plan_mode, "answer_mode": config.answer_mode, **summary}
    return summary
