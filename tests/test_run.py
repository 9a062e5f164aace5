"""The method-run protocol (engine/methods/run.py) and the evaluators of engine/methods/metrics.py it relies on."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from engine.graph import Triple
from engine.methods.metrics import evaluate, evaluate_rog
from engine.reference import ReferenceStore
from engine.methods.meter import Meter
from engine.methods.run import format_summary, run_method, tokens_cell
from engine.methods.spec import Method, Models, Prediction
from engine.models.lm import TokenCount
from loaders.questions import Question


def test_nested_stages_are_exclusive(monkeypatch):
    clock = [100.0]  # a clock the test moves, so that no timing enters the test
    monkeypatch.setattr("engine.methods.meter.time.perf_counter", lambda: clock[0])
    meter = Meter()
    with meter.stage("model"):
        clock[0] += 0.05
        with meter.stage("store"):
            clock[0] += 0.1
        clock[0] += 0.02
    assert meter.seconds["store"] == pytest.approx(0.1)
    assert meter.seconds["model"] == pytest.approx(0.07)  # the store's 0.1 s is not model time


def test_metered_store_counts_every_public_call_once_and_meters_compose():
    store = ReferenceStore([Triple("a", "r", "b"), Triple("b", "s", "c")])
    outer, inner = Meter(), Meter()
    metered = inner.store(outer.store(store))
    assert [e.dst for e in metered.expand(["a"]).edges] == ["b"]
    metered.names(["a"])
    assert inner.calls["store"] == outer.calls["store"] == 2
    assert dict(outer.operations) == {"store.expand": 1, "store.names": 1}
    assert metered._target._target is store  # a proxy around a proxy around the store
    assert metered.uri == store.uri  # attributes pass through uncounted
    from engine.errors import UnsupportedOperationError
    from engine.ops import Names

    with pytest.raises(UnsupportedOperationError):  # the reference compiles nothing; either way no store call
        metered.explain(Names(("a",)))
    assert outer.calls["store"] == 2


class _LM:
    name = "stub"

    def generate(self, prompt, **_):
        time.sleep(0.01)
        return prompt.upper()

    def encode(self, text):
        return [1, 2]


def test_metered_lm_counts_generation_not_tokenizer_calls():
    meter = Meter()
    lm = meter.lm(_LM())
    assert lm.generate("x") == "X" and lm.encode("x") == [1, 2] and lm.name == "stub"
    assert meter.calls["llm"] == 1 and meter.seconds["model"] >= 0.01


class _Echo(Method):
    """Answers each question with its topic entity, in batches of two, one store call per batch."""

    name = "echo"
    model = _LM

    def __init__(self, store, models):
        super().__init__(store, models, batch_size=2)
        self.lm = models.meter.lm(self.model())

    def _answer(self, questions):
        self.store.names([q.topic_entities[0] for q in questions])
        out = []
        for q in questions:
            self.lm.generate(q.question)
            out.append(Prediction([q.topic_entities[0]], [q.topic_entities[0]], {"seen": q.id}))
        return out

    def summary(self, records):
        return {"seen": len(records)}


def test_run_method_writes_one_record_shape_and_splits_batch_costs(tmp_path):
    gold = ["e0", "e1", "e0", "e1", "other"]
    questions = [Question(f"q{i}", f"question {i}", [gold[i]], [f"e{i % 2}"], [gold[i]], hops=1 + i % 2) for i in range(5)]
    store = ReferenceStore([Triple("e0", "r", "e1")])
    out = tmp_path / "p.jsonl"
    summary = run_method(_Echo(store, Models()), questions, out, progress=False)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["q0", "q1", "q2", "q3", "q4"]
    assert set(records[0]) == {
        "id", "question", "topic", "answers", "answer_ids", "prediction", "prediction_ids", "hops", "qtype", "seconds", "calls", "echo",
    }
    assert records[0]["echo"] == {"seen": "q0"}
    # batches of 2, 2 and 1: one store call per batch shared evenly, one LLM call per question
    assert [r["calls"]["store"] for r in records] == [0.5, 0.5, 0.5, 0.5, 1.0]
    assert all(r["calls"]["llm"] == 1.0 for r in records)
    assert all(r["seconds"]["model"] >= 0.01 and r["seconds"]["total"] >= r["seconds"]["model"] for r in records)
    # each answers its topic, e0 or e1: right but for q4
    assert summary["hits1"] == 0.8 and summary["questions"] == 5 and summary["echo"] == {"seen": 5}
    assert summary["by_hops"] == {"1": pytest.approx(2 / 3, abs=1e-4), "2": 1.0}
    assert summary["calls_per_question"] == {"store": 0.6, "llm": 1.0}
    assert "tokens_per_question" not in summary  # the stub model does not count them
    assert summary["predictions"] == str(out)


class _CountingLM(_LM):
    """A stub that counts tokens as a local model does: the prompt's characters read, three written."""

    def __init__(self):
        self.tokens = TokenCount()

    def generate(self, prompt, **_):
        self.tokens.add(len(prompt), 3)
        return prompt.upper()


