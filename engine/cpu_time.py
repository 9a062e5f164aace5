"""CPU seconds used by this process and by the child processes it has finished waiting for (an
embedded store's query processes, say): what a step costs whatever else shares the machine and
however long it was paused, where wall seconds count both."""
from __future__ import annotations

import resource


def cpu_seconds() -> float:
    """User and system CPU seconds of this process and its reaped children, since it started."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
