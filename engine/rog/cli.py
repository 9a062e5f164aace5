"""``kgqa rog run`` and ``kgqa rog export-training``."""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from engine.cli import add_output_arguments, add_store_arguments, open_from_args

DATASET_HELP = (
    "metaqa-1hop|2hop|3hop, pathquestion-2h|3h (from $KGQA_DATA or ../shared/data), or a question file: "
    "RoG .jsonl/.parquet, PathQuestion PQ-*.txt, MetaQA qa_*.txt"
)


def register(sub: argparse._SubParsersAction) -> None:
    rog = sub.add_parser("rog", help="RoG: relation-path planning, grounding in the store, reasoning")
    commands = rog.add_subparsers(dest="rog_command", required=True, metavar="COMMAND")

    p = commands.add_parser("run", help="answer a question set and write predictions JSONL")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--model", default=None, help="planning model: HF id, directory, .gguf, or openai:MODEL[@URL] (default: offline SmolLM2-135M-Instruct)")
    p.add_argument("--reasoner", default=None, help="reasoning model if not the planning model (plug-and-play)")
    p.add_argument("--prompt-template", default=None, help="chat (tokenizer's), raw, llama2 (rmanluo/RoG) or a string with {prompt}")
    p.add_argument("--plan-mode", choices=["free", "vocabulary", "grounded"], default="grounded",
                   help="free: the paper; vocabulary: relations of the store only; grounded: relations leaving the frontier (default)")
    p.add_argument("--mode", choices=["llm", "paths", "explain"], default="llm",
                   help="llm: RoG's reasoning prompt (default); paths: the path ends as answers; explain: the explanation prompt")
    p.add_argument("-k", "--plans", type=int, default=3, help="relation paths per question (beam width, default 3)")
    p.add_argument("--max-hops", type=int, default=3, help="longest plan in the constrained modes (default 3)")
    p.add_argument("--direction", choices=["out", "in", "both"], default="both")
    p.add_argument("--plan-tokens", type=int, default=100, help="new tokens for a free plan (default 100)")
    p.add_argument("--answer-tokens", type=int, default=128, help="new tokens for an answer (default 128)")
    p.add_argument("--prompt-tokens", type=int, default=4096, help="paths kept in the reasoning prompt fit this many tokens (default 4096, as RoG)")
    p.add_argument("--path-limit", type=int, default=None, help="most paths per plan (default: all)")
    p.add_argument("--limit", type=int, default=None, help="answer only this many questions")
    p.add_argument("--sample", type=int, default=None, help="a seeded random sample of this many questions")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="torch device (default: cuda when available)")
    p.add_argument("--out", default="rog-predictions.jsonl", help="predictions JSONL (default rog-predictions.jsonl)")
    p.add_argument("--no-progress", action="store_true")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_run)

    p = commands.add_parser("export-training", help="planning and reasoning instruction data from shortest paths")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--out", required=True, help="directory for planning.jsonl and reasoning.jsonl")
    p.add_argument("--max-hops", type=int, default=3)
    p.add_argument("--limit", type=int, default=None, help="only the first N questions")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_export)


def _questions(args: argparse.Namespace) -> list:
    from loaders.datasets import load_dataset

    questions = load_dataset(args.dataset)
    if getattr(args, "sample", None):
        questions = random.Random(args.seed).sample(questions, min(args.sample, len(questions)))
    if args.limit is not None:
        questions = questions[: args.limit]
    return questions


def _run(args: argparse.Namespace) -> None:
    from engine.models.lm import load_lm
    from engine.rog.pipeline import RogConfig, RogPipeline

    config = RogConfig(
        plan_mode=args.plan_mode,
        answer_mode=args.mode,
        k=args.plans,
        max_hops=args.max_hops,
        direction=args.direction,
        plan_tokens=args.plan_tokens,
        answer_tokens=args.answer_tokens,
        prompt_tokens=args.prompt_tokens,
        path_limit=args.path_limit,
    )
    questions = _questions(args)
    with open_from_args(args) as store:
        planner = load_lm(args.model, args.device, args.prompt_template)
        reasoner = load_lm(args.reasoner, args.device, args.prompt_template) if args.reasoner else None
        pipeline = RogPipeline(store, planner, reasoner, config)
        with open(args.out, "w", encoding="utf-8") as out:
            summary = pipeline.run(questions, out, progress=not args.no_progress)
    summary["predictions"] = args.out
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"{summary['questions']} questions, plan mode {config.plan_mode}, answer mode {config.answer_mode}\n"
            f"plans parsed {summary['plans_parsed']:.1%}  relations exist {summary['plans_exist']:.1%}  "
            f"plans ground {summary['plans_ground']:.1%}  mean paths {summary['mean_paths']:.1f}\n"
            f"Hits@1 {summary['hits1']:.3f}  Hits@1-any {summary['hits1_any']:.3f}  F1 {summary['f1']:.3f}\n"
            "mean seconds per question: "
            + "  ".join(f"{k} {v:.3f}" for k, v in summary["mean_seconds"].items())
            + f"\npredictions written to {args.out} (score them with `kgqa eval {args.out}`)"
        )


def _export(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from engine.rog.training_data import training_examples

    questions = _questions(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts = {"questions": len(questions), "with_paths": 0, "planning": 0, "reasoning": 0}
    with open_from_args(args) as store, open(out / "planning.jsonl", "w", encoding="utf-8") as planning, open(
        out / "reasoning.jsonl", "w", encoding="utf-8"
    ) as reasoning:
        for example in training_examples(store, tqdm(questions, desc="shortest paths", unit="q", file=sys.stderr), args.max_hops):
            counts["with_paths"] += 1
            for record in example.planning_records():
                planning.write(json.dumps(record, ensure_ascii=False) + "\n")
                counts["planning"] += 1
            reasoning.write(json.dumps(example.reasoning_record(), ensure_ascii=False) + "\n")
            counts["reasoning"] += 1
    print(json.dumps(counts, indent=2) if args.json else
          f"{counts['with_paths']}/{counts['questions']} questions with shortest paths: "
          f"{counts['planning']} planning and {counts['reasoning']} reasoning examples in {out}")
