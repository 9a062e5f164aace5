"""The one batching mechanism: programs served in lock step (their store calls of one kind in
one call, each request getting exactly its own call's answer), decoding run step by step
(:func:`engine.models.steps.stepwise`, ``beam_search_steps``), and the meter timing a call
that runs step by step."""
from __future__ import annotations

import random
import threading

import pytest

from engine.identifiers import UNBOUNDED
from engine.methods.lockstep import (
    Choice,
    Decide,
    ExpandOf,
    FollowPathsOf,
    NamesOf,
    RelationsOf,
    SearchOf,
    TwoHopRelationsOf,
    ask,
    one_by_one,
    run,
    serve,
    together,
)
from engine.methods.meter import Meter
from engine.models.steps import stepwise
from tests.random_graphs import node_ids, random_graph


def test_requests_of_one_kind_share_one_call_and_each_gets_its_own_answer(make_store, store_kind):
    """Programs asking single requests and lists of them, of every kind, in rounds: one call per
    kind and round, and every request answered as its own call answers it."""
    triples = random_graph(7, nodes=25, edges=90)
    store = make_store(store_kind, triples)
    ids = node_ids(triples)
    relation = sorted({t.relation for t in triples})[0]
    rng = random.Random(2)
    groups = [tuple(rng.sample(ids, rng.randint(1, 3))) for _ in range(4)]

    def program(group: tuple[str, ...]):
        rows = yield RelationsOf(group, UNBOUNDED)
        many = yield [ExpandOf(group, None, "both", UNBOUNDED), ExpandOf(group, (relation,), "out", UNBOUNDED),
                      TwoHopRelationsOf(group, relation, "both", UNBOUNDED)]
        paths, names = yield [FollowPathsOf(group, (relation, relation), "both", UNBOUNDED), NamesOf(group)]
        hits = yield SearchOf(group[0], "contains", 5)
        return rows, many, paths, names, hits

    def alone(group: tuple[str, ...]):
        def answer(result, rows: str):
            return getattr(result, rows), result.truncated
        return (
            answer(store.relations(list(group), "both", UNBOUNDED), "rows"),
            [answer(store.expand(list(group), None, "both", UNBOUNDED), "edges"),
             answer(store.expand(list(group), [relation], "out", UNBOUNDED), "edges"),
             answer(store.two_hop_relations(list(group), relation, "both", UNBOUNDED), "rows")],
            answer(store.follow_paths(list(group), [relation, relation], "both", UNBOUNDED), "paths"),
            store.names(list(group)),
            store.search(group[0], "contains", 5).hits,
        )

    meter = Meter()
    got = serve([program(g) for g in groups], meter.store(store))
    assert got == [alone(g) for g in groups]
    # relations; expand ×2, two_hop_relations; follow_paths, names; a search per distinct text
    assert meter.calls["store"] == 1 + 3 + 2 + len({g[0] for g in groups})


def test_decisions_go_to_the_decider_in_program_order_and_lists_may_be_empty():
    asked: list[str] = []

    def choose(prompt, options):
        asked.append(prompt)
        return Choice(len(options) - 1)

    def program(name: str):
        nothing = yield []
        first = yield Decide(name, ("a", "b"))
        both = yield [Decide(name + "!", ("x",)), Decide(name + "?", ("y", "z"))]
        return nothing, first.index, [c.index for c in both]

    assert serve([program("p"), program("q")], None, one_by_one(choose)) == [([], 1, [0, 1])] * 2  # type: ignore[arg-type]
    assert asked == ["p", "q", "p!", "p?", "q!", "q?"]
    with pytest.raises(ValueError, match="no decider"):
        serve([program("p")], None)  # type: ignore[arg-type]


def test_programs_run_together_inside_a_program():
    def inner(n: int):
        return (yield NamesOf((f"e{n}",)))

    def outer():
        first = yield from together([inner(1), inner(2)])
        second = yield from ask(NamesOf(("e3",)))
        return first, second

    class Names:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def names(self, ids):
            self.calls.append(list(ids))
            return {i: i.upper() for i in ids}

    store = Names()
    assert run(outer(), store) == ([{"e1": "E1"}, {"e2": "E2"}], {"e3": "E3"})  # type: ignore[arg-type]
    assert store.calls == [["e1", "e2"], ["e3"]]


