"""Metrics against hand-computed examples, including where the two Hits@1 differ."""
from __future__ import annotations

import json
import re

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError, ParseError
from engine.methods.metrics import evaluate, evaluate_rog, matches, normalize, read_predictions, score_question
from engine.methods.scoring.report import score


def test_normalisation_is_rogs():
    assert normalize("The  Lord of the Rings: The Return!") == "lord of rings return"
    assert normalize("An Apple, a day") == "apple day"
    assert matches("the Titanic", "Titanic.")
    assert not matches("Titanic II", "Titanic")
    assert matches("Titanic II", "Titanic", "contains")
    assert not matches("anything", "the", "contains")  # a gold answer that normalises to nothing never matches


def test_ldr_example_first_answer_vs_any_answer():
    # LDR Appendix C: gold "apple", prediction "pear, apple, banana": Hits@1 0, any-answer 1
    s = score_question(["pear", "apple", "banana"], ["apple"])
    assert (s.hits1, s.hits1_any) == (0.0, 1.0)
    assert s.precision == pytest.approx(1 / 3) and s.recall == 1.0
    assert s.f1 == pytest.approx(0.5)


def test_precision_recall_dedup_and_empty_prediction():
    s = score_question(["K", "k.", "L", "M"], ["k", "l", "n", "o"])  # "k." repeats "K"
    assert s.hits1 == 1.0 and s.precision == pytest.approx(2 / 3) and s.recall == pytest.approx(2 / 4)
    empty = score_question([], ["x"])
    assert (empty.hits1, empty.hits1_any, empty.precision, empty.recall, empty.f1) == (0, 0, 0, 0, 0)
    assert score_question("the x", ["X"]).hits1 == 1.0  # a string is one answer
    with pytest.raises(InvalidInputError):
        score_question(["x"], [])


def _records() -> list[dict]:
    return [
        # q1: first answer wrong, second right -> hits1 0, any 1, P 1/2, R 1
        {"answers": ["apple"], "prediction": ["pear", "apple"], "hops": 1, "qtype": "a_to_b"},
        # q2: perfect -> 1, 1, P 1, R 1
        {"answers": ["x", "y"], "prediction": ["y", "x"], "hops": 2, "qtype": "a_to_b"},
        # q3: nothing right -> 0, 0, P 0, R 0
        {"answers": ["m"], "prediction": ["n"], "hops": 2, "qtype": "c_to_d"},
        # q4: half the gold, one of three predictions -> 1, 1, P 1/3, R 1/2
        {"answers": ["p", "q"], "prediction": ["p", "r", "s"], "hops": 2},
        {"answers": [], "prediction": ["z"]},  # no gold: counted, not scored
    ]


def test_evaluate_hand_computed():
    report = evaluate(_records())
    m = report.overall
    assert m.questions == 4 and report.no_gold == 1
    assert m.hits1 == pytest.approx(2 / 4)
    assert m.hits1_any == pytest.approx(3 / 4)
    precision = (1 / 2 + 1 + 0 + 1 / 3) / 4
    recall = (1 + 1 + 0 + 1 / 2) / 4
    assert m.precision == pytest.approx(precision) and m.recall == pytest.approx(recall)
    assert m.f1 == pytest.approx(2 * precision * recall / (precision + recall))  # LDR: F1 of the averages
    per_question = [2 * (1 / 2) / (3 / 2), 1.0, 0.0, 2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2)]
    assert m.f1_mean == pytest.approx(sum(per_question) / 4)  # RoG: mean of per-question F1
    assert report.by_hops["1"].questions == 1 and report.by_hops["1"].hits1 == 0.0
    assert report.by_hops["2"].questions == 3 and report.by_hops["2"].hits1 == pytest.approx(2 / 3)
    assert report.by_qtype["a_to_b"].hits1_any == 1.0 and report.by_qtype["c_to_d"].hits1 == 0.0
    assert "" not in report.by_qtype


def test_contains_matching_is_rogs_evaluator():
    records = [{"answers": ["Titanic"], "prediction": ["The answer is Titanic (1997)"]}]
    assert evaluate(records, "exact").overall.hits1 == 0.0
    assert evaluate(records, "contains").overall.hits1 == 1.0


