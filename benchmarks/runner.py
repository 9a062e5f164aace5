"""Timing runs: retrieval (every store and baseline on the same workloads) and loading.

A run measures everything it compares in one process, on one machine and the same data; it
never drops a store silently — one that cannot be started or loaded is listed as skipped, with
the reason. With ``check`` on, every answer of every implementation is compared with the NumPy
floor's (the floor itself is held against the stores by the tests), and mismatches are counted.
"""
from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks import sources
from benchmarks.baselines.csr_floor import CsrFloor
from benchmarks.baselines.rog_networkx import NetworkxGlobal, NetworkxPerQuestion
from benchmarks.baselines.tog_loop import TogLoop
from benchmarks.tasks import OPS, Retriever, Task, Workload, edges_touched
from benchmarks.workloads import (
    Seed,
    StoreRetriever,
    build_workloads,
    question_seeds,
    sample,
    walk_seeds,
)
from engine.errors import InvalidInputError
from engine.methods.meter import percentile
from engine.open import open_store
from engine.store import Store

BATCHED = "follow_paths_batched"
SERVER_KINDS = tuple(sources.SERVERS)
SPARQL_TIMEOUT = 600.0  # seconds per request to Virtuoso


@dataclass
class RunConfig:
    mode: str  # quick | full
    datasets: list[str]
    stores: list[str]  # oxigraph, virtuoso, bolt, or a store URI
    questions: int  # per MetaQA hop class; PathQuestion questions; random walks
    batch: int  # questions per batched follow_paths call
    batches: int  # batched calls per group (MetaQA hop class, PathQuestion, walks)
    budget: float  # seconds per implementation and workload; later tasks are left out
    seed: int
    workdir: Path
    check: bool = True
    networkx_max_triples: int = 3_000_000  # a bigger networkx graph does not fit in memory here
    load_repeats: int = 3  # per small dataset (< 300k triples); big ones load once
    virtuoso_buffer_pool_gib: float | None = None  # None: the throw-away server's default (≈ 0.8 GiB)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["workdir"] = str(self.workdir)
        return out


QUICK = dict(datasets=["metaqa", "gen:50k"], questions=5, batch=32, batches=1, budget=1.0, load_repeats=1)
FULL = dict(
    datasets=["metaqa", "pathquestion", "fb15k237", "gen:100k", "gen:1M"],
    questions=100, batch=64, batches=3, budget=30.0, load_repeats=3,
)


@dataclass
class Timing:
    """One implementation on one workload."""

    dataset: str
    op: str
    impl: str
    index: list[int] = field(default_factory=list)  # the tasks run (a budget or an error leaves some out)
    seconds: list[float] = field(default_factory=list)  # per task run
    questions: list[int] = field(default_factory=list)  # per task
    edges: list[int] = field(default_factory=list)  # per task
    tasks_total: int = 0
    mismatches: int = 0
    errors: list[str] = field(default_factory=list)
    stopped: str | None = None


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def timer() -> Iterator[list[float]]:
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


# ============================================================================ stores

