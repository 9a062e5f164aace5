"""The WebQSP slice over FB15k-237, built from hand-made WebQSP records and a tiny
FB15k-237-shaped KB written here: relation mapping (as stored, reverse property, CVT compound
and its inverse), constraints kept and dropped, drop reasons, the command and the dataset name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError
from engine.stores.oxigraph import OxigraphStore
from loaders.datasets import load_dataset
from loaders.fb15k237 import ensure_loaded, read_kb
from loaders.webqsp_slice import DROPS, build_slice, chain_records, format_report
from tests.conftest import STORE_KINDS

TRAIN = """\
/m/0film1\t/film/film/directed_by\t/m/0dir1
/m/0film2\t/film/film/directed_by\t/m/0dir2
/m/0prod1\t/film/producer/film\t/m/0film1
/m/0act1\t/film/actor/film./film/performance/film\t/m/0film1
"""
VALID = """\
/m/0act1\t/people/person/gender\t/m/0male
/m/0act2\t/people/person/gender\t/m/0female
/m/0dir1\t/people/person/gender\t/m/0male
/m/0dir1\t/people/person/nationality\t/m/0usa
"""
TEST = """\
/m/0act1\t/film/actor/film./film/performance/film\t/m/0film2
/m/0act2\t/film/actor/film./film/performance/film\t/m/0film1
/m/0act1\t/people/person/spouse_s./people/marriage/spouse\t/m/0act2
"""
NAMES = {
    "film1": "The First Film", "film2": "The Second Film", "dir1": "Dir One", "dir2": "Dir Two",
    "prod1": "Prod One", "act1": "Act One", "act2": "Act Two", "male": "Male", "female": "Female",
    "usa": "United States", "lonely": "Named But Unlinked",
}
REVERSE = (
    "film.film.produced_by\tfilm.producer.film\nfilm.film.starring\tfilm.performance.film\n"
    "film.actor.film\tfilm.performance.actor\npeople.person.spouse_s\tpeople.marriage.spouse\n"
)
KB_TRIPLES = 11


def entity(mid: str, name: str = "") -> dict:
    return {"AnswerType": "Entity", "AnswerArgument": mid, "EntityName": name or f"{mid} (WebQSP's name)"}


def equal(node: int, predicate: str, mid: str) -> dict:
    return {"Operator": "Equal", "ArgumentType": "Entity", "Argument": mid, "EntityName": "", "SourceNodeIndex": node,
            "NodePredicate": predicate, "ValueType": "String"}


def question(n: int, text: str, *parses: dict) -> dict:
    return {"QuestionId": f"WebQTrn-{n}", "RawQuestion": text, "ProcessedQuestion": text,
            "Parses": [dict(p, ParseId=f"WebQTrn-{n}.P{i}") for i, p in enumerate(parses)]}


def parse(topic: str | None, chain: list[str], answers: list[dict], constraints: tuple = (), order: dict | None = None) -> dict:
    return {"TopicEntityMid": topic, "TopicEntityName": "", "InferentialChain": chain, "Constraints": list(constraints),
            "Time": None, "Order": order, "Answers": answers}


STARRING = ["film.film.starring", "film.performance.actor"]
QUESTIONS = [
    # kept, 1-hop, relation as stored
    question(1, "who directed the first film?", parse("m.0film1", ["film.film.directed_by"], [entity("m.0dir1")])),
    # kept, 1-hop, only the reverse property is stored; one answer outside the KB
    question(2, "who produced the first film?",
             parse("m.0film1", ["film.film.produced_by"], [entity("m.0prod1"), entity("m.0ghost")])),
    # kept, CVT compound as stored; the constraint on the CVT node cannot stay
    question(3, "what films did act one play in?",
             parse("m.0act1", ["film.actor.film", "film.performance.film"], [entity("m.0film1"), entity("m.0film2")],
                   [equal(0, "film.performance.character", "m.0char1")])),
    # kept, inverse CVT compound walked backwards, its constraint kept
    question(4, "which man starred in the first film?",
             parse("m.0film1", STARRING, [entity("m.0act1")], [equal(1, "people.person.gender", "m.0male")])),
    # kept, inverse compound; an order it cannot express, a constraint that would remove the
    # gold answer, one on a relation the KB lacks: all dropped
    question(5, "which woman starred in the first film?",
             parse("m.0film1", STARRING, [entity("m.0act2")],
                   [equal(1, "people.person.gender", "m.0male"), equal(1, "common.topic.notable_types", "m.0actor")],
                   {"SourceNodeIndex": 1, "NodePredicate": "people.person.date_of_birth", "SortOrder": "Ascending",
                    "Start": 1, "Count": 1})),
    # kept, 2-hop through an entity, a constraint on the middle node kept
    question(6, "what country is the male director of the first film from?",
             parse("m.0film1", ["film.film.directed_by", "people.person.nationality"], [entity("m.0usa")],
                   [equal(0, "people.person.gender", "m.0male")])),
    # dropped: the topic has a name but no triple
    question(7, "who directed the lonely film?", parse("m.0lonely", ["film.film.directed_by"], [entity("m.0dir1")])),
    # dropped: relation not in the KB
    question(8, "who wrote the music of the first film?", parse("m.0film1", ["film.film.music"], [entity("m.0dir1")])),
    # dropped: no answer is a KB entity
    question(9, "when was the first film directed?",
             parse("m.0film1", ["film.film.directed_by"], [{"AnswerType": "Value", "AnswerArgument": "1999", "EntityName": None}])),
    # dropped: the chain does not reach the gold answer in the KB
    question(10, "who directed the second film?", parse("m.0film2", ["film.film.directed_by"], [entity("m.0dir1")])),
    # kept through its second parse (the first has an empty chain)
    question(11, "who made the second film?",
             parse("m.0film2", [], [entity("m.0dir2")]), parse("m.0film2", ["film.film.directed_by"], [entity("m.0dir2")])),
    # dropped: no topic entity
    question(12, "what is this?", parse(None, ["film.film.directed_by"], [entity("m.0dir1")])),
    # kept, a compound that is its own inverse, stored once per pair: walked backwards
    question(13, "who is act two married to?",
             parse("m.0act2", ["people.person.spouse_s", "people.marriage.spouse"], [entity("m.0act1")])),
    # dropped, topic not in the KB; its chain is in the KB two ways (the compound walked either
    # way): not a chain question either
    question(14, "who is the lonely one married to?",
             parse("m.0lonely", ["people.person.spouse_s", "people.marriage.spouse"], [entity("m.0act1")])),
    # dropped, topic not in the KB; its chain is in the KB one way (the reverse property): a
    # chain question, from its first parse that converts
    question(15, "who produced the lost film?",
             parse(None, ["film.film.directed_by"], [entity("m.0dir1")]),
             parse("m.0lost", ["film.film.produced_by"], [entity("m.0ghost", "Ghost")])),
]


def write_kb(folder: Path) -> tuple[Path, Path]:
    kb, ontology = folder / "fb15k237", folder / "ontology"
    kb.mkdir()
    ontology.mkdir()
    (kb / "train.txt").write_text(TRAIN)
    (kb / "valid.txt").write_text(VALID)
    (kb / "test.txt").write_text(TEST)
    (kb / "entity2text.txt").write_text("".join(f"/m/0{k}\t{v}\n" for k, v in NAMES.items()))
    (ontology / "reverse_properties").write_text(REVERSE)
    return kb, ontology


@pytest.fixture
def tiny_kb(tmp_path) -> tuple[Path, Path]:
    return write_kb(tmp_path)


@pytest.fixture
def oxigraph(tiny_kb):
    """A real (in-memory) Oxigraph store with the KB loaded by the slice's own loading step."""
    kb_dir, ontology = tiny_kb
    store = OxigraphStore(None)
    report = ensure_loaded(store, kb_dir, read_kb(kb_dir, ontology), progress=False)
    assert report is not None and report.loaded == KB_TRIPLES + len(NAMES)
    yield store
    store.close()


