"""CPU seconds (:mod:`engine.cpu_time`): a wait costs none, work in this process and in a child
it has waited for costs what it used."""
from __future__ import annotations

import subprocess
import sys
import time

from engine.cpu_time import cpu_seconds


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_wait_costs_no_cpu_and_work_costs_what_it_used():
    before = cpu_seconds()
    time.sleep(0.5)
    slept = cpu_seconds() - before
    assert slept < 0.2
    before = cpu_seconds()
    _spin(0.5)
    assert cpu_seconds() - before > 0.3


def test_a_finished_childs_cpu_is_counted():
    before = cpu_seconds()
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"],
                   check=True)
    assert cpu_seconds() - before > 0.5
