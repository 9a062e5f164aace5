"""Supervised fine-tuning of a causal LM on prompt → target pairs (RoG's planner and reasoner,
ARG's generator, LDR's scorer): one short PyTorch loop over transformers models.

- Input: JSONL lines ``{"prompt": …, "target": …}`` (:func:`read_samples`), or samples built in
  Python. Each is encoded as the model sees it at inference: the prompt through
  :meth:`TransformersLM.prompt_ids` (the same chat template), then the target's tokens and eos.
  The loss covers the target tokens only: prompt positions are labelled -100.
- Any model :func:`engine.models.lm.load_lm` loads locally: an HF id, a directory, a ``.gguf``
  file (de-quantised to float32), the offline default. The result is saved with
  ``save_pretrained`` (LoRA adapters merged first), so ``load_lm(out_dir)`` and every ``--model``
  option read it.
- Batches are cut from length-sorted samples (little padding, which matters on a CPU) and
  visited in a seeded random order; AdamW with a ``transformers.get_scheduler`` schedule and
  warm-up, gradient accumulation and clipping. Only the positions that carry loss are projected
  to the vocabulary. On a GPU the passes run in bf16 autocast where supported, and with
  ``precision="bf16"`` on any device with bfloat16 arithmetic (``python -m benchmarks.training``
  measures both on a CPU); on a CPU without it, such as one with AVX2 alone, bf16 trains in float32.
- A held-out fraction gives a validation loss per epoch; the best epoch's weights are what is
  saved, and ``patience`` epochs without a better one end training. Every epoch ends with a
  checkpoint (``out_dir/checkpoint``: trainable weights, optimiser, scheduler, state), and so
  does every ``checkpoint_seconds`` of training inside an epoch (with the batches done and the
  random state), so an interrupted run loses minutes, not an epoch. ``resume`` continues from
  it with the batches and dropout an uninterrupted run would have had.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.cpu_time import cpu_seconds
from engine.errors import InvalidInputError, ParseError
from engine.jsonl import json_lines
from engine.models.device import bf16_or_warn, pick_device
from engine.models.run_folder import SUMMARY_FILE, check_model_folder, checkpoint_dirs, find_checkpoint
from engine.models.templates import TEMPLATE_FILE, check_template
from engine.models.transformers_lm import DEFAULT_LM
from engine.outputs import folder_saved_whole, written_whole

IGNORE = -100  # the label cross-entropy skips
CHECKPOINT_SECONDS = 600.0  # training time between checkpoints inside an epoch
ADAPTER_DIR = "adapter"  # a LoRA run's unmerged adapter, beside the merged model


@dataclass(frozen=True)
class Sample:
    """One supervised example, exactly as the model sees it: the prompt as the method builds it
    at inference, the target, the task it teaches (the method's name for it: RoG's ``planning``
    and ``reasoning``, LDR's ``search``, ``constraints`` and ``answer``, ARG's ``generation``)
    and the question it came from."""

    prompt: str
    target: str
    task: str = ""
    id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "target": self.target, "task": self.task, "id": self.id}


PRECISIONS = ("auto", "bf16", "fp32")
#: the ``transformers.get_scheduler`` schedules training can use: those that need nothing beyond
#: the warmup and step counts and step without a metric (the others want a minimum learning
#: rate, decay steps or a validation metric at every step)
SCHEDULES = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup", "inverse_sqrt")


@dataclass(frozen=True)
class SftConfig:
    epochs: int = 1
    lr: float = 1e-4
    schedule: str = "linear"  # one of SCHEDULES
    warmup: float = 0.03  # share of the optimiser steps spent warming up
    batch_size: int = 8
    grad_accum: int = 1
    max_length: int = 512  # prompt + target tokens; longer targets are cut, longer prompts skipped
    seed: int = 0
    val_fraction: float = 0.0
    patience: int | None = None  # epochs without a better validation loss before stopping
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    device: str | None = None
    template: str | None = None  # prompt template, as TransformersLM's (default: the tokenizer's chat template)
    #: the forward and backward passes' arithmetic; the weights stay float32 either way. auto: bfloat16
    #: autocast on a CUDA device that has it, float32 elsewhere; bf16: bfloat16 autocast on any device
    #: with bfloat16 arithmetic (a CPU with AVX-512 or AMX too: faster there, benchmarks/training.py),
    #: float32 with a warning on one without; fp32: float32 everywhere
    precision: str = "auto"

    def __post_init__(self) -> None:
        # written so that NaN fails each check: every comparison with NaN is false
        problems = [
            (not self.epochs >= 1, "epochs must be at least 1"),
            (not 0 <= self.lr < math.inf, "lr must be a number, not negative"),
            (not 0 <= self.warmup < 1, "warmup is a share of the steps, in [0, 1)"),
            (not 0 <= self.weight_decay < math.inf, "weight decay must be a number, not negative"),
            (not 0 < self.max_grad_norm <= math.inf, "the gradient norm bound must be above 0 (inf: no bound)"),
            (self.lora and not (self.lora_r >= 1 and self.lora_alpha >= 1), "a LoRA rank and alpha are at least 1"),
            (self.lora and not 0 <= self.lora_dropout < 1, "the LoRA dropout is a share, in [0, 1)"),
            (self.batch_size < 1 or self.grad_accum < 1, "batch size and gradient accumulation must be at least 1"),
            (self.max_length < 2, "max length must be at least 2 tokens"),
            (not 0 <= self.val_fraction < 1, "the validation fraction must be in [0, 1)"),
            (self.patience is not None and self.patience < 1, "patience must be at least 1 epoch"),
            (self.patience is not None and self.val_fraction == 0, "early stopping (patience) needs a validation fraction > 0"),
            (self.precision not in PRECISIONS, f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}"),
            (self.schedule not in SCHEDULES, f"schedule {self.schedule!r} is not one of {', '.join(SCHEDULES)}"),
        ]
        for bad, message in problems:
            if bad:
                raise InvalidInputError(f"fine-tuning settings: {message}")
        if self.template is not None:
            check_template(self.template)


@dataclass
class SftSummary:
    base: str
    out: str
    device: str
    examples: int  # training samples
    val_examples: int
    skipped: int  # samples whose prompt alone fills max_length
    tokens: int  # training tokens per epoch (prompt + target)
    target_tokens: int  # of which carry loss
    epochs: int = 0  # epochs run, resumed ones included
    best_epoch: int = 0
    train_loss: list[float] = field(default_factory=list)  # mean target-token loss per epoch
    val_loss: list[float] = field(default_factory=list)
    epoch_seconds: list[float] = field(default_factory=list)
    seconds: float = 0.0  # this run's wall time (setup and saving included)
    # CPU seconds of this run and of the runs it resumed (setup and saving included); None where
    # a resumed checkpoint did not record them
    cpu_seconds: float | None = 0.0
    stopped: str = ""  # "patience" when early stopping ended training
    lora: bool = False
    config: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- data
def read_jsonl(path: str | Path, keys: Sequence[str] = ("prompt", "target")) -> list[dict[str, Any]]:
    """The objects of a JSONL file, each checked to hold ``keys`` (strings, or lists for
    ``paths``); blank lines skipped. Errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInputError(f"training data {str(path)!r} is not a file: give a JSONL file with {', '.join(keys)} on each line")
    rows = []
    for n, row in json_lines(path, "training data"):
        if not isinstance(row, dict) or not all(isinstance(row.get(k), list if k == "paths" else str) for k in keys):
            raise ParseError(f"each line must be an object with {', '.join(repr(k) for k in keys)}", source=str(path), line=n)
        rows.append(row)
    if not rows:
        raise InvalidInputError(f"training data {str(path)!r} holds no samples: write one object per line")
    return rows