def test_slice_records_report_and_drop_reasons(tiny_kb, oxigraph):
    kb = read_kb(*tiny_kb)
    assert kb.triples == KB_TRIPLES and "m.0lonely" not in kb.entities and kb.names["m.0lonely"]
    records, report = build_slice(QUESTIONS, kb, oxigraph, source="hand-made")
    by_id = {r["id"]: r for r in records}
    assert sorted(by_id) == [f"WebQTrn-{n}" for n in (1, 11, 13, 2, 3, 4, 5, 6)]
    expected = {
        "WebQTrn-1": ("1-hop", "(JOIN (R /film/film/directed_by) m.0film1)", ["m.0dir1"]),
        "WebQTrn-2": ("1-hop", "(JOIN /film/producer/film m.0film1)", ["m.0prod1"]),
        "WebQTrn-3": ("cvt", "(JOIN (R /film/actor/film./film/performance/film) m.0act1)", ["m.0film1", "m.0film2"]),
        "WebQTrn-4": ("cvt+constraints",
                      "(AND (JOIN /film/actor/film./film/performance/film m.0film1) (JOIN /people/person/gender m.0male))",
                      ["m.0act1"]),
        "WebQTrn-5": ("cvt", "(JOIN /film/actor/film./film/performance/film m.0film1)", ["m.0act1", "m.0act2"]),
        "WebQTrn-6": ("2-hop+constraints",
                      ("(JOIN (R /people/person/nationality) (AND (JOIN (R /film/film/directed_by) m.0film1) "
                       "(JOIN /people/person/gender m.0male)))"),
                      ["m.0usa"]),
        "WebQTrn-11": ("1-hop", "(JOIN (R /film/film/directed_by) m.0film2)", ["m.0dir2"]),
        "WebQTrn-13": ("cvt", "(JOIN /people/person/spouse_s./people/marriage/spouse m.0act2)", ["m.0act1"]),
    }
    for qid, (qtype, sexpr, answers) in expected.items():
        r = by_id[qid]
        assert (r["qtype"], r["sexpr"]) == (qtype, sexpr), qid
        assert oxigraph.execute(sexpr).answers == answers, qid  # the gold form on the store
    # answers: KB entities only, named from entity2text; the rest listed apart
    assert by_id["WebQTrn-2"]["a_entity"] == ["m.0prod1"] and by_id["WebQTrn-2"]["answer"] == ["Prod One"]
    assert by_id["WebQTrn-2"]["answers_not_in_kb"] == ["m.0ghost"]
    assert by_id["WebQTrn-3"]["answer"] == ["The First Film", "The Second Film"]
    assert by_id["WebQTrn-3"]["topic_names"] == ["Act One"] and by_id["WebQTrn-3"]["q_entity"] == ["m.0act1"]
    assert (by_id["WebQTrn-2"]["path"], by_id["WebQTrn-2"]["path_forward"]) == (["/film/producer/film"], [False])
    assert (by_id["WebQTrn-6"]["path"], by_id["WebQTrn-6"]["hops"]) == (["/film/film/directed_by", "/people/person/nationality"], 2)
    assert (by_id["WebQTrn-4"]["hops"], by_id["WebQTrn-4"]["webqsp_chain"]) == (1, STARRING)
    assert by_id["WebQTrn-11"]["parse_id"] == "WebQTrn-11.P1"
    assert [d["reason"] for d in by_id["WebQTrn-5"]["constraints_dropped"]] == [
        "unconvertible", "no gold answer left", "relation not in KB"]
    assert by_id["WebQTrn-3"]["constraints_dropped"] == [
        {"reason": "on a CVT node", "constraint": "(AND [?] (JOIN film.performance.character m.0char1))"}]

    assert (report.questions, report.kept) == (15, 8)
    assert report.shapes == {
        "1-hop": {"questions": 3, "without_constraints": 3},
        "2-hop": {"questions": 1, "with_constraints": 1},
        "cvt": {"questions": 4, "without_constraints": 3, "with_constraints": 1},
    }
    assert report.constraints == {"total": 6, "kept": 2, "unconvertible": 1, "on a CVT node": 1,
                                  "relation not in KB": 1, "no gold answer left": 1}
    assert (report.questions_with_constraints, report.questions_relaxed) == (4, 2)
    assert report.dropped == {"unconvertible parse": 1, "topic not in KB": 3, "relation not in KB": 1,
                              "no gold answer in KB": 1, "no gold answer reached": 1}
    assert report.drop_details == {
        "unconvertible parse": {"no topic entity": 1}, "topic not in KB": {"": 3},
        "relation not in KB": {"film.film.music": 1}, "no gold answer in KB": {"answers not KB entities": 1},
        "no gold answer reached": {"1-hop": 1},
    }
    text = format_report(report)
    assert "8 of 15 questions kept" in text
    assert "cvt" + " " * 15 + "4" in text and "relation not in KB" in text


