"""FiDeLiS: Eq. 3 on hand-made embeddings, the batched neighbourhood and lookahead fetch
against a plain-Python reference on every store, the embedding index (exact matches first,
stale stores refused), the beam search's control flow with a scripted language model on
every store, the reply parsers, and ``kgqa fidelis run`` end to end with the offline model."""
from __future__ import annotations

import json
import math
import random
import re
import threading
from pathlib import Path as FilePath

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.cli.main import main
from engine.errors import InvalidInputError
from engine.methods.fidelis import prompts
from engine.methods.fidelis.index import EmbeddingIndex, StaleIndexError, index_dir
from engine.methods.fidelis.parsing import (
    _json_objects,
    indices_settled,
    parse_answers,
    parse_indices,
    parse_plan,
    parse_yes,
    plan_settled,
    verdict_settled,
)
from engine.methods.fidelis.pathrag import Neighbourhoods, eq3_scores, next_steps, score_steps
from engine.methods.fidelis.config import FidelisConfig
from engine.methods.fidelis.pipeline import FidelisMethod
from engine.methods.fidelis.search import SearchConfig, Searcher, check_steps
from engine.graph import Edge, Literal, Path, Triple
from engine.methods.metrics import coverage_ratio, validity_ratio
from engine.models.lm import Generation, LanguageModel, per_prompt_stops
from engine.methods.meter import Meter
from engine.methods.run import run_method
from engine.methods.spec import Models
from loaders.questions import Question
from tests.cli_process import run_kgqa
from tests.random_graphs import node_ids, random_graph

# ----------------------------------------------------------------------------- Eq. 3
# query (1, 0); cosines: r0 1, r1 0, r2 0.6; e0 0, e1 1/sqrt(2), e2 -1, e3 0.8
QUERY = [1.0, 0.0]
RELATIONS = [[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]]
ENTITIES = [[0.0, 1.0], [1.0, 1.0], [-1.0, 0.0], [4.0, 3.0]]


def test_eq3_scores_are_the_papers_equation_on_hand_made_embeddings():
    candidates = torch.tensor([[0, 1], [1, 0], [2, 2]])
    # e1's edges: r1 to e3, r2 to e0 -> lookahead max(0, .6) + max(.8, 0) = 1.4
    # e0's edge: r0 to e2 -> 1 + (-1) = 0; e2 has none -> 0
    lookahead = torch.tensor([[1, 1, 3], [1, 2, 0], [0, 0, 2]])
    S, s_r, s_e, look = eq3_scores(
        torch.tensor(QUERY), torch.tensor(RELATIONS), torch.tensor(ENTITIES), candidates, lookahead, alpha=0.3
    )
    assert s_r.tolist() == pytest.approx([1.0, 0.0, 0.6], abs=1e-6)
    assert s_e.tolist() == pytest.approx([1 / math.sqrt(2), 0.0, -1.0], abs=1e-6)
    assert look.tolist() == pytest.approx([1.4, 0.0, 0.0], abs=1e-6)
    assert S.tolist() == pytest.approx([1 + 1 / math.sqrt(2) + 0.3 * 1.4, 0.0, 0.6 - 1.0], abs=1e-6)
    # alpha weighs the lookahead only
    S0, *_ = eq3_scores(torch.tensor(QUERY), torch.tensor(RELATIONS), torch.tensor(ENTITIES), candidates, lookahead, alpha=0.0)
    assert S0.tolist() == pytest.approx([1 + 1 / math.sqrt(2), 0.0, -0.4], abs=1e-6)


