"""Memory and disk figures of processes and directories, read from ``/proc`` and the file system.

Peak memory is the kernel's high-water mark of resident memory (``VmHWM`` in
``/proc/<pid>/status``); writing ``5`` to ``/proc/<pid>/clear_refs`` resets it to the current
resident size (Linux ≥ 4.0, own processes only), so the peak of one phase can be read. Where
``/proc`` is missing (not Linux) every figure is None.
"""
from __future__ import annotations

import os
import subprocess
import sys
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


PEAK_PREFIX = "kgqa-peak-rss-mib="


def report_peak() -> None:
    """Print this process's peak resident memory on stderr (for :func:`run_measured`). A child's
    ``ru_maxrss`` cannot be used: Linux carries the parent's peak into a child across fork and
    exec, so a big parent hides a small child; ``VmHWM`` belongs to the child's own memory map."""
    print(f"{PEAK_PREFIX}{peak_rss_mib()}", file=sys.stderr, flush=True)


def run_measured(code: str, args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str, float | None]:
    """Run Python ``code`` (which ends by calling :func:`report_peak`) in a child process:
    (exit status, stdout, the rest of stderr, the child's peak resident memory in MiB)."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False)
    peak, rest = None, []
    for line in done.stderr.splitlines():
        if line.startswith(PEAK_PREFIX):
            peak = None if line.endswith("None") else float(line[len(PEAK_PREFIX):])
        else:
            rest.append(line)
    return done.returncode, done.stdout, "\n".join(rest), peak


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