def read_samples(path: str | Path, tasks: Sequence[str] | None = None) -> list[Sample]:
    """The samples of a JSONL file of ``{"prompt", "target"[, "task", "id"]}`` objects (what
    ``kgqa <method> export-training`` writes), only those of ``tasks`` when given."""
    samples = [Sample(row["prompt"], row["target"], str(row.get("task") or ""), row.get("id")) for row in read_jsonl(path)]
    return samples if tasks is None else [s for s in samples if s.task in tasks]


def write_samples(samples: Iterable[Sample], path: str | Path) -> dict[str, int]:
    """Write samples as the JSONL :func:`read_samples` reads (the folder is made where
    missing); returns how many of each task."""
    counts: Counter[str] = Counter()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for s in samples:
            f.write(json.dumps(s.to_json(), ensure_ascii=False) + "\n")
            counts[s.task] += 1
    return dict(counts)


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    labels: list[int]  # IGNORE at prompt positions


def encode(lm: Any, sample: Sample, max_length: int) -> Encoded | None:
    """``sample`` as the model reads it (prompt template applied, target + eos), cut to
    ``max_length``; None when the prompt alone leaves no room for a target token."""
    # what is surely longer than max_length tokens is known by its characters: such a prompt is
    # skipped and such a target cut before tokenising (a row of megabytes takes minutes and
    # gigabytes to tokenise)
    most_characters = max_length * lm.longest_token
    if len(sample.prompt) > most_characters:
        return None
    prompt = lm.template_ids(sample.prompt)
    if len(prompt) >= max_length:
        return None
    target = lm.encode(sample.target[:most_characters]) + [lm.eos_token_id]
    ids = (prompt + target)[:max_length]
    return Encoded(ids, ([IGNORE] * len(prompt) + target)[:max_length])


