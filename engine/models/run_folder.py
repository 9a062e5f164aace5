"""What a fine-tuning run's folder (``kgqa lm train --out``) holds besides its model: the
checkpoint it resumes from and the summary written once the model is saved. Apart from
:mod:`engine.models.sft` so that loading a model can tell an unfinished run without importing
the trainer."""
from __future__ import annotations

from pathlib import Path

from engine.outputs import save_stopped

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