def test_the_meter_counts_the_tokens_its_models_read_and_wrote_since_the_last_reset():
    meter = Meter()
    assert meter.tokens() is None  # no model
    counting = _CountingLM()
    counting.generate("before")  # before the meter sees it: not counted
    lm = meter.lm(counting)
    assert meter.tokens() == {"prompt_tokens": 0, "completion_tokens": 0}
    lm.generate("abcd")
    meter.lm(counting).generate("ab")  # the same model metered twice counts once
    assert meter.tokens() == {"prompt_tokens": 6, "completion_tokens": 6}
    meter.reset()
    lm.generate("a")
    assert meter.tokens() == {"prompt_tokens": 1, "completion_tokens": 3}
    counting.tokens.add(None, None)  # a call whose tokens the model could not tell
    assert meter.tokens() is None
    meter.reset()
    assert meter.tokens() == {"prompt_tokens": 0, "completion_tokens": 0}
    meter.lm(_LM())  # a model that does not count tokens: the total is unknown
    assert meter.tokens() is None


def test_a_batchs_tokens_are_shared_evenly_and_summed_per_question(tmp_path):
    questions = [Question(f"q{i}", "x" * (i + 1), ["e0"], ["e0"], ["e0"], hops=1) for i in range(3)]

    class Counting(_Echo):
        model = _CountingLM

    summary = run_method(Counting(ReferenceStore([Triple("e0", "r", "e1")]), Models()), questions, tmp_path / "p.jsonl", progress=False)
    records = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    # batches of two and one: questions of 1 and 2 characters share 3 read and 6 written, the third reads 3
    assert [r["tokens"] for r in records] == [{"prompt_tokens": 1.5, "completion_tokens": 3.0}] * 2 + [
        {"prompt_tokens": 3.0, "completion_tokens": 3.0}]
    assert summary["tokens_per_question"] == {"prompt_tokens": 2.0, "completion_tokens": 3.0}
    assert "llm tokens read 2, written 3" in format_summary(summary)
    assert tokens_cell(summary) == "2 / 3"
    assert tokens_cell({k: v for k, v in summary.items() if k != "tokens_per_question"}) == "–"  # not counted: no number


class _Forgiving(_Echo):
    """An echo that takes a failed model call for an empty answer, as a method may."""

    def _answer(self, questions):
        from engine.errors import KGQAError

        out = []
        for q in questions:
            try:
                self.lm.generate(q.question)
                out.append(Prediction([q.topic_entities[0]], [q.topic_entities[0]], None))
            except KGQAError:
                out.append(Prediction([], [], None))
        return out


def test_past_its_deadline_a_run_stops_at_the_next_call_and_keeps_no_late_batch(monkeypatch):
    from engine import deadlines
    from engine.errors import DeadlineExceededError

    clock = [100.0]
    monkeypatch.setattr("engine.deadlines.time.monotonic", lambda: clock[0])
    meter = Meter()
    with deadlines.until(101.0):
        with meter.stage("model"):
            clock[0] = 102.0  # a stage that began in time ends
        with pytest.raises(DeadlineExceededError, match="ran past its deadline"):
            with meter.stage("store"):
                pass
        with pytest.raises(DeadlineExceededError):
            meter.lm(_LM()).generate("x")
    assert meter.calls["llm"] == 0  # a call refused at the deadline is not counted
    with meter.stage("store"):  # the deadline was the block's
        pass
    clock[0] = 100.0
    store = ReferenceStore([Triple("e0", "r", "e1")])
    questions = [Question(f"q{i}", f"question {i}", ["e0"], ["e0"], ["e0"]) for i in range(6)]
    method = _Forgiving(store, Models())
    calls = []

    def generate(prompt, **_):
        calls.append(prompt)
        clock[0] += 1.0  # each model call takes a second
        return prompt

    monkeypatch.setattr(_LM, "generate", staticmethod(generate))
    records: list[dict] = []
    with pytest.raises(DeadlineExceededError):
        run_method(method, questions, progress=False, on_record=records.append, deadline=102.5)
    # batches of two: the first ended at 102, the second's second call came past the deadline
    assert [r["id"] for r in records] == ["q0", "q1"] and len(calls) == 3
    assert run_method(method, questions, progress=False)["hits1"] == 1.0  # the next run has no deadline


