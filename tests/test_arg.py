"""ARG-KBQA: candidate forms, two-stage retrieval on a small MetaQA-shaped graph, the
trainable stage-2 scorer, and the ``kgqa sexpr`` / ``kgqa arg`` commands."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.methods.arg.alignment import Aligner
from engine.methods.arg.candidates import Schema, path_forms, read_schema, with_names
from engine.methods.arg.ranker import BiEncoder, Example, Scorer, top, train_scorer
from engine.methods.arg.retrieval import retrieve, retrieve_batch
from engine.methods.batched import per_group
from engine.methods.meter import Meter
from engine.cli.main import main
from engine.errors import InvalidInputError, KGQAError
from engine.graph import NAME_RELATION, XSD, Literal, Triple
from engine.models.lm import LanguageModel
from engine.reference import ReferenceStore
from engine.results import to_json
from engine.sexpr import parse
from engine.sexpr.tree import to_text
from tests.tiny_lm import stop_after_one_file_replaced, stop_while_saving_weights

MOVIES = [
    ("The Prowler", "directed_by", "Joseph Losey"),
    ("The Prowler", "starred_actors", "Evelyn Keyes"),
    ("The Prowler", "release_year", "1951"),
    ("The Prowler", "in_language", "English"),
    ("M", "directed_by", "Joseph Losey"),
    ("M", "starred_actors", "David Wayne"),
    ("M", "has_genre", "Thriller"),
    ("Evelyn Keyes", "married_to", "Artie Shaw"),
]
TRIPLES = [Triple(*t) for t in MOVIES]


@pytest.fixture(scope="module")
def bi() -> BiEncoder:
    return BiEncoder()


def test_path_forms():
    assert [to_text(f) for f in path_forms("m.0a", [("film.film.directed_by", "out")])] == [
        "(JOIN (R film.film.directed_by) m.0a)"
    ]
    schema = Schema(domain={"film.film.directed_by": "film.film"}, range={"film.film.directed_by": "film.director"})
    forms = [to_text(f) for f in path_forms("m.0d", [("film.film.directed_by", "in"), ("film.film.genre", "out")], schema)]
    assert forms == ["(JOIN (R film.film.genre) (JOIN film.film.directed_by m.0d))"]  # genre: no schema entry
    forms = [to_text(f) for f in path_forms("m.0d", [("film.film.directed_by", "in")], schema)]
    assert forms == ["(JOIN film.film.directed_by m.0d)", "(AND film.film (JOIN film.film.directed_by m.0d))"]
    year = Literal.make("1990", XSD + "gYear")
    forms = [to_text(f) for f in path_forms(year, [("people.person.birth_year", "in")])]
    assert forms[0] == f"(JOIN people.person.birth_year 1990^^{XSD}gYear)"
    assert {f.split()[0] for f in forms[1:]} == {"(lt", "(le", "(gt", "(ge"}
    for form in forms:
        assert to_text(parse(form)) == form


def test_schema_from_the_ontology(shared_data):
    schema = read_schema(shared_data / "freebase-ontology")
    assert schema.range["film.film.directed_by"] == "film.director"
    assert schema.lands_on(("film.film.directed_by", "in")) == "film.film"


def test_references_name_their_entities():
    tree = parse("(JOIN (R film.film.directed_by) m.0a)")
    assert with_names(tree, {"m.0a": "The Prowler"}) == "(JOIN (R film.film.directed_by) [The Prowler])"


@pytest.mark.model
def test_retrieval_finds_the_gold_forms(bi):
    store = ReferenceStore(TRIPLES)
    meter = Meter()
    got = retrieve(meter.store(store), "who directed [The Prowler]", ["The Prowler"], bi, Scorer(bi), k=3, meter=meter)
    assert "(JOIN (R directed_by) [The Prowler])" in [r.sexpr for r in got.references]
    assert all(len(p.hops) in (1, 2) for p in got.paths) and any(len(p.hops) == 2 for p in got.paths)
    assert meter.calls["store"] >= 2 and meter.seconds["model"] > 0
    two_hop = retrieve(store, "which films share a director with [M]", ["M"], bi, Scorer(bi), k=20)
    assert "(JOIN directed_by (JOIN (R directed_by) [M]))" in [r.sexpr for r in two_hop.references]
    for ref in two_hop.references:  # every reference executes
        store.execute(ref.sexpr)


YEAR = XSD + "gYear"
DATED = TRIPLES + [
    Triple("The Prowler", "release_year", Literal.make("1951", YEAR)),
    Triple("M", "release_year", Literal.make("1951", YEAR)),
    Triple("Roma", "release_year", Literal.make("2018", YEAR)),
    Triple("Roma", "directed_by", "Alfonso Cuaron"),
]


@pytest.mark.model
def test_retrieval_from_a_literal_anchor(make_store, store_kind, bi):
    store = make_store(store_kind, DATED)
    year = Literal.make("1951", YEAR)
    got = retrieve(store, "which films were released in 1951", [year], bi, Scorer(bi), k=50)
    first = [p for p in got.paths if len(p.hops) == 1]
    assert [(p.anchor, p.hops) for p in first] == [(year, (("release_year", "in"),))]
    assert {p.hops[1] for p in got.paths if len(p.hops) == 2} >= {("directed_by", "out"), ("starred_actors", "out")}
    forms = [r.sexpr for r in got.references]
    join = f"(JOIN release_year 1951^^{YEAR})"
    assert join in forms and f"(JOIN (R directed_by) {join})" in forms
    assert {f"({op} release_year 1951^^{YEAR})" for op in ("lt", "le", "gt", "ge")} <= set(forms)
    reference = ReferenceStore(DATED)
    for form in forms:  # every reference executes, with the same answer as the evaluator's
        assert store.execute(form) == reference.execute(form), form
    assert store.execute(join).answers == ["M", "The Prowler"]
    assert store.execute(f"(gt release_year 1951^^{YEAR})").answers == ["Roma"]
    # a literal and an entity together: both anchor paths
    mixed = retrieve(store, "which films of 1951 did Joseph Losey direct", [year, "Joseph Losey"], bi, Scorer(bi), k=20)
    assert {p.anchor for p in mixed.paths} == {year, "Joseph Losey"}
    assert to_json(got)["paths"][0]["anchor"] == {"value": "1951", "datatype": YEAR}


def test_ask_takes_the_run_commands_options_with_their_defaults():
    from engine.cli.arg import ASK_OPTIONS
    from engine.cli.common import config_from_args
    from engine.cli.main import build_parser
    from engine.methods.arg.pipeline import PAPER_K, ArgConfig

    parser = build_parser()
    asked = config_from_args(ArgConfig, parser.parse_args(["arg", "ask", "q", "--entity", "m.1"]))
    defaults = ArgConfig()
    assert {name: getattr(asked, name) for name in ASK_OPTIONS} == {name: getattr(defaults, name) for name in ASK_OPTIONS}
    asked = config_from_args(ArgConfig, parser.parse_args([
        "arg", "ask", "q", "--entity", "m.1", "--model", "SmolLM2-135M-Instruct", "--k", "7", "--n-demos", "2",
        "--timeout", "2.5", "--demo-mode", "random", "--samples", "3",
    ]))
    assert (asked.model, asked.k, asked.n_demos, asked.timeout, asked.demo_mode, asked.samples) == (
        "SmolLM2-135M-Instruct", 7, 2, 2.5, "random", 3)
    # retrieving alone keeps the paper's k, whatever the generator
    assert parser.parse_args(["arg", "retrieve", "q", "--entity", "m.1"]).k == PAPER_K


def test_ask_names_a_demonstrations_file_it_cannot_use(tmp_path, capsys):
    from engine.cli.main import main

    demos = tmp_path / "demos.json"
    for content, says in ((None, "cannot read it"), (b"[{", "not a JSON file"), (b'["\xff"]', "not a JSON file"),
                          (b"[" * 100_000 + b"]" * 100_000, "not a JSON file"),
                          (b'[{"question": "q"}]', 'give a JSON list of {"question": ..., "s_expression": ...} objects')):
        if content is not None:
            demos.write_bytes(content)
        assert main(["arg", "ask", "q", "--entity", "m.1", "--demos", str(demos)]) == 2
        assert f"--demos {demos}: {says}" in capsys.readouterr().err


@pytest.mark.model
def test_retrieve_command_takes_literal_anchors(tmp_path, capsys):
    from engine.stores.oxigraph import OxigraphStore

    path = str(tmp_path / "store")
    with OxigraphStore(path) as store:
        store.add_triples(DATED)
    argv = ["arg", "retrieve", "films released in 1951", "--literal", f"1951^^{YEAR}", "--k", "3", "--store", path, "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["paths"][0]["anchor"] == {"value": "1951", "datatype": YEAR}
    assert main(["arg", "retrieve", "q", "--literal", "(JOIN r m.a)", "--store", path]) == 2
    assert "not a literal" in capsys.readouterr().err
    assert main(["arg", "retrieve", "q", "--store", path]) == 2
    assert "--entity" in capsys.readouterr().err
    # the text output is a table, not a Python repr
    assert main(argv[:-1]) == 0
    text = capsys.readouterr().out
    assert "Retrieval(" not in text and "KeptPath(" not in text
    lines = text.splitlines()
    assert lines[0] == "question\tfilms released in 1951" and "score\tanchor\tpath" in lines
    assert any(line.split("\t")[1:2] == ["1951"] for line in lines)


def test_an_answer_prints_as_text_not_a_python_repr():
    from engine.cli.arg import render_answer
    from engine.methods.arg.pipeline import ArgAnswer

    answer = ArgAnswer("who directed [M]", ["(JOIN (R directed_by) [M])"], ["(JOIN (R directed_by) [M])", "(JOIN"],
                       ["(JOIN (R directed_by) m.1)", None], "(JOIN (R directed_by) m.1)", ["m.9", Literal.make("1951")])
    text = render_answer(answer, {"m.9": "Joseph Losey"})
    assert text.splitlines() == [
        "question\twho directed [M]", "", "references", "  (JOIN (R directed_by) [M])", "", "generated",
        "  (JOIN (R directed_by) [M])", "  (JOIN", "", "executed\t(JOIN (R directed_by) m.1)", "answers", "  Joseph Losey", "  1951",
    ]
    counted = render_answer(ArgAnswer("how many", [], [], [], None, [], count=3, timed_out=2), {})
    assert "executed\t(none answered)" in counted and "count\t3" in counted and "(2 candidate form(s) stopped" in counted


@pytest.mark.model
def test_recall_command_reports_in_words_and_refuses_questions_without_gold_forms(tmp_path, capsys):
    from engine.stores.oxigraph import OxigraphStore

    path = str(tmp_path / "store")
    with OxigraphStore(path) as store:
        store.add_triples(TRIPLES)
    (tmp_path / "qa.txt").write_text("who directed [The Prowler]\tJoseph Losey\nwhat genre is [M]\tThriller\n")
    (tmp_path / "qa_qtype.txt").write_text("movie_to_director\nmovie_to_genre\n")
    argv = ["arg", "recall", "--dataset", str(tmp_path / "qa.txt"), "--split", "all", "--k", "3", "--store", path]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "recall@3 1.000 over 2 questions (1-hop 1.000); without a gold form: 0"
    assert lines[1].startswith("seconds per question: store ") and "RecallReport(" not in "".join(lines)
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recall_at_k"] == 1.0
    (tmp_path / "free.jsonl").write_text(json.dumps({"id": "1", "question": "who directed it", "q_entity": [], "answer": ["x"]}) + "\n")
    assert main(["arg", "recall", "--dataset", str(tmp_path / "free.jsonl"), "--split", "all", "--store", path]) == 2
    assert "none of the 1 questions has a gold form" in capsys.readouterr().err


@pytest.mark.model
def test_trained_scorer_round_trip(tmp_path, bi):
    examples = [Example("who directed [M]", "Relation: directed_by", 1.0), Example("who directed [M]", "Relation: has_genre", 0.0)] * 4
    report = train_scorer(examples, tmp_path / "scorer", epochs=1, batch_size=4)
    assert report.examples == 8 and report.positives == 4
    scorer = Scorer(bi, tmp_path / "scorer")
    assert scorer.trained and len(scorer.scores("who directed [M]", ["Relation: a", "Relation: b"])) == 2
    with pytest.raises(KGQAError):
        Scorer(bi, tmp_path)
    assert top([0.1, 0.5, 0.5, 0.2], 2) == [1, 2]


def _folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.model
def test_a_scorer_trained_again_and_stopped_while_saving_keeps_the_earlier_one_or_is_no_scorer(tmp_path, bi, monkeypatch):
    examples = [Example("who directed [M]", "Relation: directed_by", 1.0), Example("who directed [M]", "Relation: has_genre", 0.0)] * 4
    out = tmp_path / "scorer"
    train_scorer(examples, out, epochs=1, batch_size=4)
    earlier = _folder_files(out)
    # stopped while the new scorer is saved aside: the earlier one is as it was, and loads
    stop_while_saving_weights(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        train_scorer(examples, out, epochs=1, batch_size=4, seed=1)
    monkeypatch.undo()
    assert _folder_files(out) == earlier and Scorer(bi, out).trained
    # stopped while its files replace the earlier one's: half old, half new, so no scorer
    stop_after_one_file_replaced(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        train_scorer(examples, out, epochs=1, batch_size=4, seed=1)
    monkeypatch.undo()
    with pytest.raises(KGQAError, match="holds no trained ARG scorer .*train one with kgqa arg train-ranker"):
        Scorer(bi, out)
    train_scorer(examples, out, epochs=1, batch_size=4, seed=1)  # the next save clears what the stopped one left
    assert Scorer(bi, out).trained and not (out / ".saving").exists()


def test_train_ranker_refuses_an_out_it_would_destroy_before_reading_the_store(tmp_path, capsys):
    from engine.stores.oxigraph import OxigraphStore

    store = tmp_path / "store"
    with OxigraphStore(str(store)) as opened:
        opened.add_triples(TRIPLES)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    base = tmp_path / "base"
    base.mkdir()
    (tmp_path / "file").write_text("x")
    questions = tmp_path / "q.jsonl"  # never read: every --out below is refused first
    for out, says in ((mine, "holds files that no ranker training wrote"), (store / "scorer", "is inside the store folder"),
                      (store, "holds files that no ranker training wrote"), (tmp_path / "file", "is a file"),
                      (base / "scorer", "is inside the input folder")):
        assert main(["arg", "train-ranker", "--dataset", str(questions), "--store", str(store), "--out", str(out),
                     "--base", str(base)]) == 2
        err = capsys.readouterr().err
        assert says in err and str(out) in err, err
    assert (mine / "notes.txt").read_text() == "mine" and not (store / "scorer").exists() and not (base / "scorer").exists()
    with pytest.raises(InvalidInputError, match="invalid epochs 0: use a positive integer"):
        train_scorer([Example("q", "Relation: r", 1.0)], tmp_path / "new", epochs=0)
    with pytest.raises(SystemExit):
        main(["arg", "train-ranker", "--dataset", str(questions), "--store", str(store), "--out", str(tmp_path / "new"),
              "--epochs", "0"])
    assert not (tmp_path / "new").exists()


def test_sexpr_command(tmp_path, capsys):
    from engine.stores.oxigraph import OxigraphStore

    path = str(tmp_path / "store")
    with OxigraphStore(path) as store:
        store.add_triples(TRIPLES + [Triple("M", NAME_RELATION, Literal.make("M", lang="en"))])
    assert main(["sexpr", "(COUNT (JOIN directed_by [Joseph Losey]))", "--store", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"answers": [], "count": 2}
    assert main(["sexpr", "(JOIN directed_by [Joseph Losey])", "--store", path, "--show-query"]) == 0
    assert "SELECT DISTINCT" in capsys.readouterr().out
    assert main(["sexpr", "(JOIN directed_by", "--store", path]) != 0
    assert "position 17" in capsys.readouterr().err


class ScriptedLM(LanguageModel):
    """A stand-in language model that answers with fixed texts."""

    name = "scripted"

    def __init__(self, outputs: list[str]) -> None:
        self.outputs = outputs
        self.prompts: list[str] = []

    def generate(self, prompt, **_):
        from engine.models.lm import Generation

        self.prompts.append(prompt)
        return Generation(self.outputs[0])

    def beam_search(self, prompt, num_beams=3, num_return=None, **_):
        from engine.models.lm import Generation

        self.prompts.append(prompt)
        return [Generation(o) for o in self.outputs[: num_return or num_beams]]


@pytest.mark.model
def test_generation_alignment_and_vote(bi):
    from engine.methods.arg.alignment import Aligner
    from engine.methods.arg.generation import DemoPicker, first_sexpr
    from engine.methods.arg.pipeline import answer_questions, exact_match
    from engine.methods.arg.prompts import Demo
    from engine.methods.metrics import score_question

    names = [Triple(e, NAME_RELATION, Literal.make(e, lang="en")) for e in ("The Prowler", "M", "Joseph Losey")]
    store = ReferenceStore(TRIPLES + names)
    pool = [Demo("who wrote [X]", "(JOIN (R written_by) [X])"), Demo("who directed [Y]", "(JOIN (R directed_by) [Y])"), Demo("what genre is [Z]", "(JOIN (R has_genre) [Z])")]
    picker = DemoPicker(pool, 1, "bm25")
    assert picker.pick("who directed [The Prowler]") == [pool[1]]
    assert first_sexpr('Logical Form: (JOIN (R a) [x (y)]) trailing') == "(JOIN (R a) [x (y)])"
    lm = ScriptedLM(["(JOIN (R directed) [The Prowler])", "(JOIN (R directed_by) [The Prowler])", "nonsense"])
    [got] = answer_questions(store, [("who directed [The Prowler]", ["The Prowler"])], lm, picker, bi, Scorer(bi), Aligner(store), k=5, samples=3)
    assert "References:" in lm.prompts[0] and "who directed [Y]" in lm.prompts[0]
    assert got.answers == ["Joseph Losey"] and got.sexpr == "(JOIN (R directed_by) [The Prowler])"  # 'directed' aligned by BM25
    assert exact_match(got.sexpr, "(JOIN (R directed_by)  [The Prowler])") and score_question(got.answers, ["Joseph Losey", "x"]).f1 == pytest.approx(2 / 3)


@pytest.mark.model
def test_a_form_that_goes_out_and_back_answers_its_anchor_last(bi):
    from engine.methods.arg.alignment import Aligner
    from engine.methods.arg.generation import DemoPicker
    from engine.methods.arg.pipeline import answer_questions
    from engine.methods.arg.prompts import Demo

    names = [Triple(e, NAME_RELATION, Literal.make(e, lang="en")) for e in ("The Prowler", "M", "Joseph Losey")]
    store = ReferenceStore(TRIPLES + names)
    picker = DemoPicker([Demo("who directed [Y]", "(JOIN (R directed_by) [Y])")], 0, "bm25")
    lm = ScriptedLM(["(JOIN directed_by (JOIN (R directed_by) [M]))"])
    [got] = answer_questions(store, [("which films share the director of [M]", ["M"])], lm, picker, bi, Scorer(bi), Aligner(store), k=5)
    assert got.answers == ["The Prowler", "M"]  # sorted, "M" would come first; the anchor stays, last


def test_alignment_moves_on_past_a_candidate_that_times_out():
    import time

    from engine.methods.arg.alignment import Aligner
    from engine.sexpr.tree import entities

    class SlowOnP1(ReferenceStore):
        """Any expression about p1 takes seconds (as a costly query would)."""

        def _answer_execute(self, op):  # run within the operation's timeout by the store
            if "p1" in entities(op.tree):
                time.sleep(3)
                return []
            return super()._answer_execute(op)

    name = Literal.make("The Prowler", lang="en")
    store = SlowOnP1([
        Triple("p1", NAME_RELATION, name), Triple("p1", "directed_by", "X"), Triple("p1", "has_genre", "Noir"),
        Triple("p2", NAME_RELATION, name), Triple("p2", "directed_by", "Joseph Losey"),
    ])
    aligner = Aligner(store, timeout=0.5)  # p1 sleeps 3 s; p2 answers in milliseconds, even on a loaded machine
    assert aligner.entity_ids("The Prowler") == ["p1", "p2"]  # the better connected first
    got = aligner.run("(JOIN (R directed_by) [The Prowler])", "who directed [The Prowler]")
    assert (got.sexpr, got.result.answers, got.tried, got.timed_out) == ("(JOIN (R directed_by) [p2])", ["Joseph Losey"], 2, 1)


class ByQuestionLM(ScriptedLM):
    """A stand-in language model whose output depends on the prompt's last question."""

    def __init__(self, outputs: dict[str, str]) -> None:
        super().__init__([])
        self.by_question = outputs

    def _answer(self, prompt):
        self.prompts.append(prompt)
        question = prompt.rsplit("Question: ", 1)[1].split("\n", 1)[0]
        return self.by_question.get(question, "no idea")

    def generate(self, prompt, **_):
        from engine.models.lm import Generation

        return Generation(self._answer(prompt))

    def beam_search(self, prompt, num_beams=3, num_return=None, **_):
        from engine.models.lm import Generation

        return [Generation(self._answer(prompt))] * (num_return or num_beams)


