"""The benchmarks: the generator follows the Freebase schema, every baseline computes exactly
the stores' answers (a differential check, no timings), and a tiny run writes its reports."""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from collections import Counter, defaultdict

import numpy as np
import pytest

from benchmarks import overhead, runner
from benchmarks.baselines.csr_floor import CsrFloor
from benchmarks.baselines.rog_networkx import NetworkxGlobal, NetworkxPerQuestion
from benchmarks.baselines.tog_loop import TogLoop
from benchmarks.cli import main
from benchmarks.generator import FreebaseGenerator
from benchmarks.tasks import Task, Workload
from benchmarks.workloads import StoreRetriever, walk_seeds
from engine.errors import InvalidInputError, KGQAError
from engine.graph import NAME_RELATION, TYPE_RELATION, XSD, Literal
from engine.reference import ReferenceStore
from engine.stores.oxigraph import OxigraphStore
from tests.cli_process import ROOT, child_env
from tests.conftest import missing
from tests.random_graphs import RELATIONS, node_ids, random_graph

DATATYPES = {
    "type.int": {XSD + "integer"},
    "type.float": {XSD + "float"},
    "type.boolean": {XSD + "boolean"},
    "type.datetime": {XSD + "gYear", XSD + "gYearMonth", XSD + "date"},
}


# ---------------------------------------------------------------------------- the generator

@pytest.fixture(scope="module")
def generated(shared_data):
    """A small generated graph, its schema, and each node's types."""
    if not (shared_data / "freebase-ontology").is_dir():
        missing(f"the Freebase ontology is not at {shared_data / 'freebase-ontology'}")
    generator = FreebaseGenerator(20_000, seed=7)
    triples = list(generator)
    types: dict[str, set[str]] = defaultdict(set)
    for t in triples:
        if t.relation == TYPE_RELATION:
            types[t.subject].add(t.object)  # type: ignore[arg-type]
    return generator, triples, types


def test_generator_follows_domains_and_ranges(generated):
    generator, triples, types = generated
    schema = generator.schema
    facts = [t for t in triples if t.relation not in (NAME_RELATION, TYPE_RELATION)]
    assert len(facts) > len(triples) / 2
    for t in facts:
        prop = schema.properties[t.relation]
        assert prop.domain in types[t.subject], t
        if prop.literal:
            assert isinstance(t.object, Literal), t
            if prop.range in DATATYPES:
                assert t.object.datatype in DATATYPES[prop.range], t
            elif prop.range == "type.text":
                assert t.object.lang == "en", t
            else:
                assert t.object.datatype is None and t.object.lang is None, t
        else:
            assert prop.range in types[t.object], t  # type: ignore[index]


def test_generator_cvts_are_nameless_and_topics_named_once(generated):
    generator, triples, types = generated
    names = Counter(t.subject for t in triples if t.relation == NAME_RELATION)
    cvts = {node for node, classes in types.items() if classes & generator.schema.cvt}
    topics = {node for node, classes in types.items() if "common.topic" in classes}
    assert cvts and topics and not cvts & topics
    assert generator.info.cvts == len(cvts)
    assert not any(names[c] for c in cvts)
    assert all(names[t] == 1 for t in topics)
    # CVTs are real mediators: each links at least two other nodes
    degree = Counter(t.subject for t in triples if t.relation != TYPE_RELATION)
    degree.update(t.object for t in triples if isinstance(t.object, str) and t.relation != TYPE_RELATION)
    assert np.median([degree[c] for c in cvts]) >= 2


def test_generator_stores_reverse_properties_both_ways(generated):
    generator, triples, _ = generated
    stored = {(t.subject, t.relation, t.object) for t in triples}
    reverse = generator.schema.reverse
    paired = [t for t in triples if t.relation in reverse and not isinstance(t.object, Literal)]
    assert paired
    assert all((t.object, reverse[t.relation], t.subject) in stored for t in paired)


