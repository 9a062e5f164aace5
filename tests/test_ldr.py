"""LDR: verbatim prompts; G_k/S_k against the paper's definitions; the option pool, expansion and
grouping on every store against plain Python (one relations and one expand call per step);
the limits; constraints (the paper's KITT example, every operator on dates and numbers); the
option scorer; gold training samples (chains replayed through the store, WebQSP parses); and
``kgqa ldr`` end to end (export → train → run → eval with a tiny model, and the offline
SmolLM2)."""
from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError, UnsupportedOperationError
from engine.graph import NAME_RELATION, XSD, Literal, Triple, term_key
from engine.methods.ldr.constraints import (
    Constraint,
    Target,
    constraint_pool,
    prune,
    question_values,
)
from engine.methods.lockstep import Choice, Decide
from engine.methods.ldr.pipeline import LdrConfig, LdrMethod, reason
from engine.methods.spec import Models
from engine.results import to_json
from engine.methods.ldr.prompts import (
    NONE,
    answer_prompt,
    constraint_prompt,
    search_prompt,
    stage_of,
)
from engine.methods.ldr.scoring import OptionScorer, StageScorer, match_option
from engine.methods.ldr.search import Search, SearchLimits
from engine.methods.ldr.structure import Child, Subgraph, entity_type, node_type
from engine.methods.ldr.training_data import (
    ExportReport,
    chain_samples,
    structure_samples,
    webqsp_samples,
    webqsp_structure,
)
from engine.methods.metrics import tree_edit_distance
from engine.sexpr.webqsp import read_questions
from engine.models.lm import Generation, LanguageModel
from engine.models.loading import load_lm
from engine.methods.meter import Meter
from engine.methods.run import run_method
from loaders.questions import Question
from tests.random_graphs import node_ids, random_graph
from tests.test_sft import tiny  # noqa: F401  (the tiny character-level Llama fixture)

# the prompts as ../shared/methods/LDR.md gives them
NOTES_SEARCH = (
    "Below is a wikipedia question, you can retrieve a graph to help you answer the question. The retrieved graph "
    "information is given as information triple like (Entity1, Relation, Entity2), or only the name of the start entity. "
    "Decide which entity and corresponding relation to retrieve next, response in form of 'entity+relation'. Response "
    "'None' if the retrieved graph is informative enough to answer the question. Question: <Q> Retrieved graph: <S_k as "
    "triples> Next retrieve:"
)
NOTES_CONSTRAINTS = (
    "Below is a question with a support graph presented as triples (entity A, relation, entity B). The entity name in "
    "the support graph is 'type_id'. 'Type' denotes the entity type, which includes four types: ordinary entity (entity), "
    "topic entity (topic), number (num), and date (date). 'Id' is an incremental identifier used to distinguish entities. "
    "Please match all the constrains with one of the entity in the support graph. Support graph: <S_k> Question: <Q> "
    "Constraints: <constraint entities> Determine result:"
)
NOTES_ANSWER_TAIL = (
    "Please select the answer from the support graph by choosing the right entity. Support graph: <S_k> Question: <Q> "
    "Answer entity:"
)


def test_prompts_are_verbatim():
    assert search_prompt("<Q>", "<S_k as triples>") == NOTES_SEARCH
    assert constraint_prompt("<Q>", "<S_k>", ["<constraint entities>"]) == NOTES_CONSTRAINTS
    preamble = NOTES_CONSTRAINTS[: NOTES_CONSTRAINTS.index("Please match")]
    assert answer_prompt("<Q>", "<S_k>") == preamble + NOTES_ANSWER_TAIL
    assert [stage_of(p) for p in (NOTES_SEARCH, NOTES_CONSTRAINTS, preamble + NOTES_ANSWER_TAIL)] == ["search", "constraints", "answer"]


# ----------------------------------------------------------------------------- G_k and S_k
YEAR = XSD + "gYear"


def _kitt_tree() -> Subgraph:
    """The paper's KITT case (Table 10) by hand, with a date, a number and a reverse hop added."""
    g = Subgraph("m.0kr", "Knight Rider")
    cast = [Triple("m.0kr", "tv.tv_program.regular_cast", c) for c in ("m.03lj4m5", "m.02h9cb0", "m.03lj4m0")]
    g.add_node(0, "tv.tv_program.regular_cast", True, [Child(0, t.object, t) for t in cast])  # topic_1: nameless ids
    roles = [("m.03lj4m5", "m.kitt"), ("m.02h9cb0", "m.michael"), ("m.03lj4m0", "m.devon")]
    g.add_node(1, "tv.regular_tv_appearance.character", True,
               [Child(u, c, Triple(g.members[u].term, "tv.regular_tv_appearance.character", c)) for u, (_, c) in zip((1, 2, 3), roles)],
               named={"m.kitt", "m.michael", "m.devon"})
    actors = [("m.03lj4m5", "m.wd"), ("m.02h9cb0", "m.dh"), ("m.03lj4m0", "m.em")]
    g.add_node(1, "tv.regular_tv_appearance.actor", True,
               [Child(u, a, Triple(g.members[u].term, "tv.regular_tv_appearance.actor", a)) for u, (_, a) in zip((1, 2, 3), actors)],
               named={"m.wd", "m.dh", "m.em"})
    years = [Literal.make("1982", YEAR), Literal.make("1982", YEAR), Literal.make("1983", YEAR)]
    g.add_node(1, "tv.regular_tv_appearance.from", True,
               [Child(u, y, Triple(g.members[u].term, "tv.regular_tv_appearance.from", y)) for u, y in zip((1, 2, 3), years)])
    g.add_node(0, "tv.tv_program.number_of_episodes", True,
               [Child(0, Literal.make("90", XSD + "int"), Triple("m.0kr", "tv.tv_program.number_of_episodes", Literal.make("90", XSD + "int")))])
    g.add_node(3, "film.performance.actor", False, [Child(7, "m.perf", Triple("m.perf", "film.performance.actor", "m.wd"))])
    return g