def length_batches(items: Sequence[Encoded], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Indexes of ``items`` in batches of similar length, the batches in a random order."""
    order = sorted(range(len(items)), key=lambda i: (len(items[i].ids), i))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(items: Sequence[Encoded], pad_id: int, device: str) -> tuple[Any, Any, Any]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` tensors."""
    import torch

    width = max(len(e.ids) for e in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE, dtype=torch.long)
    for row, e in enumerate(items):
        ids[row, : len(e.ids)] = torch.tensor(e.ids)
        mask[row, : len(e.ids)] = 1
        labels[row, : len(e.labels)] = torch.tensor(e.labels)
    return ids.to(device), mask.to(device), labels.to(device)


def target_loss(model: Any, ids: Any, mask: Any, labels: Any) -> tuple[Any, int]:
    """The summed next-token cross-entropy of ``model`` over the labelled positions, and their
    count. Only the positions that predict a label are projected to the vocabulary: for a small
    model with a large vocabulary, projecting every position is a large share of a step."""
    import torch

    predicts = labels[:, 1:] != IGNORE
    keep = torch.nn.functional.pad(predicts, (0, 1))  # position t predicts token t + 1
    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels[:, 1:][predicts], reduction="sum"
    )
    return loss, int(predicts.sum())


def autocast_for(device: str, precision: str) -> tuple[Any, bool]:
    """The autocast context factory of ``precision`` on ``device``, and whether it is bfloat16."""
    import contextlib

    import torch

    cuda = device.startswith("cuda")
    bf16 = precision == "bf16" or precision == "auto" and cuda and torch.cuda.is_bf16_supported()
    if not bf16:
        return contextlib.nullcontext, False
    return (lambda: torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16)), True


# ----------------------------------------------------------------------------- training
def _fingerprint(samples: Sequence[Sample]) -> str:
    digest = hashlib.sha256()
    for s in samples:
        digest.update(s.prompt.encode() + b"\0" + s.target.encode() + b"\1")
    return digest.hexdigest()[:16]


def _trainable_state(model: Any) -> dict[str, Any]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.named_parameters() if v.requires_grad}


