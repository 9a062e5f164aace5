"""What every ``kgqa`` command module shares: the store, output, question and config options,
opening the store an invocation names, and printing results. Command modules import this,
never :mod:`engine.cli.main`, which imports them."""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from engine.errors import InvalidInputError, KGQAError, QueryTimeoutError
from engine.graph import FREEBASE_NS
from engine.identifiers import MAX_SEED
from engine.open import open_store
from engine.ops import Compiled, Op
from engine.render import render
from engine.results import to_json

STORE_HELP = "store URI: a directory or oxigraph:PATH (embedded, default {default}), memory:, http://host:port/sparql, bolt://… or neo4j://…"


def add_store_arguments(p: argparse.ArgumentParser, default: str | None = None) -> None:
    """``--store`` and its options; without ``default`` the store is $KGQA_STORE, else kgqa-data/store."""
    p.add_argument("--store", default=default,
                   help=STORE_HELP.format(default=default or "kgqa-data/store, or $KGQA_STORE"))
    p.add_argument("--namespace", default=FREEBASE_NS, help="namespace of ids in RDF stores (default: Freebase's)")
    p.add_argument(
        "--store-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a store option, repeatable: e.g. staging_dir=/srv/stage isql=localhost:1111 graph=IRI for Virtuoso, "
        "database=NAME for Bolt",
    )


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def count(text: str) -> int:
    """An argparse type: a whole number of at least 1 (questions, batches, clients, repeats)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1")
    return value


def random_seed(text: str) -> int:
    """An argparse type: a random seed, a whole number from 0 to :data:`MAX_SEED`."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number from 0 to {MAX_SEED}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0")
    return value


def hops(text: str) -> int:
    """An argparse type: a number of hops, from 1 to :data:`engine.identifiers.MAX_HOPS`."""
    from engine.identifiers import MAX_HOPS, validate_hops

    try:
        return validate_hops(int(text))
    except (ValueError, InvalidInputError):
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number from 1 to {MAX_HOPS}") from None


