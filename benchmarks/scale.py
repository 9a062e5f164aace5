"""The scale run: generated Freebase-shaped graphs of growing size, loaded through ``kgqa load``
into each store, every retrieval workload timed on each, and calls on a hub of the hub pool
(:mod:`benchmarks.generator`) made with the engine's default limits.

Per size: the graph is generated once (cached in the workdir with its generation time); each
store gets a fresh copy — a fresh Oxigraph directory, a fresh Virtuoso server — loaded by a
``kgqa load`` child process (its peak memory is that process's ``ru_maxrss``; a server's is its
``VmHWM``); the workloads are the retrieval mode's (:func:`benchmarks.runner.dataset_workloads`,
random walks) timed by the same loop, store implementations only (the in-memory floor builds
the tasks, checks every answer and is timed beside them).
"""
from __future__ import annotations

import gc
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import procstat, runner, sources
from benchmarks.baselines.csr_floor import CsrFloor
from benchmarks.generator import HUB_PROPERTY, FreebaseGenerator
from benchmarks.hub_calls import hub_calls
from benchmarks.runner import (
    References,
    RunConfig,
    Stores,
    log,
    summarise,
    time_workload,
    warm_up,
)
from benchmarks.tasks import Retriever
from benchmarks.workloads import StoreRetriever
from engine.store import Store

_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = "100k,1M,10M"
DEFAULT_STORES = "oxigraph,virtuoso"
HUB_REPEATS = 3  # calls per hub operation and store; the median time is reported


@dataclass
class ScaleConfig(RunConfig):
    sizes: list[int] = field(default_factory=list)
    hub_share: float = 0.1  # of each graph's triples given to the hub pool
    hub_limit: int | None = None  # the hub calls' limit; None: the engine's default


# ============================================================================ graphs

def graph_file(size: int, seed: int, hub_share: float) -> str:
    """The generated graph's file name, which says what it was generated from."""
    return f"gen-{sources.size_label(size)}-seed{seed}-hub{round(size * hub_share)}.nt.gz"


def generated_graph(size: int, seed: int, hub_share: float, workdir: Path) -> tuple[sources.Dataset, dict[str, Any]]:
    """The graph of ``size`` triples with its hub pool, generated once into the workdir; its
    generation record (time, counts, hub) is kept in a JSON file beside it."""
    hub_edges = round(size * hub_share)
    name = f"gen-{sources.size_label(size)}"
    path = workdir / "data" / graph_file(size, seed, hub_share)
    record = path.with_name(path.name.removesuffix(".nt.gz") + ".json")
    cached = path.exists() and record.exists()
    if not cached:
        path.parent.mkdir(parents=True, exist_ok=True)
        generator = FreebaseGenerator(size, seed=seed, hub_edges=hub_edges)
        log(f"== {name}: generating ({hub_edges:,} hub-pool edges)")
        started = time.perf_counter()
        sources.write_ntriples(iter(generator), path)
        seconds = time.perf_counter() - started
        record.write_text(json.dumps({**asdict(generator.info), "seconds": round(seconds, 1), "bytes": path.stat().st_size}))
    info = json.loads(record.read_text())
    info.update(file=path.name, cached=cached, hub_relation=HUB_PROPERTY)
    description = f"Freebase-shaped graph from the real schema, seed {seed}, hub pool of {hub_edges:,} edges"
    return sources.Dataset(name, (path,), "ntriples", description), info


def degree_stats(floor: CsrFloor) -> dict[str, Any]:
    """The largest out-, in- and total degree (edges at a node, both directions) and whose."""
    n = floor.n_nodes
    out_deg = np.bincount(floor.src, minlength=n)
    in_deg = np.bincount(floor.dst, minlength=n)
    in_deg[floor.is_literal] = 0  # a literal value shared by many facts is not a hub one can walk from
    both = out_deg + in_deg
    top = lambda a: {"node": str(floor.terms[int(a.argmax())]), "edges": int(a.max())}
    return {"max_out": top(out_deg), "max_in": top(in_deg), "max_total": top(both)}