class Stores:
    """Opens a fresh store per (kind, dataset); starts servers once; remembers why one is missing."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.servers: dict[str, Any] = {}
        self.skipped: dict[str, str] = {}
        self.opened = 0

    def open(self, kind: str, dataset: str) -> Store | None:
        """A fresh, empty store (its own directory, graph or database), or None when skipped."""
        if kind in self.skipped:
            return None
        self.opened += 1
        try:
            if kind == "oxigraph":
                from engine.stores.oxigraph import OxigraphStore

                path = self.cfg.workdir / "oxigraph" / dataset
                shutil.rmtree(path, ignore_errors=True)
                return OxigraphStore(str(path))
            if kind in SERVER_KINDS:
                if kind not in self.servers:
                    log(f"starting {kind} …")
                    pool = self.cfg.virtuoso_buffer_pool_gib if kind == "virtuoso" else None
                    options = {} if pool is None else {"buffer_pool_gib": pool}
                    self.servers[kind] = sources.start_server(kind, self.cfg.workdir / kind, **options)
                name = f"bench_{dataset.replace('-', '_')}_{self.opened}"
                if kind == "virtuoso":  # long single requests (loading 1M triples, a hub's neighbourhood)
                    return self.servers[kind].new_store(name, timeout=SPARQL_TIMEOUT)
                return self.servers[kind].new_store(name)
            if "://" not in kind:
                raise InvalidInputError(f"unknown store kind {kind!r}: use oxigraph, {', '.join(SERVER_KINDS)} or a store URI")
            return open_store(kind)
        except Exception as e:  # noqa: BLE001 — any failure means: report the store as skipped
            self.skipped[kind] = f"{type(e).__name__}: {e}".strip()
            log(f"{kind} skipped: {self.skipped[kind]}")
            return None

    def discard(self, kind: str, store: Store, dataset: str) -> None:
        """Close a store and free what it holds (the directory, the server-side graph)."""
        if kind == "virtuoso":
            sources.virtuoso_sql(store, f"SPARQL CLEAR GRAPH <{store.graph}>;")  # type: ignore[attr-defined]
        store.close()
        if kind == "oxigraph":
            shutil.rmtree(self.cfg.workdir / "oxigraph" / dataset, ignore_errors=True)

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()


def store_label(kind: str) -> str:
    """How a store appears in results: its kind, or a URI's scheme and address."""
    if "://" not in kind:
        return kind
    parts = urlsplit(kind)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"


# ============================================================================ workloads per dataset

def dataset_workloads(cfg: RunConfig, name: str, floor: CsrFloor) -> list[Workload]:
    """The workloads of a dataset: per-op tasks from questions or walks, and batched grounding."""
    present = floor.index.__contains__
    if name == "metaqa":
        groups = {f"MetaQA dev {h}-hop": sources.metaqa_questions(h) for h in (1, 2, 3)}
        per_group = {g: question_seeds(qs, cfg.questions, cfg.seed + i, present) for i, (g, qs) in enumerate(groups.items())}
        batches = {g: plan_batches(qs, cfg, present) for g, qs in groups.items()}
    elif name == "pathquestion":
        questions = sources.pathquestion_questions()
        per_group = {"PathQuestion PQ-2H/3H": question_seeds(questions, cfg.questions, cfg.seed, present)}
        batches = {"PathQuestion PQ-2H/3H": plan_batches(questions, cfg, present)}
    else:
        walks = walk_seeds(floor, cfg.questions, cfg.seed)
        per_group = {"random walks": walks}
        batches = {"random walks": walk_batches(floor, walks, cfg)}
    workloads: dict[str, Workload] = {}
    for group, seeds in per_group.items():
        for w in build_workloads(name, group, seeds, floor):
            workloads.setdefault(w.op, Workload(name, w.op, "")).tasks.extend(w.tasks)
    for w in workloads.values():
        w.source = ", ".join(per_group)
    batched = Workload(name, BATCHED, ", ".join(batches), [t for ts in batches.values() for t in ts])
    return [workloads[op] for op in OPS if op in workloads] + ([batched] if batched.tasks else [])


def plan_batches(questions: list[sources.QuestionPath], cfg: RunConfig, present) -> list[Task]:
    """Batched grounding: questions sharing a relation path (a MetaQA question type, a
    PathQuestion path), ``cfg.batch`` per call — how a pipeline grounds one plan for a batch."""
    by_path: dict[tuple[str, ...], list[str]] = {}
    for q in questions:
        if q.path and present(q.topic):
            by_path.setdefault(tuple(q.path), []).append(q.topic)
    common = sorted(by_path.items(), key=lambda kv: (-len(kv[1]), kv[0]))[: cfg.batches]
    return [
        Task("follow_paths", tuple(sample(sorted(set(topics)), cfg.batch, cfg.seed)), path, origin=f"plan {'/'.join(path)}")
        for path, topics in common
    ]