def test_score_steps_wires_paths_and_lookahead_edges_into_eq3():
    rel = {"r0": RELATIONS[0], "r1": RELATIONS[1], "r2": RELATIONS[2]}
    ent = {"e0": ENTITIES[0], "e1": ENTITIES[1], "e2": ENTITIES[2], "e3": ENTITIES[3], "t": [0.0, 1.0]}
    start = Path(("t",), (), ())
    steps = [
        Path(("t", "e1"), ("r0",), (True,)),
        Path(("t", "e0"), ("r1",), (False,)),
        Path(("t", "e2"), ("r2",), (True,)),
    ]
    hood = Neighbourhoods(
        {"e1": [Edge("e1", "r1", "e3", True), Edge("e1", "r2", "e0", False)], "e0": [Edge("e0", "r0", "e2", True)]}, False
    )
    scores = score_steps(
        np.array(QUERY), steps, hood,
        lambda names: np.array([rel[n] for n in names], dtype=np.float32),
        lambda terms: np.array([ent[t] for t in terms], dtype=np.float32),
    )
    assert [s[0] for s in scores] == pytest.approx([1 + 1 / math.sqrt(2) + 0.42, 0.0, -0.4], abs=1e-6)
    assert next_steps(start, Neighbourhoods({}, False)) == []


# ----------------------------------------------------------------------------- batched fetch
def _reference_edges(triples: list[Triple], node: str) -> set[Edge]:
    """One hop from ``node`` both ways, by definition (a self-loop once, forward)."""
    out = {Edge(t.subject, t.relation, t.object, True) for t in triples if t.subject == node}
    out |= {Edge(node, t.relation, t.subject, False) for t in triples if t.object == node and t.subject != node}
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_batched_neighbourhood_and_lookahead_equal_a_plain_reference(make_store, store_kind, seed):
    triples = random_graph(seed, edges=50)
    store = make_store(store_kind, triples)
    meter = Meter()
    metered = meter.store(store)
    rng = random.Random(seed)
    ids = node_ids(triples)
    beams = [Path((i,), (), ()) for i in rng.sample(ids, 4)]
    hood = Neighbourhoods.fetch(metered, [b.end for b in beams], None)
    steps = [p for b in beams for p in next_steps(b, hood)]
    look = Neighbourhoods.fetch(metered, [p.end for p in steps], None)
    assert meter.calls["store"] == 2  # one expand per hop for every beam and every candidate
    assert not hood.truncated and not look.truncated
    for b in beams:
        assert set(hood.edges.get(b.end, [])) == _reference_edges(triples, b.end)
    for p in steps:
        if not isinstance(p.end, Literal):
            assert set(look.edges.get(p.end, [])) == _reference_edges(triples, p.end), (store_kind, p.end)
    # a limit cuts the batch and says so
    small = Neighbourhoods.fetch(store, [b.end for b in beams], 2)
    assert small.truncated and sum(len(v) for v in small.edges.values()) == 2
    # every step of every path found is a triple of the store
    two = [q for p in steps[:5] for q in next_steps(p, look)]
    assert all(all(flags) for flags in check_steps(store, steps + two).values())
    fake = Path((beams[0].end, "no-such-node"), ("r",), (True,))
    assert check_steps(store, [fake])[fake] == [False]


# ----------------------------------------------------------------------------- the index
MOVIES = [
    ("Forrest Gump", "starred_actors", "Tom Hanks"),
    ("Forrest Gump", "directed_by", "Robert Zemeckis"),
    ("Forrest Gump", "has_genre", "Drama"),
    ("Cast Away", "starred_actors", "Tom Hanks"),
    ("Cast Away", "directed_by", "Robert Zemeckis"),
    ("Big", "starred_actors", "Tom Hanks"),
    ("Big", "directed_by", "Penny Marshall"),
    ("Big", "release_year", "1988"),
    ("Titanic", "starred_actors", "Kate Winslet"),
    ("Titanic", "directed_by", "James Cameron"),
]
MOVIE_TRIPLES = [Triple(s, r, o) for s, r, o in MOVIES]


@pytest.fixture(scope="module")
def movie_index(tmp_path_factory):
    from engine.reference import ReferenceStore

    index = EmbeddingIndex.build(ReferenceStore(MOVIE_TRIPLES), progress=False)
    return index


