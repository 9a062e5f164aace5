"""``kgqa etd train`` and ``kgqa etd run``; torch and the models load inside the handlers."""
from __future__ import annotations

import argparse
import json

from engine.cli.common import (
    DATASET_HELP,
    add_run_arguments,
    add_store_arguments,
    open_from_args,
)
from engine.errors import InvalidInputError


def register(subparsers: argparse._SubParsersAction) -> None:
    etd = subparsers.add_parser("etd", help="EtD: GNN exploration through the store, then LLM determination")
    sub = etd.add_subparsers(dest="etd_command", required=True)

    p = sub.add_parser("train", help="train the exploration GNN (paper hyperparameters per dataset)")
    _add_data_arguments(p)
    p.add_argument("--checkpoint-dir", required=True, help="directory for best.pt, last.pt and summary.json")
    p.add_argument("--epochs", type=int, default=None, help="at most this many epochs (default 30)")
    p.add_argument("--patience", type=int, default=None, help="epochs without a better val Hits@1 before stopping (default 3)")
    p.add_argument("--batch-size", type=int, default=None, help="default 20")
    p.add_argument("--lr", type=float, default=None, help="Adam learning rate (default 1e-4)")
    p.add_argument("--weight-decay", type=float, default=None, help="default 1e-3")
    p.add_argument("--dim", type=int, default=None, help="hidden size d (default 256)")
    p.add_argument("--layers", type=int, default=None, dest="num_layers", help="L (default: the paper's for the dataset)")
    p.add_argument("--top-k", type=int, default=None, help="K (default: the paper's for the dataset)")
    p.add_argument("--encoder", default=None, help="sentence-transformers model, or causal:PATH (default all-MiniLM-L6-v2, offline)")
    p.add_argument("--max-train", type=int, default=None, help="train on at most this many questions")
    p.add_argument("--time-budget", type=float, default=None,
                   help="start no new epoch after this many seconds of training (default: no limit)")
    p.add_argument("--init-from", default=None,
                   help="start from this checkpoint's weights (same L, K, d, encoder and relations), e.g. to go on at a lower lr")
    p.add_argument("--max-frontier", type=int, default=None,
                   help="in training steps, keep at most this many nodes per question per layer, by their best "
                        "in-edge attention (not in the paper; validation and predict explore uncapped; default: no cap)")
    p.add_argument("--mask-topic", action="store_true", default=None,
                   help="encode each question with its topic entity's mention replaced by a placeholder (not in the paper)")
    p.set_defaults(handler=_run_train)

    p = sub.add_parser("run", help="answer a question set with a trained GNN (and an LLM), write predictions JSONL")
    add_run_arguments(p, "etd", build_method, "language model for determination (default: the offline SmolLM2-135M-Instruct)")
    p.add_argument("--checkpoint", required=True, help="a best.pt written by `kgqa etd train`")
    p.add_argument("--gnn-only", action="store_true", help="answer with the GNN's top candidate (no LLM)")
    p.add_argument("--top-n", type=int, default=3, help="reference answers in the prompt (default 3)")
    p.add_argument("--batch-size", type=int, default=50, help="questions explored together (default 50)")
    p.add_argument("--max-degree", type=int, default=None, help="per-node edge sample cap for hubs (default: the training run's)")
    p.add_argument("--encoding-cache", default=None, help="directory keeping the frozen text encodings between runs")


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--paper-config", default=None,
                   help="metaqa-1hop|2hop|3hop or pathquestion-2h|3h: the paper's hyperparameters (L, K) to train with (default: --dataset when it names one)")
    p.add_argument("--seed", type=int, default=None, help="training seed: initialisation and batch order (default 0)")
    p.add_argument("--split-seed", type=int, default=None,
                   help="seed of the train/val/test split (default 0); `kgqa etd run` must name the same")
    p.add_argument("--max-degree", type=int, default=None, help="per-node edge sample cap for hubs (default 1000)")
    p.add_argument("--encoding-cache", default=None,
                   help="directory keeping the frozen text encodings between runs (default: encode every run)")
    p.add_argument("--no-progress", action="store_true")
    add_store_arguments(p)


def _run_train(args: argparse.Namespace) -> None:
    from engine.methods.etd.training import PAPER_LAYERS_TOP_K, TrainConfig, train
    from loaders.datasets import load_dataset, split_questions

    paper = args.paper_config or args.dataset
    if paper not in PAPER_LAYERS_TOP_K:
        raise InvalidInputError(f"no paper hyperparameters for {paper!r}: name them with --paper-config "
                                f"({', '.join(PAPER_LAYERS_TOP_K)})")
    config = TrainConfig.for_dataset(
        paper, **{k: getattr(args, k) for k in (
            "epochs", "patience", "batch_size", "lr", "weight_decay", "dim", "num_layers", "top_k", "encoder",
            "max_train", "seed", "split_seed", "max_degree", "max_frontier", "encoding_cache", "time_budget", "init_from",
            "mask_topic")}
    )
    parts = split_questions(load_dataset(args.dataset), config.split_seed, config.val_fraction, config.test_fraction)
    train_questions = parts["train"][: config.max_train]
    with open_from_args(args) as store:
        summary = train(store, train_questions, parts["val"], config, args.checkpoint_dir, progress=not args.no_progress)
    print(json.dumps(summary.to_json(), indent=2))


def build_method(args: argparse.Namespace, store, meter):
    """EtD as ``kgqa etd run`` configures it."""
    from engine.methods.etd.pipeline import EtdMethod
    from engine.methods.etd.training import load_checkpoint

    model, saved = load_checkpoint(args.checkpoint)
    settings = saved["train"]
    split_seed = settings.get("split_seed", settings["seed"])  # checkpoints from before --split-seed split with --seed
    if args.split != "all" and (split_seed, settings["val_fraction"], settings["test_fraction"]) != (args.split_seed, 0.1, 0.1):
        raise InvalidInputError(
            f"{args.checkpoint} was trained on a split with seed {split_seed} and val/test fractions "
            f"{settings['val_fraction']}/{settings['test_fraction']}: run with --split-seed {split_seed} (and the default "
            "fractions) so that --split picks questions it was not trained on"
        )
    max_degree = settings["max_degree"] if args.max_degree is None else args.max_degree
    lm = None
    if not args.gnn_only:
        from engine.models.lm import load_lm

        lm = meter.lm(load_lm(args.model, args.device, dtype=args.dtype))
    return EtdMethod(store, model, meter, lm, top_n=args.top_n, batch_size=args.batch_size, max_degree=max_degree,
                     encoding_cache=args.encoding_cache)