def fraction(text: str) -> float:
    """An argparse type: a fraction from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a fraction from 0 to 1")
    return value


def add_reject_share_argument(p: argparse.ArgumentParser, doing: str) -> None:
    """``--max-reject-share``: when a file read in the wrong format stops ``kgqa load`` and ``kgqa neo4j-import``."""
    p.add_argument(
        "--max-reject-share", type=fraction, default=0.5, metavar="FRACTION",
        help=f"stop, {doing} nothing of a file, when more than this share of its first 1000 lines is rejected "
        "(a wrong --format); default 0.5, 1 never stops",
    )


def reject_share(args: argparse.Namespace) -> float | None:
    """``--max-reject-share`` as the loaders take it (None: never stop)."""
    return None if args.max_reject_share >= 1 else args.max_reject_share


def add_question_arguments(p: argparse.ArgumentParser, split: str, sample: int | None = None) -> None:
    """``--split --sample --limit --seed --split-seed``: which questions of a dataset a command
    takes (:func:`run_questions`). The split is fixed by ``--split-seed`` alone, so another
    ``--seed`` draws another sample but never moves a question between train and test."""
    from loaders.datasets import SPLIT_SEED, SPLITS

    why = {"test": "the held-out test part", "train": "train: never train on the questions you report on"}.get(split, split)
    p.add_argument("--split", choices=SPLITS, default=split, help=f"which part of the dataset's train/val/test split (default {why})")
    p.add_argument("--sample", type=count, default=sample,
                   help="a random sample of this many questions of the split, drawn with --seed" + (f" (default {sample})" if sample else ""))
    p.add_argument("--limit", type=count, default=None, help="only the first N questions (after --sample)")
    p.add_argument("--seed", type=random_seed, default=0, help="seed of the sample (default 0); it does not change the split")
    p.add_argument("--split-seed", type=int, default=SPLIT_SEED,
                   help=f"seed of the train/val/test split (default {SPLIT_SEED}); give training and evaluation the same one")


DATASET_HELP = (
    "metaqa-1hop|2hop|3hop, pathquestion-2h|3h (from $KGQA_DATA, else shared/data beside the checkout), or a question file: "
    "RoG .jsonl/.parquet, PathQuestion PQ-*.txt and PQL-*.txt, MetaQA qa_*.txt"
)


def add_device_arguments(p: argparse.ArgumentParser) -> None:
    """Where and in what precision a local language model runs."""
    p.add_argument("--device", default=None, help="torch device: cpu, cuda or cuda:N (default: $KGQA_DEVICE, else cuda when "
                   "available, else cpu)")
    # checked where the model loads (engine.models.transformers_lm.DTYPES): this module needs nothing from engine.models,
    # whose cli.py imports it
    p.add_argument("--dtype", default=None, help="the language model's weight precision: float32, bfloat16, float16 or "
                   "auto (default: float32 on a CPU, the checkpoint's own on a GPU); bfloat16 cuts model time ≈ 2.5x on a "
                   "CPU with bf16 instructions and may change close decisions")


def question_set(args: argparse.Namespace):
    """The questions ``--dataset --split --sample --limit --seed --split-seed`` select."""
    from loaders.datasets import QuestionSet

    return QuestionSet(args.dataset, args.split, args.sample, args.limit, args.seed, args.split_seed)


def run_questions(args: argparse.Namespace) -> list:
    """The selected questions themselves (:func:`question_set`)."""
    return question_set(args).select()


def add_config_arguments(p: argparse.ArgumentParser, config_type: type, only: tuple[str, ...] | None = None) -> None:
    """One flag per option of ``config_type`` (of those named in ``only``), with its default and help
    (:func:`engine.methods.spec.options`). A flag not given leaves no attribute behind, so that
    :func:`given_options` can tell an option set to its default from one left alone; read the
    options with :func:`config_from_args`."""
    from engine.methods.spec import options

    for o in options(config_type):
        if only is not None and o.name not in only:
            continue
        names = [o.flag, *([o.short] if o.short else [])]
        shown = "" if o.default is None or o.kind is bool else f" (default {o.default})"
        if o.kind is bool:  # --flag and --no-flag: either may differ from a recipe's value (``kgqa <method> run --recipe``)
            p.add_argument(*names, dest=o.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                           help=o.help + f" (default {'on' if o.default else 'off'})")
            continue
        p.add_argument(*names, dest=o.name, type=o.kind, default=argparse.SUPPRESS, choices=o.choices, help=o.help + shown)


def given_options(config_type: type, args: argparse.Namespace) -> dict[str, Any]:
    """The options of ``config_type`` that the command line gave, with their values."""
    from engine.methods.spec import options

    return {o.name: getattr(args, o.name) for o in options(config_type) if hasattr(args, o.name)}


def config_from_args(config_type: type, args: argparse.Namespace, values: dict[str, Any] | None = None) -> Any:
    """The config the flags of :func:`add_config_arguments` give; ``values`` (field names, as
    :func:`engine.methods.spec.make_config` reads them) stand in for the flags not given."""
    from engine.methods.spec import make_config

    return make_config(config_type, {**(values or {}), **given_options(config_type, args)})


def open_from_args(args: argparse.Namespace, *, write: bool = False):
    """The store that ``--store`` names. A command that ``write``s into it (``kgqa load``,
    ``kgqa webqsp build``) opens an embedded store for writing, holding it alone, and creates it
    where there is none; every other command opens it read only, so that any number of them
    can read one store at once (:class:`engine.stores.oxigraph.OxigraphStore`)."""
    options: dict[str, Any] = {}
    if args.store is None or not args.store.startswith(("bolt", "neo4j")):
        options["namespace"] = args.namespace
    for item in getattr(args, "store_option", []):
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise KGQAError(f"--store-option {item!r}: write KEY=VALUE, e.g. staging_dir=/srv/stage")
        options[key] = int(value) if value.isdigit() else value
    return open_store(args.store, create=write, read_only=not write, **options)


def emit(args: argparse.Namespace, result: Any, names: dict | None = None) -> None:
    if args.json:
        print(json.dumps(to_json(result), ensure_ascii=False, indent=2))
    else:
        print(render(result, names))


def notes_deadline(args: argparse.Namespace) -> float | None:
    """When the notes on an empty answer must be looked up by (a :func:`time.monotonic`
    instant): ``--timeout`` seconds from now, as the call begins; None without one."""
    timeout = getattr(args, "timeout", None)
    return None if timeout is None else time.monotonic() + timeout


def notes_cut_short(args: argparse.Namespace, error: QueryTimeoutError) -> str:
    """The note that ends notes whose look-ups ran out of time."""
    timeout = getattr(args, "timeout", None)
    why = f"ran past --timeout {timeout:g}" if timeout is not None else f"timed out ({error})"
    return f"looking up why the answer is empty {why}; these notes may be incomplete"


def print_notes(notes: list[str]) -> None:
    """Notes on stderr, so that stdout holds the answer alone (text or --json)."""
    for note in notes:
        print(f"kgqa: note: {note}", file=sys.stderr)


def emit_explained(args: argparse.Namespace, calls: list[tuple[Op, Compiled]]) -> None:
    """The compiled queries of ``--explain``: per store call, the operation, text and parameters."""
    found = [{"op": op.name, "text": compiled.text, "params": to_json(compiled.params)} for op, compiled in calls]
    if args.json:
        print(json.dumps(found, ensure_ascii=False, indent=2))
        return
    for item in found:
        print(f"-- {item['op']}\n{item['text']}")
        if item["params"]:
            print(f"-- parameters: {json.dumps(item['params'], ensure_ascii=False)}")


# --------------------------------------------------------------------- query operations
def parse_anchors(ids: list[str], literal_texts: list[str], missing: str) -> list:
    """Ids, then literals written as in an S-expression; ``missing`` is the error when there
    are none."""
    from engine.sexpr import parse_literal

    found = [*ids, *(parse_literal(text) for text in literal_texts)]
    if not found:
        raise InvalidInputError(missing)
    return found
