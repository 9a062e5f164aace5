"""Every scoring convention of engine.methods.scoring on hand-computed cases, the bootstrap
intervals, the report's JSON form and ``kgqa eval``'s protocols."""
from __future__ import annotations

import json

import pytest

from engine.cli.main import main
from engine.errors import InvalidInputError
from engine.methods.metrics import evaluate_rog, rog_lines, rog_question
from engine.methods.scoring import METRICS, TABLE_METRICS, Report, format_scores, score
from engine.methods.scoring.conventions import gnn_rag_hit1, rog_hit, tog_em, tog_response, webqsp_f1


# ----------------------------------------------------------------------------- RoG's evaluate_results.py
def test_rog_reads_a_text_as_lines_and_a_list_as_distinct_answers_most_frequent_first():
    assert rog_lines("Paris\n\nLyon") == ["Paris", "", "Lyon"]  # blank lines are lines
    assert rog_lines(["york", "new", "new"]) == ["new", "york"]  # "new" twice comes first
    assert rog_lines(["a", "b", "a", "b"]) == ["a", "b"]  # ties keep their order
    assert rog_lines(None) == [] and rog_lines("") == [""]


def test_rog_question_hand_computed():
    # two lines, the first with punctuation and an article: 2 of 3 gold found in the joined text
    q = rog_question("The answer is Jim Cameron.\nKathryn Bigelow", ["Jim Cameron", "Kathryn Bigelow", "Steven Spielberg"])
    assert (q.hit, q.accuracy, q.precision, q.recall) == (1.0, pytest.approx(2 / 3), 1.0, pytest.approx(2 / 3))
    assert q.f1 == pytest.approx(0.8)  # 2 · 1 · 2/3 / (1 + 2/3)
    # a repeated answer counts once in the precision's denominator
    q = rog_question(["Paris", "Lyon", "Paris"], ["paris", "Marseille"])
    assert (q.hit, q.precision, q.recall, q.f1) == (1.0, 0.5, 0.5, 0.5)
    # one line naming two gold answers: precision 2 / 1 (RoG's precision can pass 1)
    q = rog_question("Paris and Lyon", ["Paris", "Lyon"])
    assert (q.precision, q.recall, q.f1) == (2.0, 1.0, pytest.approx(4 / 3))
    # a repeated gold answer is counted as often as it is given
    assert rog_question(["Paris"], ["Paris", "Paris"]).recall == 1.0
    # nothing predicted
    for empty in ([], ""):
        q = rog_question(empty, ["Paris"])
        assert (q.hit, q.precision, q.recall, q.f1) == (0.0, 0.0, 0.0, 0.0)


def test_rog_hit_is_a_substring_test_after_rogs_normalisation():
    assert rog_hit(["lord of rings!"], ["The Lord of the Rings"]) == 1.0  # case, punctuation, articles
    assert rog_hit(["Joanna"], ["Ann"]) == 1.0  # a substring of a longer name counts, as in RoG
    assert rog_hit(["Washington, D.C."], ["Washington DC"]) == 1.0
    assert rog_hit(["york", "new", "new"], ["New York"]) == 1.0  # read as "new york"
    assert rog_hit(["york", "new"], ["New York"]) == 0.0  # read as "york new"
    assert rog_hit(["Lyon"], ["The", "Paris"]) == 0.0  # a gold answer normalising to nothing is left out
    with pytest.raises(InvalidInputError):
        rog_question(["x"], ["the", "?"])


# ----------------------------------------------------------------------------- GNN-RAG's Hit1
def test_gnn_rag_hit1_reads_the_first_line():
    assert gnn_rag_hit1("Paris, France\nLyon", ["paris"]) == 1.0
    assert gnn_rag_hit1("Lyon\nParis", ["Paris"]) == 0.0  # right, but on the second line
    assert gnn_rag_hit1("\n\nParis\nLyon", ["Paris"]) == 1.0  # the text is stripped first
    assert gnn_rag_hit1(["The Paris"], ["paris"]) == 1.0 and gnn_rag_hit1(["Lyon", "Paris"], ["Paris"]) == 0.0
    assert gnn_rag_hit1([], ["Paris"]) == gnn_rag_hit1("", ["Paris"]) == 0.0
    assert gnn_rag_hit1("anything", ["a"]) == 0.0  # "a" normalises to nothing