def walk_batches(floor: CsrFloor, walks: list[Seed], cfg: RunConfig) -> list[Task]:
    """Batched grounding on a graph without questions: a random walk's relation path from
    ``cfg.batch`` entities that have an edge with its first relation."""
    import numpy as np

    tasks = []
    rng = np.random.default_rng(cfg.seed)
    for walk in walks[: cfg.batches]:
        rel = floor.relation_index[walk.path[0]]
        holders = np.unique(np.concatenate([floor.src[floor.rel == rel], floor.dst[floor.rel == rel]]))
        holders = holders[~floor.is_literal[holders]]
        picked = rng.choice(holders, min(cfg.batch - 1, holders.size), replace=False)
        seeds = [walk.topic] + [floor.terms[i] for i in picked.tolist() if floor.terms[i] != walk.topic]
        tasks.append(Task("follow_paths", tuple(seeds[: cfg.batch]), tuple(walk.path), origin=f"plan {'/'.join(walk.path)}"))
    return tasks


# ============================================================================ timing

def time_workload(impls: list[Retriever], w: Workload, cfg: RunConfig, reference: "References") -> list[Timing]:
    """Every implementation on every task of a workload, task by task (so that a change in the
    machine's load hits all of them alike); each stops on its own once its budget is spent."""
    op = "follow_paths" if w.op == BATCHED else w.op
    active = [impl for impl in impls if op in impl.ops]
    timings = {impl.name: Timing(w.dataset, w.op, impl.name, tasks_total=len(w.tasks)) for impl in active}
    spent = dict.fromkeys(timings, 0.0)
    with harness_frozen():
        _time_tasks(active, op, w, cfg, reference, timings, spent)
    return list(timings.values())


@contextmanager
def harness_frozen() -> Iterator[None]:
    """The objects the harness holds so far (the baselines' graphs: networkx's is millions of
    objects; datasets, workloads) frozen out of the cyclic garbage collector while a workload
    is timed: a full collection no longer walks them, so a call pays for its own garbage only,
    not ≈ 0.2 s for whichever call happens to cross the threshold (issue 17's hub call)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _time_tasks(
    active: list[Retriever], op: str, w: Workload, cfg: RunConfig, reference: "References", timings: dict[str, Timing],
    spent: dict[str, float],
) -> None:
    for i, task in enumerate(w.tasks):
        answer = reference.answer(w, i)
        for impl in active:
            timing = timings[impl.name]
            if timing.stopped:
                continue
            if spent[impl.name] > cfg.budget:
                timing.stopped = f"time budget ({cfg.budget:g} s) reached after {i} of {len(w.tasks)} tasks"
                continue
            try:
                start = time.perf_counter()
                prepared = impl.prepare(task)
                spent[impl.name] += time.perf_counter() - start  # untimed, but it counts against the budget
                start = time.perf_counter()
                raw = impl.run(task, prepared)
                elapsed = time.perf_counter() - start
            except Exception as e:  # noqa: BLE001 — a failing call is reported, and the run goes on
                timing.errors.append(f"{task.origin}: {type(e).__name__}: {e}"[:300])
                if len(timing.errors) >= 3:
                    timing.stopped = "three errors"
                continue
            spent[impl.name] += elapsed
            timing.index.append(i)
            timing.seconds.append(elapsed)
            timing.questions.append(len(task.ids) if w.op == BATCHED else 1)
            timing.edges.append(edges_touched(op, answer))
            if cfg.check and impl is not reference.floor and impl.answer(task, raw) != answer:
                timing.mismatches += 1


class References:
    """The floor's answer to every task, computed once (the reference answers are checked
    against the stores' in tests/test_benchmarks.py)."""

    def __init__(self, floor: CsrFloor) -> None:
        self.floor = floor
        self.cache: dict[tuple[str, int], Any] = {}

    def answer(self, w: Workload, i: int) -> Any:
        key = (w.op, i)
        if key not in self.cache:
            task = w.tasks[i]
            self.cache[key] = self.floor.answer(task, self.floor.run(task, None))
        return self.cache[key]


