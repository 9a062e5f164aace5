"""``kgqa sexpr`` and ``kgqa arg retrieve | train-ranker | run | recall | evaluate``."""
from __future__ import annotations

import argparse
import random
import time
from typing import Any

from engine.cli import (
    add_output_arguments,
    add_store_arguments,
    emit,
    open_from_args,
    parse_anchors,
)

DATASETS = ("metaqa", "pathquestion")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sexpr", help="execute an S-expression (GrailQA logical form) on a store")
    p.add_argument("expression", help='e.g. "(JOIN (R directed_by) [The Prowler])"')
    p.add_argument("--show-query", action="store_true", help="print the compiled SPARQL or Cypher instead of running it")
    p.add_argument("--timeout", type=float, default=None, help="seconds the query may run (default: no limit)")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_sexpr)

    arg = sub.add_parser("arg", help="ARG-KBQA: two-hop retrieval with a two-stage ranker").add_subparsers(dest="arg_command", required=True)
    p = arg.add_parser("retrieve", help="top-k logical-form references for a question with its entities")
    p.add_argument("question")
    _anchor_arguments(p)
    _model_arguments(p)
    p.set_defaults(handler=_retrieve)

    p = arg.add_parser("train-ranker", help="train the stage-2 cross-encoder from a dataset's gold paths")
    _dataset_arguments(p)
    p.add_argument("--out", required=True, help="directory to save the scorer to")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--base", default=None, help="transformer to start from (default: the offline all-MiniLM-L6-v2)")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_train)

    p = arg.add_parser("run", help="answer a question: retrieval, few-shot generation, alignment, execution, vote")
    p.add_argument("question")
    _anchor_arguments(p)
    p.add_argument("--demos", default=None, help="JSON list of {question, s_expression} demonstrations (entities by name)")
    _generation_arguments(p, n_demos=40)
    _model_arguments(p)
    p.set_defaults(handler=_run)

    p = arg.add_parser("recall", help="recall@k of the gold logical form among the references, with store/model time")
    _dataset_arguments(p)
    _model_arguments(p)
    p.set_defaults(handler=_recall)

    p = arg.add_parser(
        "evaluate", help="EM / F1 of generated logical forms over a dataset sample; demonstrations from other questions of the same files",
    )
    _dataset_arguments(p)
    p.add_argument("--pool", type=int, default=200, help="demonstration candidates drawn per file after the sample (default 200)")
    _generation_arguments(p, n_demos=10)
    p.add_argument("--output", default=None, help="JSONL file for one record per question")
    _model_arguments(p)
    p.set_defaults(handler=_evaluate)


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


def _generation_arguments(p: argparse.ArgumentParser, n_demos: int) -> None:
    p.add_argument("--lm", default=None, help="causal LM: local path, hub id, or openai:MODEL[@URL] (default: offline SmolLM2-135M-Instruct)")
    p.add_argument("--n-demos", type=int, default=n_demos, help=f"demonstrations in the prompt (default {n_demos})")
    p.add_argument("--demo-mode", choices=["random", "bm25"], default="bm25")
    p.add_argument("--samples", type=int, default=1, help="K forms generated; K > 1 votes over their answers")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds each candidate form may run before it counts as empty (default 10)")


def _model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=int, default=20, help="paths and references kept (default 20, as in the paper)")
    p.add_argument("--encoder", default=None, help="stage-1 sentence encoder (default: offline all-MiniLM-L6-v2)")
    p.add_argument("--scorer", default=None, help="a trained stage-2 scorer directory (default: the bi-encoder)")
    p.add_argument("--ontology", default=None, help="GrailQA ontology folder (fb_roles) for class constraints")
    add_store_arguments(p)
    add_output_arguments(p)


def _dataset_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=DATASETS, required=True)
    p.add_argument("--questions", required=True, nargs="+", help="question files (MetaQA qa_*.txt, PathQuestion PQ-*.txt)")
    p.add_argument("--sample", type=int, default=100, help="questions drawn per file")
    p.add_argument("--skip", type=int, default=0, help="questions drawn per file before the sample (to keep training and test apart)")
    p.add_argument("--seed", type=int, default=0)


def _sexpr(args: argparse.Namespace) -> None:
    from engine.sexpr import parse

    tree = parse(args.expression)
    with open_from_args(args) as store:
        if args.show_query:
            print(_compiled(store, tree))
            return
        emit(args, store.execute(tree, timeout=args.timeout))


def _compiled(store: Any, tree: Any) -> str:
    if store.dialect == "sparql":
        from sparql.sexpr import sexpr_compiler

        return sexpr_compiler(store.compiler).compile(tree)
    if store.dialect == "cypher":
        from cypher.sexpr import compile_sexpr

        text, params = compile_sexpr(tree, store._flavour)
        return text + "\n// parameters: " + repr(params)
    return "(the Python reference store runs the tree itself)"


