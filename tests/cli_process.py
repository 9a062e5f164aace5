"""``kgqa`` and other Python code run in processes of their own, from this checkout: for what
one process cannot show (locks between processes) and for what might hang (a bounded wait)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """The environment of a child that imports this checkout's engine."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


def run_kgqa(
    *argv: str, timeout: float = 120, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``kgqa ARGV…`` to its end, in ``cwd``, with ``env`` added to the child's environment; a
    command that runs past ``timeout`` seconds fails the test."""
    return subprocess.run([sys.executable, "-m", "engine.cli.main", *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={**child_env(), **(env or {})})


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: gone, or a zombie its parent has not reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def wait_listening(process: subprocess.Popen, port: int, timeout: float = 60) -> None:
    """Return once ``process`` (a server started on loopback ``port``) accepts connections there;
    fail the test if it exits first or is not listening within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert process.poll() is None, f"the server exited with {process.returncode} before it listened on {port}"
        assert time.monotonic() < deadline, f"the server did not listen on {port} within {timeout:g} s"
        time.sleep(0.1)
