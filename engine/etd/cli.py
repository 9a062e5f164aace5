"""``kgqa etd train`` and ``kgqa etd predict``; torch and the models load inside the handlers."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from engine.cli import add_store_arguments, open_from_args


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

    p = sub.add_parser("predict", help="predict answers, write JSONL and print Hits@1 and timings")
    _add_data_arguments(p)
    p.add_argument("--checkpoint", required=True, help="a best.pt written by `kgqa etd train`")
    p.add_argument("--split", choices=["train", "val", "test", "all"], default="test",
                   help="which part of the training run's split to answer (default: the held-out test slice)")
    p.add_argument("--output", required=True, help="predictions JSONL")
    p.add_argument("--top-n", type=int, default=3, help="reference answers in the prompt (default 3)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--gnn-only", action="store_true", help="answer with the GNN's top candidate (no LLM)")
    mode.add_argument("--lm", default=None, help="language model for determination (default: the LM layer's offline default)")
    p.add_argument("--limit", type=int, default=None, help="answer only the first N questions of the split")
    p.set_defaults(handler=_run_predict)


def _add_data_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="metaqa-1hop, metaqa-2hop, metaqa-3hop, pathquestion-2h, pathquestion-3h (sets L and K)")
    p.add_argument("--questions", default=None, help="question file (default: the dataset's file under --data-dir)")
    p.add_argument("--data-dir", default=None, help="datasets directory (default $KGQA_DATA or ../shared/data)")
    p.add_argument("--seed", type=int, default=None, help="split and training seed (default 0)")
    p.add_argument("--max-degree", type=int, default=None, help="per-node edge sample cap for hubs (default 1000)")
    p.add_argument("--encoding-cache", default=None,
                   help="directory keeping the frozen text encodings between runs (default: encode every run)")
    p.add_argument("--no-progress", action="store_true")
    add_store_arguments(p)


def _run_train(args: argparse.Namespace) -> None:
    from engine.etd.pipeline import load_questions
    from engine.etd.training import TrainConfig, train
    from loaders.datasets import split_questions

    config = TrainConfig.for_dataset(
        args.dataset, **{k: getattr(args, k) for k in (
            "epochs", "patience", "batch_size", "lr", "weight_decay", "dim", "num_layers", "top_k", "encoder",
            "max_train", "seed", "max_degree", "max_frontier", "encoding_cache", "time_budget", "init_from",
            "mask_topic")}
    )
    parts = split_questions(load_questions(args.dataset, args.questions, args.data_dir), config.seed,
                            config.val_fraction, config.test_fraction)
    train_questions = parts["train"][: config.max_train]
    with open_from_args(args) as store:
        summary = train(store, train_questions, parts["val"], config, args.checkpoint_dir, progress=not args.no_progress)
    print(json.dumps(summary.to_json(), indent=2))


def _run_predict(args: argparse.Namespace) -> None:
    from engine.etd.pipeline import load_questions, predict
    from engine.etd.training import load_checkpoint
    from loaders.datasets import split_questions

    model, saved = load_checkpoint(args.checkpoint)
    settings = saved["train"]
    seed = settings["seed"] if args.seed is None else args.seed
    parts = split_questions(load_questions(args.dataset, args.questions, args.data_dir), seed,
                            settings["val_fraction"], settings["test_fraction"])
    questions = parts[args.split][: args.limit]
    lm = None
    if not args.gnn_only:
        from engine.models.lm import load_lm

        lm = load_lm(args.lm)
    max_degree = settings["max_degree"] if args.max_degree is None else args.max_degree
    with open_from_args(args) as store:
        summary = predict(store, model, questions, args.output, top_n=args.top_n, lm=lm, max_degree=max_degree,
                          progress=not args.no_progress, encoding_cache=args.encoding_cache)
    print(json.dumps(asdict(summary), indent=2), file=sys.stdout)