def _models(args: argparse.Namespace):
    from engine.arg.candidates import read_schema
    from engine.arg.ranker import BiEncoder, Scorer

    bi = BiEncoder(args.encoder)
    return bi, Scorer(bi, args.scorer), (read_schema(args.ontology) if args.ontology else None)


def _retrieve(args: argparse.Namespace) -> None:
    from engine.arg.retrieval import retrieve

    anchors = _anchors(args)
    bi, scorer, schema = _models(args)
    with open_from_args(args) as store:
        emit(args, retrieve(store, args.question, anchors, bi, scorer, args.k, schema))


def _items(args: argparse.Namespace, store: Any, first: int, count: int) -> list:
    """(question, gold hops) for ``count`` questions per file after ``first``, drawn at random."""
    from pathlib import Path

    from engine.arg.datasets import gold_hops
    from loaders.questions import read_metaqa_questions, read_pathquestion

    out = []
    for path in args.questions:
        questions = read_metaqa_questions(path) if args.dataset == "metaqa" else read_pathquestion(path)
        lines = Path(path).read_text(encoding="utf-8").splitlines() if args.dataset == "pathquestion" else []
        random.Random(args.seed).shuffle(questions)
        for q in questions[first:first + count]:
            if lines:  # the entities along the annotated path, which the reader does not keep
                steps = lines[int(q.id.rsplit(":", 1)[1]) - 1].split("\t")[2].split("#")
                out.append((q, gold_hops(store, q, steps[0:-2:2])))
            else:
                out.append((q, gold_hops(store, q)))
    return out


def _gold_items(args: argparse.Namespace, store: Any, first: int, count: int) -> list:
    """(question, gold form with ids) for the questions :func:`_items` draws."""
    from engine.arg.candidates import path_forms
    from engine.sexpr.tree import to_text

    return [(q, to_text(path_forms(q.topic_entities[0], hops)[0])) for q, hops in _items(args, store, first, count)]


def _train(args: argparse.Namespace) -> None:
    from engine.arg.datasets import training_examples
    from engine.arg.ranker import train_scorer

    with open_from_args(args) as store:
        items = _items(args, store, args.skip, args.sample)
        examples = training_examples(store, items, seed=args.seed)
    emit(args, train_scorer(examples, args.out, args.base, epochs=args.epochs, seed=args.seed))


def _run(args: argparse.Namespace) -> None:
    import json
    from pathlib import Path

    from engine.arg.alignment import Aligner
    from engine.arg.generation import DemoPicker
    from engine.arg.pipeline import answer_question
    from engine.arg.prompts import Demo
    from engine.models.lm import load_lm

    pool = [Demo(d["question"], d["s_expression"]) for d in json.loads(Path(args.demos).read_text())] if args.demos else []
    anchors = _anchors(args)
    bi, scorer, schema = _models(args)
    with open_from_args(args) as store:
        result = answer_question(
            store, args.question, anchors, load_lm(args.lm), DemoPicker(pool, args.n_demos, args.demo_mode),
            bi, scorer, Aligner(store, timeout=args.timeout), args.k, args.samples, schema,
        )
    emit(args, result)


def _recall(args: argparse.Namespace) -> None:
    from engine.arg.datasets import recall

    bi, scorer, schema = _models(args)
    started = time.perf_counter()
    with open_from_args(args) as store:
        report = recall(store, _gold_items(args, store, args.skip, args.sample), bi, scorer, args.k, schema)
    emit(args, report)
    if not args.json:
        print(f"({time.perf_counter() - started:.1f} s)")


def _evaluate(args: argparse.Namespace) -> None:
    """Test questions: the ``--sample`` after ``--skip`` per file (as ``recall``);
    demonstrations: the ``--pool`` after them, less any that repeat a test question."""
    import json
    from contextlib import ExitStack

    from engine.arg.evaluate import demo_pool, evaluate
    from engine.models.lm import load_lm

    started = time.perf_counter()
    bi, scorer, schema = _models(args)
    lm = load_lm(args.lm)
    setup = time.perf_counter() - started
    with open_from_args(args) as store, ExitStack() as files:
        tests = _gold_items(args, store, args.skip, args.sample)
        pool = demo_pool(store, _gold_items(args, store, args.skip + args.sample, args.pool), tests)
        out = files.enter_context(open(args.output, "w", encoding="utf-8")) if args.output else None

        def write(record: dict) -> None:
            if out is not None:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()

        report = evaluate(
            store, tests, pool, lm, bi, scorer, n_demos=args.n_demos, demo_mode=args.demo_mode,
            samples=args.samples, k=args.k, timeout=args.timeout, seed=args.seed, schema=schema, on_record=write,
        )
    report.setup_seconds = round(setup, 2)
    emit(args, report)