def trained_seconds(out_dir: str | Path) -> float:
    """Seconds of training the checkpoint of ``out_dir`` holds: its finished epochs and the part
    of the epoch it stopped in (0 without a checkpoint)."""
    found = find_checkpoint(out_dir)
    if found is None:
        return 0.0
    state = json.loads((found / "state.json").read_text())
    return sum(state["summary"]["epoch_seconds"]) + ((state.get("part") or {}).get("seconds") or 0.0)


def trained_cpu_seconds(out_dir: str | Path) -> float | None:
    """CPU seconds the runs behind the checkpoint of ``out_dir`` used up to it (0 without a
    checkpoint; None where the checkpoint does not record them)."""
    found = find_checkpoint(out_dir)
    if found is None:
        return 0.0
    return json.loads((found / "state.json").read_text()).get("cpu_seconds")


def remove_checkpoints(out_dir: str | Path) -> None:
    """A finished run's checkpoints (its saved model is its output)."""
    import shutil

    for path in checkpoint_dirs(Path(out_dir)):
        shutil.rmtree(path, ignore_errors=True)


def _checkpoint_dir(resume: str | Path) -> Path:
    found = find_checkpoint(resume)
    if found is None:
        raise InvalidInputError(f"{str(resume)!r} holds no fine-tuning checkpoint (state.json): give the --out of an earlier run or its checkpoint/ folder")
    return found


def load_trainable(base: str | None, config: SftConfig) -> Any:
    """The base model as a :class:`TransformersLM` ready to train (float32 weights for full
    fine-tuning; LoRA adapters on every linear layer with ``config.lora``)."""
    import torch

    from engine.models.loading import local_source
    from engine.models.transformers_lm import TransformersLM

    device = pick_device(config.device)
    lm = TransformersLM.load(local_source(base), device, config.template)
    if config.lora:
        from peft import LoraConfig, get_peft_model

        from engine.models.adapters import peft_quietly

        peft_config = LoraConfig(
            r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
            target_modules="all-linear", task_type="CAUSAL_LM",
        )
        torch.manual_seed(config.seed)  # the adapters' random initialisation: the same seed, the same run
        with peft_quietly():
            lm.model = get_peft_model(lm.model, peft_config)
    elif any(p.dtype != torch.float32 for p in lm.model.parameters()):
        lm.model.to(torch.float32)  # full fine-tuning keeps float32 master weights (a de-quantised GGUF already is)
    lm.model.train()
    return lm


def _mean_loss(lm: Any, items: Sequence[Encoded], batch_size: int, autocast: Any) -> float:
    import torch

    lm.model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(items), batch_size):
            ids, mask, labels = collate(items[start:start + batch_size], lm._pad, lm.device)
            with autocast():
                loss, n = target_loss(lm.model, ids, mask, labels)
            total, count = total + float(loss), count + n
    lm.model.train()
    return total / max(count, 1)


