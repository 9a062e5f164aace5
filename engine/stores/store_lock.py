"""Who may open an embedded store at once: any number of readers, or one writer.

pyoxigraph lets one process open a store for writing (RocksDB's ``LOCK``), and opening it read
only while another process writes is undefined behaviour. So the engine keeps a lock file of its
own in the store folder, ``kgqa.lock``, locked (``flock``) for as long as the store is open:
shared by readers, exclusively by a writer. A process that is refused the lock is told which
processes hold it, as ``/proc/locks`` (Linux) lists them.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from engine.errors import StoreUnavailableError

LOCK_NAME = "kgqa.lock"


class StoreLock:
    """The lock of the store folder ``folder``, taken at once or refused (never waited for):
    ``exclusive`` for a writer, shared for a reader. Held until :meth:`release`."""

    def __init__(self, folder: str, *, exclusive: bool) -> None:
        self.folder = folder
        self.path = os.path.join(folder, LOCK_NAME)
        self.exclusive = exclusive
        self._file: IO[bytes] | None = _open_lock_file(self.path, exclusive)
        if self._file is None:  # a reader of a folder it cannot write: no writer can use it either
            return
        try:
            fcntl.flock(self._file, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise StoreUnavailableError(self._refusal()) from None

    def _refusal(self) -> str:
        where = f"the store at {os.path.abspath(self.folder)}"
        if self.exclusive:
            return (
                f"{where} is open in {held_by(self.path)}; writing into it needs it to itself (any number of readers "
                "share a store, a writer such as kgqa load holds it alone): wait until they end or stop them, then try again"
            )
        return (
            f"{where} is being written by {held_by(self.path)}; wait until it is done (a load holds the store "
            "until it ends) or stop it, then run this again"
        )

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the lock
            self._file = None


def _open_lock_file(path: str, exclusive: bool) -> IO[bytes] | None:
    try:  # never through a symbolic link, which could point anywhere
        return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), "ab")
    except OSError as e:
        if not exclusive and os.path.isfile(path):
            try:
                return open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")  # flock needs no write access
            except OSError:
                pass
        if not exclusive and not os.path.exists(path):
            return None
        raise StoreUnavailableError(
            f"cannot open the lock file {path} of the store: {e.strerror}; the store folder must be writable "
            "to load into it (reading needs its lock file, or a folder no one can write)"
        ) from e


def lock_holders(path: str | os.PathLike[str]) -> list[int]:
    """The processes that hold a lock (``flock`` or ``fcntl``) on the file ``path``, as
    ``/proc/locks`` lists them; [] where it cannot be read (not Linux) or the file is gone."""
    try:
        st = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return []
    target = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4711 fe:00:2146961 0 EOF"; a waiting lock's line has "->"
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[5] != target:
            continue
        pid = int(fields[4]) if fields[4].lstrip("-").isdigit() else -1
        if pid > 0 and pid not in pids:
            pids.append(pid)
    return pids


def held_by(path: str | os.PathLike[str]) -> str:
    """Who holds a lock on ``path``, for an error message: each process by pid and command line."""
    pids = lock_holders(path)
    if not pids:
        return "another process"
    named = [_process(pid) for pid in pids]
    return ("process " if len(named) == 1 else "processes ") + ", ".join(named)


def _process(pid: int) -> str:
    if pid == os.getpid():
        return f"{pid} (this process: close the store it opened first)"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return str(pid)
    command = " ".join(" ".join(a.decode("utf-8", "replace").split()) for a in argv)  # one line
    return f"{pid} ({command[:120]}{'…' if len(command) > 120 else ''})"
