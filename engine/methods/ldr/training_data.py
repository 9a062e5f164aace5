"""LDR's fine-tuning samples (§3.4): the paper's prompt → the gold option, for every decision
the model is asked (a pool of two or more options).

- Questions with a gold relation chain (MetaQA question types, PathQuestion paths) are
  *replayed* through the store: :func:`engine.methods.ldr.pipeline.reason` runs with a
  :class:`GoldChooser` that takes the chain's option at each search step, then ``None``, no
  constraint, and the chain's last node as the answer. The prompts are exactly those a run
  shows, option pools and node types included; a chain whose option is not in the pool
  (the store lacks the edge) is counted as ``infeasible`` and exports nothing.
- WebQSP parses (``../shared/data/webqsp``) are turned into gold structures without a store
  (no Freebase here): the inferential chain from the topic entity, then one branch per
  constraint and per order, in the parse's order; the chain's middle node of a two-hop chain
  is a CVT (``topic``, as WebQSP's two-hop chains go through one), the answer node is typed
  by the answers (dates, numbers, else entities), constraint nodes by their values; targets:
  ``=`` the entity's name or the value, ``<=``/``>=`` the date, an order's ``min``/``max``.

Each :class:`engine.models.sft.Sample`'s task is its stage: ``search`` trains the paper's search
model, ``constraints`` and ``answer`` its reasoning model (``kgqa lm train --tasks``).
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.methods.lockstep import Choice
from engine.methods.ldr.pipeline import LdrConfig, open_question, reason
from engine.methods.ldr.prompts import (
    NO_CONSTRAINT,
    NONE,
    answer_prompt,
    constraint_prompt,
    search_prompt,
    stage_of,
)
from engine.methods.ldr.search import Option
from engine.methods.ldr.structure import DATE, ENTITY, NUM, TOPIC, Subgraph
from engine.models.sft import Sample
from engine.store import Store
from loaders.questions import Hop, Question, gold_hops

class Infeasible(Exception):
    """The gold decision is not among the options (the store lacks the gold edge)."""


class GoldChooser:
    """A chooser taking the gold decisions of a chain question on ``graph`` (the S_k the run
    grows), keeping a sample of every decision with two or more options."""

    def __init__(self, qid: str, graph: Subgraph, chain: Sequence[Hop]) -> None:
        self.qid, self.graph, self.chain = qid, graph, list(chain)
        self.samples: list[Sample] = []

    def __call__(self, prompt: str, options: Sequence[str]) -> Choice:
        stage = stage_of(prompt)
        if stage == "search":
            step = len(self.graph.nodes) - 1  # node k is made by step k
            target = Option(step, *self.chain[step]).text(self.graph) if step < len(self.chain) else NONE
        elif stage == "constraints":
            target = options[-1]  # chain questions have no constraint: stop
        else:
            target = self.graph.nodes[len(self.chain)].name
        if target not in options:
            raise Infeasible(f"{self.qid}: the gold option {target!r} is not in the {stage} pool")
        if len(options) > 1:
            self.samples.append(Sample(prompt, target, stage, self.qid))
        return Choice(list(options).index(target))


@dataclass
class ExportReport:
    questions: int = 0
    exported: int = 0
    no_gold: int = 0  # no chain, no topic entity
    infeasible: int = 0
    reaches_answers: int = 0  # the replay's first answer is gold (the ceiling of Hits@1)
    samples: Counter = field(default_factory=Counter)
    uncovered: Counter = field(default_factory=Counter)  # WebQSP shapes without a structure

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if not isinstance(v, Counter)}
        out["samples"] = dict(self.samples)
        if self.uncovered or self.questions and self.exported < self.questions:
            out["uncovered"] = dict(self.uncovered.most_common())
        return out


def chain_samples(
    store: Store, questions: Iterable[Question], config: LdrConfig, report: ExportReport | None = None
) -> Iterator[Sample]:
    """The samples of questions with gold chains, replayed through ``store``."""
    report = report if report is not None else ExportReport()
    for q in questions:
        report.questions += 1
        chain = gold_hops(q)
        if not chain or not q.topic_entities:
            report.no_gold += 1
            continue
        opening = open_question(store, q)
        chooser = GoldChooser(q.id, opening.graph, chain)
        try:
            r = reason(store, chooser, q, config, opening)
        except Infeasible:
            report.infeasible += 1
            continue
        report.exported += 1
        gold = set(q.answer_entities)
        if r.answers and str(r.answers[0]) in gold:
            report.reaches_answers += 1
        for s in chooser.samples:
            report.samples[s.task] += 1
            yield s


# ----------------------------------------------------------------------------- WebQSP parses
class Uncovered(Exception):
    def __init__(self, shape: str) -> None:
        super().__init__(shape)
        self.shape = shape


_DATE = re.compile(r"-?\d{4}(-\d{2}(-\d{2})?)?")
_NUMBER = re.compile(r"-?\d+(\.\d+)?")
_OPERATORS = {"Equal": "=", "LessOrEqual": "<=", "GreaterOrEqual": ">=", "LessThan": "<", "GreaterThan": ">"}


def _value_type(value: str, value_type: str | None = None) -> str:
    if value_type == "DateTime" or _DATE.fullmatch(value):
        return DATE
    if value_type in ("Integer", "Float") or _NUMBER.fullmatch(value):
        return NUM
    return ENTITY


@dataclass(frozen=True)
class GoldStructure:
    """A gold S_k: nodes after the start as (parent, relation, type), the answer node, and
    the constraints as (node, operator, target text or None)."""

    start: str
    nodes: list[tuple[int, str, str]]
    answer: int
    constraints: list[tuple[int, str, str | None]]


def webqsp_structure(parse: dict[str, Any]) -> GoldStructure:
    """The gold structure of one WebQSP parse; raises :class:`Uncovered`."""
    chain = parse.get("InferentialChain") or []
    if not parse.get("TopicEntityMid"):
        raise Uncovered("no topic entity")
    if not chain:
        raise Uncovered("empty inferential chain")
    if len(chain) > 2:
        raise Uncovered(f"inferential chain of {len(chain)} relations")
    answers = [a.get("AnswerArgument") or "" for a in parse.get("Answers") or []]
    kinds = {_value_type(a) for a, t in zip(answers, parse["Answers"]) if t.get("AnswerType") == "Value"}
    answer_type = kinds.pop() if len(kinds) == 1 else ENTITY
    nodes = [(i, relation, TOPIC if i < len(chain) - 1 else answer_type) for i, relation in enumerate(chain)]
    constraints: list[tuple[int, str, str | None]] = []
    for c in parse.get("Constraints") or []:
        op = _OPERATORS.get(c.get("Operator"))
        source = c.get("SourceNodeIndex")
        if op is None:
            raise Uncovered(f"constraint operator {c.get('Operator')}")
        if not isinstance(source, int) or not 0 <= source < len(chain):
            raise Uncovered("constraint on a node off the chain")
        if c.get("ArgumentType") == "Entity":
            kind, target = ENTITY, c.get("EntityName") or c["Argument"]
        else:
            kind, target = _value_type(str(c["Argument"]), c.get("ValueType")), str(c["Argument"])
        if kind == ENTITY and op != "=":
            raise Uncovered(f"{c.get('Operator')} on a {c.get('ArgumentType')}")
        nodes.append((source + 1, c["NodePredicate"], kind))
        constraints.append((len(nodes), op, target))
    order = parse.get("Order")
    if order:
        source = order.get("SourceNodeIndex")
        if order.get("Start") != 0 or order.get("Count") != 1:
            raise Uncovered("order past its first item")
        if not isinstance(source, int) or not 0 <= source < len(chain):
            raise Uncovered("order on a node off the chain")
        nodes.append((source + 1, order["NodePredicate"], NUM if order.get("ValueType") in ("Integer", "Float") else DATE))
        constraints.append((len(nodes), "max" if order.get("SortOrder") == "Descending" else "min", None))
    return GoldStructure(parse.get("TopicEntityName") or parse["TopicEntityMid"], nodes, len(chain), constraints)


def structure_samples(qid: str, question: str, gold: GoldStructure) -> list[Sample]:
    """The decisions of a gold structure: one search step per node, ``None``; the constraints
    (all at once, as one answer); the answer node when there is a choice."""
    graph = Subgraph(gold.start, gold.start)
    samples = []
    for parent, relation, kind in gold.nodes:
        target = Option(parent, relation, True).text(graph)
        samples.append(Sample(search_prompt(question, graph.render()), target, "search", qid))
        graph.add_node(parent, relation, True, [], kind=kind)
    samples.append(Sample(search_prompt(question, graph.render()), NONE, "search", qid))
    texts = [f"{graph.nodes[n].name} {op}" if t is None else f"{graph.nodes[n].name}{op} {t}" for n, op, t in gold.constraints]
    targets = list(dict.fromkeys(t for _, _, t in gold.constraints if t is not None))
    samples.append(Sample(constraint_prompt(question, graph.render(), targets), ", ".join(texts) or NO_CONSTRAINT, "constraints", qid))
    if len(graph.nodes) - 1 - len({n for n, _, _ in gold.constraints}) > 1:
        samples.append(Sample(answer_prompt(question, graph.render()), graph.nodes[gold.answer].name, "answer", qid))
    return samples


def webqsp_samples(questions: Iterable[dict[str, Any]], report: ExportReport) -> Iterator[Sample]:
    """The samples of every parse of every question (``questions``/``exported`` count parses)."""
    for q in questions:
        text = q.get("ProcessedQuestion") or q.get("RawQuestion") or ""
        for parse in q.get("Parses") or []:
            report.questions += 1
            try:
                gold = webqsp_structure(parse)
            except Uncovered as e:
                report.uncovered[e.shape] += 1
                continue
            report.exported += 1
            for s in structure_samples(parse.get("ParseId") or q.get("QuestionId", ""), text, gold):
                report.samples[s.task] += 1
                yield s