def test_a_question_the_model_cannot_take_is_named_in_the_error(monkeypatch):
    from engine.errors import InvalidInputError

    def generate(prompt, **_):
        if len(prompt) > 20:
            raise InvalidInputError("a prompt of 30 tokens is longer than the 20 that stub reads")
        return prompt

    monkeypatch.setattr(_LM, "generate", staticmethod(generate))
    questions = [Question("short", "who", [], ["e0"], []), Question("long", "who " * 10, [], ["e0"], [])]
    method = _Echo(ReferenceStore([Triple("e0", "r", "e1")]), Models())
    with pytest.raises(InvalidInputError, match="echo cannot answer questions short, long: a prompt of 30 tokens"):
        run_method(method, questions, progress=False)


def test_a_method_named_plain_text_where_questions_go():
    from engine.errors import InvalidInputError

    method = _Echo(ReferenceStore([Triple("e0", "r", "e1")]), Models())
    with pytest.raises(InvalidInputError, match="echo answers Question objects .* got 'who directed e0'"):
        method.answer(["who directed e0"])
    assert method.answer([Question("q", "who directed e0", [], ["e0"], [])])[0].answers == ["e0"]


def test_run_arguments_of_the_wrong_kind_are_named_before_anything_is_answered_or_written(tmp_path):
    """A lone Question or None where a list goes, a predictions path that is a folder or holds a
    NUL, and a deadline that is not an instant are named, not a TypeError or OSError."""
    from engine.errors import InvalidInputError

    store = ReferenceStore([Triple("e0", "r", "e1")])
    method = _Echo(store, Models())
    question = Question("q", "who directed e0", [], ["e0"], [])
    calls = [
        (lambda: method.answer(question), "expected a list of Questions, got one Question: wrap it"),
        (lambda: method.answer(None), "expected a list of Questions (loaders.questions.Question) as questions, got None"),
        (lambda: run_method(method, question, progress=False), "expected a list of Questions, got one Question"),
        (lambda: run_method(method, [question], tmp_path, progress=False), f"cannot write the predictions file {str(tmp_path)!r}"),
        (lambda: run_method(method, [question], tmp_path / "out\x00.jsonl", progress=False), "it holds a NUL character"),
        (lambda: run_method(method, [question], deadline=float("nan"), progress=False), "invalid deadline nan"),
        (lambda: run_method(method, [question], deadline="60", progress=False), "invalid deadline '60'"),
    ]
    for call, says in calls:
        with pytest.raises(InvalidInputError) as e:
            call()
        assert says in str(e.value)
    assert list(tmp_path.iterdir()) == [] and method.meter.calls == {}
    # a generator of questions is a list of them
    assert run_method(method, (q for q in [question]), progress=False)["questions"] == 1


@pytest.mark.parametrize("field, value, says", [
    ("topic_entities", "e0", "expected a list of strings as the topic_entities of question 'q', got the string 'e0'; wrap it"),
    ("answers", None, "expected a list of strings as the answers of question 'q', got None"),
    ("path", "r", "as the path of question 'q', got the string 'r'"),
    ("id", 5, "a Question's id must be a string, got 5"),
    ("answers", ["a", None], "item 1 of the answers of question 'q' is None: give a string"),
    ("topic_entities", ["e\ud800"], "lone surrogate (U+D800)"),
    ("path_forward", [1], "item 0 of the path_forward of question 'q' is 1: give true or false"),
    ("hops", "2", "the hops of question 'q' must be a whole number, got '2'"),
    ("qtype", 3, "the qtype of question 'q' must be a string, got 3"),
])
def test_a_question_field_of_the_wrong_kind_is_named(field, value, says):
    """A str given for a list of topic entities would be taken letter by letter."""
    from engine.errors import InvalidInputError

    fields = {"id": "q", "question": "who directed e0", "answers": [], "topic_entities": ["e0"], "answer_entities": []}
    with pytest.raises(InvalidInputError) as e:
        Question(**{**fields, field: value})
    assert says in str(e.value)


