"""The scale benchmark at tiny sizes: the hub pool of the generator, and a run on Oxigraph and
Virtuoso that reports every workload × size × store, the loads, and truncated hub calls."""
from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from benchmarks.cli import main
from benchmarks.generator import HUB_PROPERTY, FreebaseGenerator
from benchmarks.runner import BATCHED
from benchmarks.tasks import OPS
from engine.errors import InvalidInputError
from tests.conftest import missing


@pytest.fixture(scope="module")
def ontology(shared_data):
    if not (shared_data / "freebase-ontology").is_dir():
        missing(f"the Freebase ontology is not at {shared_data / 'freebase-ontology'}")


def _degrees(triples) -> Counter:
    degree: Counter = Counter()
    for t in triples:
        degree[t.subject] += 1
        if isinstance(t.object, str):
            degree[t.object] += 1
    return degree


def test_hub_pool_adds_a_hub_and_keeps_the_regular_graph(ontology):
    plain = list(FreebaseGenerator(18_000, seed=3))
    generator = FreebaseGenerator(20_000, seed=3, hub_edges=2_000)
    with_hub = list(generator)
    hub = generator.info.hub
    # the regular part is exactly the graph of size - hub_edges; the stubs follow it
    assert with_hub[: len(plain)] == plain
    stubs = with_hub[len(plain):]
    assert len(stubs) == generator.info.hub_edges == 2_000
    assert all(t.relation == HUB_PROPERTY and t.object == hub for t in stubs)
    assert len({t.subject for t in stubs}) == 2_000 and not {t.subject for t in stubs} & _degrees(plain).keys()
    degree = _degrees(with_hub)
    assert degree.most_common(1)[0] == (hub, degree[hub]) and degree[hub] >= 2_000


def test_no_hub_pool_by_default(ontology):
    generator = FreebaseGenerator(5_000, seed=1)
    list(generator)
    assert generator.info.hub is None and generator.info.hub_edges == 0
    with pytest.raises(ValueError, match="hub_edges"):
        FreebaseGenerator(1_000, hub_edges=1_000)


TINY = ["--questions", "8", "--batch", "4", "--batches", "1", "--budget", "5", "--hub-limit", "50"]


@pytest.fixture(scope="module")
def tiny_run(ontology, tmp_path_factory):
    """A scale run at 2k and 5k triples on both stores: its --workdir and --out."""
    if shutil.which("virtuoso-t") is None:
        missing("virtuoso-t is not installed (make virtuoso)")
    work, out = tmp_path_factory.mktemp("work"), tmp_path_factory.mktemp("out")
    code = main(["scale", "--sizes", "2k,5k", "--stores", "oxigraph,virtuoso", *TINY, "--workdir", str(work), "--out", str(out)])
    assert code == 0
    return work, out