@pytest.mark.model
def test_index_finds_exact_matches_first_and_refuses_a_stale_store(make_store, tmp_path):
    store = make_store("oxigraph", MOVIE_TRIPLES)
    index = EmbeddingIndex.build(store, progress=False)
    assert index.info.relations == 4 and index.info.entities == 11
    directory = index.save(tmp_path / "index")
    loaded = EmbeddingIndex.load(directory, index.encode)
    loaded.check(store)  # fresh
    assert loaded.search("directed_by", "relations", 2)[0] == ("directed_by", pytest.approx(1.0, abs=1e-5))
    for name in ("Tom Hanks", "Robert Zemeckis", "Titanic"):
        assert loaded.search(name, "entities", 3)[0][0] == name
    assert np.allclose(loaded.vectors("entities", ["Big"]), index.vectors("entities", ["Big"]))
    # a term the index lacks (a literal) is embedded on the fly
    assert loaded.vectors("entities", [Literal.make("Big")])[0] == pytest.approx(index.vectors("entities", ["Big"])[0], abs=1e-5)
    store.add_triples([Triple("Big", "has_genre", "Comedy")])
    with pytest.raises(StaleIndexError, match="rebuild it with `kgqa fidelis index"):
        loaded.check(store)
    with pytest.raises(InvalidInputError, match="built with the encoder"):
        index.check(make_store("oxigraph", MOVIE_TRIPLES), encoder="another-encoder")
    with pytest.raises(InvalidInputError, match="no FiDeLiS index"):
        EmbeddingIndex.load(tmp_path / "nothing")
    (tmp_path / "a-file").write_text("")
    with pytest.raises(InvalidInputError, match="index path .*a-file is a file: give --index DIR"):
        index_dir(store, str(tmp_path / "a-file"))  # named before the index is built, not after
    for blank in ("", " \t\n"):  # near nothing: its matches would be noise
        with pytest.raises(InvalidInputError, match="the text to look up is empty"):
            loaded.search(blank, "entities", 3)


def test_an_index_folder_that_would_overwrite_the_store_or_a_users_files_is_refused(tmp_path):
    from engine.open import open_store

    folder = tmp_path / "data" / "store"
    with open_store(str(folder)) as store:
        for given in (folder, folder.parent):  # the store's folder, or one holding it
            with pytest.raises(InvalidInputError, match="give --index"):
                index_dir(store, str(given))
        with pytest.raises(InvalidInputError, match="is inside the input folder .*give --index a path outside it"):
            index_dir(store, str(folder / "sub" / "index"))
        assert index_dir(store) == folder.with_name("store.fidelis-index")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "entities.json").write_text("my own")
    (mine / "notes.txt").write_text("my own")
    with pytest.raises(InvalidInputError, match=r"holds files that are not an index's \(notes.txt\).*a new or empty folder"):
        index_dir(store, str(mine))
    assert (mine / "entities.json").read_text() == "my own"
    assert index_dir(store, str(tmp_path / "new")) == tmp_path / "new"


