"""LDR end to end on the method-run protocol (:mod:`engine.methods.run`): search, constraints, answer
location, per question, with the retrieval-quality metrics of LDR §4.3.

Per question: the start entity is the question's first topic entity (the others are
constraint entities); ONE ``names`` call for them; stage 1 (:mod:`engine.methods.ldr.search`);
stage 2 (:mod:`engine.methods.ldr.constraints`) over the constraint entities — the question's other
linked entities and the numbers and dates written in it, and with ``match_names`` the
entities of G_k whose store name the question mentions (one ``names`` call over G_k: only an
entity in G_k can satisfy a constraint); stage 3: one node of S_k (not the start node, not a
constraint position) chosen by the model, its entities in the pruned G_k are the answers in
G_k's order (first answer first; the start entity last, :func:`engine.methods.run.topic_last`); ONE
``names`` call for their names. Each stage is a program (:mod:`engine.methods.lockstep`) that
yields its decisions and store calls, so a batch of questions runs in lock step and shares
its store calls.
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.graph import Literal
from engine.methods.ldr.constraints import Target, locate_constraints, prune, question_values
from engine.methods.lockstep import (
    Chooser,
    Decide,
    NamesOf,
    Program,
    decider,
    serve,
)
from engine.methods.ldr.prompts import answer_prompt
from engine.methods.ldr.search import Search, SearchLimits, Step, top_scores
from engine.methods.ldr.structure import Subgraph, term_text
from engine.methods.metrics import graph_hit, relation_recall, tree_edit_distance
from engine.methods.run import topic_last
from engine.methods.spec import Method, Models, Prediction, check_options, option
from engine.results import shown_when_set
from engine.store import Store
from loaders.questions import Question, gold_hops


#: the model the engine ships, for both the search and the reasoning: a LoRA adapter of the offline
#: model (:mod:`engine.models.adapters`), built by LDR's lora recipe (engine/recipes/ldr.toml)
SHIPPED_MODEL = "ldr-model"


@dataclass(frozen=True)
class LdrConfig:
    """Every option of LDR, with their defaults (listed on docs/methods/ldr.md)."""

    model: str | None = option(SHIPPED_MODEL, "search model: HF id, directory, .gguf, LoRA adapter, or openai:MODEL[@URL] "
                               f"({SHIPPED_MODEL}: the shipped model `kgqa reproduce ldr --recipe lora` trains; "
                               "SmolLM2-135M-Instruct: its untrained base)")
    reasoner: str | None = option(None, "model for pruning and answer location if not the search model (the paper trains two)")
    prompt_template: str | None = option(None, "chat (the tokenizer's, default), raw, llama2 or a string with {prompt}")
    normalise: str = option("sum", "option score: summed token log-probability (Eq. 7) or the mean per token "
                            "(length-normalised beam search)", choices=("sum", "mean"))
    batch_size: int = option(8, "questions reasoned in lock step, their store calls shared and their decisions scored together; "
                             "the model keeps one prompt cache per question")
    max_steps: int = option(8, "search steps before the search is cut (reported as truncated)")
    max_options: int = option(256, "options the search pool may hold (reported as truncated)")
    relation_rows: int = option(100_000, "rows per relations call (hubs)")
    edge_limit: int = option(20_000, "edges per expand call (hubs)")
    match_names: bool = option(False, "constraint entities also from the names of G_k's entities that the question "
                               "mentions (one more names call)")
    record_triples: int = option(100, "G_k triples kept in a record (g_k_size counts them all)", least=0)

    def __post_init__(self) -> None:
        check_options(self)
        self.limits  # noqa: B018 — checks the search limits

    @property
    def limits(self) -> SearchLimits:
        return SearchLimits(self.max_steps, self.max_options, self.relation_rows, self.edge_limit)


@dataclass
class Reasoning:
    """One question's LDR run, as the record shows it."""

    graph: Subgraph
    search_steps: list[Step]
    truncated: list[str]
    targets: list[Target]
    constraints: list[str]
    constraint_steps: list[Step]
    pruned: set[int]
    answer_node: int | None
    answer_step: Step | None
    answers: list[Any]  # terms, first answer first


def mentioned(question: str, names: dict[str, str | None], exclude: Sequence[str]) -> list[Target]:
    """Entities whose name (3+ characters) the question mentions as whole words, case-insensitively."""
    text = question.casefold()
    found = []
    for entity, name in names.items():
        if entity in exclude or not name or len(name) < 3:
            continue
        if re.search(r"(?<!\w)" + re.escape(name.casefold()) + r"(?!\w)", text):
            found.append(Target(entity, name))
    return found


@dataclass
class Opening:
    """A question's start: S_k holding only the start entity, and the names of the question's
    entities (one ``names`` call)."""

    graph: Subgraph
    names: dict[str, str | None]


