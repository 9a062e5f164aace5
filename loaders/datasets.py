"""Question sets by name or by file: MetaQA and PathQuestion from ``../shared/data``, or any file."""
from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from engine.errors import InvalidInputError
from loaders.questions import (
    Question,
    read_metaqa_questions,
    read_pathquestion,
    read_rog_questions,
)

#: dataset name -> its file under the data directory
DATASETS = {
    "metaqa-1hop": "metaqa/1-hop/qa_dev.txt",
    "metaqa-2hop": "metaqa/2-hop/qa_dev.txt",
    "metaqa-3hop": "metaqa/3-hop/qa_dev.txt",
    "pathquestion-2h": "pathquestion/PQ-2H.txt",
    "pathquestion-3h": "pathquestion/PQ-3H.txt",
}


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """``override``, else ``$KGQA_DATA``, else ``../shared/data`` beside the repository."""
    return Path(override or os.environ.get("KGQA_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def load_dataset(name_or_path: str | os.PathLike[str], data_directory: str | os.PathLike[str] | None = None) -> list[Question]:
    """Questions of a named set (:data:`DATASETS`) or of a file: RoG JSONL/parquet, PathQuestion
    (``PQ-*.txt``), else MetaQA (``qa_*.txt`` with its ``*_qtype.txt`` beside it when present)."""
    if str(name_or_path) in DATASETS:
        path = data_dir(data_directory) / DATASETS[str(name_or_path)]
        if not path.is_file():
            raise InvalidInputError(f"dataset {name_or_path!r} is not at {path}: set $KGQA_DATA or give the file path")
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise InvalidInputError(
                f"unknown dataset {str(name_or_path)!r}: give one of {', '.join(DATASETS)} or a question file "
                "(RoG .jsonl/.parquet, PathQuestion PQ-*.txt, MetaQA qa_*.txt)"
            )
    if path.suffix in (".jsonl", ".parquet", ".json"):
        return read_rog_questions(path)
    if path.name.upper().startswith(("PQ-", "PQL")):
        return read_pathquestion(path)
    qtype = path.with_name(path.stem + "_qtype.txt")
    return read_metaqa_questions(path, qtype if qtype.is_file() else None)


T = TypeVar("T")

#: the parts of :func:`split_questions`
SPLITS = ("train", "val", "test", "all")


def split_questions(
    questions: Sequence[T], seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1
) -> dict[str, list[T]]:
    """A seeded shuffle cut into held-out ``test``, ``val`` and the rest ``train`` (and ``all``)."""
    if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
        raise InvalidInputError(f"invalid split fractions val={val_fraction}, test={test_fraction}")
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    n_test, n_val = round(len(order) * test_fraction), round(len(order) * val_fraction)
    pick = lambda part: [questions[i] for i in part]
    return {
        "test": pick(order[:n_test]),
        "val": pick(order[n_test : n_test + n_val]),
        "train": pick(order[n_test + n_val :]),
        "all": list(questions),
    }


def select_questions(
    dataset: str | os.PathLike[str],
    split: str = "test",
    *,
    sample: int | None = None,
    limit: int | None = None,
    seed: int = 0,
    data_directory: str | os.PathLike[str] | None = None,
) -> list[Question]:
    """The questions a method run answers: the ``split`` part of the dataset's seeded split,
    then a seeded sample of ``sample`` of them, then the first ``limit``."""
    return select_subset(load_dataset(dataset, data_directory), split, sample=sample, limit=limit, seed=seed)


def select_subset(items: Sequence[T], split: str = "test", *, sample: int | None = None, limit: int | None = None, seed: int = 0) -> list[T]:
    """:func:`select_questions` over any list of items (e.g. WebQSP's raw questions)."""
    if split not in SPLITS:
        raise InvalidInputError(f"unknown split {split!r}: use {', '.join(SPLITS)}")
    for name, value in (("sample", sample), ("limit", limit)):
        if value is not None and value < 0:
            raise InvalidInputError(f"--{name} must be 0 or more, not {value}")
    chosen = split_questions(items, seed)[split]
    if sample is not None:
        chosen = random.Random(seed).sample(chosen, min(sample, len(chosen)))
    return chosen[:limit] if limit is not None else chosen
