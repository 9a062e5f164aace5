"""WebQSP parses → S-expressions: coverage, round trips, agreement with the shared set, and
queries every store accepts."""
from __future__ import annotations

import gzip
import json
import random
import re

import pytest

from engine.graph import XSD, Literal, Triple
from engine.reference import ReferenceStore
from engine.sexpr import parse, to_text
from engine.sexpr.webqsp import InvalidParse, Uncovered, convert, convert_all, read_questions
from tests.conftest import STORE_KINDS


@pytest.fixture(scope="module")
def converted(shared_data):
    return convert_all(read_questions(shared_data / "webqsp" / "WebQSP.train.json.gz"))


def test_coverage_and_round_trips(converted):
    pairs, report = converted
    assert report.parses == 3453 and report.converted / report.parses > 0.97
    assert sum(report.uncovered.values()) == report.parses - report.converted
    for _, text in pairs:
        assert to_text(parse(text)) == text


def test_agrees_with_the_shared_webqsp_sexpressions(converted, shared_data):
    ours = {pid.split(".")[0]: text for pid, text in converted[0]}
    shared = [x for x in json.loads((shared_data / "sexpr" / "kg_rl_all.json").read_text()) if x["qid"].startswith("WebQTrn") and x["qid"].endswith("_webqsp")]
    assert shared
    for item in shared:
        assert ours[item["qid"].split("_")[0]] == item["s_expression"]


