"""The scale run's results: ``scale.json``, ``scale.md`` and ``latency-vs-size.png``."""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.report import _fmt, _pyplot, machine, machine_markdown
from benchmarks.runner import BATCHED
from benchmarks.scale import HUB_REPEATS, graph_file
from benchmarks.tasks import OPS
from engine.servers.virtuoso import PAGE_BYTES, buffers_for

FREEBASE_TRIPLES = 1_900_000_000  # the full Freebase dump the seeds' users query
HUB_GOAL = 1_000_000  # edges at the largest hub of a graph of 10M triples or more
FLOOR = "csr-floor"
BOUNDED_GROWTH = 2.0  # a cut hub call's time from the smallest to the largest graph where it is cut


def write(results: dict[str, Any], out: Path, append: bool = False) -> list[Path]:
    """Write the reports; with ``append``, the sizes of an earlier ``scale.json`` in ``out`` that
    this run did not measure are kept beside this run's (each run is listed with its machine state)."""
    out.mkdir(parents=True, exist_ok=True)
    results = dict(results)
    if "machine" not in results:  # a fresh run (a written scale.json, read back, is only rendered again)
        results["machine"] = machine()
        results["machine"]["load_average_start"] = [round(x, 2) for x in results.pop("load_average_start", ())]
        results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        results["runs"] = [_run_summary(results)]
        earlier = out / "scale.json"
        if append and earlier.exists():
            results = _merge(json.loads(earlier.read_text()), results)
    results["goals"] = goals(results)
    results["extrapolation"] = extrapolation(results)
    written = [out / "scale.json", out / "scale.md"]
    summary = dict(results, timings=[{k: v for k, v in t.items() if k not in ("index", "latencies_ms")} for t in results["timings"]])
    written[0].write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    written[1].write_text(markdown(results))
    return written + plot(results, out)


def _run_summary(results: dict[str, Any]) -> dict[str, Any]:
    m = results["machine"]
    return {"sizes": [s["name"] for s in results["sizes"]], "stores": list(results["config"]["stores"]),
            "finished": results["finished"], "seconds": results["seconds"],
            "git": m["git"], "load_average_start": m["load_average_start"], "load_average_end": m["load_average"]}


