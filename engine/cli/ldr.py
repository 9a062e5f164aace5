"""``kgqa ldr run``, ``kgqa ldr export-training`` and ``kgqa ldr train``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.cli.common import (
    DATASET_HELP,
    add_output_arguments,
    add_question_arguments,
    add_run_arguments,
    add_store_arguments,
    open_from_args,
    run_questions,
)
from engine.cli.lm import add_sft_arguments


def register(sub: argparse._SubParsersAction) -> None:
    ldr = sub.add_parser("ldr", help="LDR: discriminative search, constraint pruning and answer location over option pools")
    commands = ldr.add_subparsers(dest="ldr_command", required=True, metavar="COMMAND")

    p = commands.add_parser("run", help="answer a question set and write predictions JSONL")
    add_run_arguments(p, "ldr", build_method, "search model: HF id, directory, .gguf, or openai:MODEL[@URL] (default: offline SmolLM2-135M-Instruct)")
    p.add_argument("--reasoner", default=None, help="model for pruning and answer location if not the search model (the paper trains two)")
    p.add_argument("--prompt-template", default=None, help="chat (the tokenizer's, default), raw, llama2 or a string with {prompt}")
    p.add_argument("--normalise", choices=["sum", "mean"], default="sum",
                   help="option score: summed token log-probability (default, Eq. 7) or the mean per token (length-normalised beam search)")
    p.add_argument("--batch-size", type=int, default=8,
                   help="questions reasoned in lock step, their store calls shared; the model keeps one prompt cache per question (default 8)")
    _add_ldr_options(p)

    p = commands.add_parser("export-training", help="search and pruning+answer SFT samples from gold structures")
    p.add_argument("--dataset", required=True, help=DATASET_HELP + ", or a WebQSP JSON file (WebQSP.train.json.gz; no store needed)")
    p.add_argument("--out", required=True, help="directory for search.jsonl, reasoning.jsonl and export-report.json")
    add_question_arguments(p, "train")
    _add_ldr_options(p)
    add_store_arguments(p)
    add_output_arguments(p)
    p.set_defaults(handler=_export)

    p = commands.add_parser("train", help="fine-tune a causal LM on exported samples (the shared SFT facility)")
    p.add_argument("--data", required=True, nargs="+", help="sample JSONL files written by export-training")
    add_sft_arguments(p)
    p.set_defaults(handler=_train)


def _add_ldr_options(p: argparse.ArgumentParser) -> None:
    """Options that shape the prompts: a run and its training samples must agree on them."""
    p.add_argument("--max-steps", type=int, default=8, help="search steps before the search is cut (reported as truncated; default 8)")
    p.add_argument("--max-options", type=int, default=256, help="options the search pool may hold (reported as truncated; default 256)")
    p.add_argument("--relation-rows", type=int, default=100_000, help="rows per relations call (hubs; default 100000)")
    p.add_argument("--edge-limit", type=int, default=20_000, help="edges per expand call (hubs; default 20000)")
    p.add_argument("--match-names", action="store_true",
                   help="constraint entities also from the names of G_k's entities that the question mentions (one more names call)")


def _config(args: argparse.Namespace):
    from engine.methods.ldr.pipeline import LdrConfig
    from engine.methods.ldr.search import SearchLimits

    limits = SearchLimits(args.max_steps, args.max_options, args.relation_rows, args.edge_limit)
    return LdrConfig(limits=limits, normalise=getattr(args, "normalise", "sum"), match_names=args.match_names)


def build_method(args: argparse.Namespace, store, meter):
    """LDR as ``kgqa ldr run`` configures it."""
    from engine.methods.ldr.pipeline import LdrMethod
    from engine.methods.ldr.scoring import OptionScorer, StageScorer
    from engine.models.lm import load_lm

    config = _config(args)

    def model(source: str | None):
        lm = load_lm(source, args.device, args.prompt_template, args.dtype)
        if hasattr(lm, "prefix_caches"):  # each question's next prompt begins like its last: keep one per question
            lm.prefix_caches = max(lm.prefix_caches, args.batch_size + 1)
        return OptionScorer(meter.lm(lm), config.normalise)

    search = model(args.model)
    if args.reasoner is None:
        return LdrMethod(store, search, config, args.batch_size)
    return LdrMethod(store, StageScorer(search, model(args.reasoner)), config, args.batch_size)


def _is_webqsp(dataset: str) -> bool:
    name = Path(dataset).name.lower()
    return Path(dataset).is_file() and name.startswith("webqsp") and ".json" in name


def _export(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from engine.methods.ldr.training_data import (
        FILES,
        ExportReport,
        chain_samples,
        read_webqsp,
        webqsp_samples,
    )
    from loaders.datasets import select_subset

    report = ExportReport()
    if _is_webqsp(args.dataset):
        questions = select_subset(read_webqsp(args.dataset), args.split, sample=args.sample, limit=args.limit, seed=args.seed,
                                  split_seed=args.split_seed)
        samples = webqsp_samples(tqdm(questions, desc="parses", unit="q", file=sys.stderr), report)
        _write(args.out, samples, FILES, report)
    else:
        questions = run_questions(args)
        with open_from_args(args) as store:
            samples = chain_samples(store, tqdm(questions, desc="gold replay", unit="q", file=sys.stderr), _config(args), report)
            _write(args.out, samples, FILES, report)
    summary = report.to_json()
    print(json.dumps(summary, indent=2) if args.json else
          f"{summary['exported']}/{summary['questions']} exported ({summary['infeasible']} infeasible, {summary['no_gold']} without a "
          f"gold structure{', uncovered: ' + json.dumps(summary['uncovered']) if summary.get('uncovered') else ''}); "
          f"samples {json.dumps(summary['samples'])}; written to {args.out}")


def _write(out: str, samples, files: dict[str, tuple[str, ...]], report) -> None:
    """One JSONL file per model; a file no sample goes to is not written (MetaQA-1hop has no
    answer choice: its S_k holds one node besides the start), so every file written trains."""
    from contextlib import ExitStack

    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    for name in files:  # an earlier export's files must not mix with this one's
        (directory / name).unlink(missing_ok=True)
    with ExitStack() as stack:
        handles: dict[str, Any] = {}
        for s in samples:
            name = next(n for n, stages in files.items() if s.stage in stages)
            if name not in handles:
                handles[name] = stack.enter_context(open(directory / name, "w", encoding="utf-8"))
            handles[name].write(json.dumps(s.to_json(), ensure_ascii=False) + "\n")
    (directory / "export-report.json").write_text(json.dumps(report.to_json(), indent=2))


def _train(args: argparse.Namespace) -> None:
    from engine.cli.lm import run_training
    from engine.models.sft import read_samples

    run_training(args, [s for path in args.data for s in read_samples(path)])
