"""The engine's overhead: each retrieval workload through the engine's operation, against the
store's own execution of the very queries the engine compiled, sent by a raw client that keeps
its connection open.

For every task the engine runs once untimed with a listener on the store, which records the
operations it issued (``subgraph`` one per layer, ``fanout`` two, ``shortest_paths`` one per
depth); each is compiled once more (``store.explain``) into the text and parameters the store
sends. Then, ``repeats`` times and alternating, the engine's call is timed whole (validating,
compiling, binding, running, decoding, sorting, and the operation's own Python work) and so are
the raw client's executions of the recorded queries, back to back. The best time of each side
per task is summed over the workload; overhead = engine ÷ raw − 1.

The raw clients (what a user would write against each database, reading every value of every row):

- **oxigraph**: ``pyoxigraph.Store.query(text)`` on the store's own database handle, each
  solution read as a tuple of terms;
- **virtuoso**: one ``http.client.HTTPConnection`` kept alive, reading with immediate TCP
  acknowledgements as the store's connections do (``engine.stores.sparql_http``: without them
  some answer sizes wait ≈ 40 ms), ``POST /sparql`` with the query
  and the ids the store sends as URL parameters (``sparql.virtuoso.bind_with_parameters``),
  the answer in the format the engine asks for (a Turtle result set, one binding per line;
  ``sparql/turtle_results.py``), split into its lines and its rows counted;
- **bolt**: one driver session held open on the store's own driver (its connection pool), each
  query in a read transaction (``session.execute_read``: FalkorDB reads the database name
  outside transactions, and would answer from another graph), each record's values read. On
  FalkorDB the text is the one the store sends, with its parameters written in
  (``cypher.params.inline_parameters``).

The raw client must read as many rows as the engine decoded from each query, or the task is
reported as an error. While a workload is timed, the objects the harness holds are frozen out of
the cyclic garbage collector (``runner.harness_frozen``), as in the retrieval runs: otherwise a
full collection walks them on whichever side's call crosses the collector's threshold.
"""
from __future__ import annotations

import json
import os
import time
import traceback
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import runner, sources
from benchmarks.baselines.csr_floor import CsrFloor
from benchmarks.tasks import Task, Workload
from benchmarks.workloads import run_on_store
from cypher.params import inline_parameters
from engine.ops import CallRecord, Op
from engine.store import Store
from engine.stores.bolt import BoltStore
from engine.stores.oxigraph import OxigraphStore
from engine.stores.sparql_endpoint import SparqlEndpointStore
from engine.stores.sparql_http import QuickAckHTTPConnection
from sparql.virtuoso import bind_with_parameters

GOAL = 0.15  # the engine may add at most this much to the store's own execution


@dataclass
class OverheadConfig:
    datasets: list[str]
    stores: list[str]  # oxigraph, virtuoso, bolt
    questions: int  # per MetaQA hop class; random walks
    batch: int
    batches: int
    repeats: int  # timed runs of each side per task; the best counts
    seed: int
    workdir: Path

    def to_json(self) -> dict[str, Any]:
        return dict(asdict(self), workdir=str(self.workdir))


QUICK = {"datasets": ["metaqa", "fb15k237"], "questions": 5, "batch": 32, "batches": 1, "repeats": 3}
FULL = {"datasets": ["metaqa", "fb15k237"], "questions": 10, "batch": 64, "batches": 3, "repeats": 3}


# ============================================================================ raw clients