def test_subgraph_renders_the_papers_triples():
    g = _kitt_tree()
    assert [n.name for n in g.nodes] == ["Knight Rider", "topic_1", "entity_2", "entity_3", "date_4", "num_5", "topic_6"]
    assert g.render() == (
        "('Knight Rider', 'tv.tv_program.regular_cast', 'topic_1'), "
        "('topic_1', 'tv.regular_tv_appearance.character', 'entity_2'), "
        "('topic_1', 'tv.regular_tv_appearance.actor', 'entity_3'), "
        "('topic_1', 'tv.regular_tv_appearance.from', 'date_4'), "
        "('Knight Rider', 'tv.tv_program.number_of_episodes', 'num_5'), "
        "('topic_6', 'film.performance.actor', 'entity_3')"  # walked against the stored direction: stored orientation
    )
    assert Subgraph("Titanic").render() == "Titanic"  # only the start entity's name
    assert g.terms(4) == [Literal.make("1982", YEAR), Literal.make("1983", YEAR)]  # distinct, in member order
    assert len(g.nodes[4].members) == 3 and g.ids(4) == []
    assert g.first_hops()[:8] == [None, 1, 2, 3, 1, 2, 3, 1]
    assert g.first_hop_node(6) == 1 and g.first_hop_node(5) == 5 and g.first_hop_node(0) is None
    assert len(g.triples()) == 14 and len(g.triples(removed={1, 4, 7, 10})) == 10
    # the types of Appendix A
    assert entity_type("m.0abc", named=False) == "topic" and entity_type("m.0abc", named=True) == "entity"
    assert entity_type("Titanic", named=False) == "entity"  # datasets whose ids are names
    assert entity_type(Literal.make("2.5", XSD + "double"), False) == "num"
    assert entity_type(Literal.make("2001-05-04", XSD + "date"), False) == "date"
    assert entity_type(Literal.make("KITT", lang="en"), False) == "entity"
    assert node_type(["topic", "entity", "topic", "entity"]) == "entity" and node_type([]) == "entity"


