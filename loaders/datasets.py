"""Question sets by name or by file: MetaQA and PathQuestion from the datasets directory
(``$KGQA_DATA``, or ``shared/data`` beside a kgqa-engine checkout), sets that a command builds
(the WebQSP slice over FB15k-237) from the build directory, or any file."""
from __future__ import annotations

import os
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from engine.errors import InvalidInputError, KGQAWarning
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


#: the command that builds the slice of WebQSP's training questions, and its chains beside it
_TRAIN_SLICE_BUILD = "kgqa webqsp build --webqsp ../shared/data/webqsp/WebQSP.train.json.gz --kb ../shared/data/fb15k237"
#: dataset name -> (its file under the build directory, the command that builds it)
BUILT_DATASETS = {
    "webqsp-fb15k237": ("webqsp-fb15k237/questions.jsonl", _TRAIN_SLICE_BUILD),
    # questions left out of the slice for a topic entity the KB lacks, with their gold relation path:
    # a planner's training questions, written by the slice's build beside it
    "webqsp-fb15k237-chains": ("webqsp-fb15k237/chains.jsonl", _TRAIN_SLICE_BUILD),
    "webqsp-fb15k237-test": (
        "webqsp-fb15k237-test/questions.jsonl",
        "kgqa webqsp build --webqsp WebQSP.test.json --kb ../shared/data/fb15k237",
    ),
}


def built_together(name: str) -> list[str]:
    """The built datasets one build writes with ``name``: those in its folder."""
    folder = Path(BUILT_DATASETS[name][0]).parent
    return [other for other, (file, _) in BUILT_DATASETS.items() if Path(file).parent == folder]