def train(
    samples: Sequence[Sample],
    base: str | None,
    out_dir: str | Path,
    config: SftConfig = SftConfig(),
    *,
    resume: str | Path | None = None,
    progress: bool = True,
    checkpoint_seconds: float | None = CHECKPOINT_SECONDS,
) -> SftSummary:
    """Fine-tune ``base`` (a ``load_lm`` name; None = the offline default) on ``samples`` and
    save the best epoch's model to ``out_dir``. ``resume`` (an earlier ``out_dir`` or its
    checkpoint) goes on from where its last checkpoint stopped, part way through an epoch or
    after one, up to ``config.epochs``; the samples, base and settings must be the ones it was
    started with (the epoch count may grow). ``checkpoint_seconds``: training time between
    checkpoints inside an epoch (None: at epoch ends only)."""
    import torch
    from tqdm import tqdm
    from transformers import get_scheduler

    started, cpu_started = time.perf_counter(), cpu_seconds()
    if not samples:
        raise InvalidInputError("no training samples")
    out = Path(out_dir)
    state: dict[str, Any] | None = None
    if resume is not None:
        checkpoint = _checkpoint_dir(resume)
        state = json.loads((checkpoint / "state.json").read_text())
        base = state["base"] if base is None else base
        defaults = asdict(SftConfig())  # a checkpoint written before a setting existed had its default
        mismatch = {k for k, v in asdict(config).items()
                    if k not in ("epochs", "device") and state["config"].get(k, defaults[k]) != v}
        if state["base"] != base or state["fingerprint"] != _fingerprint(samples) or mismatch:
            raise InvalidInputError(
                f"cannot resume from {checkpoint}: it was trained on other samples, base or settings"
                + (f" ({', '.join(sorted(mismatch))} differ)" if mismatch else "")
            )
    check_out_dir(out, base)
    lm = load_trainable(base, config)
    if lm.context_tokens is not None and config.max_length > lm.context_tokens:
        raise InvalidInputError(f"max length {config.max_length} is longer than the {lm.context_tokens:,} tokens "
                                f"{lm.name} reads: give --max-length {lm.context_tokens} or less")
    device = lm.device
    precision = config.precision  # bf16 where torch would convert it in software, many times slower: float32
    if precision == "bf16" and not bf16_or_warn(
        device, "precision bf16: ", ", so bf16 autocast would run many times slower than float32 here: training in float32"
    ):
        precision = "fp32"
    autocast, bf16 = autocast_for(device, precision)

    # encode, hold out a seeded validation share
    encoded = [encode(lm, s, config.max_length) for s in samples]
    kept = [e for e in encoded if e is not None]
    if not kept:
        raise InvalidInputError(f"every sample's prompt fills max_length {config.max_length}: raise --max-length")
    order = list(range(len(kept)))
    random.Random(config.seed).shuffle(order)
    n_val = round(len(kept) * config.val_fraction)
    val = [kept[i] for i in sorted(order[:n_val])]
    train_items = [kept[i] for i in sorted(order[n_val:])]
    if not train_items:
        raise InvalidInputError("the validation fraction leaves no training samples")

    summary = SftSummary(
        base=str(base or DEFAULT_LM), out=str(out), device=device + (" (bf16)" if bf16 else ""),
        examples=len(train_items), val_examples=len(val), skipped=len(encoded) - len(kept),
        tokens=sum(len(e.ids) for e in train_items),
        target_tokens=sum(sum(label != IGNORE for label in e.labels) for e in train_items),
        lora=config.lora, config=asdict(config),
    )
    steps_per_epoch = math.ceil(math.ceil(len(train_items) / config.batch_size) / config.grad_accum)
    total_steps = steps_per_epoch * config.epochs
    parameters = [p for p in lm.model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = get_scheduler(
        config.schedule, optimiser, num_warmup_steps=round(config.warmup * total_steps), num_training_steps=total_steps
    )
    best_loss, stale, best_state = math.inf, 0, None
    first_epoch, part, cpu_before = 1, None, 0.0
    if state is not None:
        lm.model.load_state_dict(torch.load(checkpoint / "trainable.pt", map_location=device), strict=False)
        optimiser.load_state_dict(torch.load(checkpoint / "optimizer.pt", map_location=device))
        scheduler.load_state_dict(torch.load(checkpoint / "scheduler.pt"))
        for key in ("epochs", "best_epoch", "train_loss", "val_loss", "epoch_seconds"):
            setattr(summary, key, state["summary"][key])
        best_loss, stale, first_epoch = state["best_loss"], state["stale"], state["summary"]["epochs"] + 1
        part = state.get("part")  # an epoch stopped part way: its batches done, loss so far, time
        cpu_before = state.get("cpu_seconds")  # None from a checkpoint that did not record it
        if (checkpoint / "best.pt").is_file():
            best_state = torch.load(checkpoint / "best.pt", map_location="cpu")

    def cpu_spent() -> float | None:  # unrounded: a checkpoint after a few short batches must not hold 0.0
        return None if cpu_before is None else cpu_before + cpu_seconds() - cpu_started

    def save(part: dict[str, Any] | None = None) -> None:
        _save_checkpoint(out, lm, optimiser, scheduler, best_state, {
            "base": summary.base if base is not None else None, "fingerprint": _fingerprint(samples),
            "config": asdict(config), "best_loss": best_loss, "stale": stale, "part": part, "cpu_seconds": cpu_spent(),
            "summary": {k: getattr(summary, k) for k in ("epochs", "best_epoch", "train_loss", "val_loss", "epoch_seconds")},
        })

    for epoch in range(first_epoch, config.epochs + 1):
        if config.patience is not None and stale >= config.patience:
            summary.stopped = "patience"
            break
        batches = length_batches(train_items, config.batch_size, random.Random(config.seed + epoch))
        torch.manual_seed(config.seed + epoch)  # dropout, so a resumed epoch matches an uninterrupted one
        done, total, count, epoch_started = 0, 0.0, 0, time.perf_counter()
        if part is not None and part["epoch"] == epoch:
            done, total, count, epoch_started = part["batches"], part["loss_sum"], part["tokens"], epoch_started - part["seconds"]
            rng = torch.load(checkpoint / "rng.pt")
            torch.set_rng_state(rng["cpu"])
            if rng["cuda"] is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(rng["cuda"])
        part, saved = None, time.perf_counter()
        bar = tqdm(batches[done:], desc=f"epoch {epoch}/{config.epochs}", unit="batch", file=sys.stderr,
                   disable=not progress, initial=done, total=len(batches))
        optimiser.zero_grad()
        for i, batch in enumerate(bar, done + 1):
            ids, mask, labels = collate([train_items[j] for j in batch], lm._pad, device)
            with autocast():
                loss, n = target_loss(lm.model, ids, mask, labels)
            (loss / max(n, 1) / config.grad_accum).backward()
            total, count = total + float(loss.detach()), count + n
            if i % config.grad_accum == 0 or i == len(batches):
                torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm)
                optimiser.step()
                scheduler.step()
                optimiser.zero_grad()
                if checkpoint_seconds is not None and i < len(batches) and time.perf_counter() - saved >= checkpoint_seconds:
                    save({"epoch": epoch, "batches": i, "loss_sum": total, "tokens": count,
                          "seconds": time.perf_counter() - epoch_started})
                    saved = time.perf_counter()
            bar.set_postfix(loss=f"{total / max(count, 1):.4f}")
        bar.close()
        summary.epochs = epoch
        summary.train_loss.append(round(total / max(count, 1), 5))
        summary.epoch_seconds.append(round(time.perf_counter() - epoch_started, 1))
        score = summary.train_loss[-1]
        if val:
            summary.val_loss.append(round(_mean_loss(lm, val, config.batch_size, autocast), 5))
            score = summary.val_loss[-1]
        if score < best_loss:
            best_loss, stale, summary.best_epoch = score, 0, epoch
            best_state = _trainable_state(lm.model)
        else:
            stale += 1
        print(
            f"epoch {epoch}: train loss {summary.train_loss[-1]:.4f}"
            + (f"  val loss {summary.val_loss[-1]:.4f}" if val else "")
            + f"  {summary.epoch_seconds[-1]:.0f} s",
            file=sys.stderr,
        )
        save()

    if best_state is not None:
        lm.model.load_state_dict({k: v.to(device) for k, v in best_state.items()}, strict=False)
    (out / SUMMARY_FILE).unlink(missing_ok=True)  # an earlier run's: it no longer says the folder's model is whole
    save_model(lm, out, base)
    spent = cpu_spent()
    summary.seconds, summary.cpu_seconds = round(time.perf_counter() - started, 1), None if spent is None else round(spent, 1)
    with written_whole(out / SUMMARY_FILE) as partial:
        partial.write_text(json.dumps(asdict(summary), indent=2))
    return summary


