"""``kgqa sexpr`` and ``kgqa arg retrieve | train-ranker | train | ask | recall | run``."""
from __future__ import annotations

import argparse
import time
from typing import Any

from engine.cli.common import (
    DATASET_HELP,
    add_device_arguments,
    add_output_arguments,
    add_question_arguments,
    add_run_arguments,
    add_store_arguments,
    emit,
    emit_explained,
    open_from_args,
    parse_anchors,
    run_questions,
)
from engine.cli.lm import add_sft_arguments, run_training
from engine.render import term_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sexpr", help="execute an S-expression (GrailQA logical form) on a store")
    p.add_argument("expression", help='e.g. "(JOIN (R directed_by) [The Prowler])"')
    p.add_argument(
        "--explain", "--show-query", action="store_true", dest="explain",
        help="print the compiled SPARQL or Cypher and its parameters instead of running it",
    )
    p.add_argument("--timeout", type=float, default=None, help="seconds the query may run (default: no limit)")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_sexpr)

    arg = sub.add_parser("arg", help="ARG-KBQA: two-hop retrieval with a two-stage ranker").add_subparsers(dest="arg_command", required=True)
    p = arg.add_parser("retrieve", help="top-k logical-form references for a question with its entities")
    p.add_argument("question")
    _anchor_arguments(p)
    _ranker_arguments(p)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_retrieve)

    p = arg.add_parser("train-ranker", help="train the stage-2 cross-encoder from a dataset's gold paths")
    _dataset_arguments(p, "train")
    p.add_argument("--out", required=True, help="directory to save the scorer to")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--base", default=None, help="transformer to start from (default: the offline all-MiniLM-L6-v2)")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_train)

    p = arg.add_parser(
        "train", help="fine-tune the generator: (question, top-k references) → gold S-expression, the inference prompt with no demonstrations",
    )
    _dataset_arguments(p, "train")
    _ranker_arguments(p)
    add_store_arguments(p)
    add_sft_arguments(p, seed=False)
    p.set_defaults(handler=_train_generator)

    p = arg.add_parser(
        "export-training", help="the generator's fine-tuning samples as prompt/target JSONL (for `kgqa lm train` over several datasets)",
    )
    _dataset_arguments(p, "train")
    _ranker_arguments(p)
    p.add_argument("--out", required=True, help="JSONL file to write: one {id, prompt, target} object per question")
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_export_generator)

    p = arg.add_parser("ask", help="answer one question: retrieval, few-shot generation, alignment, execution, vote")
    p.add_argument("question")
    _anchor_arguments(p)
    p.add_argument("--demos", default=None, help="JSON list of {question, s_expression} demonstrations (entities by name)")
    p.add_argument("--model", default=None, help="causal LM: local path, hub id, or openai:MODEL[@URL] (default: offline SmolLM2-135M-Instruct)")
    add_device_arguments(p)
    _generation_arguments(p, n_demos=40)
    _ranker_arguments(p)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_ask)

    p = arg.add_parser("recall", help="recall@k of the gold logical form among the references, with store/model time")
    _dataset_arguments(p, "test")
    _ranker_arguments(p)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_recall)

    p = arg.add_parser(
        "run", help="answer a question set (EM of the forms, answer metrics); demonstrations from the train split",
    )
    add_run_arguments(p, "arg", build_method, "causal LM: local path, hub id, or openai:MODEL[@URL] (default: offline SmolLM2-135M-Instruct)")
    p.add_argument("--pool", type=int, default=200, help="demonstration candidates drawn from the train split (default 200)")
    p.add_argument("--batch-size", type=int, default=8, help="questions answered together: their greedy generations decoded together, their retrieval store calls shared (default 8)")
    _generation_arguments(p, n_demos=10)
    _ranker_arguments(p)


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
    p.add_argument("--n-demos", type=int, default=n_demos, help=f"demonstrations in the prompt (default {n_demos})")
    p.add_argument("--demo-mode", choices=["random", "bm25"], default="bm25")
    p.add_argument("--samples", type=int, default=1, help="K forms generated; K > 1 votes over their answers")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds each candidate form may run before it counts as empty (default 10)")


def _ranker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=int, default=20, help="paths and references kept (default 20, as in the paper)")
    p.add_argument("--encoder", default=None, help="stage-1 sentence encoder (default: offline all-MiniLM-L6-v2)")
    p.add_argument("--scorer", default=None, help="a trained stage-2 scorer directory (default: the bi-encoder)")
    p.add_argument("--ontology", default=None, help="GrailQA ontology folder (fb_roles) for class constraints")


def _dataset_arguments(p: argparse.ArgumentParser, split: str) -> None:
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    add_question_arguments(p, split, sample=100)


def _sexpr(args: argparse.Namespace) -> None:
    from engine.ops import Execute
    from engine.sexpr import parse

    tree = parse(args.expression)
    with open_from_args(args) as store:
        if args.explain:
            op = Execute(tree, timeout=args.timeout)
            emit_explained(args, [(op, store.explain(op))])
            return
        result = store.execute(tree, timeout=args.timeout)
        ids = [a for a in result.answers if isinstance(a, str)]
        emit(args, result, None if args.json or not ids else store.names(ids))


def _models(args: argparse.Namespace):
    from engine.methods.arg.candidates import read_schema
    from engine.methods.arg.ranker import BiEncoder, Scorer

    bi = BiEncoder(args.encoder)
    return bi, Scorer(bi, args.scorer), (read_schema(args.ontology) if args.ontology else None)