def test_the_summary_says_how_many_questions_have_no_gold_answer_and_are_left_out_of_the_scores(tmp_path):
    """A MetaQA line with nothing after its tab has no gold answer: it is not scored, and the run's
    summary said nothing of it."""
    store = ReferenceStore([Triple("e0", "r", "a")])
    questions = [Question("q0", "q0", ["e0"], ["e0"], ["e0"]), Question("q1", "q1", [], ["e0"], [])]
    summary = run_method(_Echo(store, Models()), questions, progress=False)
    assert summary["no_gold"] == 1 and summary["hits1"] == 1.0
    assert "1 of 2 questions have no gold answer: they are left out of the scores above" in format_summary(summary)


def test_evaluate_compares_by_id_where_both_sides_have_ids():
    # two films named alike: by name the prediction looks right, by id it is not
    record = {"answers": ["Titanic"], "answer_ids": ["m.1997"], "prediction": ["Titanic"], "prediction_ids": ["m.1953"]}
    assert evaluate([record]).overall.hits1 == 0.0
    assert evaluate([record], by="name").overall.hits1 == 1.0
    no_ids = {"answers": ["Titanic"], "prediction": ["titanic"]}
    assert evaluate([no_ids]).overall.hits1 == 1.0
    from engine.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="by id"):
        evaluate([no_ids], by="id")


def test_rog_evaluator_reproduces_its_definitions():
    records = [
        # joined text "the jim cameron film" contains "jim cameron": hit; 1 of 2 gold found; 2 predictions
        {"answers": ["Jim Cameron", "Kathryn Bigelow"], "prediction": ["The Jim Cameron", "film"]},
        {"answers": ["Paris"], "prediction": []},
    ]
    m = evaluate_rog(records)
    assert m.questions == 2
    assert m.hit == pytest.approx(0.5)
    assert m.accuracy == pytest.approx(0.25)
    assert m.precision == pytest.approx(0.25)  # (1/2 + 0) / 2
    assert m.recall == pytest.approx(0.25)
    assert m.f1 == pytest.approx((2 * 0.5 * 0.5 / 1.0) / 2)


def test_a_topic_entity_the_store_lacks_is_named_in_the_record_and_counted(tmp_path):
    questions = [
        Question("q0", "question 0", ["e1"], ["e0"], ["e1"]),
        Question("q1", "question 1", ["e1"], ["ghost"], ["e1"]),
        Question("q2", "question 2", ["e0"], ["e1", "bad\nid"], ["e0"]),  # an id no store can hold
    ]
    store = ReferenceStore([Triple("e0", "r", "e1")])
    out = tmp_path / "p.jsonl"
    summary = run_method(_Echo(store, Models()), questions, out, progress=False)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert "missing_topics" not in records[0] and "warning" not in records[0]
    assert records[1]["missing_topics"] == ["ghost"]
    assert records[1]["warning"] == "topic entity ghost not in the store: is the store this dataset's graph?"
    assert records[2]["missing_topics"] == ["bad\nid"]
    # the look-up is the run protocol's own: the method's store calls are what it made, one per batch
    assert [r["calls"]["store"] for r in records] == [0.5, 0.5, 1.0]
    assert summary["missing_topics"] == 2
    assert "2 of 3 questions have a topic entity that is not in the store" in format_summary(summary)


def _director_questions(tmp_path: Path, kb: str, questions: list[str]) -> tuple[str, Path, str]:
    """A MetaQA-shaped KB loaded into an embedded store, a question file of movie_to_director
    ``questions`` and the tiny language model (the cheapest: its plans do not matter here)."""
    from engine.cli.main import main
    from tests.tiny_lm import make_tiny_lm

    (tmp_path / "kb.txt").write_text(kb)
    qa = tmp_path / "qa_dev.txt"
    qa.write_text("".join(q + "\n" for q in questions))
    (tmp_path / "qa_dev_qtype.txt").write_text("movie_to_director\n" * len(questions))
    store = str(tmp_path / "store")
    assert main(["load", str(tmp_path / "kb.txt"), "--format", "metaqa", "--store", store, "--no-progress"]) == 0
    return store, qa, make_tiny_lm(tmp_path / "tiny")


