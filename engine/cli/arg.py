"""``kgqa arg retrieve | train-ranker | ask | recall``; ``run`` and ``export-training`` come from the
method's spec (the generator trains with ``kgqa lm train`` on what ``export-training`` writes)."""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from engine.cli.common import (
    DATASET_HELP,
    add_config_arguments,
    add_device_arguments,
    add_output_arguments,
    add_question_arguments,
    add_store_arguments,
    config_from_args,
    count,
    emit,
    open_from_args,
    parse_anchors,
    run_questions,
)
from engine.errors import InvalidInputError
from engine.graph import Literal
from engine.jsonl import parse_json
from engine.methods.arg.pipeline import (
    PAPER_K,
    ArgConfig,
    gold_items,
)
from engine.methods.arg.prompts import Demo
from engine.render import escaped, term_text, text_row
from engine.results import to_json

#: the options of ``kgqa arg run`` that ``ask`` takes too: those of one question's generation
ASK_OPTIONS = ("model", "n_demos", "demo_mode", "samples", "timeout", "k", "encoder", "scorer", "ontology")


def add_commands(arg: argparse._SubParsersAction) -> None:
    p = arg.add_parser("retrieve", help="top-k logical-form references for a question with its entities")
    p.add_argument("question", help="the question, in words")
    _anchor_arguments(p)
    _ranker_arguments(p)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_retrieve)

    p = arg.add_parser("train-ranker", help="train the stage-2 cross-encoder from a dataset's gold paths")
    _dataset_arguments(p, "train")
    p.add_argument("--out", required=True, help="directory to save the scorer to")
    p.add_argument("--epochs", type=count, default=1, help="passes over the training pairs (default 1)")
    p.add_argument("--base", default=None, help="transformer to start from (default: the offline all-MiniLM-L6-v2)")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_train)

    p = arg.add_parser("ask", help="answer one question: retrieval, few-shot generation, alignment, execution, vote")
    p.add_argument("question", help="the question, in words")
    _anchor_arguments(p)
    p.add_argument("--demos", default=None, help="JSON list of {question, s_expression} demonstrations (entities by name)")
    add_config_arguments(p, ArgConfig, only=ASK_OPTIONS)
    add_device_arguments(p)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_ask)

    p = arg.add_parser("recall", help="recall@k of the gold logical form among the references, with store/model time")
    _dataset_arguments(p, "test")
    _ranker_arguments(p)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_recall)


def _anchor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entity", action="append", default=[], help="a gold entity id of the question (repeatable)")
    p.add_argument(
        "--literal", action="append", default=[],
        help='a gold literal of the question, written as in an S-expression (repeatable), e.g. '
        '1990^^http://www.w3.org/2001/XMLSchema#gYear or \'"Paris"@en\'',
    )


def _anchors(args: argparse.Namespace) -> list:
    """The question's anchors: entity ids, then literals parsed as S-expression values."""
    return parse_anchors(args.entity, args.literal, "give the question's anchors: at least one --entity ID or --literal VALUE")


def _ranker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=int, default=PAPER_K, help=f"paths and references kept (default {PAPER_K}, as in the paper)")
    add_config_arguments(p, ArgConfig, only=("encoder", "scorer", "ontology"))


def _dataset_arguments(p: argparse.ArgumentParser, split: str) -> None:
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    add_question_arguments(p, split, sample=100)


def _models(args: argparse.Namespace):
    from engine.methods.arg.pipeline import retrieval_models

    return retrieval_models(config_from_args(ArgConfig, args))


def _retrieve(args: argparse.Namespace) -> None:
    from engine.methods.arg.retrieval import retrieve
    from engine.methods.meter import Meter

    anchors = _anchors(args)
    bi, scorer, schema = _models(args)
    meter = Meter()
    with open_from_args(args) as store:
        result = retrieve(meter.store(store), args.question, anchors, bi, scorer, args.k, schema, meter=meter)
    costs = {"store_seconds": round(meter.seconds["store"], 4), "model_seconds": round(meter.seconds["model"], 4),
             "store_calls": meter.calls["store"]}
    if args.json:
        emit(args, {**to_json(result), **costs})
    else:
        print(render_retrieval(result, costs))


def render_retrieval(result: Any, costs: dict[str, Any]) -> str:
    """A :class:`engine.methods.arg.retrieval.Retrieval` as text: the kept paths, then the
    references, then what it cost."""
    lines = [text_row("question", result.question), "", "score\tanchor\tpath"]
    for p in result.paths:
        hops = " ".join(f"{'→' if d == 'out' else '←'} {r}" for r, d in p.hops)
        lines.append(text_row(f"{p.score:.3f}", term_text(p.anchor), hops))
    lines += ["", "score\treference (names)\tS-expression"]
    lines += [text_row(f"{r.score:.3f}", r.text, r.sexpr) for r in result.references]
    lines += ["", f"store {costs['store_seconds']:.2f} s in {costs['store_calls']:g} calls, model {costs['model_seconds']:.2f} s"]
    return "\n".join(lines)