def warm_up(impl: Retriever, workloads: list[Workload]) -> None:
    """One untimed call per op: imports, caches, connections."""
    for w in workloads:
        op = "follow_paths" if w.op == BATCHED else w.op
        if op in impl.ops and w.tasks:
            try:
                impl.run(w.tasks[0], impl.prepare(w.tasks[0]))
            except Exception:  # noqa: BLE001 — the timed run reports it
                pass


# ============================================================================ retrieval run

def run_retrieval(cfg: RunConfig) -> dict[str, Any]:
    started = time.time()
    stores = Stores(cfg)
    out: dict[str, Any] = {
        "kind": "retrieval", "config": cfg.to_json(), "load_average_start": os.getloadavg(),
        "datasets": [], "workloads": [], "timings": [], "stores": {},
    }
    try:
        for spec in cfg.datasets:
            ds = sources.dataset(spec, cfg.workdir, cfg.seed)
            log(f"== {ds.name}: reading")
            with timer() as floor_s:
                floor = CsrFloor(ds.read())
            info: dict[str, Any] = {
                "name": ds.name,
                "description": ds.description,
                "triples": floor.n_edges,
                "nodes": floor.n_nodes,
                "relations": len(floor.relations),
                "floor_build_s": round(floor_s[0], 3),
            }
            workloads = dataset_workloads(cfg, ds.name, floor)
            out["workloads"].extend(
                {"dataset": ds.name, "op": w.op, "source": w.source, "tasks": len(w.tasks),
                 "questions": sum(len(t.ids) for t in w.tasks) if w.op == BATCHED else len(w.tasks)}
                for w in workloads
            )
            reference = References(floor)
            impls: list[Retriever] = [floor]
            if floor.n_edges <= cfg.networkx_max_triples:
                with timer() as nx_s:
                    impls.append(NetworkxGlobal(ds.read()))
                info["networkx_build_s"] = round(nx_s[0], 3)
            else:
                info["networkx_skipped"] = f"{floor.n_edges:,} triples: a networkx graph this size does not fit in memory here"
            impls.append(NetworkxPerQuestion(floor))
            out["datasets"].append(info)
            opened: list[tuple[str, Store]] = []
            try:
                for kind in cfg.stores:
                    store = load_store(stores, kind, ds, out["stores"])
                    if store is not None:
                        opened.append((kind, store))
                        label = store_label(kind)
                        impls += [StoreRetriever(store, label), TogLoop(store, label)]
                for impl in impls:
                    warm_up(impl, workloads)
                for w in workloads:
                    log(f"   {w.op}: {len(w.tasks)} tasks")
                    out["timings"].extend(time_workload(impls, w, cfg, reference))
            finally:
                for kind, store in opened:
                    stores.discard(kind, store, ds.name)
            del floor, reference, impls
    finally:
        stores.close()
    out["timings"] = [summarise(t) for t in out["timings"] if t.seconds or t.errors]
    out["seconds"] = round(time.time() - started, 1)
    return out


def load_store(stores: Stores, kind: str, ds: sources.Dataset, entries: dict[str, Any]) -> Store | None:
    """A fresh store of ``kind`` holding the dataset, loaded through the engine; None (and the
    reason recorded) when it cannot be started or loaded."""
    label = store_label(kind)
    entry = entries.setdefault(label, {"uri": kind, "load_s": {}, "skipped": None, "failed": {}})
    store = stores.open(kind, ds.name)
    if store is None:
        entry["skipped"] = stores.skipped[kind]
        return None
    log(f"   {label}: loading")
    try:
        entry["load_s"][ds.name] = round(sources.engine_load(store, ds.files, ds.format).seconds, 2)
    except Exception as e:  # noqa: BLE001 — a store that cannot load is reported, not fatal
        entry["failed"][ds.name] = f"loading failed: {type(e).__name__}: {e}"
        log(traceback.format_exc())
        stores.discard(kind, store, ds.name)
        return None
    return store


