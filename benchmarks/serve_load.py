"""``kgqa bench serve``: the HTTP API under load against the same calls in-process.

For each store the dataset is loaded through the engine, and a mixed workload is drawn from the
graph (seeded): every operation of the vocabulary (:data:`engine.serve.ops.OPERATIONS`) with
bodies built from real entities, walks and names. Then, with ``clients`` threads each running
``ops`` of the calls:

- **in-process**: each thread calls :func:`engine.serve.ops.run_operation` on the store itself
  (the mapping the server runs: validation, the store call, the JSON form of its result);
- **http**: each thread sends the same bodies to a ``kgqa serve`` process on a free loopback
  port over one kept-alive connection (:class:`engine.serve.client.ServeClient`), and every
  answer is compared with the in-process one (a different answer is a mismatch; a non-200 or a
  failed call is an error).

A few calls of each side run first, untimed. Reported per side: throughput (calls per second
over the wall time of all threads), latency p50/p95/p99 and mean per call, errors, mismatches;
and per operation for HTTP. The server runs in its own process, so the clients' JSON work does
not share the server's interpreter.
"""
from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import report, runner, sources
from engine.graph import NAME_RELATION, Literal
from engine.methods.meter import percentile
from engine.serve.client import ServeClient
from engine.serve.ops import OPERATIONS, run_operation
from engine.serve.settings import Bounds, ServeSettings
from engine.servers.base import free_port
from engine.store import Store

#: seconds the server process may take to answer its first request
STARTUP_TIMEOUT = 60.0
#: calls of each side run before the timed ones
WARM_UP = 22


@dataclass
class ServeLoadConfig:
    stores: list[str]
    dataset: str = "gen:100k"
    clients: int = 8
    ops: int = 200  # per client
    seed: int = 0
    workdir: Path = Path("kgqa-data") / "bench"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "workdir": str(self.workdir)}


@dataclass
class Side:
    """One side's run: per call its operation, seconds and JSON answer (None: it failed)."""

    name: str
    seconds: list[float] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0


# ----------------------------------------------------------------------------- the workload
class Graph:
    """What the workload is drawn from: each entity's outgoing edges to entities, and names."""

    def __init__(self, ds: sources.Dataset) -> None:
        self.out: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.names: dict[str, str] = {}
        for t in ds.read():
            if isinstance(t.object, Literal):
                if t.relation == NAME_RELATION and t.object.lang in (None, "en"):
                    self.names.setdefault(t.subject, t.object.value)
            else:
                self.out[t.subject].append((t.relation, t.object))
        self.subjects = sorted(s for s, edges in self.out.items() if any(o in self.out for _, o in edges))