def test_a_rebuild_stopped_part_way_leaves_no_index_that_looks_finished(tmp_path, monkeypatch):
    from engine.methods.fidelis.index import FORMAT, IndexInfo

    def index(dim: int) -> EmbeddingIndex:
        info = IndexInfo(FORMAT, "f", "memory:", f"encoder-{dim}", dim, 1, 2, 0.0)
        return EmbeddingIndex(info, {"relations": ["r"], "entities": ["a", "b"]},
                              {"relations": np.ones((1, dim)), "entities": np.ones((2, dim))})

    directory = index(4).save(tmp_path / "index")
    assert EmbeddingIndex.load(directory).info.dim == 4
    saved = np.save
    monkeypatch.setattr(np, "save", lambda f, array: saved(f, array) if array.shape[0] == 1 else (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # stopped while writing the entities of another encoder's rebuild
        index(8).save(directory)
    with pytest.raises(InvalidInputError, match="no FiDeLiS index"):
        EmbeddingIndex.load(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["entities.json", "entities.npy", "relations.json", "relations.npy"]
    monkeypatch.undo()
    assert EmbeddingIndex.load(index(8).save(directory)).info.dim == 8


def test_kgqa_fidelis_search_refuses_blank_text_and_no_matches_before_loading_anything(tmp_path):
    # the store does not exist: the arguments are refused before it, the index or the encoder opens
    missing = str(tmp_path / "no-store")
    result = run_kgqa("fidelis", "search", " ", "--store", missing, timeout=60)
    assert result.returncode == 2 and "the text to look up is empty" in result.stderr
    result = run_kgqa("fidelis", "search", "Titanic", "-m", "0", "--store", missing, timeout=60)
    assert result.returncode == 2 and "argument -m: '0': give a whole number of at least 1" in result.stderr


# ----------------------------------------------------------------------------- beam search
class ScriptedLM(LanguageModel):
    """Answers FiDeLiS's prompts by rule: a fixed plan, ranks the candidates naming the wanted
    relation of the current hop, verifies a path that reached a director, answers with the
    reasoning paths' ends. Records every prompt."""

    name = "scripted"

    def __init__(self, plan: str | None = None, rank: str | None = None, verify: bool = True, chatter: str = "") -> None:
        self.plan = plan
        self.rank = rank
        self.verify = verify
        self.chatter = chatter  # written on after every plan, rank and verdict, as small models do
        self.prompts: list[str] = []
        self.batches: list[int] = []
        self.stopped: list[str] = []  # replies a ``stop`` ended early

    def generate(self, prompt: str, **_) -> Generation:
        self.prompts.append(prompt)
        if prompt.startswith(prompts.PLAN_SYSTEM):
            text = self.plan if self.plan is not None else json.dumps({
                "keywords": ["starred actors", "directed by"],
                "planning_steps": ["find the films of the actor", "find who directed them"],
                "declarative_statement": "The films of Tom Hanks were directed by *placeholder*.",
            })
        elif prompt.startswith(prompts.RANK_SYSTEM):
            listed = prompt.split("for answering the question. ", 1)[1].rsplit(". Only return the index", 1)[0]
            lines = [line.split(": ", 1) for line in listed.splitlines()]
            last = {int(i): re.findall(r"[→←] (\S+) [→←]", text)[-1] for i, text in lines}
            wanted = "directed_by" if "directed_by" in last.values() else "starred_actors"
            text = self.rank if self.rank is not None else str([i for i, r in last.items() if r == wanted][:2])
        elif prompt.startswith(prompts.VERIFY_SYSTEM):
            text = "Yes." if self.verify and "directed_by" in prompt and "starred_actors Tom Hanks." in prompt else "No"
        elif prompt.startswith(prompts.ANSWER_SYSTEM):
            paths = prompt.split("Reasoning path: ", 1)[1].split("\nOnly return")[0].splitlines()
            text = ", ".join(dict.fromkeys(p.split(" → ")[-1] for p in paths))
            return Generation(text, None, None, len(prompt.split()), len(text.split()))
        else:
            raise AssertionError(f"unexpected prompt {prompt[:80]!r}")
        text += self.chatter
        return Generation(text, None, None, len(prompt.split()), len(text.split()))

    def generate_batch(self, prompts_, *, max_new_tokens=256, stop=None):
        """Each reply written character by character, ended where ``stop`` first holds."""
        self.batches.append(len(prompts_))
        replies = [self.generate(p) for p in prompts_]
        out = []
        for g, rule in zip(replies, per_prompt_stops(stop, len(prompts_))):
            end = next((n for n in range(len(g.text) + 1) if rule is not None and rule(g.text[:n])), len(g.text))
            if end < len(g.text):
                self.stopped.append(g.text[:end])
            out.append(Generation(g.text[:end], None, None, g.prompt_tokens, len(g.text[:end].split())))
        return out

    def beam_search(self, prompt, **_):
        raise AssertionError("FiDeLiS never beam-searches")


QUESTION = Question("q1", "who directed the films starring [Tom Hanks]", ["Robert Zemeckis", "Penny Marshall"], ["Tom Hanks"],
                    ["Robert Zemeckis", "Penny Marshall"], hops=2, qtype="actor_to_movie_to_director")
OTHER = Question("q2", "which films did [Kate Winslet] act in", ["Titanic"], ["Kate Winslet"], ["Titanic"], hops=1,
                 qtype="actor_to_movie")


@pytest.mark.model
def test_beam_search_verifies_stops_and_answers_on_every_store(make_store, store_kind, movie_index):
    store = make_store(store_kind, MOVIE_TRIPLES)
    lm = ScriptedLM()
    models = Models()
    method = FidelisMethod(store, models, FidelisConfig(width=2, depth=3, batch_size=2), models.meter.lm(lm), movie_index)
    records: list[dict] = []
    summary = run_method(method, [QUESTION, OTHER], progress=False, on_record=records.append)
    first, second = (r["fidelis"] for r in records)
    # q1: two films at depth 1 (not verified), their directors at depth 2 (verified: finished, search over)
    steps = first["searches"][0]["steps"]
    assert len(steps) == 2 and len(steps[0]["beams"]) == 2
    assert all(b.startswith("Tom Hanks ← starred_actors ← ") for b in steps[0]["beams"])
    assert all(" → directed_by → " in b for b in steps[1]["beams"])
    assert (steps[0]["verified"], steps[1]["verified"]) == ([False, False], [True, True])
    assert first["searches"][0]["verified"] == steps[1]["beams"] == first["paths"]
    directors = {b.split(" → ")[-1] for b in steps[1]["beams"]}
    assert set(records[0]["prediction"]) == directors and directors <= {"Robert Zemeckis", "Penny Marshall"}
    # prompts: plan, rank x2, verify 2 + 2, answer; every step a real triple; the gold path retrieved
    assert first["llm"]["by_stage"] == {"plan": 1, "rank": 2, "verify": 4, "answer": 1}
    assert first["validity"] == {"steps": 4, "valid": 4}
    assert first["coverage"] == {"gold": ["starred_actors", "directed_by"], "retrieved": 1.0, "kept": 1.0}
    # q2 is never verified: after Titanic and James Cameron no unused edge is left, the last beams answer
    assert len(second["searches"][0]["steps"]) == 2 and not second["searches"][0]["verified"]
    assert second["llm"]["by_stage"] == {"plan": 1, "rank": 2, "verify": 2, "answer": 1}
    assert second["paths"] == ["Kate Winslet ← starred_actors ← Titanic → directed_by → James Cameron"]
    assert records[1]["prediction"] == ["James Cameron"]
    # both questions share each batched stage: the plan and the answer batches hold both
    assert lm.batches[0] == 2 and lm.batches[-1] == 2
    assert summary["fidelis"]["validity_ratio"] == 1.0 and summary["fidelis"]["llm_prompts"] == (8 + 6) / 2
    assert summary["calls_per_question"]["llm"] == len(lm.batches) / 2
    # per step: neighbourhoods, lookahead, names; topic names once; the validity check once
    assert summary["calls_per_question"]["store"] <= (3 * 3 + 2) / 2


@pytest.mark.model
def test_replies_end_where_their_answer_is_settled_and_answer_the_same(make_store, movie_index):
    """A model that writes on after its plan, indices and verdict is stopped where each parser's
    reading is settled; the search is the one the whole replies give."""
    store = make_store("oxigraph", MOVIE_TRIPLES)
    chatter = " I hope this helps: 1, 2, 3, 4 {no} yes no"

    def outcomes(lm):
        searcher = Searcher(store, movie_index, lm, SearchConfig(width=2, depth=3))
        return [(o.plan, o.answers, [s.steps for s in o.searches]) for o in searcher.run([QUESTION, OTHER])]

    whole = ScriptedLM(chatter=chatter)
    whole.generate_batch = lambda prompts_, *, max_new_tokens=256, stop=None: ScriptedLM.generate_batch(whole, prompts_)
    stopped = ScriptedLM(chatter=chatter)
    assert outcomes(stopped) == outcomes(whole)
    # every plan, rank and verdict stopped right after its answer: the chatter never written
    assert len(stopped.stopped) == len(stopped.prompts) - 2  # all but the two answer prompts
    assert all(chatter.strip()[:5] not in reply for reply in stopped.stopped)
    assert {r[-1] for r in stopped.stopped} <= {"}", "]", ".", " "}


@pytest.mark.model
def test_paths_mode_answers_with_path_ends_and_unusable_replies_fall_back(make_store, movie_index):
    store = make_store("oxigraph", MOVIE_TRIPLES)
    lm = ScriptedLM(plan="I cannot answer in JSON", rank="none of them", verify=False)
    searcher = Searcher(store, movie_index, lm, SearchConfig(width=2, depth=2, answer_mode="paths"))
    (outcome,) = searcher.run([QUESTION])
    assert not outcome.plan.parsed and outcome.plan.keywords == [QUESTION.question]
    assert outcome.usage.malformed == {"plan": 1, "rank": 2}
    assert outcome.usage.prompts == {"plan": 1, "rank": 2, "verify": 4}  # no answer prompt in paths mode
    (search,) = outcome.searches
    assert not search.finished and len(search.beams) == 2
    assert all(s.fallback for s in search.steps)
    # the fallback keeps Path-RAG's best candidates, and the answers are the beams' ends (with ids)
    assert outcome.answer_ids == list(dict.fromkeys(b.end for b in search.beams))
    assert outcome.answers == outcome.answer_ids


def test_an_empty_answer_says_why(make_store, movie_index):
    from engine.methods.run import run_method

    class SilentAnswer(ScriptedLM):
        """Searches as ScriptedLM does, and answers with ``answer``."""

        def __init__(self, answer: str) -> None:
            super().__init__()
            self.answer = answer

        def generate(self, prompt: str, **_) -> Generation:
            return Generation(self.answer) if prompt.startswith(prompts.ANSWER_SYSTEM) else super().generate(prompt)

    store = make_store("oxigraph", MOVIE_TRIPLES)
    records: list[dict] = []
    for answer in (" \n ", ", ;"):
        method = FidelisMethod(store, Models(), FidelisConfig(width=2, depth=2), SilentAnswer(answer), movie_index)
        run_method(method, [QUESTION], progress=False, on_record=records.append)
    assert [r["prediction"] for r in records] == [[], []] and all(r["fidelis"]["paths"] for r in records)
    assert [r["warning"] for r in records] == ["the answering model's reply is empty",
                                               "the answering model's reply ', ;' names no answer"]


def test_search_config_refuses_bad_settings():
    with pytest.raises(InvalidInputError, match="verifier"):
        SearchConfig(verifier="magic")
    with pytest.raises(InvalidInputError, match="width"):
        SearchConfig(width=0)


# ----------------------------------------------------------------------------- parsing and metrics
def test_reply_parsers():
    reply = 'Sure! ```json\n{"keywords": ["a", "b"], "planning_steps": ["x"], "declarative_statement": "X is *placeholder*."}\n```'
    plan = parse_plan(reply, "q?")
    assert (plan.keywords, plan.steps, plan.parsed, plan.keyword_text) == (["a", "b"], ["x"], True, "a, b")
    assert plan.conclusion("Y") == "X is Y"
    cut = parse_plan('{"keywords": ["a", "b", "a", "a",\n "a', "q?")  # ran out of tokens
    assert (cut.keywords, cut.statement, cut.parsed, cut.partial) == (["a", "b"], "q?", True, True)
    cut = parse_plan('{"keywords": ["a"], "planning_steps": ["s1", "s', "q?")
    assert (cut.keywords, cut.steps) == (["a"], ["s1"])
    fallback = parse_plan("{not json", "What is X?")
    assert not fallback.parsed and fallback.conclusion("Y") == "What is X? Y"
    deep = '{"keywords": ' + "[" * 100_000 + "]" * 100_000 + "}"  # a reply nested deeper than json follows
    assert not parse_plan(deep, "What is X?").parsed and not plan_settled(deep)
    assert parse_indices("[3, 1, 3, 99, 2]", 5, 2) == [2, 0]
    assert parse_indices("no numbers", 5, 2) == []
    # a number of thousands of digits is out of range, not an error; leading zeros are read
    huge = "9" * 5_000
    assert parse_indices(f"[{huge}, 2, {'0' * 5_000}3]", 5, 2) == [1, 2] and not indices_settled(f"[{huge}", 5, 1)
    assert (parse_yes("Yes, it can."), parse_yes("no"), parse_yes("maybe")) == (True, False, None)
    assert parse_answers("Answer: Robert Zemeckis, Penny Marshall.\nRobert Zemeckis") == ["Robert Zemeckis", "Penny Marshall"]


def _objects_decoded_at_every_brace(text: str) -> list[dict]:
    """Every JSON object that starts at a ``{`` of ``text``, each decoded on its own."""
    found = []
    for match in re.finditer(r"\{", text):
        try:
            value = json.JSONDecoder().raw_decode(text, match.start())[0]
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(['{', '}', '"k"', '"keywords"', ': ', ":", ",", "[", "]", '"', '\\', " ", "1", "x", "null",
                                 '"a{"', "{}"]), max_size=24))
def test_the_plan_parser_finds_the_objects_decoding_at_every_brace_finds(parts):
    text = "".join(parts)
    assert list(_json_objects(text)) == _objects_decoded_at_every_brace(text)


def test_a_plan_reply_nested_without_end_is_read_about_once():
    """A reply of ``{"k":`` over and over: each ``{`` read on its own followed the nesting to
    the end (tens of seconds for a megabyte); the plan parser reads each object once."""
    hostile = '{"k":' * 240_000
    plans: list = []
    reading = threading.Thread(target=lambda: plans.append(parse_plan(hostile, "q?")), daemon=True)
    reading.start()
    reading.join(20)
    assert not reading.is_alive(), "the plan parser went over the reply once per {"
    assert not plans[0].parsed
    # an object deeper than Python's parser follows is not JSON, from its first { or any nested in it
    assert parse_plan('x {"a": ' + '{"k":' * 1_000 + "1" + "}" * 1_001 + ' {"keywords": ["y"]}', "q?").keywords == ["y"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(['{', '}', '"keywords"', '"declarative_statement"', ': ', '["a"', ', "b"]', '"x"', "[", "]", " ",
                              "1", "2", "3", "0", "12", ",", "yes", "no", "No", "ne", "Yes.", "\n", "t"]), max_size=14),
    st.integers(0, 4), st.integers(1, 3),
)
def test_a_settled_reply_reads_the_same_however_it_goes_on(parts, n_candidates, k):
    """Wherever ``*_settled`` holds for a prefix of a reply, its parser reads the prefix as it
    reads the whole reply: stopping there changes no answer."""
    reply = "".join(parts)
    for end in range(len(reply) + 1):
        prefix = reply[:end]
        if plan_settled(prefix):
            assert parse_plan(prefix, "q") == parse_plan(reply, "q")
        if indices_settled(prefix, n_candidates, k):
            assert parse_indices(prefix, n_candidates, k) == parse_indices(reply, n_candidates, k)
        if verdict_settled(prefix):
            assert parse_yes(prefix) == parse_yes(reply)


