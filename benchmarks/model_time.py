"""Model time per question against an earlier commit, on the same questions (issue 17 item 2).

    python -m benchmarks.model_time --baseline 61a4564 --store kgqa-data/metaqa --questions 10

The earlier commit is checked out into a temporary git worktree and each method is run there
and here, one after the other, with the same command-line options on the same question file (a
seeded sample of MetaQA's held-out test split written as a MetaQA file, so that both versions
read it): RoG (grounded plans, RoG's reasoning prompt, the offline model) and ARG (ten BM25
demonstrations from the same pool of training questions, see :func:`write_questions`).
Model seconds per question come from each version's own records (the old RoG's ``timings``
planning + reasoning, the old ARG's ranker + generation seconds; the run protocol's
``seconds.model`` here). Answers are compared question by question (ARG's by its executed form
and answer ids).

Results go to ``benchmarks/results/model-time/model-time.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "model-time"

#: per method: the old command (its arguments after ``kgqa``) and the new one
COMMANDS: dict[str, dict[str, list[str]]] = {
    "rog": {
        "old": ["rog", "run", "--dataset", "{tests}", "--store", "{store}", "--plan-mode", "grounded", "--mode", "llm",
                "-k", "3", "--no-progress", "--out", "{out}"],
        "new": ["rog", "run", "--dataset", "{tests}", "--split", "all", "--store", "{store}", "--plan-mode", "grounded",
                "--mode", "llm", "-k", "3", "--no-progress", "--out", "{out}"],
    },
    "arg": {
        "old": ["arg", "evaluate", "--dataset", "metaqa", "--questions", "{tests_and_pool}", "--sample", "{n}", "--seed", "0",
                "--pool", "{pool}", "--n-demos", "10", "--demo-mode", "bm25", "--store", "{store}", "--output", "{out}"],
        "new": ["arg", "run", "--dataset", "{dataset}", "--split", "test", "--sample", "{n}", "--seed", "{seed}",
                "--pool", "{pool}", "--n-demos", "10", "--demo-mode", "bm25", "--store", "{store}", "--no-progress", "--out", "{out}"],
    },
}
POOL = 200


def _old_model_seconds(method: str, record: dict[str, Any]) -> float:
    if method == "rog":
        return record["timings"]["planning"] + record["timings"]["reasoning"]
    return record["seconds"]["model"] + record["seconds"]["generation"]


def _old_answers(method: str, record: dict[str, Any]) -> list[str]:
    """RoG's answers; ARG's executed form, then its answer ids."""
    return list(record["prediction"]) if method == "rog" else [str(record["sexpr"]), *record["answers"]]


def _new_answers(method: str, record: dict[str, Any]) -> list[str]:
    return list(record["prediction"]) if method == "rog" else [str(record["arg"]["sexpr"]), *record["prediction_ids"]]


def _write_metaqa(path: Path, questions: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{q.question}\t{'|'.join(q.answers)}\n" for q in questions), encoding="utf-8")
    path.with_name(path.name.replace(".txt", "_qtype.txt")).write_text("".join(f"{q.qtype}\n" for q in questions), encoding="utf-8")
    return path


def write_questions(dataset: str, n: int, seed: int, directory: Path) -> dict[str, Path]:
    """MetaQA files both versions read: ``tests``, a seeded sample of the test split (what the new
    code's ``--split test --sample n --seed seed`` answers), and ``tests_and_pool``, those tests and
    the new code's demonstration pool (its train split's ``--pool`` sample) laid out so that the old
    ``arg evaluate`` (which shuffles a file with ``random.Random(0)``, answers the first n and
    draws demonstrations from the next ``--pool``) answers the same tests with the same pool."""
    import random

    from loaders.datasets import select_questions

    tests = select_questions(dataset, "test", sample=n, seed=seed)
    pool = select_questions(dataset, "train", sample=POOL, seed=seed)
    order = list(range(len(tests) + len(pool)))
    random.Random(0).shuffle(order)  # the old code's shuffle: position order[j] comes out j-th
    laid_out: list = [None] * len(order)
    for j, q in enumerate([*tests, *pool]):
        laid_out[order[j]] = q
    hop_dir = directory / f"{tests[0].hops}-hop"
    return {"tests": _write_metaqa(hop_dir / "qa_tests.txt", tests), "tests_and_pool": _write_metaqa(hop_dir / "qa_pool.txt", laid_out)}


def run_version(tree: Path, argv: list[str], log: Path) -> float:
    """``kgqa ARGV`` with the code of ``tree``; the wall seconds (the output goes to ``log``)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    with log.open("w") as f:
        done = subprocess.run([sys.executable, "-m", "engine.cli.main", *argv], cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"`kgqa {' '.join(argv)}` in {tree} failed (exit {done.returncode}); see {log}")
    return time.perf_counter() - started


