"""Real data end to end, on every store: the MetaQA and PathQuestion KBs loaded through the
loaders, every dev question's gold relation path grounded with ``follow_paths``, and a sample
of those calls held against the plain-Python reference."""
from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable

import pytest

from engine.graph import Triple
from engine.reference import ReferenceStore
from engine.store import Store
from engine.stores.oxigraph import OxigraphStore
from loaders.formats import read_triples
from loaders.load import load_files
from loaders.questions import (
    Question,
    metaqa_relation_path,
    read_metaqa_questions,
    read_pathquestion,
)
from tests.conftest import STORE_KINDS

METAQA_TRIPLES = 133_582
BATCH = 400  # seeds per follow_paths call
SERVER_SAMPLE = 2_000  # dev questions per hop count a server store grounds (the embedded one grounds them all)


def _ground(
    store: Store, questions: list[Question], path_of: Callable[[Question], list[str]], distinct_edges: bool = True
) -> dict[int, set]:
    """End nodes reached from each question's topic entity along its path, batched by path."""
    by_path: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for n, q in enumerate(questions):
        by_path[tuple(path_of(q))].append(n)
    reached: dict[int, set] = {}
    for path, members in by_path.items():
        seeds = sorted({questions[n].topic_entities[0] for n in members})
        ends: dict[str, set] = defaultdict(set)
        for i in range(0, len(seeds), BATCH):
            batch = seeds[i : i + BATCH]
            for p in store.follow_paths(batch, list(path), direction="both", distinct_edges=distinct_edges).paths:
                ends[p.start].add(p.end)
        for n in members:
            reached[n] = ends.get(questions[n].topic_entities[0], set())
    return reached


def _coverage(questions: list[Question], reached: dict[int, set]) -> float:
    return sum(set(q.answers) <= reached[n] for n, q in enumerate(questions)) / len(questions)


def _metaqa_path(q: Question) -> list[str]:
    return [relation for relation, _ in metaqa_relation_path(q.qtype)]


# ----------------------------------------------------------------------------- MetaQA
@pytest.fixture(scope="module")
def metaqa_reference(shared_data) -> ReferenceStore:
    return ReferenceStore(t for t in read_triples(shared_data / "metaqa" / "kb.txt.gz", "metaqa") if isinstance(t, Triple))


@pytest.fixture(scope="module", params=STORE_KINDS)
def metaqa(request, make_module_store, shared_data):
    store = make_module_store(request.param)
    report = load_files(store, [shared_data / "metaqa" / "kb.txt.gz"], "metaqa", progress=False)
    return store, report


def _metaqa_questions(shared_data, hops: int) -> list[Question]:
    folder = shared_data / "metaqa" / f"{hops}-hop"
    return read_metaqa_questions(folder / "qa_dev.txt", folder / "qa_dev_qtype.txt")


def test_metaqa_kb_loads_every_triple_once(metaqa):
    store, report = metaqa
    assert (report.read, report.loaded, report.rejected) == (METAQA_TRIPLES, METAQA_TRIPLES, 0)
    assert store.count_triples() == METAQA_TRIPLES


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_metaqa_gold_paths_reach_the_answers(metaqa, metaqa_reference, shared_data, hops):
    """The embedded store grounds every dev question; a server store a sample, in the same
    batches, and reaches what the reference reaches from each."""
    store, _ = metaqa
    questions = _metaqa_questions(shared_data, hops)
    embedded = isinstance(store, OxigraphStore)
    if not embedded:
        questions = random.Random(hops).sample(questions, SERVER_SAMPLE)
    reached = _ground(store, questions, _metaqa_path)
    if not embedded:
        assert reached == _ground(metaqa_reference, questions, _metaqa_path)
    coverage = _coverage(questions, reached)
    assert coverage >= 0.999, f"{store.uri}: {hops}-hop coverage {coverage:.4%} of {len(questions)} questions"


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_metaqa_paths_equal_the_reference(metaqa, metaqa_reference, shared_data, hops):
    store, _ = metaqa
    sample = random.Random(hops).sample(_metaqa_questions(shared_data, hops), 150)
    for q in sample:
        path = _metaqa_path(q)
        expected = metaqa_reference.follow_paths(q.topic_entities, path)
        assert store.follow_paths(q.topic_entities, path) == expected, q.question
    seeds = [q.topic_entities[0] for q in sample[:40]]
    assert store.subgraph(seeds, 2, relations=["directed_by", "written_by"]) == metaqa_reference.subgraph(
        seeds, 2, relations=["directed_by", "written_by"]
    )
    assert store.relations(seeds) == metaqa_reference.relations(seeds)
    assert store.two_hop_relations(seeds[:10], "starred_actors") == metaqa_reference.two_hop_relations(
        seeds[:10], "starred_actors"
    )
    assert store.shortest_paths(seeds[:3], seeds[3:8], max_hops=2) == metaqa_reference.shortest_paths(
        seeds[:3], seeds[3:8], max_hops=2
    )


# ----------------------------------------------------------------------------- PathQuestion
@pytest.mark.parametrize("name, kb", [("PQ-2H", "2H-kb.txt"), ("PQ-3H", "3H-kb.txt")])
def test_pathquestion_stated_paths_reach_every_answer(make_store, store_kind, shared_data, name, kb):
    """PathQuestion's answers are the ends of its stated path walked with edges reused (e.g.
    `sophia children elena`, then `elena parents sophia`, then `sophia children elena` again), so
    the grounding lets walks reuse edges; without that, some answers are out of reach."""
    folder = shared_data / "pathquestion"
    store = make_store(store_kind)
    report = load_files(store, [folder / kb], "tsv", progress=False)
    assert report.rejected == 0 and report.loaded == store.count_triples() > 0
    questions = read_pathquestion(folder / f"{name}.txt")
    assert _coverage(questions, _ground(store, questions, lambda q: q.path, distinct_edges=False)) == 1.0
    assert _coverage(questions, _ground(store, questions, lambda q: q.path)) < 1.0