def test_replies_settle_right_after_their_answer():
    plan = '```json\n{"keywords": ["a"], "declarative_statement": "X is *placeholder*."}'
    assert plan_settled(plan) and not plan_settled(plan[:-1]) and not plan_settled('{"planning_steps": ["s"]}')
    assert [indices_settled(r, 30, 3) for r in ("[3, 5, 1", "[3, 5, 1]", "[3, 3, 5, 99, 1,")] == [False, True, True]
    assert indices_settled("[2", 1, 3) is False and indices_settled("[1]", 1, 3) is True  # one candidate: all it can take
    assert [verdict_settled(r) for r in ("Yes", "Yes.", "No", "None of them, no", "Nobody knows. no\n")] == [
        False, True, False, False, True]


def test_prompts_are_the_papers_text():
    assert prompts.plan_prompt("Q").endswith("Q: Q\nA:")
    assert "'Jamaican people speak *placeholder*.' leave the *placeholder* unchanged" in prompts.PLAN_SYSTEM
    text = prompts.rank_prompt("Who?", "step one", ["a → r → b", "c"], 3)
    assert "choose the best 3 reasoning paths" in text and "1: a → r → b\n2: c." in text
    assert prompts.verify_prompt("S", "P").endswith("Whether the conclusion 'S' can be deduced from 'P', if yes, return yes, if no, return no.\nA:")


