"""ARG-KBQA retrieval (Module A) on the store operations.

1. ``relations(anchors)``: the one-hop relations of the question's entities and literals (a
   literal's are the relations of the edges that end on it, all ``in``);
2. stage 1 keeps 2k of them (bi-encoder, question vs relation), stage 2 keeps k
   (``Question: q / Relation: r``);
3. ``two_hop_relations`` per kept (r1, direction), all its anchors in one call: the relations
   around the nodes reached (from a literal, the subjects of its r1 edges);
4. stage 1 keeps 2k two-hop pairs (``One-hop Relation: r1 / Relation: r2``), stage 2 keeps k
   (``Question: q / One-hop Relation: r1 / Relation: r2``);
5. the kept one- and two-hop paths become candidate logical forms (``candidates.py``), stage 2
   ranks them (``Question: q / Logical form: lf``), and the top k are the references, ids
   replaced by names. A literal anchor gives ``(JOIN r literal)`` and, for numbers and dates,
   the comparisons ``(lt r literal)`` … ``(ge r literal)`` as well.

:func:`retrieval` is this for one question as a program (:mod:`engine.methods.lockstep`), and
:func:`retrieve_batch` serves a batch of them in lock step, the store calls shared (one
``relations`` call, one ``two_hop_relations`` call per (r1, direction), one ``names`` call),
each question getting exactly the rows its own calls would give. The ranking models run in the
meter's ``model`` stage (:mod:`engine.methods.meter`); store calls are timed by a metered store.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.methods.arg.candidates import Hop, Schema, path_forms, with_names
from engine.methods.arg.ranker import BiEncoder, Scorer, top
from engine.graph import Literal, Term, term_key
from engine.methods.lockstep import NamesOf, Program, RelationsOf, TwoHopRelationsOf, serve
from engine.methods.meter import Meter
from engine.sexpr.tree import Top, to_text
from engine.sexpr.tree import entities as tree_entities
from engine.store import Store

K = 20


@dataclass(frozen=True)
class KeptPath:
    anchor: Term  # an entity id or a Literal
    hops: tuple[Hop, ...]
    score: float


@dataclass(frozen=True)
class Reference:
    sexpr: str  # with ids
    text: str  # ids replaced by names
    score: float


@dataclass
class Retrieval:
    question: str
    paths: list[KeptPath] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)


def _two_stage(
    meter: Meter, bi: BiEncoder, scorer: Scorer, question: str, stage1: list[str], stage2: list[str], k: int
) -> list[tuple[int, float]]:
    """Indexes (and stage-2 scores) of the k items kept after 2k by stage 1."""
    with meter.stage("model"):
        first = top(bi.scores(question, stage1), 2 * k)
        second = scorer.scores(question, [stage2[i] for i in first])
    return [(first[j], second[j]) for j in top(second, k)]


def retrieve(
    store: Store,
    question: str,
    anchors: Sequence[str | Literal],
    bi: BiEncoder,
    scorer: Scorer,
    k: int = K,
    schema: Schema | None = None,
    limit: int | None = 10_000,
    meter: Meter | None = None,
) -> Retrieval:
    """The kept paths and the top-k references for a question with its gold entities and
    literals (``anchors``: ids and :class:`Literal` values)."""
    return retrieve_batch(store, [(question, anchors)], bi, scorer, k, schema, limit, meter)[0]


def retrieve_batch(
    store: Store,
    questions: Sequence[tuple[str, Sequence[str | Literal]]],
    bi: BiEncoder,
    scorer: Scorer,
    k: int = K,
    schema: Schema | None = None,
    limit: int | None = 10_000,
    meter: Meter | None = None,
) -> list[Retrieval]:
    """:func:`retrieve` for each (question, anchors), the same results, with the store calls
    of the batch shared: :func:`retrieval` served in lock step (:mod:`engine.methods.lockstep`),
    one ``relations`` call, one ``two_hop_relations`` call per (r1, direction) any question
    kept, one ``names`` call. The ranking models are timed under ``meter``'s ``model`` stage."""
    meter = meter or Meter()
    return serve([retrieval(question, anchors, bi, scorer, meter, k, schema, limit) for question, anchors in questions], store)


def retrieval(
    question: str,
    anchors: Sequence[str | Literal],
    bi: BiEncoder,
    scorer: Scorer,
    meter: Meter,
    k: int = K,
    schema: Schema | None = None,
    limit: int | None = 10_000,
) -> Program[Retrieval]:
    """:func:`retrieve` for one question, as a program."""
    result = Retrieval(question)
    rows, _ = yield RelationsOf(tuple(dict.fromkeys(anchors)), limit)
    hop1 = sorted({(r.id, r.relation, r.direction) for r in rows}, key=_hop_key)
    kept1 = _two_stage(meter, bi, scorer, question, [r for _, r, _ in hop1], [f"Relation: {r}" for _, r, _ in hop1], k)
    result.paths = [KeptPath(hop1[i][0], ((hop1[i][1], hop1[i][2]),), s) for i, s in kept1]
    by_r1: dict[tuple[str, str], list[Term]] = defaultdict(list)
    for path in result.paths:
        (r1, d1), = path.hops
        by_r1[(r1, d1)].append(path.anchor)
    keys = sorted(by_r1)
    found = yield [TwoHopRelationsOf(tuple(by_r1[key]), *key, limit) for key in keys]
    hop2 = {(row.id, r1, d1, row.relation, row.direction) for (r1, d1), (rows, _) in zip(keys, found, strict=True) for row in rows}
    pairs = sorted(hop2, key=_hop_key)
    texts = [f"One-hop Relation: {r1}\nRelation: {r2}" for _, r1, _, r2, _ in pairs]
    kept2 = _two_stage(meter, bi, scorer, question, texts, texts, k)
    result.paths += [KeptPath(pairs[i][0], ((pairs[i][1], pairs[i][2]), (pairs[i][3], pairs[i][4])), s) for i, s in kept2]
    forms = list(dict.fromkeys(f for p in result.paths for f in path_forms(p.anchor, list(p.hops), schema)))
    # the question's own names: another question's ids never rename this one's text
    names = yield NamesOf(tuple(sorted({i for f in forms for i in tree_entities(f)})))
    result.references = rank_forms(meter, scorer, question, forms, names, k)
    return result


def _hop_key(row: tuple) -> tuple:
    """Rows (anchor, …) in a total order, entity ids and literals mixed."""
    return (term_key(row[0]), *row[1:])


def rank_forms(
    meter: Meter, scorer: Scorer, question: str, forms: list[Top], names: dict[str, Any], k: int
) -> list[Reference]:
    """The top k of a question's candidate forms by stage 2, each shown with names for ids."""
    texts = [to_text(f) for f in forms]
    named = [with_names(f, names) for f in forms]
    with meter.stage("model"):
        scores = scorer.scores(question, [f"Logical form: {t}" for t in named])
    return [Reference(texts[i], named[i], round(scores[i], 6)) for i in top(scores, k)]