def _named_store():
    names = [Triple(e, NAME_RELATION, Literal.make(e, lang="en")) for e in ("The Prowler", "M", "Joseph Losey", "Thriller", "David Wayne")]
    return ReferenceStore(TRIPLES + names)


def test_a_question_without_a_topic_entity_has_no_gold_form():
    from engine.methods.arg.datasets import gold_form
    from engine.methods.arg.pipeline import gold_items
    from loaders.questions import Question

    q = Question("t:3", "who directed it", ["Joseph Losey"], [], [], 1, qtype="movie_to_director")
    with pytest.raises(InvalidInputError, match="'t:3' has no topic entity"):  # was an IndexError out of the run
        gold_form(_named_store(), q)
    # nor a demonstration or a training sample: the export counts it among the questions that gave none
    with_topic = Question("t:1", "who directed [The Prowler]", ["Joseph Losey"], ["The Prowler"], [], 1, qtype="movie_to_director")
    assert gold_items(_named_store(), [q, with_topic]) == [(with_topic, "(JOIN (R directed_by) [The Prowler])")]


@pytest.mark.model
def test_evaluate_scores_em_and_f1_with_demos_apart_from_the_tests(bi):
    from engine.methods.arg.generation import demo_pool
    from engine.methods.arg.pipeline import ArgConfig, ArgMethod
    from engine.methods.spec import Models
    from engine.methods.run import run_method
    from loaders.questions import Question

    store = _named_store()
    tests = [
        (Question("t:1", "who directed [The Prowler]", ["Joseph Losey"], ["The Prowler"], ["Joseph Losey"], 1), "(JOIN (R directed_by) [The Prowler])"),
        (Question("t:2", "what genre is [M]", ["Thriller"], ["M"], ["Thriller"], 1), "(JOIN (R has_genre) [M])"),
    ]
    candidates = [
        (Question("d:1", "who was the director of [The Prowler]", [], ["The Prowler"], [], 1), "(JOIN (R directed_by)  [The Prowler])"),  # a paraphrase of t:1
        (Question("d:2", "What genre is  [M]", [], ["M"], [], 1), "(JOIN (R has_genre) [The Prowler])"),  # t:2's text
        (Question("d:3", "who directed [M]", [], ["M"], [], 1), "(JOIN (R directed_by) [M])"),
        (Question("d:4", "who acted in [M]", [], ["M"], [], 1), "(JOIN (R starred_actors) [M])"),
    ]
    pool = demo_pool(store, candidates, tests)
    for q, form in tests:
        q.sexpr = form
    assert [(d.question, d.sexpr) for d in pool] == [
        ("who directed [M]", "(JOIN (R directed_by) [M])"), ("who acted in [M]", "(JOIN (R starred_actors) [M])"),
    ]
    lm = ByQuestionLM({"who directed [The Prowler]": "Logical Form: (JOIN (R directed_by) [The Prowler])", "what genre is [M]": "(JOIN (R"})
    records = []
    models = Models()
    method = ArgMethod(store, models, ArgConfig(n_demos=2, demo_mode="bm25", k=5), models.meter.lm(lm), bi, Scorer(bi), pool)
    report = run_method(method, [q for q, _ in tests], on_record=records.append, progress=False)
    assert [(r["id"], r["arg"]["em"], r["arg"]["gold_form"]) for r in records] == [
        ("t:1", True, "(JOIN (R directed_by) [The Prowler])"), ("t:2", False, "(JOIN (R has_genre) [M])"),
    ]
    assert records[0]["prediction"] == ["Joseph Losey"] and records[1]["arg"]["generated"] == [] and records[1]["arg"]["sexpr"] is None
    assert records[1]["prediction"] == [] and records[1]["warning"] == "the generator's reply '(JOIN (R' parses to no S-expression"
    assert "warning" not in records[0]
    assert [r["arg"]["gold_form_f1"] for r in records] == [1.0, 1.0]
    assert (report["questions"], report["f1"], report["hits1"], report["by_hops"]) == (2, 0.5, 0.5, {"1": 0.5})
    assert report["arg"] == {"em": 0.5, "parsed": 0.5, "answered": 0.5, "gold_form_f1": 1.0, "demos": 2}
    assert report["calls_per_question"]["llm"] == 0.5  # the two questions' forms are one batched generation
    assert report["seconds_per_question"]["model"] > 0
    test_questions = {q.question for q, _ in tests}
    for record, prompt in zip(records, lm.prompts):
        assert record["arg"]["demos"] and not set(record["arg"]["demos"]) & test_questions
        demo_part = prompt.rsplit("Question: ", 1)[0]
        assert not any(f"Question: {t}\n" in demo_part for t in test_questions)