def check_out_dir(out: Path, base: str | None) -> None:
    """Refuse, before any training, an ``out`` the trained model cannot go to without destroying
    something (:func:`engine.models.run_folder.check_model_folder`): one holding anything but
    an earlier fine-tuning's output, a checkpoint or a summary, is refused."""
    check_model_folder(out, base, run="fine-tuning", ours=lambda folder: (folder / SUMMARY_FILE).is_file()
                       or find_checkpoint(folder) is not None or any(p.exists() for p in checkpoint_dirs(folder)))


def _save_checkpoint(out: Path, lm: Any, optimiser: Any, scheduler: Any, best: dict | None, state: dict) -> None:
    """``out/checkpoint`` replaced whole: written beside it, then swapped in by two renames, so
    an interruption at any moment leaves a whole checkpoint (:func:`find_checkpoint`)."""
    import shutil

    import torch

    path, partial, old = checkpoint_dirs(out)
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    torch.save(_trainable_state(lm.model), partial / "trainable.pt")
    torch.save(optimiser.state_dict(), partial / "optimizer.pt")
    torch.save(scheduler.state_dict(), partial / "scheduler.pt")
    torch.save({"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
               partial / "rng.pt")
    if best is not None:
        torch.save(best, partial / "best.pt")
    (partial / "state.json").write_text(json.dumps(state, indent=2))  # last: its presence marks a whole checkpoint
    if (path / "state.json").is_file():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    else:
        shutil.rmtree(path, ignore_errors=True)
    partial.rename(path)
    shutil.rmtree(old, ignore_errors=True)


def save_model(lm: Any, out_dir: str | Path, base: str | None = None) -> None:
    """The model (LoRA merged into its weights) and tokenizer, as ``load_lm(out_dir)`` reads them;
    a LoRA run also keeps its unmerged adapter in ``out_dir/adapter``, a ``--model`` of its own
    (:mod:`engine.models.adapters`; ``base``: the base model's ``--model`` name). Saved whole
    (:func:`engine.outputs.folder_saved_whole`): a save stopped part way leaves the files that
    were there, or a folder :func:`load_lm` refuses as unfinished."""
    with folder_saved_whole(out_dir) as staging:
        _save_model_files(lm, staging, base)


def _save_model_files(lm: Any, out: Path, base: str | None) -> None:
    """What :func:`save_model` saves, into ``out``."""
    model = lm.model
    if hasattr(model, "merge_and_unload"):  # a peft model
        # the adapter alone too (a few MB): what can ship and load onto the base model, named by
        # its --model name (a local base by its absolute path) rather than the file peft loaded
        for adapter in model.peft_config.values():
            adapter.base_model_name_or_path = str(Path(base).resolve()) if base and Path(base).exists() else base or DEFAULT_LM
            if isinstance(adapter.target_modules, (set, frozenset)):  # peft writes a set in hash order
                adapter.target_modules = sorted(adapter.target_modules)
        # LoRA here targets linear layers only and never resizes the vocabulary, so no embedding
        # layer is saved; said outright, peft skips looking the base name up (a warning offline)
        model.save_pretrained(str(out / ADAPTER_DIR), save_embedding_layers=False)
        (out / ADAPTER_DIR / "README.md").unlink(missing_ok=True)  # peft's blank model card
        (out / ADAPTER_DIR / TEMPLATE_FILE).write_text(lm.template + "\n", encoding="utf-8")
        model = model.merge_and_unload()
        lm.model = model
    model.eval()
    model.save_pretrained(str(out))
    lm.tokenizer.save_pretrained(str(out))
    # the template it was trained with, so that load_lm(out_dir) prompts it the same way
    (out / TEMPLATE_FILE).write_text(lm.template + "\n", encoding="utf-8")