def _merge(earlier: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """This run's rows, and the earlier run's rows of every size and store this run did not
    measure, in order of size: a size measured again on other stores keeps the earlier stores'
    loads, timings and hub calls (the floor's timings are this run's). :func:`appended_graphs_differ`
    has made sure, before the run, that a size in both is the same graph."""
    stores = list(now["config"]["stores"])
    fresh = {s["name"]: s for s in now["sizes"]}
    before = {s["name"]: s for s in earlier["sizes"]}

    def kept(dataset: str, store: str) -> bool:
        return dataset not in fresh or (store not in stores and store != FLOOR)

    merged = dict(now)
    for key in ("loads", "hub"):
        merged[key] = [r for r in earlier[key] if kept(r["dataset"], r["store"])] + now[key]
    merged["timings"] = [t for t in earlier["timings"] if kept(t["dataset"], t["impl"].removeprefix("store:"))] + now["timings"]
    merged["workloads"] = [w for w in earlier["workloads"] if w["dataset"] not in fresh] + now["workloads"]
    sizes = []
    for name, entry in {**before, **fresh}.items():
        if name in fresh and name in before:
            others = {r["store"] for r in earlier["loads"] if r["dataset"] == name} - set(stores)
            if others:  # the earlier stores' server peaks, and both runs' time for the size
                peaks = {k: v for k, v in before[name].get("server_peak_rss_mib", {}).items() if k in others}
                entry = dict(entry, seconds=round(before[name]["seconds"] + entry["seconds"], 1))
                if peaks or "server_peak_rss_mib" in entry:
                    entry["server_peak_rss_mib"] = {**peaks, **entry.get("server_peak_rss_mib", {})}
        sizes.append(entry)
    merged["sizes"] = sorted(sizes, key=lambda s: s["size"])
    order = {s["name"]: s["size"] for s in merged["sizes"]}
    for key in ("loads", "hub", "timings", "workloads"):
        merged[key].sort(key=lambda r: order[r["dataset"]])  # stable: each size's rows as they were
    measured = {(r["dataset"], r["store"]) for r in earlier["loads"] if kept(r["dataset"], r["store"])}
    runs = [r for r in earlier.get("runs", []) if any((size, store) in measured for size in r["sizes"]
                                                      for store in r.get("stores", earlier["config"]["stores"]))]
    merged["runs"] = runs + now["runs"]
    merged["seconds"] = round(sum(r["seconds"] for r in merged["runs"]), 1)
    every = [*earlier["config"]["stores"], *stores]
    in_rows = {r["store"] for r in merged["loads"]}
    merged["config"] = dict(now["config"], stores=[k for k in dict.fromkeys(every) if k in in_rows])
    return merged


def appended_graphs_differ(out: Path, sizes: list[int], seed: int, hub_share: float) -> list[str]:
    """The sizes of an earlier ``scale.json`` in ``out`` that a run with these settings would
    generate as another graph (another seed or hub pool), so that ``--append`` would mix two graphs'
    rows; each as a line saying what differs."""
    earlier = out / "scale.json"
    if not earlier.exists():
        return []
    made = {s["size"]: s["generation"]["file"] for s in json.loads(earlier.read_text())["sizes"]}
    return [
        f"{made[size]} there, {graph_file(size, seed, hub_share)} in this run"
        for size in sizes
        if size in made and made[size] != graph_file(size, seed, hub_share)
    ]


# ============================================================================ goals, extrapolation

def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for s in results["sizes"]:
        if s["size"] >= 10_000_000:
            top = s["degrees"]["max_total"]
            out.append({"goal": f"a hub of ≥ {HUB_GOAL:,} edges in {s['name']}", "met": top["edges"] >= HUB_GOAL,
                        "value": f"{top['edges']:,} edges at {top['node']}"})
            out.append({"goal": f"{s['name']}: generation, loads, workloads and hub calls in under an hour",
                        "met": s["seconds"] < 3600, "value": f"{s['seconds']:,.0f} s"})
    order = {s["name"]: s["size"] for s in results["sizes"]}
    for store in sorted({h["store"] for h in results["hub"]}):
        for call in sorted({h["call"] for h in results["hub"] if h["store"] == store and h["truncated"]}):
            cut = sorted((h for h in results["hub"] if h["store"] == store and h["call"] == call and h["truncated"]),
                         key=lambda h: order[h["dataset"]])
            first, last = cut[0], cut[-1]
            growth = last["seconds"] / first["seconds"] if first["seconds"] else None
            memory = lambda h: (h["client_peak_added_mib"] or 0) + (h["server_peak_added_mib"] or 0)
            out.append({
                "goal": f"{store} `{call}` at the hub stays bounded: {_limit(results):,} rows, time within "
                        f"{BOUNDED_GROWTH:g}× from the smallest to the largest graph where it is cut",
                "met": all(h["rows"] == _limit(results) for h in cut) and (len(cut) == 1 or (growth or 0) <= BOUNDED_GROWTH),
                "value": f"cut on {', '.join(h['dataset'] for h in cut)}: " + ", ".join(
                    f"{h['seconds']:.2f} s / {memory(h):,.0f} MiB" for h in cut)
                    + (f" (×{growth:.2f} in time)" if growth and len(cut) > 1 else ""),
            })
    return out


def _limit(results: dict[str, Any]) -> int:
    from engine.identifiers import DEFAULT_LIMIT

    return results["config"]["hub_limit"] or DEFAULT_LIMIT


def extrapolation(results: dict[str, Any]) -> list[dict[str, Any]]:
    """A full Freebase load on one machine, from each store's load at the largest size."""
    order = {s["name"]: s["size"] for s in results["sizes"]}
    rows = []
    for store in dict.fromkeys(r["store"] for r in results["loads"]):
        mine = sorted((r for r in results["loads"] if r["store"] == store and r.get("triples_per_s")), key=lambda r: order[r["dataset"]])
        if not mine:
            continue
        r = mine[-1]
        row = {
            "store": store, "from": r["dataset"], "triples_per_s": r["triples_per_s"],
            "hours": round(FREEBASE_TRIPLES / r["triples_per_s"] / 3600, 1),
            "bytes_per_triple": r["bytes_per_triple"],
            "disk_gib": round(FREEBASE_TRIPLES * r["bytes_per_triple"] / 2**30) if r["bytes_per_triple"] else None,
        }
        if len(mine) > 1:  # the fall of throughput between the two largest sizes, continued as a power law
            q = mine[-2]
            slope = math.log(r["triples_per_s"] / q["triples_per_s"]) / math.log(r["triples"] / q["triples"])
            slope = min(slope, 0.0)
            trend = r["triples_per_s"] * (FREEBASE_TRIPLES / r["triples"]) ** slope
            # the whole load at rate c·n^slope: the integral of dn / (c·n^slope) up to N is N / ((1 - slope)·rate(N))
            row.update(trend_from=q["dataset"], trend_exponent=round(slope, 3), trend_triples_per_s=round(trend),
                       trend_hours=round(FREEBASE_TRIPLES / trend / (1 - slope) / 3600, 1))
        rows.append(row)
    return rows


# ============================================================================ markdown

CLUSTERS = """\
### When one machine is not enough

The engine never distributes anything itself: a store is named by a URI, and the same URIs name a
cluster. `http(s)://host:port/sparql` opens the SPARQL-endpoint store (`engine/open.py` →
`SparqlEndpointStore`), which only speaks the SPARQL 1.1 protocol over HTTP to that address; pointed
at the HTTP listener of a Virtuoso Cluster Edition node or at a load balancer in front of replicated
Virtuoso servers, every operation runs unchanged, as one SPARQL request per call. Loading through
the `isql` bulk path needs the SQL port of a node (`--store-option isql=host:1111`) and a
`staging_dir` that the server can read (a shared mount), or `--store-option loader=update` to send
`INSERT DATA` batches over HTTP instead. `neo4j://host:7687` (and `neo4j+s://`) opens the Bolt store
with the official driver's routing (`bolt://` talks to one server): the driver fetches the cluster's
routing table, the engine runs every read as a read transaction (`execute_read`, or a
`READ_ACCESS` session for a read with a timeout), which the driver sends to followers and read
replicas, and loads as write transactions (`execute_write`), which go to the leader. A database
name comes from `?database=NAME` in the URI or `--store-option database=NAME`. Not measured here: only single servers were
started on this machine.
"""


def markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    pages = buffers_for(cfg.get("virtuoso_buffer_pool_gib"))
    limit = _limit(results)
    lines = [
        "# Scale benchmark — generated Freebase-shaped graphs of growing size",
        "",
        f"Finished {results['finished']} in {results['seconds']:,.0f} s. {machine_markdown(results['machine'])}",
        "",
        *([f"Measured in {len(results['runs'])} runs: "
           + "; ".join(f"{', '.join(r['sizes'])}{' on ' + ', '.join(r['stores']) if 'stores' in r else ''} at {r['git']}, finished {r['finished']} in {r['seconds']:,.0f} s, load average "
                       f"{r['load_average_start'][0]} → {r['load_average_end'][0]}" for r in results["runs"]) + ".", ""]
          if len(results["runs"]) > 1 else []),
        (f"Sizes {', '.join(s['name'] for s in results['sizes'])}; stores {', '.join(cfg['stores'])}; "
        f"{cfg['questions']} random walks per size, {cfg['batches']} batched calls of {cfg['batch']}; "
        f"time budget {cfg['budget']:g} s per store and workload; hub pool {cfg['hub_share']:.0%} of each graph; "
        f"hub calls with limit {limit:,} ({'the engine default' if not cfg['hub_limit'] else '--hub-limit'})."),
        "",
        "## Goals",
        "",
        "| goal | met | measured |",
        "|---|---|---|",
        *(f"| {g['goal']} | {'yes' if g['met'] else '**no**'} | {g['value']} |" for g in results["goals"]),
        "",
        "## Graphs",
        "",
        "Generation: `FreebaseGenerator(size, seed, hub_edges=share × size)` written as gzipped N-Triples",
        "(cached in the workdir: a cached graph shows the time of the run that made it). Degrees are edges",
        "at a node in the stored graph (both directions; a literal's in-edges left out).",
        "",
        "| graph | triples | nodes | generation s | file MB | max out-degree | max in-degree | max degree (node) | hub-pool node's edges | run s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["sizes"]:
        g, d = s["generation"], s["degrees"]
        lines.append(
            f"| {s['name']} | {s['triples']:,} | {s['nodes']:,} | {g['seconds']:,.1f}{' (cached)' if g['cached'] else ''} | "
            f"{g['bytes'] / 1e6:,.0f} | {d['max_out']['edges']:,} | {d['max_in']['edges']:,} | "
            f"{d['max_total']['edges']:,} ({d['max_total']['node']}) | {s['hub_edges']:,} ({g['hub']}) | {s['seconds']:,.0f} |"
        )
    lines += [
        "",
        "## Loading",
        "",
        "Each store is loaded by `kgqa load FILE --format ntriples --store …` in a child process (the",
        "engine's `load_files`: Oxigraph through `bulk_load`, Virtuoso through `ld_dir` + `rdf_loader_run`",
        "+ `checkpoint` per batch of the store's `load_batch_size` via isql: 250,000 triples until 2026-11-25, 1,000,000 since). Seconds and triples/s are the load report's (lines",
        "read ÷ seconds); loader peak = `VmHWM` of the `kgqa load` process, which it prints as it exits (for",
        "Oxigraph the whole store engine runs in it; not `ru_maxrss`, which Linux carries over from the",
        "parent across fork and exec); server peak = `VmHWM` of the `virtuoso-t` process read from `/proc` after the",
        f"load (a fresh server per size; its buffer pool is configured at {pages:,} pages ≈ {pages * PAGE_BYTES / 2**30:.1f} GiB); disk =",
        "allocated bytes of the store's directory after the load (Oxigraph: the RocksDB directory;",
        "Virtuoso: the database directory, less its size when the fresh server had started).",
        "",
        "| graph | store | triples stored | seconds | triples/s | loader peak MiB | server peak MiB | disk MB | bytes/triple |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["loads"]:
        if "seconds" not in r:
            lines.append(f"| {r['dataset']} | {r['store']} | {r.get('skipped') or r.get('failed')} | | | | | | |")
            continue
        lines.append(
            f"| {r['dataset']} | {r['store']} | {r['triples']:,} | {r['seconds']:,.1f} | {r['triples_per_s']:,} | "
            f"{_fmt(r['loader_peak_rss_mib'])} | {_fmt(r.get('server_peak_rss_mib'))} | {r['disk_bytes'] / 1e6:,.0f} | "
            f"{_fmt(r['bytes_per_triple'])} |"
        )
    names = [s["name"] for s in results["sizes"]]
    lines += [
        "",
        "## Retrieval latency per workload",
        "",
        "The retrieval mode's workloads (`benchmarks/README.md`), from seeded random walks on each graph,",
        "with every row (`limit=UNBOUNDED`, as the baselines compute them); ms per question (a batched call's",
        "time ÷ its questions), p50 / p95 over the calls made within the budget (tasks run / tasks).",
        "`csr-floor` is the in-memory NumPy floor, for reference. Every answer was checked against the floor's.",
        "",
        "| workload | implementation | " + " | ".join(f"{n} p50 / p95 ms (tasks)" for n in names) + " | mismatches |",
        "|---|---|" + "---|" * len(names) + "---|",
    ]
    index = {(t["dataset"], t["op"], t["impl"]): t for t in results["timings"]}
    for op in [*OPS, BATCHED]:
        for impl in [*(f"store:{k}" for k in cfg["stores"]), FLOOR]:
            cells, mismatches, present = [], 0, False
            for n in names:
                t = index.get((n, op, impl))
                if t is None:
                    cells.append("–")
                    continue
                present = True
                mismatches += t["mismatches"]
                tasks = f"{t['tasks']}/{t['tasks_total']}"
                cells.append(f"{_fmt(t['p50_ms'])} / {_fmt(t['p95_ms'])} ({tasks})" + (f", {len(t['errors'])} errors" if t["errors"] else ""))
            if present:
                lines.append(f"| {op} | {impl.removeprefix('store:')} | {' | '.join(cells)} | {mismatches} |")
    lines += [
        "",
        "## Calls at the hub (engine default limits)",
        "",
        f"The hub is the hub-pool node (the most popular currency, {results['sizes'][0]['generation']['hub_relation']} from",
        f"the stubs); each call made {HUB_REPEATS} times with limit {limit:,} in a fresh child process that opens the store,",
        "the median time shown. Memory: the peak resident memory the calls added (`VmHWM`, reset through",
        "`/proc/<pid>/clear_refs`) over the child's size once the store was open — for Oxigraph that child",
        "is the store as well — and, for Virtuoso, what the server's peak rose over its size before the call.",
        "",
        "| graph | hub edges | store | call | rows | truncated | seconds | client MiB added | server MiB added |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    hub_edges = {s["name"]: s["hub_edges"] for s in results["sizes"]}
    for h in results["hub"]:
        lines.append(
            f"| {h['dataset']} | {hub_edges[h['dataset']]:,} | {h['store']} | {h['call']} | {h['rows']:,} | "
            f"{'yes' if h['truncated'] else 'no'} | {h['seconds']:.3f} | {_fmt(h['client_peak_added_mib'])} | "
            f"{_fmt(h['server_peak_added_mib'])} |"
        )
    lines += ["", *(f"- `{c}`: {w}" for c, w in results.get("hub_calls", {}).items())]
    lines += ["", "## Extrapolation: a full Freebase load on one machine", ""]
    if results["extrapolation"]:
        lines += [
            f"**Extrapolation, not a measurement**: {FREEBASE_TRIPLES / 1e9:.1f}B triples (a) at the load throughput",
            "measured at the largest size, held constant, and (b) with the throughput falling on as it fell",
            "between the two largest sizes (a power law in the triples loaded: throughput ∝ triples^exponent);",
            "disk at the largest size's bytes per triple.",
            "",
            "| store | measured on | triples/s | (a) hours | trend exponent | (b) triples/s at the end | (b) hours | bytes/triple | disk, GiB |",
            "|---|---|---|---|---|---|---|---|---|",
            *(f"| {e['store']} | {e['from']} | {e['triples_per_s']:,} | {e['hours']:,} | {_fmt(e.get('trend_exponent'))} | "
              f"{_fmt(e.get('trend_triples_per_s'))} | {_fmt(e.get('trend_hours'))} | {_fmt(e['bytes_per_triple'])} | "
              f"{_fmt(e['disk_gib'])} |" for e in results["extrapolation"]),
            "",
            "Why (a) is a lower bound on time: both stores slow down once their indexes outgrow memory",
            "(RocksDB compactions for Oxigraph; Virtuoso's buffer pool, sized here at ≈ 0.8 GiB, against",
            "a database of hundreds of GiB), and the real dump's N-Triples are longer (full IRIs, long",
            "literals) than the generated graph's. Virtuoso's own guidance for a Freebase-sized load is a",
            "buffer pool of most of the machine's memory and several parallel `rdf_loader_run` calls",
            "(`--store-option loaders=N`).",
        ]
    lines += ["", CLUSTERS]
    return "\n".join(lines) + "\n"


# ============================================================================ plot

_STYLES = ["-", "--", ":", "-."]


def plot(results: dict[str, Any], out: Path) -> list[Path]:
    """p50 and p95 per workload against graph size (log-log), one line per workload × store,
    and the hub calls' seconds."""
    plt = _pyplot()
    triples = {s["name"]: s["triples"] for s in results["sizes"]}
    stores = results["config"]["stores"]
    ops = [*OPS, BATCHED]
    fig, axes = plt.subplots(1, 3, figsize=(16, 6.5))
    for ax, key, title in ((axes[0], "p50_ms", "p50"), (axes[1], "p95_ms", "p95")):
        for i, op in enumerate(ops):
            for j, store in enumerate(stores):
                pts = sorted((triples[t["dataset"]], t[key]) for t in results["timings"]
                             if t["op"] == op and t["impl"] == f"store:{store}" and t[key] is not None)
                if pts:
                    ax.plot(*zip(*pts), _STYLES[j % 4], marker="o", color=f"C{i}", label=f"{op} · {store}")
        ax.set_title(f"{title} latency per question")
        ax.set_ylabel("ms per question (log)")
    calls = sorted({h["call"] for h in results["hub"]})
    for i, call in enumerate(calls):
        for j, store in enumerate(stores):
            mine = sorted((triples[h["dataset"]], h["seconds"] * 1000, h["truncated"]) for h in results["hub"]
                          if h["call"] == call and h["store"] == store)
            if mine:
                axes[2].plot([m[0] for m in mine], [m[1] for m in mine], _STYLES[j % 4], marker="s", color=f"C{i}", label=f"{call} · {store}")
                cut = [m for m in mine if m[2]]
                axes[2].scatter([m[0] for m in cut], [m[1] for m in cut], marker="x", color="black", s=30, zorder=3)
    axes[2].set_title(f"calls at the hub, limit {_limit(results):,} (median of {HUB_REPEATS}; ×: truncated)")
    axes[2].set_ylabel("ms per call (log)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("graph size (triples)")
        ax.grid(alpha=0.3)
    for ax, anchor in ((axes[0], (0.02, 0.0)), (axes[2], (0.70, 0.0))):  # legends below the panels
        handles, labels = ax.get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=7, loc="lower left", bbox_to_anchor=anchor, ncol=4 if ax is axes[0] else 2)
    names = ("solid", "dashed", "dotted", "dash-dot")
    fig.suptitle("Latency against graph size (" + ", ".join(f"{names[j % 4]}: {s}" for j, s in enumerate(stores)) + ")", fontsize=10)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    path = out / "latency-vs-size.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return [path]