def test_stepwise_hands_each_question_to_the_caller_and_returns_or_raises():
    def compute(ask):
        return [ask(n) for n in range(3)]

    steps = stepwise(compute)
    asked = [next(steps)]
    try:
        while True:
            asked.append(steps.send(asked[-1] * 10))
    except StopIteration as done:
        assert done.value == [0, 10, 20]
    assert asked == [0, 1, 2]

    def failing(ask):
        ask("first")
        raise KeyError("inside")

    steps = stepwise(failing)
    assert next(steps) == "first"
    with pytest.raises(KeyError, match="inside"):
        steps.send(None)


def test_closing_a_stepwise_generator_early_stops_its_computation():
    stopped = threading.Event()

    def compute(ask):
        try:
            while True:
                ask("more?")
        finally:
            stopped.set()

    before = threading.active_count()
    steps = stepwise(compute)
    assert next(steps) == "more?" and steps.send(None) == "more?"
    steps.close()
    assert stopped.is_set() and threading.active_count() == before


def test_a_call_run_step_by_step_is_model_time_only_while_it_runs(monkeypatch):
    clock = [100.0]  # a clock the test moves, so that no timing enters the test
    monkeypatch.setattr("engine.methods.meter.time.perf_counter", lambda: clock[0])

    class StepLM:
        def beam_search_steps(self, prompts, **_):
            def steps():
                for _ in range(3):
                    clock[0] += 1.0  # a decoding step
                    yield [(0, [])]
                clock[0] += 0.5
                return [["done"]]
            return steps()

    meter = Meter()
    lm = meter.lm(StepLM())
    decoding = lm.beam_search_steps(["p"])
    rows = next(decoding)
    try:
        while True:
            with meter.stage("store"):  # the caller's own work between steps
                clock[0] += 10.0
            rows = decoding.send([[1]] * len(rows))
    except StopIteration as done:
        assert done.value == [["done"]]
    assert meter.calls["llm"] == 1
    assert meter.seconds["model"] == pytest.approx(3.5) and meter.seconds["store"] == pytest.approx(30.0)


def test_beam_search_steps_decodes_as_the_same_rules_do(tmp_path):
    """A tiny model's beam search, each step's allowed tokens handed in between steps, gives
    what the same rules give inside the decoding, for prompts decoded in several chunks."""
    from engine.models.loading import load_lm
    from tests.tiny_lm import make_tiny_lm

    lm = load_lm(make_tiny_lm(tmp_path / "tiny"), template="raw")
    lm.batch_size = 2
    vowels = [lm.encode(c)[0] for c in "aeiou"]
    consonants = [lm.encode(c)[0] for c in "bcdfg"]

    def rule(i: int):
        return lambda generated: (vowels if (len(generated) + i) % 2 else consonants) + ([lm.eos_token_id] if len(generated) > 3 else [])

    prompts = ["who directed", "a much longer prompt than the others", "q", "which films"]
    rules = [rule(i) for i in range(len(prompts))]
    want = lm.beam_search_batch(prompts, num_beams=2, max_new_tokens=6, allowed_tokens=rules)
    decoding = lm.beam_search_steps(prompts, num_beams=2, max_new_tokens=6)
    steps = 0
    try:
        rows = next(decoding)
        while True:
            steps += 1
            rows = decoding.send([rules[i](generated) for i, generated in rows])
    except StopIteration as done:
        got = done.value
    assert [[g.text for g in gs] for gs in got] == [[g.text for g in gs] for gs in want]
    assert [[g.score for g in gs] for gs in got] == [[g.score for g in gs] for gs in want]
    assert steps > 6  # more than one chunk's steps
    assert all(set(g.text) <= set("aeioubcdfg") for gs in got for g in gs)