def opening(q: Question) -> Program[Opening]:
    """The start of :func:`reasoning` (its first topic entity is the start entity)."""
    names = yield NamesOf(tuple(dict.fromkeys(q.topic_entities)))
    start = q.topic_entities[0]
    return Opening(Subgraph(start, names.get(start)), names)


def open_question(store: Store, q: Question) -> Opening:
    """:func:`opening` served alone."""
    return serve([opening(q)], store)[0]


def reasoning(q: Question, config: LdrConfig | None = None, start_from: Opening | None = None) -> Program[Reasoning]:
    """The three stages for one question, from ``start_from`` (default :func:`opening`), as a
    program (:mod:`engine.methods.lockstep`)."""
    config = config or LdrConfig()
    if start_from is None:
        start_from = yield from opening(q)
    graph, names = start_from.graph, start_from.names
    start, linked = graph.start, list(dict.fromkeys(q.topic_entities[1:]))
    found = yield from Search(config.limits).steps(q.question, graph)
    targets = [Target(e, names.get(e) or e) for e in linked if e != start]
    targets += question_values(q.question, [start, *(n for n in names.values() if n)])
    if config.match_names and len(graph.nodes) > 1:
        ids = list(dict.fromkeys(m.term for m in graph.members[1:] if not isinstance(m.term, Literal)))
        gk_names: dict[str, str | None] = (yield NamesOf(tuple(ids))) if ids else {}  # type: ignore[arg-type]
        known = {t.term for t in targets}
        targets += [t for t in mentioned(q.question, gk_names, [start]) if t.term not in known]
    stage2 = yield from locate_constraints(q.question, graph, targets)
    pruned = prune(graph, stage2.chosen)
    positions = {c.node for c in stage2.chosen}
    candidates = [n for n in graph.nodes[1:] if n.index not in positions]
    answer_node, answer_step = None, None
    if candidates:
        texts = [n.name for n in candidates]
        choice = yield Decide(answer_prompt(q.question, graph.render()), tuple(texts))
        answer_node = candidates[choice.index].index
        answer_step = Step(len(texts), texts[choice.index], top_scores(texts, choice))
    answers = topic_last(graph.terms(answer_node, pruned), [start]) if answer_node is not None else []
    return Reasoning(
        graph, found.steps, found.truncated, targets, [c.text(graph) for c in stage2.chosen], stage2.steps,
        pruned, answer_node, answer_step, answers,
    )


def reason(store: Store, choose: Chooser, q: Question, config: LdrConfig | None = None, opening: Opening | None = None) -> Reasoning:
    """:func:`reasoning` for one question, served call by call."""
    return serve([reasoning(q, config, opening)], store, decider(choose))[0]


@dataclass(frozen=True)
class LdrTrace:
    """How LDR answered a question, as its record shows it: the start entity; the search's
    decisions and the limits it hit; S_k as abstract triples; the constraint entities, the
    decisions locating them and the constraints kept; the answer node and its decision; G_k
    (its first ``record_triples`` triples, and its size); the pruned members; the scoring
    mode; and, where the dataset gives the gold structure, the retrieval quality."""

    start: str | None
    steps: list[Step]
    truncated: list[str]
    s_k: list[list[str]]
    constraint_entities: list[str]
    constraint_steps: list[Step]
    constraints: list[str]
    answer_node: str | None
    answer_step: Step | None
    g_k: list[list[str]]
    g_k_size: int
    pruned: int
    scoring: str | None
    graph_hit: float | None = shown_when_set()
    relation_recall: float | None = shown_when_set()
    edit_distance: int | None = shown_when_set()


@dataclass(frozen=True)
class Skipped:
    """A question LDR could not start on, and why."""

    error: str


def hop_label(relation: str, forward: bool) -> str:
    """A hop as an edge label: the relation, ``^relation`` against the stored direction."""
    return relation if forward else "^" + relation


def evaluation(q: Question, r: Reasoning) -> dict[str, Any]:
    """Retrieval quality against the gold structure, where the dataset gives one (for the
    summary only; nothing here reaches the answer)."""
    out: dict[str, Any] = {}
    entities = {term_text(m.term) for m in r.graph.members}
    if q.answer_entities:
        out["graph_hit"] = graph_hit(entities, q.answer_entities)
    chain = gold_hops(q)
    if chain:
        retrieved = [(n.parent, hop_label(n.relation, n.forward)) for n in r.graph.nodes[1:]]  # type: ignore[arg-type]
        gold = [(i, hop_label(rel, fwd)) for i, (rel, fwd) in enumerate(chain)]
        out["relation_recall"] = relation_recall({n.relation for n in r.graph.nodes[1:]}, {rel for rel, _ in chain})  # type: ignore[misc]
        out["edit_distance"] = tree_edit_distance(retrieved, gold)  # type: ignore[arg-type]
    return out


