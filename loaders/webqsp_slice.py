"""The WebQSP slice over FB15k-237: the WebQSP questions whose gold logical form, moved onto
FB15k-237's relations (:mod:`loaders.fb15k237`) and executed on a store holding the KB, returns
at least one gold answer.

Per parse (:mod:`engine.sexpr.webqsp`): the topic entity must be a KB entity; the inferential
chain becomes KB hops — one hop per relation (``1-hop``, ``2-hop``), or, for a two-relation
chain, the compound relation of the pair through its CVT node (``cvt``, tried first), each hop
as stored or as its reverse property walked backwards; the gold answers the KB holds (entities
of its triples) are the question's answers, and the chain alone must reach one of them. Then
the parse's constraints (:func:`engine.sexpr.webqsp.steps`) are added one at a time, in order;
one is kept when its relations are in the KB and the form with it still returns a gold answer,
and dropped otherwise (a constraint on a CVT node the KB collapsed always is). With
``strict_constraints`` a question that loses a constraint drops out instead. A question takes
its first parse that passes; one that drops out reports the furthest check any parse reached.

Beside the slice, :func:`chain_records` keeps the questions left out because their topic entity
is not in the KB whose chain has one form on the KB (the dataset ``webqsp-fb15k237-chains``):
they cannot be answered on the KB, but their question and gold relation path still teach a
planner which relations a question asks for.
"""
from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from engine.errors import InvalidInputError, clipped
from engine.results import to_json
from engine.sexpr.tree import (
    And,
    Compare,
    Entity,
    Expr,
    Extreme,
    Join,
    Rel,
    Relation,
    Reverse,
    TimeConstraint,
    to_text,
)
from engine.sexpr.webqsp import (
    InvalidParse,
    Step,
    Uncovered,
    check_gold,
    check_question,
    read_questions,
    steps,
    topic_and_chain,
)
from engine.store import Store
from loaders.fb15k237 import FB15k237, Hop, ensure_loaded, read_kb

SHAPES = ("1-hop", "2-hop", "cvt")
#: why a question drops out, in the order the checks run
DROPS = (
    "unconvertible parse",
    "topic not in KB",
    "relation not in KB",
    "no gold answer in KB",
    "no gold answer reached",
    "constraint not kept",
)
#: why a constraint is not kept
CONSTRAINT_DROPS = ("unconvertible", "on a CVT node", "relation not in KB", "no gold answer left")


