"""WebQSP parses → S-expressions: coverage, round trips, agreement with the shared set, and
queries every store accepts."""
from __future__ import annotations

import json
import random

import pytest

from engine.sexpr import parse, to_text
from engine.sexpr.webqsp import Uncovered, convert, convert_all, read_questions
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


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_converted_parses_compile_on_every_store(make_module_store, converted, kind):
    from engine.graph import Triple

    store = make_module_store(kind, [Triple("m.x", "a.b", "m.y")])
    sample = random.Random(0).sample([t for _, t in converted[0]], 150)
    for text in sample + [t for _, t in converted[0] if "TC" in t or "ARG" in t][:40]:
        store.execute(text)
