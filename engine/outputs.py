"""Files a command writes: never over one of its inputs, and whole or not at all."""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine.errors import InvalidInputError, KGQAWarning


def refuse_input_as_output(output: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]], *,
                           what: str, option: str) -> None:
    """Refuse an ``output`` that is one of ``inputs`` (under any name: a link, ``..``), or a
    folder that holds one: writing it would destroy the input. ``what`` names the output in the
    message ("the rejects file"), ``option`` is where to give another (``--out``)."""
    out = Path(output)
    if not out.exists():
        return
    for given in inputs:
        path = Path(given)
        if not path.exists():
            continue
        if os.path.samefile(out, path):
            raise InvalidInputError(f"{what} {str(out)!r} is the input {str(path)!r}: writing there would destroy "
                                    f"the input; give {option} another path")
        if out.is_dir() and path.resolve().is_relative_to(out.resolve()):
            raise InvalidInputError(f"{what} {str(out)!r} holds the input {str(path)!r}: writing there would destroy "
                                    f"the input; give {option} a folder of its own")


@contextlib.contextmanager
def written_whole(path: str | os.PathLike[str], *, keep_partial: bool = False) -> Iterator[Path]:
    """A path to write ``path`` through: ``<path>.part`` beside it (its folder made where
    missing), which replaces ``path`` when the block ends and is removed when the block fails,
    so that a failed command leaves what was at ``path`` as it was. With ``keep_partial``, what
    the block wrote before it failed stays in ``<path>.part``, with a warning that says so: the
    answers of a long run stopped part way are worth keeping. A ``path`` that is a folder is
    refused before the block runs."""
    target = Path(path)
    if target.is_dir():  # found before the work, not when its result cannot replace the folder
        raise InvalidInputError(f"{str(target)!r} is a folder: give the path of a file to write")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    try:
        yield partial
        os.replace(partial, target)
    except BaseException:
        if keep_partial and partial.is_file() and partial.stat().st_size:
            warnings.warn(f"{target} is left as it was; what was written before the failure is in {partial}",
                          KGQAWarning, stacklevel=3)
        else:
            with contextlib.suppress(OSError):
                partial.unlink()
        raise