def degree_of(floor: CsrFloor, node: str) -> int:
    """Edges at ``node``, both directions (a self-loop twice)."""
    i = floor.index[node]
    return int(floor.node_ptr[i + 1] - floor.node_ptr[i])


# ============================================================================ loading

#: ``kgqa load`` in a child process that reports its own peak memory
LOAD_CHILD = """\
import sys
from benchmarks.procstat import report_peak
from engine.cli.main import main
try:
    code = main(sys.argv[1:])
finally:
    report_peak()
sys.exit(code)
"""
#: one hub call in a child process (see :func:`benchmarks.hub_calls.hub_child`)
HUB_CHILD = "import sys\nfrom benchmarks.hub_calls import hub_child\nsys.exit(hub_child(sys.argv[1]))\n"


def _child_env() -> dict[str, str]:
    """The child imports this checkout's code, as the run itself does."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def load_into(cfg: ScaleConfig, stores: Stores, kind: str, ds: sources.Dataset) -> tuple[Store | None, dict[str, Any]]:
    """A fresh store of ``kind`` loaded by ``kgqa load`` in a child process, and the load's
    record: seconds, triples/s, the child's peak memory, the server's, bytes on disk."""
    row: dict[str, Any] = {"store": kind, "dataset": ds.name}
    file = str(ds.files[0])
    if kind == "oxigraph":
        path = cfg.workdir / "oxigraph" / ds.name
        shutil.rmtree(path, ignore_errors=True)
        args = ["load", file, "--format", "ntriples", "--store", str(path), "--no-progress", "--json"]
        server_pid, disk, base_bytes, store = None, path, 0, None
        row["uri"], row["options"] = str(path), {}
    elif kind == "virtuoso":
        store = stores.open(kind, ds.name)
        if store is None:
            row["skipped"] = stores.skipped[kind]
            return None, row
        server = stores.servers[kind]
        server_pid, disk = server.process.pid, server.workdir / "db"
        base_bytes = procstat.dir_bytes(disk)
        options = {"graph": store.graph, "isql": store.isql, "staging_dir": store.staging_dir}  # type: ignore[attr-defined]
        args = ["load", file, "--format", "ntriples", "--store", store.endpoint, "--no-progress", "--json"]  # type: ignore[attr-defined]
        for key, value in options.items():
            args += ["--store-option", f"{key}={value}"]
        row["uri"], row["options"] = store.endpoint, {"graph": store.graph, "timeout": runner.SPARQL_TIMEOUT}  # type: ignore[attr-defined]
    else:
        raise ValueError(f"the scale run measures oxigraph and virtuoso, not {kind!r}")
    log(f"   {kind}: kgqa load {Path(file).name}")
    status, out, err, child_peak = procstat.run_measured(LOAD_CHILD, args, env=_child_env())
    if status != 0:
        row["failed"] = f"kgqa load exited {status}: {err.strip()[-500:]}"
        log(row["failed"])
        if store is not None:
            store.close()
        return None, row
    report = json.loads(out)
    row.update(
        seconds=round(report["seconds"], 2),
        read=report["read"],
        triples_per_s=round(report["read"] / report["seconds"]) if report["seconds"] else None,
        loader_peak_rss_mib=child_peak,
    )
    if server_pid is not None:
        row["server_peak_rss_mib"] = procstat.peak_rss_mib(server_pid)
    if store is None:  # the embedded store, opened in this process once the child has let go of it
        from engine.stores.oxigraph import OxigraphStore

        store = OxigraphStore(str(path), create=False)
    row["triples"] = store.count_triples()
    row["disk_bytes"] = procstat.dir_bytes(disk) - base_bytes
    row["bytes_per_triple"] = round(row["disk_bytes"] / row["triples"], 1) if row["triples"] else None
    return store, row


# ============================================================================ hub calls

def time_hub(load: dict[str, Any], calls: list[str], spec: dict[str, Any], server_pid: int | None) -> list[dict[str, Any]]:
    """Each hub call in a child process of its own (:func:`benchmarks.hub_calls.hub_child`); a server's peak memory
    added during the child's calls is read from its ``VmHWM``, reset before."""
    out = []
    for name in calls:
        server_base = procstat.rss_mib(server_pid) if server_pid else None
        server_reset = procstat.reset_peak(server_pid) if server_pid else False
        child = dict(spec, uri=load["uri"], options=load["options"], call=name, repeats=HUB_REPEATS)
        status, stdout, stderr, _ = procstat.run_measured(HUB_CHILD, [json.dumps(child)], env=_child_env())
        if status != 0:
            raise RuntimeError(f"hub call {name} on {load['store']} failed: {stderr.strip()[-500:]}")
        row = {"store": load["store"], "call": name, **json.loads(stdout.splitlines()[-1])}
        server_peak = procstat.peak_rss_mib(server_pid) if server_pid else None
        row["server_peak_added_mib"] = (
            round(server_peak - server_base, 1) if server_reset and server_peak is not None and server_base is not None else None
        )
        out.append(row)
    return out