# ----------------------------------------------------------------------------- option pools on every store
class RandomPolicy:
    """Picks uniformly among the options, ``None`` only now and then; records every pool."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.pools: list[list[str]] = []

    def __call__(self, prompt: str, options: Sequence[str]) -> Choice:
        self.pools.append(list(options))
        if len(options) == 1 or self.rng.random() < 0.15:
            return Choice(len(options) - 1)
        return Choice(self.rng.randrange(len(options) - 1))


def _plain_search(triples: list[Triple], start: str, start_name: str, policy: RandomPolicy, max_steps: int) -> tuple[list[list[str]], list]:
    """The search written from its definition over plain triples: (pools, nodes as
    (name, parent, relation, forward, [(term, parent member)]))."""
    named = {t.subject for t in triples if t.relation == NAME_RELATION}

    def edges(term):
        if isinstance(term, Literal):
            return []
        out = [(t.relation, True, t.object, t) for t in triples if t.subject == term]
        back = [(t.relation, False, t.subject, t) for t in triples if t.object == term and t.subject != term]
        return out + back

    members = [(start, None, None)]  # term, parent member, triple
    nodes = [["", None, None, True, [0]]]
    names = [start_name]

    def options(n: int) -> list[tuple[int, str, bool]]:
        found = {
            (r, fwd) for u in nodes[n][4] for r, fwd, _, t in edges(members[u][0]) if t != members[u][2] and r != NAME_RELATION
        }
        return [(n, r, fwd) for r, fwd in sorted(found, key=lambda x: (x[0], not x[1]))]

    pool, pools, steps = options(0), [], 0
    while pool:
        texts = [f"{names[n]}+{'' if fwd else '^'}{r}" for n, r, fwd in pool] + [NONE]
        pools.append(texts)
        if steps == max_steps:
            break
        pick = policy(search_prompt("q", ""), texts).index
        if pick == len(pool):
            break
        n, r, fwd = pool.pop(pick)
        steps += 1
        new = []
        for u in nodes[n][4]:
            mine = sorted((o for rel, f, o, t in edges(members[u][0]) if rel == r and f == fwd and t != members[u][2]), key=term_key)
            for o in mine:
                t = next(t for rel, f, oo, t in edges(members[u][0]) if rel == r and f == fwd and oo == o)
                members.append((o, u, t))
                new.append(len(members) - 1)
        kind = node_type(entity_type(members[u][0], members[u][0] in named) for u in new)
        nodes.append([f"{kind}_{len(nodes)}", n, r, fwd, new])
        names.append(f"{kind}_{len(nodes) - 1}")
        pool += options(len(nodes) - 1)
    return pools, [(names[i], p, r, f, [(members[u][0], members[u][1]) for u in ms]) for i, (_, p, r, f, ms) in enumerate(nodes)]


@pytest.mark.parametrize("seed", range(5))
def test_option_pools_expansion_and_grouping_match_plain_python(make_store, store_kind, seed):
    triples = random_graph(seed)
    store = make_store(store_kind, triples)
    start = random.Random(seed).choice(sorted({t.subject for t in triples}))
    meter = Meter()
    metered = meter.store(store)
    policy = RandomPolicy(seed)
    start_name = store.names([start])[start]
    graph = Subgraph(start, start_name)
    result = Search(SearchLimits(max_steps=6)).run(metered, policy, "q", graph)
    expected_pools, expected_nodes = _plain_search(triples, start, start_name or start, RandomPolicy(seed), 6)
    assert policy.pools == expected_pools[: len(policy.pools)]
    got = [(n.name, n.parent, n.relation, n.forward, [(graph.members[u].term, graph.members[u].parent) for u in n.members]) for n in graph.nodes]
    assert got == expected_nodes
    # one expand per executed option; one relations call for the start and per new node with ids to ask about
    executed = len(graph.nodes) - 1
    with_ids = sum(bool(graph.ids(n.index)) for n in graph.nodes[1:])
    assert meter.operations["store.expand"] == executed
    assert meter.operations["store.relations"] == 1 + with_ids
    assert set(meter.operations) <= {"store.expand", "store.relations"}
    assert result.truncated in ([], ["steps"])


def test_limits_are_reported_never_silent(make_store):
    triples = [Triple("hub", "r", f"n{i}") for i in range(30)] + [Triple(f"n{i}", f"s{i % 7}", "x") for i in range(30)]
    store = make_store("oxigraph", triples)

    def always_first(prompt, options):
        return Choice(0)

    def run(**limits):
        return Search(SearchLimits(**limits)).run(store, always_first, "q", Subgraph("hub"))

    assert run().truncated == ["steps"]  # the pool never empties here: always-first goes on to max_steps
    assert run(max_steps=1).truncated == ["steps"]
    r = run(max_steps=1, edges=10)
    assert "expand" in r.truncated and len(r.graph.nodes[1].members) == 10
    r = run(max_steps=2, max_options=4)  # node 1 has 7 options (s0..s6; its way back to the hub is not one)
    assert "pool" in r.truncated and r.steps[1].options == 5  # 4 options and None
    assert "relations" in run(max_steps=1, relation_rows=5).truncated
    with pytest.raises(InvalidInputError, match="max_steps"):
        SearchLimits(max_steps=0)


# ----------------------------------------------------------------------------- constraints
KITT_KB = [
    ("m.0kr", "tv.tv_program.regular_cast", "m.03lj4m5"),
    ("m.0kr", "tv.tv_program.regular_cast", "m.02h9cb0"),
    ("m.0kr", "tv.tv_program.regular_cast", "m.03lj4m0"),
    ("m.03lj4m5", "tv.regular_tv_appearance.character", "m.kitt"),
    ("m.02h9cb0", "tv.regular_tv_appearance.character", "m.michael"),
    ("m.03lj4m0", "tv.regular_tv_appearance.character", "m.devon"),
    ("m.03lj4m5", "tv.regular_tv_appearance.actor", "m.wd"),
    ("m.02h9cb0", "tv.regular_tv_appearance.actor", "m.dh"),
    ("m.03lj4m0", "tv.regular_tv_appearance.actor", "m.em"),
]
KITT_NAMES = {"m.0kr": "Knight Rider", "m.kitt": "KITT", "m.michael": "Michael Knight", "m.devon": "Devon Miles",
              "m.wd": "William Daniels", "m.dh": "David Hasselhoff", "m.em": "Edward Mulhare"}


class Script:
    """A chooser that takes the scripted option texts in order and records what it saw."""

    def __init__(self, *picks: str) -> None:
        self.picks, self.seen = list(picks), []

    def __call__(self, prompt: str, options: Sequence[str]) -> Choice:
        self.seen.append((stage_of(prompt), list(options)))
        return Choice(list(options).index(self.picks.pop(0)))


def test_kitt_example_reproduces(make_store, store_kind):
    triples = [Triple(*t) for t in KITT_KB] + [Triple(i, NAME_RELATION, Literal.make(n, lang="en")) for i, n in KITT_NAMES.items()]
    store = make_store(store_kind, triples)
    q = Question("kitt", "who plays the voice of kitt in knight rider?", ["William Daniels"], ["m.0kr"], ["m.wd"])
    script = Script(
        "Knight Rider+tv.tv_program.regular_cast", "topic_1+tv.regular_tv_appearance.character",
        "topic_1+tv.regular_tv_appearance.actor", "entity_2= KITT", "entity_3",
    )
    r = reason(store, script, q, LdrConfig(match_names=True))
    assert r.graph.abstract_triples() == [
        ("Knight Rider", "tv.tv_program.regular_cast", "topic_1"),
        ("topic_1", "tv.regular_tv_appearance.character", "entity_2"),
        ("topic_1", "tv.regular_tv_appearance.actor", "entity_3"),
    ]
    assert [t.text for t in r.targets] == ["KITT"]  # a G_k entity's name the question mentions ("Knight Rider" is the start)
    stages = [s for s, _ in script.seen]
    # after three steps every edge of G_k's entities is in G_k: the pool is empty, the search ends
    # without asking; KITT is matched once: after it the pool is empty and the model is not asked again
    assert stages == ["search"] * 3 + ["constraints", "answer"]
    assert script.seen[2][1] == ["topic_1+tv.regular_tv_appearance.actor", NONE]
    assert script.seen[3][1] == ["topic_1= KITT", "entity_2= KITT", "entity_3= KITT", "No constrain"]
    assert r.constraints == ["entity_2= KITT"]
    assert script.seen[4][1] == ["topic_1", "entity_3"]  # the constraint's position is not an answer option
    assert r.answers == ["m.wd"]


def test_the_start_entity_is_answered_last(make_store):
    """Out and back over another edge reaches the start entity itself: it stays an answer, after
    the others (first answer first is LDR's Hits@1)."""
    store = make_store("oxigraph", [Triple("Film", "written_by", "Ann"), Triple("Film", "starred_actors", "Ann"),
                                    Triple("Film", "starred_actors", "Bob")])
    q = Question("co", "who co-starred with the writer [Ann]", ["Bob"], ["Ann"], ["Bob"])
    script = Script("Ann+^written_by", "entity_1+starred_actors", NONE, "entity_2")
    r = reason(store, script, q)
    assert r.graph.terms(r.answer_node) == ["Ann", "Bob"]  # G_k's own order puts the start first
    assert r.answers == ["Bob", "Ann"]


def _roster() -> Subgraph:
    """A team's roster CVTs, each with a player, a start date and a number."""
    g = Subgraph("m.team", "Team")
    cvts = ["m.r1", "m.r2", "m.r3", "m.r4"]
    g.add_node(0, "roster", True, [Child(0, c, Triple("m.team", "roster", c)) for c in cvts])
    g.add_node(1, "player", True, [Child(u, p, Triple(c, "player", p)) for u, c, p in zip((1, 2, 3, 4), cvts, ("A", "B", "C", "D"))])
    dates = [("m.r1", "2001-05-04", "date"), ("m.r2", "2005", "gYear"), ("m.r3", "2005-03", "gYearMonth"), ("m.r4", "2011-12-31", "date")]
    g.add_node(1, "from", True, [Child(u, Literal.make(v, XSD + t), Triple(c, "from", Literal.make(v, XSD + t))) for u, (c, v, t) in zip((1, 2, 3, 4), dates)])
    numbers = [("m.r1", "7"), ("m.r2", "23"), ("m.r3", "7.5"), ("m.r4", "23")]
    g.add_node(1, "number", True, [Child(u, Literal.make(v, XSD + "decimal"), Triple(c, "number", Literal.make(v, XSD + "decimal"))) for u, (c, v) in zip((1, 2, 3, 4), numbers)])
    return g


@pytest.mark.parametrize(
    ("node", "op", "value", "players"),
    [
        (3, "=", "2005", ["B"]),  # 2005 is 2005-01-01: the gYear, not the month
        (3, "<", "2005", ["A"]),
        (3, "<=", "2005", ["A", "B"]),
        (3, ">", "2005-01-01", ["C", "D"]),
        (3, ">=", "2005-03-01", ["C", "D"]),
        (3, "min", None, ["A"]),
        (3, "max", None, ["D"]),
        (4, "=", "23", ["B", "D"]),
        (4, "<", "23", ["A", "C"]),
        (4, ">=", "7.5", ["B", "C", "D"]),
        (4, "max", None, ["B", "D"]),  # ties keep every subtree holding the extreme
        (4, "min", None, ["A"]),
    ],
)
def test_every_operator_prunes_first_hop_subtrees(node, op, value, players):
    g = _roster()
    target = None if value is None else Target(Literal.make(value), value)
    removed = prune(g, [Constraint(node, op, target)])
    assert g.terms(2, removed) == players


def test_constraints_compose_and_apply_at_the_first_hop():
    g = _roster()
    both = [Constraint(3, ">=", Target(Literal.make("2005"), "2005")), Constraint(4, "min", None)]
    assert g.terms(2, prune(g, both)) == ["C"]  # min over the subtrees the first constraint kept
    assert g.terms(2, prune(g, [Constraint(2, "=", Target("B", "B"))])) == ["B"]  # on an entity node, by id
    assert g.terms(2, prune(g, [Constraint(3, "=", Target(Literal.make("1999"), "1999"))])) == []
    # a constraint on a first-hop node prunes that node's own members
    flat = Subgraph("m.team", "Team")
    flat.add_node(0, "founded", True, [Child(0, Literal.make(y, YEAR), Triple("m.team", "founded", Literal.make(y, YEAR))) for y in ("1990", "1995")])
    flat.add_node(0, "city", True, [Child(0, "Paris", Triple("m.team", "city", "Paris"))])
    removed = prune(flat, [Constraint(1, "max", None)])
    assert flat.terms(1, removed) == [Literal.make("1995", YEAR)] and flat.terms(2, removed) == ["Paris"]


def test_constraint_pool_is_typed():
    g = _roster()
    values = question_values("which player of [Team 1999] joined in 2005 wearing 7.5 ?", ["Team 1999"])
    assert [t.text for t in values] == ["2005", "7.5"]
    texts = [c.text(g) for c in constraint_pool(g, [Target("B", "B"), *values])]
    assert texts == [
        "topic_1= B", "entity_2= B",  # entities: = on entity and topic nodes
        "entity_2= 2005", "entity_2= 7.5",  # values: = on entity nodes too (ids that are names, string values)
        "date_3= 2005", "date_3< 2005", "date_3<= 2005", "date_3> 2005", "date_3>= 2005",  # 7.5 is not a date
        "date_3 min", "date_3 max",
        "num_4= 2005", "num_4< 2005", "num_4<= 2005", "num_4> 2005", "num_4>= 2005",
        "num_4= 7.5", "num_4< 7.5", "num_4<= 7.5", "num_4> 7.5", "num_4>= 7.5",
        "num_4 min", "num_4 max",
    ]


# ----------------------------------------------------------------------------- scoring
class TableLM(LanguageModel):
    """Per-token log-probabilities looked up by option text (the eos token scores -1)."""

    name = "table"

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table, self.calls = table, 0

    def score_batch(self, prompt, continuations, *, eos=False):
        self.calls += 1
        return [self.table[c] + ([-1.0] if eos else []) for c in continuations]

    def generate(self, prompt, **kw) -> Generation:
        raise NotImplementedError

    def beam_search(self, prompt, **kw) -> list[Generation]:
        raise NotImplementedError


def test_scorer_takes_the_argmax_of_summed_or_mean_log_probabilities():
    lm = TableLM({"a+r": [-1.0, -1.0, -1.0], "b+long_relation": [-0.5] * 8, "None": [-2.5], "tie": [-0.5] * 8})
    options = ["a+r", "b+long_relation", "None"]
    # sums with eos: -4, -5, -3.5; means: -1, -0.555, -1.75
    assert OptionScorer(lm)("p", options) == Choice(2, [-4.0, -5.0, -3.5])  # the sum by default (Eq. 7)
    assert OptionScorer(lm, "mean")("p", options).index == 1
    assert OptionScorer(lm, "mean")("p", ["b+long_relation", "tie"]).index == 0  # ties: the earlier option
    calls = lm.calls
    assert OptionScorer(lm)("p", ["only"]) == Choice(0) and lm.calls == calls  # one option: no model call
    with pytest.raises(InvalidInputError):
        OptionScorer(lm, "max")


def test_two_models_split_the_stages_as_the_paper():
    search, reasoner = TableLM({"a": [-1.0], "b": [-2.0]}), TableLM({"a": [-2.0], "b": [-1.0]})
    scorer = StageScorer(OptionScorer(search), OptionScorer(reasoner))
    assert scorer(search_prompt("q", "g"), ["a", "b"]).index == 0
    assert scorer(answer_prompt("q", "g"), ["a", "b"]).index == 1
    assert scorer(constraint_prompt("q", "g", []), ["a", "b"]).index == 1
    assert (search.calls, reasoner.calls, scorer.mode) == (1, 2, "logprobs")


class CountingLM(TableLM):
    """A :class:`TableLM` that counts its ``score_many`` calls and scores each prompt apart."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        super().__init__(table)
        self.many: list[int] = []

    def score_many(self, requests, *, eos=False):
        self.many.append(len(requests))
        return [self.table_for(prompt, continuations, eos) for prompt, continuations in requests]

    def table_for(self, prompt, continuations, eos):
        return [[v + len(prompt) % 3 for v in self.table[c]] + ([-1.0] if eos else []) for c in continuations]

    def score_batch(self, prompt, continuations, *, eos=False):
        return self.table_for(prompt, continuations, eos)


def test_a_round_of_decisions_is_one_scoring_call_choosing_as_one_at_a_time():
    lm = CountingLM({"a": [-1.0], "b": [-1.5], "c": [-0.2, -3.0], "None": [-2.0]})
    asks = [Decide("p1", ("a", "b", "None")), Decide("p22", ("only",)), Decide("p333", ("c", "a")), Decide("p4", ("None", "a"))]
    scorer = OptionScorer(lm)
    together = scorer.decide(asks)
    assert lm.many == [3] and together[1] == Choice(0)  # the pool of one is not asked
    assert together == [OptionScorer(lm)(a.prompt, a.options) for a in asks]
    with pytest.raises(ValueError, match="empty option pool"):
        scorer.decide([asks[0], Decide("p", ())])
    # two models: each stage's decisions go to its model, in one call each
    search, reasoner = CountingLM({"a": [-1.0], "b": [-2.0]}), CountingLM({"a": [-2.0], "b": [-1.0]})
    staged = StageScorer(OptionScorer(search), OptionScorer(reasoner)).decide(
        [Decide(search_prompt("q", "g"), ("a", "b")), Decide(answer_prompt("q", "g"), ("a", "b")),
         Decide(search_prompt("r", "g"), ("a", "b")), Decide(constraint_prompt("q", "g", []), ("a", "b"))]
    )
    assert [c.index for c in staged] == [0, 1, 0, 1] and (search.many, reasoner.many) == ([2], [2])


class ChatLikeLM(TableLM):
    def score_batch(self, prompt, continuations, *, eos=False):
        raise UnsupportedOperationError("no scoring")

    def generate(self, prompt, **kw) -> Generation:
        return Generation(" 'Titanic+directed_by' because")


def test_models_without_scoring_fall_back_to_a_generated_choice():
    scorer = OptionScorer(ChatLikeLM({}))
    assert scorer("p", ["Titanic+starred_actors", "Titanic+directed_by", "None"]).index == 1
    assert scorer.mode == "choice"
    pools = [("Titanic+starred_actors", "Titanic+directed_by", "None"), ("x", "y"), ("only",)]
    assert [c.index for c in scorer.decide([Decide("p", pool) for pool in pools])] == [1, 1, 0]
    assert match_option("entity_3", ["entity_2", "entity_3"]) == 1
    assert match_option("I think entity_12 is it", ["entity_1", "entity_12", "None"]) == 1  # the longest it contains
    assert match_option("no idea", ["x", "None"]) == 1  # nothing named: the last (stop) option


@pytest.mark.model
def test_scorer_is_the_argmax_of_smollm2_log_probabilities(lm_smol):
    """With the real model: summed log-probabilities of option + end token, computed here in
    one plain forward pass per option, pick the option OptionScorer picks."""
    import torch

    prompt = search_prompt("who directed [Titanic]", "Titanic")
    options = ["Titanic+directed_by", "Titanic+starred_actors", "Titanic+^directed_by", NONE]
    expected = []
    for option in options:
        context, target = lm_smol.prompt_ids(prompt), lm_smol.encode(option) + [lm_smol.eos_token_id]
        with torch.no_grad():
            logits = lm_smol.model(input_ids=torch.tensor([context + target])).logits[0, len(context) - 1 : -1]
        expected.append(float(torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(target)[:, None]).sum()))
    choice = OptionScorer(lm_smol, "sum")(prompt, options)
    assert choice.scores == pytest.approx(expected, abs=1e-3)
    assert choice.index == max(range(len(options)), key=lambda i: expected[i])


@pytest.fixture(scope="module")
def lm_smol():
    return load_lm()


# ----------------------------------------------------------------------------- training samples
MOVIES = [
    ("Titanic", "directed_by", "James Cameron"),
    ("Avatar", "directed_by", "James Cameron"),
    ("Titanic", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "directed_by", "Christopher Nolan"),
    ("Avatar", "has_genre", "Science Fiction"),
    ("Inception", "has_genre", "Science Fiction"),
    ("Titanic", "release_year", "1997"),
]
MOVIE_QUESTIONS = [
    Question("q1", "who directed [Titanic]", ["James Cameron"], ["Titanic"], ["James Cameron"], 1, "movie_to_director"),
    Question("q2", "what films did [Christopher Nolan] direct", ["Inception"], ["Christopher Nolan"], ["Inception"], 1, "director_to_movie"),
    Question("q3", "the films of [Titanic] director are of which genre", ["Science Fiction"], ["Titanic"], ["Science Fiction"], 3,
             "movie_to_director_to_movie_to_genre"),
    Question("q4", "who wrote [Titanic]", ["x"], ["Titanic"], ["x"], 1, "movie_to_writer"),  # no written_by edge: infeasible
    Question("q5", "no type [Titanic]", ["x"], ["Titanic"], ["x"]),
]


def test_gold_replay_exports_the_prompts_a_run_shows(make_store, store_kind):
    store = make_store(store_kind, [Triple(*t) for t in MOVIES])
    report = ExportReport()
    samples = list(chain_samples(store, MOVIE_QUESTIONS, LdrConfig(), report))
    assert (report.questions, report.exported, report.infeasible, report.no_gold, report.reaches_answers) == (5, 3, 1, 1, 3)
    by_q = {}
    for s in samples:
        by_q.setdefault(s.id, []).append((s.task, s.target))
    assert by_q["q1"] == [("search", "Titanic+directed_by"), ("search", NONE)]  # one node: no answer choice to learn
    assert by_q["q2"] == [("search", "Christopher Nolan+^directed_by"), ("search", NONE)]
    assert by_q["q3"] == [
        ("search", "Titanic+directed_by"), ("search", "entity_1+^directed_by"), ("search", "entity_2+has_genre"),
        ("search", NONE), ("answer", "entity_3"),
    ]
    q3 = [s for s in samples if s.id == "q3"]
    assert q3[1].prompt == search_prompt(MOVIE_QUESTIONS[2].question, "('Titanic', 'directed_by', 'entity_1')")
    assert q3[-1].prompt == answer_prompt(MOVIE_QUESTIONS[2].question, (
        "('Titanic', 'directed_by', 'entity_1'), ('entity_2', 'directed_by', 'entity_1'), ('entity_2', 'has_genre', 'entity_3')"))


WEBQSP_PARSE = {
    "ParseId": "WebQTrn-0.P0", "TopicEntityMid": "m.06w2sn5", "TopicEntityName": "Justin Bieber",
    "InferentialChain": ["people.person.sibling_s", "people.sibling_relationship.sibling"],
    "Constraints": [{"Operator": "Equal", "ArgumentType": "Entity", "Argument": "m.05zppz", "EntityName": "Male",
                     "SourceNodeIndex": 1, "NodePredicate": "people.person.gender", "ValueType": "String"}],
    "Order": None, "Time": None,
    "Answers": [{"AnswerArgument": "m.0gxnnwq", "AnswerType": "Entity", "EntityName": "Jaxon Bieber"}],
}


def test_webqsp_parse_becomes_a_gold_structure():
    gold = webqsp_structure(WEBQSP_PARSE)
    samples = structure_samples("p0", "what is the name of justin bieber brother", gold)
    assert [(s.task, s.target) for s in samples] == [
        ("search", "Justin Bieber+people.person.sibling_s"),
        ("search", "topic_1+people.sibling_relationship.sibling"),
        ("search", "entity_2+people.person.gender"),
        ("search", NONE),
        ("constraints", "entity_3= Male"),
        ("answer", "entity_2"),
    ]
    assert samples[4].prompt == constraint_prompt("what is the name of justin bieber brother", (
        "('Justin Bieber', 'people.person.sibling_s', 'topic_1'), ('topic_1', 'people.sibling_relationship.sibling', 'entity_2'), "
        "('entity_2', 'people.person.gender', 'entity_3')"), ["Male"])
    timed = {**WEBQSP_PARSE, "Constraints": [
        {"Operator": "LessOrEqual", "ArgumentType": "Value", "Argument": "2015-08-10", "SourceNodeIndex": 0,
         "NodePredicate": "people.sibling_relationship.from", "ValueType": "DateTime"}],
        "Order": {"SortOrder": "Descending", "Start": 0, "Count": 1, "SourceNodeIndex": 1, "NodePredicate": "people.person.height_meters",
                  "ValueType": "Float"}}
    targets = [s.target for s in structure_samples("p1", "q", webqsp_structure(timed)) if s.task == "constraints"]
    assert targets == ["date_3<= 2015-08-10, num_4 max"]


def test_webqsp_export_covers_the_train_parses(shared_data):
    report = ExportReport()
    samples = list(webqsp_samples(read_questions(shared_data / "webqsp" / "WebQSP.train.json.gz"), report))
    assert report.questions >= 3000 and report.exported / report.questions >= 0.95
    assert sum(report.uncovered.values()) == report.questions - report.exported
    assert len(samples) == sum(report.samples.values()) and report.samples["search"] > report.exported


def test_tree_edit_distance_counts_edge_edits():
    chain = [(0, "a"), (1, "b")]
    assert tree_edit_distance(chain, chain) == 0
    assert tree_edit_distance(chain, [(0, "a")]) == 1
    assert tree_edit_distance(chain, [(0, "a"), (1, "c")]) == 1  # relabel
    assert tree_edit_distance(chain, [(0, "a"), (0, "b")]) == 2  # b hangs from the root: delete and add
    assert tree_edit_distance([(0, "x"), (0, "y"), (2, "z")], [(0, "y"), (1, "z"), (0, "x")]) == 0  # children unordered
    assert tree_edit_distance([], chain) == 2
    # a search of many steps may give a node many children; the gold is a chain (LDR --max-steps 40)
    star = [(0, "a")] + [(0, f"r{i}") for i in range(39)]
    assert tree_edit_distance(star, chain) == tree_edit_distance(chain, star) == 39 + 1  # 39 deleted, b added under a
    assert tree_edit_distance(star[:9], star[:9][::-1]) == 0
    with pytest.raises(InvalidInputError, match="more than 16 children each"):
        tree_edit_distance(star, star)


def _reference_edit_distance(a, b) -> int:
    """Top-down edit distance by trying every matching of every pair of mapped nodes' children."""
    def kids(tree, node):
        return [i for i, (parent, _) in enumerate(tree, 1) if parent == node]

    def size(tree, node):
        return sum(1 + size(tree, k) for k in kids(tree, node))

    def mapped(u, v):
        ku, kv = kids(a, u), kids(b, v)
        best = None
        for slots in itertools.product(range(-1, len(kv)), repeat=len(ku)):  # -1: x's subtree deleted
            taken = [y for y in slots if y >= 0]
            if len(taken) != len(set(taken)):
                continue
            cost = sum(1 + size(a, x) if y < 0 else (a[x - 1][1] != b[kv[y] - 1][1]) + mapped(x, kv[y]) for x, y in zip(ku, slots))
            cost += sum(1 + size(b, kv[y]) for y in range(len(kv)) if y not in taken)
            best = cost if best is None else min(best, cost)
        return best

    return mapped(0, 0)


def test_tree_edit_distance_is_the_reference_on_random_trees():
    rng = random.Random(7)
    for _ in range(300):
        a, b = ([(rng.randrange(i + 1), rng.choice("xyz")) for i in range(rng.randrange(7))] for _ in range(2))
        assert tree_edit_distance(a, b) == tree_edit_distance(b, a) == _reference_edit_distance(a, b), (a, b)


# ----------------------------------------------------------------------------- end to end
def _metaqa_files(tmp_path: Path) -> tuple[str, str]:
    kb = tmp_path / "kb.txt"
    kb.write_text("".join(f"{s}|{r}|{o}\n" for s, r, o in MOVIES))
    qa = tmp_path / "qa_dev.txt"
    qa.write_text(
        "who directed [Titanic]\tJames Cameron\nwhat films did [Christopher Nolan] direct\tInception\n"
        "what genre are the films of the director of [Titanic]\tScience Fiction\n"
    )
    (tmp_path / "qa_dev_qtype.txt").write_text("movie_to_director\ndirector_to_movie\nmovie_to_director_to_movie_to_genre\n")
    return str(kb), str(qa)


class KeywordLM(TableLM):
    """Scores an option by the words it shares with the prompt's question: a deterministic
    stand-in for a model that reads the question."""

    def score_batch(self, prompt, continuations, *, eos=False):
        question = prompt.split("Question: ")[1].split(" Retrieved graph:")[0].split(" Constraints:")[0].split(" Answer entity:")[0]
        words = set(question.replace("[", " ").replace("]", " ").split())
        done = prompt.endswith("Next retrieve:") and "'directed_by'" in prompt
        return [[(2.0 if c == NONE and done else 0.0) + sum(w in c for w in words) - 0.01 * len(c)] for c in continuations]


def test_ldr_method_runs_on_the_protocol(tmp_path, make_store):
    store = make_store("oxigraph", [Triple(*t) for t in MOVIES])
    models = Models()
    method = LdrMethod(store, models, LdrConfig(), OptionScorer(models.meter.lm(KeywordLM({}))))
    questions = MOVIE_QUESTIONS[:2]
    summary = run_method(method, questions, tmp_path / "p.jsonl", progress=False)
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["ldr"]["steps"][0]["chosen"] for r in records] == ["Titanic+directed_by", "Christopher Nolan+^directed_by"]
    assert [r["prediction"] for r in records] == [["James Cameron"], ["Inception"]]
    assert summary["hits1"] == 1.0 and summary["ldr"]["relation_recall"] == 1.0 and summary["ldr"]["edit_distance"] == 0
    r = records[0]
    assert r["ldr"]["s_k"] == [["Titanic", "directed_by", "entity_1"]] and r["ldr"]["g_k"] == [["Titanic", "directed_by", "James Cameron"]]
    # the two questions in lock step: names, relations; expand, relations; answer names, each one call for
    # both; their two rounds of decisions, each one scoring call for both
    assert r["calls"] == {"store": 3.0, "llm": 1.0}
    assert r["seconds"]["store"] > 0 and r["ldr"]["scoring"] == "logprobs"
    models = Models()
    alone = LdrMethod(store, models, LdrConfig(batch_size=1), OptionScorer(models.meter.lm(KeywordLM({}))))
    run_method(alone, questions, tmp_path / "alone.jsonl", progress=False)
    one_by_one = [json.loads(line) for line in (tmp_path / "alone.jsonl").read_text().splitlines()]
    assert one_by_one[0]["calls"] == {"store": 5.0, "llm": 2.0}  # the same calls, each its own
    assert [(o["prediction"], o["ldr"]) for o in one_by_one] == [(r["prediction"], r["ldr"]) for r in records]