def summarise(t: Timing) -> dict[str, Any]:
    """Latency percentiles (per call, and per question for batched calls), throughput, checks."""
    per_question = [s / q for s, q in zip(t.seconds, t.questions)]
    total = sum(t.seconds)
    row: dict[str, Any] = {
        "dataset": t.dataset,
        "op": t.op,
        "impl": t.impl,
        "tasks": len(t.seconds),
        "tasks_total": t.tasks_total,
        "questions": sum(t.questions),
        "p50_ms": ms(percentile(per_question, 0.5)),
        "p95_ms": ms(percentile(per_question, 0.95)),
        "p99_ms": ms(percentile(per_question, 0.99)),
        "mean_ms": ms(statistics.fmean(per_question)) if per_question else None,
        "qps": round(sum(t.questions) / total, 2) if total > 0 else None,
        "edges": sum(t.edges),
        "edges_per_s": round(sum(t.edges) / total) if total > 0 else None,
        "mismatches": t.mismatches,
        "errors": t.errors,
        "stopped": t.stopped,
        "index": t.index,
        "latencies_ms": [round(s * 1000, 4) for s in per_question],
    }
    return row


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 4)


# ============================================================================ loading run

def run_load(cfg: RunConfig) -> dict[str, Any]:
    """Engine load (``load_files``) against each store's native bulk path, on the same N-Triples file."""
    started = time.time()
    stores = Stores(cfg)
    out: dict[str, Any] = {
        "kind": "load", "config": cfg.to_json(), "load_average_start": os.getloadavg(),
        "datasets": [], "loads": [], "stores": {},
    }
    try:
        for spec in cfg.datasets:
            ds = sources.dataset(spec, cfg.workdir, cfg.seed)
            nt = sources.ntriples_file(ds, cfg.workdir)
            lines = sources.count_lines(nt)
            log(f"== {ds.name}: {nt} ({lines:,} lines)")
            out["datasets"].append(
                {"name": ds.name, "description": ds.description, "file": nt.name, "bytes": nt.stat().st_size, "lines": lines}
            )
            for kind in cfg.stores:
                label = store_label(kind)
                entry = out["stores"].setdefault(label, {"uri": kind, "skipped": None, "failed": {}})
                if kind in stores.skipped:
                    entry["skipped"] = stores.skipped[kind]
                    continue
                try:
                    row = load_one(cfg, stores, kind, ds, nt, lines)
                except Exception as e:  # noqa: BLE001
                    entry["failed"][ds.name] = f"{type(e).__name__}: {e}"
                    log(traceback.format_exc())
                    continue
                if row is None:
                    entry["skipped"] = stores.skipped.get(kind, "no native bulk path")
                    continue
                out["loads"].append({"dataset": ds.name, "store": label, **row})
    finally:
        stores.close()
    out["seconds"] = round(time.time() - started, 1)
    return out