def test_convert_command_writes_the_parses_and_reports_the_coverage(converted, shared_data, tmp_path, capsys):
    """`kgqa webqsp convert`: every converted parse as a JSON line, the coverage as convert_all counts it."""
    from engine.cli.main import main

    out = tmp_path / "forms" / "webqsp.jsonl"
    webqsp = str(shared_data / "webqsp" / "WebQSP.train.json.gz")
    assert main(["webqsp", "convert", "--webqsp", webqsp, "--out", str(out), "--json"]) == 0
    pairs, report = converted
    assert json.loads(capsys.readouterr().out) == report.to_json()
    assert [(row["ParseId"], row["sexpr"]) for row in map(json.loads, out.read_text(encoding="utf-8").splitlines())] == pairs
    assert main(["webqsp", "convert", "--webqsp", webqsp, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"{report.converted:,} of {report.parses:,} parses converted" in text
    assert all(shape in text for shape in report.uncovered)


def test_convert_never_writes_over_its_input(tmp_path, capsys):
    from engine.cli.main import main

    webqsp = tmp_path / "wq.json"
    text = json.dumps({"Questions": [{"QuestionId": "WebQTrn-0", "ProcessedQuestion": "who", "Parses": []}]})
    webqsp.write_text(text)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.json").symlink_to(webqsp)
    for out in (webqsp, tmp_path / "sub" / ".." / "wq.json", tmp_path / "link.json"):
        assert main(["webqsp", "convert", "--webqsp", str(webqsp), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"the output file {str(out)!r} is the input {str(webqsp)!r}" in err and "give --out another path" in err
        assert webqsp.read_text() == text
    assert main(["webqsp", "convert", "--webqsp", str(webqsp), "--out", str(tmp_path / "forms.jsonl")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forms.jsonl", "link.json", "sub", "wq.json"]  # no .part left


def test_a_file_that_is_not_webqsp_json_is_named(tmp_path):
    from engine.errors import InvalidInputError

    path = tmp_path / "WebQSP.train.json"
    for content, says in ((b"{", "Expecting"), (b"[" * 100_000 + b"]" * 100_000, "nested too deep"), (b"\xff", "codec"),
                          (b'{"Questions": 3}', "expected an object with a 'Questions' list")):
        path.write_bytes(content)
        with pytest.raises(InvalidInputError, match=f"WebQSP.train.json.*{says}"):
            read_questions(path)


def test_a_damaged_gzip_webqsp_file_is_named_without_a_traceback(tmp_path, capsys):
    from engine.cli.main import main

    whole = gzip.compress(json.dumps({"Questions": [{"QuestionId": "Q-0", "Parses": []}] * 50}).encode())
    corrupt = bytearray(whole)
    corrupt[30:40] = bytes(b ^ 0xFF for b in corrupt[30:40])
    for name, data in (("truncated", whole[: len(whole) // 2]), ("corrupt", bytes(corrupt))):
        path = tmp_path / f"{name}.train.json.gz"
        path.write_bytes(data)
        assert main(["webqsp", "convert", "--webqsp", str(path), "--out", str(tmp_path / "forms.jsonl")]) == 2
        err = capsys.readouterr().err
        assert f"{str(path)!r} is not a WebQSP JSON file" in err and "Traceback" not in err
    assert not (tmp_path / "forms.jsonl").exists()


GOOD_PARSE = {"ParseId": "Q-ok.P0", "TopicEntityMid": "m.01", "InferentialChain": ["a.b"], "Constraints": [], "Time": None,
              "Order": None}
CONSTRAINT = {"Operator": "Equal", "ArgumentType": "Entity", "Argument": "m.02", "SourceNodeIndex": 0, "NodePredicate": "x.y",
              "ValueType": "String"}
#: a parse with one field convert cannot read, and that field as the report names it
INVALID_PARSES = [
    (dict(GOOD_PARSE, TopicEntityMid=5), "TopicEntityMid"),
    (dict(GOOD_PARSE, TopicEntityMid="m.01> <x"), "TopicEntityMid"),
    (dict(GOOD_PARSE, Constraints=5), "Constraints"),
    (dict(GOOD_PARSE, Constraints=[{k: v for k, v in CONSTRAINT.items() if k != "SourceNodeIndex"}]), "Constraints[0].SourceNodeIndex"),
    (dict(GOOD_PARSE, Constraints=[dict(CONSTRAINT, SourceNodeIndex="x")]), "Constraints[0].SourceNodeIndex"),
    (dict(GOOD_PARSE, Constraints=[CONSTRAINT, dict(CONSTRAINT, Argument="m.02> <x")]), "Constraints[1].Argument"),
    (dict(GOOD_PARSE, InferentialChain="a.b"), "InferentialChain"),
    (dict(GOOD_PARSE, InferentialChain=["a.b", "a b"]), "InferentialChain[1]"),
    (dict(GOOD_PARSE, Order={"SourceNodeIndex": 0, "NodePredicate": "x.y", "SortOrder": "Up", "Start": 0, "Count": 1}), "Order.SortOrder"),
    (dict(GOOD_PARSE, ParseId=7), "ParseId"),
    (5, "parse"),
]


def test_an_invalid_parse_is_named_and_not_converted(tmp_path, capsys):
    """Each parse with a field of the wrong type, a relation the engine refuses or an entity that
    is not a Freebase id is reported naming its question, parse and field, and counted as not
    converted: no traceback, no form written for it."""
    from engine.cli.main import main

    questions = [{"QuestionId": f"Q-{i}", "Parses": [p]} for i, (p, _) in enumerate(INVALID_PARSES)]
    questions += [{"QuestionId": "Q-ok", "Parses": [GOOD_PARSE]}, 5, {"QuestionId": "Q-none", "Parses": 5}]
    webqsp, out = tmp_path / "WebQSP.json", tmp_path / "forms.jsonl"
    webqsp.write_text(json.dumps({"Questions": questions}), encoding="utf-8")
    assert main(["webqsp", "convert", "--webqsp", str(webqsp), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert out.read_text(encoding="utf-8").splitlines() == [json.dumps({"ParseId": "Q-ok.P0", "sexpr": "(JOIN (R a.b) m.01)"})]
    assert (report["parses"], report["converted"], report["questions"], report["questions_converted"]) == (
        len(INVALID_PARSES) + 1, 1, len(questions), 1)
    assert sum(report["uncovered_shapes"].values()) == len(INVALID_PARSES)
    invalid = report["invalid_parses"]
    assert len(invalid) == len(INVALID_PARSES) + 2
    for i, (p, field) in enumerate(INVALID_PARSES):
        named = "Q-ok.P0" if isinstance(p, dict) and isinstance(p["ParseId"], str) else "#0"
        assert invalid[i].startswith(f"question Q-{i}, parse {named}: {field}: "), invalid[i]
    assert invalid[-2:] == [f"question #{len(INVALID_PARSES) + 2}: question: expected an object, got 5",
                            "question Q-none: Parses: expected a list of parses, got 5"]
    assert "'a b'" in invalid[7] and "'m.01> <x' is not a Freebase id" in invalid[1]
    assert main(["webqsp", "convert", "--webqsp", str(webqsp), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "invalid parses (not converted):" in text and invalid[0] in text and "… and 3 more (--json lists them all)" in text
    for p, field in INVALID_PARSES[:-2]:  # the converter alone, on what a parse holds
        with pytest.raises(InvalidParse, match=re.escape(field)):
            convert(p)


def test_an_order_by_the_nodes_own_value_is_uncovered():
    """WebQSP sorts some nodes by their own value (no NodePredicate): there is no ARGMAX for that."""
    order = {"SourceNodeIndex": 0, "NodePredicate": None, "SortOrder": "Ascending", "Start": 0, "Count": 1}
    with pytest.raises(Uncovered, match="order by the node's own value"):
        convert(dict(GOOD_PARSE, Order=order))
    with pytest.raises(Uncovered, match="order on a node beyond the chain"):
        convert(dict(GOOD_PARSE, Order=dict(order, SourceNodeIndex=1, NodePredicate="x.y")))


def test_shapes():
    base = {"TopicEntityMid": "m.0t", "InferentialChain": ["a.b.c", "a.d.e"], "Constraints": [], "Time": None, "Order": None}
    assert to_text(convert(base)) == "(JOIN (R a.d.e) (JOIN (R a.b.c) m.0t))"
    timed = dict(
        base,
        Constraints=[
            {"Operator": "LessOrEqual", "ArgumentType": "Value", "Argument": "2015-08-10", "SourceNodeIndex": 0, "NodePredicate": "g.p.from", "ValueType": "DateTime"},
            {"Operator": "GreaterOrEqual", "ArgumentType": "Value", "Argument": "2015-08-10", "SourceNodeIndex": 0, "NodePredicate": "g.p.to", "ValueType": "DateTime"},
        ],
        Time={"IsRelativeToNow": True, "Start": "0000-00-00", "End": "0000-00-00", "AssociatedConstraints": [0, 1]},
    )
    assert to_text(convert(timed)) == "(JOIN (R a.d.e) (TC (JOIN (R a.b.c) m.0t) g.p.from NOW))"
    with pytest.raises(Uncovered):
        convert(dict(base, InferentialChain=[]))


def _witness(parse: dict, n: int) -> list[Triple]:
    """Triples under which the parse has an answer: its chain from the topic through fresh
    nodes, each node carrying its constraints' values and its order value, beside a decoy
    sibling without them (so that the constraints must filter)."""
    triples, node = [], parse["TopicEntityMid"]
    for i, relation in enumerate(parse["InferentialChain"]):
        keep, decoy = f"m.w{n}x{i}", f"m.w{n}d{i}"
        triples += [Triple(node, relation, keep), Triple(node, relation, decoy)]
        for c in parse["Constraints"] or []:
            if c["SourceNodeIndex"] != i:
                continue
            if c["ArgumentType"] == "Entity":
                triples.append(Triple(keep, c["NodePredicate"], c["Argument"]))
            elif c["ValueType"] == "String":
                triples.append(Triple(keep, c["NodePredicate"], Literal.make(c["Argument"], lang="en")))
            elif c["ValueType"] == "DateTime":
                triples.append(Triple(keep, c["NodePredicate"], Literal.make(c["Argument"], XSD + "date")))
        order = parse.get("Order")
        if order and order["SourceNodeIndex"] == i:
            best, worse = ("2", "1") if order["SortOrder"] == "Descending" else ("1", "2")
            triples += [Triple(keep, order["NodePredicate"], Literal.make(best, XSD + "integer")),
                        Triple(decoy, order["NodePredicate"], Literal.make(worse, XSD + "integer"))]
        node = keep
    return triples


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_converted_parses_run_on_every_store_as_on_the_reference(make_module_store, shared_data, converted, kind):
    parses = {p["ParseId"]: p for q in read_questions(shared_data / "webqsp" / "WebQSP.train.json.gz") for p in q["Parses"]}
    pairs = converted[0]
    sample = random.Random(0).sample(pairs, 150) + [(pid, t) for pid, t in pairs if "TC" in t or "ARG" in t][:40]
    triples = sorted({t for n, (pid, _) in enumerate(sample) for t in _witness(parses[pid], n)}, key=str)
    reference = ReferenceStore(triples)
    store = make_module_store(kind, triples)
    answered = 0
    for _, text in sample:
        expected = reference.execute(text)
        assert store.execute(text) == expected, text
        answered += bool(expected.answers)
    assert answered == len(sample)  # every expression answers on its witness, so the comparison is not vacuous