@pytest.mark.model
def test_batched_generation_answers_as_one_by_one(bi, tmp_path):
    from engine.methods.arg.pipeline import ArgConfig, ArgMethod
    from engine.methods.spec import Models
    from engine.models.loading import load_lm
    from loaders.questions import Question
    from tests.tiny_lm import make_tiny_lm

    store = _named_store()
    lm = load_lm(make_tiny_lm(tmp_path / "tiny"), "cpu", "raw")  # pads with a token that is not its end token
    questions = [
        Question("t:1", "who directed [The Prowler]", ["Joseph Losey"], ["The Prowler"], ["Joseph Losey"], 1),
        Question("t:2", "what genre is [M]", ["Thriller"], ["M"], ["Thriller"], 1),
        Question("t:3", "who starred in [The Prowler] films", ["David Wayne"], ["The Prowler"], ["David Wayne"], 1),
    ]

    method = ArgMethod(store, Models(), ArgConfig(n_demos=0, k=2, batch_size=3), lm, bi, Scorer(bi), [])

    def outputs(predictions: list) -> list:
        return [(p.trace.outputs, p.trace.generated, p.answers) for p in predictions]

    one_by_one = outputs([method.answer([q])[0] for q in questions])
    assert outputs(method.answer(questions)) == one_by_one
    assert all(out[0][0] for out in one_by_one)  # something was generated for every question
    with pytest.raises(InvalidInputError, match="option batch_size"):
        ArgMethod(store, Models(), ArgConfig(n_demos=0, batch_size=0), lm, bi, Scorer(bi), [])


