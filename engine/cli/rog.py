"""``kgqa rog run``, ``kgqa rog export-training`` and ``kgqa rog train``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.cli.common import (
    DATASET_HELP,
    add_output_arguments,
    add_question_arguments,
    add_run_arguments,
    add_store_arguments,
    open_from_args,
    run_questions,
)
from engine.cli.lm import add_sft_arguments, run_training


def register(sub: argparse._SubParsersAction) -> None:
    rog = sub.add_parser("rog", help="RoG: relation-path planning, grounding in the store, reasoning")
    commands = rog.add_subparsers(dest="rog_command", required=True, metavar="COMMAND")

    p = commands.add_parser("run", help="answer a question set and write predictions JSONL")
    add_run_arguments(p, "rog", build_method, "planning model: HF id, directory, .gguf, or openai:MODEL[@URL] (default: offline SmolLM2-135M-Instruct)")
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
    p.add_argument("--batch-size", type=int, default=8, help="questions answered together: their plans and reasoning prompts decoded together, their grounding store calls shared (default 8)")

    p = commands.add_parser("export-training", help="planning and reasoning instruction data from shortest paths")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--out", required=True, help="directory for planning.jsonl and reasoning.jsonl")
    p.add_argument("--max-hops", type=int, default=3)
    p.add_argument("--targets", choices=["shortest", "gold"], default="shortest",
                   help="planning targets: every shortest path from topic to answers (RoG, default) or the question's "
                        "gold relation path where the dataset gives one (MetaQA type, PathQuestion path, WebQSP chain)")
    add_question_arguments(p, "train")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_export)

    p = commands.add_parser(
        "train", help="fine-tune one model on the planning (Eq. 4/8) and reasoning (Eq. 10) data of export-training directories"
    )
    p.add_argument("--data", nargs="+", required=True, help="directories written by `kgqa rog export-training`")
    p.add_argument("--tasks", nargs="+", choices=["planning", "reasoning"], default=["planning", "reasoning"],
                   help="which samples to train on (default both, one model as the paper; train twice for two)")
    p.add_argument("--prompt-tokens", type=int, default=4096,
                   help="a reasoning prompt keeps the paths that fit this many tokens (default 4096; give `kgqa rog run` the same)")
    p.add_argument("--plans-per-question", type=int, default=None,
                   help="train on at most this many of a question's gold relation paths, a seeded sample (default: all, as RoG)")
    p.add_argument("--reasoning-per-set", type=int, default=None,
                   help="at most this many reasoning samples from each --data directory, a seeded sample (default: all)")
    add_sft_arguments(p)
    p.set_defaults(handler=_train)


def build_method(args: argparse.Namespace, store, meter):
    """RoG as ``kgqa rog run`` configures it."""
    from engine.models.lm import load_lm
    from engine.methods.rog.pipeline import RogConfig, RogMethod

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
        batch_size=args.batch_size,
    )
    planner = meter.lm(load_lm(args.model, args.device, args.prompt_template, args.dtype))
    reasoner = meter.lm(load_lm(args.reasoner, args.device, args.prompt_template, args.dtype)) if args.reasoner else None
    return RogMethod(store, planner, reasoner, config)


def _export(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from engine.methods.rog.training_data import training_examples

    questions = run_questions(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    counts = {"questions": len(questions), "with_paths": 0, "planning": 0, "reasoning": 0}
    with open_from_args(args) as store, open(out / "planning.jsonl", "w", encoding="utf-8") as planning, open(
        out / "reasoning.jsonl", "w", encoding="utf-8"
    ) as reasoning:
        for example in training_examples(
            store, tqdm(questions, desc=f"{args.targets} paths", unit="q", file=sys.stderr), args.max_hops, args.targets
        ):
            counts["with_paths"] += 1
            for record in example.planning_records():
                planning.write(json.dumps(record, ensure_ascii=False) + "\n")
                counts["planning"] += 1
            reasoning.write(json.dumps(example.reasoning_record(), ensure_ascii=False) + "\n")
            counts["reasoning"] += 1
    print(json.dumps(counts, indent=2) if args.json else
          f"{counts['with_paths']}/{counts['questions']} questions with {args.targets} paths: "
          f"{counts['planning']} planning and {counts['reasoning']} reasoning examples in {out}")


def _train(args: argparse.Namespace) -> None:
    from engine.models.lm import load_lm
    from engine.methods.rog.training_data import sft_samples

    tokens = load_lm(args.model, "cpu", args.prompt_template) if "reasoning" in args.tasks else None  # the tokenizer, to fit paths
    samples = sft_samples(
        args.data, args.tasks, tokens, args.prompt_tokens,
        plans_per_question=args.plans_per_question, reasoning_per_directory=args.reasoning_per_set, seed=args.seed,
    )
    if not args.json:
        print("samples: " + ", ".join(f"{task} {len(found)}" for task, found in samples.items()))
    run_training(args, [s for task in args.tasks for s in samples[task]])
