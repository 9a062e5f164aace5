"""``kgqa eval predictions.jsonl``: every scoring convention of :mod:`engine.methods.scoring`
over any method's predictions, or one of them (``--protocol``)."""
from __future__ import annotations

import argparse
import json

from engine.cli.common import add_output_arguments, random_seed
from engine.errors import InvalidInputError
from engine.methods.metrics import MAX_BOOTSTRAP, check_bootstrap
from engine.results import to_json

PROTOCOL_HELP = (
    "all (default): every convention per set, hop count and question type, with bootstrap intervals; "
    "hits1: first-answer Hits@1; rog: RoG's own evaluator (its Hit, Accuracy, F1, Precision, Recall over the file) "
    "and its Hit per group; gnn-rag: GNN-RAG's Hit1 (first line); tog: ToG's lenient exact match; "
    "webqsp: WebQSP's official F1 (by id, best parse); engine: Hits@1 (first and any answer), P, R, F1 "
    "without intervals. The conventions are defined in engine/methods/scoring/__init__.py"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="score a predictions JSONL file in every convention of the field (Hits@1, RoG's Hit, "
                       "GNN-RAG's Hit1, ToG's match, WebQSP F1, macro and answer-set F1) with bootstrap intervals")
    p.add_argument("predictions", help="JSONL: one question per line with 'answers' and 'prediction' (best first, or an LLM's text); "
                   "optionally answer_ids, prediction_ids, parses, hops, qtype, set")
    p.add_argument(
        "--match",
        choices=["exact", "contains"],
        default="exact",
        help="how Hits@1, P, R and the F1s compare names: exact: equal after RoG's normalisation (default); "
        "contains: a prediction containing the gold answer matches",
    )
    p.add_argument(
        "--by",
        choices=["auto", "id", "name"],
        default="auto",
        help="compare answers by id where a record has gold and predicted ids (auto, default), always by id, or by name",
    )
    p.add_argument("--protocol", choices=["all", "hits1", "rog", "gnn-rag", "tog", "webqsp", "engine"], default="all",
                   help=PROTOCOL_HELP)
    p.add_argument("--bootstrap", type=_resamples, default=1000, metavar="N",
                   help=f"bootstrap resamples for the 95%% intervals (default 1000, at most {MAX_BOOTSTRAP:,}; 0: no intervals)")
    p.add_argument("--seed", type=random_seed, default=0, help="seed of the bootstrap resamples (default 0)")
    add_output_arguments(p)
    p.set_defaults(handler=_run_eval)


def _resamples(text: str) -> int:
    """An argparse type: :func:`engine.methods.metrics.check_bootstrap`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number from 0 (no intervals) to {MAX_BOOTSTRAP:,}") from None
    try:
        return check_bootstrap(value)
    except InvalidInputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _run_eval(args: argparse.Namespace) -> None:
    from engine.methods.metrics import evaluate, evaluate_rog, format_report, read_predictions
    from engine.methods.scoring import PROTOCOLS, format_scores, score

    records = read_predictions(args.predictions)
    if args.protocol == "engine":
        report = evaluate(records, args.match, args.by)
        print(json.dumps(to_json(report), indent=2) if args.json else format_report(report))
        return
    scores = score(records, match=args.match, by=args.by, bootstrap=args.bootstrap, seed=args.seed)
    if args.protocol == "rog":
        m = evaluate_rog(records)
        if args.json:
            print(json.dumps({**to_json(m), "scores": scores.to_json()}, indent=2))
            return
        print(f"RoG evaluator, {m.questions} questions: Hit {m.hit:.4f}  Accuracy {m.accuracy:.4f}  "
              f"F1 {m.f1:.4f}  Precision {m.precision:.4f}  Recall {m.recall:.4f}")
        print(format_scores(scores, PROTOCOLS["rog"]))
        return
    print(json.dumps(scores.to_json(), indent=2) if args.json else format_scores(scores, PROTOCOLS[args.protocol]))
