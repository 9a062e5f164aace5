"""``kgqa`` and other Python code run in processes of their own, from this checkout: for what
one process cannot show (locks between processes) and for what might hang (a bounded wait)."""
from __future__ import annotations

import os
import subprocess
import sys
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