def test_kgqa_eval(tmp_path, capsys):
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    # --protocol engine: the metrics above without intervals (the default is every convention:
    # tests/test_metrics_conventions.py)
    assert main(["eval", str(path), "--protocol", "engine", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["overall"]["hits1"] == 0.5 and out["overall"]["hits1_any"] == 0.75 and out["no_gold"] == 1
    assert main(["eval", str(path), "--protocol", "engine"]) == 0
    text = capsys.readouterr().out
    assert "Hits@1-any" in text and "2-hop" in text and "a_to_b" in text
    assert main(["eval", str(path), "--json"]) == 0
    overall = json.loads(capsys.readouterr().out)["sets"]["all"]["overall"]
    assert overall["metrics"]["hits1"]["value"] == 0.5 and overall["metrics"]["hits1_any"]["value"] == 0.75
    assert overall["no_gold"] == 1
    path.write_text('{"answers": ["a"]}\n')
    assert main(["eval", str(path)]) == 2
    assert "needs 'answers' and 'prediction'" in capsys.readouterr().err
    path.write_text("\n")
    assert main(["eval", str(path)]) == 2
    assert "holds no predictions: nothing to score" in capsys.readouterr().err
    path.write_bytes(b'{"answers": ["\xff"], "prediction": []}\n')
    assert main(["eval", str(path)]) == 2
    assert f"{path}: not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("record, says", [
    ({"answers": "Heat", "prediction": ["Heat"]}, "'answers' must be a list"),  # would be scored letter by letter
    ({"answers": None, "prediction": []}, "'answers' must be a list"),
    ({"answers": ["Heat"], "prediction": [None]}, "'prediction' must be a list of answers"),
    ({"answers": ["Heat"], "prediction": [["Heat"]]}, "'prediction' must be a list of answers"),
    ({"answers": ["Heat"], "prediction": ["Heat"], "prediction_ids": "m.1"}, "'prediction_ids' must be a list of ids"),
    ({"answers": ["Heat"], "prediction": ["Heat"], "hops": "2"}, "'hops' must be a whole number"),
    ({"answers": ["Heat"], "prediction": ["Heat"], "qtype": 3}, "'qtype' must be a string"),
    ({"answers": ["Heat"], "prediction": ["Heat"], "set": ["metaqa-1hop"]}, "'set' must be a string"),  # was a set named "['metaqa-1hop']"
    ({"answers": ["Heat"], "prediction": ["Heat"], "dataset": {"name": "x"}}, "'dataset' must be a string"),
    ({"answers": ["Heat"], "prediction": ["Heat"], "id": ["q1"]}, "'id' must be a string or a whole number"),
    ({"answers": ["Heat"], "prediction": ["Heat"], "parses": ["m.1"]}, "'parses' must be a list of lists of gold answer ids"),
    ({"answers": ["Heat"], "prediction": ["Heat"], "parses": [[None]]}, "'parses' must be a list of lists of gold answer ids"),
])
def test_a_record_field_of_the_wrong_kind_is_named_with_its_line(tmp_path, record, says):
    path = tmp_path / "predictions.jsonl"
    path.write_text(json.dumps({"answers": ["a"], "prediction": ["a"]}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ParseError, match=re.escape(f"predictions.jsonl:2: {says}")):
        read_predictions(path)
    # records given from Python are held to the same rule by every scorer, named by their place
    for scorer in (evaluate, evaluate_rog, score):
        with pytest.raises(InvalidInputError, match=re.escape(f"prediction record 1: {says}")):
            scorer([{"answers": ["a"], "prediction": ["a"]}, record])


def test_a_question_asked_twice_in_a_set_is_named_and_other_sets_may_repeat_its_id(tmp_path, capsys):
    one = {"id": "q1", "answers": ["Heat"], "prediction": ["Heat"]}
    records = [one, {**one, "id": 7}, {**one, "set": "other"}, {**one, "prediction": ["Ronin"]}]
    path = tmp_path / "predictions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    says = "question id 'q1' comes twice (first at {}): a predictions file holds one record a question"
    with pytest.raises(ParseError, match=re.escape("predictions.jsonl:4: " + says.format("line 1"))):
        read_predictions(path)
    assert main(["eval", str(path)]) == 2
    assert says.format("line 1") in capsys.readouterr().err
    for scorer in (evaluate, evaluate_rog, score):
        with pytest.raises(InvalidInputError, match=re.escape("prediction record 3: " + says.format("record 0"))):
            scorer(records)
        assert scorer(records[:3])  # the same id in another set, or another id, is another question
    assert score(records[:3]).sets["other"].overall.questions == 1


def test_a_file_name_given_as_records_is_named():
    for scorer in (evaluate, evaluate_rog, score):
        with pytest.raises(InvalidInputError, match=re.escape("got the file name 'rog.jsonl': read the file with read_predictions")):
            scorer("rog.jsonl")
        with pytest.raises(InvalidInputError, match=re.escape("prediction record 0: a record needs 'answers' and 'prediction'")):
            scorer([{"answers": ["a"]}])


def test_records_or_a_file_name_of_the_wrong_kind_are_named():
    for scorer in (evaluate, evaluate_rog, score):
        with pytest.raises(InvalidInputError, match=re.escape("expected a list of prediction records (dicts) as records, got None")):
            scorer(None)
    with pytest.raises(InvalidInputError, match=re.escape("invalid predictions file None: give its path as a str or a pathlib.Path")):
        read_predictions(None)
    with pytest.raises(InvalidInputError, match=re.escape("predictions file 'rog\\x00.jsonl': it holds a NUL character")):
        read_predictions("rog\x00.jsonl")


def test_a_record_may_hold_an_llms_text_numbers_and_no_prediction(tmp_path):
    path = tmp_path / "predictions.jsonl"
    records = [{"answers": [1994], "prediction": "1994"}, {"answers": ["Heat"], "prediction": None, "hops": None}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert read_predictions(path) == records and evaluate(records).overall.hits1 == 0.5


def test_a_prediction_holding_a_unicode_line_separator_is_one_record(tmp_path):
    """A run writes JSON lines with ``ensure_ascii=False``: U+2028 and U+0085 inside a name stay
    raw, and only a newline ends a record."""
    path = tmp_path / "predictions.jsonl"
    names = ["Line\u2028Separator", "Next\x85Line", "Form\x0cFeed"]
    path.write_text("".join(json.dumps({"id": n, "answers": [n], "prediction": [n]}, ensure_ascii=False) + "\n" for n in names),
                    encoding="utf-8")
    records = read_predictions(path)
    assert [r["id"] for r in records] == names
    assert evaluate(records).overall.hits1 == 1.0


# ------------------------------------------------------------- many answers in one record
def _quadratic_score(prediction, answers, match):
    """score_question as each prediction against each gold answer defines it."""
    from engine.methods.metrics import _distinct

    predicted, gold = _distinct(prediction), _distinct(answers)
    correct = [any(matches(p, g, match) for g in gold) for p in predicted]
    found = sum(any(matches(p, g, match) for p in predicted) for g in gold)
    return (float(bool(correct) and correct[0]), float(any(correct)),
            sum(correct) / len(predicted) if predicted else 0.0, found / len(gold))


def test_scoring_many_answers_agrees_with_comparing_each_pair():
    """The linear-time matching (sets for equal names, one Aho–Corasick pass for containment)
    gives what comparing every prediction with every gold answer gives, on names that overlap
    much (short strings of few letters: prefixes, suffixes, repeats, one inside another)."""
    import random

    from engine.methods.metrics import Substrings, rog_lines, rog_question
    from engine.methods.scoring.conventions import _tog_clean, tog_em, tog_response, webqsp_f1

    rng = random.Random(5)

    def names(n):
        return [" ".join("".join(rng.choice("ab") for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3)))
                for _ in range(n)]

    for _ in range(300):
        answers, prediction = names(rng.randint(1, 8)), names(rng.randint(0, 8))
        for match in ("exact", "contains"):
            s = score_question(prediction, answers, match)
            assert (s.hits1, s.hits1_any, s.precision, s.recall) == _quadratic_score(prediction, answers, match)
        text = normalize(" ".join(rog_lines(prediction)))
        gold = [a for a in answers if normalize(a)]
        assert rog_question(prediction, answers).accuracy == sum(normalize(a) in text for a in gold) / len(gold)
        response = _tog_clean(tog_response(prediction))
        assert tog_em(prediction, answers) == float(bool(response) and any(
            g and (g in response or response in g) for g in (_tog_clean(a) for a in answers)))
        parse = names(rng.randint(0, 5))
        tp, fp = sum(g in prediction for g in parse), sum(p not in parse for p in prediction)
        expected = float(not parse and not prediction) if not parse or not prediction else (
            2 * tp / (2 * tp + fp + len(parse) - tp) if tp else 0.0)
        assert webqsp_f1(prediction, [parse]) == expected
        found: set[int] = set()
        substrings = Substrings(answers)
        assert [substrings.scan(p, found) for p in prediction] == [any(a in p for a in answers if a) for p in prediction]
        assert {substrings.patterns[i] for i in found} == {a for a in answers if a and any(a in p for p in prediction)}


@pytest.mark.parametrize("match", ["exact", "contains"])
def test_a_record_with_twenty_thousand_answers_is_scored(match, tmp_path):
    """A record far past any dataset's answer count (4e8 prediction × answer pairs, which pairwise
    matching took minutes over) is scored in every convention, as its definition says."""
    n = 20_000
    record = {"answers": [f"answer number {i} of many" for i in range(n)],
              "prediction": [f"answer number {i * 7} of many" for i in range(n)]}
    as_text = {**record, "prediction": "\n".join(record["prediction"])}  # an LLM's text: RoG's and ToG's rules read it
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(record) + "\n" + json.dumps(as_text) + "\n")
    report = score(read_predictions(path), match=match, bootstrap=0)
    rog = evaluate_rog(read_predictions(path))
    found = sum(i % 7 == 0 for i in range(n)) / n
    # the text is one answer: equal to no gold answer, containing those the list found
    text_counts = match == "contains"
    assert report.sets["all"].overall.metrics["hits1_any"].value == (1.0 if text_counts else 0.5)
    assert report.sets["all"].overall.metrics["recall"].value == pytest.approx(found if text_counts else found / 2, abs=1e-6)
    assert rog.accuracy == pytest.approx(found)