class Dropped(Exception):
    """A parse that does not make it into the slice: ``reason`` (one of :data:`DROPS`) and a detail."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class _NotInKB(Exception):
    pass


@dataclass(frozen=True)
class ChainForm:
    """A chain moved onto the KB: its hops, and for each chain node the KB node it is (None:
    a CVT node the compound relation collapses)."""

    shape: str
    hops: tuple[Hop, ...]
    nodes: tuple[int | None, ...]


def chain_forms(kb: FB15k237, chain: list[str]) -> list[ChainForm]:
    """Every way a chain is in the KB, the compound relation of a pair first."""
    forms = []
    if len(chain) == 2:
        forms += [ChainForm("cvt", (hop,), (None, 0)) for hop in kb.cvt_hops(*chain)]
    shape = "1-hop" if len(chain) == 1 else f"{len(chain)}-hop"
    options = [kb.hops(relation) for relation in chain]
    forms += [ChainForm(shape, combo, tuple(range(len(chain)))) for combo in itertools.product(*options)]
    return forms


def _walk(hop: Hop, forward: bool = True) -> Rel:
    """The S-expression relation that walks ``hop`` (backwards when not ``forward``) from a
    set: ``(JOIN (R r) x)`` walks r as stored."""
    stored = hop.forward == forward
    return Reverse(Relation(hop.relation)) if stored else Relation(hop.relation)


def _on_kb(kb: FB15k237, node: Expr) -> Expr:
    """A constraint tree with its Freebase relations replaced by the KB's; raises
    :class:`_NotInKB`. Relations that must lead to values (comparisons, TC, ARGMAX) must be
    stored in their own direction."""
    if isinstance(node, Join):
        rel = node.relation
        name = rel.relation.name if isinstance(rel, Reverse) else rel.name
        hops = kb.hops(name)
        if not hops:
            raise _NotInKB(name)
        return Join(_walk(hops[0], isinstance(rel, Reverse)), _on_kb(kb, node.arg))
    if isinstance(node, And):
        return And(_on_kb(kb, node.left), _on_kb(kb, node.right))
    if isinstance(node, TimeConstraint):
        return TimeConstraint(_on_kb(kb, node.arg), _stored(kb, node.relation), node.year)
    if isinstance(node, Extreme):
        if not isinstance(node.path, Relation):
            raise _NotInKB(to_text(node.path))
        return Extreme(node.op, _on_kb(kb, node.arg), _stored(kb, node.path))
    if isinstance(node, Compare):
        return Compare(node.op, _stored(kb, node.relation), node.value)
    return node


def _stored(kb: FB15k237, relation: Relation) -> Relation:
    for hop in kb.hops(relation.name):
        if hop.forward:
            return Relation(hop.relation)
    raise _NotInKB(relation.name)


def build_form(topic: str, chain: ChainForm, kept: list[Step]) -> Expr:
    """The S-expression of a chain on the KB from ``topic`` with the constraints ``kept``
    (already on the KB's relations) on their nodes."""
    expr: Expr = Entity(topic)
    for k, hop in enumerate(chain.hops):
        expr = Join(_walk(hop), expr)
        for step in kept:
            if chain.nodes[step.node] == k:
                expr = step.apply(expr)
    return expr


@dataclass
class SliceReport:
    """What a build kept, per shape, and why the rest dropped out."""

    source: str = ""
    questions: int = 0
    kept: int = 0
    #: shape -> {"questions", "without_constraints", "with_constraints"} (constraints kept)
    shapes: dict[str, dict[str, int]] = field(default_factory=lambda: {s: Counter() for s in SHAPES})
    #: reason (:data:`DROPS`) -> questions
    dropped: Counter = field(default_factory=Counter)
    #: reason -> detail (uncovered shape, the chain not in the KB, …) -> questions
    drop_details: dict[str, Counter] = field(default_factory=dict)
    #: constraints of the kept questions: "total", "kept", and per reason (:data:`CONSTRAINT_DROPS`)
    constraints: Counter = field(default_factory=Counter)
    #: kept questions that had constraints, and those that lost at least one
    questions_with_constraints: int = 0
    questions_relaxed: int = 0
    strict_constraints: bool = False
    #: the KB: its triples, relations and entities, the store it was read from, and the
    #: triples this build loaded into that store (0 when it held them already)
    kb: dict[str, Any] = field(default_factory=dict)
    executions: int = 0
    seconds: float = 0.0
    #: questions written to ``chains.jsonl`` (:func:`chain_records`)
    chain_questions: int = 0


@dataclass
class _Context:
    kb: FB15k237
    store: Store
    strict: bool
    executions: int = 0

    def reaches(self, expr: Expr, gold: set[str]) -> bool:
        self.executions += 1
        return not gold.isdisjoint(self.store.execute(expr).answers)


def _answers(parse: dict[str, Any], kb: FB15k237) -> tuple[list[dict[str, Any]], list[str]]:
    """(gold answers that are KB entities, the others as written)."""
    inside, outside = [], []
    for a in parse.get("Answers") or []:
        if a.get("AnswerType") == "Entity" and a["AnswerArgument"] in kb.entities:
            inside.append(a)
        else:
            outside.append(a["AnswerArgument"])
    return inside, outside


def _topic_and_chain(parse: dict[str, Any]) -> tuple[str, list[str]]:
    """:func:`topic_and_chain` of a parse whose ``ParseId`` and gold answers the slice can read
    as well (:func:`check_gold`); raises :class:`Uncovered`."""
    found = topic_and_chain(parse)
    check_gold(parse)
    return found


def _record(q: dict[str, Any], parse: dict[str, Any], ctx: _Context) -> dict[str, Any]:
    """The slice's record of one parse; raises :class:`Dropped`."""
    kb = ctx.kb
    try:
        topic, chain = _topic_and_chain(parse)
    except Uncovered as e:
        raise Dropped("unconvertible parse", e.shape) from e
    if topic not in kb.entities:
        raise Dropped("topic not in KB", "")
    forms = chain_forms(kb, chain)
    if not forms:
        raise Dropped("relation not in KB", " → ".join(chain))
    inside, outside = _answers(parse, kb)
    if not inside:
        raise Dropped("no gold answer in KB", "no answers" if not outside else "answers not KB entities")
    gold = {a["AnswerArgument"] for a in inside}
    form = next((f for f in forms if ctx.reaches(build_form(topic, f, []), gold)), None)
    if form is None:
        raise Dropped("no gold answer reached", forms[0].shape)
    kept: list[Step] = []
    dropped: list[dict[str, str]] = []
    for step in steps(parse, len(chain)):
        outcome = _constraint_on_kb(step, topic, form, kept, gold, ctx)
        if isinstance(outcome, Step):
            kept.append(outcome)
        else:
            shown = step.shape if isinstance(step, Uncovered) else to_text(step.wrap)
            dropped.append({"reason": outcome, "constraint": shown})
    if dropped and ctx.strict:
        raise Dropped("constraint not kept", dropped[0]["reason"])
    relations = [hop.relation for hop in form.hops]
    return {
        "id": q["QuestionId"],
        "question": q["RawQuestion"],
        "answer": [kb.names.get(a["AnswerArgument"]) or a.get("EntityName") or a["AnswerArgument"] for a in inside],
        "q_entity": [topic],
        "a_entity": [a["AnswerArgument"] for a in inside],
        "hops": len(form.hops),
        "qtype": form.shape + ("+constraints" if kept else ""),
        "path": relations,
        "path_forward": [hop.forward for hop in form.hops],
        "sexpr": to_text(build_form(topic, form, kept)),
        "shape": form.shape,
        "topic_names": [kb.names.get(topic, parse.get("TopicEntityName") or topic)],
        "constraints_kept": len(kept),
        "constraints_dropped": dropped,
        "answers_not_in_kb": outside,
        "parse_id": parse["ParseId"],
        "webqsp_chain": chain,
    }


def _constraint_on_kb(
    step: Step | Uncovered, topic: str, form: ChainForm, kept: list[Step], gold: set[str], ctx: _Context
) -> Step | str:
    """The constraint on the KB's relations when it is kept, else why not (:data:`CONSTRAINT_DROPS`)."""
    if isinstance(step, Uncovered):
        return "unconvertible"
    if form.nodes[step.node] is None:
        return "on a CVT node"
    try:
        on_kb = Step(step.node, _on_kb(ctx.kb, step.wrap))  # type: ignore[arg-type]
    except _NotInKB:
        return "relation not in KB"
    return on_kb if ctx.reaches(build_form(topic, form, [*kept, on_kb]), gold) else "no gold answer left"


def build_slice(
    questions: list[dict[str, Any]],
    kb: FB15k237,
    store: Store,
    *,
    strict_constraints: bool = False,
    source: str = "",
    progress: bool = False,
) -> tuple[list[dict[str, Any]], SliceReport]:
    """The slice's records (RoG-style JSON rows: ``id``, ``question``, ``answer`` names,
    ``q_entity``, ``a_entity`` MIDs, with ``hops``, ``qtype``, ``path``, ``sexpr`` and
    provenance) of WebQSP ``questions`` (``Questions`` of the JSON), and the report. ``store``
    holds the KB (:func:`loaders.fb15k237.ensure_loaded`)."""
    started = time.perf_counter()
    ctx = _Context(kb, store, strict_constraints)
    report = SliceReport(source=source, strict_constraints=strict_constraints)
    records: list[dict[str, Any]] = []
    for q in tqdm(questions, desc="webqsp slice", unit="q", disable=not progress):
        report.questions += 1
        worst: Dropped | None = None
        for parse in q.get("Parses") or []:
            try:
                record = _record(q, parse, ctx)
            except Dropped as e:
                if worst is None or DROPS.index(e.reason) > DROPS.index(worst.reason):
                    worst = e
                continue
            break
        else:
            worst = worst or Dropped("unconvertible parse", "no parse")
            report.dropped[worst.reason] += 1
            report.drop_details.setdefault(worst.reason, Counter())[worst.detail] += 1
            continue
        records.append(record)
        _count(report, record)
    report.executions = ctx.executions
    report.seconds = round(time.perf_counter() - started, 2)
    return records, report


def chain_records(questions: list[dict[str, Any]], kb: FB15k237, kept: set[str]) -> list[dict[str, Any]]:
    """Questions with a gold relation path and nothing to walk from: each question not in
    ``kept`` (the slice's ids) whose first convertible parse has a topic entity the KB lacks and
    a chain with exactly one form on the KB, with that form's relations as ``path``, and no
    topic or answer entities. A chain with several forms (a relation as stored or as its
    reverse walked backwards, a CVT compound or two hops) is left out: with no topic to walk
    from, nothing tells on which of them the answers lie."""
    records = []
    for q in questions:
        if q["QuestionId"] in kept:
            continue
        for parse in q.get("Parses") or []:
            try:
                topic, chain = _topic_and_chain(parse)
            except Uncovered:
                continue
            forms = chain_forms(kb, chain)
            if topic not in kb.entities and len(forms) == 1:
                form = forms[0]
                records.append({
                    "id": q["QuestionId"],
                    "question": q["RawQuestion"],
                    "answer": [a.get("EntityName") or a["AnswerArgument"] for a in parse.get("Answers") or []],
                    "q_entity": [],
                    "a_entity": [],
                    "hops": len(form.hops),
                    "qtype": form.shape,
                    "path": [hop.relation for hop in form.hops],
                    "path_forward": [hop.forward for hop in form.hops],
                    "parse_id": parse["ParseId"],
                    "webqsp_chain": chain,
                })
            break
    return records


def _count(report: SliceReport, record: dict[str, Any]) -> None:
    report.kept += 1
    kept, lost = record["constraints_kept"], record["constraints_dropped"]
    report.shapes[record["shape"]]["questions"] += 1
    report.shapes[record["shape"]]["with_constraints" if kept else "without_constraints"] += 1
    report.constraints["total"] += kept + len(lost)
    report.constraints["kept"] += kept
    for item in lost:
        report.constraints[item["reason"]] += 1
    report.questions_with_constraints += bool(kept or lost)
    report.questions_relaxed += bool(lost)


def format_report(report: SliceReport) -> str:
    """The report as text tables."""
    lines = [
        f"WebQSP over FB15k-237 from {report.source or 'the questions given'}: "
        f"{report.kept:,} of {report.questions:,} questions kept"
        + (" (constraints strict)" if report.strict_constraints else ""),
    ]
    if report.kb:
        lines.append(
            f"KB {report.kb['directory']}: {report.kb['triples']:,} triples, {report.kb['relations']:,} relations, "
            f"{report.kb['entities']:,} entities, in {report.kb['store']}"
        )
    lines += [
        "",
        f"{'shape':<8}{'questions':>11}{'no constraint':>15}{'with constraints':>18}",
    ]
    total: Counter = Counter()
    for shape in SHAPES:
        row = report.shapes[shape]
        total.update(row)
        lines.append(f"{shape:<8}{row['questions']:>11,}{row['without_constraints']:>15,}{row['with_constraints']:>18,}")
    lines.append(f"{'all':<8}{total['questions']:>11,}{total['without_constraints']:>15,}{total['with_constraints']:>18,}")
    c = report.constraints
    lines += [
        "",
        f"constraints in kept questions: {c['total']:,}, kept {c['kept']:,}"
        + "".join(f"; {reason} {c[reason]:,}" for reason in CONSTRAINT_DROPS if c[reason]),
        (
            f"kept questions with constraints: {report.questions_with_constraints:,}, "
            f"of which lost at least one: {report.questions_relaxed:,}"
        ),
        "",
        f"{'dropped because':<26}{'questions':>10}",
    ]
    for reason in DROPS:
        if report.dropped[reason]:
            lines.append(f"{reason:<26}{report.dropped[reason]:>10,}")
            for detail, n in report.drop_details[reason].most_common(5):
                if detail:
                    lines.append(f"    {detail[:70]:<70}{n:>6,}")
    lines.append(f"{'all':<26}{sum(report.dropped.values()):>10,}")
    lines.append(f"\n{report.chain_questions:,} questions left out for a topic entity the KB lacks have a chain with "
                 "one form on the KB: chains.jsonl, a planner's training questions")
    lines.append(f"{report.executions:,} S-expressions executed in {report.seconds:.1f} s")
    return "\n".join(lines)


def summary(report: SliceReport) -> dict[str, Any]:
    """A build's counts without its paths and timings, the same wherever the same files are built
    (``kgqa webqsp build --summary``; the docs' numbers are those of ``results/datasets/``)."""
    return {
        "source": report.source,
        "strict_constraints": report.strict_constraints,
        "questions": report.questions,
        "kept": report.kept,
        "shapes": {shape: report.shapes[shape]["questions"] for shape in SHAPES},
        "dropped": {reason: report.dropped[reason] for reason in DROPS},
        "chain_questions": report.chain_questions,
        "kb": {key: report.kb.get(key) for key in ("triples", "relations", "entities")},
    }


def write_slice(
    directory: str | os.PathLike[str], records: list[dict[str, Any]], report: SliceReport, chains: list[dict[str, Any]]
) -> Path:
    """``questions.jsonl``, ``chains.jsonl`` (:func:`chain_records`), ``report.json`` and
    ``report.txt`` in ``directory``; the questions' path."""
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidInputError(f"cannot create the output directory {str(out)!r}: {e.strerror}") from e
    questions = out / "questions.jsonl"
    for path, rows in ((questions, records), (out / "chains.jsonl", chains)):
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    (out / "report.json").write_text(json.dumps(to_json(report), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "report.txt").write_text(format_report(report) + "\n", encoding="utf-8")
    return questions


def check_questions(questions: list[Any]) -> None:
    """Refuse questions of which one is not a WebQSP question the slice can read
    (:func:`check_question`), naming it and its field, or has the ``QuestionId`` of an earlier
    one (the question file built from them could not be loaded), naming both."""
    numbers: dict[str, int] = {}
    for number, question in enumerate(questions, 1):
        try:
            check_question(question)
        except InvalidParse as e:
            raise InvalidInputError(f"question #{number}: {e}; give WebQSP.train.json or WebQSP.test.json as published") from e
        first = numbers.setdefault(question["QuestionId"], number)
        if first != number:
            raise InvalidInputError(
                f"question #{number}: QuestionId {clipped(repr(question['QuestionId']), 100)} is that of question #{first} "
                "too; give each question its own id, or WebQSP.train.json or WebQSP.test.json as published"
            )


def check_webqsp_file(webqsp: str | os.PathLike[str]) -> None:
    """Refuse a WebQSP path that is not a file, naming the files it should be."""
    if not Path(webqsp).is_file():
        raise InvalidInputError(f"WebQSP file {str(webqsp)!r} does not exist: give WebQSP.train.json or WebQSP.test.json (.gz allowed)")


def build_from_files(
    webqsp: str | os.PathLike[str],
    kb_dir: str | os.PathLike[str],
    store: Store,
    out: str | os.PathLike[str],
    *,
    ontology: str | os.PathLike[str],
    strict_constraints: bool = False,
    progress: bool = True,
) -> SliceReport:
    """Read a WebQSP JSON file and an FB15k-237 directory, load the KB into ``store`` when it
    is empty, build the slice and write it to ``out`` (:func:`write_slice`)."""
    check_webqsp_file(webqsp)
    questions = read_questions(webqsp)  # before the KB is read and loaded: a wrong file is named at once
    check_questions(questions)
    kb = read_kb(kb_dir, ontology)
    loaded = ensure_loaded(store, kb_dir, kb, progress=progress)
    records, report = build_slice(
        questions, kb, store, strict_constraints=strict_constraints, source=Path(webqsp).name, progress=progress
    )
    report.kb = {
        "directory": str(kb_dir),
        "triples": kb.triples,
        "relations": len(kb.relations),
        "entities": len(kb.entities),
        "store": store.uri,
        "loaded_now": loaded.loaded if loaded is not None else 0,
    }
    chains = chain_records(questions, kb, {r["id"] for r in records})
    report.chain_questions = len(chains)
    write_slice(out, records, report, chains)
    return report
