"""Question sets by name and by file."""
from __future__ import annotations

import pytest

from engine.errors import InvalidInputError
from loaders.datasets import load_dataset


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