class SilentChatLM(ChatLikeLM):
    """A chat endpoint whose every reply is ``reply``."""

    def __init__(self, reply: str) -> None:
        super().__init__({})
        self.reply = reply

    def generate(self, prompt, **kw) -> Generation:
        return Generation(self.reply)


def test_an_empty_answer_says_why_in_its_record(make_store):
    store = make_store("oxigraph", [Triple(*t) for t in MOVIES])
    records: list[dict] = []
    for reply in ("", "   ", "I would rather not say"):  # each names no option: the search stops at once
        method = LdrMethod(store, Models(), LdrConfig(), OptionScorer(SilentChatLM(reply)))
        run_method(method, MOVIE_QUESTIONS[:1], progress=False, on_record=records.append)
    assert [r["prediction"] for r in records] == [[], [], []]
    assert {r["warning"] for r in records} == {
        "the search added no relation to the start entity Titanic (a model reply that names no option chooses to stop): "
        "nothing to answer from"}
    no_topic = Question("n", "who directed it", [], [], [])
    (skipped,) = LdrMethod(store, Models(), LdrConfig(), OptionScorer(SilentChatLM(""))).answer([no_topic])
    assert skipped.warning == "no topic entity to start from"


def _hashed_choice(prompt: str, options: Sequence[str]) -> Choice:
    """A deterministic chooser that looks arbitrary: the same (prompt, options) always gets the
    same choice, whichever batch asks."""
    import hashlib

    digest = int(hashlib.sha256((prompt + "\x00" + "\x00".join(options)).encode()).hexdigest(), 16)
    return Choice(digest % len(options), [float((digest >> (8 * i)) % 97) for i in range(len(options))])