def _store_and_questions(tmp_path: Path, lines: list[tuple[str, str, str]]) -> tuple[str, Path]:
    """An Oxigraph store of TRIPLES and a MetaQA question file (question, answers, type)."""
    from engine.stores.oxigraph import OxigraphStore

    path = str(tmp_path / "store")
    with OxigraphStore(path) as store:
        store.add_triples(TRIPLES)
    qa = tmp_path / "1-hop" / "qa_dev.txt"
    qa.parent.mkdir()
    qa.write_text("".join(f"{q}\t{a}\n" for q, a, _ in lines))
    (qa.parent / "qa_dev_qtype.txt").write_text("".join(f"{t}\n" for _, _, t in lines))
    return path, qa


@pytest.mark.model
def test_run_command(tmp_path, capsys, monkeypatch):
    import engine.models.loading
    from loaders.datasets import select_questions

    lines = [
        ("who directed [The Prowler]", "Joseph Losey", "movie_to_director"),
        ("what genre is [M]", "Thriller", "movie_to_genre"),
        ("who acted in [M]", "David Wayne", "movie_to_actor"),
        ("which films did [Joseph Losey] direct", "The Prowler|M", "director_to_movie"),
        ("what language is [The Prowler] in", "English", "movie_to_language"),
        ("who starred in [The Prowler]", "Evelyn Keyes", "movie_to_actor"),
    ]
    path, qa = _store_and_questions(tmp_path, lines)
    golds = {
        "who directed [The Prowler]": "(JOIN (R directed_by) [The Prowler])", "what genre is [M]": "(JOIN (R has_genre) [M])",
        "who acted in [M]": "(JOIN (R starred_actors) [M])", "which films did [Joseph Losey] direct": "(JOIN directed_by [Joseph Losey])",
        "what language is [The Prowler] in": "(JOIN (R in_language) [The Prowler])", "who starred in [The Prowler]": "(JOIN (R starred_actors) [The Prowler])",
    }
    lm = ByQuestionLM({q: f for q, f in golds.items() if q != "what genre is [M]"})
    monkeypatch.setattr(engine.models.loading, "load_lm", lambda *_, **__: lm)
    out = tmp_path / "run.jsonl"
    argv = ["arg", "run", "--dataset", str(qa), "--split", "all", "--sample", "3", "--pool", "3",
            "--n-demos", "2", "--demo-mode", "random", "--k", "5", "--store", path, "--out", str(out), "--json", "--no-progress"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    tested = {r["question"] for r in records}
    # the demonstrations: the train split's sample of 3, less any test question
    train = {q.question for q in select_questions(str(qa), "train", sample=3, seed=0)}
    assert summary["questions"] == len(records) == 3 and summary["arg"]["demos"] == len(train - tested)
    for r in records:
        assert r["arg"]["gold_form"] == golds[r["question"]]
        assert r["arg"]["em"] == (r["question"] != "what genre is [M]")
        assert (set(r["prediction"]) == set(r["answers"])) == r["arg"]["em"]  # MetaQA's answers here are the gold forms' answers
        assert 1 <= len(r["arg"]["demos"]) <= 2 and not set(r["arg"]["demos"]) & tested
    assert summary["arg"]["em"] == pytest.approx(sum(r["arg"]["em"] for r in records) / 3, abs=1e-4)
    assert main(["eval", str(out), "--protocol", "engine", "--json"]) == 0  # ARG's output is scored by `kgqa eval` like every method's
    assert json.loads(capsys.readouterr().out)["overall"]["hits1"] == summary["hits1"]


class StopRecordingLM(ScriptedLM):
    """Records the stop condition each generation was given."""

    def generate(self, prompt, stop=None, **kw):
        self.stop = stop
        return super().generate(prompt, **kw)


@pytest.mark.model
def test_generator_samples_are_the_inference_prompt_without_demos(bi):
    from engine.methods.arg.alignment import Aligner
    from engine.methods.arg.datasets import generator_samples
    from engine.methods.arg.generation import DemoPicker
    from engine.methods.arg.pipeline import answer_questions
    from engine.methods.arg.prompts import Demo
    from loaders.questions import Question

    store = _named_store()
    q = Question("t:1", "which films share a director with [M]", ["The Prowler"], ["M"], ["The Prowler"], 2)
    gold = to_text(path_forms("M", [("directed_by", "out"), ("directed_by", "in")])[0])
    [sample] = generator_samples(store, [(q, gold)], bi, Scorer(bi), k=5)
    assert sample.target == "(JOIN directed_by (JOIN (R directed_by) [M]))"
    lm = StopRecordingLM(["(JOIN directed_by (JOIN (R directed_by) [M])) and more"])
    picker = DemoPicker([Demo("who directed [X]", "(JOIN (R directed_by) [X])")], 0, "bm25")  # --n-demos 0
    [got] = answer_questions(store, [(q.question, q.topic_entities)], lm, picker, bi, Scorer(bi), Aligner(store), k=5)
    assert lm.prompts == [sample.prompt] and "References:" in sample.prompt and "who directed [X]" not in sample.prompt
    assert got.generated == ["(JOIN directed_by (JOIN (R directed_by) [M]))"]
    # generation ends at the first balanced form
    assert lm.stop("Logical Form: (JOIN (R a) [x (y)])") and not lm.stop("(JOIN (R a) [x (y)]")


@pytest.mark.model
def test_export_training_writes_the_generators_samples(tmp_path, capsys, bi):
    from engine.methods.arg.datasets import generator_samples, gold_form
    from engine.stores.oxigraph import OxigraphStore
    from loaders.datasets import select_questions

    path, qa = _store_and_questions(tmp_path, [
        ("who directed [The Prowler]", "Joseph Losey", "movie_to_director"),
        ("which films did [Joseph Losey] direct", "The Prowler|M", "director_to_movie"),
    ])
    out = tmp_path / "arg-train" / "generator.jsonl"
    argv = ["arg", "export-training", "--dataset", str(qa), "--split", "all", "--k", "5", "--store", path, "--out", str(out), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == {"generation": 2}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["task"] for r in rows} == {"generation"}
    questions = select_questions(str(qa), "all", seed=0)
    with OxigraphStore(path) as store:
        expected = generator_samples(store, [(q, gold_form(store, q)) for q in questions], bi, Scorer(bi), k=5)
    assert [(r["id"], r["prompt"], r["target"]) for r in rows] == [(q.id, s.prompt, s.target) for q, s in zip(questions, expected)]
    assert {r["target"] for r in rows} == {"(JOIN (R directed_by) [The Prowler])", "(JOIN directed_by [Joseph Losey])"}


def test_an_empty_answer_says_why():
    from engine.methods.arg.pipeline import ArgAnswer, why_empty

    def said(outputs: list[str], generated: list[str], sexpr: str | None = None, timed_out: int = 0) -> str:
        return why_empty(ArgAnswer("q", [], generated, [None] * len(generated), sexpr, timed_out=timed_out, outputs=outputs))

    assert said(["", " \n"], []) == "the generator's reply is empty"
    assert said(["", "I cannot"], []) == "the generator's reply 'I cannot' parses to no S-expression"
    assert said(["(JOIN r [x])"], ["(JOIN r [x])"], timed_out=1) == (
        "none of the generated S-expressions (JOIN r [x]) runs on the store (1 stopped at the timeout)")
    assert said(["(JOIN r [x])"], ["(JOIN r [x])"], "(JOIN r [x])") == "the S-expression (JOIN r [x]) answers nothing"


@pytest.mark.model
def test_gold_form_f1_compares_ids_where_the_dataset_gives_them(bi):
    from engine.methods.arg.pipeline import ArgConfig, ArgMethod
    from engine.methods.spec import Models
    from loaders.questions import Question

    store = ReferenceStore([Triple("m.1", "directed_by", "m.2"), Triple("m.2", NAME_RELATION, Literal.make("Joseph Losey", lang="en"))])
    q = Question("w", "who directed it?", ["Joseph Losey"], ["m.1"], ["m.2"], 1, sexpr="(JOIN (R directed_by) m.1)")
    method = ArgMethod(store, Models(), ArgConfig(n_demos=0), ScriptedLM([]), bi, Scorer(bi), [])
    assert method._gold(q, "(JOIN (R directed_by) m.1)") == {"gold_form": q.sexpr, "em": True, "gold_form_f1": 1.0}


@pytest.mark.model
def test_batched_retrieval_equals_one_by_one(make_store, store_kind, bi):
    """retrieve_batch shares the store calls of a batch and gives each question what its own
    retrieve gives: paths, scores and references, with entity and literal anchors, anchors
    two questions share, and a question without anchors."""
    store = make_store(store_kind, DATED)
    year = Literal.make("1951", YEAR)
    questions = [
        ("who directed [The Prowler]", ["The Prowler"]),
        ("which films share a director with [M]", ["M"]),
        ("which films of 1951 did Joseph Losey direct", [year, "Joseph Losey"]),
        ("which films were released in 1951", [year]),
        ("who starred in [M]", ["M"]),
        ("what is this", []),
    ]
    scorer = Scorer(bi)
    for limit in (10_000, 2):  # 2 cuts some questions' rows: those ask on their own
        calls: list = []
        store.listeners.append(calls.append)
        batched = retrieve_batch(store, questions, bi, scorer, k=5, limit=limit)
        batch_calls = len(calls)
        calls.clear()
        alone = [retrieve(store, q, a, bi, scorer, k=5, limit=limit) for q, a in questions]
        store.listeners.remove(calls.append)
        for got, want in zip(batched, alone, strict=True):
            assert (got.question, got.paths, got.references) == (want.question, want.paths, want.references)
        if limit == 10_000:
            assert batch_calls < len(calls)
    assert any(len(r.paths) > 1 for r in batched) and batched[-1].paths == []


def test_prefetched_alignment_equals_alignment_alone(make_store, store_kind):
    """Aligner.prefetch finds a batch's names with the degree calls shared; every form then
    aligns and runs as it does without it: exact names with one or several matches (ranked by
    degree), a name with no exact match (BM25 over similar names), an unknown relation, and a
    form that does not parse."""
    triples = TRIPLES + [Triple("Joseph Losey 2", NAME_RELATION, Literal.make("Joseph Losey")),
                         Triple("M", "directed_by", "Joseph Losey 2"), Triple("Heat", "directed_by", "Joseph Losey 2")]
    store = make_store(store_kind, triples)
    forms = [
        "(JOIN directed_by [Joseph Losey])",
        "(JOIN (R directed_by) [The Prowler])",
        "(JOIN (R starred) [The Prowlr])",
        "(JOIN starred_actors [Evelyn Keyes])",
        "(JOIN (R directed_by",
    ]
    alone = Aligner(store)
    want = [alone.run(f, "which films") for f in forms]
    calls: list = []
    store.listeners.append(calls.append)
    shared = Aligner(store)
    shared.prefetch(forms)
    got = [shared.run(f, "which films") for f in forms]
    store.listeners.remove(calls.append)
    assert [(g.sexpr, g.result, g.tried) for g in got] == [(w.sexpr, w.result, w.tried) for w in want]
    assert sum(c.op.name == "relations" for c in calls) == 1  # the degrees of every exact match in one call
    assert want[0].sexpr == "(JOIN directed_by [Joseph Losey 2])"  # of two exact matches, the one with more edges
    assert want[2].tried > 1 and want[4].tried == 0  # similar names × similar relations tried; no parse, nothing


def test_per_group_splits_one_call_exactly():
    store = ReferenceStore(DATED)
    groups = [["M"], ["The Prowler", "M"], [], ["Roma"], ["nowhere"]]
    for limit in (None, 100, 3, 1):
        made: list = []

        def call(anchors, n, made=made):
            made.append((tuple(anchors), n))
            return store.relations(anchors, "both", n)

        got = per_group(call, groups, limit)
        want = [store.relations(g, "both", limit) for g in groups]
        assert got == [(w.rows, w.truncated) for w in want], limit
        if limit in (None, 100):
            assert len(made) == 1  # nothing cut: one call answered every group
        else:
            assert len(made) > 1 and ((("The Prowler", "M"), limit) in made)  # a cut group asked on its own


def _ends_without_reuse(triples: list[Triple], anchor: str, hops: list) -> set:
    """The definition: ends of the walks along ``hops`` (JOIN's reading) that use no triple twice."""
    from engine.sexpr.tree import Reverse

    walks = [(anchor, frozenset())]
    for hop in hops:
        name = hop.relation.name if isinstance(hop, Reverse) else hop.name
        walks = [
            (t.object if isinstance(hop, Reverse) else t.subject, used | {t})
            for node, used in walks for t in triples
            if t.relation == name and t not in used and (t.subject if isinstance(hop, Reverse) else t.object) == node
        ]
    return {node for node, _ in walks}


def test_answers_reached_without_reusing_an_edge_come_first():
    from engine.methods.arg.order import edge_distinct_first

    films = [("Crawlspace", "written_by", "W"), ("Crawlspace", "release_year", "1986"),
             ("Ghoulies", "written_by", "W"), ("Ghoulies", "release_year", "2005"),
             ("Alpha", "written_by", "V"), ("Alpha", "release_year", "1990"),
             ("Beta", "written_by", "V"), ("Beta", "release_year", "1990"), ("Beta", "release_year", "1980")]
    store = ReferenceStore([Triple(*t) for t in films])
    years_of = "(JOIN (R release_year) (JOIN written_by (JOIN (R written_by) [{}])))"
    # Crawlspace's own year only back over its written_by edge: last
    assert edge_distinct_first(store, years_of.format("Crawlspace"), ["1986", "2005"], None) == ["2005", "1986"]
    # Alpha's year is Beta's too: reached without reuse, the order stays
    assert edge_distinct_first(store, years_of.format("Alpha"), ["1980", "1990"], None) == ["1980", "1990"]
    # not a chain from one entity, one hop, or one answer: left as they are
    both = "(AND (JOIN release_year [1986]) (JOIN written_by (JOIN (R written_by) [Crawlspace])))"
    assert edge_distinct_first(store, both, ["Crawlspace", "Ghoulies"], None) == ["Crawlspace", "Ghoulies"]
    assert edge_distinct_first(store, "(JOIN (R release_year) [Beta])", ["1990", "1980"], None) == ["1990", "1980"]
    assert edge_distinct_first(store, None, ["a", "b"], None) == ["a", "b"]


def test_answers_reached_without_reusing_an_edge_too_many_walks_keep_their_order(monkeypatch):
    from engine.methods.arg import order

    store = ReferenceStore([Triple(f"f{i}", "written_by", "W") for i in range(5)] + [Triple("f0", "year", "1")])
    monkeypatch.setattr(order, "WALK_LIMIT", 3)
    form = "(JOIN written_by (JOIN (R written_by) [f0]))"
    assert order.edge_distinct_first(store, form, ["f0", "f1", "f2"], None) == ["f0", "f1", "f2"]
    monkeypatch.setattr(order, "WALK_LIMIT", 10)
    assert order.edge_distinct_first(store, form, ["f0", "f1", "f2"], None) == ["f1", "f2", "f0"]


@pytest.mark.parametrize("seed", range(3))
def test_edge_distinct_order_matches_its_definition_on_random_graphs(make_store, store_kind, seed):
    """Every store orders a chain form's answers as the definition does (walks enumerated in
    Python), on graphs with self-loops, reciprocal and parallel edges and awkward ids."""
    import random

    from engine.graph import term_key
    from engine.methods.arg.order import edge_distinct_first
    from engine.sexpr.evaluate import evaluate
    from engine.sexpr.tree import Entity, Join, Relation, Reverse
    from tests.random_graphs import RELATIONS, node_ids, random_graph

    triples = random_graph(seed, nodes=10, edges=45)
    store = make_store(store_kind, triples)
    rng = random.Random(seed)
    reordered = 0
    for _ in range(25):
        anchor = rng.choice(node_ids(triples))
        hops = [rng.choice([Relation(r), Reverse(Relation(r))]) for r in rng.choices(RELATIONS[:3], k=rng.choice([2, 3]))]
        tree = Entity(anchor)
        for hop in hops:
            tree = Join(hop, tree)
        answers = sorted(evaluate(tree, triples), key=term_key)
        reached = _ends_without_reuse(triples, anchor, hops)
        want = [a for a in answers if a in reached] + [a for a in answers if a not in reached]
        assert edge_distinct_first(store, to_text(tree), answers, None) == want, to_text(tree)
        reordered += want != answers
    assert reordered  # some forms' answers were reached only by reusing an edge