def test_generator_degrees_are_heavy_tailed(generated):
    _, triples, _ = generated
    degree: Counter = Counter()
    for t in triples:
        if not t.relation.startswith("type."):
            degree[t.subject] += 1
            if isinstance(t.object, str):
                degree[t.object] += 1
    d = np.sort(np.array(list(degree.values())))
    assert d.max() >= 50 * np.median(d)  # hubs
    assert d[-len(d) // 100:].sum() >= 0.12 * d.sum()  # the top 1 % holds a large share of the edges


def test_generator_is_reproducible(generated):
    generator, triples, _ = generated
    again = list(FreebaseGenerator(20_000, seed=7, schema=generator.schema))
    assert again == triples
    assert list(FreebaseGenerator(20_000, seed=8, schema=generator.schema))[:2000] != triples[:2000]


# ---------------------------------------------------------------------------- baselines = stores

def _tasks(rng: random.Random, ids: list[str], n: int) -> list[Task]:
    tasks = []
    for _ in range(n):
        node = rng.choice(ids)
        path = tuple(rng.choice(RELATIONS) for _ in range(rng.randint(1, 3)))
        tasks += [
            Task("follow_paths", (node,), path),
            Task("follow_paths", tuple(rng.sample(ids, 3)) + ("no-such-node",), path),
            Task("relations", tuple(rng.sample(ids, 3))),
            Task("two_hop_relations", (node,), (rng.choice(RELATIONS),)),
            Task("subgraph", (node, "no-such-node"), hops=rng.randint(1, 3)),
            Task("fanout", (node,)),
            Task("shortest_paths", tuple(rng.sample(ids, 2)), hops=rng.randint(1, 3), targets=tuple(rng.sample(ids, 3))),
        ]
    return tasks


def _assert_same_answers(retrievers, expected_from, tasks) -> None:
    for task in tasks:
        expected = expected_from.answer(task, expected_from.run(task, None))
        for r in retrievers:
            if task.op in r.ops:
                assert r.answer(task, r.run(task, r.prepare(task))) == expected, f"{r.name} {task}"


@pytest.mark.parametrize("seed", range(12))
def test_in_memory_baselines_match_the_reference(seed):
    """The floor, RoG's networkx retrieval (global and per question) and the ToG loop on the
    embedded store give the reference store's answers, corner cases included (self-loops,
    parallel and reciprocal edges, literals, awkward ids)."""
    triples = random_graph(seed)
    store = OxigraphStore(None)
    store.add_triples(triples)
    floor = CsrFloor(triples)
    retrievers = [floor, NetworkxGlobal(triples), NetworkxPerQuestion(CsrFloor(triples)), TogLoop(store, "oxigraph"), StoreRetriever(store, "oxigraph")]
    tasks = _tasks(random.Random(seed), node_ids(triples), 25)
    _assert_same_answers(retrievers, StoreRetriever(ReferenceStore(triples), "reference"), tasks)


@pytest.mark.parametrize("seed", [1, 2])
def test_tog_loop_matches_each_store(make_store, store_kind, seed):
    """The ToG loop issues raw per-entity queries; on every store it must give the store's own
    batched answers."""
    triples = random_graph(seed)
    store = make_store(store_kind, triples)
    tasks = _tasks(random.Random(seed), node_ids(triples), 10)
    _assert_same_answers([TogLoop(store, store_kind)], StoreRetriever(store, store_kind), tasks)


def test_baselines_match_on_a_generated_graph(generated):
    """Freebase-shaped data: CVT hops, hubs, typed literals as dead ends; tasks from random walks."""
    _, triples, _ = generated
    store = OxigraphStore(None)
    store.add_triples(triples)
    floor = CsrFloor(triples)
    tasks = []
    for s in walk_seeds(floor, 15, seed=3):
        tasks.append(Task("follow_paths", (s.topic,), tuple(s.path)))
        tasks.append(Task("two_hop_relations", (s.topic,), (s.path[0],)))
        tasks.append(Task("subgraph", (s.topic,), hops=2))
        tasks.append(Task("fanout", (s.topic,)))
        if s.answers:
            tasks.append(Task("shortest_paths", (s.topic,), hops=len(s.path), targets=tuple(s.answers)))
    assert len(tasks) >= 60
    retrievers = [floor, NetworkxGlobal(triples), NetworkxPerQuestion(floor), TogLoop(store, "oxigraph")]
    _assert_same_answers(retrievers, StoreRetriever(store, "oxigraph"), tasks)


def test_raw_clients_run_the_engines_own_queries_on_each_store(make_store, store_kind):
    """The overhead benchmark's raw client of each store sends the queries the engine compiled
    and must read exactly the rows the engine decoded from each (it reports an error if not)."""
    triples = random_graph(4)
    store = make_store(store_kind, triples)
    tasks = _tasks(random.Random(4), node_ids(triples), 4)
    raw = overhead.raw_client(store)
    try:
        by_op: dict[str, list[Task]] = defaultdict(list)
        for task in tasks:
            by_op[task.op].append(task)
        for op, op_tasks in by_op.items():
            result = overhead.time_workload(store, raw, store_kind, Workload("random", op, "", op_tasks), repeats=1)
            assert result.errors == [] and result.tasks == len(op_tasks), (op, result.errors)
            assert result.calls >= len(op_tasks) and result.engine_s > 0 and result.raw_s > 0
    finally:
        raw.close()


# ---------------------------------------------------------------------------- a tiny run

def test_tiny_retrieval_run_writes_json_markdown_and_plots(tmp_path, generated):
    out = tmp_path / "out"
    code = main([
        "retrieval", "--quick", "--datasets", "gen:2k,gen:4k", "--stores", "oxigraph,no-such-store",
        "--questions", "3", "--batch", "4", "--budget", "5",
        "--workdir", str(tmp_path / "work"), "--out", str(out),
    ])
    assert code == 0
    results = json.loads((out / "retrieval.json").read_text())
    assert {d["name"] for d in results["datasets"]} == {"gen-2k", "gen-4k"}
    impls = {t["impl"] for t in results["timings"]}
    assert {"store:oxigraph", "tog-loop:oxigraph", "csr-floor", "networkx-global", "networkx-per-question"} <= impls
    assert all(t["mismatches"] == 0 and not t["errors"] for t in results["timings"])
    assert "unknown store kind" in results["stores"]["no-such-store"]["skipped"]  # reported, not dropped
    assert results["ratios"] and results["goals"] and results["machine"]["cores"]
    markdown = (out / "retrieval.md").read_text()
    assert "## Goals" in markdown and "store:oxigraph" in markdown and "skipped" in markdown
    for name in ("latency-gen-2k.png", "latency-gen-4k.png", "throughput-vs-size.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_the_virtuoso_buffer_pool_reaches_the_server_a_run_starts(tmp_path):
    if shutil.which("virtuoso-t") is None:
        missing("virtuoso-t is not installed (make virtuoso)")
    cfg = runner.RunConfig(mode="quick", datasets=[], stores=["virtuoso"], questions=1, batch=1, batches=1, budget=1.0,
                           seed=0, workdir=tmp_path, virtuoso_buffer_pool_gib=0.5)
    stores = runner.Stores(cfg)
    try:
        store = stores.open("virtuoso", "pool")
        assert store is not None, stores.skipped
        store.close()
        assert stores.servers["virtuoso"].buffers() == 65536
    finally:
        stores.close()
    with pytest.raises(InvalidInputError, match="--virtuoso-buffer-pool-gib: a Virtuoso buffer pool of 0 GiB: give 0.1 to 1024"):
        main(["scale", "--sizes", "2k", "--virtuoso-buffer-pool-gib", "0", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_tiny_load_run_compares_with_the_native_loader(tmp_path, generated, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "out"
    code = main(["load", "--datasets", "gen:2k", "--stores", "oxigraph", "--workdir", str(tmp_path / "work"), "--out", str(out)])
    assert code == 0
    results = json.loads((out / "load.json").read_text())
    (row,) = results["loads"]
    assert row["store"] == "oxigraph" and row["counts_agree"] and row["triples"] > 500
    assert row["engine_over_native"] > 0 and results["goals"]
    assert "engine ÷ native" in (out / "load.md").read_text()
    # what produced the results: the command with the thread limit it ran under, the commit and the machine
    meta = json.loads((out / "meta.json").read_text())
    assert meta["commands"] == [f"OMP_NUM_THREADS=1 python -m benchmarks load --datasets gen:2k --stores oxigraph --workdir {tmp_path / 'work'} --out {out}"]
    assert "cores" in meta["machine"] and "commit" in meta


def test_tiny_overhead_run_writes_json_and_markdown(tmp_path, generated):
    out = tmp_path / "out"
    code = main([
        "overhead", "--quick", "--datasets", "gen:2k", "--stores", "oxigraph", "--questions", "2",
        "--repeats", "1", "--workdir", str(tmp_path / "work"), "--out", str(out),
    ])
    assert code == 0
    results = json.loads((out / "overhead.json").read_text())
    assert {w["op"] for w in results["workloads"]} >= {"follow_paths", "subgraph", "follow_paths_batched"}
    assert all(not w["errors"] and w["tasks"] and w["overhead"] is not None for w in results["workloads"])
    (goal,) = results["goals"]
    assert "oxigraph" in goal["goal"] and results["machine"]["git"]
    assert "| oxigraph | gen-2k | subgraph |" in (out / "overhead.md").read_text()


def test_generate_writes_ntriples(tmp_path, generated):
    path = tmp_path / "g.nt"
    assert main(["generate", "3k", "--out", str(path), "--seed", "1"]) == 0
    lines = path.read_text().splitlines()
    assert len(lines) > 1000 and all(line.endswith(" .") and line.startswith("<http://rdf.freebase.com/ns/") for line in lines)


@pytest.mark.parametrize("argv, says", [
    (["generate", "abc"], "graph size 'abc': give a number of triples from 1 to 100M"),
    (["generate", "0"], "graph size '0': give a number of triples from 1 to 100M"),
    (["generate", "--", "-5"], "graph size '-5': give"),
    (["generate", "1e999"], "graph size '1e999': give"),
    (["generate", "1T"], "graph size '1T': give"),
    (["generate", "101M"], "graph size '101M': give"),
    (["generate", "1k", "--seed", "-1"], "--seed: '-1': give a whole number from 0 to 4294967295"),
    (["limits", "--store", "memory:", "--max-id", "99999999999"], "--max-id 99999999999: give a size in bytes up to 1,000,000"),
    (["limits", "--store", "memory:", "--max-literal", "99999999999"], "--max-literal 99999999999: give a size in bytes up to"),
])
def test_bench_arguments_out_of_range_are_named_before_any_work(argv, says, tmp_path, capsys):
    from engine.cli.main import main as kgqa

    out = tmp_path / "g.nt"
    try:
        code = kgqa(["bench", *argv[:1], "--out", str(out), *argv[1:]] if argv[0] == "generate" else ["bench", *argv])
    except SystemExit as e:  # argparse's own exit
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # no .part left


def test_a_scale_size_out_of_range_is_named(tmp_path, capsys):
    with pytest.raises(InvalidInputError, match="--sizes '1k,1e999': graph size '1e999': give a number of triples from 1 to 100M"):
        main(["scale", "--sizes", "1k,1e999", "--workdir", str(tmp_path), "--out", str(tmp_path / "out")])
    assert list(tmp_path.iterdir()) == []
    # as `python -m benchmarks` and `kgqa bench` report it: an error naming it, exit code 2
    result = subprocess.run([sys.executable, "-m", "benchmarks", "scale", "--sizes", "1T", "--workdir", str(tmp_path)],
                            capture_output=True, text=True, timeout=120, cwd=ROOT, env=child_env())
    assert result.returncode == 2 and "kgqa: error: bench scale: --sizes '1T'" in result.stderr
    assert "Traceback" not in result.stderr and list(tmp_path.iterdir()) == []


def test_an_interrupted_write_leaves_no_part_file(tmp_path):
    from benchmarks.sources import write_ntriples
    from engine.graph import Triple

    def triples():
        yield Triple("m.1", "film.r", "m.2")
        raise KeyboardInterrupt

    path = tmp_path / "g.nt"
    path.write_text("kept\n")
    with pytest.raises(KeyboardInterrupt):
        write_ntriples(triples(), path)
    assert [p.name for p in tmp_path.iterdir()] == ["g.nt"] and path.read_text() == "kept\n"  # the earlier file stands


@pytest.mark.model
@pytest.mark.shared_data
def test_methods_benchmark_runs_a_method_as_its_command_and_lists_what_it_skips(shared_data, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["methods", "--methods", "rog,etd", "--datasets", "pathquestion", "--stores", "oxigraph", "--questions", "1",
            "--method-option", "rog.answer_mode=paths", "--method-option", "rog.k=1", "--method-option", "rog.max_hops=2", "--workdir", str(tmp_path / "work"), "--out", str(out)]
    assert main(argv) == 0
    results = json.loads((out / "methods.json").read_text())
    rows = {(r["method"], r["dataset"]) for r in results["rows"]}
    assert rows == {("rog", "pathquestion-2h"), ("rog", "pathquestion-3h")}
    for r in results["rows"]:
        s = r["seconds_per_question"]
        assert r["questions"] == 1 and r["store"] == "oxigraph" and r["calls_per_question"]["llm"] >= 1
        assert s["store"] > 0 and s["model"] > 0 and s["total"] >= s["store"] + s["model"]
        assert r["rog"]["plans"] == 1
        records = (tmp_path / "work" / "predictions" / f"rog-{r['dataset']}-oxigraph.jsonl").read_text().splitlines()
        assert len(records) == 1 and json.loads(records[0])["seconds"]["total"] == pytest.approx(s["total"], abs=1e-4)
    # EtD without a checkpoint is listed with the reason, never dropped
    assert {(s["method"], s["dataset"]) for s in results["skipped"]} == {("etd", "pathquestion-2h"), ("etd", "pathquestion-3h")}
    assert all("kgqa etd train" in s["reason"] for s in results["skipped"])
    assert "| rog | pathquestion-2h | oxigraph |" in (out / "methods.md").read_text()


def test_methods_benchmark_gives_fidelis_one_index_per_graph_in_the_workdir(tmp_path):
    from benchmarks.methods import MethodsConfig, method_config
    from engine.methods.registry import parse_method_options

    cfg = MethodsConfig(methods=["fidelis"], datasets=["metaqa"], stores=["oxigraph", "virtuoso"], questions=2, seed=0,
                        workdir=tmp_path)
    assert method_config(cfg, "fidelis", "metaqa", "metaqa-2hop").index == str(tmp_path / "fidelis-index" / "metaqa")
    cfg.method_options = parse_method_options(["fidelis.index=/srv/index", "fidelis.width=2"])
    config = method_config(cfg, "fidelis", "metaqa", "metaqa-2hop")
    assert (config.index, config.width) == ("/srv/index", 2)
    with pytest.raises(KGQAError, match="FidelisConfig has no option 'widht'"):
        method_config(MethodsConfig(["fidelis"], ["metaqa"], ["oxigraph"], 2, 0, tmp_path, method_options={"fidelis": {"widht": "2"}}),
                      "fidelis", "metaqa", "metaqa-2hop")
    with pytest.raises(KGQAError, match="METHOD.OPTION=VALUE"):
        parse_method_options(["fidelis=--width 2"])


#: a finished stage's marker as `kgqa reproduce` writes it (engine.recipes.steps._run_step)
DONE = {"hash": "h", "state": "done", "seconds": 1.0, "cpu_seconds": 1.0, "device": "cpu", "report": {}}


def test_methods_benchmark_answers_as_the_full_recipes_run_in_a_reproduce_workdir(tmp_path, monkeypatch):
    from benchmarks.methods import MethodsConfig, answering_dtype, method_config, run_methods
    from engine.models import device

    runs = tmp_path / "kgqa-data"
    cfg = MethodsConfig(methods=["ldr", "etd"], datasets=["metaqa"], stores=["oxigraph"], questions=2, seed=0,
                        workdir=tmp_path / "bench", recipe_runs=runs)
    # a stage that has not finished there is named with the command that trains it
    with pytest.raises(KGQAError, match=f"not trained stage 'ldr' in {runs}: run `kgqa reproduce ldr --workdir {runs}`"):
        method_config(cfg, "ldr", "metaqa", "metaqa-2hop")
    stages = runs / "runs" / "ldr" / "full" / "stages"
    stages.mkdir(parents=True)
    (stages / "ldr.done.json").write_text(json.dumps({"state": "running"}))
    with pytest.raises(KGQAError, match="not trained stage 'ldr'"):
        method_config(cfg, "ldr", "metaqa", "metaqa-2hop")
    (stages / "ldr.done.json").write_text(json.dumps(DONE))
    assert method_config(cfg, "ldr", "metaqa", "metaqa-2hop").model == str(stages / "ldr")
    monkeypatch.setattr(device, "native_bf16", lambda name: True)  # on a CPU without it, float32 (test_reproduce)
    assert answering_dtype(cfg, "ldr") == "bfloat16" and answering_dtype(MethodsConfig(
        ["ldr"], ["metaqa"], ["oxigraph"], 2, 0, tmp_path), "ldr") is None
    # each question set gets the checkpoint its recipe answers it with; --method-option still wins
    etd = runs / "runs" / "etd" / "full" / "stages"
    etd.mkdir(parents=True)
    for name in ("metaqa-1hop", "metaqa-3hop"):
        (etd / f"{name}.done.json").write_text(json.dumps(DONE))
    assert method_config(cfg, "etd", "metaqa", "metaqa-3hop").checkpoint == str(etd / "metaqa-3hop" / "best.pt")
    assert method_config(cfg, "etd", "metaqa", "metaqa-1hop").gnn_only is True
    cfg.method_options = {"etd": {"checkpoint": "/srv/etd.pt"}}
    assert method_config(cfg, "etd", "metaqa", "metaqa-2hop").checkpoint == "/srv/etd.pt"
    with pytest.raises(KGQAError, match="answers no test set 'metaqa-4hop'"):
        method_config(cfg, "ldr", "metaqa", "metaqa-4hop")
    cfg.etd_checkpoints = tmp_path / "etd"
    with pytest.raises(KGQAError, match="--etd-checkpoints and --recipe-runs both name EtD's checkpoints"):
        run_methods(cfg)


def test_methods_benchmark_answers_as_the_recipe_named_for_a_method(tmp_path):
    from benchmarks.methods import MethodsConfig, method_config, run_methods

    runs = tmp_path / "kgqa-data"
    cfg = MethodsConfig(methods=["arg"], datasets=["pathquestion"], stores=["oxigraph"], questions=2, seed=0,
                        workdir=tmp_path / "bench", recipe_runs=runs, recipes={"arg": "lora"})
    with pytest.raises(KGQAError, match=f"arg's lora recipe has not trained stage 'generator' in {runs}: "
                       f"run `kgqa reproduce arg --recipe lora --workdir {runs}`"):
        method_config(cfg, "arg", "pathquestion", "pathquestion-2h")
    stages = runs / "runs" / "arg" / "lora" / "stages"
    stages.mkdir(parents=True)
    (stages / "generator.done.json").write_text(json.dumps(DONE))
    config = method_config(cfg, "arg", "pathquestion", "pathquestion-2h")
    assert (config.model, config.k, config.n_demos) == (str(stages / "generator"), 3, 0)
    # an unknown recipe fails before any store loads, and --recipe means nothing without --recipe-runs
    with pytest.raises(KGQAError, match="no recipe 'lorax': use one of full, lora, quick"):
        run_methods(MethodsConfig(["arg"], ["metaqa"], ["oxigraph"], 2, 0, tmp_path, recipe_runs=runs, recipes={"arg": "lorax"}))
    with pytest.raises(KGQAError, match="give --recipe-runs too"):
        run_methods(MethodsConfig(["arg"], ["metaqa"], ["oxigraph"], 2, 0, tmp_path, recipes={"arg": "lora"}))
    with pytest.raises(KGQAError, match="--recipe 'argx=lora': write METHOD=NAME with METHOD one of"):
        main(["methods", "--recipe", "argx=lora", "--recipe-runs", str(runs)])


def test_limits_probes_the_longest_id_and_literal_a_store_keeps(capsys):
    assert main(["limits", "--store", "memory:", "--max-id", "300", "--max-literal", "200"]) == 0
    out = capsys.readouterr().out
    # the embedded store keeps both whole up to the bounds tried, and writes no results folder
    assert "id (as stored): >= 300 bytes" in out and "literal value: >= 200 bytes" in out