# ----------------------------------------------------------------------------- ToG's lenient exact match
def test_tog_reads_the_first_braces():
    assert tog_response("The answer is {Jamaican English}. {x}") == "Jamaican English"
    assert tog_response("Paris") == "Paris"
    assert tog_response(["Lyon", "Paris"]) == "Lyon, Paris"
    assert tog_response("{Paris") == "Pari"  # no "}": ToG's slice drops the last character


def test_tog_em_hand_computed():
    assert tog_em("{Jamaica}", ["jamaica"]) == 1.0
    assert tog_em("{PARIS}", ["Paris"]) == 1.0
    assert tog_em("{English}", ["Jamaican English"]) == 1.0  # the response inside a gold answer
    assert tog_em("{Jamaican English, Jamaican Creole}", ["Jamaican Creole"]) == 1.0  # a gold answer inside it
    assert tog_em("Paris", ["Paris, France"]) == 1.0  # no braces: the whole text
    assert tog_em("{The Beatles}", ["Beatles"]) == 1.0 and tog_em("{Beatles}", ["The Beatles"]) == 1.0
    assert tog_em("{Washington, D.C.}", ["Washington D.C."]) == 0.0  # ToG keeps punctuation: "washington,d.c." vs "washingtond.c."
    assert tog_em("{Lyon}", ["Paris"]) == 0.0
    assert tog_em(["Lyon", "Paris"], ["Paris"]) == 1.0  # a list is read as "Lyon, Paris"
    assert tog_em("{Paris", ["Paris"]) == 1.0  # "Pari" is inside "paris"
    for empty in ("{}", "", [], "{ }"):
        assert tog_em(empty, ["Paris"]) == 0.0  # an empty response never matches
    assert tog_em("{Paris}", [" "]) == 0.0


# ----------------------------------------------------------------------------- WebQSP's official F1
def test_webqsp_f1_hand_computed():
    assert webqsp_f1(["m.3"], [["m.1", "m.2"], ["m.3"]]) == 1.0  # the best parse counts
    assert webqsp_f1(["m.1", "m.9"], [["m.1", "m.2"]]) == pytest.approx(0.5)  # P 1/2, R 1/2
    assert webqsp_f1(["m.9", "m.9", "m.1"], [["m.1"]]) == pytest.approx(0.5)  # P 1/3 (the repeat counts twice), R 1
    assert webqsp_f1(["m.1", "m.1"], [["m.1"]]) == 1.0  # a repeated right answer is no false positive
    assert webqsp_f1([], [["m.1"]]) == 0.0
    assert webqsp_f1([], [[], ["m.1"]]) == 1.0 and webqsp_f1(["m.1"], [[]]) == 0.0  # a parse without answers
    assert webqsp_f1(["m.1"], [["m.1", "m.1"]]) == 1.0  # a repeated gold answer found: tp 2, fp 0
    with pytest.raises(InvalidInputError):
        webqsp_f1(["m.1"], [])


def _one(record: dict, **kwargs) -> dict[str, float]:
    g = score([record], bootstrap=0, **kwargs).sets["all"].overall
    assert g.questions == 1
    return {k: e.value for k, e in g.metrics.items()}


def test_webqsp_in_a_record_by_id_over_parses_else_answer_ids_else_names():
    parses = {"answers": ["A", "B"], "answer_ids": ["m.1", "m.2"], "parses": [["m.1", "m.2"], ["m.3"]],
              "prediction": ["C"], "prediction_ids": ["m.3"]}
    assert _one(parses)["webqsp_f1"] == 1.0 and _one(parses)["hits1"] == 0.0  # Hits@1 reads answer_ids
    ids = {**parses, "parses": None}
    assert _one(ids)["webqsp_f1"] == 0.0
    same_name = {"answers": ["Titanic"], "answer_ids": ["m.1997"], "prediction": ["Titanic"], "prediction_ids": ["m.1953"]}
    assert _one(same_name)["webqsp_f1"] == 0.0 and _one(same_name, by="name")["webqsp_f1"] == 1.0
    names = {"answers": ["The Titanic", "Avatar"], "prediction": ["titanic", "Titanic!", "Up"]}
    # "titanic" twice is right twice (no false positive), "up" is one: tp 1, fp 1, fn 1 ("avatar")
    assert _one(names)["webqsp_f1"] == pytest.approx(0.5)
    with pytest.raises(InvalidInputError, match="'parses' must be a list of lists"):
        score([{**parses, "parses": ["m.1"]}], bootstrap=0)


