"""``kgqa ldr export-webqsp``: LDR's training samples from WebQSP's annotated parses (no store
needed); ``run`` and ``export-training`` come from the method's spec."""
from __future__ import annotations

import argparse
import json
import sys

from engine.cli.common import add_output_arguments, add_question_arguments
from engine.outputs import refuse_input_as_output, written_whole


def add_commands(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "export-webqsp", help="search, constraint and answer samples from the gold parses of a WebQSP JSON file (no store)",
    )
    p.add_argument("webqsp", help="a WebQSP JSON file (WebQSP.train.json.gz)")
    p.add_argument("--out", required=True, help="JSONL file of {prompt, target, task, id} samples, for `kgqa lm train --data`")
    add_question_arguments(p, "train")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_output_arguments(p)
    p.set_defaults(handler=_export_webqsp)


def _export_webqsp(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from engine.methods.ldr.training_data import ExportReport, webqsp_samples
    from engine.models.sft import write_samples
    from engine.sexpr.webqsp import read_questions
    from loaders.datasets import select_subset

    refuse_input_as_output(args.out, [args.webqsp], what="the output file", option="--out")
    report = ExportReport()
    questions = select_subset(read_questions(args.webqsp), args.split, sample=args.sample, limit=args.limit, seed=args.seed,
                              split_seed=args.split_seed)
    shown = tqdm(questions, desc="parses", unit="q", file=sys.stderr, disable=args.no_progress)
    with written_whole(args.out) as partial:
        write_samples(webqsp_samples(shown, report), partial)
    summary = {**report.to_json(), "out": args.out}
    print(json.dumps(summary, indent=2) if args.json else
          f"{summary['exported']}/{summary['questions']} parses exported"
          f"{', uncovered: ' + json.dumps(summary['uncovered']) if summary.get('uncovered') else ''}; "
          f"samples {json.dumps(summary['samples'])}; written to {args.out}")