def test_validity_and_coverage_ratios():
    assert validity_ratio([True, True, False, True]) == 0.75 and validity_ratio([]) is None
    assert coverage_ratio([("a", "b"), ("c",)], [("a", "b"), ("d",)]) == 0.5
    assert coverage_ratio([("a",)], []) is None


# ----------------------------------------------------------------------------- CLI end to end
@pytest.fixture
def one_thread():
    """The 135M model decodes faster on one thread than on two that other processes contend
    for (5 s against 30 s for 40 tokens on this shared 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.model
def test_fidelis_run_end_to_end_with_the_offline_model(tmp_path, capsys, one_thread):
    kb = tmp_path / "kb.txt"
    kb.write_text("".join(f"{s}|{r}|{o}\n" for s, r, o in MOVIES))
    qa = tmp_path / "qa_dev.txt"
    qa.write_text("who directed [Titanic]\tJames Cameron\nwhat movies did [Penny Marshall] direct\tBig\n")
    (tmp_path / "qa_dev_qtype.txt").write_text("movie_to_director\ndirector_to_movie\n")
    store, out = str(tmp_path / "store"), str(tmp_path / "predictions.jsonl")
    assert main(["load", str(kb), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    capsys.readouterr()
    args = ["fidelis", "run", "--dataset", str(qa), "--split", "all", "--store", store, "--depth", "1", "--width", "2",
            "--plan-tokens", "24", "--rank-tokens", "8", "--verify-tokens", "4", "--answer-tokens", "8",
            "--out", out, "--no-progress", "--json"]
    assert main(args) == 0  # builds the missing index beside the store
    summary = json.loads(capsys.readouterr().out)
    assert summary["questions"] == 2 and summary["fidelis"]["validity_ratio"] == 1.0
    assert FilePath(store + ".fidelis-index", "meta.json").is_file()
    records = [json.loads(line) for line in FilePath(out).read_text().splitlines()]
    for r in records:
        assert r["fidelis"]["llm"]["prompts"] >= 3 and r["tokens"]["prompt_tokens"] > 0 and r["tokens"]["completion_tokens"] > 0
        assert r["calls"]["store"] > 0 and r["seconds"]["model"] > 0
    assert main(["eval", out, "--protocol", "engine", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["overall"]["questions"] == 2
    # more triples: the index is stale and refused, then rebuilt on request
    more = tmp_path / "more.txt"
    more.write_text("Big|has_genre|Comedy\n")
    assert main(["load", str(more), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(args) == 2
    assert "rebuild it with `kgqa fidelis index" in capsys.readouterr().err
    assert main(["fidelis", "index", "--store", store, "--no-progress"]) == 0
    assert "indexed 4 relations and 12 entities" in capsys.readouterr().out