# ----------------------------------------------------------------------------- one record, every convention
def test_every_convention_on_one_text_prediction():
    # an LLM's output: the right answer is on the second line, in braces on the first
    record = {"answers": ["Kathryn Bigelow"], "prediction": "The director is {Kathryn Bigelow}.\nJames Cameron"}
    m = _one(record)
    # Hits@1 by name wants the first answer (the whole text, one answer) equal to the gold name: no
    assert m["hits1"] == 0.0 and m["hits1_any"] == 0.0
    assert m["rog_hit"] == 1.0 and m["gnn_rag_hit1"] == 1.0 and m["tog_em"] == 1.0
    assert m["webqsp_f1"] == 0.0 and m["macro_f1"] == 0.0
    assert _one(record, match="contains")["hits1"] == 1.0


def test_text_conventions_read_ids_where_the_gold_is_ids_only():
    record = {"answers": [], "answer_ids": ["m.1"], "prediction": ["x"], "prediction_ids": ["m.2", "m.1"]}
    m = _one(record)
    assert (m["hits1"], m["hits1_any"], m["rog_hit"], m["gnn_rag_hit1"], m["tog_em"]) == (0.0, 1.0, 1.0, 0.0, 1.0)


def _records() -> list[dict]:
    return [
        # q1: first answer wrong, second right: P 1/2, R 1
        {"answers": ["apple"], "prediction": ["pear", "apple"], "hops": 1, "qtype": "a_to_b"},
        # q2: perfect
        {"answers": ["x", "y"], "prediction": ["y", "x"], "hops": 2, "qtype": "a_to_b"},
        # q3: nothing right
        {"answers": ["m"], "prediction": ["n"], "hops": 2, "qtype": "c_to_d"},
        # q4: half the gold, one of three predictions: P 1/3, R 1/2
        {"answers": ["p", "q"], "prediction": ["p", "r", "s"], "hops": 2},
        {"answers": [], "prediction": ["z"], "hops": 2},  # no gold: counted, not scored
    ]


def test_score_hand_computed():
    report = score(_records(), bootstrap=0)
    assert list(report.sets) == ["all"]
    s = report.sets["all"]
    g = s.overall
    assert (g.questions, g.no_gold) == (4, 1)
    m = {k: e.value for k, e in g.metrics.items()}
    precision, recall = (1 / 2 + 1 + 0 + 1 / 3) / 4, (1 + 1 + 0 + 1 / 2) / 4
    per_question_f1 = [2 / 3, 1.0, 0.0, 2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2)]
    assert m["hits1"] == 0.5 and m["hits1_any"] == 0.75
    assert m["rog_hit"] == 0.75 and m["gnn_rag_hit1"] == 0.5
    assert m["tog_em"] == 0.75  # "pear, apple" contains "apple"; "p, r, s" contains "p"
    # WebQSP by name: q1 tp 1 fp 1 fn 0 → 2/3; q2 1; q3 0; q4 tp 1 fp 2 fn 1 → 2/5
    assert m["webqsp_f1"] == pytest.approx((2 / 3 + 1 + 0 + 2 / 5) / 4)
    assert m["precision"] == pytest.approx(precision) and m["recall"] == pytest.approx(recall)
    assert m["macro_f1"] == pytest.approx(sum(per_question_f1) / 4)
    assert m["answer_f1"] == pytest.approx(2 * precision * recall / (precision + recall))
    assert list(s.hops) == ["1", "2"] and s.hops["2"].questions == 3 and s.hops["2"].no_gold == 1
    assert s.hops["1"].metrics["hits1"].value == 0.0 and s.hops["2"].metrics["hits1"].value == pytest.approx(2 / 3)
    assert list(s.qtype) == ["a_to_b", "c_to_d"] and s.qtype["a_to_b"].metrics["gnn_rag_hit1"].value == 0.5


