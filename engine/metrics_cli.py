"""``kgqa eval predictions.jsonl``: the metrics of :mod:`engine.metrics` over any method's predictions."""
from __future__ import annotations

import argparse
import json

from engine.cli import add_output_arguments
from engine.results import to_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="Hits@1 (first and any answer), precision, recall, F1 of a predictions JSONL file")
    p.add_argument("predictions", help="JSONL: one question per line with 'answers' and 'prediction' (best first)")
    p.add_argument(
        "--match",
        choices=["exact", "contains"],
        default="exact",
        help="exact: equal after RoG's normalisation (default); contains: RoG's evaluator (prediction contains the gold answer)",
    )
    add_output_arguments(p)
    p.set_defaults(handler=_run_eval)


def _run_eval(args: argparse.Namespace) -> None:
    from engine.metrics import evaluate, format_report, read_predictions

    report = evaluate(read_predictions(args.predictions), args.match)
    print(json.dumps(to_json(report), indent=2) if args.json else format_report(report))