class OxigraphRaw:
    """pyoxigraph on the store's own database handle."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def prepare(self, op: Op) -> Any:
        return self.store.terms.bind(self.store.explain(op))  # type: ignore[attr-defined]

    def run(self, text: str) -> int:
        return len([tuple(s) for s in self.store.db.query(text, use_default_graph_as_union=False)])  # type: ignore[attr-defined]

    def close(self) -> None:
        pass


class VirtuosoRaw:
    """One HTTP connection kept alive to the store's endpoint; the answer in the format the
    engine asks for (Virtuoso's Turtle result set), each of its lines read."""

    def __init__(self, store: Store) -> None:
        self.store = store
        parts = urllib.parse.urlsplit(store.endpoint)  # type: ignore[attr-defined]
        self.path = parts.path or "/"
        self.connection = QuickAckHTTPConnection(parts.hostname, parts.port or 80, timeout=runner.SPARQL_TIMEOUT)

    def prepare(self, op: Op) -> Any:
        return bind_with_parameters(op, self.store.explain(op), self.store.terms)  # type: ignore[attr-defined]

    def run(self, prepared: tuple[str, list[tuple[str, str]]]) -> int:
        text, parameters = prepared
        self.connection.request(
            "POST", self.path, urllib.parse.urlencode([("query", text), *parameters]),
            {"Content-Type": "application/x-www-form-urlencoded", "Accept": "text/turtle"},
        )
        response = self.connection.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
        return sum(1 for line in data.decode("utf-8").split("\n") if line.startswith("_:_ res:solution"))

    def close(self) -> None:
        self.connection.close()


class BoltRaw:
    """One session held open on the store's own driver."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.session = store._driver.session(database=store._database)  # type: ignore[attr-defined]

    def prepare(self, op: Op) -> Any:
        text, params = self.store.explain(op)
        if self.store._falkordb:  # type: ignore[attr-defined]  # as the store sends it
            text, params = inline_parameters(text, params), {}
        return text, params

    def run(self, prepared: tuple[str, dict[str, Any]]) -> int:
        return self.session.execute_read(_read_all, *prepared)

    def close(self) -> None:
        self.session.close()


def _read_all(tx: Any, text: str, params: dict[str, Any]) -> int:
    return len([record.values() for record in tx.run(text, params)])


def raw_client(store: Store) -> OxigraphRaw | VirtuosoRaw | BoltRaw:
    """The raw client of a store's database."""
    if isinstance(store, OxigraphStore):
        return OxigraphRaw(store)
    if isinstance(store, SparqlEndpointStore):
        return VirtuosoRaw(store)
    if isinstance(store, BoltStore):
        return BoltRaw(store)
    raise ValueError(f"no raw client for {store!r}")


# ============================================================================ timing

@dataclass
class WorkloadOverhead:
    dataset: str
    store: str
    op: str
    tasks: int = 0
    calls: int = 0  # store calls (compiled queries) in all
    rows: int = 0  # rows the raw client read in all
    engine_s: float = 0.0
    raw_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out["engine_s"], out["raw_s"] = round(self.engine_s, 5), round(self.raw_s, 5)
        out["overhead"] = round(self.engine_s / self.raw_s - 1, 4) if self.raw_s > 0 else None
        return out


def recorded_ops(store: Store, task: Task) -> list[CallRecord]:
    """The calls the engine makes to the store for a task (one untimed run)."""
    ops: list[CallRecord] = []

    def listen(record: CallRecord) -> None:
        ops.append(record)

    store.listeners.append(listen)
    try:
        run_on_store(store, task)
    finally:
        store.listeners.remove(listen)
    return ops


def time_workload(store: Store, raw: Any, kind: str, w: Workload, repeats: int) -> WorkloadOverhead:
    result = WorkloadOverhead(w.dataset, kind, w.op)
    for task in w.tasks:
        try:
            calls = recorded_ops(store, task)
            prepared = [raw.prepare(call.op) for call in calls]
            rows = [raw.run(p) for p in prepared]  # warm: the same caches on both sides
            if rows != [call.rows for call in calls]:
                raise RuntimeError(f"the raw client read {rows} rows where the engine decoded {[c.rows for c in calls]}")
            best_engine = best_raw = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                run_on_store(store, task)
                best_engine = min(best_engine, time.perf_counter() - start)
                start = time.perf_counter()
                for p in prepared:
                    raw.run(p)
                best_raw = min(best_raw, time.perf_counter() - start)
        except Exception as e:  # noqa: BLE001 — reported, and the run goes on
            result.errors.append(f"{task.origin}: {type(e).__name__}: {e}"[:300])
            continue
        result.tasks += 1
        result.calls += len(prepared)
        result.rows += sum(rows)
        result.engine_s += best_engine
        result.raw_s += best_raw
    return result


def run_overhead(cfg: OverheadConfig) -> dict[str, Any]:
    started = time.time()
    run_cfg = runner.RunConfig(
        mode="overhead", datasets=cfg.datasets, stores=cfg.stores, questions=cfg.questions, batch=cfg.batch,
        batches=cfg.batches, budget=0.0, seed=cfg.seed, workdir=cfg.workdir,
    )
    stores = runner.Stores(run_cfg)
    out: dict[str, Any] = {
        "kind": "overhead", "config": cfg.to_json(), "load_average_start": os.getloadavg(),
        "datasets": [], "workloads": [], "stores": {},
    }
    try:
        for spec in cfg.datasets:
            ds = sources.dataset(spec, cfg.workdir, cfg.seed)
            runner.log(f"== {ds.name}: reading")
            floor = CsrFloor(ds.read())
            workloads = runner.dataset_workloads(run_cfg, ds.name, floor)
            out["datasets"].append({"name": ds.name, "triples": floor.n_edges, "nodes": floor.n_nodes})
            del floor
            for kind in cfg.stores:
                store = runner.load_store(stores, kind, ds, out["stores"])
                if store is None:
                    continue
                raw = raw_client(store)
                try:
                    for w in workloads:
                        runner.log(f"   {kind} {w.op}: {len(w.tasks)} tasks")
                        with runner.harness_frozen():
                            out["workloads"].append(time_workload(store, raw, kind, w, cfg.repeats).summary())
                except Exception:  # noqa: BLE001
                    out["stores"][kind]["failed"][ds.name] = traceback.format_exc()[-500:]
                finally:
                    raw.close()
                    stores.discard(kind, store, ds.name)
    finally:
        stores.close()
    out["seconds"] = round(time.time() - started, 1)
    return out


# ============================================================================ report

def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One goal per store: every workload's overhead under :data:`GOAL`."""
    found = []
    for kind in dict.fromkeys(w["store"] for w in results["workloads"]):
        rows = [w for w in results["workloads"] if w["store"] == kind and w["overhead"] is not None]
        worst = max(rows, key=lambda w: w["overhead"])
        over = [w for w in rows if w["overhead"] >= GOAL]
        found.append({
            "goal": f"the engine adds under {GOAL:.0%} to {kind}'s own execution of the same queries, on every workload",
            "met": not over,
            "value": f"worst {worst['overhead']:+.1%} ({worst['dataset']} {worst['op']}); over the goal on "
            f"{len(over)} of {len(rows)} workloads",
        })
    return found


def markdown(results: dict[str, Any]) -> str:
    from benchmarks.report import _goals_markdown, _stores_markdown, machine_markdown

    cfg = results["config"]
    lines = [
        "# Engine overhead over each store's own execution",
        "",
        f"Finished {results['finished']} in {results['seconds']:g} s. {machine_markdown(results['machine'])}",
        "",
        (
            f"Datasets {', '.join(cfg['datasets'])}; {cfg['questions']} questions or walks per group, batched calls "
            f"of {cfg['batch']} ({cfg['batches']} per group); best of {cfg['repeats']} per task and side. See "
            "`benchmarks/overhead.py` for what each side does."
        ),
        "",
        "## Goals",
        "",
        *_goals_markdown(results["goals"]),
        "",
        "## Stores",
        "",
        *_stores_markdown(results["stores"]),
        "",
        "## Per workload",
        "",
        "| store | dataset | workload | tasks | store calls | rows | engine s | raw client s | overhead |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for w in results["workloads"]:
        overhead = "–" if w["overhead"] is None else f"{w['overhead']:+.1%}"
        lines.append(
            f"| {w['store']} | {w['dataset']} | {w['op']} | {w['tasks']} | {w['calls']:,} | {w['rows']:,} | "
            f"{w['engine_s']:.4f} | {w['raw_s']:.4f} | {overhead} |"
        )
    errors = [f"- {w['store']} {w['dataset']} {w['op']}: {e}" for w in results["workloads"] for e in w["errors"]]
    if errors:
        lines += ["", "## Errors", "", *errors]
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out: Path) -> list[Path]:
    """``overhead.json`` and ``overhead.md`` in ``out``."""
    from datetime import datetime, timezone

    from benchmarks.report import machine

    out.mkdir(parents=True, exist_ok=True)
    results = dict(results, machine=machine(), finished=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    results["machine"]["load_average_start"] = [round(x, 2) for x in results.pop("load_average_start", ())]
    results["goals"] = goals(results)
    paths = [out / "overhead.json", out / "overhead.md"]
    paths[0].write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    paths[1].write_text(markdown(results))
    return paths

