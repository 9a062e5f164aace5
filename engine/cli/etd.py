"""``kgqa etd train``; torch and the models load inside the handler."""
from __future__ import annotations

import argparse
import json

from engine.cli.common import (
    DATASET_HELP,
    add_question_arguments,
    add_store_arguments,
    open_from_args,
    question_set,
)
from engine.errors import InvalidInputError


def add_commands(sub: argparse._SubParsersAction) -> None:
    """``kgqa etd train`` (``run`` comes from the method's spec)."""
    p = sub.add_parser(
        "train", help="train the exploration GNN (paper hyperparameters per dataset)",
        description="Train the exploration GNN on the questions --split --sample --limit --seed --split-seed select "
        "(--seed also seeds the initialisation and the batch order), picking the best epoch on the split's val part.",
    )
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


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--paper-config", default=None,
                   help="metaqa-1hop|2hop|3hop or pathquestion-2h|3h: the paper's hyperparameters (L, K) to train with (default: --dataset when it names one)")
    add_question_arguments(p, "train")
    p.add_argument("--max-degree", type=int, default=None, help="per-node edge sample cap for hubs (default 1000)")
    p.add_argument("--encoding-cache", default=None,
                   help="directory keeping the frozen text encodings between runs (default: encode every run)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_store_arguments(p)


def _run_train(args: argparse.Namespace) -> None:
    """Train on the questions ``--split --sample --limit --seed --split-seed`` select (``--seed``
    also seeds the initialisation and the batch order), validating on the split's ``val`` part."""
    from dataclasses import replace

    from engine.methods.etd.config import TrainConfig, paper_layers_top_k
    from engine.methods.etd.training import train

    paper = args.paper_config or args.dataset
    paper_layers_top_k(paper, "name them with --paper-config, one of")
    if args.split in ("val", "all"):
        raise InvalidInputError(f"--split {args.split} holds the validation questions that pick the best epoch: "
                                "train on --split train (the default)")
    config = TrainConfig.for_dataset(
        paper, max_train=args.limit, **{k: getattr(args, k) for k in (
            "epochs", "patience", "batch_size", "lr", "weight_decay", "dim", "num_layers", "top_k", "encoder",
            "seed", "split_seed", "max_degree", "max_frontier", "encoding_cache", "time_budget", "init_from",
            "mask_topic")}
    )
    chosen = question_set(args)
    with open_from_args(args) as store:
        summary = train(store, chosen.select(), replace(chosen, split="val", sample=None, limit=None).select(), config,
                        args.checkpoint_dir, progress=not args.no_progress)
    print(json.dumps(summary.to_json(), indent=2))