def test_tiny_scale_run_reports_every_workload_size_and_store(tiny_run):
    _, out = tiny_run
    results = json.loads((out / "scale.json").read_text())
    sizes = [s["name"] for s in results["sizes"]]
    assert sizes == ["gen-2k", "gen-5k"]
    # every workload × size × store, every answer the floor's
    ops = set(OPS) | {BATCHED}
    timed = {(t["dataset"], t["op"], t["impl"]) for t in results["timings"]}
    for size in sizes:
        for store in ("oxigraph", "virtuoso"):
            assert {(size, op, f"store:{store}") for op in ops} <= timed
    assert all(t["mismatches"] == 0 and not t["errors"] and t["p50_ms"] is not None for t in results["timings"])
    # the loads: counted, timed, measured
    loads = {(r["dataset"], r["store"]): r for r in results["loads"]}
    assert set(loads) == {(s, k) for s in sizes for k in ("oxigraph", "virtuoso")}
    for (size, store), r in loads.items():
        graph = next(s for s in results["sizes"] if s["name"] == size)
        assert r["triples"] == graph["triples"] and r["read"] == graph["generation"]["triples"], r
        assert r["seconds"] > 0 and r["triples_per_s"] > 0 and r["loader_peak_rss_mib"] > 0 and r["disk_bytes"] >= 0
        assert (r.get("server_peak_rss_mib") or 0) > 0 if store == "virtuoso" else "server_peak_rss_mib" not in r
    # the hub: the largest node, its calls cut at the limit
    for s in results["sizes"]:
        assert s["degrees"]["max_total"]["node"] == s["generation"]["hub"] and s["hub_edges"] >= 0.1 * s["size"]
    hub = {(h["dataset"], h["store"], h["call"]): h for h in results["hub"]}
    for size in sizes:
        for store in ("oxigraph", "virtuoso"):
            for call in ("expand", "subgraph", "follow_paths"):
                h = hub[(size, store, call)]
                assert h["truncated"] and h["rows"] == 50 and h["client_peak_added_mib"] is not None, h
                assert (h["server_peak_added_mib"] is not None) == (store == "virtuoso"), h
            for call in ("relations", "two_hop_relations"):
                assert not hub[(size, store, call)]["truncated"]
    assert results["extrapolation"] and results["machine"]["git"] and results["machine"]["load_average_start"]
    markdown = (out / "scale.md").read_text()
    assert "Extrapolation, not a measurement" in markdown and "neo4j://" in markdown
    assert (out / "latency-vs-size.png").read_bytes()[:4] == b"\x89PNG"


def test_append_replaces_only_the_sizes_and_stores_it_measures(tiny_run, tmp_path):
    work, earlier = tiny_run
    out = tmp_path / "out"
    shutil.copytree(earlier, out)
    before = json.loads((out / "scale.json").read_text())
    assert main(["scale", "--sizes", "2k", "--stores", "oxigraph", *TINY, "--workdir", str(work), "--out", str(out), "--append"]) == 0
    after = json.loads((out / "scale.json").read_text())

    def rows(results, key, dataset, store):
        field = "impl" if key == "timings" else "store"
        name = f"store:{store}" if key == "timings" else store
        return [r for r in results[key] if r["dataset"] == dataset and r[field] == name]

    for key in ("loads", "timings", "hub"):
        assert rows(after, key, "gen-2k", "virtuoso") == rows(before, key, "gen-2k", "virtuoso") != []
        for store in ("oxigraph", "virtuoso"):
            assert rows(after, key, "gen-5k", store) == rows(before, key, "gen-5k", store) != []
        assert rows(after, key, "gen-2k", "oxigraph") != [] and len(rows(after, key, "gen-2k", "oxigraph")) == len(
            rows(before, key, "gen-2k", "oxigraph"))
    # this run's Oxigraph load at 2k replaced the earlier one (each load report is timed anew)
    assert rows(after, "loads", "gen-2k", "oxigraph") != rows(before, "loads", "gen-2k", "oxigraph")
    assert [s["name"] for s in after["sizes"]] == ["gen-2k", "gen-5k"]
    for key in ("loads", "timings", "hub"):  # in order of size, as a run writes them
        assert [r["dataset"] for r in after[key]] == sorted((r["dataset"] for r in after[key]), key=["gen-2k", "gen-5k"].index)
    two_k = {s["name"]: s for s in after["sizes"]}["gen-2k"]
    assert set(two_k["server_peak_rss_mib"]) == {"virtuoso"}
    assert after["config"]["stores"] == ["oxigraph", "virtuoso"]
    assert [r["stores"] for r in after["runs"]] == [["oxigraph", "virtuoso"], ["oxigraph"]]
    assert "on oxigraph, virtuoso at" in (out / "scale.md").read_text()

    # the same size generated as another graph is refused before anything runs or is written
    written = (out / "scale.json").read_bytes()
    with pytest.raises(InvalidInputError, match="would mix two graphs.*gen-2k-seed0-hub200.nt.gz there, gen-2k-seed7-hub200.nt.gz in this run"):
        main(["scale", "--sizes", "2k", "--stores", "oxigraph", *TINY, "--seed", "7",
              "--workdir", str(work), "--out", str(out), "--append"])
    assert (out / "scale.json").read_bytes() == written
