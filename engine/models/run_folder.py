"""What a fine-tuning run's folder (``kgqa lm train --out``) holds besides its model: the
checkpoint it resumes from and the summary written once the model is saved; and which folders a
trained model may be saved to at all (:func:`check_model_folder`, for every trainer). Apart from
:mod:`engine.models.sft` so that loading a model can tell an unfinished run without importing
the trainer."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from engine.errors import InvalidInputError
from engine.outputs import refuse_input_as_output, save_stopped
from engine.stores.oxigraph import store_holding

#: written last, after the model: its presence says the run finished
SUMMARY_FILE = "sft-summary.json"
CHECKPOINT_DIR = "checkpoint"


def checkpoint_dirs(out: Path) -> tuple[Path, Path, Path]:
    """A run's checkpoint, the one being written beside it, and the one it replaces."""
    return out / CHECKPOINT_DIR, out / f"{CHECKPOINT_DIR}.partial", out / f"{CHECKPOINT_DIR}.old"


def find_checkpoint(out_dir: str | Path) -> Path | None:
    """The whole checkpoint of a run's ``out_dir`` (or that folder itself): ``checkpoint/``, or
    the one it replaces (``checkpoint.old/``) when a save was cut between its two renames."""
    current, _, old = checkpoint_dirs(Path(out_dir))
    for candidate in (Path(out_dir), current, old):
        if (candidate / "state.json").is_file():
            return candidate
    return None


def unfinished(out_dir: str | Path) -> bool:
    """Whether ``out_dir`` is a run that has not finished: a checkpoint and no summary (a run
    stopped in training, or while it saved the model), or the model's save stopped part way
    (its staging folder left, :func:`engine.outputs.save_stopped`)."""
    out = Path(out_dir)
    current, _, old = checkpoint_dirs(out)
    return save_stopped(out) or (
        not (out / SUMMARY_FILE).is_file() and any((c / "state.json").is_file() for c in (current, old)))


def check_model_folder(out: str | os.PathLike[str], base: str | os.PathLike[str] | None, *, ours: Callable[[Path], bool],
                       run: str) -> None:
    """Refuse, before any training, a ``--out`` a trained model cannot be saved to without
    destroying something: a file, the base model's folder (a folder inside it, or one holding
    it), a folder inside a store's, or a folder holding anything but an earlier output of ``run``
    ("fine-tuning"; ``ours(folder)`` says whether the folder is one): a model of the user's, a
    store, a home folder."""
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise InvalidInputError(f"the model directory {str(folder)!r} is a file: give --out a new folder")
    if base is not None and Path(base).exists():
        refuse_input_as_output(folder, [base], what="the model directory", option="--out")
    store = store_holding(folder)
    if store is not None:
        raise InvalidInputError(f"the model directory {str(folder)!r} is inside the store folder {store!r}: saving there "
                                "would mix the model into the store's files; give --out a folder outside it")
    if folder.is_dir() and any(folder.iterdir()) and not ours(folder):
        raise InvalidInputError(f"the model directory {str(folder)!r} holds files that no {run} wrote: saving there would "
                                "overwrite them; give --out a new or empty folder")
