"""``kgqa lm train``: supervised fine-tuning of a causal LM (:mod:`engine.models.sft`) on any
mix of the sample files that ``kgqa <method> export-training`` writes."""
from __future__ import annotations

import argparse
import json

from engine.cli.common import add_output_arguments, random_seed
from engine.errors import InvalidInputError
from engine.models.sft import PRECISIONS, SCHEDULES
from engine.outputs import refuse_input_as_output


def register(sub: argparse._SubParsersAction) -> None:
    lm = sub.add_parser("lm", help="language models: supervised fine-tuning")
    commands = lm.add_subparsers(dest="lm_command", required=True, metavar="COMMAND")
    p = commands.add_parser("train", help="fine-tune a causal LM on prompt → target JSONL; the loss covers the target only")
    p.add_argument("--data", required=True, nargs="+",
                   help='JSONL files of {"prompt", "target"[, "task", "id"]} lines, e.g. written by `kgqa <method> export-training`')
    p.add_argument("--tasks", nargs="+", default=None,
                   help="train only on the samples of these tasks (e.g. RoG's planning or reasoning; default: every sample)")
    add_sft_arguments(p)
    p.set_defaults(handler=_train)


def add_sft_arguments(p: argparse.ArgumentParser, *, seed: bool = True, output: bool = True) -> None:
    """``--model``, ``--out`` and the training settings of :class:`engine.models.sft.SftConfig`
    (``--seed`` and ``--json`` left out where the command has its own)."""
    p.add_argument("--model", default=None, help="base model: HF id, directory or .gguf (default: offline SmolLM2-135M-Instruct)")
    p.add_argument("--out", required=True, help="directory for the trained model (every --model option accepts it)")
    p.add_argument("--epochs", type=int, default=1, help="passes over the samples (default 1)")
    p.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (default 1e-4)")
    p.add_argument("--schedule", choices=SCHEDULES, default="linear", metavar="SCHEDULE",
                   help=f"transformers learning-rate schedule: {', '.join(SCHEDULES)} (default linear)")
    p.add_argument("--warmup", type=float, default=0.03, help="share of the steps spent warming up (default 0.03)")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch, grouped by length (default 8)")
    p.add_argument("--grad-accum", type=int, default=1, help="batches per optimiser step (default 1)")
    p.add_argument("--max-length", type=int, default=512, help="prompt + target tokens (default 512)")
    if seed:
        p.add_argument("--seed", type=random_seed, default=0, help="seed of initialisation, order and the validation share (default 0)")
    p.add_argument("--val-fraction", type=float, default=0.0, help="share held out for a validation loss per epoch")
    p.add_argument("--patience", type=int, default=None, help="stop after this many epochs without a better validation loss")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default 0)")
    p.add_argument("--resume", default=None, help="go on from the checkpoint of an earlier run (its --out)")
    p.add_argument("--checkpoint-minutes", type=float, default=10.0,
                   help="training minutes between checkpoints inside an epoch, what an interruption can lose "
                        "(default 10; 0: at epoch ends only)")
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (peft) instead of every weight; merged on save")
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank, with --lora (default 16)")
    p.add_argument("--lora-alpha", type=int, default=32, help="LoRA alpha, with --lora (default 32)")
    p.add_argument("--prompt-template", default=None, help="chat (the tokenizer's, default when it has one), raw, llama2 or a string with {prompt}: use the same at inference")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="arithmetic of the passes, weights staying float32: auto (default; bfloat16 autocast on a CUDA "
                        "device that has it, else float32), bf16 (bfloat16 autocast on any device with bfloat16 arithmetic, "
                        "a CPU with AVX-512 or AMX too, where it is faster than float32: python -m benchmarks.training "
                        "measures it; float32 with a warning elsewhere) or fp32")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    if output:
        add_output_arguments(p)


def sft_config(args: argparse.Namespace) -> object:
    from engine.models.sft import SftConfig

    return SftConfig(
        epochs=args.epochs, lr=args.lr, schedule=args.schedule, warmup=args.warmup, batch_size=args.batch_size,
        grad_accum=args.grad_accum, max_length=args.max_length, seed=args.seed, val_fraction=args.val_fraction,
        patience=args.patience, weight_decay=args.weight_decay, lora=args.lora, lora_r=args.lora_r,
        lora_alpha=args.lora_alpha, device=args.device, template=args.prompt_template,
        precision=args.precision,
    )


def run_training(args: argparse.Namespace, samples: list) -> None:
    """Train on ``samples`` with the command's settings and print the summary."""
    from dataclasses import asdict

    from engine.models.sft import train

    if args.checkpoint_minutes < 0:
        raise InvalidInputError(f"--checkpoint-minutes {args.checkpoint_minutes}: give minutes >= 0 (0: checkpoints at epoch ends only)")
    every = args.checkpoint_minutes * 60 if args.checkpoint_minutes > 0 else None
    summary = train(samples, args.model, args.out, sft_config(args), resume=args.resume, progress=not args.no_progress,
                    checkpoint_seconds=every)
    if args.json:
        print(json.dumps(asdict(summary), indent=2))
        return
    curve = "  ".join(
        f"{i + 1}: {t:.4f}" + (f"/{summary.val_loss[i]:.4f}" if i < len(summary.val_loss) else "")
        for i, t in enumerate(summary.train_loss)
    )
    print(
        f"{summary.examples} training samples ({summary.tokens:,} tokens, {summary.target_tokens:,} with loss), "
        f"{summary.val_examples} held out, {summary.skipped} skipped as too long; device {summary.device}\n"
        f"loss per epoch (train/val): {curve}\n"
        f"best epoch {summary.best_epoch}{' (stopped early)' if summary.stopped else ''}; "
        f"{summary.seconds:.0f} s; model saved to {summary.out}"
    )


def _train(args: argparse.Namespace) -> None:
    from engine.models.sft import read_samples

    refuse_input_as_output(args.out, args.data, what="the model directory", option="--out")
    samples = [s for path in args.data for s in read_samples(path, args.tasks)]
    if not samples:
        raise InvalidInputError(f"no samples of the tasks {', '.join(args.tasks or ())} in {', '.join(args.data)}: "
                                "name tasks the files hold (their 'task' field)")
    run_training(args, samples)
