"""``kgqa eval predictions.jsonl``: the metrics of :mod:`engine.methods.metrics` over any method's predictions."""
from __future__ import annotations

import argparse
import json

from engine.cli.common import add_output_arguments
from engine.results import to_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="Hits@1 (first and any answer), precision, recall, F1 of a predictions JSONL file")
    p.add_argument("predictions", help="JSONL: one question per line with 'answers' and 'prediction' (best first)")
    p.add_argument(
        "--match",
        choices=["exact", "contains"],
        default="exact",
        help="exact: equal after RoG's normalisation (default); contains: a prediction containing the gold answer matches",
    )
    p.add_argument(
        "--by",
        choices=["auto", "id", "name"],
        default="auto",
        help="compare answers by id where a record has gold and predicted ids (auto, default), always by id, or by name",
    )
    p.add_argument(
        "--protocol",
        choices=["engine", "rog"],
        default="engine",
        help="engine: the metrics above (default); rog: RoG's own evaluator (hit over the joined predictions, "
        "precision = gold answers found / predictions), to compare with the RoG paper",
    )
    add_output_arguments(p)
    p.set_defaults(handler=_run_eval)


def _run_eval(args: argparse.Namespace) -> None:
    from engine.methods.metrics import evaluate, evaluate_rog, format_report, read_predictions

    records = read_predictions(args.predictions)
    if args.protocol == "rog":
        m = evaluate_rog(records)
        print(json.dumps(to_json(m), indent=2) if args.json else
              f"RoG evaluator, {m.questions} questions: Hit {m.hit:.4f}  Accuracy {m.accuracy:.4f}  "
              f"F1 {m.f1:.4f}  Precision {m.precision:.4f}  Recall {m.recall:.4f}")
        return
    report = evaluate(records, args.match, args.by)
    print(json.dumps(to_json(report), indent=2) if args.json else format_report(report))
