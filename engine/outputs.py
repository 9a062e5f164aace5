"""Files a command writes: never over one of its inputs, and whole or not at all."""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from engine.errors import InvalidInputError, KGQAWarning

#: the folder :func:`folder_saved_whole` saves a folder's files in before they replace its own
STAGING_DIR = ".saving"


def refuse_input_as_output(output: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]], *,
                           what: str, option: str) -> None:
    """Refuse an ``output`` that is one of ``inputs`` (under any name: a link, ``..``), a folder
    that holds one, or a path inside an input folder (there or not yet): writing it would
    destroy or change the input. ``what`` names the output in the message ("the rejects file"),
    ``option`` is where to give another (``--out``)."""
    out = Path(output)
    for given in inputs:
        path = Path(given)
        if not path.exists():
            continue
        if out.exists() and os.path.samefile(out, path):
            raise InvalidInputError(f"{what} {str(out)!r} is the input {str(path)!r}: writing there would destroy "
                                    f"the input; give {option} another path")
        if path.is_dir() and out.resolve().is_relative_to(path.resolve()):
            raise InvalidInputError(f"{what} {str(out)!r} is inside the input folder {str(path)!r}: writing there "
                                    f"would change the input; give {option} a path outside it")
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


@contextlib.contextmanager
def folder_saved_whole(folder: str | os.PathLike[str]) -> Iterator[Path]:
    """A folder to save the files of ``folder`` in: ``folder/.saving``, emptied first. When the
    block ends, each file saved there replaces the one of its name in ``folder`` and the staging
    folder is removed; when the block fails, the staging folder is removed and ``folder`` is left
    as it was. A save stopped while its files replace the folder's own leaves the staging folder,
    which says so (:func:`save_stopped`) until the next save clears it."""
    target = Path(folder)
    staging = target / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    for file in sorted(p for p in staging.rglob("*") if p.is_file()):
        destination = target / file.relative_to(staging)
        destination.parent.mkdir(parents=True, exist_ok=True)
        os.replace(file, destination)
    shutil.rmtree(staging)


def save_stopped(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` holds the staging folder of a :func:`folder_saved_whole` that did not
    finish (its files may be half old, half new), or is one."""
    path = Path(folder)
    return path.name == STAGING_DIR or (path / STAGING_DIR).is_dir()


@contextlib.contextmanager
def folder_replaced_whole(path: str | os.PathLike[str], *, keep: Callable[[str], bool]) -> Iterator[Path]:
    """A new folder to write the folder ``path`` through, beside it (so that renaming it is
    atomic), which replaces ``path`` when the block ends and is removed when the block fails:
    a failed command leaves the earlier folder as it was. The entries of the earlier folder
    whose names ``keep`` accepts are moved into the new one once it is in place."""
    target = Path(os.path.realpath(path))  # a link to a folder keeps pointing at it
    target.parent.mkdir(parents=True, exist_ok=True)
    work = _new_sibling(target, "part")
    try:
        yield work
        if target.is_dir():
            shutil.copymode(target, work)
            aside = _swap(target, work)
        else:
            os.rename(work, target)
            return
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    for name in sorted(os.listdir(aside)):
        if keep(name):
            os.rename(aside / name, target / name)  # a failure here leaves the rest in ``aside``, named in the error
    shutil.rmtree(aside)


def _new_sibling(target: Path, tag: str) -> Path:
    """A new empty folder beside ``target``, hidden, named after it and unique."""
    while True:
        folder = target.with_name(f".{target.name}.{tag}-{secrets.token_hex(4)}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue


def _swap(target: Path, new: Path) -> Path:
    """Put the folder ``new`` at ``target``; the earlier ``target`` is moved aside (returned)."""
    aside = _new_sibling(target, "old")
    try:
        os.rename(target, aside)  # onto the empty folder ``aside``: POSIX replaces it
    except BaseException:
        aside.rmdir()
        raise
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(aside, target)
        raise
    return aside