def test_sets_come_from_set_or_dataset():
    records = [{**r, "set": "s1"} for r in _records()[:2]] + [{**_records()[2], "dataset": "s2"}, _records()[3]]
    report = score(records, bootstrap=0, default_set="rest")
    assert list(report.sets) == ["rest", "s1", "s2"]
    assert report.sets["s1"].overall.questions == 2 and report.sets["s1"].overall.metrics["hits1"].value == 0.5
    assert report.sets["s2"].overall.metrics["rog_hit"].value == 0.0 and report.sets["rest"].overall.questions == 1


def test_a_set_without_gold_answers_has_no_values():
    report = score([{"answers": [], "prediction": ["z"]}])
    g = report.sets["all"].overall
    assert (g.questions, g.no_gold) == (0, 1) and all(e.value is None and e.low is None for e in g.metrics.values())
    assert "set all: 0 questions (1 without gold answers, not scored)" in format_scores(report)


def test_the_text_report_names_each_question_type_whole():
    """MetaQA's 3-hop question types differ only past their 23rd character."""
    types = ["movie_to_director_to_movie_to_language", "movie_to_director_to_movie_to_writer"]
    report = score([{"answers": ["apple"], "prediction": ["apple"], "qtype": q} for q in types], bootstrap=10)
    lines = format_scores(report).splitlines()
    for qtype in types:
        (row,) = [line for line in lines if line.split()[:1] == [qtype]]
        assert row.split()[1:] == ["1"] + ["1.000"] * len(TABLE_METRICS)
    header = next(line for line in lines if line.startswith("group"))
    under = lines[lines.index(next(line for line in lines if line.startswith("all"))) + 1]
    assert len(under) == len(header)  # the intervals stay under their values


# ----------------------------------------------------------------------------- bootstrap intervals
def _many() -> list[dict]:
    """60 questions of varied outcomes (a fixed pattern, not random)."""
    out = []
    for i in range(60):
        kind = i % 5
        prediction = [["x"], ["y", "x"], ["y"], ["x", "v", "w"], []][kind]
        out.append({"answers": ["x", "z"] if i % 3 == 0 else ["x"], "prediction": prediction, "hops": 1 + i % 2})
    return out


def test_bootstrap_is_deterministic_and_holds_the_point_estimate():
    first, again = score(_many(), bootstrap=1000, seed=0), score(_many(), bootstrap=1000, seed=0)
    assert first.to_json() == again.to_json()
    other = score(_many(), bootstrap=1000, seed=1)
    assert other.to_json() != first.to_json()
    for report in (first, other):
        for g in (report.sets["all"].overall, *report.sets["all"].hops.values()):
            for name in METRICS:
                e = g.metrics[name]
                assert e.low is not None and e.high is not None
                assert e.low <= e.value <= e.high, (name, e)
                assert e.low < e.high, (name, e)  # the outcomes vary, so must the resamples
    assert score(_many(), bootstrap=0).sets["all"].overall.metrics["hits1"].low is None


def test_bootstrap_of_constant_outcomes_is_a_point():
    report = score([{"answers": ["x"], "prediction": ["x"]}] * 10, bootstrap=200)
    e = report.sets["all"].overall.metrics["hits1"]
    assert (e.value, e.low, e.high) == (1.0, 1.0, 1.0)
    with pytest.raises(InvalidInputError, match="bootstrap"):
        score(_many(), bootstrap=-1)


def test_report_json_round_trip():
    report = score(_many(), bootstrap=100)
    data = report.to_json()
    assert data["bootstrap"] == {"resamples": 100, "seed": 0, "confidence": 0.95}
    group = data["sets"]["all"]["overall"]
    assert list(group) == ["questions", "no_gold", "metrics"] and list(group["metrics"]) == list(METRICS)
    assert set(group["metrics"]["hits1"]) == {"value", "low", "high"}
    assert Report.from_json(json.loads(json.dumps(data))).to_json() == data
    with pytest.raises(InvalidInputError, match="not a scoring report"):
        Report.from_json({"sets": {}})