def test_chain_questions_are_left_out_questions_whose_chain_has_one_form(tiny_kb, oxigraph):
    kb = read_kb(*tiny_kb)
    records, _ = build_slice(QUESTIONS, kb, oxigraph)
    chains = chain_records(QUESTIONS, kb, {r["id"] for r in records})
    assert [(c["id"], c["path"], c["path_forward"], c["qtype"]) for c in chains] == [
        ("WebQTrn-7", ["/film/film/directed_by"], [True], "1-hop"),
        ("WebQTrn-15", ["/film/producer/film"], [False], "1-hop"),
    ]
    assert chains[1]["q_entity"] == chains[1]["a_entity"] == [] and chains[1]["answer"] == ["Ghost"]
    assert chains[1]["parse_id"] == "WebQTrn-15.P1" and chains[1]["webqsp_chain"] == ["film.film.produced_by"]
    # a slice question is never a chain question, though its chain has one form
    assert chain_records(QUESTIONS[:1], kb, set()) == [] and chain_records(QUESTIONS[6:7], kb, {"WebQTrn-7"}) == []


def test_an_invalid_parse_is_an_unconvertible_one(tiny_kb, oxigraph):
    """A parse convert refuses (a chain given as a string, a MID that is not one) is dropped as
    unconvertible, naming the field; the question's next parse is still tried."""
    good = parse("m.0film1", ["film.film.directed_by"], [entity("m.0dir1")])
    questions = [
        question(1, "who directed the first film?", dict(good, InferentialChain="film.film.directed_by"), good),
        question(2, "who directed the first film?", dict(good, TopicEntityMid="m.0film1> <x")),
    ]
    kb = read_kb(*tiny_kb)
    records, report = build_slice(questions, kb, oxigraph)
    assert [(r["id"], r["parse_id"]) for r in records] == [("WebQTrn-1", "WebQTrn-1.P1")]
    assert report.drop_details == {"unconvertible parse": {"invalid TopicEntityMid": 1}}
    assert chain_records(questions, kb, set()) == []  # the invalid parses passed over, the topic in the KB