@pytest.mark.parametrize("limits", [{}, {"max_steps": 4, "relation_rows": 4, "edge_limit": 3}])
def test_lock_step_batches_answer_as_one_by_one(make_store, store_kind, limits):
    """Questions reasoned in lock step, their store calls shared, get exactly what each gets
    alone, on every store: random graphs, random start and constraint entities, names
    matched in G_k, a question without a topic entity, and limits that cut some calls."""
    triples = random_graph(5, nodes=30, edges=120)
    store = make_store(store_kind, triples)
    ids = node_ids(triples)
    rng = random.Random(11)
    questions = [
        Question(f"q{i}", f"what is linked to {' and '.join(topics)} in 1990", [], topics, [])
        for i, topics in enumerate([rng.sample(ids, rng.choice([1, 1, 2])) for _ in range(11)])
    ] + [Question("none", "a question about nothing", [], [], [])]
    runs = {}
    for batch in (1, 5):
        meter = Meter()
        method = LdrMethod(store, Models(meter=meter), LdrConfig(match_names=True, batch_size=batch, **limits), _hashed_choice)
        got = []
        for start in range(0, len(questions), batch):
            got += method.answer(questions[start:start + batch])
        runs[batch] = got, meter.calls["store"]
    (alone, alone_calls), (together, together_calls) = runs[1], runs[5]
    assert [(p.answers, p.answer_ids, p.trace) for p in together] == [(p.answers, p.answer_ids, p.trace) for p in alone]
    if not limits:  # with cuts, a shared call that some question's limit cuts is asked again alone
        assert together_calls < alone_calls
    assert any(len(getattr(p.trace, "steps", ())) > 1 for p in alone)
    assert to_json(together[-1].trace) == {"error": "no topic entity to start from"}