# ----------------------------------------------------------------------------- kgqa eval
def _rog_file(tmp_path) -> str:
    lines = [
        # 2 lines, 2 of 3 gold found: hit 1, accuracy 2/3, P 2/2, R 2/3, F1 0.8
        {"answers": ["Jim Cameron", "Kathryn Bigelow", "Steven Spielberg"], "prediction": "The answer is Jim Cameron.\nKathryn Bigelow"},
        # distinct answers "Paris", "Lyon": hit 1, accuracy 1/2, P 1/2, R 1/2, F1 1/2
        {"answers": ["Paris", "Marseille"], "prediction": ["Paris", "Lyon", "Paris"]},
        # read as "york new": nothing found
        {"answers": ["New York"], "prediction": ["york", "new"]},
        # nothing predicted
        {"answers": ["Paris"], "prediction": []},
        # no gold answer: RoG's evaluator cannot score it; left out
        {"answers": [], "prediction": "x"},
    ]
    path = tmp_path / "rog.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return str(path)


def test_kgqa_eval_protocol_rog_follows_rogs_evaluator(tmp_path, capsys):
    path = _rog_file(tmp_path)
    # the means over the 4 scored lines of the values computed by hand above
    hit, accuracy, precision, f1 = 2 / 4, (2 / 3 + 1 / 2) / 4, (1 + 1 / 2) / 4, (0.8 + 0.5) / 4
    m = evaluate_rog(json.loads(line) for line in open(path))
    assert (m.questions, m.hit, m.accuracy, m.recall, m.precision, m.f1) == (
        4, hit, pytest.approx(accuracy), pytest.approx(accuracy), pytest.approx(precision), pytest.approx(f1))
    assert main(["eval", path, "--protocol", "rog"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0] == (f"RoG evaluator, 4 questions: Hit {hit:.4f}  Accuracy {accuracy:.4f}  "
                                    f"F1 {f1:.4f}  Precision {precision:.4f}  Recall {accuracy:.4f}")
    assert "RoG Hit" in text and "0.500" in text and "1 without gold answers" in text
    assert main(["eval", path, "--protocol", "rog", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hit"] == hit and out["questions"] == 4 and out["f1"] == pytest.approx(f1)
    assert out["scores"]["sets"]["all"]["overall"]["metrics"]["rog_hit"]["value"] == hit


def test_kgqa_eval_every_convention_and_each_protocol(tmp_path, capsys):
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    assert main(["eval", str(path), "--json", "--bootstrap", "50", "--seed", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bootstrap"]["resamples"] == 50 and out["bootstrap"]["seed"] == 3
    assert out == score(_records(), bootstrap=50, seed=3).to_json()
    assert main(["eval", str(path)]) == 0
    text = capsys.readouterr().out
    for label in ("Hits@1", "RoG Hit", "GNN-RAG Hit1", "ToG EM", "WebQSP F1", "macro-F1", "answer F1", "2-hop", "a_to_b"):
        assert label in text
    assert "[" in text  # intervals
    for protocol, label in (("hits1", "Hits@1"), ("gnn-rag", "GNN-RAG Hit1"), ("tog", "ToG EM"), ("webqsp", "WebQSP F1")):
        assert main(["eval", str(path), "--protocol", protocol, "--bootstrap", "0"]) == 0
        text = capsys.readouterr().out
        assert label in text and "RoG Hit" not in text and "[" not in text
    with pytest.raises(SystemExit) as stopped:  # argparse's way out, before the file is read
        main(["eval", str(path), "--bootstrap", "-1"])
    assert stopped.value.code == 2 and "invalid bootstrap -1" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--bootstrap", "1e9"], "--bootstrap: '1e9': give a whole number from 0 (no intervals) to 100,000"),
    (["--bootstrap", "100001"], "invalid bootstrap 100001: give a number of resamples from 0 (no intervals) to 100,000"),
    (["--seed", "-1"], "--seed: '-1': give a whole number from 0 to 4294967295"),
])
def test_kgqa_eval_refuses_a_bootstrap_or_seed_out_of_range_before_reading(argv, says, tmp_path, capsys):
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    with pytest.raises(SystemExit) as stopped:
        main(["eval", str(path), *argv])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert says in err and "Traceback" not in err


def test_score_refuses_a_bootstrap_past_the_maximum_or_a_negative_seed():
    from engine.methods.metrics import MAX_BOOTSTRAP

    with pytest.raises(InvalidInputError, match="invalid bootstrap 100001"):
        score(_many(), bootstrap=MAX_BOOTSTRAP + 1)
    with pytest.raises(InvalidInputError, match="invalid seed -1"):
        score(_many(), bootstrap=10, seed=-1)