def test_the_command_line_run_reports_a_topic_entity_the_store_lacks(tmp_path, capsys):
    from engine.cli.main import main

    store, qa, model = _director_questions(tmp_path, "Titanic|directed_by|James Cameron\nAvatar|directed_by|James Cameron\n",
                                           ["who directed [Titanic]\tJames Cameron", "who directed [Nosferatu]\tF. W. Murnau"])
    out = tmp_path / "p.jsonl"
    capsys.readouterr()
    args = ["rog", "run", "--dataset", str(qa), "--split", "all", "--store", store, "--model", model, "--mode", "paths",
            "--max-hops", "1", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    assert "1 of 2 questions have a topic entity that is not in the store" in capsys.readouterr().out
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("missing_topics") for r in records] == [None, ["Nosferatu"]]
    assert records[1]["prediction"] == [] and "Nosferatu not in the store" in records[1]["warning"]


def test_an_out_that_is_an_input_of_the_command_or_a_folder_is_refused_before_any_work(tmp_path, capsys):
    from engine.cli.main import main

    store, qa, model = _director_questions(tmp_path, "Titanic|directed_by|James Cameron\n", ["who directed [Titanic]\tJames Cameron"])
    qtype = tmp_path / "qa_dev_qtype.txt"
    folder = tmp_path / "results"
    folder.mkdir()
    kept = {path: path.read_bytes() for path in (qa, qtype)}
    for command in ("run", "export-training"):
        for out, says in [(qa, "is the input"), (qtype, "is the input"), (tmp_path / "store", "is the input"),
                          (tmp_path / "store" / "sub" / "out.jsonl", "is inside the input folder"),
                          (tmp_path, "holds the input"), (folder, "is a folder: give the path of a file")]:
            code = main(["rog", command, "--dataset", str(qa), "--split", "all", "--store", store, "--model", model,
                         "--out", str(out), "--no-progress"])
            err = capsys.readouterr().err
            assert code == 2 and says in err and repr(str(out)) in err, err
    assert {path: path.read_bytes() for path in kept} == kept
    assert not list(tmp_path.rglob("*.part")) and not any(folder.iterdir()) and not (tmp_path / "store" / "sub").exists()


def test_a_failed_command_line_run_leaves_an_existing_output_file_as_it_was(tmp_path, capsys):
    from engine.cli.main import main

    store, qa, model = _director_questions(tmp_path, "Titanic|directed_by|James Cameron\n", ["who directed [Titanic]\tJames Cameron"])
    out = tmp_path / "out.jsonl"
    common = ["--dataset", str(qa), "--split", "all", "--store", store, "--model", model, "--out", str(out), "--no-progress"]
    out.write_text("earlier results\n")
    # a plan longer than the engine walks: refused with the other options, before anything is written
    for command in ("run", "export-training"):
        capsys.readouterr()
        assert main(["rog", command, *common, "--max-hops", "1000"]) == 2
        assert "option max_hops (--max-hops) = 1000: use an integer from 1 to 8" in capsys.readouterr().err
        assert out.read_text() == "earlier results\n"
    # a run that fails once it is answering: the predictions went to out.jsonl.part, which goes too
    qa.write_text("who directed [Titanic]" + " and" * 3000 + "\tJames Cameron\n")
    assert main(["rog", "run", *common, "--mode", "paths", "--max-hops", "1"]) == 2
    assert "is longer than the 8,192 that" in capsys.readouterr().err
    assert out.read_text() == "earlier results\n" and sorted(p.name for p in tmp_path.glob("out*")) == ["out.jsonl"]
    # one that fails after answering a question keeps that answer in out.jsonl.part, and says so
    qa.write_text("who directed [Titanic]\tJames Cameron\n" "who directed [Titanic]" + " and" * 3000 + "\tJames Cameron\n")
    (tmp_path / "qa_dev_qtype.txt").write_text("movie_to_director\n" * 2)
    assert main(["rog", "run", *common, "--mode", "paths", "--max-hops", "1", "--batch-size", "1"]) == 2
    assert f"kgqa: warning: {out} is left as it was; what was written before the failure is in {out}.part" in capsys.readouterr().err
    assert out.read_text() == "earlier results\n"
    assert [json.loads(line)["question"] for line in (tmp_path / "out.jsonl.part").read_text().splitlines()] == ["who directed [Titanic]"]
    # one that succeeds replaces it
    qa.write_text("who directed [Titanic]\tJames Cameron\n")
    (tmp_path / "qa_dev_qtype.txt").write_text("movie_to_director\n")
    assert main(["rog", "run", *common, "--mode", "paths", "--max-hops", "1"]) == 0
    assert [json.loads(line)["question"] for line in out.read_text().splitlines()] == ["who directed [Titanic]"]
