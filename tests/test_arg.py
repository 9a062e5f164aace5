"""ARG-KBQA: candidate forms, two-stage retrieval on a small MetaQA-shaped graph, the
trainable stage-2 scorer, and the ``kgqa sexpr`` / ``kgqa arg`` commands."""
from __future__ import annotations

import json

import pytest

from engine.arg.candidates import Schema, path_forms, read_schema, with_names
from engine.arg.ranker import BiEncoder, Example, Scorer, top, train_scorer
from engine.arg.retrieval import retrieve
from engine.cli import main
from engine.errors import KGQAError
from engine.model import NAME_RELATION, XSD, Literal, Triple
from engine.reference import ReferenceStore
from engine.sexpr import parse
from engine.sexpr.tree import to_text

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


def test_retrieval_finds_the_gold_forms(bi):
    store = ReferenceStore(TRIPLES)
    got = retrieve(store, "who directed [The Prowler]", ["The Prowler"], bi, Scorer(bi), k=3)
    assert "(JOIN (R directed_by) [The Prowler])" in [r.sexpr for r in got.references]
    assert all(len(p.hops) in (1, 2) for p in got.paths) and any(len(p.hops) == 2 for p in got.paths)
    assert got.store_calls >= 2 and got.model_seconds > 0
    two_hop = retrieve(store, "which films share a director with [M]", ["M"], bi, Scorer(bi), k=20)
    assert "(JOIN directed_by (JOIN (R directed_by) [M]))" in [r.sexpr for r in two_hop.references]
    for ref in two_hop.references:  # every reference executes
        store.execute(ref.sexpr)


def test_trained_scorer_round_trip(tmp_path, bi):
    examples = [Example("who directed [M]", "Relation: directed_by", 1.0), Example("who directed [M]", "Relation: has_genre", 0.0)] * 4
    report = train_scorer(examples, tmp_path / "scorer", epochs=1, batch_size=4)
    assert report.examples == 8 and report.positives == 4
    scorer = Scorer(bi, tmp_path / "scorer")
    assert scorer.trained and len(scorer.scores("who directed [M]", ["Relation: a", "Relation: b"])) == 2
    with pytest.raises(KGQAError):
        Scorer(bi, tmp_path)
    assert top([0.1, 0.5, 0.5, 0.2], 2) == [1, 2]


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


class ScriptedLM:
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


def test_generation_alignment_and_vote(bi):
    from engine.arg.alignment import Aligner
    from engine.arg.generation import DemoPicker, first_sexpr
    from engine.arg.pipeline import answer_question, exact_match, f1
    from engine.arg.prompts import Demo

    names = [Triple(e, NAME_RELATION, Literal.make(e, lang="en")) for e in ("The Prowler", "M", "Joseph Losey")]
    store = ReferenceStore(TRIPLES + names)
    pool = [Demo("who wrote [X]", "(JOIN (R written_by) [X])"), Demo("who directed [Y]", "(JOIN (R directed_by) [Y])"), Demo("what genre is [Z]", "(JOIN (R has_genre) [Z])")]
    picker = DemoPicker(pool, 1, "bm25")
    assert picker.pick("who directed [The Prowler]") == [pool[1]]
    assert first_sexpr('Logical Form: (JOIN (R a) [x (y)]) trailing') == "(JOIN (R a) [x (y)])"
    lm = ScriptedLM(["(JOIN (R directed) [The Prowler])", "(JOIN (R directed_by) [The Prowler])", "nonsense"])
    got = answer_question(store, "who directed [The Prowler]", ["The Prowler"], lm, picker, bi, Scorer(bi), Aligner(store), k=5, samples=3)
    assert "References:" in lm.prompts[0] and "who directed [Y]" in lm.prompts[0]
    assert got.answers == ["Joseph Losey"] and got.sexpr == "(JOIN (R directed_by) [The Prowler])"  # 'directed' aligned by BM25
    assert exact_match(got.sexpr, "(JOIN (R directed_by)  [The Prowler])") and f1(got.answers, ["Joseph Losey", "x"]) == pytest.approx(2 / 3)