def _retrieve(args: argparse.Namespace) -> None:
    from engine.methods.arg.retrieval import retrieve

    anchors = _anchors(args)
    bi, scorer, schema = _models(args)
    with open_from_args(args) as store:
        result = retrieve(store, args.question, anchors, bi, scorer, args.k, schema)
    if args.json:
        emit(args, result)
    else:
        print(render_retrieval(result))


def render_retrieval(result: Any) -> str:
    """A :class:`engine.methods.arg.retrieval.Retrieval` as text: the kept paths, then the references."""
    lines = [f"question\t{result.question}", "", "score\tanchor\tpath"]
    for p in result.paths:
        hops = " ".join(f"{'→' if d == 'out' else '←'} {r}" for r, d in p.hops)
        lines.append(f"{p.score:.3f}\t{term_text(p.anchor)}\t{hops}")
    lines += ["", "score\treference (names)\tS-expression"]
    lines += [f"{r.score:.3f}\t{r.text}\t{r.sexpr}" for r in result.references]
    lines += ["", f"store {result.store_seconds:.2f} s in {result.store_calls:g} calls, model {result.model_seconds:.2f} s"]
    return "\n".join(lines)


def _gold_items(store: Any, questions: list) -> list:
    """(question, gold form with ids) for each question."""
    from engine.methods.arg.datasets import gold_form

    return [(q, gold_form(store, q)) for q in questions]


def _train(args: argparse.Namespace) -> None:
    from engine.methods.arg.datasets import gold_path, training_examples
    from engine.methods.arg.ranker import train_scorer

    with open_from_args(args) as store:
        items = [(q, gold_path(q)) for q in run_questions(args)]
        examples = training_examples(store, items, seed=args.seed)
    emit(args, train_scorer(examples, args.out, args.base, epochs=args.epochs, seed=args.seed))


def _train_generator(args: argparse.Namespace) -> None:
    """Train with ``kgqa arg run --n-demos 0 --k K`` in mind: the same prompt."""
    from engine.methods.arg.datasets import generator_samples

    bi, scorer, schema = _models(args)
    with open_from_args(args) as store:
        samples = generator_samples(store, _gold_items(store, run_questions(args)), bi, scorer, args.k, schema)
    run_training(args, samples)


def _export_generator(args: argparse.Namespace) -> None:
    """The samples ``kgqa arg train`` trains on, written out: one dataset per store, so a
    generator over several datasets is `kgqa lm train --data` on several files."""
    import json
    from pathlib import Path

    from engine.methods.arg.datasets import generator_samples

    bi, scorer, schema = _models(args)
    with open_from_args(args) as store:
        questions = run_questions(args)
        samples = generator_samples(store, _gold_items(store, questions), bi, scorer, args.k, schema)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(
            json.dumps({"id": q.id, "prompt": sample.prompt, "target": sample.target}, ensure_ascii=False) + "\n"
            for q, sample in zip(questions, samples, strict=True)
        )
    emit(args, {"questions": len(questions), "samples": len(samples), "out": str(out)})


def _ask(args: argparse.Namespace) -> None:
    import json
    from pathlib import Path

    from engine.methods.arg.alignment import Aligner
    from engine.methods.arg.generation import DemoPicker
    from engine.methods.arg.pipeline import answer_questions
    from engine.methods.arg.prompts import Demo
    from engine.models.lm import load_lm

    pool = [Demo(d["question"], d["s_expression"]) for d in json.loads(Path(args.demos).read_text())] if args.demos else []
    anchors = _anchors(args)
    bi, scorer, schema = _models(args)
    with open_from_args(args) as store:
        [result] = answer_questions(
            store, [(args.question, anchors)], load_lm(args.model, args.device, dtype=args.dtype), DemoPicker(pool, args.n_demos, args.demo_mode),
            bi, scorer, Aligner(store, timeout=args.timeout), args.k, args.samples, schema,
        )
    emit(args, result)


def _recall(args: argparse.Namespace) -> None:
    from engine.methods.arg.datasets import recall

    bi, scorer, schema = _models(args)
    started = time.perf_counter()
    with open_from_args(args) as store:
        report = recall(store, _gold_items(store, run_questions(args)), bi, scorer, args.k, schema)
    emit(args, report)
    if not args.json:
        print(f"({time.perf_counter() - started:.1f} s)")


def build_method(args: argparse.Namespace, store, meter):
    """ARG as ``kgqa arg run`` configures it. Demonstrations: ``--pool`` questions of the train
    split, less any that repeat a test question's text or gold form."""
    from engine.methods.arg.generation import demo_pool
    from engine.methods.arg.pipeline import ArgMethod
    from engine.models.lm import load_lm
    from engine.methods.run import unwrap
    from loaders.datasets import select_questions

    bi, scorer, schema = _models(args)
    plain = unwrap(store)
    tests = run_questions(args)
    train = select_questions(args.dataset, "train", sample=args.pool, seed=args.seed, split_seed=args.split_seed) if args.split != "train" else []
    pool = demo_pool(plain, _gold_items(plain, train), _gold_items(plain, tests)) if args.n_demos else []
    return ArgMethod(
        store, meter.lm(load_lm(args.model, args.device, dtype=args.dtype)), bi, scorer, pool, n_demos=args.n_demos,
        demo_mode=args.demo_mode, samples=args.samples, k=args.k, timeout=args.timeout, seed=args.seed, schema=schema,
        batch_size=args.batch_size,
    )