def built_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where built datasets go: ``override``, else ``$KGQA_BUILT``, else ``kgqa-data/datasets``."""
    return Path(override or os.environ.get("KGQA_BUILT") or Path("kgqa-data") / "datasets")


#: the environment variable that names the datasets directory
DATA_ENV = "KGQA_DATA"
#: where this code runs from: a checkout's loaders/, or an installed copy's
SOURCE = Path(__file__).resolve().parent


def _checkout(start: Path) -> Path | None:
    """The kgqa-engine checkout that holds ``start`` (the folder of this project's pyproject.toml)."""
    for folder in (start, *start.parents):
        project = folder / "pyproject.toml"
        if project.is_file() and 'name = "kgqa-engine"' in project.read_text(encoding="utf-8", errors="replace"):
            return folder
    return None


def data_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The datasets directory: ``override``, else ``$KGQA_DATA``, else ``shared/data`` beside the
    kgqa-engine checkout the working directory is in, else beside the checkout this code runs from
    (an installed copy has none unless its environment sits inside one). Raises InvalidInputError
    naming ``$KGQA_DATA`` when there is none."""
    given = override or os.environ.get(DATA_ENV)
    if given:
        if not Path(given).is_dir():
            origin = "the datasets directory given" if override else f"${DATA_ENV}"
            raise InvalidInputError(f"{origin} ({given}) is not a directory: name the folder that holds metaqa/, pathquestion/ …")
        return Path(given)
    looked: dict[str, None] = {}
    for start in (Path.cwd(), SOURCE):
        root = _checkout(start)
        if root is not None:
            candidate = root.parent / "shared" / "data"
            if candidate.is_dir():
                return candidate
            looked[str(candidate)] = None
    where = f"it is not at {' or '.join(looked)}" if looked else "this is not run from a kgqa-engine checkout"
    raise InvalidInputError(f"no datasets directory ({where}): set ${DATA_ENV} to the folder that holds metaqa/, pathquestion/ …")


def load_dataset(name_or_path: str | os.PathLike[str], data_directory: str | os.PathLike[str] | None = None) -> list[Question]:
    """Questions of a named set (:data:`DATASETS`, :data:`BUILT_DATASETS` once built) or of a
    file: RoG JSONL/parquet, PathQuestion (``PQ-*.txt``), else MetaQA (``qa_*.txt`` with its
    ``*_qtype.txt`` beside it when present). A file without questions is refused."""
    path = dataset_path(name_or_path, data_directory)
    if path.suffix in (".jsonl", ".parquet", ".json"):
        questions = read_rog_questions(path)
    elif path.name.upper().startswith(("PQ-", "PQL")):
        questions = read_pathquestion(path)
    else:
        qtype = _qtype_file(path)
        questions = read_metaqa_questions(path, qtype if qtype.is_file() else None)
    if not questions:
        raise InvalidInputError(f"question file {str(path)!r} holds no questions (it is empty, or blank lines only): "
                                "give a file with questions")
    return questions


def dataset_files(name_or_path: str | os.PathLike[str], data_directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """The files :func:`load_dataset` reads for ``name_or_path`` (a MetaQA file's question types
    too), for a command to refuse writing over them."""
    path = dataset_path(name_or_path, data_directory)
    return [path, _qtype_file(path)]


def _qtype_file(path: Path) -> Path:
    return path.with_name(path.stem + "_qtype.txt")


def dataset_path(name_or_path: str | os.PathLike[str], data_directory: str | os.PathLike[str] | None = None) -> Path:
    """The question file of a named set or the file given, refused (naming it) where it is not there."""
    known = ", ".join([*DATASETS, *BUILT_DATASETS])
    if not str(name_or_path).strip():
        raise InvalidInputError(f"no dataset named (the name is empty): give one of {known} or a question file")
    if str(name_or_path) in BUILT_DATASETS:
        file, command = BUILT_DATASETS[str(name_or_path)]
        path = built_dir() / file
        if not path.is_file():
            raise InvalidInputError(f"dataset {name_or_path!r} is not built (no {path}): build it with {command}")
    elif str(name_or_path) in DATASETS:
        path = data_dir(data_directory) / DATASETS[str(name_or_path)]
        if not path.is_file():
            raise InvalidInputError(f"dataset {name_or_path!r} is not at {path}: set ${DATA_ENV} or give the file path")
    else:
        path = Path(name_or_path)
        if path.is_dir():
            raise InvalidInputError(f"question file {str(path)!r} is a directory: give one file of questions")
        if not path.is_file() and (path.suffix or len(path.parts) > 1):  # named as a file, not as a dataset
            raise InvalidInputError(f"question file {str(path)!r} does not exist: check the path, or give one of {known}")
        if not path.is_file():
            raise InvalidInputError(
                f"unknown dataset {str(name_or_path)!r}: give one of {known} or a question file "
                "(RoG .jsonl/.parquet, PathQuestion PQ-*.txt, MetaQA qa_*.txt)"
            )
    return path


T = TypeVar("T")

#: the parts of :func:`split_questions`
SPLITS = ("train", "val", "test", "all")
#: the seed of every command's train/val/test split. It is not the sample's seed: drawing another
#: sample of training questions (``--seed 1``) must never move a held-out test question into
#: ``train``, so the split changes only when a user names another one (``--split-seed``).
SPLIT_SEED = 0


def _wording_group(question: object, index: int) -> object:
    """Questions that are wordings of one fact fall on one side of a split: PathQuestion
    writes each (topic, path, answer) walk several ways, so its ``path_entities`` name the
    group; any other question is a group of its own."""
    walk = getattr(question, "path_entities", None)
    return ("walk", tuple(walk)) if walk else ("question", index)


def split_questions(
    questions: Sequence[T], seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1
) -> dict[str, list[T]]:
    """A seeded shuffle cut into held-out ``test``, ``val`` and the rest ``train`` (and ``all``).
    Wordings of one fact (see :func:`_wording_group`) are shuffled and cut as one, so a
    held-out question never has a paraphrase in training; where every question is its own
    group this is a plain shuffle of the questions."""
    if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
        raise InvalidInputError(f"invalid split fractions val={val_fraction}, test={test_fraction}")
    groups: dict[object, list[int]] = {}
    for i, q in enumerate(questions):
        groups.setdefault(_wording_group(q, i), []).append(i)
    order = list(groups.values())
    random.Random(seed).shuffle(order)
    n_test, n_val = round(len(questions) * test_fraction), round(len(questions) * val_fraction)
    parts: dict[str, list[T]] = {"test": [], "val": [], "train": []}
    for group in order:  # whole groups, each part filled to its share of the questions
        part = "test" if len(parts["test"]) < n_test else "val" if len(parts["val"]) < n_val else "train"
        parts[part] += [questions[i] for i in group]
    return {**parts, "all": list(questions)}


@dataclass(frozen=True)
class QuestionSet:
    """Which questions a command takes: the ``split`` part of ``dataset``'s train/val/test split
    (seeded by ``split_seed``), a sample of ``sample`` of them (seeded by ``seed``), the first
    ``limit``. The split depends on ``split_seed`` alone, so another ``seed`` draws another
    sample but never moves a question between train and test."""

    dataset: str
    split: str = "test"
    sample: int | None = None
    limit: int | None = None
    seed: int = 0
    split_seed: int = SPLIT_SEED

    def select(self) -> list[Question]:
        return select_questions(self.dataset, self.split, sample=self.sample, limit=self.limit, seed=self.seed,
                                split_seed=self.split_seed)


def select_questions(
    dataset: str | os.PathLike[str],
    split: str = "test",
    *,
    sample: int | None = None,
    limit: int | None = None,
    seed: int = 0,
    split_seed: int = SPLIT_SEED,
    data_directory: str | os.PathLike[str] | None = None,
) -> list[Question]:
    """The questions a method run answers: the ``split`` part of the dataset's split (seeded by
    ``split_seed``), then a sample of ``sample`` of them (seeded by ``seed``), then the first ``limit``."""
    return select_subset(load_dataset(dataset, data_directory), split, sample=sample, limit=limit, seed=seed, split_seed=split_seed)


def select_subset(
    items: Sequence[T], split: str = "test", *, sample: int | None = None, limit: int | None = None, seed: int = 0,
    split_seed: int = SPLIT_SEED,
) -> list[T]:
    """:func:`select_questions` over any list of items (e.g. WebQSP's raw questions)."""
    if split not in SPLITS:
        raise InvalidInputError(f"unknown split {split!r}: use {', '.join(SPLITS)}")
    for name, value in (("sample", sample), ("limit", limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InvalidInputError(f"invalid {name} {value!r} (--{name}): use a whole number, 0 or more")
    chosen = split_questions(items, split_seed)[split]
    if sample is not None and sample > len(chosen):
        warnings.warn(KGQAWarning(f"--sample {sample} is more than the {len(chosen)} questions of split {split!r}: "
                                  f"taking all {len(chosen)}"), stacklevel=2)
    if sample is not None:
        chosen = random.Random(seed).sample(chosen, min(sample, len(chosen)))
    return chosen[:limit] if limit is not None else chosen
