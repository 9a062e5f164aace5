"""Memory and disk figures of processes and directories, read from ``/proc`` and the file system.

Peak memory is the kernel's high-water mark of resident memory (``VmHWM`` in
``/proc/<pid>/status``); writing ``5`` to ``/proc/<pid>/clear_refs`` resets it to the current
resident size (Linux ≥ 4.0, own processes only), so the peak of one phase can be read. Where
``/proc`` is missing (not Linux) every figure is None.
"""
from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path


def _status_kib(pid: int | str, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def rss_mib(pid: int | str = "self") -> float | None:
    """Resident memory now (MiB)."""
    kib = _status_kib(pid, "VmRSS")
    return None if kib is None else round(kib / 1024, 1)


def peak_rss_mib(pid: int | str = "self") -> float | None:
    """Peak resident memory since the process started or its last :func:`reset_peak` (MiB)."""
    kib = _status_kib(pid, "VmHWM")
    return None if kib is None else round(kib / 1024, 1)


def reset_peak(pid: int | str = "self") -> bool:
    """Reset the process's peak resident memory to its current size; False where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def run_measured(command: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str, float]:
    """Run a command to its end: (exit status, stdout, stderr, its peak resident memory in MiB,
    from the kernel's ``ru_maxrss`` of that one child)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = _drain(process)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, out, err, round(usage.ru_maxrss / 1024, 1)


def _drain(process: subprocess.Popen) -> tuple[str, str]:
    """Read both pipes to their end without reaping the child (``communicate`` would wait on it,
    and its rusage would be lost)."""
    chunks: dict[str, str] = {}

    def read(name: str, stream) -> None:
        chunks[name] = stream.read()

    reader = threading.Thread(target=read, args=("err", process.stderr))
    reader.start()
    read("out", process.stdout)
    reader.join()
    return chunks["out"], chunks["err"]


def dir_bytes(path: Path) -> int:
    """Bytes the files under ``path`` take on disk (allocated blocks, as ``du``)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total