def workload(graph: Graph, dialect: str, count: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """``count`` calls cycling through every operation in a seeded order, each from a random
    two-hop walk of the graph."""
    rng = random.Random(seed)
    names = sorted(graph.names)
    calls: list[tuple[str, dict[str, Any]]] = []
    order = list(OPERATIONS)
    while len(calls) < count:
        rng.shuffle(order)
        for name in order:
            start = rng.choice(graph.subjects)
            r1, middle = rng.choice([e for e in graph.out[start] if e[1] in graph.out])
            r2, end = rng.choice(graph.out[middle])
            calls.append((name, _body(name, start, r1, r2, end, rng, names, graph, dialect)))
    return calls[:count]


def _body(name: str, start: str, r1: str, r2: str, end: str, rng: random.Random, names: list[str], graph: Graph,
          dialect: str) -> dict[str, Any]:
    if name == "relations":
        return {"ids": [start, end]}
    if name == "expand":
        return {"ids": [start], "relations": [r1, r2]}
    if name == "follow_paths":
        return {"seeds": [start], "path": [r1, r2], "direction": "out"}
    if name == "subgraph":
        return {"seeds": [start], "hops": 1, "direction": "out"}
    if name == "shortest_paths":
        return {"sources": [start], "targets": [end], "max_hops": 2}
    if name == "two_hop_relations":
        return {"ids": [start], "r1": r1, "direction": "out"}
    if name == "names":
        return {"ids": [start, end, *rng.sample(names, 18)]}
    if name == "types":
        return {"ids": [start, end, *rng.sample(names, 8)]}
    if name == "search":
        return {"text": graph.names[rng.choice(names)], "mode": "exact"}
    if name == "execute":
        return {"sexpr": f"(JOIN (R {r1}) {start})"}
    if dialect == "sparql":
        return {"text": "SELECT ?p ?o WHERE { $e ?p ?o } ORDER BY ?p ?o", "params": {"e": start}}
    return {"text": "MATCH (n:Entity {id: $e})-[r]->(m) RETURN type(r) AS p, m.id AS o ORDER BY p, o", "params": {"e": start}}


# ----------------------------------------------------------------------------- the two sides
def _threads(clients: int, work: Any) -> float:
    """Run ``work(i)`` on ``clients`` threads at once; the wall seconds of them all."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def in_process(store: Store, calls: list[tuple[str, dict[str, Any]]], clients: int, bounds: Bounds) -> tuple[Side, list[Any]]:
    side, answers = Side("in-process"), [None] * len(calls)
    timings: list[tuple[int, float]] = []

    def work(i: int) -> None:
        for k in range(i, len(calls), clients):
            name, body = calls[k]
            started = time.perf_counter()
            try:
                answers[k] = json.loads(json.dumps(run_operation(store, name, body, bounds)))  # as a client reads it
            except Exception as e:  # noqa: BLE001 — counted, and the run goes on
                side.errors.append(f"{name}: {type(e).__name__}: {e}")
            timings.append((k, time.perf_counter() - started))

    for name, body in calls[:WARM_UP]:
        run_operation(store, name, body, bounds)
    side.wall = _threads(clients, work)
    _order(side, timings, calls)
    return side, answers


def over_http(url: str, calls: list[tuple[str, dict[str, Any]]], clients: int, expected: list[Any]) -> tuple[Side, int]:
    side, mismatches = Side("http"), [0]
    timings: list[tuple[int, float]] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        with ServeClient(url) as client:
            for k in range(i, len(calls), clients):
                name, body = calls[k]
                started = time.perf_counter()
                try:
                    status, answer = client.request("POST", f"/v1/ops/{name}", body)
                except Exception as e:  # noqa: BLE001
                    status, answer = 0, f"{type(e).__name__}: {e}"
                timings.append((k, time.perf_counter() - started))
                with lock:
                    if status != 200:
                        side.errors.append(f"{name}: HTTP {status}: {answer}")
                    elif answer != expected[k]:
                        mismatches[0] += 1

    with ServeClient(url) as client:
        for name, body in calls[:WARM_UP]:
            client.request("POST", f"/v1/ops/{name}", body)
    side.wall = _threads(clients, work)
    _order(side, timings, calls)
    return side, mismatches[0]


def _order(side: Side, timings: list[tuple[int, float]], calls: list[tuple[str, dict[str, Any]]]) -> None:
    for k, seconds in sorted(timings):
        side.ops.append(calls[k][0])
        side.seconds.append(seconds)


def summary(side: Side, mismatches: int | None = None) -> dict[str, Any]:
    s = side.seconds
    out: dict[str, Any] = {
        "calls": len(s),
        "wall_s": round(side.wall, 3),
        "calls_per_s": round(len(s) / side.wall, 1) if side.wall > 0 else None,
        "p50_ms": runner.ms(percentile(s, 0.5)),
        "p95_ms": runner.ms(percentile(s, 0.95)),
        "p99_ms": runner.ms(percentile(s, 0.99)),
        "mean_ms": runner.ms(statistics.fmean(s)) if s else None,
        "errors": len(side.errors),
        "first_errors": side.errors[:5],
    }
    if mismatches is not None:
        out["mismatches"] = mismatches
    return out


def per_operation(side: Side) -> dict[str, dict[str, Any]]:
    found: dict[str, list[float]] = defaultdict(list)
    for op, seconds in zip(side.ops, side.seconds):
        found[op].append(seconds)
    return {
        op: {"calls": len(s), "p50_ms": runner.ms(percentile(s, 0.5)), "p95_ms": runner.ms(percentile(s, 0.95)),
             "p99_ms": runner.ms(percentile(s, 0.99))}
        for op, s in sorted(found.items())
    }


# ----------------------------------------------------------------------------- the server process
def serve_arguments(store: Store) -> list[str]:
    """``kgqa serve`` options that open ``store`` again in another process (read-only)."""
    path = getattr(store, "path", None)
    if path:
        return ["--store", str(path)]
    graph = getattr(store, "graph", None)
    return ["--store", store.uri, *(["--store-option", f"graph={graph}"] if graph else [])]


class ServerProcess:
    """``kgqa serve`` on a free loopback port, in a process of its own."""

    def __init__(self, store_args: list[str], settings: ServeSettings, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "engine.cli.main", "serve", *store_args, "--port", str(self.port),
            "--workers", str(settings.workers), "--max-concurrency", str(settings.max_concurrency),
            "--timeout", str(settings.timeout),
        ]
        self._log = open(log, "w")
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self._log)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        with ServeClient(self.url) as client:
            while True:
                try:
                    if client.request("GET", "/v1/health")[0] == 200:
                        return
                except OSError:
                    pass
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"kgqa serve did not start; its log is {log}")
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


# ----------------------------------------------------------------------------- the run
def run_serve_load(cfg: ServeLoadConfig) -> dict[str, Any]:
    run_cfg = runner.RunConfig(mode="serve", datasets=[cfg.dataset], stores=cfg.stores, questions=0, batch=1, batches=1,
                               budget=0.0, seed=cfg.seed, workdir=cfg.workdir, load_repeats=1)
    ds = sources.dataset(cfg.dataset, cfg.workdir, cfg.seed)
    runner.log(f"== {ds.name}: reading")
    graph = Graph(ds)
    settings = ServeSettings(workers=max(8, cfg.clients), max_concurrency=4 * cfg.clients)
    out: dict[str, Any] = {
        "kind": "serve-load", "config": cfg.to_json(), "machine": report.machine(),
        "dataset": {"name": ds.name, "description": ds.description, "entities_with_edges": len(graph.out)},
        "server": {"workers": settings.workers, "max_concurrency": settings.max_concurrency, "timeout": settings.timeout},
        "stores": {},
    }
    stores = runner.Stores(run_cfg)
    entries: dict[str, Any] = {}
    try:
        for kind in cfg.stores:
            store = runner.load_store(stores, kind, ds, entries)
            label = runner.store_label(kind)
            if store is None:
                out["stores"][label] = {"skipped": entries[label]["skipped"] or entries[label]["failed"]}
                continue
            if kind == "oxigraph":  # the server opens it too: both read it, sharing its lock
                from engine.stores.oxigraph import OxigraphStore

                path = store.path  # type: ignore[attr-defined]
                store.close()
                store = OxigraphStore(path, read_only=True)
            calls = workload(graph, store.dialect, cfg.clients * cfg.ops, cfg.seed)
            runner.log(f"   {label}: {len(calls)} calls in-process on {cfg.clients} threads")
            local, expected = in_process(store, calls, cfg.clients, settings.bounds)
            runner.log(f"   {label}: the same over HTTP from {cfg.clients} clients")
            server = ServerProcess(serve_arguments(store), settings, cfg.workdir / f"serve-{kind}.log")
            try:
                remote, mismatches = over_http(server.url, calls, cfg.clients, expected)
            finally:
                server.stop()
            out["stores"][label] = {
                "load_s": entries[label]["load_s"].get(ds.name),
                "in_process": summary(local),
                "http": summary(remote, mismatches),
                "http_by_operation": per_operation(remote),
                "in_process_by_operation": per_operation(local),
            }
            stores.discard(kind, store, ds.name)
    finally:
        stores.close()
    return out


def markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    lines = [
        "# The HTTP API under load",
        "",
        f"{results['dataset']['name']} ({results['dataset']['description']}); {cfg['clients']} concurrent clients × "
        f"{cfg['ops']} mixed calls each (every operation of the vocabulary, seed {cfg['seed']}); the server "
        f"(`kgqa serve`, its own process, {results['server']['workers']} worker threads) on loopback, against the "
        "same calls through the ops layer in-process on as many threads. Machine: "
        + report.describe_machine(results["machine"]) + ".",
        "",
        "| store | side | calls/s | p50 ms | p95 ms | p99 ms | mean ms | errors | mismatches |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, entry in results["stores"].items():
        if "skipped" in entry:
            lines.append(f"| {label} | skipped: {entry['skipped']} | | | | | | | |")
            continue
        for side in ("in_process", "http"):
            s = entry[side]
            lines.append(
                f"| {label} | {side.replace('_', '-')} | {s['calls_per_s']} | {s['p50_ms']} | {s['p95_ms']} | {s['p99_ms']} | "
                f"{s['mean_ms']} | {s['errors']} | {s.get('mismatches', '')} |"
            )
    for label, entry in results["stores"].items():
        if "skipped" in entry:
            continue
        lines += ["", f"## {label}: per operation (ms)", "", "| operation | calls | in-process p50 | http p50 | http p95 | http p99 |",
                  "|---|---:|---:|---:|---:|---:|"]
        for op, s in entry["http_by_operation"].items():
            local = entry["in_process_by_operation"].get(op, {})
            lines.append(f"| {op} | {s['calls']} | {local.get('p50_ms')} | {s['p50_ms']} | {s['p95_ms']} | {s['p99_ms']} |")
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "serve.json", out / "serve.md"]
    paths[0].write_text(json.dumps(results, indent=2) + "\n")
    paths[1].write_text(markdown(results))
    return paths

