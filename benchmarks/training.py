"""``python -m benchmarks.training``: what a fine-tuning step costs, by precision and loss.

Times full fine-tuning steps (forward, backward, AdamW) of a base model (default: the offline
SmolLM2-135M-Instruct) on real training samples, in four variants on the same batches from the
same weights: float32 or bfloat16 autocast (``kgqa lm train --precision``), and the engine's
loss, which projects to the vocabulary only the positions that carry loss
(:func:`engine.models.sft.target_loss`), or the usual loss over every position's logits
(:mod:`benchmarks.baselines.full_vocab_loss`). The batches are cut as training cuts them (length
sorted, in a seeded order) and the first ``--batches`` are timed after one untimed warm-up batch.
Each variant reports seconds per batch, samples and target tokens per second, peak memory, and
the loss of the first batch before any update, so that the variants' losses can be compared.

Results go to ``benchmarks/results/training/training.json`` (commit it; ``python -m docs.gen``
turns it into docs/generated/bench-training.md).

    python -m benchmarks.training --samples kgqa-data/runs/ldr/full/samples/*.jsonl [--batches 12]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from engine.cli.common import count, random_seed

OUT = Path(__file__).resolve().parent / "results" / "training" / "training.json"
#: (name, precision, loss) of each variant, the baseline first
VARIANTS = (("float32, every position", "fp32", "full"), ("float32, labelled positions", "fp32", "target"),
            ("bf16, every position", "bf16", "full"), ("bf16, labelled positions", "bf16", "target"))


def _variant(samples: list, base: str | None, precision: str, loss_name: str, batches: int, batch_size: int,
             seed: int, encoded: list | None) -> tuple[dict[str, Any], list]:
    """One variant's timings, and the samples encoded (``encoded``: as an earlier variant encoded them)."""
    import torch

    from benchmarks.baselines.full_vocab_loss import full_vocab_loss
    from benchmarks.procstat import peak_rss_mib, reset_peak
    from engine.models.sft import IGNORE, SftConfig, autocast_for, collate, encode, length_batches, load_trainable, target_loss

    config = SftConfig(batch_size=batch_size, seed=seed, precision=precision, device="cpu")
    torch.manual_seed(seed)
    lm = load_trainable(base, config)
    if encoded is None:  # the same tokenizer for every variant: encode once
        encoded = [e for e in (encode(lm, s, config.max_length) for s in samples) if e is not None]
    order = length_batches(encoded, batch_size, random.Random(seed))[:batches + 1]
    loss_of = target_loss if loss_name == "target" else full_vocab_loss
    autocast, _ = autocast_for("cpu", precision)
    optimiser = torch.optim.AdamW([p for p in lm.model.parameters() if p.requires_grad], lr=config.lr)
    reset_peak()
    seconds, first_loss, n_samples, n_targets = [], None, 0, 0
    for i, batch in enumerate(order):
        items = [encoded[j] for j in batch]
        ids, mask, labels = collate(items, lm._pad, "cpu")
        started = time.perf_counter()
        with autocast():
            loss, n = loss_of(lm.model, ids, mask, labels)
        (loss / max(n, 1)).backward()
        optimiser.step()
        optimiser.zero_grad()
        took = time.perf_counter() - started
        if first_loss is None:
            first_loss = float(loss.detach()) / max(n, 1)
        if i == 0:
            continue  # the warm-up batch: allocations and kernel choices, not counted
        seconds.append(took)
        n_samples += len(items)
        n_targets += sum(sum(label != IGNORE for label in e.labels) for e in items)
    total = sum(seconds)
    return {"precision": precision, "loss": loss_name, "batches": len(seconds),
            "seconds_per_batch": round(statistics.median(seconds), 3), "seconds": round(total, 2),
            "samples_per_second": round(n_samples / total, 3), "target_tokens_per_second": round(n_targets / total, 1),
            "first_batch_loss": round(first_loss, 6), "peak_memory_mib": peak_rss_mib()}, encoded


def run(args: argparse.Namespace, command: list[str]) -> dict[str, Any]:
    from engine.models.sft import read_samples
    from engine.recipes.runner import machine

    samples = [s for path in args.samples for s in read_samples(path)]  # a file without samples is refused
    started = time.perf_counter()
    variants: dict[str, dict[str, Any]] = {}
    encoded = None
    for name, precision, loss in VARIANTS:
        variants[name], encoded = _variant(samples, args.base, precision, loss, args.batches, args.batch_size, args.seed, encoded)
    baseline = variants[VARIANTS[0][0]]
    for v in variants.values():
        v["speedup"] = round(baseline["seconds_per_batch"] / v["seconds_per_batch"], 2)
    return {"command": command, "machine": machine("cpu"), "base_model": args.base or "SmolLM2-135M-Instruct (offline)",
            "samples": [str(p) for p in args.samples], "batch_size": args.batch_size, "seed": args.seed,
            "variants": variants, "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.training", description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", nargs="+", required=True, help="JSONL files of training samples (kgqa <method> export-training)")
    p.add_argument("--base", default=None, help="base model (default: the offline SmolLM2-135M-Instruct)")
    p.add_argument("--batches", type=count, default=12, help="timed batches per variant, after one warm-up batch (default 12)")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch (default 8)")
    p.add_argument("--seed", type=random_seed, default=0, help="the batches' order (default 0)")
    p.add_argument("--out", default=str(OUT), help=f"results file (default {OUT.relative_to(OUT.parents[3])})")
    args = p.parse_args(argv)
    results = run(args, ["python -m benchmarks.training", *(argv if argv is not None else sys.argv[1:])])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, v in results["variants"].items():
        print(f"{name}: {v['seconds_per_batch']} s/batch ({v['speedup']}x), first-batch loss {v['first_batch_loss']}, "
              f"peak {v['peak_memory_mib']} MiB")
    print(f"{results['seconds']:.0f} s; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
