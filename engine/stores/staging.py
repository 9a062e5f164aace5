"""Folders of staged files for Virtuoso's bulk loader, and telling live loads from dead ones.

Each load writes its files into a folder of its own under the staging directory and registers
them in ``DB.DBA.load_list`` (``ld_dir``); it removes both when it ends. A load that is killed
leaves them behind, and every later ``rdf_loader_run`` on the server would load its files
(into the dead load's graph) or keep failing on them. So each folder carries a lock file,
locked (``flock``) by its load for as long as it runs: a folder whose lock anyone can take
belongs to a dead load, and the next load forgets its rows and removes it.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from types import TracebackType

from engine.errors import StoreError

PREFIX = "kgqa-load-"
_LOCK = "lock"
#: a folder without its lock file is a load being set up, or one from before the lock files
_SETUP_GRACE_S = 60.0


class StagingFolder:
    """A fresh folder under ``staging_dir`` for one load, locked while it is in use; removed on exit."""

    def __init__(self, staging_dir: str) -> None:
        try:
            self.path = os.path.abspath(tempfile.mkdtemp(prefix=PREFIX, dir=staging_dir))
            os.chmod(self.path, 0o755)  # the server may run as another user
            # locked before it is given its name, so that no one sees it unlocked
            fd, provisional = tempfile.mkstemp(prefix=".lock-", dir=self.path)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(provisional, os.path.join(self.path, _LOCK))
        except OSError as e:
            raise StoreError(f"cannot write into the staging directory {staging_dir!r}: {e}") from e
        self._lock = fd

    def __enter__(self) -> StagingFolder:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock)  # releases the lock


def abandoned_folders(staging_dir: str, listed: list[str]) -> list[str]:
    """Folders of dead loads: those under ``staging_dir`` whose lock is free (or that have had
    no lock file for a while), and those of the ``listed`` load-list files that are gone."""
    staging_dir = os.path.abspath(staging_dir)
    found: set[str] = set()
    try:
        entries = list(os.scandir(staging_dir))
    except OSError:
        entries = []
    for entry in entries:
        if entry.name.startswith(PREFIX) and entry.is_dir(follow_symlinks=False) and _abandoned(entry.path):
            found.add(entry.path)
    for path in listed:
        folder = os.path.dirname(path)
        ours = os.path.dirname(folder) == staging_dir and os.path.basename(folder).startswith(PREFIX)
        if ours and not os.path.isdir(folder):
            found.add(folder)
    return sorted(found)


def _abandoned(folder: str) -> bool:
    try:
        fd = os.open(os.path.join(folder, _LOCK), os.O_RDONLY)
    except FileNotFoundError:
        try:
            return time.time() - os.stat(folder).st_mtime > _SETUP_GRACE_S
        except OSError:
            return False
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its load is alive
    finally:
        os.close(fd)
    return True