def why_empty(r: Reasoning, scoring: str | None) -> str:
    """Why LDR's answer is empty: the search added nothing to the start entity (with a
    generated choice, a reply that names no option stops it), or the answer node's members
    were all pruned."""
    if r.answer_node is None:
        stop = " (a model reply that names no option chooses to stop)" if scoring == "choice" else ""
        return f"the search added no relation to the start entity {r.graph.nodes[0].name}{stop}: nothing to answer from"
    return "every member of the answer node was pruned by the constraints"


class LdrMethod(Method):
    """LDR on the method-run protocol: one store and one scoring model. The questions of a
    batch (``batch_size``) are reasoned in lock step (:mod:`engine.methods.lockstep`): each round's
    store calls of one kind go out as one call over all the questions' ids, and its decisions
    are scored together (:meth:`OptionScorer.decide`); every question gets what it would get
    alone, up to the last digits of its scores."""

    name = "ldr"

    def __init__(self, store: Store, models: Models, config: LdrConfig, choose: Chooser) -> None:
        super().__init__(store, models, config.batch_size)
        self.choose, self.config = choose, config

    def _answer(self, questions: list[Question]) -> list[Prediction]:
        return serve([self._program(q) for q in questions], self.store, decider(self.choose))

    def _program(self, q: Question) -> Program[Prediction]:
        if not q.topic_entities:
            why = "no topic entity to start from"
            return Prediction([], [], Skipped(why), why)
        r = yield from reasoning(q, self.config)
        ids = [a for a in r.answers if not isinstance(a, Literal)]
        names = (yield NamesOf(tuple(dict.fromkeys(ids)))) if ids else {}
        shown = [names.get(a) or a if not isinstance(a, Literal) else a.value for a in r.answers]
        triples = r.graph.triples(r.pruned)
        trace = LdrTrace(
            start=r.graph.nodes[0].name,
            steps=r.search_steps,
            truncated=r.truncated,
            s_k=[list(t) for t in r.graph.abstract_triples()],
            constraint_entities=[t.text for t in r.targets],
            constraint_steps=r.constraint_steps,
            constraints=r.constraints,
            answer_node=None if r.answer_node is None else r.graph.nodes[r.answer_node].name,
            answer_step=r.answer_step,
            g_k=[[t.subject, t.relation, term_text(t.object)] for t in triples[: self.config.record_triples]],
            g_k_size=len(triples),
            pruned=len(r.pruned),
            scoring=getattr(self.choose, "mode", None),
            **evaluation(q, r),
        )
        warning = None if shown else why_empty(r, trace.scoring)
        return Prediction([str(a) for a in shown], [term_text(a) for a in r.answers], trace, warning)

    def summary(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return summarize_ldr(records)


def build(config: LdrConfig, store: Store, models: Models) -> LdrMethod:
    """LDR as its config names it: the search model, and the reasoner where it is another."""
    from engine.methods.ldr.scoring import OptionScorer, StageScorer

    def scorer(source: str | None) -> OptionScorer:
        lm = models.lm(source, config.prompt_template)
        if hasattr(lm, "prefix_caches"):  # each question's next prompt begins like its last: keep one per question
            lm.prefix_caches = max(lm.prefix_caches, config.batch_size + 1)
        return OptionScorer(lm, config.normalise)

    search = scorer(config.model)
    choose = search if config.reasoner is None else StageScorer(search, scorer(config.reasoner))
    return LdrMethod(store, models, config, choose)


_QUALITY = ("graph_hit", "relation_recall", "edit_distance")


def summarize_ldr(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Retrieval quality (graph hits, relation recall, edit distance) overall, by hops and by
    question type; search steps, pool sizes and truncations."""
    extras = [r.get("ldr") or {} for r in records]
    n = max(len(extras), 1)

    def means(rows: list[dict[str, Any]]) -> dict[str, float]:
        return {k: round(sum(e[k] for e in rows if k in e) / c, 4) for k in _QUALITY if (c := sum(k in e for e in rows))}

    groups: dict[str, dict[str, list]] = {"by_hops": defaultdict(list), "by_qtype": defaultdict(list)}
    for record, e in zip(records, extras):
        if record.get("hops") is not None:
            groups["by_hops"][str(record["hops"])].append(e)
        if record.get("qtype"):
            groups["by_qtype"][record["qtype"]].append(e)
    steps = [s for e in extras for s in e.get("steps", ())]
    summary: dict[str, Any] = {
        **means(extras),
        "search_steps": round(sum(len(e.get("steps", ())) for e in extras) / n, 3),
        "mean_pool": round(sum(s["options"] for s in steps) / max(len(steps), 1), 2),
        "constraints": round(sum(len(e.get("constraints", ())) for e in extras) / n, 3),
        "truncated": sum(bool(e.get("truncated")) for e in extras),
        "scoring": next((e["scoring"] for e in extras if e.get("scoring")), None),
    }
    for key, group in groups.items():
        if group:
            summary[key] = {k: means(v) for k, v in sorted(group.items())}
    return summary
