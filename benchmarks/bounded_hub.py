"""A 3-hop subgraph around a hub of 500,000 edges on the embedded store: the time and peak
memory of one call with the default row bound, and with the bound lifted (issue 16, item 10).

    python -m benchmarks.bounded_hub [--edges 500000] [--unbounded]

Each run is one process, so ``ru_maxrss`` is that call's peak (plus the loaded store).
"""
from __future__ import annotations

import argparse
import json
import resource
import time

from engine.graph import Triple
from engine.identifiers import DEFAULT_LIMIT, UNBOUNDED
from engine.stores.oxigraph import OxigraphStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=500_000, help="edges of the hub (default 500000)")
    parser.add_argument("--unbounded", action="store_true", help="lift the default bound (limit=UNBOUNDED)")
    args = parser.parse_args()
    store = OxigraphStore(None)
    # the hub's neighbours each point at one of 1,000 shared nodes: 2 x edges triples
    store.add_triples(Triple("hub", "r", f"e{i}") for i in range(args.edges))
    store.add_triples(Triple(f"e{i}", "s", f"f{i % 1000}") for i in range(args.edges))
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    result = store.subgraph(["hub"], 3, limit=UNBOUNDED if args.unbounded else None)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "edges_stored": store.count_triples(), "limit": UNBOUNDED if args.unbounded else DEFAULT_LIMIT,
        "edges_returned": len(result.edges), "truncated": result.truncated, "seconds": round(seconds, 2),
        "peak_rss_mb_after_load": round(loaded), "peak_rss_mb": round(peak),
    }))


if __name__ == "__main__":
    main()