# ============================================================================ the run

def run_scale(cfg: ScaleConfig) -> dict[str, Any]:
    started = time.time()
    out: dict[str, Any] = {
        "kind": "scale", "config": cfg.to_json(), "load_average_start": os.getloadavg(),
        "sizes": [], "loads": [], "timings": [], "hub": [], "workloads": [],
    }
    for size in cfg.sizes:
        size_started = time.time()
        ds, generation = generated_graph(size, cfg.seed, cfg.hub_share, cfg.workdir)
        log(f"== {ds.name}: reading")
        t0 = time.perf_counter()
        floor = CsrFloor(ds.read())
        entry: dict[str, Any] = {
            "name": ds.name, "size": size, "triples": floor.n_edges, "nodes": floor.n_nodes,
            "relations": len(floor.relations), "floor_build_s": round(time.perf_counter() - t0, 1),
            "generation": generation, "degrees": degree_stats(floor),
        }
        entry["hub_edges"] = degree_of(floor, generation["hub"])
        out["sizes"].append(entry)
        workloads = runner.dataset_workloads(cfg, ds.name, floor)
        out["workloads"].extend({"dataset": ds.name, "op": w.op, "tasks": len(w.tasks)} for w in workloads)
        reference = References(floor)
        hub, relation = generation["hub"], generation["hub_relation"]
        stub = next(iter(floor.neighbours_via(hub, relation)), hub)  # a money value next to the hub
        calls = [name for name, _, _ in hub_calls(hub, stub, relation)]
        spec = {"hub": hub, "stub": stub, "relation": relation, "limit": cfg.hub_limit}
        out["hub_calls"] = {name: what for name, what, _ in hub_calls(hub, stub, relation)}
        stores = Stores(cfg)
        opened: list[tuple[str, Store, dict[str, Any]]] = []
        try:
            impls: list[Retriever] = [floor]
            for kind in cfg.stores:
                store, row = load_into(cfg, stores, kind, ds)
                out["loads"].append(row)
                if store is not None:
                    opened.append((kind, store, row))
                    impls.append(StoreRetriever(store, kind))
            for impl in impls:
                warm_up(impl, workloads)
            for w in workloads:
                log(f"   {w.op}: {len(w.tasks)} tasks")
                out["timings"].extend(summarise(t) for t in time_workload(impls, w, cfg, reference) if t.seconds or t.errors)
                reference.cache.clear()  # a 10M graph's subgraph answers take gigabytes
            for kind, store, row in opened:
                store.close()  # the hub calls' child processes open it (the embedded store allows one process)
                server = stores.servers.get(kind)
                if server is not None:  # a fresh server per size: its peak since the start (load and workloads)
                    entry.setdefault("server_peak_rss_mib", {})[kind] = procstat.peak_rss_mib(server.process.pid)
                log(f"   {kind}: hub calls")
                rows = time_hub(row, calls, spec, server.process.pid if server else None)
                out["hub"].extend({"dataset": ds.name, **r} for r in rows)
            opened = []
        finally:
            for kind, store, _ in opened:
                store.close()
            shutil.rmtree(cfg.workdir / "oxigraph" / ds.name, ignore_errors=True)
            stores.close()
        entry["seconds"] = round(time.time() - size_started, 1)
        del floor, reference, impls, calls
        gc.collect()
    out["seconds"] = round(time.time() - started, 1)
    return out
