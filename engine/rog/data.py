"""Question sets by name or path: MetaQA and PathQuestion from ``../shared/data``, or any file."""
from __future__ import annotations

import os
from pathlib import Path

from engine.errors import InvalidInputError
from loaders.readers import (
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


def data_dir() -> Path:
    """``$KGQA_DATA``, else ``../shared/data`` beside the repository."""
    return Path(os.environ.get("KGQA_DATA") or Path(__file__).resolve().parents[3] / "shared" / "data")


def load_dataset(name_or_path: str) -> list[Question]:
    """Questions of a named set or of a file: RoG JSONL/parquet, PathQuestion (``PQ-*``), else MetaQA."""
    if name_or_path in DATASETS:
        path = data_dir() / DATASETS[name_or_path]
        if not path.is_file():
            raise InvalidInputError(f"dataset {name_or_path!r} is not at {path}: set $KGQA_DATA or give the file path")
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise InvalidInputError(
                f"unknown dataset {name_or_path!r}: give one of {', '.join(DATASETS)} or a question file "
                "(RoG .jsonl/.parquet, PathQuestion PQ-*.txt, MetaQA qa_*.txt)"
            )
    if path.suffix in (".jsonl", ".parquet", ".json"):
        return read_rog_questions(path)
    if path.name.upper().startswith(("PQ-", "PQL")):
        return read_pathquestion(path)
    return read_metaqa_questions(path)
