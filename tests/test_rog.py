"""RoG: verbatim prompts, plan parsing, constrained planning (a deterministic character-level
walk and the real SmolLM2), grounding and training data on every store against plain Python,
and ``kgqa rog run`` + ``kgqa eval`` end to end."""
from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError
from engine.graph import Triple
from engine.models.lm import Generation, LanguageModel
from engine.models.loading import load_lm
from engine.methods.rog.grounding import ground, ground_batch
from engine.methods.lockstep import run
from engine.methods.rog.planning import (
    Frontiers,
    PlanConstraint,
    generate_plans,
    generate_plans_batch,
    prepare,
    relation_vocabulary,
)
from engine.methods.rog.prompts import (
    explanation_prompt,
    format_plan,
    parse_answers,
    parse_plan,
    planning_prompt,
    reasoning_prompt,
)
from engine.methods.rog.reasoning import fit_paths
from engine.methods.rog.training_data import training_examples
from engine.methods.meter import Meter
from loaders.questions import Question

KB = [
    ("Titanic", "directed_by", "James Cameron"),
    ("Avatar", "directed_by", "James Cameron"),
    ("Titanic", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "starred_actors", "Leonardo DiCaprio"),
    ("Inception", "directed_by", "Christopher Nolan"),
    ("Avatar", "starred_actors", "Sam Worthington"),
    ("Avatar", "has_genre", "Science Fiction"),
    ("Inception", "has_genre", "Science Fiction"),
    ("Titanic", "release_year", "1997"),
]
TRIPLES = [Triple(s, r, o) for s, r, o in KB]


# ----------------------------------------------------------------------------- prompts
def test_prompts_are_verbatim():
    assert planning_prompt("who directed [Titanic]") == (
        "Please generate a valid relation path that can be helpful for answering the following question: who directed [Titanic]"
    )
    assert reasoning_prompt("who directed [Titanic]", ["Titanic → directed_by → James Cameron", "a → r → b"]) == (
        "Based on the reasoning paths, please answer the given question. Please keep the answer as simple as possible "
        "and return all the possible answers as a list.\n\nReasoning Paths:\nTitanic → directed_by → James Cameron\n"
        "a → r → b\n\nQuestion:\nwho directed [Titanic]?"
    )
    explained = explanation_prompt("who?", ["x → r → y"], examples="EXAMPLES")
    assert explained == (
        "Based on the reasoning paths, please answer the given question and explain why. Here are some examples:\n\n"
        "EXAMPLES\n\nReasoning Paths:\nx → r → y\n\nQuestion:\nwho?"
    )


def test_plan_format_and_parsing():
    assert format_plan(["a.b", "c"]) == "<PATH>a.b<SEP>c</PATH>"
    assert parse_plan("noise <PATH> a.b <SEP>c</PATH> <PATH>d</PATH>") == ["a.b", "c"]
    assert parse_plan("<PATH>a<SEP>") is None and parse_plan("<PATH></PATH>") is None
    # a reply of a million openings that never closes one is read in one pass, the first opening kept
    assert parse_plan("<PATH>" * 1_000_000) is None and parse_plan("<PATH>" * 1_000_000 + "a</PATH>") == ["<PATH>" * 999_999 + "a"]


def test_answer_parsing():
    assert parse_answers("James Cameron\n- Avatar\n2. Titanic\nJames Cameron") == ["James Cameron", "Avatar", "Titanic"]
    assert parse_answers("['Titanic', 'Avatar']") == ["Titanic", "Avatar"]
    assert parse_answers("Answer:\nBusch Stadium\n\nExplanation:\nbecause") == ["Busch Stadium"]
    assert parse_answers("  ") == []
    # a model's output nested past what Python's parser follows is read as lines, not a crash
    for deep in ("[" * 100_000 + "]" * 100_000, "[" + "1+" * 100_000 + "1]", "[" + "-" * 100_000 + "1]"):
        assert parse_answers(deep) == [deep]


def test_reasoning_prompt_keeps_paths_within_the_token_budget():
    lm = CharLM()
    prompt = reasoning_prompt("q", [])
    assert fit_paths(lm, prompt, ["abc", "defg", "h"], len(prompt) + 9) == ["abc", "defg"]  # 4 + 5 characters
    assert fit_paths(lm, prompt, ["abc"], None) == ["abc"]


