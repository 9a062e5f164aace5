"""Question sets by name and by file."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from engine.errors import InvalidInputError
from loaders import datasets
from loaders.datasets import data_dir, load_dataset


def test_named_sets_come_from_the_shared_data(shared_data):
    one_hop = load_dataset("metaqa-1hop", shared_data)
    assert len(one_hop) == 9992 and all(q.qtype for q in one_hop)  # qtypes read from beside the file
    assert len(load_dataset("pathquestion-2h", shared_data)) == 1908
    assert len(load_dataset(shared_data / "pathquestion" / "PQ-3H.txt")) == 5198


def test_unknown_names_and_missing_files_say_what_to_give(tmp_path):
    with pytest.raises(InvalidInputError, match="metaqa-1hop"):
        load_dataset("metaqa-1")
    with pytest.raises(InvalidInputError, match="is not at"):
        load_dataset("metaqa-2hop", tmp_path)
    # a name written as a file is looked for as one, and said to be missing, not an unknown dataset
    for missing in (tmp_path / "questions.jsonl", "qa_test.txt"):
        with pytest.raises(InvalidInputError, match=re.escape(f"question file {str(missing)!r} does not exist")):
            load_dataset(missing)
    with pytest.raises(InvalidInputError, match=re.escape(f"question file {str(tmp_path)!r} is a directory")):
        load_dataset(tmp_path)


def _checkout(root: Path, data: bool) -> Path:
    """A folder laid out like a kgqa-engine checkout, with ``../shared/data`` beside it when ``data``."""
    (root / "repo" / "sub").mkdir(parents=True)
    (root / "repo" / "pyproject.toml").write_text('[project]\nname = "kgqa-engine"\n')
    if data:
        (root / "shared" / "data").mkdir(parents=True)
    return root / "repo"


def test_data_dir_is_kgqa_data_when_set(tmp_path, monkeypatch):
    monkeypatch.setenv("KGQA_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    (tmp_path / "other").mkdir()
    assert data_dir(tmp_path / "other") == tmp_path / "other"  # an explicit folder wins
    monkeypatch.setenv("KGQA_DATA", str(tmp_path / "missing"))
    with pytest.raises(InvalidInputError, match=r"\$KGQA_DATA \(.*missing\) is not a directory"):
        data_dir()


def test_data_dir_beside_the_working_checkout_then_the_source_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("KGQA_DATA", raising=False)
    working = _checkout(tmp_path / "a", data=True)
    source = _checkout(tmp_path / "b", data=True)
    monkeypatch.setattr(datasets, "SOURCE", source / "sub")
    monkeypatch.chdir(working / "sub")
    assert data_dir() == tmp_path / "a" / "shared" / "data"
    monkeypatch.chdir(tmp_path)  # outside any checkout: the one the code runs from
    assert data_dir() == tmp_path / "b" / "shared" / "data"


def test_no_data_dir_names_kgqa_data(tmp_path, monkeypatch):
    monkeypatch.delenv("KGQA_DATA", raising=False)
    monkeypatch.setattr(datasets, "SOURCE", tmp_path / "site-packages" / "loaders")  # an installed copy
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match=r"not run from a kgqa-engine checkout\): set \$KGQA_DATA"):
        data_dir()
    working = _checkout(tmp_path / "a", data=False)
    monkeypatch.chdir(working)
    expected = tmp_path / "a" / "shared" / "data"
    with pytest.raises(InvalidInputError, match=rf"it is not at {expected}\): set \$KGQA_DATA"):
        data_dir()
    with pytest.raises(InvalidInputError, match=r"set \$KGQA_DATA or give the file path"):
        load_dataset("metaqa-1hop", tmp_path)


def test_split_keeps_wordings_of_one_walk_together_and_plain_questions_as_a_shuffle():
    from loaders.datasets import split_questions
    from loaders.questions import Question

    walks = [Question(f"w{i}.{k}", f"wording {k} of walk {i}", ["a"], ["t"], [], path=["r"], path_entities=[f"t{i}", "a"])
             for i in range(30) for k in range(3)]
    parts = split_questions(walks, seed=3)
    assert sum(len(parts[p]) for p in ("train", "val", "test")) == len(walks)
    side = {q.id.split(".")[0]: p for p in ("train", "val", "test") for q in parts[p]}
    for p in ("train", "val", "test"):  # every wording of a walk on the side of its first
        assert all(side[q.id.split(".")[0]] == p for q in parts[p])
    assert 9 <= len(parts["test"]) <= 11 and parts["train"]
    plain = [Question(f"q{i}", f"q{i}", ["a"], ["t"], []) for i in range(50)]
    order = list(range(50))
    random.Random(7).shuffle(order)  # one group per question: the seeded shuffle, cut 5/5/40
    got = split_questions(plain, seed=7)
    assert [q.id for q in got["test"]] == [f"q{i}" for i in order[:5]]
    assert [q.id for q in got["train"]] == [f"q{i}" for i in order[10:]]


def test_another_sample_seed_never_moves_a_test_question_into_train():
    # drawing another sample of training questions (`export-training --seed 1`) must not train on
    # what `run --split test` (seed 0) reports on; only --split-seed makes a new split
    from loaders.datasets import select_subset

    items = list(range(500))
    test = set(select_subset(items, "test"))
    assert len(test) == 50
    for seed in range(1, 6):
        train = select_subset(items, "train", sample=300, seed=seed)
        assert not test & set(train)
        assert set(select_subset(items, "test", seed=seed)) == test
    assert set(select_subset(items, "test", split_seed=1)) != test
    a, b = (select_subset(items, "test", sample=10, seed=s) for s in (2, 3))
    assert set(a) <= test and set(b) <= test and a != b  # the seed still draws the sample


@pytest.mark.parametrize("given, says", [
    ({"sample": -1}, "invalid sample -1 (--sample): use a whole number, 0 or more"),
    ({"sample": "5"}, "invalid sample '5' (--sample)"),  # from Python: never compared as text
    ({"limit": 2.5}, "invalid limit 2.5 (--limit)"),
    ({"limit": True}, "invalid limit True (--limit)"),
])
def test_a_sample_or_limit_that_is_not_a_count_is_named(given, says):
    from loaders.datasets import select_subset

    with pytest.raises(InvalidInputError, match=re.escape(says)):
        select_subset(list(range(50)), "test", **given)
    assert select_subset(list(range(50)), "test", sample=0) == []


@pytest.mark.parametrize("name, text", [("qa_dev.txt", ""), ("questions.jsonl", "\n\n"), ("PQ-2H.txt", "")])
def test_a_question_file_without_questions_is_refused(name, text, tmp_path):
    """It said "no questions selected …: a small question file may need --split all"."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=re.escape(f"question file {str(path)!r} holds no questions")):
        load_dataset(path)


def test_an_empty_dataset_name_is_named_as_one():
    """It was taken as the folder '.'."""
    with pytest.raises(InvalidInputError, match="no dataset named \\(the name is empty\\): give one of metaqa-1hop"):
        load_dataset("")


def test_a_sample_larger_than_the_split_says_it_takes_them_all():
    from engine.errors import KGQAWarning
    from loaders.datasets import select_subset

    with pytest.warns(KGQAWarning, match=re.escape("--sample 80 is more than the 50 questions of split 'all': taking all 50")):
        assert len(select_subset(list(range(50)), "all", sample=80)) == 50


@pytest.mark.parametrize("option", ["--sample", "--limit"])
def test_a_sample_or_limit_of_no_questions_is_refused_on_the_command_line(option, tmp_path, capsys):
    from engine.cli.main import main

    path = tmp_path / "qa_dev.txt"
    path.write_text("what is [x]\ta\n")
    with pytest.raises(SystemExit) as stopped:  # argparse's way out, before any model or store opens
        main(["rog", "run", "--dataset", str(path), "--split", "all", option, "0", "--out", str(tmp_path / "p.jsonl")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and f"argument {option}: '0': give a whole number of at least 1" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qa_dev.txt"]