def test_export_train_run_eval_end_to_end(tmp_path, capsys, tiny):  # noqa: F811
    """A tiny model trained on the gold samples of three questions answers them: export-training,
    train (the shared SFT facility), run with the trained model, eval."""
    kb, qa = _metaqa_files(tmp_path)
    store, data, model, out = (str(tmp_path / n) for n in ("store", "data.jsonl", "model", "p.jsonl"))
    assert main(["load", kb, "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["ldr", "export-training", "--dataset", qa, "--split", "all", "--store", store, "--out", data, "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["questions"] == 3 and exported["without_samples"] == 0
    assert exported["samples"] == {"search": 8, "answer": 1}
    assert main(["lm", "train", "--data", data, "--model", tiny, "--out", model,
                 "--epochs", "60", "--lr", "1e-2", "--batch-size", "4", "--warmup", "0", "--schedule", "constant",
                 "--max-length", "1024", "--device", "cpu", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["ldr", "run", "--dataset", qa, "--split", "all", "--store", store, "--model", model, "--out", out,
                 "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["hits1"] == 1.0 and summary["ldr"]["scoring"] == "logprobs"
    assert main(["eval", out, "--protocol", "engine", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["hits1"] == 1.0


def test_export_names_the_questions_that_give_no_sample(tmp_path, capsys):
    from engine.models.sft import read_samples

    kb, qa = _metaqa_files(tmp_path)
    store, data = str(tmp_path / "store"), tmp_path / "samples.jsonl"
    assert main(["load", kb, "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    with open(qa, "a", encoding="utf-8") as f:
        f.write("who wrote [Titanic]\tx\n")  # no written_by edge in the store: infeasible
    with open(tmp_path / "qa_dev_qtype.txt", "a", encoding="utf-8") as f:
        f.write("movie_to_writer\n")
    capsys.readouterr()
    assert main(["ldr", "export-training", "--dataset", qa, "--split", "all", "--store", store, "--out", str(data)]) == 0
    assert "9 samples (search 8, answer 1) from 4 questions" in capsys.readouterr().out
    assert main(["ldr", "export-training", "--dataset", qa, "--split", "all", "--store", store, "--out", str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["without_samples"] == 1
    samples = read_samples(data)
    assert {s.task for s in samples} == {"search", "answer"} and [s.task for s in read_samples(data, ["answer"])] == ["answer"]


@pytest.mark.model
def test_run_with_the_default_model_the_engine_ships(tmp_path, capsys):
    kb, qa = _metaqa_files(tmp_path)
    store, out = str(tmp_path / "store"), str(tmp_path / "p.jsonl")
    assert main(["load", kb, "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    capsys.readouterr()
    args = ["ldr", "run", "--dataset", qa, "--split", "all", "--limit", "2", "--store", store, "--out", out, "--no-progress", "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["questions"] == 2 and summary["calls_per_question"]["llm"] >= 1
    records = [json.loads(line) for line in Path(out).read_text().splitlines()]
    for r in records:
        assert r["ldr"]["steps"] and r["ldr"]["steps"][0]["top"] and set(r["seconds"]) == {"store", "model", "other", "total"}
        assert r["ldr"]["scoring"] == "logprobs"


def test_export_webqsp_never_writes_over_its_input(tmp_path, capsys):
    webqsp = tmp_path / "wq.json"
    text = json.dumps({"Questions": [{"QuestionId": "WebQTrn-0", "ProcessedQuestion": "who", "Parses": []}]})
    webqsp.write_text(text)
    for out in (webqsp, tmp_path):
        assert main(["ldr", "export-webqsp", str(webqsp), "--split", "all", "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"the output file {str(out)!r}" in err and "would destroy the input" in err and "--out" in err
    assert webqsp.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == ["wq.json"]
    assert main(["ldr", "export-webqsp", str(webqsp), "--split", "all", "--out", str(tmp_path / "s.jsonl"), "--no-progress"]) == 0