# ----------------------------------------------------------------------------- constrained planning, deterministic
class CharLM(LanguageModel):
    """A tokenizer only: one token per character, eos = 0 (decoding is done by the test)."""

    name = "chars"

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    @property
    def eos_token_id(self) -> int:
        return 0

    def generate(self, prompt, **kw) -> Generation:
        raise NotImplementedError

    def beam_search(self, prompt, **kw) -> list[Generation]:
        raise NotImplementedError


def _random_plans(constraint: PlanConstraint, n: int, seed: int = 0, store=None) -> list[str]:
    """Decode ``n`` sequences choosing uniformly among the allowed tokens at every step (what
    a grounded constraint reads fetched from ``store`` first)."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        tokens: list[int] = []
        for _ in range(constraint.max_new_tokens()):
            token = rng.choice(_allowed(constraint, tokens, store))
            tokens.append(token)
            if token == 0:
                break
        assert tokens[-1] == 0, "a constrained plan finishes within max_new_tokens"
        texts.append("".join(chr(t) for t in tokens[:-1]))
    return texts


def _allowed(constraint: PlanConstraint, tokens: list[int], store=None) -> list[int]:
    """What ``constraint`` allows after ``tokens``, its frontiers fetched from ``store`` first."""
    return run(prepare([lambda: constraint(tokens)]), store)[0]


def _fetched(store, frontiers: Frontiers, kind: str, prefix: tuple[str, ...]):
    """``frontiers.relations(prefix)`` or ``.nodes(prefix)``, fetched from ``store`` as needed."""
    return run(prepare([lambda: getattr(frontiers, kind)(prefix)]), store)[0]


def _walk_ends(triples: Sequence[Triple], seeds: Sequence[str], path: Sequence[str]) -> set[str]:
    """Plain-Python ends of walks (either direction, edges reusable) along ``path``."""
    frontier = set(seeds)
    for relation in path:
        frontier = {t.object for t in triples if t.relation == relation and t.subject in frontier} | {
            t.subject for t in triples if t.relation == relation and t.object in frontier
        }
    return frontier


def test_vocabulary_constraint_names_only_store_relations():
    vocabulary = {"directed_by", "directed", "starred_actors", "has_genre", "release_year"}  # "directed" prefixes another
    constraint = PlanConstraint(CharLM(), 3, vocabulary)
    plans = [parse_plan(t) for t in _random_plans(constraint, 200)]
    assert all(p is not None and 1 <= len(p) <= 3 and set(p) <= vocabulary for p in plans)
    assert {len(p) for p in plans} == {1, 2, 3}
    assert {r for p in plans for r in p} == vocabulary


def test_grounded_constraint_plans_all_ground(make_store):
    store = make_store("oxigraph", TRIPLES)
    vocabulary = relation_vocabulary(store)
    meter = Meter()
    frontiers = Frontiers(["Titanic"])
    constraint = PlanConstraint(CharLM(), 2, vocabulary, frontiers)
    plans = [parse_plan(t) for t in _random_plans(constraint, 150, seed=1, store=meter.store(store))]
    assert all(p is not None and _walk_ends(TRIPLES, ["Titanic"], p) for p in plans)
    # every groundable one- and two-hop plan is reachable, and nothing else
    groundable = {(r,) for r in vocabulary if _walk_ends(TRIPLES, ["Titanic"], [r])}
    groundable |= {(r, s) for (r,) in groundable for s in vocabulary if _walk_ends(TRIPLES, ["Titanic"], [r, s])}
    assert {tuple(p) for p in plans} <= groundable
    assert {tuple(p) for p in plans if len(p) == 1} == {p for p in groundable if len(p) == 1}
    assert meter.seconds["store"] > 0
    # one batched call per prefix, cached: the root's relations, then per one-hop prefix an expansion and its relations
    assert meter.calls["store"] <= 1 + 2 * len({p for p in groundable if len(p) == 1})


def test_frontier_relations_match_plain_python(make_store, store_kind):
    """The relations a grounded plan may take next, for every prefix of up to three hops, on
    every store: those of the edges touching the nodes plain-Python walks reach."""
    store = make_store(store_kind, TRIPLES)
    vocabulary = sorted(relation_vocabulary(store))
    for topics in (["Titanic"], ["Inception", "Avatar"], ["James Cameron"]):
        frontiers = Frontiers(topics)
        prefixes = [()] + [(r,) for r in vocabulary] + [(r, s) for r in vocabulary for s in vocabulary]
        for prefix in prefixes + [(r, s, t) for r, s in [("directed_by", "directed_by")] for t in vocabulary]:
            ends = _walk_ends(TRIPLES, topics, prefix)
            want = {t.relation for t in TRIPLES if t.subject in ends or t.object in ends}
            assert _fetched(store, frontiers, "relations", prefix) == want, (topics, prefix)
            assert _fetched(store, frontiers, "nodes", prefix) == sorted(ends)


def test_a_steps_frontier_calls_are_fetched_together_and_answer_as_alone(make_store, store_kind):
    """Lock-step random decoding of several grounded plans: once ``prepare`` has fetched what a
    step's rows need, every rule answers from its frontiers (no store call), and allows
    exactly what the same rule over frontiers of its own allows."""
    store = make_store(store_kind, TRIPLES)
    vocabulary = relation_vocabulary(store)
    topics = [["Titanic"], ["Inception", "Avatar"], ["James Cameron"], ["Christopher Nolan"], ["Titanic", "Leonardo DiCaprio"]]
    meter = Meter()
    metered = meter.store(store)
    shared = [PlanConstraint(CharLM(), 3, vocabulary, Frontiers(t)) for t in topics]
    alone = [PlanConstraint(CharLM(), 3, vocabulary, Frontiers(t)) for t in topics]
    rng = random.Random(5)
    for _ in range(20):
        generated: list[list[int]] = [[] for _ in topics]
        for _ in range(shared[0].max_new_tokens()):
            rows = [(q, tokens) for q, tokens in enumerate(generated) if not tokens or tokens[-1] != 0]
            if not rows:
                break
            prepared = run(prepare([lambda q=q, tokens=tokens: shared[q](tokens) for q, tokens in rows]), metered)
            calls = meter.calls["store"]
            for (q, tokens), allowed in zip(rows, prepared, strict=True):
                assert allowed == shared[q](tokens)
                assert allowed == _allowed(alone[q], tokens, store)
                tokens.append(rng.choice(allowed))
            assert meter.calls["store"] == calls, "a rule called the store after the step was fetched"
    # one call per kind and relation for the whole step, not per question
    lazy = sum(len(c.frontiers._relations) + len(c.frontiers._nodes) - 1 for c in alone)
    assert 0 < meter.calls["store"] < lazy


# ----------------------------------------------------------------------------- constrained planning, SmolLM2
@pytest.fixture(scope="module")
def lm():
    return load_lm()


@pytest.mark.model
def test_smollm2_plans_in_constrained_modes(lm, make_store):
    store = make_store("oxigraph", TRIPLES)
    vocabulary = relation_vocabulary(store)
    question = "who directed [Titanic]"
    plans = generate_plans(lm, question, k=2, mode="vocabulary", vocabulary=vocabulary, max_hops=1)
    assert len(plans) == 2 and all(p.relations and set(p.relations) <= vocabulary for p in plans)
    frontiers = Frontiers(["Titanic"])
    plans = generate_plans(lm, question, k=2, mode="grounded", vocabulary=vocabulary, frontiers=frontiers, store=store, max_hops=1)
    assert all(p.relations for p in plans)
    grounding = ground(store, ["Titanic"], [p.relations for p in plans])
    assert all(n > 0 for n in grounding.paths_per_plan)


def test_batched_plans_equal_one_by_one(tiny, make_store):
    """Beam searches decoded together, each under its own grounded constraint, give each
    question the plans it gets alone (texts; beam scores to float precision). A model's shape
    is all this needs: the tiny one, one token per character; 50 hold the longest 2-hop plan
    over this graph (46)."""
    lm = load_lm(tiny)
    store = make_store("oxigraph", TRIPLES)
    vocabulary = relation_vocabulary(store)
    questions = [("who directed [Titanic]", ["Titanic"]), ("what movies did [Christopher Nolan] direct", ["Christopher Nolan"]),
                 ("which genre is [Inception]", ["Inception"]), ("who starred in the films of [James Cameron]", ["James Cameron"])]
    for mode, k in (("grounded", 2), ("vocabulary", 1), ("free", 2)):
        frontiers = [Frontiers(topics) for _, topics in questions]
        together = generate_plans_batch(lm, [q for q, _ in questions], k=k, mode=mode, vocabulary=vocabulary, frontiers=frontiers,
                                        store=store, max_hops=2, max_new_tokens=50)
        for (question, topics), plans in zip(questions, together, strict=True):
            alone = generate_plans(lm, question, k=k, mode=mode, vocabulary=vocabulary, frontiers=Frontiers(topics), store=store,
                                   max_hops=2, max_new_tokens=50)
            assert [p.text for p in plans] == [p.text for p in alone], (mode, question)
            if k > 1:
                assert [p.score for p in plans] == pytest.approx([p.score for p in alone], abs=1e-4)
            if mode == "grounded":
                assert all(p.relations and _walk_ends(TRIPLES, topics, p.relations) for p in plans)


def test_batched_reasoning_answers_as_one_by_one(tiny, make_store):
    from engine.methods.rog.pipeline import RogConfig, RogMethod
    from engine.methods.spec import Models

    lm = load_lm(tiny)
    store = make_store("oxigraph", TRIPLES)
    questions = [
        Question("1", "who directed [Titanic]", [], ["Titanic"], []),
        Question("2", "what movies did [Christopher Nolan] direct", [], ["Christopher Nolan"], []),
        Question("3", "which genre is [Inception]", [], ["Inception"], []),
    ]
    config = {"k": 1, "max_hops": 1, "answer_tokens": 16, "answer_mode": "llm"}
    one_by_one = [RogMethod(store, Models(), RogConfig(batch_size=1, **config), lm).answer([q])[0] for q in questions]
    method = RogMethod(store, Models(), RogConfig(batch_size=3, **config), lm)
    assert method.batch_size == 3
    batched = method.answer(questions)
    assert [p.trace.plans for p in batched] == [p.trace.plans for p in one_by_one]
    assert [p.trace.output for p in batched] == [p.trace.output for p in one_by_one]
    assert [p.answers for p in batched] == [p.answers for p in one_by_one]
    assert all(p.trace.output is not None and p.trace.paths for p in batched)
    with pytest.raises(InvalidInputError, match="option batch_size"):
        RogConfig(batch_size=0)


# ----------------------------------------------------------------------------- grounding on every store
def test_grounding_matches_plain_python(make_store, store_kind):
    store = make_store(store_kind, TRIPLES)
    plans = [["directed_by", "directed_by"], ["starred_actors"], None, ["no such"], ["directed_by", "directed_by"]]
    g = ground(store, ["Titanic", "Inception"], plans)
    assert g.paths_per_plan == [3, 2, 0, 0, 3]  # a repeated plan's paths are kept once
    assert g.plan_of == [0, 0, 0, 1, 1]
    assert sorted(g.rendered()) == sorted(
        [
            "Titanic → directed_by → James Cameron ← directed_by ← Avatar",
            "Titanic → directed_by → James Cameron ← directed_by ← Titanic",
            "Inception → directed_by → Christopher Nolan ← directed_by ← Inception",
            "Titanic → starred_actors → Leonardo DiCaprio",
            "Inception → starred_actors → Leonardo DiCaprio",
        ]
    )
    for plan in ([["directed_by", "directed_by"]], [["starred_actors"]]):
        ends = {p.end for p in ground(store, ["Titanic", "Inception"], plan).paths}
        assert ends == _walk_ends(TRIPLES, ["Titanic", "Inception"], plan[0])
    # path ends as answers, the most often reached first
    assert g.answers()[0] == "Leonardo DiCaprio"
    # ends reached only by going back over an edge come after the others, the walk's own start
    # last (Titanic's director's films: Avatar, then Titanic, back over its own directed_by edge)
    assert ground(store, ["Titanic"], [["directed_by", "directed_by"]]).answers() == ["Avatar", "Titanic"]
    assert ground(store, ["Inception"], [["starred_actors", "starred_actors", "has_genre"]]).answers() == ["Science Fiction"]
    assert ground(store, ["Titanic"], [["directed_by", "directed_by", "starred_actors"]]).answers() == [
        "Sam Worthington", "Leonardo DiCaprio"]
    assert sorted(ground(store, ["James Cameron"], [["directed_by", "starred_actors", "starred_actors"]]).answers()) == [
        "Avatar", "Inception", "Titanic"]  # Avatar through Sam Worthington and back


def test_batched_grounding_equals_one_by_one(make_store, store_kind):
    """ground_batch and the frontiers' first step fetched together share a batch's store calls and give each
    question what its own calls give: random plans (repeated, unparsable, ungroundable) from
    topic lists that overlap, a question without topics, and a path limit that cuts some."""
    store = make_store(store_kind, TRIPLES)
    vocabulary = sorted(relation_vocabulary(store))
    rng = random.Random(3)
    entities = sorted({s for s, _, _ in KB} | {o for _, _, o in KB})
    questions = []
    for _ in range(8):
        topics = rng.sample(entities, rng.randint(1, 3))
        plans = [[rng.choice(vocabulary) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))]
        questions.append((topics, plans + [None, plans[0]]))
    questions.append(([], [["directed_by"]]))
    for limit in (None, 2):
        calls: list = []
        store.listeners.append(calls.append)
        batched = ground_batch(store, questions, limit=limit)
        batch_calls = len(calls)
        calls.clear()
        alone = [ground(store, topics, plans, limit=limit) for topics, plans in questions]
        store.listeners.remove(calls.append)
        assert batched == alone
        if limit is None:
            assert batch_calls < len(calls)
    assert any(g.paths for g in alone) and any(g.truncated for g in ground_batch(store, questions, limit=2))
    frontiers = [Frontiers(topics) for topics, _ in questions]
    first = run(prepare([lambda f=f: f.relations(()) for f in frontiers]), store)
    assert first == [_fetched(store, Frontiers(topics), "relations", ()) for topics, _ in questions]


def test_path_ends_back_over_another_edge_count_as_facts(make_store):
    """Parents and children stored as two edges: "X's child's parent" walks back to X over the
    children edge, a fact, while a walk back over the edge it came by is none."""
    store = make_store("oxigraph", [Triple("kid", "parents", "mum"), Triple("mum", "children", "kid"),
                                    Triple("kid", "parents", "dad"), Triple("sis", "parents", "mum"), Triple("sis", "parents", "dad")])
    # kid → mum ← sis and kid → dad ← sis use each edge once; kid → mum ← kid and kid → dad ← kid
    # go back over the edge they came by
    assert ground(store, ["kid"], [["parents", "parents"]]).answers() == ["sis", "kid"]
    # mum → children → kid → parents → mum comes back over the other edge: mum stays an answer, last
    assert ground(store, ["mum"], [["children", "parents"]], direction="out").answers() == ["dad", "mum"]


# ----------------------------------------------------------------------------- training data
def _bfs_relation_paths(triples: Sequence[Triple], source: str, target: str, max_hops: int) -> set[tuple[str, ...]]:
    """Relation sequences of all shortest undirected paths (plain-Python BFS, no edge twice)."""
    adjacency: dict[str, list[tuple[str, str, Triple]]] = {}
    for t in triples:
        adjacency.setdefault(t.subject, []).append((t.relation, t.object, t))
        adjacency.setdefault(t.object, []).append((t.relation, t.subject, t))
    found: set[tuple[str, ...]] = set()
    queue = deque([(source, (), frozenset())])
    while queue:
        node, relations, used = queue.popleft()
        if found and len(relations) > len(next(iter(found))):
            break
        if node == target and relations:
            found.add(relations)
            continue
        if len(relations) < max_hops:
            for relation, nxt, t in adjacency.get(node, []):
                if t not in used:
                    queue.append((nxt, relations + (relation,), used | {t}))
    return found


def test_training_data_equals_plain_python_bfs(make_store, store_kind):
    store = make_store(store_kind, TRIPLES)
    questions = [
        Question("q1", "who directed [Titanic]", ["James Cameron"], ["Titanic"], ["James Cameron"]),
        Question("q2", "what genre are films starring [Leonardo DiCaprio]", ["Science Fiction"], ["Leonardo DiCaprio"], ["Science Fiction"]),
        Question("q3", "films like [Titanic]", ["Avatar", "Inception"], ["Titanic"], ["Avatar", "Inception"]),
        Question("q4", "unreachable [Nowhere]", ["x"], ["Nowhere"], ["x"]),
    ]
    examples = {e.question.id: e for e in training_examples(store, questions)}
    assert set(examples) == {"q1", "q2", "q3"}
    for q in questions[:3]:
        expected: set[tuple[str, ...]] = set()
        for answer in q.answer_entities:
            expected |= _bfs_relation_paths(TRIPLES, q.topic_entities[0], answer, 3)
        assert set(examples[q.id].relation_paths) == expected, q.id
    from engine.methods.rog.pipeline import RogConfig
    from engine.methods.rog.training_data import training_samples

    samples = list(training_samples(store, [questions[1]], RogConfig(prompt_tokens=None)))  # every path: no tokenizer
    assert [(s.task, s.target) for s in samples if s.task == "planning"] == [("planning", "<PATH>starred_actors<SEP>has_genre</PATH>")]
    [reasoning] = [s for s in samples if s.task == "reasoning"]
    assert reasoning.target == "Science Fiction" and reasoning.id == "q2"
    assert "Leonardo DiCaprio ← starred_actors ← Inception → has_genre → Science Fiction" in reasoning.prompt


def test_a_question_with_more_answers_than_one_call_takes_asks_in_parts(make_store, monkeypatch):
    import engine.methods.rog.training_data
    import engine.store
    from engine.methods.rog.training_data import shortest_relation_paths

    store = make_store("oxigraph", TRIPLES)
    many = Question("m", "films like [Titanic] or [Inception]", ["Avatar", "Inception", "Science Fiction"],
                    ["Titanic", "Inception"], ["Avatar", "Inception", "Science Fiction", "Nowhere"])
    whole = shortest_relation_paths(store, many)
    assert whole
    for module in (engine.store, engine.methods.rog.training_data):
        monkeypatch.setattr(module, "MAX_PAIRS", 2)  # two topics × three targets: three calls of two pairs
    with pytest.raises(InvalidInputError, match="make 8 pairs"):
        store.shortest_paths(many.topic_entities, many.answer_entities)
    assert shortest_relation_paths(store, many) == whole


def test_gold_targets_take_the_question_path_where_it_grounds(make_store):
    store = make_store("oxigraph", TRIPLES)
    deep = Question("g1", "genre of films sharing an actor with [Inception]", ["Science Fiction"], ["Inception"],
                    ["Science Fiction"], path=["starred_actors", "starred_actors", "has_genre"])
    broken = Question("g2", "genre of [Inception]", ["Science Fiction"], ["Inception"], ["Science Fiction"], path=["no_such"])
    shortest = {e.question.id: e.relation_paths for e in training_examples(store, [deep, broken])}
    assert shortest == {"g1": [("has_genre",)], "g2": [("has_genre",)]}
    gold = {e.question.id: e.relation_paths for e in training_examples(store, [deep, broken], targets="gold")}
    assert gold == {"g1": [("starred_actors", "starred_actors", "has_genre")], "g2": [("has_genre",)]}  # g2 falls back
    with pytest.raises(InvalidInputError, match="unknown training targets"):
        list(training_examples(store, [deep], targets="longest"))


def test_a_gold_path_with_no_topic_entity_gives_a_planning_sample_alone(make_store):
    from engine.methods.rog.pipeline import RogConfig
    from engine.methods.rog.training_data import training_samples

    store = make_store("oxigraph", TRIPLES)
    chain = Question("c1", "what genre are the films of Leonardo DiCaprio", ["Science Fiction"], [], [],
                     path=["starred_actors", "has_genre"])
    grounded = Question("g1", "genre of [Inception]", ["Science Fiction"], ["Inception"], ["Science Fiction"], path=["has_genre"])
    samples = list(training_samples(store, [chain, grounded], RogConfig(prompt_tokens=None, training_targets="gold")))
    assert [(s.id, s.task, s.target) for s in samples if s.id == "c1"] == [
        ("c1", "planning", "<PATH>starred_actors<SEP>has_genre</PATH>")]
    assert [s.task for s in samples if s.id == "g1"] == ["planning", "reasoning"]
    # shortest-path targets need a topic entity to search from: no sample
    assert [s.id for s in training_samples(store, [chain], RogConfig(prompt_tokens=None))] == []


# ----------------------------------------------------------------------------- CLI end to end
@pytest.mark.model
def test_rog_run_and_eval_end_to_end(tmp_path, capsys):
    kb = tmp_path / "kb.txt"
    kb.write_text("".join(f"{s}|{r}|{o}\n" for s, r, o in KB))
    qa = tmp_path / "qa_dev.txt"
    qa.write_text("who directed [Titanic]\tJames Cameron\nwhat movies did [Christopher Nolan] direct\tInception\n")
    (tmp_path / "qa_dev_qtype.txt").write_text("movie_to_director\ndirector_to_movie\n")
    store, out = str(tmp_path / "store"), str(tmp_path / "predictions.jsonl")
    assert main(["rog", "run", "--dataset", str(qa), "--store", str(tmp_path / "empty"), "--out", out, "--no-progress"]) == 2
    assert "--split all" in capsys.readouterr().err  # two questions leave the held-out test part empty
    assert main(["rog", "run", "--dataset", str(qa), "--split", "all", "--store", str(tmp_path / "empty"), "--out", out, "--no-progress"]) == 2
    err = capsys.readouterr().err  # a path with no store is not a new, empty one
    assert f"no store at {tmp_path / 'empty'}" in err and "kgqa load" in err
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    capsys.readouterr()
    args = ["rog", "run", "--dataset", str(qa), "--split", "all", "--store", store, "--mode", "paths", "--max-hops", "1", "-k", "2"]
    assert main(args + ["--out", out, "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["questions"], summary["rog"]["plans_exist"], summary["rog"]["plans_ground"]) == (2, 1.0, 1.0)
    records = [json.loads(line) for line in Path(out).read_text().splitlines()]
    assert [r["id"].split(":")[-1] for r in records] == ["1", "2"]
    for r in records:
        assert len(r["rog"]["plans"]) == 2 and all(p["exists"] and p["grounds"] for p in r["rog"]["plans"])
        assert r["rog"]["paths"] and r["prediction"] == r["rog"]["path_ends"]
        assert set(r["seconds"]) == {"store", "model", "other", "total"} and r["seconds"]["store"] > 0
        # the batch's calls shared: the topics' relations once, a call per distinct plan, names once; one
        # planning call for both questions
        assert r["calls"]["store"] >= 2 and r["calls"]["llm"] == 0.5
    assert main(["eval", out, "--protocol", "engine", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["overall"]["questions"] == 2
    assert report["overall"]["recall"] == 1.0  # one-hop grounded plans reach every answer here


# ----------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    from tests.tiny_lm import make_tiny_lm

    return make_tiny_lm(tmp_path_factory.mktemp("tiny-llama"))


def test_plans_stop_at_the_closing_marker():
    seen = {}

    class Recording(LanguageModel):
        def generate(self, prompt, **kw):
            raise AssertionError("planning uses beam search")

        def beam_search(self, prompt, **kw):
            seen.update(kw)
            return [Generation("<PATH>directed_by</PATH>")]

    plans = generate_plans(Recording(), "who directed [Titanic]", k=1)
    assert plans[0].relations == ["directed_by"]
    assert seen["stop"]("<PATH>directed_by</PATH>") and not seen["stop"]("<PATH>directed_by<SEP>")


def test_rog_samples_are_what_the_model_sees_and_train_with_lm_train(tmp_path, tiny, capsys):
    from engine.models.sft import read_samples
    from engine.models.transformers_lm import TransformersLM
    from engine.stores.oxigraph import OxigraphStore
    from loaders.questions import read_metaqa_questions

    kb = tmp_path / "kb.txt"
    kb.write_text("".join(f"{s}|{r}|{o}\n" for s, r, o in KB))
    qa = tmp_path / "qa_dev.txt"
    qa.write_text("who directed [Titanic]\tJames Cameron\nwho starred in films by [James Cameron]\tLeonardo DiCaprio|Sam Worthington\n")
    store, data = str(tmp_path / "store"), tmp_path / "export.jsonl"
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    # reasoning prompts keep the paths that fit the budget of the model's tokenizer, as at inference
    tokens = TransformersLM.load(tiny, "cpu")
    question = "who starred in films by [James Cameron]"
    with OxigraphStore(store, read_only=True) as opened:
        examples = list(training_examples(opened, read_metaqa_questions(qa)))
    paths = next(e.reasoning_paths for e in examples if e.question.question == question)
    assert len(paths) == 2
    budget = len(tokens.encode(reasoning_prompt(question, []))) + len(tokens.encode(paths[0] + "\n"))
    capsys.readouterr()
    assert main(["rog", "export-training", "--dataset", str(qa), "--split", "all", "--store", store, "--out", str(data),
                 "--model", tiny, "--prompt-tokens", str(budget), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == {"planning": 2, "reasoning": 2}
    planning = read_samples(data, ["planning"])
    assert {(s.prompt, s.target) for s in planning} == {
        (planning_prompt("who directed [Titanic]"), "<PATH>directed_by</PATH>"),
        (planning_prompt("who starred in films by [James Cameron]"), "<PATH>directed_by<SEP>starred_actors</PATH>"),
    }
    [sample] = [s for s in read_samples(data, ["reasoning"]) if question in s.prompt]
    assert sample.prompt == reasoning_prompt(question, fit_paths(tokens, reasoning_prompt(question, []), paths, budget))
    assert paths[0] in sample.prompt and paths[1] not in sample.prompt and sample.target == "Leonardo DiCaprio\nSam Worthington"

    out = tmp_path / "model"
    args = ["lm", "train", "--data", str(data), "--model", tiny, "--out", str(out), "--epochs", "2", "--batch-size", "2",
            "--device", "cpu", "--no-progress", "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["examples"] == 4 and len(summary["train_loss"]) == 2  # 2 planning + 2 reasoning
    assert load_lm(str(out), "cpu").generate("x", max_new_tokens=2).text is not None
    assert main([*args[:2], "--tasks", "planning", *args[2:]]) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 2


# ----------------------------------------------------------------------------- an answer left empty says why
class RepliesLM(LanguageModel):
    """Plans ``plan`` and reasons ``reasoning``, whatever it is asked (no tokenizer: a server's)."""

    name = "replies"

    def __init__(self, plan: str, reasoning: str) -> None:
        self.plan, self.reasoning = plan, reasoning

    def generate(self, prompt, **kw) -> Generation:
        return Generation(self.reasoning)

    def beam_search(self, prompt, **kw) -> list[Generation]:
        return [Generation(self.plan)]

    def encode(self, text: str) -> list[int]:
        from engine.errors import UnsupportedOperationError

        raise UnsupportedOperationError("no tokenizer")


def test_an_empty_answer_says_why_in_its_record(make_store):
    from engine.methods.rog.pipeline import RogConfig, RogMethod
    from engine.methods.run import run_method
    from engine.methods.spec import Models

    store = make_store("oxigraph", TRIPLES)
    question = Question("1", "who directed [Titanic]", [], ["Titanic"], [])
    llm = {"k": 1, "plan_mode": "free", "answer_mode": "llm"}
    records: list[dict] = []
    for reasoning in ("", " \n\t", "[]"):
        method = RogMethod(store, Models(), RogConfig(**llm), RepliesLM("<PATH>directed_by</PATH>", reasoning))
        run_method(method, [question], progress=False, on_record=records.append)
    assert [r["prediction"] for r in records] == [[], [], []] and all(r["rog"]["paths"] for r in records)
    assert [r["warning"] for r in records] == ["the reasoning model's reply is empty"] * 2 + [
        "the reasoning model's reply '[]' names no answer"]
    paths = {"k": 1, "plan_mode": "free", "answer_mode": "paths"}
    for plan, says in (("I do not know", "no plan of the planning model names a relation path"),
                       ("<PATH>no_such_relation</PATH>", "no plan grounds in the store from the topic entities")):
        predicted = RogMethod(store, Models(), RogConfig(**paths), RepliesLM(plan, "")).answer([question])[0]
        assert predicted.answers == [] and predicted.warning.startswith(says)
    answered = RogMethod(store, Models(), RogConfig(**llm), RepliesLM("<PATH>directed_by</PATH>", "James Cameron")).answer([question])
    assert answered[0].answers == ["James Cameron"] and answered[0].warning is None