def test_strict_constraints_drop_relaxed_questions(tiny_kb, oxigraph):
    records, report = build_slice(QUESTIONS, read_kb(*tiny_kb), oxigraph, strict_constraints=True)
    assert sorted(r["id"] for r in records) == [f"WebQTrn-{n}" for n in (1, 11, 13, 2, 4, 6)]
    assert report.dropped["constraint not kept"] == 2
    assert report.drop_details["constraint not kept"] == {"on a CVT node": 1, "unconvertible": 1}
    assert report.questions_relaxed == 0


@pytest.mark.parametrize("kind", [k for k in STORE_KINDS if k != "oxigraph"])
def test_same_slice_on_every_store(tiny_kb, oxigraph, make_store, kind):
    from loaders.fb15k237 import kb_files
    from loaders.formats import read_triples

    triples = [t for path in kb_files(tiny_kb[0]) for t in read_triples(path)]
    kb = read_kb(*tiny_kb)
    assert build_slice(QUESTIONS, kb, make_store(kind, triples))[0] == build_slice(QUESTIONS, kb, oxigraph)[0]


def test_command_builds_the_named_dataset(tmp_path, tiny_kb, monkeypatch, capsys):
    kb_dir, ontology = tiny_kb
    monkeypatch.setenv("KGQA_BUILT", str(tmp_path / "built"))
    with pytest.raises(InvalidInputError, match="kgqa webqsp build"):
        load_dataset("webqsp-fb15k237-test")
    webqsp = tmp_path / "WebQSP.test.json"
    webqsp.write_text(json.dumps({"Version": "1.0", "Questions": QUESTIONS}))
    store = tmp_path / "store"
    args = ["webqsp", "build", "--webqsp", str(webqsp), "--kb", str(kb_dir), "--ontology", str(ontology),
            "--store", str(store), "--no-progress", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["kept"], first["kb"]["loaded_now"], first["kb"]["triples"]) == (8, KB_TRIPLES + len(NAMES), KB_TRIPLES)
    out = tmp_path / "built" / "webqsp-fb15k237-test"
    assert json.loads((out / "report.json").read_text())["dropped"] == first["dropped"]
    assert first["chain_questions"] == 2 and len((out / "chains.jsonl").read_text().splitlines()) == 2
    assert "8 of 15 questions kept" in (out / "report.txt").read_text()

    questions = load_dataset("webqsp-fb15k237-test")
    four = next(q for q in questions if q.id == "WebQTrn-4")
    assert (four.answer_entities, four.answers, four.topic_entities, four.hops, four.qtype) == (
        ["m.0act1"], ["Act One"], ["m.0film1"], 1, "cvt+constraints")
    assert four.path == ["/film/actor/film./film/performance/film"] and four.sexpr.startswith("(AND ")

    assert main(args) == 0  # the store holds the KB now: nothing is loaded again
    assert json.loads(capsys.readouterr().out)["kb"]["loaded_now"] == 0

    other = tmp_path / "other.txt"
    other.write_text("/m/0x\t/some/other/relation\t/m/0y\n")
    assert main(["load", str(other), "--store", str(tmp_path / "other-store"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main([*args[:-4], "--store", str(tmp_path / "other-store"), "--out", str(tmp_path / "o")]) == 2
    assert "give an empty store" in capsys.readouterr().err
    # every relation of the KB but not every edge (say, one of its files left out): refused, not a smaller slice
    part = tmp_path / "part.txt"
    part.write_text((TRAIN + VALID + TEST).replace("/m/0dir1\t/people/person/gender\t/m/0male\n", ""))
    assert main(["load", str(part), "--format", "tsv", "--store", str(tmp_path / "part-store"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main([*args[:-4], "--store", str(tmp_path / "part-store"), "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert f"{KB_TRIPLES - 1:,} of its {KB_TRIPLES:,} edges are there" in err and "load the whole KB" in err
    assert not (tmp_path / "p").exists()
    # a questions file that is none, or is not there: named before the KB is read or any store made
    fresh = ["--kb", str(kb_dir), "--ontology", str(ontology), "--store", str(tmp_path / "fresh"), "--no-progress"]
    (tmp_path / "WebQSP.train.json").write_bytes(b"\xff\xfe")
    assert main(["webqsp", "build", "--webqsp", str(tmp_path / "WebQSP.train.json"), *fresh]) == 2
    err = capsys.readouterr().err
    assert err.count(str(tmp_path / "WebQSP.train.json")) == 1 and "is not a WebQSP JSON file (" in err
    assert main(["webqsp", "build", "--webqsp", str(tmp_path / "nothing.json"), *fresh]) == 2
    err = capsys.readouterr().err
    assert f"WebQSP file {str(tmp_path / 'nothing.json')!r} does not exist" in err and "cannot tell train from test" not in err
    assert not (tmp_path / "fresh").exists()


def test_summary_holds_the_build_counts_without_paths_or_timings(tmp_path, tiny_kb, capsys):
    kb_dir, ontology = tiny_kb
    webqsp = tmp_path / "WebQSP.train.json"
    webqsp.write_text(json.dumps({"Version": "1.0", "Questions": QUESTIONS}))
    args = ["webqsp", "build", "--webqsp", str(webqsp), "--kb", str(kb_dir), "--ontology", str(ontology),
            "--store", str(tmp_path / "store"), "--out", str(tmp_path / "out"), "--no-progress"]
    summary = tmp_path / "results" / "datasets" / "webqsp-fb15k237.json"
    assert main([*args, "--summary", str(summary)]) == 0
    assert f"the counts to {summary}" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert json.loads(summary.read_text()) == {
        "source": "WebQSP.train.json", "strict_constraints": False, "questions": 15, "kept": 8,
        "shapes": {shape: report["shapes"][shape].get("questions", 0) for shape in ("1-hop", "2-hop", "cvt")},
        "dropped": {reason: report["dropped"].get(reason, 0) for reason in DROPS},
        "chain_questions": 2, "kb": {"triples": KB_TRIPLES, "relations": report["kb"]["relations"],
                                     "entities": report["kb"]["entities"]},
    }
    assert str(tmp_path) not in summary.read_text()
    # a folder as --summary, or the questions file: refused before the store is made or anything written
    for given, says in ((tmp_path / "results", "is a folder"), (webqsp, "the summary file")):
        assert main([*args[:-5], "--store", str(tmp_path / "fresh"), "--out", str(tmp_path / "o"), "--no-progress",
                     "--summary", str(given)]) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "fresh").exists() and not (tmp_path / "o").exists()
    assert json.loads(webqsp.read_text())["Questions"] == QUESTIONS


def test_a_question_or_gold_answer_of_the_wrong_shape_is_named_not_a_traceback(tmp_path, tiny_kb, capsys):
    """A question that is no WebQSP question stops the build naming it, before any store is
    made; a parse whose ParseId or gold answers cannot be read drops out as an invalid parse."""
    kb_dir, ontology = tiny_kb
    webqsp = tmp_path / "WebQSP.train.json"
    common = ["--webqsp", str(webqsp), "--kb", str(kb_dir), "--ontology", str(ontology), "--no-progress"]
    first = QUESTIONS[0]
    for questions, says in (([first, 5], "question #2: question: expected an object, got 5"),
                            ([{k: v for k, v in first.items() if k != "RawQuestion"}], "RawQuestion: expected a string, but it is missing"),
                            ([dict(first, QuestionId=None)], "QuestionId: expected a string, got None"),
                            ([dict(first, Parses="abc")], "Parses: expected a list of parses, got 'abc'"),
                            ([first, QUESTIONS[1], first], f"question #3: QuestionId {first['QuestionId']!r} is that of question #1 too")):
        webqsp.write_text(json.dumps({"Questions": questions}))
        assert main(["webqsp", "build", *common, "--store", str(tmp_path / "fresh"), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err, err
        assert not (tmp_path / "fresh").exists() and not (tmp_path / "o").exists()
    gold = first["Parses"][0]
    bad_gold = [dict(gold, Answers="m.0dir1"), dict(gold, Answers=["m.0dir1"]), dict(gold, Answers=[entity(5)]),
                dict(gold, Answers=[dict(entity("m.0dir1"), EntityName=7)]), dict(gold, ParseId=None)]
    questions = [dict(first, QuestionId=f"bad-{i}", Parses=[p]) for i, p in enumerate(bad_gold)] + [first]
    questions.append(question(16, "who produced the lost film?", dict(QUESTIONS[-1]["Parses"][1], Answers=3)))
    webqsp.write_text(json.dumps({"Questions": questions}))
    assert main(["webqsp", "build", *common, "--store", str(tmp_path / "store"), "--out", str(tmp_path / "o"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["kept"], report["dropped"], report["chain_questions"]) == (1, {"unconvertible parse": 6}, 0)
    assert report["drop_details"]["unconvertible parse"] == {
        "invalid Answers": 2, "invalid Answers[]": 1, "invalid Answers[].AnswerArgument": 1,
        "invalid Answers[].EntityName": 1, "invalid ParseId": 1}


def test_a_reused_slice_store_writes_its_datasets_again_when_one_is_missing(tmp_path, tiny_kb):
    from engine.recipes.recipe import StoreSource
    from engine.recipes.stores import built_files, ensure_store

    kb_dir, ontology = tiny_kb
    webqsp = tmp_path / "WebQSP.train.json"
    webqsp.write_text(json.dumps({"Version": "1.0", "Questions": QUESTIONS}))
    source = StoreSource("slice", kind="webqsp-slice", kb=kb_dir, webqsp=webqsp, ontology=ontology, builds="webqsp-fb15k237")
    work = tmp_path / "work"
    first = ensure_store(source, work, progress=False)
    files = built_files(source, work)
    assert not first.reused and [f.name for f in files] == ["questions.jsonl", "chains.jsonl"]
    written = {f: f.read_text() for f in files}
    assert len(written[files[1]].splitlines()) == 2
    files[1].unlink()  # a work directory built before the chains were part of the build
    again = ensure_store(source, work, progress=False)
    assert again.reused and again.content == first.content
    assert {f: f.read_text() for f in files} == written