def compare(method: str, old_tree: Path, files: dict[str, Path], args: argparse.Namespace, work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"method": method}
    records: dict[str, list[dict[str, Any]]] = {}
    for version, tree in (("old", old_tree), ("new", ROOT)):
        path = work / f"{method}-{version}.jsonl"
        fill = {**files, "store": args.store, "out": path, "n": args.questions, "seed": args.seed, "pool": POOL, "dataset": args.dataset}
        argv = [a.format(**fill) for a in COMMANDS[method][version]]
        if version == "new":
            argv += shlex.split(args.new_args)
        out[f"{version}_command"] = "kgqa " + " ".join(argv)
        out[f"{version}_wall_seconds"] = round(run_version(tree, argv, work / f"{method}-{version}.log"), 2)
        records[version] = [json.loads(line) for line in path.read_text().splitlines()]
    old = {r["question"]: r for r in records["old"]}
    new = {r["question"]: r for r in records["new"]}
    common = [q for q in new if q in old]
    old_s = [_old_model_seconds(method, old[q]) for q in common]
    new_s = [new[q]["seconds"]["model"] for q in common]
    same = [q for q in common if _old_answers(method, old[q]) == _new_answers(method, new[q])]
    out.update(
        questions=len(common),
        old_model_seconds_per_question=round(sum(old_s) / len(common), 3),
        new_model_seconds_per_question=round(sum(new_s) / len(common), 3),
        speedup=round(sum(old_s) / max(sum(new_s), 1e-9), 2),
        same_answers=len(same),
        differing=[{"question": q, "old": _old_answers(method, old[q])[:3], "new": _new_answers(method, new[q])[:3]} for q in common if q not in same],
    )
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Model time per question: {result['baseline']} against {result['machine']['git']}",
        "",
        (f"{result['dataset']}, {result['questions']} held-out test questions (seed {result['seed']}), store `{result['store']}`, "
        f"`OMP_NUM_THREADS={result['omp_threads']}`, load average at the start {result['machine']['load_average']}."
        + (f" The current code's commands also get `{result['new_args']}`." if result.get("new_args") else "")),
        "",
        "| method | questions | old model s/q | new model s/q | speed-up | same answers |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in result["methods"]:
        lines.append(
            f"| {m['method']} | {m['questions']} | {m['old_model_seconds_per_question']} | {m['new_model_seconds_per_question']} "
            f"| {m['speedup']}× | {m['same_answers']} of {m['questions']} |"
        )
    lines += ["", "Commands:", ""]
    for m in result["methods"]:
        lines += [f"- old: `{m['old_command']}`", f"- new: `{m['new_command']}`"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", required=True, help="the earlier commit (e.g. 61a4564, the code issue 17 measured)")
    p.add_argument("--store", required=True, help="a store with MetaQA's KB loaded")
    p.add_argument("--dataset", default="metaqa-2hop")
    p.add_argument("--questions", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default="arg,rog")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--new-args", default="", help="options added to the current code's commands only, e.g. "
                   "'--dtype bfloat16' (an option the earlier code does not have)")
    p.add_argument("--workdir", default=None, help="keep the question files, records and logs here (default: a temporary directory)")
    args = p.parse_args(argv)
    from benchmarks.report import machine

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if Path(args.store).is_dir():  # both versions run in their own tree: a relative path would name another store
        args.store = str(Path(args.store).resolve())
    elif "://" not in args.store and not args.store.startswith("oxigraph:"):
        raise SystemExit(f"no store at {args.store!r}: give a loaded store directory or a server URI")
    result: dict[str, Any] = {
        "baseline": args.baseline, "dataset": args.dataset, "questions": args.questions, "seed": args.seed,
        "store": args.store, "new_args": args.new_args, "omp_threads": os.environ.get("OMP_NUM_THREADS"), "machine": machine(), "methods": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        old_tree = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old_tree), args.baseline], cwd=ROOT, check=True)
        try:
            files = write_questions(args.dataset, args.questions, args.seed, work / "questions")
            for method in args.methods.split(","):
                result["methods"].append(compare(method, old_tree, files, args, work))
                print(json.dumps(result["methods"][-1]), flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, check=False)
    (out / "model-time.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "model-time.md").write_text(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