def load_one(
    cfg: RunConfig, stores: Stores, kind: str, ds: sources.Dataset, nt: Path, lines: int
) -> dict[str, Any] | None:
    """Best-of-N seconds for the engine on the N-Triples file, the engine on the dataset's own
    files, and the store's native bulk loader on the N-Triples file; triple counts must agree."""
    native = NATIVE_LOADERS.get(kind)
    if native is None:
        stores.skipped.setdefault(kind, f"no native bulk path is known for {kind}")
        return None
    repeats = cfg.load_repeats if lines < 300_000 else 1
    row: dict[str, Any] = {}
    for name, files, fmt in (("engine_nt", (nt,), "ntriples"), ("engine_source", ds.files, ds.format)):
        if name == "engine_source" and ds.format == "ntriples":
            continue
        times, count = [], 0
        for _ in range(repeats):
            store = stores.open(kind, ds.name)
            if store is None:
                return None
            try:
                report = sources.engine_load(store, files, fmt)
                times.append(report.seconds)
                count = store.count_triples()
            finally:
                stores.discard(kind, store, ds.name)
        row[name + "_s"] = round(min(times), 3)
        row[name + "_triples"] = count
    times, count = [], 0
    for _ in range(repeats):
        seconds, count = native(cfg, stores, ds, nt)
        times.append(seconds)
    row["native_s"] = round(min(times), 3)
    row["native_triples"] = count
    row["triples"] = row["engine_nt_triples"]
    row["engine_tps"] = round(row["triples"] / row["engine_nt_s"])
    row["native_tps"] = round(count / row["native_s"])
    row["engine_over_native"] = round(row["engine_nt_s"] / row["native_s"], 2)
    if "engine_source_s" in row:
        row["engine_source_over_native"] = round(row["engine_source_s"] / row["native_s"], 2)
    row["counts_agree"] = row["engine_nt_triples"] == count
    return row


def native_oxigraph(cfg: RunConfig, stores: Stores, ds: sources.Dataset, nt: Path) -> tuple[float, int]:
    """pyoxigraph's own bulk loader on the file, into a fresh on-disk store."""
    import pyoxigraph as ox

    path = cfg.workdir / "oxigraph-native" / ds.name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    db = ox.Store(str(path))
    start = time.perf_counter()
    db.bulk_load(path=str(nt), format=ox.RdfFormat.N_TRIPLES)
    seconds = time.perf_counter() - start
    count = len(db)
    del db
    shutil.rmtree(path, ignore_errors=True)
    return seconds, count


def native_virtuoso(cfg: RunConfig, stores: Stores, ds: sources.Dataset, nt: Path) -> tuple[float, int]:
    """Virtuoso's bulk loader run directly: ``ld_dir`` + ``rdf_loader_run`` + ``checkpoint``
    through isql on the file copied into the server's staging directory (the copy is untimed)."""
    store = stores.open("virtuoso", ds.name)
    if store is None:
        raise RuntimeError(stores.skipped.get("virtuoso", "Virtuoso did not start"))
    folder = Path(store.staging_dir) / f"native-{ds.name}"  # type: ignore[attr-defined]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    shutil.copy(nt, folder / "data.nt")
    try:
        start = time.perf_counter()
        sources.virtuoso_sql(
            store, f"ld_dir('{folder}', '*.nt', '{store.graph}');\nrdf_loader_run();\ncheckpoint;"  # type: ignore[attr-defined]
        )
        seconds = time.perf_counter() - start
        count = store.count_triples()
        sources.virtuoso_sql(store, f"DELETE FROM DB.DBA.load_list WHERE ll_file LIKE '{folder}/%';")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        stores.discard("virtuoso", store, ds.name)
    return seconds, count


def native_bolt(cfg: RunConfig, stores: Stores, ds: sources.Dataset, nt: Path) -> tuple[float, int]:
    """A plain load script over Bolt with the official driver: the file parsed by pyoxigraph,
    then ``UNWIND $rows … MERGE`` in batches per relationship type, into the same graph shape
    as the engine's (``Entity {id}`` nodes, ``Literal {key}`` nodes, one type per relation)."""
    store = stores.open("bolt", ds.name)
    if store is None:
        raise RuntimeError(stores.skipped.get("bolt", "the Bolt server did not start"))
    try:
        start = time.perf_counter()
        sources.bolt_script_load(store, nt)
        seconds = time.perf_counter() - start
        count = store.count_triples()
    finally:
        stores.discard("bolt", store, ds.name)
    return seconds, count


NATIVE_LOADERS = {"oxigraph": native_oxigraph, "virtuoso": native_virtuoso, "bolt": native_bolt}
