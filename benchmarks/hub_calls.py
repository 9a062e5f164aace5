"""The calls a method makes at a hub, and one of them timed in a child process of its own
(:func:`benchmarks.scale.time_hub` starts it). Kept apart from :mod:`benchmarks.scale` so that
each child starts in a fraction of a second: it imports the store it opens and nothing else."""
from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks import procstat
from engine.store import Store


def hub_calls(hub: str, stub: str, relation: str) -> list[tuple[str, str, Callable[[Store, int | None], Any]]]:
    """The calls a method makes at the hub: (name, what, call(store, limit))."""
    return [
        ("expand", "expand([hub]), both directions", lambda s, n: s.expand([hub], None, "both", n)),
        ("subgraph", "subgraph([hub], 1 hop)", lambda s, n: s.subgraph([hub], 1, "both", limit=n)),
        ("follow_paths", f"follow_paths([a money value next to the hub], [{relation}] × 2): to the hub and on to its other neighbours",
         lambda s, n: s.follow_paths([stub], [relation, relation], "both", n)),
        ("relations", "relations([hub]): counts per relation (few rows, every edge counted)",
         lambda s, n: s.relations([hub], "both", n)),
        ("two_hop_relations", f"two_hop_relations([a money value next to the hub], {relation}): relations behind the hub",
         lambda s, n: s.two_hop_relations([stub], relation, "both", n)),
    ]


def _rows(result: Any) -> int:
    for name in ("edges", "paths", "rows"):
        if hasattr(result, name):
            return len(getattr(result, name))
    raise TypeError(type(result).__name__)


def hub_child(spec_json: str) -> int:
    """In a child process of its own: open the store, make one hub call ``repeats`` times, and
    print rows, truncated, the median seconds and the peak resident memory the calls added over
    the process's size once the store was open (a fresh process: no heap left by other work)."""
    from engine.open import open_store

    spec = json.loads(spec_json)
    store = open_store(spec["uri"], create=False, **spec["options"]) if spec["options"] else open_store(spec["uri"], create=False)
    (call,) = [c for name, _, c in hub_calls(spec["hub"], spec["stub"], spec["relation"]) if name == spec["call"]]
    gc.collect()
    base = procstat.rss_mib()
    reset = procstat.reset_peak()
    seconds, result = [], None
    for _ in range(spec["repeats"]):
        del result
        start = time.perf_counter()
        result = call(store, spec["limit"])
        seconds.append(time.perf_counter() - start)
    peak = procstat.peak_rss_mib()
    print(json.dumps({
        "rows": _rows(result), "truncated": bool(result.truncated), "seconds": round(statistics.median(seconds), 4),
        "client_peak_added_mib": round(peak - base, 1) if reset and peak is not None and base is not None else None,
    }))
    store.close()
    return 0