def _train(args: argparse.Namespace) -> None:
    from engine.methods.arg.datasets import gold_path, training_examples
    from engine.methods.arg.ranker import check_scorer_folder, train_scorer

    check_scorer_folder(args.out, args.base)  # before the training pairs are gathered from the store
    with open_from_args(args) as store:
        items = [(q, gold_path(q)) for q in run_questions(args)]
        examples = training_examples(store, items, seed=args.seed)
    report = train_scorer(examples, args.out, args.base, epochs=args.epochs, seed=args.seed)
    if args.json:
        emit(args, report)
        return
    print(f"ranker trained on {report.examples:,} examples ({report.positives:,} positive), {report.epochs} epoch(s), "
          f"final loss {report.final_loss:.4f}, {report.seconds:.1f} s; saved to {report.path} (give it as --scorer)")


def _ask(args: argparse.Namespace) -> None:
    from engine.methods.arg.alignment import Aligner
    from engine.methods.arg.generation import DemoPicker
    from engine.methods.arg.pipeline import answer_questions
    from engine.models.loading import load_lm

    pool = _read_demos(Path(args.demos)) if args.demos else []
    anchors = _anchors(args)
    bi, scorer, schema = _models(args)
    config = config_from_args(ArgConfig, args)
    with open_from_args(args) as store:
        [result] = answer_questions(
            store, [(args.question, anchors)], load_lm(config.model, args.device, dtype=args.dtype),
            DemoPicker(pool, config.demonstrations, config.demo_mode), bi, scorer, Aligner(store, timeout=config.timeout),
            config.references, config.samples, schema,
        )
        names = {} if args.json else store.names([a for a in result.answers if not isinstance(a, Literal)])
    if args.json:
        emit(args, result)
        return
    print(render_answer(result, names))


def render_answer(result: Any, names: dict[str, str | None]) -> str:
    """An :class:`engine.methods.arg.pipeline.ArgAnswer` as text: the references the generator saw,
    the forms it generated, the one executed, and its answers."""
    lines = [text_row("question", result.question), "", "references"] + [f"  {escaped(str(r))}" for r in result.references]
    lines += ["", "generated"] + [f"  {escaped(g)}" for g in result.generated]
    lines += ["", text_row("executed", result.sexpr if result.sexpr is not None else "(none answered)")]
    if result.count is not None:
        lines.append(f"count\t{result.count}")
    else:
        lines += ["answers"] + [f"  {escaped(term_text(a, names))}" for a in result.answers]
    if result.timed_out:
        lines.append(f"({result.timed_out} candidate form(s) stopped at the timeout)")
    return "\n".join(lines)


def _read_demos(path: Path) -> list[Demo]:
    """``--demos``: a JSON list of ``{"question", "s_expression"}`` objects."""
    try:
        raw = parse_json(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InvalidInputError(f"--demos {path}: cannot read it: {e.strerror}") from e
    except ValueError as e:  # not UTF-8, not JSON
        raise InvalidInputError(f"--demos {path}: not a JSON file ({e}): give a JSON list of "
                                '{"question": ..., "s_expression": ...} objects') from e
    if not isinstance(raw, list) or not all(isinstance(d, dict) and isinstance(d.get("question"), str)
                                            and isinstance(d.get("s_expression"), str) for d in raw):
        raise InvalidInputError(f'--demos {path}: give a JSON list of {{"question": ..., "s_expression": ...}} objects (strings)')
    return [Demo(d["question"], d["s_expression"]) for d in raw]


def _recall(args: argparse.Namespace) -> None:
    from engine.methods.arg.datasets import recall

    bi, scorer, schema = _models(args)
    started = time.perf_counter()
    with open_from_args(args) as store:
        questions = run_questions(args)
        items = gold_items(store, questions)
        if not items:
            raise InvalidInputError(f"none of the {len(questions):,} questions has a gold form to measure recall against "
                                    "(a topic entity and a MetaQA question type, a PathQuestion path or an S-expression)")
        report = recall(store, items, bi, scorer, args.k, schema)
    if args.json:
        emit(args, report)
        return
    hops = ", ".join(f"{h}-hop {r:.3f}" for h, r in sorted(report.by_hops.items()))
    print(f"recall@{report.k} {report.recall_at_k:.3f} over {report.questions:,} questions ({hops}); without a gold "
          f"form: {len(questions) - len(items):,}")
    print(f"seconds per question: store {report.store_seconds_per_question}, ranking {report.model_seconds_per_question} "
          f"({report.scorer}); {time.perf_counter() - started:.1f} s in all")
