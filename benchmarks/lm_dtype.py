"""The language model's precision: model time and answers in float32 against bfloat16 on a CPU.

    python -m benchmarks.lm_dtype --questions 30

Runs RoG, ARG and LDR with the engine's trained models (``kgqa <method> run``, the options of
``benchmarks/README.md``'s methods table) on the first ``--questions`` validation questions
of MetaQA-2hop, MetaQA-3hop and PQ-3H, once per ``--dtypes`` value, one run after the other,
and compares model seconds per question (the run protocol's ``seconds.model``), the
predictions question by question, and Hits@1. Validation questions: the precision is a choice
a user makes, so it is measured where choices are made, not on the test split.

Results go to ``benchmarks/results/lm-dtype/lm-dtype.json`` and ``.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.model_time import run_version

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "lm-dtype"
MODELS = ROOT / "kgqa-data" / "models"
#: per method, the options of its ``run`` command (the methods benchmark's)
METHODS: dict[str, list[str]] = {
    "rog": ["--model", str(MODELS / "rog-planner"), "-k", "1", "--mode", "paths"],
    "arg": ["--model", str(MODELS / "arg-generator-3"), "--k", "3", "--n-demos", "0"],
    "ldr": ["--model", str(MODELS / "ldr-5")],
}
#: question set -> the store that holds its graph
DATASETS = {"metaqa-2hop": "metaqa", "metaqa-3hop": "metaqa", "pathquestion-3h": "pq3h"}


def run(method: str, dataset: str, dtype: str, args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """``kgqa <method> run`` on ``dataset`` in ``dtype``; its records (output and log in ``work``)."""
    store = Path(args.stores) / DATASETS[dataset]
    out = work / f"{method}-{dataset}-{dtype}.jsonl"
    argv = [method, "run", "--dataset", dataset, "--split", "val", "--limit", str(args.questions), "--store", str(store),
            *METHODS[method], "--dtype", dtype, "--no-progress", "--out", str(out)]
    run_version(ROOT, argv, out.with_suffix(".log"))
    return [json.loads(line) for line in out.read_text().splitlines()]


def compare(records: dict[str, list[dict[str, Any]]], dtypes: list[str]) -> dict[str, Any]:
    from engine.methods.metrics import evaluate

    base, *others = dtypes
    row: dict[str, Any] = {}
    for dtype in dtypes:
        rs = records[dtype]
        row[dtype] = {"model_seconds_per_question": round(sum(r["seconds"]["model"] for r in rs) / len(rs), 4),
                      "hits1": round(evaluate(rs).overall.hits1, 4)}
    for dtype in others:
        pairs = list(zip(records[base], records[dtype]))
        assert all(a["id"] == b["id"] for a, b in pairs), "the runs answered different questions"
        row[dtype]["speedup"] = round(row[base]["model_seconds_per_question"] / max(row[dtype]["model_seconds_per_question"], 1e-9), 2)
        row[dtype]["same_predictions"] = sum(a["prediction"] == b["prediction"] for a, b in pairs)
        row[dtype]["differing"] = [{"id": a["id"], base: a["prediction"][:3], dtype: b["prediction"][:3]}
                                   for a, b in pairs if a["prediction"] != b["prediction"]]
    return row


def markdown(result: dict[str, Any]) -> str:
    from benchmarks.report import machine_markdown

    base, other = result["dtypes"][:2]
    lines = [
        f"# Model time and answers: {base} against {other}",
        "",
        f"Finished {result['finished']} in {result['seconds']} s. {machine_markdown(result['machine'])}",
        "",
        f"The first {result['questions']} validation questions per set, `OMP_NUM_THREADS={result['omp_threads']}`.",
        "",
        f"| method | set | model s/q {base} | model s/q {other} | speed-up | same predictions | Hits@1 {base} → {other} |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        a, b = r[base], r[other]
        lines.append(f"| {r['method']} | {r['dataset']} | {a['model_seconds_per_question']:.3f} | {b['model_seconds_per_question']:.3f} "
                     f"| {b['speedup']}× | {b['same_predictions']} of {r['questions']} | {a['hits1']:.2f} → {b['hits1']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=30)
    p.add_argument("--methods", default="rog,arg,ldr")
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--dtypes", default="float32,bfloat16", help="the first is the one the others are compared with")
    p.add_argument("--stores", default=str(ROOT / "kgqa-data"), help="the directory holding the stores metaqa and pq3h")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--workdir", default=None, help="keep the predictions and logs here (default: a temporary directory)")
    args = p.parse_args(argv)
    from benchmarks.report import machine

    dtypes = args.dtypes.split(",")
    started, rows, load_at_start = time.perf_counter(), [], [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for dataset in args.datasets.split(","):
            for method in args.methods.split(","):
                records = {dtype: run(method, dataset, dtype, args, work) for dtype in dtypes}
                rows.append({"method": method, "dataset": dataset, "questions": len(records[dtypes[0]]), **compare(records, dtypes)})
                print(json.dumps(rows[-1]), flush=True)
    result = {"dtypes": dtypes, "questions": args.questions, "omp_threads": os.environ.get("OMP_NUM_THREADS"),
              "machine": {**machine(), "load_average_start": load_at_start},
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seconds": round(time.perf_counter() - started, 1), "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lm-dtype.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    (out / "lm-dtype.md").write_text(markdown(result))
    print(out / "lm-dtype.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
